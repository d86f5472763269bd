package engine

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/store"
)

// DefaultUsageInterval is how often the meter samples running sandboxes'
// CPU counters and the stored bytes (Config.UsageInterval).
const DefaultUsageInterval = 30 * time.Second

// The meter: usage metering of sandboxes.
//
//   - CPU used is the container's CPU counter (runtime.Stats: the
//     sandbox's cgroup, or runsc's stats), read every UsageInterval and
//     also just before every container is deleted (stop, suspend, delete,
//     a failed start), so a short-lived sandbox is not missed.
//   - Memory is the sandbox's memory_mb while its container exists (running
//     or paused), from the container's start to its delete.
//   - Stored bytes are the bytes each sandbox's checkpoints added to the
//     blob store plus its billable snapshots' (store.ListStoredBytes: a
//     fork's own snapshot is never counted; a suspended sandbox's image is
//     its storage), accrued every UsageInterval.
//
// Accruals go into durable rows per sandbox and UTC hour
// (store.AddUsage), with the meter's last reading of each sandbox in the
// same transaction, so a restart of sbxd accrues from that reading on: a
// sandbox that ran on while sbxd was down is billed for that time; one
// whose container ended meanwhile is billed up to one interval past its
// last reading. Warm sandboxes (the pool) are not billed until claimed.
type meter struct {
	e        *Engine
	rt       runtime.Runtime // the runtime under the metering wrapper
	interval time.Duration
	// now is time.Now; tests set a clock of their own.
	now func() time.Time

	// kicks asks the loop for a sample and a pass of the spending limits
	// now (a limit changed).
	kicks chan struct{}
	// limitsDue asks limitsLoop for a pass of the spending limits (after
	// a sample): the limits' suspends and resumes never delay a sample.
	limitsDue chan struct{}
	// limitsMu makes passes of the limits (enforceLimits) one at a time;
	// limitWarned, which it guards, holds the sandboxes over a limit that
	// could not be suspended (a volume) and were logged already.
	limitsMu    sync.Mutex
	limitWarned map[string]bool

	// wmu is held from a change of the readings to the end of its store
	// write (commit), so that writes reach the store in the order the
	// readings changed. Taken before mu.
	wmu sync.Mutex

	mu sync.Mutex
	// by sandbox id; storageTime is the last accrual of stored bytes.
	m           map[string]*meterState
	storageTime time.Time
	// pending is what failed store writes did not record yet, carried
	// by the next write (commit): rows merged by sandbox and hour, the
	// latest meter of each sandbox, the meters to drop. Changed only by
	// the holder of wmu; read under mu (recordedSpend counts its rows).
	pendingRows   map[usageKey]*store.UsageRow
	pendingMeters map[string]*store.UsageMeter
	pendingDrop   map[string]bool

	// written counts the meter's successful store writes; today holds
	// the store's per-key totals of one UTC day (store.UsageByKey) as of
	// write number todayAt, so that a limit check on an exec reads the
	// store only after usage was written (every interval), not per call.
	written  uint64
	todayAt  uint64
	todayDay time.Time
	today    map[string]store.UsageTotals
}

// meterState is the last reading of one sandbox's container, and what the
// meter knows of its record (for a delete that removed it already).
type meterState struct {
	running bool
	cpu     uint64
	time    time.Time
	// gen counts the container's starts and stops: a sample read before
	// one of them does not accrue.
	gen uint64

	name, keyID string
	cpus        float64
	memoryMB    int
	pooled      bool
}

func newMeter(e *Engine, rt runtime.Runtime, interval time.Duration) *meter {
	return &meter{e: e, rt: rt, interval: interval, now: time.Now, kicks: make(chan struct{}, 1), limitsDue: make(chan struct{}, 1),
		m: map[string]*meterState{}, pendingRows: map[usageKey]*store.UsageRow{}, pendingMeters: map[string]*store.UsageMeter{},
		pendingDrop: map[string]bool{}}
}

