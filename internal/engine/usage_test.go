package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/sqlite"
)

// counterRuntime is a runtime whose only working call is Stats: the CPU
// counter each container id is given (missing ids fail, like a container
// that is gone). The meter reads nothing else.
type counterRuntime struct {
	runtime.Runtime
	mu  sync.Mutex
	cpu map[string]uint64
}

func (r *counterRuntime) set(id string, cpu time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cpu[id] = uint64(cpu)
}

func (r *counterRuntime) Stats(_ context.Context, id string) (runtime.Stats, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cpu[id]
	if !ok {
		return runtime.Stats{}, errors.New("no such container")
	}
	return runtime.Stats{CPUNanos: c}, nil
}

// meterEnv is a meter over a real SQLite store, a counterRuntime and a
// clock the test moves.
type meterEnv struct {
	e     *Engine
	m     *meter
	rt    *counterRuntime
	st    store.Store
	clock time.Time
}

func newMeterEnv(t *testing.T, dbPath string, start time.Time) *meterEnv {
	t.Helper()
	st, err := sqlite.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	env := &meterEnv{st: st, rt: &counterRuntime{cpu: map[string]uint64{}}, clock: start}
	env.e = &Engine{st: st, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		cfg: Config{Prices: api.DefaultUsagePrices, UsageInterval: time.Minute}}
	env.m = newMeter(env.e, env.rt, time.Minute)
	env.m.now = func() time.Time { return env.clock }
	env.e.meter = env.m
	if err := env.m.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return env
}

func (env *meterEnv) sample(t *testing.T) {
	t.Helper()
	if err := env.m.sample(context.Background(), env.clock); err != nil {
		t.Fatal(err)
	}
}

func (env *meterEnv) usage(t *testing.T, since, until time.Time, groupBy string) *api.Usage {
	t.Helper()
	u, err := env.e.Usage(context.Background(), UsageQuery{Since: since, Until: until, GroupBy: groupBy})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func addSandbox(t *testing.T, st store.Store, id, name string, cpus float64, memoryMB int) {
	t.Helper()
	if err := st.CreateSandbox(context.Background(), &store.Sandbox{ID: id, Name: name, State: api.StateRunning,
		Image: "default", CPUs: cpus, MemoryMB: memoryMB}); err != nil {
		t.Fatal(err)
	}
}

// TestUsageForkExample is sbx's pricing example: a 3-minute fork of a
// 2 vCPU / 4 GiB sandbox keeping one core busy costs $0.00275; the
// snapshot the fork took for itself costs nothing. The last minute and a
// half is taken only by the reading at the container's delete.
func TestUsageForkExample(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), t0)
	ctx := context.Background()
	addSandbox(t, env.st, "sbx_fork", "fork", 2, 4096)
	if err := env.st.AddSnapshot(ctx, &store.Snapshot{ID: "snap_f", SandboxID: "sbx_parent", SandboxName: "parent",
		StoredBytes: 2e9, Fork: true, State: "ready"}); err != nil {
		t.Fatal(err)
	}
	env.sample(t) // starts the storage meter
	env.rt.set("sbx_fork", 0)
	env.m.started(ctx, "sbx_fork")
	env.clock = t0.Add(90 * time.Second)
	env.rt.set("sbx_fork", 90*time.Second)
	env.sample(t)
	env.clock = t0.Add(180 * time.Second)
	env.rt.set("sbx_fork", 180*time.Second)
	env.m.stopping(ctx, "sbx_fork")
	env.clock = t0.Add(time.Hour)
	env.sample(t) // the container is gone: nothing more for it

	u := env.usage(t, t0, t0.Add(24*time.Hour), api.UsageBySandbox)
	if len(u.Usage) != 1 {
		t.Fatalf("usage: %+v", u.Usage)
	}
	f := u.Usage[0]
	if f.Sandbox != "fork" || f.SandboxID != "sbx_fork" || !near(f.CPUSeconds, 180) || !near(f.MemoryGiBSeconds, 4*180) ||
		f.StoredByteSeconds != 0 || !near(f.Cost, 0.00275) || !near(u.Total.Cost, 0.00275) {
		t.Fatalf("fork: %+v total %+v", f, u.Total)
	}
}

