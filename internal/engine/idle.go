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

// claimIdle marks sandbox id as being suspended for idleness, when it has
// had no request in flight for at least timeout (counted from start when it
// had none since); false when a request ran meanwhile. A request that
// begins after the claim sees it (idleSuspending) and waits for the suspend.
func (e *Engine) claimIdle(id string, start time.Time, timeout time.Duration) bool {
	in := e.liveInstance(id)
	in.mu.Lock()
	defer in.mu.Unlock()
	last := start
	if !in.lastActive.IsZero() {
		last = in.lastActive
	}
	if in.inflight > 0 || time.Since(last) < timeout {
		return false
	}
	in.idleSuspend = true
	return true
}

// releaseIdle ends claimIdle's mark.
func (e *Engine) releaseIdle(id string) {
	if in := e.peekInstance(id); in != nil {
		in.mu.Lock()
		in.idleSuspend = false
		in.mu.Unlock()
	}
}

// idleSuspending reports whether an idle suspend of sandbox id was decided
// before now (see claimIdle).
func (e *Engine) idleSuspending(id string) bool {
	in := e.peekInstance(id)
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.idleSuspend
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
		sbs, err := e.localSandboxes(e.ctx, storeAll)
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
			// Decided again under the lock, atomically with the count of
			// requests in flight: one that began since the check above
			// keeps the sandbox up; one that begins after the claim waits
			// for the suspend (see Exec) instead of failing in it.
			if err == nil && cur.State == api.StateRunning && len(cur.Volumes) == 0 &&
				e.claimIdle(cur.ID, since, time.Duration(cur.TimeoutMS)*time.Millisecond) {
				e.log.Info("idle: suspending", "sandbox", cur.Name, "timeout_ms", cur.TimeoutMS)
				if _, err := e.suspendLocked(context.WithoutCancel(e.ctx), cur, cur.WakeOn, "", nil); err != nil {
					e.log.Warn("idle suspend failed", "sandbox", cur.Name, "err", err)
					e.touch(cur.ID) // try again after another timeout
				}
				e.releaseIdle(cur.ID)
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