// load reads the meters that an earlier sbxd left.
func (m *meter) load(ctx context.Context) error {
	ms, err := m.e.st.UsageMeters(ctx)
	if err != nil {
		return fmt.Errorf("usage meters: %w", err)
	}
	// Another node's sandboxes are metered by it.
	local, err := m.e.localSandboxes(ctx, store.SandboxFilter{All: true})
	if err != nil {
		return fmt.Errorf("usage meters: %w", err)
	}
	mine := make(map[string]bool, len(local))
	for _, sb := range local {
		mine[sb.ID] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, um := range ms {
		if um.SandboxID == "" {
			m.storageTime = um.Time
			continue
		}
		if m.e.cfg.Node != "" && !mine[um.SandboxID] {
			continue
		}
		m.m[um.SandboxID] = &meterState{running: um.Running, cpu: um.CPUNanos, time: um.Time}
	}
	return nil
}

// know copies what the meter needs of a sandbox's record into st.
func (st *meterState) know(sb *store.Sandbox) {
	st.name, st.keyID, st.cpus, st.memoryMB, st.pooled = sb.Name, sb.Owner, sb.CPUs, sb.MemoryMB, sb.Pooled
}

// started records that container id began (its CPU counter at 0).
func (m *meter) started(ctx context.Context, id string) {
	sb, _ := m.e.st.GetSandbox(ctx, id)
	m.wmu.Lock()
	defer m.wmu.Unlock()
	now := m.now()
	m.mu.Lock()
	st := m.state(id)
	st.running, st.cpu, st.time = true, 0, now
	st.gen++
	if sb != nil {
		st.know(sb)
	}
	um := &store.UsageMeter{SandboxID: id, Running: true, Time: now}
	m.mu.Unlock()
	m.persist(ctx, nil, []*store.UsageMeter{um})
}

// stopping takes container id's last reading before it is deleted, and
// accrues what it used since the previous one.
func (m *meter) stopping(ctx context.Context, id string) {
	m.mu.Lock()
	st, ok := m.m[id]
	running := ok && st.running
	m.mu.Unlock()
	if !running {
		return
	}
	stats, serr := m.rt.Stats(ctx, id)
	sb, _ := m.e.st.GetSandbox(ctx, id)
	m.wmu.Lock()
	defer m.wmu.Unlock()
	now := m.now()
	rows := map[usageKey]*store.UsageRow{}
	m.mu.Lock()
	if !st.running {
		m.mu.Unlock()
		return
	}
	if sb != nil {
		st.know(sb)
	}
	if serr != nil {
		m.e.log.Debug("usage: last reading of a container that is gone", "sandbox", id, "err", serr)
		m.accrueGone(rows, id, st, now)
	} else {
		m.accrue(rows, id, st, stats.CPUNanos, now)
	}
	st.running, st.cpu = false, 0
	st.gen++
	um := &store.UsageMeter{SandboxID: id, Time: st.time}
	m.mu.Unlock()
	m.persist(ctx, rows, []*store.UsageMeter{um})
}

func (m *meter) state(id string) *meterState {
	st := m.m[id]
	if st == nil {
		st = &meterState{}
		m.m[id] = st
	}
	return st
}

// accrue adds to rows what sandbox id used from st's reading to cpu at
// now, and makes that the reading. The caller holds m.mu.
func (m *meter) accrue(rows map[usageKey]*store.UsageRow, id string, st *meterState, cpu uint64, now time.Time) {
	// Within one container (one gen) the counter only grows: a lower
	// reading was taken before the last accrual and adds nothing.
	var used uint64
	if cpu > st.cpu {
		used = cpu - st.cpu
	}
	if !st.pooled {
		accrueSpan(rows, store.UsageRow{SandboxID: id, SandboxName: st.name, KeyID: st.keyID}, st.time, now,
			float64(used)/1e9, float64(st.memoryMB)/1024*now.Sub(st.time).Seconds(), 0)
	}
	if cpu > st.cpu {
		st.cpu = cpu
	}
	st.time = now
}

// accrueGone accrues memory for a container that ended without a last
// reading: up to one interval past its last reading, at most now.
func (m *meter) accrueGone(rows map[usageKey]*store.UsageRow, id string, st *meterState, now time.Time) {
	end := st.time.Add(m.interval)
	if now.Before(end) {
		end = now
	}
	if end.After(st.time) && !st.pooled {
		accrueSpan(rows, store.UsageRow{SandboxID: id, SandboxName: st.name, KeyID: st.keyID}, st.time, end,
			0, float64(st.memoryMB)/1024*end.Sub(st.time).Seconds(), 0)
	}
	st.time = end
}

// sample reads every running sandbox's CPU counter and accrues CPU,
// memory and stored bytes up to now, in one store transaction.
func (m *meter) sample(ctx context.Context, now time.Time) error {
	sbs, err := m.e.localSandboxes(ctx, store.SandboxFilter{All: true})
	if err != nil {
		return err
	}
	// Stored bytes are the cluster's: one node meters them.
	duty := m.e.holdsDuty(ctx)
	var stored []*store.StoredBytes
	if duty {
		if stored, err = m.e.st.ListStoredBytes(ctx); err != nil {
			return err
		}
	}
	type reading struct {
		cpu uint64
		gen uint64
		ok  bool
	}
	readings := make(map[string]reading, len(sbs))
	for _, sb := range sbs {
		m.mu.Lock()
		st := m.state(sb.ID)
		gen, running := st.gen, st.running
		m.mu.Unlock()
		if !running && sb.State != api.StateRunning && sb.State != api.StatePaused {
			continue
		}
		s, err := m.rt.Stats(ctx, sb.ID)
		readings[sb.ID] = reading{cpu: s.CPUNanos, gen: gen, ok: err == nil}
	}

	rows := map[usageKey]*store.UsageRow{}
	var meters []*store.UsageMeter
	var drop []string
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	known := make(map[string]*store.Sandbox, len(sbs))
	for _, sb := range sbs {
		known[sb.ID] = sb
		st := m.state(sb.ID)
		st.know(sb)
		r, read := readings[sb.ID]
		switch {
		case !read || !r.ok || r.gen != st.gen:
			// Not running; or unreadable (a container that ended: its
			// delete takes the last reading); or started or stopped
			// while we read, which took its own reading.
			continue
		case !st.running:
			// Running, but never seen start (a sandbox of an sbxd without
			// metering): meter it from now on.
			st.running, st.cpu, st.time = true, r.cpu, now
			st.gen++
		default:
			m.accrue(rows, sb.ID, st, r.cpu, now)
		}
		meters = append(meters, &store.UsageMeter{SandboxID: sb.ID, Running: st.running, CPUNanos: st.cpu, Time: st.time})
	}
	for id, st := range m.m {
		if _, ok := known[id]; !ok && !st.running {
			delete(m.m, id)
			drop = append(drop, id)
		}
	}
	if duty && !m.storageTime.IsZero() && now.After(m.storageTime) {
		secs := now.Sub(m.storageTime).Seconds()
		for _, b := range stored {
			base := store.UsageRow{SandboxID: b.SandboxID, SandboxName: b.SandboxName, KeyID: b.KeyID}
			if sb := known[b.SandboxID]; sb != nil {
				base.SandboxName, base.KeyID = sb.Name, sb.Owner
			}
			accrueSpan(rows, base, m.storageTime, now, 0, 0, float64(b.Bytes)*secs)
		}
	}
	if now.After(m.storageTime) {
		// Also on a node without the duty: if it takes the duty over, it
		// meters from its last sample on.
		m.storageTime = now
	}
	if duty {
		meters = append(meters, &store.UsageMeter{SandboxID: "", Time: m.storageTime})
	}
	m.mu.Unlock()
	if err := m.commit(ctx, rows, meters, drop); err != nil {
		return fmt.Errorf("record usage (kept for the next write): %w", err)
	}
	return nil
}

// persist writes rows and meters (see commit), logging a failure: they
// stay pending for the next write. The caller holds m.wmu.
func (m *meter) persist(ctx context.Context, rows map[usageKey]*store.UsageRow, meters []*store.UsageMeter) {
	if err := m.commit(context.WithoutCancel(ctx), rows, meters, nil); err != nil {
		m.e.log.Error("record usage (kept for the next write)", "err", err)
	}
}

// commit writes, in one store transaction (store.AddUsage), what failed
// writes left pending and then rows, meters and drop (ids whose meter
// goes). On success nothing is pending; on failure all of it stays
// pending, merged as the store would (amounts added, the earliest First
// and the latest Last of a sandbox's hour, the latest meter), so no usage
// is lost while sbxd runs; a restart re-accrues from the meters the store
// holds, which moved only with their rows. The caller holds m.wmu.
func (m *meter) commit(ctx context.Context, rows map[usageKey]*store.UsageRow, meters []*store.UsageMeter, drop []string) error {
	m.mu.Lock()
	all := make(map[usageKey]*store.UsageRow, len(m.pendingRows)+len(rows))
	for k, r := range m.pendingRows {
		c := *r
		all[k] = &c
	}
	mergeRows(all, rows)
	byID := make(map[string]*store.UsageMeter, len(m.pendingMeters)+len(meters))
	for id, um := range m.pendingMeters {
		byID[id] = um
	}
	for _, um := range meters {
		byID[um.SandboxID] = um
	}
	dropSet := make(map[string]bool, len(m.pendingDrop)+len(drop))
	for id := range m.pendingDrop {
		dropSet[id] = true
	}
	for _, id := range drop {
		dropSet[id] = true
		delete(byID, id)
	}
	m.mu.Unlock()
	ms := make([]*store.UsageMeter, 0, len(byID))
	for _, um := range byID {
		ms = append(ms, um)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].SandboxID < ms[j].SandboxID })
	ds := make([]string, 0, len(dropSet))
	for id := range dropSet {
		ds = append(ds, id)
	}
	sort.Strings(ds)
	err := m.e.st.AddUsage(ctx, rowList(all), ms, ds)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.pendingRows, m.pendingMeters, m.pendingDrop = all, byID, dropSet
		return err
	}
	clear(m.pendingRows)
	clear(m.pendingMeters)
	clear(m.pendingDrop)
	m.written++
	return nil
}

