package engine

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/runtime"
)

// reconcile makes the host match the records after sbxd starts: running
// sandboxes are reattached (a paused one, left by an interrupted operation,
// is resumed), sandboxes whose container is gone are marked stopped,
// interrupted creates are rolled back and interrupted deletes finished, and
// containers, layers, namespaces and directories that no record owns are
// removed. Nothing half-made stays listed.
func (e *Engine) reconcile(ctx context.Context) error {
	recs, err := e.st.ListSandboxes(ctx, storeAll)
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
	known := map[string]bool{}
	suspended := map[string]bool{}
	imageIDs := map[string]bool{}
	for _, sb := range recs {
		switch sb.State {
		case api.StateCreating, api.StateDeleting:
			e.log.Info("reconcile: removing a sandbox whose create or delete was interrupted", "sandbox", sb.Name, "id", sb.ID, "state", sb.State)
			e.removeAll(ctx, sb.ID)
			if err := e.st.DeleteSandbox(ctx, sb.ID); err != nil {
				return err
			}
			continue
		case api.StateRunning, api.StatePaused:
			st := status[sb.ID]
			if st == runtime.StatusPaused {
				e.log.Info("reconcile: resuming a sandbox left paused", "sandbox", sb.Name)
				if err := e.rt.Resume(ctx, sb.ID); err == nil {
					st = runtime.StatusRunning
				}
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
						return err
					}
				}
				if err := e.rt.Attach(sb.ID, e.bundleDir(sb.ID)); err != nil {
					e.log.Warn("reconcile: init output", "sandbox", sb.Name, "err", err)
				}
				e.watch(sb.ID)
				// An agent left quiesced by a capture a crash cut short
				// listens again on SIGUSR1.
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if e.agentFor(sb).Ping(pctx) != nil {
					_ = e.rt.Signal(ctx, sb.ID, syscall.SIGUSR1)
				}
				cancel()
				if sb.Pooled {
					e.pool.adopt(sb)
				}
				e.log.Info("reconcile: reattached", "sandbox", sb.Name, "id", sb.ID)
				break
			}
			reason := "stopped while sbxd was not running"
			if e.rt.OOMKilled(sb.ID) {
				reason = "oom_killed: the sandbox passed its memory limit"
			}
			if sb.Pooled {
				e.removeAll(ctx, sb.ID)
				if err := e.st.DeleteSandbox(ctx, sb.ID); err != nil {
					return err
				}
				continue
			}
			e.log.Info("reconcile: marking stopped", "sandbox", sb.Name, "reason", reason)
			if err := e.stopLocked(ctx, sb, reason); err != nil {
				return err
			}
		case api.StateSuspended:
			// Its memory and disk are in the blob store; nothing of it runs
			// or stays on the host but the local copy of its memory image.
			if st, ok := status[sb.ID]; ok && st != runtime.StatusMissing {
				if err := e.rt.Delete(ctx, sb.ID); err != nil {
					return err
				}
			}
			if err := e.net.Delete(sb.ID); err != nil {
				return err
			}
			if err := e.layers.Remove(sb.ID); err != nil {
				return err
			}
			suspended[sb.ID] = true
		case api.StateStopped:
			if st, ok := status[sb.ID]; ok && st != runtime.StatusMissing {
				if err := e.rt.Delete(ctx, sb.ID); err != nil {
					return err
				}
			}
			if err := e.net.Delete(sb.ID); err != nil {
				return err
			}
		}
		known[sb.ID] = true
		imageIDs[sb.ImageID] = true
		if err := e.layers.EmptyTrash(sb.ID); err != nil {
			return err
		}
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
	// Memory images of captures a crash cut short.
	if des, err := os.ReadDir(e.snapshotsDir()); err == nil {
		for _, de := range des {
			_ = os.RemoveAll(filepath.Join(e.snapshotsDir(), de.Name()))
		}
	}
	return e.images.GC(ctx, imageIDs, true)
}
