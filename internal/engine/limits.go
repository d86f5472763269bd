package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// Daily spending limits of API keys (docs/api.md, "Daily spending
// limits"). A key is over its limit when what it spent today (UTC: the
// usage recorded since midnight, plus what its running sandboxes used
// since their last reading) plus what its running sandboxes would add in
// the next LimitLookahead would pass DailyLimitUSD. Then:
//
//   - create, fork, resume, and exec, files, process list and deliveries
//     on its sandboxes (ensureRunning) billed to the key are refused with
//     errdefs.ErrQuota, the message saying the limit, the spend and when
//     it resets (a create, fork or resume counts the sandbox it would
//     start too);
//   - after every usage sample (and at once when a limit changes), its
//     running sandboxes are suspended, not killed: memory and disk go to
//     the blob store as with POST .../suspend. Each is recorded
//     (store.LimitSuspension) and resumed when the key is under its limit
//     again, if PUT /v1/keys/{id}/limit asked so with resume_suspended.
//
// The key billed is the sandbox's owner (a create: the caller's key).

// LimitLookahead is how far ahead a spending limit looks at running
// sandboxes: CPU at their cpus limit and memory at their memory_mb.
const LimitLookahead = time.Minute

// KeySpend is a key's spending today (UTC), in US dollars.
type KeySpend struct {
	// Spent is the cost of its usage since 00:00 UTC: recorded, plus an
	// estimate since its running sandboxes' last reading (CPU at their
	// limit).
	Spent float64
	// Next is what its running sandboxes would add in LimitLookahead.
	Next float64
	// Reset is when the day turns and Spent starts again at zero.
	Reset time.Time
}

// recordedSpend is the cost of the usage recorded since 00:00 UTC of
// now's day, in US dollars, per key id ("" the operator's): one summing
// query (store.UsageByKey), however many keys and rows there are, plus
// the meter's rows that a failed write left pending.
func (e *Engine) recordedSpend(ctx context.Context, now time.Time) (map[string]float64, error) {
	day := now.UTC().Truncate(24 * time.Hour)
	totals, err := e.meter.dayTotals(ctx, day)
	if err != nil {
		return nil, err
	}
	p := e.cfg.Prices
	spent := make(map[string]float64, len(totals))
	for key, t := range totals {
		spent[key] += p.Cost(t.CPUSeconds, t.MemoryGiBSeconds, t.StoredByteSeconds)
	}
	e.meter.mu.Lock()
	for _, r := range e.meter.pendingRows {
		if !r.Hour.Before(day) {
			spent[r.KeyID] += p.Cost(r.CPUSeconds, r.MemoryGiBSeconds, r.StoredByteSeconds)
		}
	}
	e.meter.mu.Unlock()
	return spent, nil
}

// dayTotals is the store's per-key usage totals of day (store.UsageByKey),
// read again only when the meter has written usage since the last read
// (or the day changed). The map is shared: callers only read it.
func (m *meter) dayTotals(ctx context.Context, day time.Time) (map[string]store.UsageTotals, error) {
	m.mu.Lock()
	at := m.written
	if m.today != nil && m.todayAt == at && m.todayDay.Equal(day) {
		t := m.today
		m.mu.Unlock()
		return t, nil
	}
	m.mu.Unlock()
	totals, err := m.e.st.UsageByKey(ctx, day)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.written == at { // no write since the read began: the totals are current
		m.today, m.todayAt, m.todayDay = totals, at, day
	}
	m.mu.Unlock()
	return totals, nil
}

// spendOf is keyID's spending today as of now: recorded, the cost of its
// usage recorded today (see recordedSpend), plus the meter's estimate of
// what its running sandboxes used since their last reading and would use
// in the next LimitLookahead.
func (e *Engine) spendOf(keyID string, recorded float64, now time.Time) KeySpend {
	day := now.UTC().Truncate(24 * time.Hour)
	ks := KeySpend{Spent: recorded, Reset: day.Add(24 * time.Hour)}
	p := e.cfg.Prices
	ahead := LimitLookahead.Seconds()
	e.meter.mu.Lock()
	defer e.meter.mu.Unlock()
	for _, st := range e.meter.m {
		if !st.running || st.pooled || st.keyID != keyID {
			continue
		}
		since := now.Sub(st.time)
		if st.time.Before(day) {
			since = now.Sub(day)
		}
		if since > 0 {
			ks.Spent += p.Cost(st.cpus*since.Seconds(), float64(st.memoryMB)/1024*since.Seconds(), 0)
		}
		ks.Next += p.Cost(st.cpus*ahead, float64(st.memoryMB)/1024*ahead, 0)
	}
	return ks
}