// mergeRows adds rows into into, as the store's upsert of a row does.
func mergeRows(into, rows map[usageKey]*store.UsageRow) {
	for k, r := range rows {
		cur := into[k]
		if cur == nil {
			c := *r
			into[k] = &c
			continue
		}
		if r.SandboxName != "" {
			cur.SandboxName = r.SandboxName
		}
		if r.KeyID != "" {
			cur.KeyID = r.KeyID
		}
		if r.First.Before(cur.First) {
			cur.First = r.First
		}
		if r.Last.After(cur.Last) {
			cur.Last = r.Last
		}
		cur.CPUSeconds += r.CPUSeconds
		cur.MemoryGiBSeconds += r.MemoryGiBSeconds
		cur.StoredByteSeconds += r.StoredByteSeconds
	}
}

// loop samples at once (so limits see the running sandboxes and the time
// sbxd was down right after a start), then every interval or when kicked,
// until the engine closes. After each sample it asks limitsLoop for a pass
// of the spending limits.
func (m *meter) loop() {
	defer m.e.bg.Done()
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		if err := m.sample(m.e.ctx, m.now()); err != nil && m.e.ctx.Err() == nil {
			m.e.log.Error("usage sample", "err", err)
		}
		select {
		case m.limitsDue <- struct{}{}:
		default: // a pass is due already
		}
		select {
		case <-m.e.ctx.Done():
			return
		case <-t.C:
		case <-m.kicks:
		}
	}
}

