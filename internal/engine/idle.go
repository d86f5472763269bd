package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
)

// busy marks a request on sandbox id; the returned func ends it.
func (e *Engine) busy(id string) func() {
	in := e.liveInstance(id)
	in.mu.Lock()
	in.inflight++
	in.lastActive = time.Now()
	in.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			in.mu.Lock()
			in.inflight--
			in.lastActive = time.Now()
			in.mu.Unlock()
		})
	}
}

// touch records activity on sandbox id now.
func (e *Engine) touch(id string) { e.busy(id)() }

// idleFor is how long sandbox id has had no request in flight (0 while one
// is); a sandbox with no request since sbxd started counts from start (the
// later of sbxd's start and its record's last change).
func (e *Engine) idleFor(id string, start time.Time) time.Duration {
	last := start
	if in := e.peekInstance(id); in != nil {
		in.mu.Lock()
		inflight, active := in.inflight, in.lastActive
		in.mu.Unlock()
		if inflight > 0 {
			return 0
		}
		if !active.IsZero() {
			last = active
		}
	}
	return time.Since(last)
}

// idleLoop suspends running sandboxes whose timeout_ms passed without
// activity; with keep_alive_while_running a process running in the
// sandbox (any the agent started) counts as activity.
func (e *Engine) idleLoop() {
	defer e.bg.Done()
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		sbs, err := e.st.ListSandboxes(e.ctx, storeAll)
		if err != nil {
			continue
		}
		for _, sb := range sbs {
			if sb.Pooled || sb.State != api.StateRunning || sb.TimeoutMS <= 0 {
				continue
			}
			since := start
			if sb.UpdateTime.After(since) {
				since = sb.UpdateTime
			}
			if e.idleFor(sb.ID, since) < time.Duration(sb.TimeoutMS)*time.Millisecond {
				continue
			}
			if sb.KeepAlive && e.hasRunning(sb.ID) {
				continue
			}
			unlock, err := e.lockID(e.ctx, sb.ID, sb.Name, "suspend", lockOrConflict)
			if err != nil {
				continue // an operation runs: not idle
			}
			cur, err := e.getLocked(e.ctx, sb.ID)
			if err == nil && cur.State == api.StateRunning && len(cur.Volumes) == 0 {
				e.log.Info("idle: suspending", "sandbox", cur.Name, "timeout_ms", cur.TimeoutMS)
				if _, err := e.suspendLocked(context.WithoutCancel(e.ctx), cur, cur.WakeOn, nil); err != nil {
					e.log.Warn("idle suspend failed", "sandbox", cur.Name, "err", err)
					e.touch(cur.ID) // try again after another timeout
				}
			}
			unlock()
		}
	}
}

// hasRunning reports whether a process started by the agent runs in
// sandbox id.
func (e *Engine) hasRunning(id string) bool {
	sb, err := e.st.GetSandbox(e.ctx, id)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	ps, err := e.agentFor(sb).Ps(ctx)
	if err != nil {
		return true // unknown: do not suspend on a guess
	}
	for _, p := range ps {
		if p.Exit == nil {
			return true
		}
	}
	return false
}
