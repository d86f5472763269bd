package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/sqlite"
)

// countingStore counts the reads of usage rows, and fails the next
// failAdd writes of usage (as SQLITE_BUSY or a full disk would).
type countingStore struct {
	store.Store
	mu        sync.Mutex
	listUsage int
	failAdd   int
}

func (s *countingStore) UsageByKey(ctx context.Context, since time.Time) (map[string]store.UsageTotals, error) {
	s.mu.Lock()
	s.listUsage++
	s.mu.Unlock()
	return s.Store.UsageByKey(ctx, since)
}

func (s *countingStore) AddUsage(ctx context.Context, rows []*store.UsageRow, meters []*store.UsageMeter, drop []string) error {
	s.mu.Lock()
	fail := s.failAdd > 0
	if fail {
		s.failAdd--
	}
	s.mu.Unlock()
	if fail {
		return errors.New("database is locked")
	}
	return s.Store.AddUsage(ctx, rows, meters, drop)
}

func (s *countingStore) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listUsage
}

// TestLimitsOneUsageReadPerPass: a pass of the limits reads no usage when
// no key has a limit, and today's usage once however many keys have one.
func TestLimitsOneUsageReadPerPass(t *testing.T) {
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), time.Now().UTC())
	cs := &countingStore{Store: env.st}
	env.e.st = cs
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		if err := env.st.CreateKey(ctx, &store.Key{ID: "key_" + name, Name: name, Hash: "h" + name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.e.enforceLimits(ctx); err != nil {
		t.Fatal(err)
	}
	if n := cs.reads(); n != 0 {
		t.Fatalf("a pass with no limits read today's usage %d times", n)
	}
	high := 1000.0
	for _, name := range []string{"d", "e", "f"} {
		if err := env.st.CreateKey(ctx, &store.Key{ID: "key_" + name, Name: name, Hash: "h" + name, DailyLimitUSD: &high}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.e.enforceLimits(ctx); err != nil {
		t.Fatal(err)
	}
	if n := cs.reads(); n != 1 {
		t.Fatalf("a pass over 3 keys with limits read today's usage %d times, not once", n)
	}
}

// TestUsageKeptAfterFailedWrite: a sample whose store write fails loses
// nothing: the next write records its span too, and the spend of the key
// counts it meanwhile.
func TestUsageKeptAfterFailedWrite(t *testing.T) {
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(time.Hour)
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), start)
	cs := &countingStore{Store: env.st}
	env.e.st = cs
	ctx := context.Background()
	if err := env.st.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_a", Name: "a", State: api.StateRunning, Image: "default",
		CPUs: 1, MemoryMB: 1024, Owner: "key_a"}); err != nil {
		t.Fatal(err)
	}
	env.rt.set("sbx_a", 0)
	env.m.started(ctx, "sbx_a")
	env.clock = start.Add(time.Minute)
	env.rt.set("sbx_a", time.Minute)
	cs.failAdd = 1
	if err := env.m.sample(ctx, env.clock); err == nil {
		t.Fatal("a failed write was not reported")
	}
	spent, err := env.e.recordedSpend(ctx, env.clock)
	if err != nil {
		t.Fatal(err)
	}
	if want := (60*0.025 + 60*0.0075) / 3600; !near(spent["key_a"], want) {
		t.Fatalf("spend with a write pending: $%v, want $%v", spent["key_a"], want)
	}
	env.clock = start.Add(2 * time.Minute)
	env.rt.set("sbx_a", 2*time.Minute)
	env.sample(t)
	u := env.usage(t, start.Add(-time.Hour), start.Add(time.Hour), "sandbox")
	if !near(u.Total.CPUSeconds, 120) || !near(u.Total.MemoryGiBSeconds, 120) {
		t.Fatalf("usage after a failed write: %+v, want 120 CPU s and 120 GiB s", u.Total)
	}
	// A failed write of the stop's reading is kept too.
	env.clock = start.Add(3 * time.Minute)
	env.rt.set("sbx_a", 3*time.Minute)
	cs.failAdd = 1
	env.m.stopping(ctx, "sbx_a")
	env.clock = start.Add(4 * time.Minute)
	env.sample(t)
	u = env.usage(t, start.Add(-time.Hour), start.Add(time.Hour), "sandbox")
	if !near(u.Total.CPUSeconds, 180) || !near(u.Total.MemoryGiBSeconds, 180) {
		t.Fatalf("usage after a failed write at a stop: %+v, want 180 CPU s and 180 GiB s", u.Total)
	}
}

// TestLimitRefusedMessage: the refusal names the route that raises the
// limit, PUT /v1/keys/{id}/limit (there is no PATCH on keys).
func TestLimitRefusedMessage(t *testing.T) {
	limit := 1.0
	err := limitError(&store.Key{ID: "key_x", Name: "ci", DailyLimitUSD: &limit}, KeySpend{Spent: 2})
	if !strings.Contains(err.Error(), "PUT /v1/keys/key_x/limit") || strings.Contains(err.Error(), "PATCH") {
		t.Fatalf("the refusal names the wrong route: %v", err)
	}
}