// limitsLoop enforces the keys' spending limits (enforceLimits) whenever
// loop asks, until the engine closes: a pass's suspends and resumes (blob
// store I/O) run beside the sampling, not in it.
func (m *meter) limitsLoop() {
	defer m.e.bg.Done()
	for {
		select {
		case <-m.e.ctx.Done():
			return
		case <-m.limitsDue:
		}
		if err := m.e.enforceLimits(m.e.ctx); err != nil && m.e.ctx.Err() == nil {
			m.e.log.Error("spending limits", "err", err)
		}
	}
}

// kick asks the loop for a sample and a pass of the limits now.
func (m *meter) kick() {
	select {
	case m.kicks <- struct{}{}:
	default:
	}
}

// usageKey is a usage row's identity: sandbox and UTC hour.
type usageKey struct {
	id   string
	hour time.Time
}

// accrueSpan adds usage spread evenly over [from, to) to rows, split at
// UTC hour boundaries. A span that is empty or runs backwards (the clock
// stepped) goes whole into the hour of to.
func accrueSpan(rows map[usageKey]*store.UsageRow, base store.UsageRow, from, to time.Time, cpu, mem, stored float64) {
	from, to = from.UTC(), to.UTC()
	if !to.After(from) {
		from = to
	}
	total := to.Sub(from)
	for t := from; ; {
		hour := t.Truncate(time.Hour)
		end := hour.Add(time.Hour)
		if !end.Before(to) {
			end = to
		}
		f := 1.0
		if total > 0 {
			f = float64(end.Sub(t)) / float64(total)
		}
		k := usageKey{base.SandboxID, hour}
		r := rows[k]
		if r == nil {
			r = &store.UsageRow{SandboxID: base.SandboxID, SandboxName: base.SandboxName, KeyID: base.KeyID, Hour: hour, First: t, Last: end}
			rows[k] = r
		}
		if t.Before(r.First) {
			r.First = t
		}
		if end.After(r.Last) {
			r.Last = end
		}
		r.CPUSeconds += cpu * f
		r.MemoryGiBSeconds += mem * f
		r.StoredByteSeconds += stored * f
		if !end.Before(to) {
			return
		}
		t = end
	}
}