// TestUsageSnapshotsExample is sbx's pricing example: ten 2 GB snapshots
// kept a day cost $0.0533 (20 GB for 1/30 of a month at $0.08). Kept from
// noon to noon, the day view splits it in halves.
func TestUsageSnapshotsExample(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), t0)
	ctx := context.Background()
	addSandbox(t, env.st, "sbx_a", "a", 1, 1024)
	if err := env.st.UpdateSandbox(ctx, &store.Sandbox{ID: "sbx_a", Name: "a", State: api.StateStopped, Image: "default"}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := env.st.AddSnapshot(ctx, &store.Snapshot{ID: "snap_" + string(rune('a'+i)), SandboxID: "sbx_a", SandboxName: "a",
			StoredBytes: 2e9, State: "ready"}); err != nil {
			t.Fatal(err)
		}
	}
	env.sample(t)
	for h := 1; h <= 24; h++ {
		env.clock = t0.Add(time.Duration(h) * time.Hour)
		env.sample(t)
	}
	u := env.usage(t, t0.Add(-time.Hour), t0.Add(48*time.Hour), api.UsageBySandbox)
	if len(u.Usage) != 1 || !near(u.Usage[0].StoredByteSeconds, 20e9*86400) || math.Abs(u.Total.Cost-0.0533) > 0.00005 {
		t.Fatalf("by sandbox: %+v total %+v", u.Usage, u.Total)
	}
	d := env.usage(t, t0.Add(-time.Hour), t0.Add(48*time.Hour), api.UsageByDay)
	if len(d.Usage) != 2 || d.Usage[0].Day != "2026-12-01" || d.Usage[1].Day != "2026-12-02" ||
		!near(d.Usage[0].Cost, 20*0.5/30*0.08) || !near(d.Usage[1].Cost, 20*0.5/30*0.08) || d.Usage[0].Sandbox != "" {
		t.Fatalf("by day: %+v", d.Usage)
	}
	// A window of six hours of it prorates the hour it cuts.
	w := env.usage(t, t0.Add(30*time.Minute), t0.Add(6*time.Hour+30*time.Minute), api.UsageBySandbox)
	if !near(w.Total.StoredByteSeconds, 20e9*6*3600) {
		t.Fatalf("six hours: %+v", w.Total)
	}
}

// TestUsageSurvivesRestart: a second meter on the same store (sbxd
// restarted while the sandbox ran on) accrues from the first one's last
// reading: nothing is lost, nothing counted twice.
func TestUsageSurvivesRestart(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 23, 59, 0, 0, time.UTC)
	db := filepath.Join(t.TempDir(), "sbx.db")
	ctx := context.Background()
	a := newMeterEnv(t, db, t0)
	addSandbox(t, a.st, "sbx_a", "a", 1, 2048)
	a.rt.set("sbx_a", 0)
	a.m.started(ctx, "sbx_a")
	a.clock = t0.Add(time.Minute)
	a.rt.set("sbx_a", 30*time.Second)
	a.sample(t)
	if err := a.st.Close(); err != nil {
		t.Fatal(err)
	}

	b := newMeterEnv(t, db, t0.Add(3*time.Minute))
	b.rt.set("sbx_a", 50*time.Second)
	b.m.stopping(ctx, "sbx_a")
	u := b.usage(t, t0, t0.Add(time.Hour), api.UsageBySandbox)
	if len(u.Usage) != 1 || !near(u.Usage[0].CPUSeconds, 50) || !near(u.Usage[0].MemoryGiBSeconds, 2*180) {
		t.Fatalf("after restart: %+v", u.Usage)
	}
	// The span crossed midnight: each day holds its part.
	d := b.usage(t, t0, t0.Add(time.Hour), api.UsageByDay)
	if len(d.Usage) != 2 || !near(d.Usage[0].MemoryGiBSeconds, 2*60) || !near(d.Usage[1].MemoryGiBSeconds, 2*120) {
		t.Fatalf("by day: %+v", d.Usage)
	}
}

// TestUsageContainerGone: a container that ended without a last reading
// (its delete found it gone) is billed memory up to one interval past its
// last reading, not for the whole time until someone noticed.
func TestUsageContainerGone(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), t0)
	ctx := context.Background()
	addSandbox(t, env.st, "sbx_a", "a", 1, 1024)
	env.rt.set("sbx_a", 0)
	env.m.started(ctx, "sbx_a")
	env.clock = t0.Add(time.Hour)
	env.rt.mu.Lock()
	delete(env.rt.cpu, "sbx_a")
	env.rt.mu.Unlock()
	env.m.stopping(ctx, "sbx_a")
	u := env.usage(t, t0, t0.Add(2*time.Hour), api.UsageBySandbox)
	if len(u.Usage) != 1 || !near(u.Usage[0].MemoryGiBSeconds, 60) || u.Usage[0].CPUSeconds != 0 {
		t.Fatalf("gone: %+v", u.Usage)
	}
}