// keySpend sums keyID's spending today, as of now.
func (e *Engine) keySpend(ctx context.Context, keyID string, now time.Time) (KeySpend, error) {
	spent, err := e.recordedSpend(ctx, now)
	if err != nil {
		return KeySpend{}, err
	}
	return e.spendOf(keyID, spent[keyID], now), nil
}

// checkSpend refuses, with errdefs.ErrQuota, work billed to keyID ("" the
// operator: never) when its daily limit would be passed; cpus and
// memoryMB are the shape of a sandbox the work would start (0 for none).
// A key without a limit costs one key read; one with a limit, one summing
// query of today's usage too (recordedSpend).
func (e *Engine) checkSpend(ctx context.Context, keyID string, cpus float64, memoryMB int) error {
	if keyID == "" {
		return nil
	}
	k, err := e.st.GetKey(ctx, keyID)
	if errdefs.IsNotFound(err) || (err == nil && k.DailyLimitUSD == nil) {
		return nil
	}
	if err != nil {
		return err
	}
	ks, err := e.keySpend(ctx, keyID, time.Now())
	if err != nil {
		return err
	}
	ahead := LimitLookahead.Seconds()
	ks.Next += e.cfg.Prices.Cost(cpus*ahead, float64(memoryMB)/1024*ahead, 0)
	if ks.Spent+ks.Next > *k.DailyLimitUSD {
		return limitError(k, ks)
	}
	return nil
}

// limitError is the ErrQuota of key k over its limit.
func limitError(k *store.Key, ks KeySpend) error {
	return errdefs.New(errdefs.ErrQuota,
		"API key %s (%s) is at its daily spending limit of $%.4f: spent $%.4f today (UTC), and the next minute would add $%.4f; the limit resets at %s (an admin raises it with PUT /v1/keys/%s/limit, or `sbx limit %s USD`)",
		k.Name, k.ID, *k.DailyLimitUSD, ks.Spent, ks.Next, ks.Reset.Format(time.RFC3339), k.ID, k.Name)
}