func rowList(rows map[usageKey]*store.UsageRow) []*store.UsageRow {
	out := make([]*store.UsageRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Hour.Equal(out[j].Hour) {
			return out[i].Hour.Before(out[j].Hour)
		}
		return out[i].SandboxID < out[j].SandboxID
	})
	return out
}

// meteredRuntime is the runtime the engine drives: the real one, with the
// meter told of every container's start and given a last reading before
// every delete.
type meteredRuntime struct {
	runtime.Runtime
	m *meter
}

func (r *meteredRuntime) Start(ctx context.Context, spec *runtime.Spec, bundle string) error {
	if err := r.Runtime.Start(ctx, spec, bundle); err != nil {
		return err
	}
	r.m.started(ctx, spec.ID)
	return nil
}

func (r *meteredRuntime) Restore(ctx context.Context, spec *runtime.Spec, bundle, imageDir string, background bool) error {
	if err := r.Runtime.Restore(ctx, spec, bundle, imageDir, background); err != nil {
		return err
	}
	r.m.started(ctx, spec.ID)
	return nil
}

func (r *meteredRuntime) Delete(ctx context.Context, id string) error {
	r.m.stopping(ctx, id)
	return r.Runtime.Delete(ctx, id)
}

// UsageQuery selects what Usage reports.
type UsageQuery struct {
	// Since and Until bound the time reported, [Since, Until).
	Since, Until time.Time
	// GroupBy is api.UsageBySandbox, api.UsageByKey or api.UsageByDay.
	GroupBy string
	// KeyID, when OnlyKey, reports only the usage billed to that key.
	KeyID   string
	OnlyKey bool
}