// TestUsageWarmNotBilled: a warm sandbox of the pool costs its claimant
// nothing for the time it waited.
func TestUsageWarmNotBilled(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), t0)
	ctx := context.Background()
	if err := env.st.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_w", Name: "warm-1", State: api.StateRunning, Image: "default",
		CPUs: 1, MemoryMB: 1024, Pooled: true}); err != nil {
		t.Fatal(err)
	}
	env.rt.set("sbx_w", 0)
	env.m.started(ctx, "sbx_w")
	env.clock = t0.Add(time.Hour)
	env.rt.set("sbx_w", 10*time.Second)
	env.sample(t)
	if err := env.st.UpdateSandbox(ctx, &store.Sandbox{ID: "sbx_w", Name: "mine", State: api.StateRunning, Image: "default",
		CPUs: 1, MemoryMB: 1024}); err != nil {
		t.Fatal(err)
	}
	env.clock = t0.Add(time.Hour + time.Minute)
	env.rt.set("sbx_w", 16*time.Second)
	env.sample(t)
	u := env.usage(t, t0, t0.Add(2*time.Hour), api.UsageBySandbox)
	if len(u.Usage) != 1 || u.Usage[0].Sandbox != "mine" || !near(u.Usage[0].CPUSeconds, 6) || !near(u.Usage[0].MemoryGiBSeconds, 60) {
		t.Fatalf("claimed warm sandbox: %+v", u.Usage)
	}
}

// TestUsageBadQuery: an unknown group_by and an empty window are
// invalid_argument.
func TestUsageBadQuery(t *testing.T) {
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), time.Now())
	now := time.Now()
	for _, q := range []UsageQuery{
		{Since: now.Add(-time.Hour), Until: now, GroupBy: "week"},
		{Since: now, Until: now},
		{Since: now, Until: now.Add(-time.Hour)},
	} {
		if _, err := env.e.Usage(context.Background(), q); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v", q, err)
		}
	}
}

// TestAccrueSpan: a span is split at UTC hour boundaries in proportion to
// time, and a span running backwards (a clock step) goes whole to its end.
func TestAccrueSpan(t *testing.T) {
	rows := map[usageKey]*store.UsageRow{}
	from := time.Date(2026, 12, 2, 9, 45, 0, 0, time.UTC)
	accrueSpan(rows, store.UsageRow{SandboxID: "sbx_a"}, from, from.Add(90*time.Minute), 90, 0, 0)
	got := rowList(rows)
	if len(got) != 3 || !near(got[0].CPUSeconds, 15) || !near(got[1].CPUSeconds, 60) || !near(got[2].CPUSeconds, 15) ||
		!got[1].First.Equal(from.Add(15*time.Minute)) || !got[2].Last.Equal(from.Add(90*time.Minute)) {
		t.Fatalf("split: %+v %+v %+v", got[0], got[1], got[2])
	}
	rows = map[usageKey]*store.UsageRow{}
	accrueSpan(rows, store.UsageRow{SandboxID: "sbx_a"}, from, from.Add(-time.Hour), 5, 0, 0)
	if got := rowList(rows); len(got) != 1 || got[0].CPUSeconds != 5 || !got[0].First.Equal(from.Add(-time.Hour)) {
		t.Fatalf("backwards: %+v", got)
	}
}

