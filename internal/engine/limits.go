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
//   - create, fork, resume and exec billed to the key are refused with
//     errdefs.ErrQuota, the message saying the limit, the spend and when
//     it resets (a create, fork or resume counts the sandbox it would
//     start too);
//   - after every usage sample (and at once when a limit changes), its
//     running sandboxes are suspended, not killed: memory and disk go to
//     the blob store as with POST .../suspend. Each is recorded
//     (store.LimitSuspension) and resumed when the key is under its limit
//     again, if PATCH /v1/keys/{id} asked so with resume_suspended.
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

// keySpend sums keyID's spending today, as of now.
func (e *Engine) keySpend(ctx context.Context, keyID string, now time.Time) (KeySpend, error) {
	day := now.UTC().Truncate(24 * time.Hour)
	ks := KeySpend{Reset: day.Add(24 * time.Hour)}
	rows, err := e.st.ListUsage(ctx, day, now.Add(time.Hour))
	if err != nil {
		return ks, err
	}
	p := e.cfg.Prices
	for _, r := range rows {
		if r.KeyID == keyID && !r.Hour.Before(day) {
			ks.Spent += p.Cost(r.CPUSeconds, r.MemoryGiBSeconds, r.StoredByteSeconds)
		}
	}
	ahead := LimitLookahead.Seconds()
	e.meter.mu.Lock()
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
	e.meter.mu.Unlock()
	return ks, nil
}

// checkSpend refuses, with errdefs.ErrQuota, work billed to keyID ("" the
// operator: never) when its daily limit would be passed; cpus and
// memoryMB are the shape of a sandbox the work would start (0 for none).
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
		"API key %s (%s) is at its daily spending limit of $%.4f: spent $%.4f today (UTC), and the next minute would add $%.4f; the limit resets at %s (raise it with PATCH /v1/keys/%s)",
		k.Name, k.ID, *k.DailyLimitUSD, ks.Spent, ks.Next, ks.Reset.Format(time.RFC3339), k.ID)
}

// over reports whether key k is over its limit now, with its spend.
func (e *Engine) over(ctx context.Context, k *store.Key, now time.Time) (bool, KeySpend, error) {
	ks, err := e.keySpend(ctx, k.ID, now)
	if err != nil || k.DailyLimitUSD == nil {
		return false, ks, err
	}
	return ks.Spent+ks.Next > *k.DailyLimitUSD, ks, nil
}

// enforceLimits suspends the running sandboxes of every key over its
// limit, and resumes those a limit suspended whose key is under it again
// and asked for it. Errors of one sandbox are logged; the rest go on.
func (e *Engine) enforceLimits(ctx context.Context) error {
	keys, err := e.st.ListKeys(ctx, false)
	if err != nil {
		return err
	}
	susp, err := e.st.ListLimitSuspensions(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	overKeys := map[string]bool{}
	live := map[string]*store.Key{}
	for _, k := range keys {
		live[k.ID] = k
		isOver, ks, err := e.over(ctx, k, now)
		if err != nil {
			return err
		}
		if !isOver {
			continue
		}
		overKeys[k.ID] = true
		sbs, err := e.st.ListSandboxes(ctx, store.SandboxFilter{Owners: []string{k.ID}})
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			if sb.State == api.StateRunning || sb.State == api.StatePaused {
				e.suspendForLimit(ctx, sb, k, ks)
			}
		}
	}
	for _, ls := range susp {
		sb, err := e.st.GetSandbox(ctx, ls.SandboxID)
		if err != nil || sb.State != api.StateSuspended {
			// Gone, or resumed by hand: nothing left to do for it.
			_ = e.st.DeleteLimitSuspension(ctx, ls.SandboxID)
			continue
		}
		if !ls.Resume || overKeys[ls.KeyID] || live[ls.KeyID] == nil {
			continue
		}
		if _, err := e.Resume(ctx, sb.ID, nil); err != nil {
			e.log.Warn("spending limit: resume", "sandbox", sb.Name, "key", ls.KeyID, "err", err)
			continue
		}
		_ = e.st.DeleteLimitSuspension(ctx, ls.SandboxID)
		e.log.Info("spending limit: resumed", "sandbox", sb.Name, "key", ls.KeyID)
	}
	return nil
}

// suspendForLimit suspends sb, whose key k is over its limit, and records
// why.
func (e *Engine) suspendForLimit(ctx context.Context, sb *store.Sandbox, k *store.Key, ks KeySpend) {
	resume := false
	if all, err := e.st.ListLimitSuspensions(ctx); err == nil {
		for _, ls := range all {
			if ls.KeyID == k.ID && ls.Resume {
				resume = true // the key asked already: keep asking for this one too
			}
		}
	}
	if err := e.st.PutLimitSuspension(ctx, &store.LimitSuspension{SandboxID: sb.ID, KeyID: k.ID, Resume: resume, Time: time.Now()}); err != nil {
		e.log.Error("spending limit: record suspension", "sandbox", sb.Name, "err", err)
		return
	}
	if _, err := e.Suspend(ctx, sb.ID, api.SuspendRequest{}, nil); err != nil {
		_ = e.st.DeleteLimitSuspension(ctx, sb.ID)
		e.log.Error("spending limit: suspend", "sandbox", sb.Name, "key", k.ID, "err", err)
		return
	}
	reason := fmt.Sprintf("spending_limit: API key %s passed its daily limit of $%.4f (spent $%.4f); it resets at %s",
		k.Name, *k.DailyLimitUSD, ks.Spent, ks.Reset.Format(time.RFC3339))
	if cur, unlock, err := e.lockSandbox(ctx, sb.ID, "suspend", lockOrWait); err == nil {
		if cur.State == api.StateSuspended {
			cur.StateReason = reason
			_ = e.st.UpdateSandbox(ctx, cur)
		}
		unlock()
	}
	e.log.Warn("spending limit: suspended", "sandbox", sb.Name, "key", k.ID, "limit_usd", *k.DailyLimitUSD, "spent_usd", ks.Spent)
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