// TestFakeLimitSkipsBusySandbox: a pass of the limits does not wait for a
// sandbox that another operation holds; it leaves it running, records no
// suspension, and tries again at a later pass.
func TestFakeLimitSkipsBusySandbox(t *testing.T) {
	f := startFakeEngine(t, newFakeDataDir(t), Config{UsageInterval: time.Hour})
	ctx := context.Background()
	zero := 0.0
	k, _, err := f.e.CreateKey(ctx, api.CreateKeyRequest{Name: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := f.e.Create(WithCaller(ctx, Caller{KeyID: k.ID}), CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "busy"}})
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := f.e.lockID(ctx, sb.ID, sb.Name, "snapshot", lockOrConflict)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.SetKeyDailyLimit(ctx, k.ID, &zero); err != nil {
		t.Fatal(err)
	}
	// Before the fix this waited for the lock until the deadline.
	pctx, cancel := context.WithTimeout(ctx, hangDeadline)
	defer cancel()
	if err := f.e.enforceLimits(pctx); err != nil {
		t.Fatal(err)
	}
	if pctx.Err() != nil {
		t.Fatal("the pass waited for the sandbox's lock")
	}
	if cur, err := f.e.Get(ctx, "busy"); err != nil || cur.State != api.StateRunning {
		t.Fatalf("a busy sandbox: %+v %v", cur, err)
	}
	if ls, err := f.st.ListLimitSuspensions(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("a skipped sandbox was recorded suspended: %+v %v", ls, err)
	}
	unlock()
	if err := f.e.enforceLimits(ctx); err != nil {
		t.Fatal(err)
	}
	// The fake runtime cannot suspend: the attempt is what shows here.
	if !strings.Contains(f.logs.String(), "msg=\"spending limit: suspend\"") {
		t.Fatalf("no suspend was tried once the sandbox was free:\n%s", f.logs.String())
	}
}

// TestFakeLimitVolumeLoggedOnce: a sandbox with a volume, which cannot be
// suspended, is logged once while its key stays over the limit, not at
// every pass, and no suspend of it is tried.
func TestFakeLimitVolumeLoggedOnce(t *testing.T) {
	f := startFakeEngine(t, newFakeDataDir(t), Config{UsageInterval: time.Hour})
	ctx := context.Background()
	zero := 0.0
	k, _, err := f.e.CreateKey(ctx, api.CreateKeyRequest{Name: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := f.e.Create(WithCaller(ctx, Caller{KeyID: k.ID}), CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "vol"}})
	if err != nil {
		t.Fatal(err)
	}
	sb.Volumes = []api.Volume{{Name: "data", Path: "/data"}}
	if err := f.st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := f.st.SetKeyDailyLimit(ctx, k.ID, &zero); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := f.e.enforceLimits(ctx); err != nil {
			t.Fatal(err)
		}
	}
	logs := f.logs.String()
	if n := strings.Count(logs, "cannot be suspended"); n != 1 || strings.Contains(logs, `msg="spending limit: suspend"`) {
		t.Fatalf("a sandbox with a volume was logged %d times, or a suspend of it tried:\n%s", n, logs)
	}
	if ls, err := f.st.ListLimitSuspensions(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("a sandbox with a volume was recorded suspended: %+v %v", ls, err)
	}
}

