package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// pool keeps warm sandboxes: booted ahead of requests from the default
// image and shape, each with its own layer and network namespace, nothing
// run in them yet. A create of that image and shape takes one (a record
// update and a hostname change, ~1 ms) instead of booting (~0.5 s), and the
// pool refills in the background. Warm sandboxes are records with Pooled
// set, so a restart of sbxd reattaches or removes them like any other.
type pool struct {
	e    *Engine
	size int

	mu    sync.Mutex
	ready []*store.Sandbox
	kick  chan struct{}
}

func newPool(e *Engine, size int) *pool {
	return &pool{e: e, size: size, kick: make(chan struct{}, 1)}
}

// defaultShape is the shape the pool keeps warm, if the default image
// exists.
func (p *pool) defaultShape(ctx context.Context) (shape, bool) {
	img, err := p.e.images.Get(ctx, disk.DefaultImage)
	if err != nil {
		return shape{}, false
	}
	return shape{img.ID, p.e.cfg.DefaultCPUs, p.e.cfg.DefaultMemoryMB, p.e.poolDiskMB()}, true
}

func shapeOf(sb *store.Sandbox) shape { return shape{sb.ImageID, sb.CPUs, sb.MemoryMB, sb.DiskMB} }

// ready counts the warm sandboxes waiting.
func (p *pool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// adopt adds a warm sandbox found running at start.
func (p *pool) adopt(sb *store.Sandbox) {
	p.mu.Lock()
	p.ready = append(p.ready, sb)
	p.mu.Unlock()
}

func (p *pool) start() {
	if p.size <= 0 {
		// Warm sandboxes of an earlier sbxd with a larger pool go.
		if p.count() > 0 {
			p.e.bg.Add(1)
			go func() {
				defer p.e.bg.Done()
				p.trim(p.e.ctx)
			}()
		}
		return
	}
	p.e.bg.Add(1)
	go p.run()
	p.refill()
}

// refill asks the pool's goroutine to top the pool up.
func (p *pool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *pool) run() {
	defer p.e.bg.Done()
	ctx := p.e.ctx
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-tick.C:
		}
		p.fill(ctx)
	}
}

// fill boots warm sandboxes until the pool holds size of the default
// shape, and drops warm sandboxes of other shapes (an image rebuilt).
func (p *pool) fill(ctx context.Context) {
	want, ok := p.defaultShape(ctx)
	if !ok {
		return
	}
	p.mu.Lock()
	var stale []*store.Sandbox
	keep := p.ready[:0]
	for _, sb := range p.ready {
		if shapeOf(sb) == want {
			keep = append(keep, sb)
		} else {
			stale = append(stale, sb)
		}
	}
	p.ready = keep
	n := len(p.ready)
	p.mu.Unlock()
	for _, sb := range stale {
		p.discard(ctx, sb)
	}
	n -= p.trim(ctx)
	for ; n < p.size && ctx.Err() == nil; n++ {
		sb := &store.Sandbox{
			ID: newID(), Node: p.e.cfg.Node, State: api.StateCreating, Image: disk.DefaultImage, ImageID: want.imageID,
			CPUs: want.cpus, MemoryMB: want.memoryMB, DiskMB: want.diskMB, Pooled: true,
			// Offline until claimed: the claim gives it the caller's rules.
			Network: api.NetworkRules{Allow: []string{}, Deny: []string{}, Connect: []string{}},
		}
		sb.Name = sb.ID
		release, err := p.e.admit(ctx, demand{what: "warm pool", n: 1, names: []string{sb.Name}, cpus: want.cpus, memMB: want.memoryMB})
		if err != nil {
			p.e.log.Debug("warm pool: not refilled", "err", err)
			return
		}
		err = p.e.createCold(ctx, sb)
		release()
		if err != nil {
			if ctx.Err() == nil {
				p.e.log.Error("warm pool: boot failed", "err", err)
			}
			return
		}
		p.ready1(ctx, sb)
	}
}

