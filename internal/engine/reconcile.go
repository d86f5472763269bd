package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/store"
)

// reconcile makes the host match the records after sbxd starts: running
// sandboxes are reattached (a paused one, left by an interrupted operation,
// is resumed), sandboxes whose container is gone are marked stopped,
// interrupted creates are rolled back and interrupted deletes finished, and
// containers, layers, namespaces and directories that no record owns are
// removed. Nothing half-made stays listed.
func (e *Engine) reconcile(ctx context.Context) error {
	recs, err := e.localSandboxes(ctx, storeAll)
	if err != nil {
		return err
	}
	conts, err := e.rt.List(ctx)
	if err != nil {
		return err
	}
	status := map[string]runtime.Status{}
	for _, c := range conts {
		status[c.ID] = c.Status
	}
	// Each sandbox is reconciled on its own, ReconcileWorkers at a time: a
	// sandbox left paused waits on runsc and on its agent, and one that
	// hangs (each runsc call has its deadline) must not hold up the others.
	results := make([]reconciled, len(recs))
	forEachLimit(len(recs), ReconcileWorkers, func(i int) {
		results[i] = e.reconcileSandbox(ctx, recs[i], status)
		if results[i].err != nil {
			e.log.Error("reconcile: sandbox", "sandbox", recs[i].Name, "id", recs[i].ID, "err", results[i].err)
		}
	})
	known := map[string]bool{}
	suspended := map[string]bool{}
	imageIDs := map[string]bool{}
	var errs []error
	for i, r := range results {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: %w", recs[i].Name, r.err))
			continue
		}
		if r.known {
			known[recs[i].ID] = true
			imageIDs[recs[i].ImageID] = true
		}
		if r.suspended {
			suspended[recs[i].ID] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, c := range conts {
		if !known[c.ID] {
			e.log.Info("reconcile: removing orphan container", "id", c.ID)
			e.removeAll(ctx, c.ID)
		}
	}
	// The firewall for the sandboxes reattached; interfaces and namespaces
	// no running sandbox owns go.
	if err := e.net.Start(); err != nil {
		return err
	}
	if des, err := os.ReadDir(filepath.Dir(e.suspendCache("x"))); err == nil {
		for _, de := range des {
			if !suspended[de.Name()] {
				e.log.Info("reconcile: removing the memory image of a sandbox not suspended", "id", de.Name())
				_ = os.RemoveAll(e.suspendCache(de.Name()))
			}
		}
	}
	des, err := os.ReadDir(e.sandboxesDir)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(des))
	for _, de := range des {
		ids = append(ids, de.Name())
	}
	layerIDs, err := e.layers.IDs()
	if err != nil {
		return err
	}
	for _, id := range append(ids, layerIDs...) {
		if !known[id] {
			e.log.Info("reconcile: removing orphan directory", "id", id)
			e.removeAll(ctx, id)
		}
	}
	// Memory images of captures a crash cut short (hot images are
	// recoverHot's).
	if des, err := os.ReadDir(e.snapshotsDir()); err == nil {
		for _, de := range des {
			if de.Name() != "hot" {
				_ = os.RemoveAll(filepath.Join(e.snapshotsDir(), de.Name()))
			}
		}
	}
	return e.images.GC(ctx, imageIDs, true)
}

// ReconcileWorkers is how many sandboxes reconcile handles at once when
// sbxd starts. A sandbox left paused costs a runsc resume, a signal and a
// wait for its agent (a few hundred ms, up to runsc's QuickTimeout when it
// hangs); handled one after another, a host with 50 of them would not
// answer for minutes.
const ReconcileWorkers = 8

// reconciled is what reconcileSandbox did with one record.
type reconciled struct {
	known     bool  // the record stays: its container, layer and dirs are not orphans
	suspended bool  // it is suspended: its local memory image stays
	err       error // a store or runtime error; sbxd does not start
}