// TestFakeLimitStoppedNotBooted: work that would boot a stopped sandbox
// of a key over its limit (the process list, the files API, deliveries,
// not only exec) is refused with quota_exceeded, and the sandbox stays
// stopped.
func TestFakeLimitStoppedNotBooted(t *testing.T) {
	f := startFakeEngine(t, newFakeDataDir(t), Config{UsageInterval: time.Hour})
	ctx := context.Background()
	k, _, err := f.e.CreateKey(ctx, api.CreateKeyRequest{Name: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	tctx := WithCaller(ctx, Caller{KeyID: k.ID})
	if _, err := f.e.Create(tctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "off"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Stop(ctx, "off"); err != nil {
		t.Fatal(err)
	}
	zero := 0.0
	if err := f.st.SetKeyDailyLimit(ctx, k.ID, &zero); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.ListProcesses(tctx, "off"); !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("the process list of a stopped sandbox over the limit: %v", err)
	}
	if sb, err := f.e.Get(ctx, "off"); err != nil || sb.State != api.StateStopped {
		t.Fatalf("a refused boot: %+v %v", sb, err)
	}
}

// TestFakeLimitReasonRecordedWithSuspend: the spending-limit reason lands
// in the same record update as the suspended state, also when a restarted
// sbxd completes a suspend whose memory and disk were stored.
func TestFakeLimitReasonRecordedWithSuspend(t *testing.T) {
	f := startFakeEngine(t, newFakeDataDir(t), Config{UsageInterval: time.Hour})
	ctx := context.Background()
	sb := f.create(t, "s")
	const reason = "spending_limit: API key ci passed its daily limit"
	snapID := newSnapshotID()
	if err := f.st.AddSnapshot(ctx, &store.Snapshot{ID: snapID, SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image,
		Suspend: true, State: "ready", CreateTime: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(suspendOp{Snapshot: snapID, Reason: reason})
	op := &store.Op{ID: "suspend-" + sb.ID, SandboxID: sb.ID, Kind: "suspend", Data: data}
	if err := f.st.PutOp(ctx, op); err != nil {
		t.Fatal(err)
	}
	if err := f.e.recoverSuspend(ctx, op); err != nil {
		t.Fatal(err)
	}
	cur, err := f.e.Get(ctx, "s")
	if err != nil || cur.State != api.StateSuspended || cur.StateReason != reason {
		t.Fatalf("a recovered limit suspend: %+v %v", cur, err)
	}
}

// BenchmarkLimitsPass is one pass of the spending limits (enforceLimits)
// with 200 running sandboxes owned by 20 keys, each with a limit it is
// under, and a full day of usage rows (200 sandboxes x 24 hours): the part
// of the meter's cost that BenchmarkUsageSample leaves out. Its time
// divided by the interval (DefaultUsageInterval) is its share of a core.
func BenchmarkLimitsPass(b *testing.B) {
	e := limitsBenchEngine(b)
	ctx := context.Background()
	for b.Loop() {
		if err := e.enforceLimits(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckSpend is the limit check of one piece of work (an exec, a
// create) by a key with a limit, on BenchmarkLimitsPass's day of usage.
func BenchmarkCheckSpend(b *testing.B) {
	e := limitsBenchEngine(b)
	ctx := context.Background()
	for b.Loop() {
		if err := e.checkSpend(ctx, "key_3", 1, 1024); err != nil {
			b.Fatal(err)
		}
	}
}

// limitsBenchEngine is an engine over a real SQLite store holding 20 keys
// with limits, 200 running sandboxes and a day of their usage.
func limitsBenchEngine(b *testing.B) *Engine {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "sbx.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	e := &Engine{st: st, log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{Prices: api.DefaultUsagePrices}}
	e.meter = newMeter(e, &counterRuntime{cpu: map[string]uint64{}}, DefaultUsageInterval)
	ctx := context.Background()
	high := 1e6
	for k := range 20 {
		if err := st.CreateKey(ctx, &store.Key{ID: fmt.Sprintf("key_%d", k), Name: fmt.Sprintf("k%d", k), Hash: fmt.Sprintf("h%d", k), DailyLimitUSD: &high}); err != nil {
			b.Fatal(err)
		}
	}
	day := time.Now().UTC().Truncate(24 * time.Hour)
	var rows []*store.UsageRow
	for i := range 200 {
		id := fmt.Sprintf("sbx_%016x", i)
		key := fmt.Sprintf("key_%d", i%20)
		if err := st.CreateSandbox(ctx, &store.Sandbox{ID: id, Name: fmt.Sprintf("s%d", i), State: api.StateRunning,
			Image: "default", CPUs: 1, MemoryMB: 1024, Owner: key}); err != nil {
			b.Fatal(err)
		}
		for h := range 24 {
			hour := day.Add(time.Duration(h) * time.Hour)
			rows = append(rows, &store.UsageRow{SandboxID: id, KeyID: key, Hour: hour, First: hour, Last: hour.Add(time.Hour - time.Second),
				CPUSeconds: 1800, MemoryGiBSeconds: 3600})
		}
	}
	if err := st.AddUsage(ctx, rows, nil, nil); err != nil {
		b.Fatal(err)
	}
	return e
}

// TestSpendReadOncePerWrite: limit checks (one per exec or create of a
// limited key) read today's usage from the store once per usage write,
// and a check after a write sees the usage it recorded.
func TestSpendReadOncePerWrite(t *testing.T) {
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(time.Hour)
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), start)
	cs := &countingStore{Store: env.st}
	env.e.st = cs
	ctx := context.Background()
	if err := env.st.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_a", Name: "a", State: api.StateRunning, Image: "default",
		CPUs: 1, MemoryMB: 1024, Owner: "key_a"}); err != nil {
		t.Fatal(err)
	}
	env.rt.set("sbx_a", 0)
	env.m.started(ctx, "sbx_a")
	for range 5 {
		if _, err := env.e.recordedSpend(ctx, env.clock); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.reads(); n != 1 {
		t.Fatalf("5 checks with no usage written between them read the store %d times, want 1", n)
	}
	env.clock = start.Add(time.Minute)
	env.rt.set("sbx_a", time.Minute)
	env.sample(t)
	spent, err := env.e.recordedSpend(ctx, env.clock)
	if err != nil {
		t.Fatal(err)
	}
	if n := cs.reads(); n != 2 {
		t.Fatalf("a check after a usage write read the store %d times in all, want 2", n)
	}
	if want := (60*0.025 + 60*0.0075) / 3600; !near(spent["key_a"], want) {
		t.Fatalf("spend after the write: $%v, want $%v (a stale total)", spent["key_a"], want)
	}
}
