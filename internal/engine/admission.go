package engine

import (
	"context"
	"math"
	"sync"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
)

// Admission defaults (docs/security.md, "Disk quota, upload size and
// admission").
const (
	// DefaultMaxSandboxes caps the sandboxes that exist (any state, warm
	// ones not counted).
	DefaultMaxSandboxes = 500
	// DefaultMaxSnapshots caps the memory snapshots that exist (forks' and
	// suspends' own not counted).
	DefaultMaxSnapshots = 1000
	// DefaultMemoryOvercommit and DefaultCPUOvercommit are how many times
	// the allocatable memory and CPUs the sandboxes' limits may add up to.
	DefaultMemoryOvercommit = 10
	DefaultCPUOvercommit    = 100
	// DefaultReserveCPUs is kept for sbxd and the host: no sandbox, and
	// not all of them together, may use it.
	DefaultReserveCPUs = 0.25
	// DefaultReserveMemoryMB is the smallest memory reserve; the reserve
	// is the larger of it and DefaultReserveMemoryPercent of the host.
	DefaultReserveMemoryMB      = 512
	DefaultReserveMemoryPercent = 5
)

// capacity is what sandboxes may have, after the reserve.
type capacity struct {
	cpus  float64 // allocatable cores: the cap of one sandbox and of all together
	memMB int     // allocatable MiB: likewise
}

// hostCapacity is the allocatable part of host after the reserve of cfg.
func hostCapacity(h runtime.Host, cfg Config) capacity {
	reserveMB := int(h.MemoryBytes >> 20 * int64(cfg.ReserveMemoryPercent) / 100)
	if reserveMB < cfg.ReserveMemoryMB {
		reserveMB = cfg.ReserveMemoryMB
	}
	c := capacity{cpus: float64(h.CPUs) - cfg.ReserveCPUs, memMB: int(h.MemoryBytes>>20) - reserveMB}
	if c.cpus < 0.1 {
		c.cpus = 0.1
	}
	if c.memMB < 64 {
		c.memMB = 64
	}
	return c
}

// demand is what an operation asks to admit.
type demand struct {
	what  string // "create", "fork", "resume", for messages
	count int    // new sandboxes, counted against MaxSandboxes (not warm ones, nor a resume's)
	n     int    // sandboxes whose CPUs and memory start counting
	// names are the sandboxes' names: once a record of that name exists
	// (not suspended), the record counts instead of the demand.
	names []string
	cpus  float64
	memMB int // each
}

// admission holds the demands admitted but not yet recorded in the store.
type admission struct {
	mu      sync.Mutex
	pending map[*demand]bool
}

// checkShape refuses a sandbox shape that no host state could admit: more
// CPUs or memory than the host has after its reserve.
func (e *Engine) checkShape(cpus float64, memMB int) error {
	c := e.capacity
	if cpus > c.cpus || math.IsNaN(cpus) {
		return errdefs.Invalid("cpus", "%g is more than this host can give one sandbox (%.2f: %d CPUs less a reserve of %g for sbxd and the host)", cpus, c.cpus, e.host.CPUs, e.cfg.ReserveCPUs)
	}
	if memMB > c.memMB {
		return errdefs.Invalid("memory_mb", "%d is more than this host can give one sandbox (%d MiB: %d MiB less a reserve for sbxd and the host)", memMB, c.memMB, e.host.MemoryBytes>>20)
	}
	return nil
}