// ready1 puts a warm sandbox that has just booted into the pool, unless a
// delete (which waits for the boot, by its id) removed it meanwhile: it
// waits for whatever holds the sandbox's lock, then looks.
func (p *pool) ready1(ctx context.Context, sb *store.Sandbox) {
	wctx, cancel := context.WithTimeout(ctx, DeleteWait+time.Minute)
	defer cancel()
	unlock, err := p.e.lockID(wctx, sb.ID, sb.ID, "warm pool", lockOrWait)
	if err != nil {
		p.e.log.Warn("warm pool: a booted sandbox was held too long; not pooled", "sandbox", sb.ID, "err", err)
		return
	}
	defer unlock()
	cur, err := p.e.getLocked(ctx, sb.ID)
	if err != nil || !cur.Pooled {
		return
	}
	p.mu.Lock()
	p.ready = append(p.ready, sb)
	p.mu.Unlock()
}

// trim discards the warm sandboxes beyond the pool's size (adopted from
// an earlier sbxd run with a larger --pool) and returns how many.
func (p *pool) trim(ctx context.Context) int {
	p.mu.Lock()
	var extra []*store.Sandbox
	if len(p.ready) > max(p.size, 0) {
		extra = append(extra, p.ready[max(p.size, 0):]...)
		p.ready = p.ready[:max(p.size, 0)]
	}
	p.mu.Unlock()
	for _, sb := range extra {
		p.discard(ctx, sb)
	}
	return len(extra)
}

// remove forgets warm sandbox id; refill boots a replacement.
func (p *pool) remove(id string, refill bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, sb := range p.ready {
		if sb.ID == id {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			break
		}
	}
	if refill {
		p.refill()
	}
}

func (p *pool) discard(ctx context.Context, sb *store.Sandbox) {
	if err := p.e.deleteSandbox(context.WithoutCancel(ctx), sb, 0); err != nil && !errdefs.IsNotFound(err) {
		p.e.log.Error("warm pool: discard", "sandbox", sb.ID, "err", err)
	}
}

// claim gives a warm sandbox of shape s the identity of want (name, env,
// labels) and returns it, or returns nil when none is ready.
func (p *pool) claim(ctx context.Context, s shape, want *store.Sandbox) (*store.Sandbox, error) {
	for {
		p.mu.Lock()
		var sb *store.Sandbox
		for i, c := range p.ready {
			if shapeOf(c) == s {
				sb = c
				p.ready = append(p.ready[:i], p.ready[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		if sb == nil {
			return nil, nil
		}
		p.refill()
		got, err := p.take(ctx, sb, want)
		if err == nil {
			return got, nil
		}
		if errors.Is(err, errdefs.ErrNameTaken) {
			p.adopt(sb)
			return nil, err
		}
		// A warm sandbox that no longer answers is dropped; try the next.
		p.e.log.Warn("warm pool: dropping a sandbox that failed its claim", "sandbox", sb.ID, "err", err)
		p.discard(ctx, sb)
	}
}

func (p *pool) take(ctx context.Context, sb *store.Sandbox, want *store.Sandbox) (*store.Sandbox, error) {
	unlock, err := p.e.lockID(ctx, sb.ID, sb.ID, "claim", lockOrConflict)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := p.e.setHostname(ctx, sb, want.Name); err != nil {
		return nil, err
	}
	// Nothing ran in a warm sandbox: its disk now is the fresh disk, v0
	// (no snapshot of it: this is the fast create path).
	if err := p.e.recordV0(ctx, sb, false); err != nil {
		return nil, err
	}
	claimed := *sb
	claimed.Name = want.Name
	claimed.Env = want.Env
	claimed.Labels = want.Labels
	claimed.Network = want.Network
	claimed.TimeoutMS, claimed.KeepAlive = want.TimeoutMS, want.KeepAlive
	claimed.RecoveryIntervalMS = want.RecoveryIntervalMS
	claimed.Owner = want.Owner
	claimed.Pooled = false
	claimed.State = api.StateRunning
	claimed.CreateTime = time.Now().UTC()
	p.e.net.Rename(sb.ID, want.Name)
	if err := p.e.net.Update(sb.ID, p.e.rulesOf(&claimed)); err != nil {
		_ = p.e.setHostname(context.WithoutCancel(ctx), sb, sb.ID)
		p.e.net.Rename(sb.ID, sb.ID)
		return nil, err
	}
	if err := p.e.st.UpdateSandbox(context.WithoutCancel(ctx), &claimed); err != nil {
		_ = p.e.setHostname(context.WithoutCancel(ctx), sb, sb.ID)
		p.e.net.Rename(sb.ID, sb.ID)
		_ = p.e.net.Update(sb.ID, p.e.rulesOf(sb))
		return nil, err
	}
	return &claimed, nil
}
