package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// A suspended sandbox holds no CPU, memory, network namespace or writable
// layer: its memory image and disk are a snapshot (Snapshot.Suspend),
// named by the record's SuspendSnapshot. The disk is in the blob store
// when the suspend answers; the memory image is the snapshot's hot image
// on this node, stored in the blob store in the background (hot.go): from
// its store_time on, any sbxd that reaches the same store and blob store
// can wake it. A resume here restores from the hot image while this node
// keeps it. (sbxd before hot images kept a suspend cache, suspendCache;
// a resume still reads one it finds.)

// wakeKeyRE is the form of an event key.
var wakeKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:/-]{1,256}$`)

// validateWakeKey checks an event key given as field.
func validateWakeKey(field, key string) error {
	if !wakeKeyRE.MatchString(key) {
		return errdefs.Invalid(field, "%q: want 1 to 256 of A-Z a-z 0-9 . _ : / -", key)
	}
	return nil
}

// suspendOp is the journal entry of a suspend or a resume.
type suspendOp struct {
	Snapshot string `json:"snapshot"`
	// WakeOn is the suspend's wake key: a recovery that completes the
	// suspend records it (entries written before it existed have none).
	WakeOn string `json:"wake_on,omitempty"`
	// Reason is the suspended sandbox's state_reason ("" for a suspend
	// asked by a user or the idle timeout; "spending_limit: ..." for one
	// of a key over its daily limit): a recovery that completes the
	// suspend records it too.
	Reason string `json:"reason,omitempty"`
}

func (e *Engine) suspendCache(id string) string {
	return filepath.Join(e.cfg.DataDir, "suspended", id)
}

// suspendCacheReady marks a cache dir whose image is whole (the file holds
// the snapshot id).
const suspendCacheReady = ".ready"

// Suspend captures a running sandbox's memory and disk at one paused
// instant, stores the disk in the blob store (the memory image follows in
// the background, hot.go), and releases its container,
// network namespace and writable layer; it becomes suspended. With
// wake_on, POST /v1/events/{key} resumes it; an event already waiting on
// that key (posted before) resumes it at once. Suspending a suspended
// sandbox only changes its wake_on (none given keeps it).
//
// Errors: ErrSandboxNotFound; ErrInvalidArgument (wake_on); ErrHasVolume;
// ErrConflict (not running, or another operation runs); ErrSuspendFailed
// (nothing changed: the sandbox runs on).
func (e *Engine) Suspend(ctx context.Context, idOrName string, req api.SuspendRequest, progress func(string)) (*store.Sandbox, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if req.WakeOn != "" {
		if err := validateWakeKey("wake_on", req.WakeOn); err != nil {
			return nil, err
		}
	}
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "suspend", lockOrWait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if sb.State == api.StateSuspended {
		// A retried suspend keeps the key it was suspended with; a new key
		// replaces it.
		if req.WakeOn == "" || req.WakeOn == sb.WakeOn {
			return sb, nil
		}
		sb.WakeOn = req.WakeOn
		if err := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
			return nil, err
		}
		e.deliverPending(ctx, sb)
		return sb, nil
	}
	if err := snapshotable(sb, "suspend"); err != nil {
		return nil, err
	}
	return e.suspendLocked(context.WithoutCancel(ctx), sb, req.WakeOn, "", progress)
}

// suspendLocked suspends sb, which runs; the caller holds its lock.
// reason becomes its state_reason in the same record update that makes it
// suspended ("" for none; see suspendOp.Reason).
func (e *Engine) suspendLocked(ctx context.Context, sb *store.Sandbox, wakeOn, reason string, progress func(string)) (*store.Sandbox, error) {
	if progress == nil {
		progress = func(string) {}
	}
	start := time.Now()
	failed := func(err error) error {
		if derr := deletedDuring(sb, "suspend", err); derr != nil {
			return derr
		}
		return fmt.Errorf("suspend %s: %v: %w", sb.Name, err, failClass(err, errdefs.ErrSuspendFailed))
	}
	ctx, release := e.withLease(ctx)
	defer release()
	// A suspended sandbox keeps nothing on this node: its checkpoints
	// must be in the blob store first (those that never can be are
	// damaged, and lost).
	if err := e.storePending(ctx, sb.ID); err != nil {
		return nil, failed(err)
	}
	id := newSnapshotID()
	opID := "suspend-" + sb.ID
	data, _ := json.Marshal(suspendOp{Snapshot: id, WakeOn: wakeOn, Reason: reason})
	if err := e.st.PutOp(ctx, &store.Op{ID: opID, Node: e.cfg.Node, SandboxID: sb.ID, Kind: "suspend", Data: data}); err != nil {
		return nil, failed(err)
	}
	dir := filepath.Join(e.snapshotsDir(), "tmp-"+id)
	c, err := e.captureLive(ctx, sb, dir, progress, true)
	if err != nil {
		_ = e.st.DeleteOp(ctx, opID)
		return nil, failed(err)
	}
	// From here the sandbox is paused: it either ends suspended or runs on.
	hold := e.holdHot(id)
	defer hold()
	undo := func() {
		e.runOn(ctx, sb, true, "a failed suspend")
		os.RemoveAll(dir)
		_ = e.removeSnapshot(ctx, id)
		_ = e.st.DeleteOp(ctx, opID)
	}
	progress(fmt.Sprintf("captured (paused %d ms); its memory image is stored in the background", c.pausedMS))
	// The memory image is the snapshot's hot image, recorded at once and
	// stored in the blob store in the background (hot.go): a resume here
	// restores from it.
	sn := newSnapshotRecord(sb, id, c, snapshotKind{name: "suspend", suspend: true})
	if err := e.recordHot(ctx, sn, c); err != nil {
		undo()
		return nil, failed(err)
	}
	e.fault("suspend:stored")
	if cl, ok := e.distributesImages(); ok {
		// In a cluster, another node may have to wake it, this one being
		// lost: its memory image, and its image's root filesystem, go to
		// the blob store while it is still paused here. If the blob store
		// fails, the suspend fails and the sandbox runs on.
		progress("storing its memory image and its image in the blob store")
		err := e.storeHot(ctx, sn)
		if err == nil {
			err = e.publishImage(ctx, cl, sb.ImageID)
		}
		if err != nil {
			undo()
			return nil, failed(fmt.Errorf("the blob store: %w", err))
		}
	}
	steps := stepTimes{}
	if err := e.finishSuspend(ctx, sb, sn.ID, wakeOn, reason, &steps); err != nil {
		return nil, failed(err)
	}
	progress(steps.line(api.ReleaseStepsPrefix))
	_ = e.st.DeleteOp(ctx, opID)
	e.log.Info("suspended", "sandbox", sb.Name, "id", sb.ID, "ms", time.Since(start).Milliseconds(),
		"paused_ms", c.pausedMS, "memory_bytes", sn.MemoryBytes, "stored_bytes", sn.StoredBytes, "wake_on", wakeOn)
	progress(fmt.Sprintf("suspended in %d ms", time.Since(start).Milliseconds()))
	e.deliverPending(ctx, sb)
	return sb, nil
}

// finishSuspend releases what a captured sandbox holds on the host and
// records it suspended on snapshot snapID, with wake key wakeOn and
// state_reason reason. Each step is idempotent (a recovery repeats them).
// steps, when not nil, gets each step's time (api.ReleaseStepsPrefix).
func (e *Engine) finishSuspend(ctx context.Context, sb *store.Sandbox, snapID, wakeOn, reason string, steps *stepTimes) error {
	t := time.Now()
	step := func(name string) {
		if steps != nil {
			steps.add(name, time.Since(t))
		}
		t = time.Now()
	}
	e.unwatch(sb.ID)
	e.dropAgent(sb.ID)
	e.closePortConns(sb.ID)
	if err := e.rt.Delete(ctx, sb.ID); err != nil {
		return err
	}
	step("runsc delete")
	if err := e.net.Delete(sb.ID); err != nil {
		return err
	}
	step("netns")
	if err := e.layers.Remove(sb.ID); err != nil {
		return err
	}
	step("layer")
	// Its checkpoints are in the blob store (suspendLocked stored them).
	e.dropSnapshots(sb.ID)
	step("checkpoint snapshots")
	sb.State, sb.StateReason = api.StateSuspended, reason
	sb.SuspendSnapshot, sb.WakeOn, sb.SuspendTime = snapID, wakeOn, time.Now().UTC()
	// Its suspend image is newer than its recovery snapshot.
	drop := e.dropRecovery(ctx, sb)
	err := e.st.UpdateSandbox(ctx, sb)
	step("record")
	if err == nil {
		drop()
	}
	return err
}

// runOn makes a sandbox that was captured run and answer again after
// what (for the log): its container resumes when paused, and its agent,
// quiesced for the capture, is waited for (awaitAgent: it wakes by itself
// when the checkpoint ended, else on SIGUSR1).
func (e *Engine) runOn(ctx context.Context, sb *store.Sandbox, paused bool, what string) {
	if paused {
		if err := e.rt.Resume(ctx, sb.ID); err != nil {
			e.log.Error("resume after "+what, "sandbox", sb.Name, "err", err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.awaitAgent(wctx, sb); err != nil {
		e.log.Error("agent after "+what, "sandbox", sb.Name, "err", err)
	}
}

// Resume restores a suspended sandbox, running, with its processes,
// network rules and name. A running sandbox is returned as it is.
//
// Errors: ErrSandboxNotFound; ErrConflict (stopped, or another operation
// runs and ctx ends first); ErrResumeFailed (it stays suspended).
func (e *Engine) Resume(ctx context.Context, idOrName string, progress func(string)) (*store.Sandbox, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if sb.State == api.StateRunning {
		return sb, nil
	}
	sb, unlock, err := e.lockFound(ctx, sb, "resume", lockOrWait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	switch sb.State {
	case api.StateRunning:
		return sb, nil
	case api.StateSuspended:
		return sb, e.resumeLocked(context.WithoutCancel(ctx), sb, progress)
	}
	return nil, stateForbids(sb, "resume (only a suspended sandbox resumes)")
}

// resumeLocked restores sb (suspended) and records it running; the caller
// holds its lock. On failure sb stays suspended and nothing is left.
func (e *Engine) resumeLocked(ctx context.Context, sb *store.Sandbox, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	start := time.Now()
	failed := func(err error) error {
		return fmt.Errorf("resume %s: %v: %w", sb.Name, err, errdefs.ErrResumeFailed)
	}
	if err := e.checkSpend(ctx, sb.Owner, sb.CPUs, sb.MemoryMB); err != nil {
		return err
	}
	admitted, err := e.admit(ctx, demand{what: "resume", n: 1, names: []string{sb.Name}, cpus: sb.CPUs, memMB: sb.MemoryMB})
	if err != nil {
		return err
	}
	defer admitted()
	if cl, ok := e.st.(store.Cluster); ok && e.cfg.Node != "" {
		if err := e.claim(ctx, cl, sb); err != nil {
			return err
		}
	}
	sn, err := e.st.GetSnapshot(ctx, sb.SuspendSnapshot)
	if err != nil {
		return failed(fmt.Errorf("its snapshot %s: %w", sb.SuspendSnapshot, err))
	}
	opID := "resume-" + sb.ID
	data, _ := json.Marshal(suspendOp{Snapshot: sn.ID})
	if err := e.st.PutOp(ctx, &store.Op{ID: opID, Node: e.cfg.Node, SandboxID: sb.ID, Kind: "resume", Data: data}); err != nil {
		return failed(err)
	}
	undo := func() {
		e.teardown(ctx, sb.ID)
		_ = e.layers.Remove(sb.ID)
		_ = e.st.DeleteOp(ctx, opID)
	}
	imageDir, diskM, release, err := e.snapshotInputs(ctx, sb, sn)
	if err != nil {
		undo()
		return failed(err)
	}
	defer release()
	tImage := time.Now()
	progress("restoring")
	what := "resumed"
	if imageDir == "" {
		what = "boot" // a lost node's sandbox, on a checkpoint's disk
	}
	if err := e.start(ctx, sb, startFrom{image: imageDir, disk: diskM, background: e.cfg.BackgroundRestore, what: what, report: progress}); err != nil {
		undo()
		return failed(err)
	}
	e.fault("resume:restored")
	reason := ""
	if strings.HasPrefix(sb.StateReason, recoveredPrefix) {
		// Its user is told, while it runs, what the recovery lost.
		reason = sb.StateReason
	}
	sb.State, sb.StateReason = api.StateRunning, reason
	sb.SuspendSnapshot, sb.WakeOn, sb.SuspendTime = "", "", time.Time{}
	sb.Node = e.cfg.Node
	if err := e.st.UpdateSandbox(ctx, sb); err != nil {
		undo()
		return failed(err)
	}
	e.touch(sb.ID)
	_ = os.RemoveAll(e.suspendCache(sb.ID))
	_ = e.removeSnapshot(ctx, sn.ID)
	_ = e.st.DeleteOp(ctx, opID)
	e.log.Info("resumed", "sandbox", sb.Name, "id", sb.ID, "ms", time.Since(start).Milliseconds(),
		"image_ms", tImage.Sub(start).Milliseconds(), "image_local", !strings.HasPrefix(filepath.Base(imageDir), "tmp-"))
	progress(fmt.Sprintf("resumed in %d ms", time.Since(start).Milliseconds()))
	return nil
}

// snapshotInputs is what restoring sb from snapshot sn needs: the dir of
// its memory image (see suspendImage; release ends its use) and its disk
// manifest.
func (e *Engine) snapshotInputs(ctx context.Context, sb *store.Sandbox, sn *store.Snapshot) (imageDir string, diskM *disk.Manifest, release func(), err error) {
	var sh sandboxShape
	if json.Unmarshal(sn.Shape, &sh) == nil && sh.DiskOnly {
		// A checkpoint's disk, no memory: it boots cold ("" image).
		if diskM, err = e.snapshotDisk(ctx, sn); err != nil {
			return "", nil, nil, fmt.Errorf("its disk manifest: %w", err)
		}
		return "", diskM, func() {}, nil
	}
	imageDir, release, err = e.suspendImage(ctx, sb, sn)
	if err != nil {
		return "", nil, nil, err
	}
	if err := snapshot.CheckSpec(imageDir, imageSpecVersion); err != nil {
		release()
		return "", nil, nil, err
	}
	if diskM, err = e.snapshotDisk(ctx, sn); err != nil {
		release()
		return "", nil, nil, fmt.Errorf("its disk manifest: %w", err)
	}
	return imageDir, diskM, release, nil
}

// suspendImage is the local dir of the memory image of sb's snapshot sn:
// this node's suspend cache when it holds the snapshot's image whole, else
// sn's hot image or a copy fetched from the blob store (memoryImage;
// release ends the use).
func (e *Engine) suspendImage(ctx context.Context, sb *store.Sandbox, sn *store.Snapshot) (string, func(), error) {
	cache := e.suspendCache(sb.ID)
	if b, err := os.ReadFile(filepath.Join(cache, suspendCacheReady)); err == nil && string(b) == sn.ID {
		return cache, func() {}, nil
	}
	dir, _, release, err := e.memoryImage(ctx, sn)
	return dir, release, err
}

// recoverSuspend finishes or rolls back a suspend or resume that a crash
// interrupted (recoverOps, before reconcile).
func (e *Engine) recoverSuspend(ctx context.Context, op *store.Op) error {
	var so suspendOp
	if err := json.Unmarshal(op.Data, &so); err != nil {
		return e.recoverDamagedSuspend(ctx, op, err)
	}
	done := func() error { return e.st.DeleteOp(ctx, op.ID) }
	sb, err := e.st.GetSandbox(ctx, op.SandboxID)
	if err != nil {
		if so.Snapshot != "" && op.Kind == "suspend" {
			_ = e.removeSnapshot(ctx, so.Snapshot)
		}
		return done()
	}
	_ = os.RemoveAll(filepath.Join(e.snapshotsDir(), "tmp-"+so.Snapshot))
	switch op.Kind {
	case "suspend":
		recorded := false
		if sn, err := e.st.GetSnapshot(ctx, so.Snapshot); err == nil && sn.Suspend {
			recorded = true
		}
		switch {
		case sb.State == api.StateSuspended:
			// Recorded: only the host's leftovers may remain.
			e.log.Info("recover: finishing a suspend", "sandbox", sb.Name)
			if err := e.finishSuspend(ctx, sb, sb.SuspendSnapshot, sb.WakeOn, sb.StateReason, nil); err != nil {
				return err
			}
		case recorded:
			// Memory and disk are stored: the suspend completes (the
			// container, paused since the capture, goes).
			e.log.Info("recover: completing a suspend whose memory and disk were stored", "sandbox", sb.Name)
			wakeOn := so.WakeOn
			if wakeOn == "" {
				wakeOn = sb.WakeOn
			}
			if err := e.finishSuspend(ctx, sb, so.Snapshot, wakeOn, so.Reason, nil); err != nil {
				return err
			}
		default:
			// Not stored: the sandbox runs on (reconcile resumes a paused
			// container and wakes its agent).
			e.log.Info("recover: rolling back a suspend", "sandbox", sb.Name)
		}
	case "resume":
		if sb.State == api.StateSuspended {
			e.log.Info("recover: rolling back a resume; the sandbox stays suspended", "sandbox", sb.Name)
			if err := e.dropSuspendedHost(ctx, sb.ID); err != nil {
				return err
			}
		} else if so.Snapshot != "" {
			_ = e.removeSnapshot(ctx, so.Snapshot)
			_ = os.RemoveAll(e.suspendCache(sb.ID))
		}
	}
	return done()
}

// dropSuspendedHost removes what a cut resume may have made on the host
// for suspended sandbox id (container, network namespace, writable layer).
func (e *Engine) dropSuspendedHost(ctx context.Context, id string) error {
	_ = e.rt.Delete(ctx, id)
	if err := e.net.Delete(id); err != nil {
		return err
	}
	return e.layers.Remove(id)
}

// recoverDamagedSuspend finishes a suspend or resume whose journal entry
// cannot be read (derr): which snapshot it was is lost. The sandbox stays
// as its record has it: suspended on its snapshot (what the host still
// holds of it goes), or running (reconcile resumes a paused container and
// wakes its agent). Its suspend snapshots that the record does not name
// (stored by the cut suspend, or left by the cut resume) are removed: no
// sandbox uses them, and they would pin their blobs for ever.
func (e *Engine) recoverDamagedSuspend(ctx context.Context, op *store.Op, derr error) error {
	e.log.Error("recover: unreadable journal entry; the sandbox stays as recorded", "op", op.ID, "kind", op.Kind, "err", derr)
	keep := ""
	if sb, err := e.st.GetSandbox(ctx, op.SandboxID); err == nil {
		if sb.State == api.StateSuspended {
			keep = sb.SuspendSnapshot
			e.log.Info("recover: the sandbox stays suspended", "sandbox", sb.Name)
			if err := e.dropSuspendedHost(ctx, sb.ID); err != nil {
				return err
			}
		} else {
			_ = os.RemoveAll(e.suspendCache(sb.ID))
		}
	}
	sns, err := e.st.ListSnapshots(ctx, op.SandboxID)
	if err != nil {
		return err
	}
	for _, sn := range sns {
		if sn.Suspend && sn.ID != keep && sn.SandboxID == op.SandboxID {
			e.log.Info("recover: removing a suspend snapshot no sandbox uses", "snapshot", sn.ID)
			if err := e.removeSnapshot(ctx, sn.ID); err != nil && !errdefs.IsNotFound(err) {
				return err
			}
		}
	}
	return e.st.DeleteOp(ctx, op.ID)
}