// TestFakeUsageShortLived: a sandbox that burns CPU and is deleted before
// any periodic sample (the interval is an hour) is billed anyway: its
// delete takes the last reading. Its memory is billed for its life.
func TestFakeUsageShortLived(t *testing.T) {
	f := startFakeEngine(t, newFakeDataDir(t), Config{UsageInterval: time.Hour})
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)
	sb := f.create(t, "short")
	_, err := f.e.Exec(ctx, "short", api.ExecRequest{Cmd: []string{"sh", "-c", "while :; do :; done"}, Cwd: "/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var burnt time.Duration
	deadline := time.Now().Add(hangDeadline)
	for burnt < 300*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("the busy loop used %v of CPU in %v", burnt, hangDeadline)
		}
		s, err := f.rt.Stats(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		burnt = time.Duration(s.CPUNanos)
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.e.Delete(ctx, "short"); err != nil {
		t.Fatal(err)
	}
	u, err := f.e.Usage(ctx, UsageQuery{Since: before, Until: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Usage) != 1 || u.Usage[0].Sandbox != "short" || u.Usage[0].CPUSeconds < burnt.Seconds() ||
		u.Usage[0].MemoryGiBSeconds <= 0 || u.Usage[0].MemoryGiBSeconds > 64.0/1024*time.Since(before).Seconds() || u.Usage[0].Cost <= 0 {
		t.Fatalf("usage of a deleted short-lived sandbox (burnt %v): %+v", burnt, u.Usage)
	}
}

// BenchmarkUsageSample is one sample of the usage meter with 200 running
// sandboxes, each with checkpoints, on the real SQLite store (the CPU
// counters come from memory; BenchmarkCgroupStats in runtime/gvisor is the
// cost of reading one sandbox's cgroup). Its time divided by the interval
// (DefaultUsageInterval) is the meter's share of a core.
func BenchmarkUsageSample(b *testing.B) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "sbx.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	rt := &counterRuntime{cpu: map[string]uint64{}}
	e := &Engine{st: st, log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{Prices: api.DefaultUsagePrices}}
	m := newMeter(e, rt, DefaultUsageInterval)
	clock := t0
	m.now = func() time.Time { return clock }
	ctx := context.Background()
	for i := range 200 {
		id := fmt.Sprintf("sbx_%016x", i)
		if err := st.CreateSandbox(ctx, &store.Sandbox{ID: id, Name: fmt.Sprintf("s%d", i), State: api.StateRunning,
			Image: "default", CPUs: 1, MemoryMB: 1024}); err != nil {
			b.Fatal(err)
		}
		for seq := range 3 {
			if err := st.AddCheckpoint(ctx, &store.Checkpoint{SandboxID: id, Seq: seq, Manifest: []string{"sha256:a"}, AddedBytes: 1 << 20}); err != nil {
				b.Fatal(err)
			}
		}
		rt.set(id, 0)
		m.started(ctx, id)
	}
	var n uint64
	for b.Loop() {
		n++
		clock = clock.Add(DefaultUsageInterval)
		for id := range rt.cpu {
			rt.cpu[id] = n * uint64(time.Second)
		}
		if err := m.sample(ctx, clock); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUsageTenantSeesOwn: a tenant key's usage report holds only what is
// billed to it, whatever it groups by; an admin's holds every key.
func TestUsageTenantSeesOwn(t *testing.T) {
	h := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), h)
	ctx := context.Background()
	if err := env.st.AddUsage(ctx, []*store.UsageRow{
		{SandboxID: "sbx_a", SandboxName: "a", KeyID: "key_a", Hour: h, First: h, Last: h.Add(time.Minute), CPUSeconds: 1},
		{SandboxID: "sbx_b", SandboxName: "b", KeyID: "key_b", Hour: h, First: h, Last: h.Add(time.Minute), CPUSeconds: 2},
		{SandboxID: "sbx_o", SandboxName: "o", Hour: h, First: h, Last: h.Add(time.Minute), CPUSeconds: 4},
	}, nil, nil); err != nil {
		t.Fatal(err)
	}
	tctx := WithCaller(ctx, Caller{KeyID: "key_a"})
	for _, by := range []string{api.UsageBySandbox, api.UsageByKey, api.UsageByDay} {
		u, err := env.e.Usage(tctx, UsageQuery{Since: h, Until: h.Add(time.Hour), GroupBy: by})
		if err != nil || len(u.Usage) != 1 || u.Total.CPUSeconds != 1 {
			t.Errorf("tenant, by %s: %+v %v", by, u, err)
		}
	}
	u, err := env.e.Usage(ctx, UsageQuery{Since: h, Until: h.Add(time.Hour), GroupBy: api.UsageByKey})
	if err != nil || len(u.Usage) != 3 || u.Usage[0].Key != "" || u.Usage[1].Key != "key_a" || u.Total.CPUSeconds != 7 {
		t.Fatalf("admin by key: %+v %v", u, err)
	}
}
