package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/sqlite"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
)

func testAdmissionConfig() Config {
	return Config{MaxSandboxes: 3, MemoryOvercommit: 10, CPUOvercommit: 100,
		ReserveCPUs: 0.25, ReserveMemoryMB: 512, ReserveMemoryPercent: 5}
}

// This VM: 2 CPUs, ~23.5 GiB.
var testHost = runtime.Host{CPUs: 2, MemoryBytes: 24105 << 20}

func TestHostCapacityKeepsAReserve(t *testing.T) {
	c := hostCapacity(testHost, testAdmissionConfig())
	if c.cpus != 1.75 {
		t.Errorf("allocatable CPUs = %g, want 1.75 (2 less 0.25)", c.cpus)
	}
	// 5% of 24105 MiB is 1205 MiB, more than the 512 MiB floor.
	if c.memMB != 24105-1205 {
		t.Errorf("allocatable memory = %d MiB, want %d", c.memMB, 24105-1205)
	}
	small := hostCapacity(runtime.Host{CPUs: 1, MemoryBytes: 2 << 30}, testAdmissionConfig())
	if small.memMB != 2048-512 {
		t.Errorf("on a 2 GiB host: %d MiB, want the 512 MiB floor kept (%d)", small.memMB, 2048-512)
	}
}

func TestAdmitRule(t *testing.T) {
	cfg := testAdmissionConfig()
	c := hostCapacity(testHost, cfg)
	one := demand{what: "create", count: 1, n: 1, cpus: 1, memMB: 1024}
	cases := []struct {
		name         string
		d            demand
		count        int
		cpus         float64
		memMB        int
		wantCapacity bool
	}{
		{"empty host", one, 0, 0, 0, false},
		{"last sandbox allowed", one, 2, 2, 2048, false},
		{"past max_sandboxes", one, 3, 3, 3072, true},
		{"warm sandbox not counted", demand{what: "warm pool", n: 1, cpus: 1, memMB: 1024}, 3, 3, 3072, false},
		{"resume not counted", demand{what: "resume", n: 1, cpus: 1, memMB: 1024}, 3, 3, 3072, false},
		{"memory overcommit passed", one, 0, 0, c.memMB*10 - 1000, true},
		{"memory overcommit met exactly", demand{count: 1, n: 1, cpus: 1, memMB: 1000}, 0, 0, c.memMB*10 - 1000, false},
		{"cpu overcommit passed", one, 0, 174.5, 0, true},
		{"fork of four past max", demand{what: "fork", count: 4, n: 4, cpus: 1, memMB: 64}, 0, 0, 0, true},
	}
	for _, tc := range cases {
		err := admitRule(cfg, c, tc.d, tc.count, tc.cpus, tc.memMB)
		if got := errors.Is(err, errdefs.ErrCapacity); got != tc.wantCapacity {
			t.Errorf("%s: err = %v, want capacity error %v", tc.name, err, tc.wantCapacity)
		}
	}
}

func TestCheckShapeRefusesMoreThanTheHost(t *testing.T) {
	cfg := testAdmissionConfig()
	e := &Engine{cfg: cfg, host: testHost, capacity: hostCapacity(testHost, cfg)}
	for _, s := range []struct {
		cpus  float64
		memMB int
		ok    bool
	}{{1, 1024, true}, {1.75, 22900, true}, {64, 1024, false}, {1, 64 << 10, false}, {2, 1024, false}} {
		err := e.checkShape(s.cpus, s.memMB)
		if (err == nil) != s.ok || (err != nil && !errdefs.IsInvalidArgument(err)) {
			t.Errorf("checkShape(%g, %d) = %v, want ok %v (else invalid_argument)", s.cpus, s.memMB, err, s.ok)
		}
	}
}

// A burst of concurrent admissions passes max_sandboxes by none: each one
// counts the records and the demands admitted before it.
func TestAdmitBurst(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := testAdmissionConfig()
	cfg.MaxSandboxes = 5
	e := &Engine{cfg: cfg, st: st, host: testHost, capacity: hostCapacity(testHost, cfg)}
	// One sandbox exists, one is suspended (counted, but not its memory).
	for i, state := range []api.State{api.StateRunning, api.StateSuspended} {
		if err := st.CreateSandbox(ctx, &store.Sandbox{ID: fmt.Sprintf("sbx_%016d", i), Name: fmt.Sprintf("s%d", i), State: state, CPUs: 1, MemoryMB: 1024}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, refused := 0, 0
	var releases []func()
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("burst-%d", i)
			rel, err := e.admit(ctx, demand{what: "create", count: 1, n: 1, names: []string{name}, cpus: 1, memMB: 1024})
			if err == nil {
				// The create records its sandbox while still holding its
				// admission: the two must not count twice.
				if err := st.CreateSandbox(ctx, &store.Sandbox{ID: fmt.Sprintf("sbx_%016d", 100+i), Name: name, State: api.StateCreating, CPUs: 1, MemoryMB: 1024}); err != nil {
					t.Error(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted++
				releases = append(releases, rel)
			case errors.Is(err, errdefs.ErrCapacity):
				refused++
			default:
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if admitted != 3 || refused != 17 {
		t.Fatalf("20 concurrent creates with 2 of 5 sandboxes existing: %d admitted, %d refused; want 3 and 17", admitted, refused)
	}
	for _, rel := range releases {
		rel()
		rel() // twice is harmless
	}
	// The records stay: still full.
	if _, err := e.admit(ctx, demand{what: "create", count: 1, n: 1, names: []string{"late"}, cpus: 1, memMB: 1024}); !errors.Is(err, errdefs.ErrCapacity) {
		t.Fatalf("with 5 of 5 recorded: %v, want capacity", err)
	}
	// A demand released without a record (a failed create) frees its room.
	if err := st.DeleteSandbox(ctx, "sbx_0000000000000000"); err != nil {
		t.Fatal(err)
	}
	rel, err := e.admit(ctx, demand{what: "create", count: 1, n: 1, names: []string{"x"}, cpus: 1, memMB: 1024})
	if err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	rel()
	if _, err := e.admit(ctx, demand{what: "create", count: 1, n: 1, names: []string{"y"}, cpus: 1, memMB: 1024}); err != nil {
		t.Fatalf("after a released demand: %v", err)
	}
}

// BenchmarkAdmit: the admission of one create with 100 sandboxes recorded
// (what a create pays for the rule: one list of the records).
func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "sbx.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	cfg := testAdmissionConfig()
	cfg.MaxSandboxes = 500
	e := &Engine{cfg: cfg, st: st, host: testHost, capacity: hostCapacity(testHost, cfg)}
	for i := 0; i < 100; i++ {
		if err := st.CreateSandbox(ctx, &store.Sandbox{ID: fmt.Sprintf("sbx_%016d", i), Name: fmt.Sprintf("s%d", i), State: api.StateRunning, CPUs: 1, MemoryMB: 64}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rel, err := e.admit(ctx, demand{what: "create", count: 1, n: 1, names: []string{"x"}, cpus: 1, memMB: 64})
		if err != nil {
			b.Fatal(err)
		}
		rel()
	}
}