// reconcileSandbox makes the host match one record (see reconcile); status
// is what runsc reported for every container. It is safe to run for
// several sandboxes at once.
func (e *Engine) reconcileSandbox(ctx context.Context, sb *store.Sandbox, status map[string]runtime.Status) reconciled {
	switch sb.State {
	case api.StateCreating, api.StateDeleting:
		e.log.Info("reconcile: removing a sandbox whose create or delete was interrupted", "sandbox", sb.Name, "id", sb.ID, "state", sb.State)
		e.removeAll(ctx, sb.ID)
		return reconciled{err: e.st.DeleteSandbox(ctx, sb.ID)}
	case api.StateRunning, api.StatePaused:
		st := status[sb.ID]
		wasPaused := st == runtime.StatusPaused
		reason := "stopped while sbxd was not running"
		if wasPaused {
			e.log.Info("reconcile: resuming a sandbox left paused", "sandbox", sb.Name)
			if err := e.rt.Resume(ctx, sb.ID); err != nil {
				e.log.Warn("reconcile: resume failed", "sandbox", sb.Name, "err", err)
				reason = "left paused when sbxd stopped, and did not resume: " + err.Error()
			} else {
				st = runtime.StatusRunning
			}
		}
		if st == runtime.StatusUnresponsive {
			// Its sandbox exists but does not answer (stopped with
			// SIGSTOP, or overloaded): reattach it like a running one;
			// its own calls fail until it answers again, the others'
			// do not wait for it.
			e.log.Warn("reconcile: the sandbox does not answer; reattaching it as running", "sandbox", sb.Name)
			st = runtime.StatusRunning
		}
		netErr := error(nil)
		if st == runtime.StatusRunning && e.layers.Mounted(sb.ID) {
			netErr = e.attachNetwork(sb)
			if netErr != nil {
				e.log.Warn("reconcile: network lost; stopping", "sandbox", sb.Name, "err", netErr)
			}
		}
		if st == runtime.StatusRunning && e.layers.Mounted(sb.ID) && netErr == nil {
			if sb.State != api.StateRunning {
				sb.State = api.StateRunning
				if err := e.st.UpdateSandbox(ctx, sb); err != nil {
					return reconciled{err: err}
				}
			}
			if err := e.rt.Attach(sb.ID, e.bundleDir(sb.ID)); err != nil {
				e.log.Warn("reconcile: init output", "sandbox", sb.Name, "err", err)
			}
			e.watch(sb.ID)
			e.wakeAgent(ctx, sb, wasPaused)
			if sb.Pooled {
				e.pool.adopt(sb)
			}
			e.log.Info("reconcile: reattached", "sandbox", sb.Name, "id", sb.ID)
			break
		}
		if e.rt.OOMKilled(sb.ID) {
			reason = "oom_killed: the sandbox passed its memory limit"
		}
		if sb.Pooled {
			e.removeAll(ctx, sb.ID)
			return reconciled{err: e.st.DeleteSandbox(ctx, sb.ID)}
		}
		e.log.Info("reconcile: marking stopped", "sandbox", sb.Name, "reason", reason)
		if err := e.stopLocked(ctx, sb, reason); err != nil {
			return reconciled{err: err}
		}
	case api.StateSuspended:
		// Its memory and disk are in the blob store; nothing of it runs
		// or stays on the host but the local copy of its memory image.
		// Delete also when runsc lists no container: a resume that the
		// crash cut short can leave its processes without runsc state.
		if err := e.rt.Delete(ctx, sb.ID); err != nil {
			return reconciled{err: err}
		}
		if err := e.net.Delete(sb.ID); err != nil {
			return reconciled{err: err}
		}
		if err := e.layers.Remove(sb.ID); err != nil {
			return reconciled{err: err}
		}
		if err := e.layers.EmptyTrash(sb.ID); err != nil {
			return reconciled{err: err}
		}
		return reconciled{known: true, suspended: true}
	case api.StateStopped:
		if err := e.rt.Delete(ctx, sb.ID); err != nil {
			return reconciled{err: err}
		}
		if err := e.net.Delete(sb.ID); err != nil {
			return reconciled{err: err}
		}
	}
	if err := e.layers.EmptyTrash(sb.ID); err != nil {
		return reconciled{err: err}
	}
	return reconciled{known: true}
}

// wakeAgent makes the agent of a reattached sandbox answer: one left
// quiesced by a capture that a crash cut short listens again on SIGUSR1
// (an agent that is not quiesced ignores it). A sandbox left paused was
// almost surely cut in a capture, so it gets the signal first, without
// waiting out a ping of an agent that cannot answer; the others get it
// when their agent does not answer within AgentWakeTimeout.
func (e *Engine) wakeAgent(ctx context.Context, sb *store.Sandbox, wasPaused bool) {
	if wasPaused {
		if err := e.rt.Signal(ctx, sb.ID, syscall.SIGUSR1); err != nil {
			e.log.Warn("reconcile: wake the agent", "sandbox", sb.Name, "err", err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, AgentWakeTimeout)
	defer cancel()
	if err := e.agentFor(sb).WaitReady(pctx); err != nil {
		if wasPaused {
			e.log.Warn("reconcile: the agent does not answer", "sandbox", sb.Name, "err", err)
			return
		}
		if err := e.rt.Signal(ctx, sb.ID, syscall.SIGUSR1); err != nil {
			e.log.Warn("reconcile: wake the agent", "sandbox", sb.Name, "err", err)
		}
	}
}

// AgentWakeTimeout bounds how long reconcile waits for the agent of a
// reattached sandbox to answer before it signals it to listen again.
const AgentWakeTimeout = 2 * time.Second

// forEachLimit calls fn(0) … fn(n-1), at most limit of them at once, and
// returns when all have returned. A call that blocks holds up only its
// own worker.
func forEachLimit(n, limit int, fn func(i int)) {
	if limit < 1 {
		limit = 1
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}(i)
	}
	wg.Wait()
}