// admit decides whether d fits on the host with what exists, by the rule
// in docs/security.md: the sandboxes' count at most MaxSandboxes; the sum
// of the memory limits of every sandbox not suspended (warm ones included)
// at most MemoryOvercommit times the allocatable memory, and likewise for
// CPUs with CPUOvercommit. An admitted demand counts until release is
// called (call it once the records exist, or the operation failed).
//
// Errors: ErrInvalidArgument (a shape no host state admits), ErrCapacity.
func (e *Engine) admit(ctx context.Context, d demand) (release func(), err error) {
	if err := e.checkShape(d.cpus, d.memMB); err != nil {
		return nil, err
	}
	e.adm.mu.Lock()
	defer e.adm.mu.Unlock()
	// Pending demands are looked up before the totals are read: a record
	// made in between is then counted twice (a refusal at the margin),
	// never missed.
	count, cpus, memMB := 0, 0.0, 0
	for p := range e.adm.pending {
		left := p.n
		if len(p.names) > 0 {
			left = 0
			for _, name := range p.names {
				// A record of that name not suspended is counted in the totals.
				if sb, err := e.st.GetSandbox(ctx, name); err != nil || sb.State == api.StateSuspended {
					left++
				}
			}
		}
		if p.count > 0 {
			count += left
		}
		cpus += p.cpus * float64(left)
		memMB += p.memMB * left
	}
	u, err := e.st.SandboxUsage(ctx, e.cfg.Node)
	if err != nil {
		return nil, err
	}
	count, cpus, memMB = count+u.Count, cpus+u.CPUs, memMB+u.MemoryMB
	if err := admitRule(e.cfg, e.capacity, d, count, cpus, memMB); err != nil {
		return nil, err
	}
	p := &d
	if e.adm.pending == nil {
		e.adm.pending = map[*demand]bool{}
	}
	e.adm.pending[p] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			e.adm.mu.Lock()
			delete(e.adm.pending, p)
			e.adm.mu.Unlock()
		})
	}, nil
}

// admitRule is the rule of admit over the current totals: count sandboxes
// (not warm), and the CPUs and MiB of every sandbox not suspended.
func admitRule(cfg Config, c capacity, d demand, count int, cpus float64, memMB int) error {
	if d.count > 0 && count+d.count > cfg.MaxSandboxes {
		return errdefs.New(errdefs.ErrCapacity, "%s: %d sandboxes exist and this host allows %d (max_sandboxes); delete some first", d.what, count, cfg.MaxSandboxes)
	}
	n := float64(d.n)
	if limit := float64(c.memMB) * cfg.MemoryOvercommit; float64(memMB)+n*float64(d.memMB) > limit {
		return errdefs.New(errdefs.ErrCapacity, "%s: the sandboxes not suspended have %d MiB of memory limits and %d more would pass this host's %.0f MiB (%d MiB allocatable × %g overcommit); suspend or delete some first", d.what, memMB, int(n)*d.memMB, limit, c.memMB, cfg.MemoryOvercommit)
	}
	if limit := c.cpus * cfg.CPUOvercommit; cpus+n*d.cpus > limit+1e-9 {
		return errdefs.New(errdefs.ErrCapacity, "%s: the sandboxes not suspended have %g CPUs and %g more would pass this host's %g (%.2f allocatable × %g overcommit); suspend or delete some first", d.what, cpus, n*d.cpus, limit, c.cpus, cfg.CPUOvercommit)
	}
	return nil
}

// admitSnapshot refuses a new memory snapshot when MaxSnapshots exist
// (forks' and suspends' own snapshots are not counted).
func (e *Engine) admitSnapshot(ctx context.Context) error {
	all, err := e.st.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	n := 0
	for _, sn := range all {
		if sn.State == "ready" && !sn.Fork && !sn.Suspend {
			n++
		}
	}
	if n >= e.cfg.MaxSnapshots {
		return errdefs.New(errdefs.ErrCapacity, "snapshot: %d snapshots exist and this host allows %d (max_snapshots); delete some first", n, e.cfg.MaxSnapshots)
	}
	return nil
}

// limitAll puts the allocatable CPUs and memory on the cgroup that holds
// every sandbox, so that together they cannot take the host's reserve.
func (e *Engine) limitAll() {
	if err := e.rt.LimitAll(e.capacity.cpus, int64(e.capacity.memMB)<<20); err != nil {
		e.log.Warn("cannot limit the sandboxes' parent cgroup; sandboxes together may use the host's reserve", "err", err)
	}
}

// Capacity describes what the host admits, for GET /v1/health.
func (e *Engine) Capacity() api.Capacity {
	return api.Capacity{
		HostCPUs: e.host.CPUs, HostMemoryMB: int(e.host.MemoryBytes >> 20),
		MaxSandboxCPUs: e.capacity.cpus, MaxSandboxMemoryMB: e.capacity.memMB,
		CPUOvercommit: e.cfg.CPUOvercommit, MemoryOvercommit: e.cfg.MemoryOvercommit,
		MaxSandboxes: e.cfg.MaxSandboxes, MaxSnapshots: e.cfg.MaxSnapshots,
	}
}