// enforceLimits suspends the running sandboxes of every key over its
// limit, and resumes those a limit suspended whose key is under it again
// and asked for it. It never waits for a sandbox's lock: a sandbox another
// operation holds is skipped until the next pass, as the idle suspend does.
// A sandbox with a volume cannot be suspended: it runs on (logged once; its
// key's work is refused by checkSpend). Errors of one sandbox are logged;
// the rest go on. Keys without a limit cost nothing; today's usage is
// summed once per pass.
func (e *Engine) enforceLimits(ctx context.Context) error {
	e.meter.limitsMu.Lock()
	defer e.meter.limitsMu.Unlock()
	keys, err := e.st.ListKeys(ctx, false)
	if err != nil {
		return err
	}
	susp, err := e.st.ListLimitSuspensions(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	live := map[string]*store.Key{}
	var limited []*store.Key
	for _, k := range keys {
		live[k.ID] = k
		if k.DailyLimitUSD != nil {
			limited = append(limited, k)
		}
	}
	resumeAsked := map[string]bool{}
	for _, ls := range susp {
		if ls.Resume {
			resumeAsked[ls.KeyID] = true
		}
	}
	overKeys := map[string]bool{}
	runsOn := map[string]bool{} // sandboxes over a limit that cannot be suspended
	if len(limited) > 0 {
		spent, err := e.recordedSpend(ctx, now)
		if err != nil {
			return err
		}
		for _, k := range limited {
			ks := e.spendOf(k.ID, spent[k.ID], now)
			if ks.Spent+ks.Next <= *k.DailyLimitUSD {
				continue
			}
			overKeys[k.ID] = true
			sbs, err := e.localSandboxes(ctx, store.SandboxFilter{Owners: []string{k.ID}})
			if err != nil {
				return err
			}
			for _, sb := range sbs {
				switch {
				case sb.State != api.StateRunning || sb.Pooled:
				case len(sb.Volumes) > 0:
					runsOn[sb.ID] = true
					if !e.meter.limitWarned[sb.ID] {
						e.log.Warn("spending limit: a sandbox with a volume cannot be suspended; it runs on, and its key's work is refused",
							"sandbox", sb.Name, "key", k.ID)
					}
				default:
					e.suspendForLimit(ctx, sb, k, ks, resumeAsked[k.ID])
				}
			}
		}
	}
	e.meter.limitWarned = runsOn
	for _, ls := range susp {
		if live[ls.KeyID] == nil {
			// The key was revoked: nobody is left to resume for.
			_ = e.st.DeleteLimitSuspension(ctx, ls.SandboxID)
			continue
		}
		sb, err := e.st.GetSandbox(ctx, ls.SandboxID)
		if err != nil || sb.State != api.StateSuspended {
			// Gone, or resumed by hand: nothing left to do for it.
			_ = e.st.DeleteLimitSuspension(ctx, ls.SandboxID)
			continue
		}
		if !ls.Resume || overKeys[ls.KeyID] {
			continue
		}
		if e.cfg.Node != "" && sb.Node != e.cfg.Node {
			// Its node, which suspended it, resumes it.
			continue
		}
		e.resumeForLimit(ctx, sb, ls.KeyID)
	}
	return nil
}

// suspendForLimit suspends sb, whose key k is over its limit (spend ks),
// with its state_reason saying so, and records it (resume: to be resumed
// once the key is under its limit). A sandbox whose lock another
// operation holds, or that no longer runs, is left for the next pass.
func (e *Engine) suspendForLimit(ctx context.Context, sb *store.Sandbox, k *store.Key, ks KeySpend, resume bool) {
	unlock, err := e.lockID(ctx, sb.ID, sb.Name, "suspend", lockOrConflict)
	if err != nil {
		e.log.Debug("spending limit: sandbox busy, suspended at the next pass", "sandbox", sb.Name, "err", err)
		return
	}
	defer unlock()
	cur, err := e.getLocked(ctx, sb.ID)
	if err != nil || cur.State != api.StateRunning || cur.Pooled || len(cur.Volumes) > 0 {
		return
	}
	if err := e.st.PutLimitSuspension(ctx, &store.LimitSuspension{SandboxID: cur.ID, KeyID: k.ID, Resume: resume, Time: time.Now()}); err != nil {
		e.log.Error("spending limit: record suspension", "sandbox", cur.Name, "err", err)
		return
	}
	reason := fmt.Sprintf("spending_limit: API key %s passed its daily limit of $%.4f (spent $%.4f); it resets at %s",
		k.Name, *k.DailyLimitUSD, ks.Spent, ks.Reset.Format(time.RFC3339))
	if _, err := e.suspendLocked(context.WithoutCancel(ctx), cur, cur.WakeOn, reason, nil); err != nil {
		_ = e.st.DeleteLimitSuspension(ctx, cur.ID)
		e.log.Error("spending limit: suspend", "sandbox", cur.Name, "key", k.ID, "err", err)
		return
	}
	e.log.Warn("spending limit: suspended", "sandbox", cur.Name, "key", k.ID, "limit_usd", *k.DailyLimitUSD, "spent_usd", ks.Spent)
}

// resumeForLimit resumes sb, which keyID's limit suspended, now that the
// key is under it; a sandbox another operation holds is left for the next
// pass. The resume checks the spend again (resumeLocked).
func (e *Engine) resumeForLimit(ctx context.Context, sb *store.Sandbox, keyID string) {
	unlock, err := e.lockID(ctx, sb.ID, sb.Name, "resume", lockOrConflict)
	if err != nil {
		e.log.Debug("spending limit: sandbox busy, resumed at the next pass", "sandbox", sb.Name, "err", err)
		return
	}
	defer unlock()
	cur, err := e.getLocked(ctx, sb.ID)
	if err != nil || cur.State != api.StateSuspended {
		_ = e.st.DeleteLimitSuspension(ctx, sb.ID)
		return
	}
	if err := e.resumeLocked(context.WithoutCancel(ctx), cur, nil); err != nil {
		e.log.Warn("spending limit: resume", "sandbox", cur.Name, "key", keyID, "err", err)
		return
	}
	_ = e.st.DeleteLimitSuspension(ctx, cur.ID)
	e.log.Info("spending limit: resumed", "sandbox", cur.Name, "key", keyID)
}

// SetKeyDailyLimit replaces the daily spending limit of key idOrName (nil:
// none); with resumeSuspended, the sandboxes its limit suspended are
// resumed once it is under its limit (at once if it is). Limits are
// enforced again at once. Only an admin may.
//
// Errors: ErrForbidden (a tenant key), ErrInvalidArgument
// (daily_limit_usd out of range), ErrKeyNotFound.
func (e *Engine) SetKeyDailyLimit(ctx context.Context, idOrName string, limit *float64, resumeSuspended bool) (*store.Key, error) {
	if err := CallerOf(ctx).RequireAdmin("changing API keys"); err != nil {
		return nil, err
	}
	if err := validateDailyLimit(limit); err != nil {
		return nil, err
	}
	k, err := e.st.GetKey(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if err := e.st.SetKeyDailyLimit(ctx, k.ID, limit); err != nil {
		return nil, err
	}
	if resumeSuspended {
		if err := e.st.SetLimitResume(ctx, k.ID, true); err != nil {
			return nil, err
		}
	}
	k.DailyLimitUSD = limit
	e.log.Info("API key daily limit set", "key", k.ID, "limit_usd", limit, "resume_suspended", resumeSuspended)
	e.meter.kick()
	return k, nil
}