// Usage reports the usage recorded in [q.Since, q.Until), grouped and
// priced at Config.Prices. Usage is recorded at every sample
// (Config.UsageInterval) and at every container's stop, suspend or delete;
// an hour that the bounds cut is prorated over the span its usage was
// accrued in. Errors: errdefs.ErrInvalidArgument for an unknown group_by
// or until not after since. A tenant key's caller sees only its own usage.
func (e *Engine) Usage(ctx context.Context, q UsageQuery) (*api.Usage, error) {
	switch q.GroupBy {
	case "":
		q.GroupBy = api.UsageBySandbox
	case api.UsageBySandbox, api.UsageByKey, api.UsageByDay:
	default:
		return nil, errdefs.Invalid("group_by", "%q: want sandbox, key or day", q.GroupBy)
	}
	if !q.Until.After(q.Since) {
		return nil, errdefs.Invalid("until", "must be after since")
	}
	if c := CallerOf(ctx); !c.Admin {
		// A tenant key sees only what is billed to it.
		q.OnlyKey, q.KeyID = true, c.KeyID
	}
	rows, err := e.st.ListUsage(ctx, q.Since, q.Until)
	if err != nil {
		return nil, err
	}
	u := &api.Usage{Since: q.Since.UTC(), Until: q.Until.UTC(), GroupBy: q.GroupBy, Prices: e.cfg.Prices, Usage: []api.UsageEntry{}}
	groups := map[string]*api.UsageEntry{}
	var order []string
	for _, r := range rows {
		if q.OnlyKey && r.KeyID != q.KeyID {
			continue
		}
		f := overlap(r.First, r.Last, q.Since, q.Until)
		if f == 0 {
			continue
		}
		var g string
		switch q.GroupBy {
		case api.UsageBySandbox:
			g = r.SandboxID
		case api.UsageByKey:
			g = r.KeyID
		case api.UsageByDay:
			g = r.Hour.Format(time.DateOnly)
		}
		ent := groups[g]
		if ent == nil {
			ent = &api.UsageEntry{}
			switch q.GroupBy {
			case api.UsageBySandbox:
				ent.SandboxID = r.SandboxID
			case api.UsageByKey:
				ent.Key = r.KeyID
			case api.UsageByDay:
				ent.Day = g
			}
			groups[g] = ent
			order = append(order, g)
		}
		if r.SandboxName != "" {
			ent.Sandbox = r.SandboxName // rows come oldest first: the latest name wins
		}
		ent.CPUSeconds += f * r.CPUSeconds
		ent.MemoryGiBSeconds += f * r.MemoryGiBSeconds
		ent.StoredByteSeconds += f * r.StoredByteSeconds
	}
	if q.GroupBy != api.UsageByDay {
		sort.Strings(order)
	}
	for _, g := range order {
		ent := groups[g]
		if q.GroupBy != api.UsageBySandbox {
			ent.Sandbox = ""
		}
		ent.Cost = e.cfg.Prices.Cost(ent.CPUSeconds, ent.MemoryGiBSeconds, ent.StoredByteSeconds)
		u.Usage = append(u.Usage, *ent)
		u.Total.CPUSeconds += ent.CPUSeconds
		u.Total.MemoryGiBSeconds += ent.MemoryGiBSeconds
		u.Total.StoredByteSeconds += ent.StoredByteSeconds
	}
	u.Total.Cost = e.cfg.Prices.Cost(u.Total.CPUSeconds, u.Total.MemoryGiBSeconds, u.Total.StoredByteSeconds)
	return u, nil
}

// overlap is the fraction of the accrual span [first, last] inside
// [since, until): 1 or 0 for an instant.
func overlap(first, last, since, until time.Time) float64 {
	if !last.After(first) {
		if !first.Before(since) && first.Before(until) {
			return 1
		}
		return 0
	}
	lo, hi := first, last
	if since.After(lo) {
		lo = since
	}
	if until.Before(hi) {
		hi = until
	}
	if !hi.After(lo) {
		return 0
	}
	return float64(hi.Sub(lo)) / float64(last.Sub(first))
}
