package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// CheckpointID formats a checkpoint id: "v3".
func CheckpointID(seq int) string { return "v" + strconv.Itoa(seq) }

// parseCheckpointID parses "v3"; anything else is an unknown checkpoint.
func parseCheckpointID(id string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "v"))
	if !strings.HasPrefix(id, "v") || err != nil || n < 0 || strconv.Itoa(n) != id[1:] {
		return 0, errdefs.New(errdefs.ErrCheckpointNotFound, "no checkpoint %q: ids are v0, v1, ...", id)
	}
	return n, nil
}

func manifestRef(cp *store.Checkpoint) disk.ManifestRef {
	ref := make(disk.ManifestRef, len(cp.Manifest))
	for i, d := range cp.Manifest {
		ref[i] = blob.Digest(d)
	}
	return ref
}

func progressOr(p func(string)) func(string) {
	if p == nil {
		return func(string) {}
	}
	return p
}

// fault pauses at a named point when sbxd runs with SBX_FAULTS naming it
// (e.g. SBX_FAULTS=restore:swapped=60s): tests kill sbxd there to check
// crash recovery. It logs the point first, so a test can wait for it.
func (e *Engine) fault(point string) {
	d, ok := e.cfg.Faults[point]
	if !ok {
		return
	}
	e.log.Warn("fault point reached", "point", point, "sleep", d)
	time.Sleep(d)
}

// faultCtx is fault that ends early when ctx ends (a capture cancelled by
// a delete or its time limit).
func (e *Engine) faultCtx(ctx context.Context, point string) {
	d, ok := e.cfg.Faults[point]
	if !ok {
		return
	}
	e.log.Warn("fault point reached", "point", point, "sleep", d)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// storeLayer captures sandbox id's layer and stores it: chunks, then the
// manifest, flushed. It returns the manifest, its ref and what was stored.
//
// The capture is bounded (CaptureTimeout, captureMaxBytes: ErrCaptureLimit)
// and a delete of the sandbox cancels it. The caller holds a blob lease
// (withLease): every chunk stored or reused is pinned until it is recorded.
func (e *Engine) storeLayer(ctx context.Context, id string, freeze, thaw func(context.Context) error, progress func(string)) (*disk.Manifest, disk.ManifestRef, *disk.CaptureStats, error) {
	limit := e.captureMaxBytes(ctx, id)
	o := disk.StoreOptions{
		Blobs: e.blobsFor(ctx), Freeze: freeze, Thaw: thaw, MaxBytes: limit, Progress: progress,
		Bound: func(ctx context.Context) (context.Context, func(error) error) {
			cctx, done := e.captureContext(ctx, id)
			return cctx, func(err error) error {
				if err != nil {
					err = e.captureErr(cctx, err, limit)
				}
				done()
				return err
			}
		},
		Fault: func(ctx context.Context, point string) {
			switch point {
			case disk.StoreCapturing:
				e.faultCtx(ctx, "capture:"+id)
			case disk.StoreCaptured:
				e.fault("checkpoint:captured")
			}
		},
	}
	if le := leaseOf(ctx); le != nil {
		o.Pin = le.Pin // extents of unchanged files are reused unread
	}
	s, err := e.layers.Store(ctx, id, o)
	if err != nil {
		return nil, nil, nil, err
	}
	e.log.Debug("store layer", "sandbox", id, "load_cache_ms", s.LoadCache.Milliseconds(), "capture_ms", s.Capture.Milliseconds(),
		"manifest_ms", s.PutManifest.Milliseconds(), "flush_ms", s.Flush.Milliseconds(), "save_cache_ms", s.SaveCache.Milliseconds())
	return s.Manifest, s.Ref, s.Stats, nil
}

// recordV0 records the sandbox's fresh disk as v0. The sandbox must not run
// anything yet (its layer is still). With snapshot, on btrfs, v0 also
// keeps a snapshot (a restore to the fresh disk is then a swap); the
// warm pool's claim goes without it: the snapshot commits a btrfs
// transaction (5 ms on an idle volume, 22–49 ms on a busy one) on the
// fastest create path, and a restore of an almost empty v0 from the blob
// store costs about 70 ms more, once.
func (e *Engine) recordV0(ctx context.Context, sb *store.Sandbox, snapshot bool) error {
	ctx, release := e.withLease(ctx)
	defer release()
	m, ref, stats, err := e.storeLayer(ctx, sb.ID, nil, nil, nil)
	if err != nil {
		return fmt.Errorf("record v0: %w", err)
	}
	// On btrfs v0 keeps a snapshot too (trimSnapshots never drops it): a
	// restore to the fresh disk is then a swap.
	if snapshot && e.layers.CanSnapshot(sb.ID) {
		if err := e.layers.SnapshotCheckpoint(sb.ID, 0); err != nil {
			return fmt.Errorf("record v0: %w", err)
		}
	}
	files, size := m.Stats()
	return e.st.AddCheckpoint(ctx, &store.Checkpoint{
		SandboxID: sb.ID, Seq: 0, SourceID: sb.DiskSource, Manifest: refStrings(ref),
		SizeBytes: size, Files: files, AddedBytes: stats.AddedBytes, CreateTime: time.Now().UTC(),
	})
}

func refStrings(ref disk.ManifestRef) []string {
	out := make([]string, len(ref))
	for i, d := range ref {
		out[i] = string(d)
	}
	return out
}

// Op is a lifecycle operation that has passed its checks and holds its
// sandbox's lock: Run does it (once), Cancel gives it up. A server answers
// a refused operation with a plain error and streams a started one.
type Op struct {
	run    func(ctx context.Context, progress func(string)) (any, error)
	unlock func()
	done   bool
}

// Run does the operation and releases the lock.
func (o *Op) Run(ctx context.Context, progress func(string)) (any, error) {
	if o.done {
		return nil, errors.New("operation already run")
	}
	o.done = true
	defer o.unlock()
	return o.run(ctx, progressOr(progress))
}

// Cancel releases an operation that will not run.
func (o *Op) Cancel() {
	if !o.done {
		o.done = true
		o.unlock()
	}
}

// BeginCheckpoint checks a checkpoint request and takes the sandbox's lock:
// ErrInvalidArgument for a comment over 1024 bytes, ErrSandboxNotFound,
// ErrConflict while another operation runs or in a state without a disk to
// capture. Run returns the *store.Checkpoint.
func (e *Engine) BeginCheckpoint(ctx context.Context, idOrName, comment string) (*Op, error) {
	if len(comment) > api.MaxCommentBytes {
		return nil, errdefs.Invalid("comment", "%d bytes, at most %d", len(comment), api.MaxCommentBytes)
	}
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "checkpoint", lockOrConflict)
	if err != nil {
		return nil, err
	}
	if sb.State != api.StateRunning && sb.State != api.StateStopped {
		unlock()
		return nil, stateForbids(sb, "checkpoint")
	}
	return &Op{unlock: unlock, run: func(ctx context.Context, progress func(string)) (any, error) {
		return e.checkpointLocked(ctx, sb, comment, progress)
	}}, nil
}

// Checkpoint takes a disk checkpoint (BeginCheckpoint, then Run).
func (e *Engine) Checkpoint(ctx context.Context, idOrName, comment string, progress func(string)) (*store.Checkpoint, error) {
	op, err := e.BeginCheckpoint(ctx, idOrName, comment)
	if err != nil {
		return nil, err
	}
	res, err := op.Run(ctx, progress)
	if err != nil {
		return nil, err
	}
	return res.(*store.Checkpoint), nil
}

// checkpointLocked checkpoints sb's disk: on btrfs layers a snapshot,
// stored in the background (snapshotCheckpointLocked); else a capture of
// what is on it when asked (a running
// sandbox is paused, runsc pause, for the last part of the capture: ~0.1 s
// here; the host cgroup freezer, 20 times faster, left gVisor's systrap
// sandboxes to die after a few freezes). A failure of the
// capture or the blob store is ErrCheckpointFailed, and no checkpoint is
// recorded. The caller holds sb's lock.
func (e *Engine) checkpointLocked(ctx context.Context, sb *store.Sandbox, comment string, progress func(string)) (*store.Checkpoint, error) {
	if e.layers.CanSnapshot(sb.ID) {
		return e.snapshotCheckpointLocked(ctx, sb, comment, progress)
	}
	var freeze, thaw func(context.Context) error
	if sb.State == api.StateRunning {
		freeze = func(ctx context.Context) error { return e.rt.Pause(ctx, sb.ID) }
		thaw = func(ctx context.Context) error { return e.rt.Resume(ctx, sb.ID) }
	}
	ctx, release := e.withLease(ctx)
	defer release()
	start := time.Now()
	progress("capturing the disk")
	m, ref, stats, err := e.storeLayer(ctx, sb.ID, freeze, thaw, progress)
	if err != nil {
		release()
		e.freeFailedCapture(ctx)
		if derr := deletedDuring(sb, "checkpoint", err); derr != nil {
			return nil, derr
		}
		return nil, fmt.Errorf("checkpoint of %s: %v: %w", sb.Name, err, failClass(err, errdefs.ErrCheckpointFailed))
	}
	progress(fmt.Sprintf("%d files, %d bytes: %d files read, %d bytes added to the store, frozen %d ms",
		stats.Files, stats.Bytes, stats.ReadFiles, stats.AddedBytes, stats.FrozenFor.Milliseconds()))
	cps, err := e.st.ListCheckpoints(ctx, sb.ID)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of %s: %v: %w", sb.Name, err, errdefs.ErrCheckpointFailed)
	}
	seq := 1
	if len(cps) > 0 {
		seq = cps[0].Seq + 1
	}
	files, size := m.Stats()
	cp := &store.Checkpoint{
		SandboxID: sb.ID, Seq: seq, Comment: comment, SourceID: sb.DiskSource, Health: api.HealthOK,
		Manifest: refStrings(ref), SizeBytes: size, Files: files, AddedBytes: stats.AddedBytes,
		CreateTime: time.Now().UTC(),
	}
	e.fault("checkpoint:before-record")
	if err := e.st.AddCheckpoint(context.WithoutCancel(ctx), cp); err != nil {
		return nil, fmt.Errorf("checkpoint of %s: %v: %w", sb.Name, err, errdefs.ErrCheckpointFailed)
	}
	e.log.Info("checkpoint", "sandbox", sb.Name, "id", CheckpointID(seq), "ms", time.Since(start).Milliseconds(),
		"frozen_ms", stats.FrozenFor.Milliseconds(), "read_files", stats.ReadFiles, "added_bytes", stats.AddedBytes)
	return cp, nil
}

// ListCheckpoints returns a sandbox's checkpoints, newest first, v0 last.
func (e *Engine) ListCheckpoints(ctx context.Context, idOrName string) ([]*store.Checkpoint, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	return e.st.ListCheckpoints(ctx, sb.ID)
}

// GetCheckpoint returns one checkpoint; with verify it rereads every chunk
// of it first and records its health: damaged if a chunk is missing or
// corrupt, ok otherwise. A snapshot checkpoint not in the blob store yet is
// stored first (an error of that store is returned), or is damaged when
// its snapshot is gone.
func (e *Engine) GetCheckpoint(ctx context.Context, idOrName, id string, verify bool) (*store.Checkpoint, error) {
	seq, err := parseCheckpointID(id)
	if err != nil {
		return nil, err
	}
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	cp, err := e.st.GetCheckpoint(ctx, sb.ID, seq)
	if err != nil || !verify {
		return cp, err
	}
	if cp.StoreTime.IsZero() && cp.Health == api.HealthOK && !e.layers.HasCheckpointSnapshot(sb.ID, seq) {
		// Not stored yet, and its snapshot is gone: it cannot be restored.
		if err := e.st.SetCheckpointHealth(ctx, sb.ID, seq, api.HealthDamaged); err != nil {
			return nil, err
		}
		cp.Health = api.HealthDamaged
	}
	if cp.StoreTime.IsZero() {
		if cp.Health == api.HealthDamaged && !e.layers.HasCheckpointSnapshot(sb.ID, seq) {
			return cp, nil
		}
		// Verify the blob store's copy: store it first (a damaged one
		// that has its snapshot is tried again: the error says why it
		// cannot be stored).
		if cp, err = e.storedCheckpoint(ctx, sb.ID, seq); err != nil {
			return nil, err
		}
	}
	health := api.HealthOK
	if err := e.verify(ctx, cp); err != nil {
		if !errors.Is(err, blob.ErrNotFound) && !errors.Is(err, blob.ErrCorrupt) {
			return nil, err
		}
		e.chunkLost(err)
		e.log.Warn("checkpoint damaged", "sandbox", sb.Name, "id", id, "err", err)
		health = api.HealthDamaged
	}
	if err := e.st.SetCheckpointHealth(ctx, sb.ID, seq, health); err != nil {
		return nil, err
	}
	cp.Health = health
	return cp, nil
}

// chunkLost reacts to a chunk found missing or corrupt: the capture caches
// may vouch for it, so they all go (the next captures read and store
// their files again).
func (e *Engine) chunkLost(err error) {
	e.log.Warn("a stored chunk is missing or corrupt: capture caches dropped", "err", err)
	e.layers.DropAllCaches()
}

// verify rereads and checks every chunk of a checkpoint.
func (e *Engine) verify(ctx context.Context, cp *store.Checkpoint) error {
	m, err := disk.GetManifest(ctx, e.blobs, manifestRef(cp))
	if err != nil {
		return err
	}
	for _, d := range m.Chunks() {
		if _, err := blob.GetRaw(ctx, e.blobs, d); err != nil {
			return err
		}
	}
	return nil
}

// restoreOp is the journal entry of a restore.
type restoreOp struct {
	Seq int `json:"seq"`
}

// BeginRestore checks a restore request and takes the sandbox's lock:
// ErrCheckpointNotFound, ErrSandboxNotFound, ErrConflict. Run restores and
// returns the *store.Sandbox, stopped on the restored disk.
func (e *Engine) BeginRestore(ctx context.Context, idOrName, id string) (*Op, error) {
	seq, err := parseCheckpointID(id)
	if err != nil {
		return nil, err
	}
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "restore", lockOrConflict)
	if err != nil {
		return nil, err
	}
	if sb.State != api.StateRunning && sb.State != api.StateStopped {
		unlock()
		return nil, stateForbids(sb, "restore")
	}
	cp, err := e.st.GetCheckpoint(ctx, sb.ID, seq)
	if err != nil {
		unlock()
		return nil, err
	}
	return &Op{unlock: unlock, run: func(ctx context.Context, progress func(string)) (any, error) {
		return e.restoreLocked(ctx, sb, cp, progress)
	}}, nil
}

// Restore restores a sandbox's disk (BeginRestore, then Run).
func (e *Engine) Restore(ctx context.Context, idOrName, id string, progress func(string)) (*store.Sandbox, error) {
	op, err := e.BeginRestore(ctx, idOrName, id)
	if err != nil {
		return nil, err
	}
	res, err := op.Run(ctx, progress)
	if err != nil {
		return nil, err
	}
	return res.(*store.Sandbox), nil
}

// restoreLocked stops the sandbox and puts its disk back as it was in
// checkpoint cp. Processes end; the next request boots the sandbox on the
// restored disk; newer checkpoints stay. The new layer is built beside the
// current one (unchanged files hard-linked, the rest written from chunks)
// and swapped in with one rename, so a failure or a crash at any point
// leaves the disk either as it was or restored, whole. A failure is
// ErrRestoreFailed. The caller holds sb's lock.
func (e *Engine) restoreLocked(ctx context.Context, sb *store.Sandbox, cp *store.Checkpoint, progress func(string)) (*store.Sandbox, error) {
	seq, id := cp.Seq, CheckpointID(cp.Seq)
	ctx, release := e.withLease(ctx)
	defer release()
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	failed := func(err error) (*store.Sandbox, error) {
		return nil, fmt.Errorf("restore of %s to %s: %v: %w", sb.Name, id, err, errdefs.ErrRestoreFailed)
	}
	fromSnapshot := e.layers.HasCheckpointSnapshot(sb.ID, seq)
	var target *disk.Manifest
	if !fromSnapshot {
		if cp.StoreTime.IsZero() {
			_ = e.st.SetCheckpointHealth(ctx, sb.ID, seq, api.HealthDamaged)
			return failed(errors.New("its snapshot is gone and it was never stored in the blob store"))
		}
		var err error
		if target, err = disk.GetManifest(ctx, e.blobsFor(ctx), manifestRef(cp)); err != nil {
			return failed(err)
		}
	}
	if sb.State == api.StateRunning {
		// Its processes end with the stop: those still attached (a
		// terminal) are told why.
		e.noteRestore(sb.ID, "checkpoint "+id)
		progress("stopping the sandbox")
		if err := e.stopLocked(ctx, sb, ""); err != nil {
			return failed(err)
		}
	}
	stopped := time.Now()
	steps := stepTimes{}
	steps.add("stop", stopped.Sub(start))
	opID := newOpID()
	data, _ := json.Marshal(restoreOp{Seq: seq})
	if err := e.st.PutOp(ctx, &store.Op{ID: opID, Node: e.cfg.Node, SandboxID: sb.ID, Kind: "restore", Data: data}); err != nil {
		return failed(err)
	}
	if fromSnapshot {
		progress(fmt.Sprintf("swapping in the snapshot of %s", id))
		fallback, err := e.restoreSnapshotLocked(ctx, sb, cp, opID, &steps)
		if err != nil {
			return failed(err)
		}
		if !fallback {
			progress(steps.line(api.DiskStepsPrefix))
			e.log.Info("restored", "sandbox", sb.Name, "to", id, "from", "snapshot", "ms", time.Since(start).Milliseconds(),
				"stop_ms", stopped.Sub(start).Milliseconds(), "swap_ms", time.Since(stopped).Milliseconds())
			return sb, nil
		}
		if target, err = disk.GetManifest(ctx, e.blobsFor(ctx), manifestRef(cp)); err != nil {
			e.deleteOp(ctx, sb.ID, opID)
			return failed(err)
		}
	}
	// The new layer is built beside the old one and swapped in (with the
	// quota lifted: the guest is stopped, the next boot sets it again).
	progress(fmt.Sprintf("building the disk of %s: %d entries", id, len(target.Entries)))
	mstats, err := e.layers.Restore(ctx, sb.ID, opID, target, disk.RestoreOptions{
		Blobs: e.blobsFor(ctx),
		Fault: func(point string) { e.fault("restore:" + point) },
	})
	if err != nil {
		e.deleteOp(ctx, sb.ID, opID)
		if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrCorrupt) {
			e.chunkLost(err)
			_ = e.st.SetCheckpointHealth(ctx, sb.ID, seq, api.HealthDamaged)
		}
		return failed(err)
	}
	progress(fmt.Sprintf("%d files: %d kept, %d patched, %d written; %d bytes from the store",
		mstats.Files, mstats.LinkedFiles, mstats.PatchedFiles, mstats.WrittenFiles, mstats.WrittenBytes))
	if err := e.recordRestore(ctx, sb, opID, seq); err != nil {
		return failed(err)
	}
	later, err := e.layers.FinishRestore(sb.ID, opID, target, mstats.LinkedFiles > 0)
	if later {
		e.emptyTrash(sb)
	}
	if err != nil {
		return failed(err)
	}
	e.log.Info("restored", "sandbox", sb.Name, "to", id, "ms", time.Since(start).Milliseconds(),
		"stop_ms", stopped.Sub(start).Milliseconds(), "build_ms", mstats.Duration.Milliseconds(),
		"linked", mstats.LinkedFiles, "patched", mstats.PatchedFiles, "written", mstats.WrittenFiles, "written_bytes", mstats.WrittenBytes)
	return sb, nil
}

// stepTimes are an operation's steps, "name ms" each, for its progress
// line (api.DiskStepsPrefix): sbx bench prints them beside the operation.
type stepTimes []string

// add appends step name, which took d.
func (s *stepTimes) add(name string, d time.Duration) {
	*s = append(*s, fmt.Sprintf("%s %.1f", name, msOf(d)))
}

// line is the progress line of the steps, after prefix.
func (s stepTimes) line(prefix string) string { return prefix + " " + strings.Join(s, ", ") }

// msOf is d in ms, with µs precision.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// recordRestore records a restore of sb to checkpoint seq whose swap
// happened: the record names the new disk's source, and the journal entry
// goes. The layer's finish (disk.Layers.FinishRestore) comes after.
func (e *Engine) recordRestore(ctx context.Context, sb *store.Sandbox, opID string, seq int) error {
	sb.DiskSource = CheckpointID(seq)
	sb.State, sb.StateReason = api.StateStopped, ""
	// A recovery snapshot holds the disk the restore undid.
	drop := e.dropRecovery(ctx, sb)
	if err := e.st.UpdateSandbox(ctx, sb); err != nil {
		return err
	}
	drop()
	return e.st.DeleteOp(ctx, opID)
}

// emptyTrash deletes the old layer a restore of sb moved aside, in the
// background (its deletion cannot move the new files' ctimes).
func (e *Engine) emptyTrash(sb *store.Sandbox) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		if err := e.layers.EmptyTrash(sb.ID); err != nil {
			e.log.Error("delete the old layer", "sandbox", sb.Name, "err", err)
		}
	}()
}

// deleteOp deletes the journal entry of an operation on sandbox id that
// did nothing (or whose effects are undone), logging a failure.
func (e *Engine) deleteOp(ctx context.Context, id, opID string) {
	if err := e.st.DeleteOp(ctx, opID); err != nil {
		e.log.Error("delete journal entry", "sandbox", id, "op", opID, "err", err)
	}
}

// abandonRestore rolls back a restore that did not swap: its half-built
// layer and its journal entry go; the disk is as it was.
func (e *Engine) abandonRestore(ctx context.Context, id, opID string) {
	if err := e.layers.AbandonRestore(id, opID); err != nil {
		e.log.Error("abandon restore", "sandbox", id, "err", err)
	}
	e.deleteOp(ctx, id, opID)
}

// recoverRestore finishes or rolls back a restore that a crash of sbxd
// cut short, as the layer shows it: swapped, the sandbox is on the
// checkpoint's disk; else on the disk it had.
func (e *Engine) recoverRestore(ctx context.Context, op *store.Op) error {
	var ro restoreOp
	sb, err := e.st.GetSandbox(ctx, op.SandboxID)
	if err != nil {
		e.abandonRestore(ctx, op.SandboxID, op.ID)
		return nil
	}
	_ = e.rt.Delete(ctx, sb.ID)
	if err := json.Unmarshal(op.Data, &ro); err != nil {
		// Which checkpoint it was is lost; the disk is whole either
		// way (old, or swapped to the new one), only not recorded.
		e.log.Error("recover: unreadable restore journal entry; keeping the disk as it is", "sandbox", sb.Name, "op", op.ID, "err", err)
		_ = e.layers.Unmount(sb.ID)
		e.abandonRestore(ctx, sb.ID, op.ID)
		sb.State, sb.StateReason = api.StateStopped, "a restore was interrupted and its journal entry was unreadable; the disk is whole but may be the old one or the checkpoint's"
		return e.st.UpdateSandbox(ctx, sb)
	}
	var recErr error
	swapped, err := e.layers.RecoverRestore(sb.ID, op.ID, func(swapped bool) error {
		if swapped {
			e.log.Info("recover: finishing a restore that swapped the disk", "sandbox", sb.Name, "to", CheckpointID(ro.Seq))
			recErr = e.recordRestore(ctx, sb, op.ID, ro.Seq)
			return recErr
		}
		e.log.Info("recover: rolling back a restore that did not swap the disk", "sandbox", sb.Name)
		e.deleteOp(ctx, sb.ID, op.ID)
		sb.State, sb.StateReason = api.StateStopped, "a restore was interrupted; the disk is as it was"
		recErr = e.st.UpdateSandbox(ctx, sb)
		return recErr
	})
	if recErr != nil || (err != nil && swapped) {
		return err
	}
	if err != nil {
		e.log.Error("abandon restore", "sandbox", sb.ID, "err", err)
	}
	return nil
}

// recoverOps finishes or rolls back journalled operations after a crash.
func (e *Engine) recoverOps(ctx context.Context) error {
	ops, err := e.st.ListOps(ctx, e.cfg.Node)
	if err != nil {
		return err
	}
	for _, op := range ops {
		switch op.Kind {
		case "restore":
			if err := e.recoverRestore(ctx, op); err != nil {
				return err
			}
		case "suspend", "resume":
			if err := e.recoverSuspend(ctx, op); err != nil {
				return err
			}
		case opSnapRestore:
			if err := e.recoverSnapRestore(ctx, op); err != nil {
				return err
			}
		case opGuard:
			// After reconcile (recoverGuards): the rollback needs the
			// sandbox's runtime state.
		case opDeliver:
			e.recoverDeliver(ctx, op)
		case opRecovery:
			e.recoverRecoveryOp(ctx, op)
		default:
			e.log.Warn("recover: unknown operation", "kind", op.Kind, "id", op.ID)
			_ = e.st.DeleteOp(ctx, op.ID)
		}
	}
	return nil
}

// DiffOptions select the two disks of a diff.
type DiffOptions struct {
	// To is a checkpoint id or "live" (the disk now).
	To string
	// From is a checkpoint id; "" means the checkpoint before To (the
	// newest one for live).
	From string
	// Limit caps each list (default 10000).
	Limit int
}

// Diff lists the paths added, modified and deleted from one disk of a
// sandbox to another, as the sandbox sees them.
func (e *Engine) Diff(ctx context.Context, idOrName string, o DiffOptions) (*api.Diff, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if o.Limit <= 0 {
		o.Limit = 10000
	}
	var to *disk.Manifest
	toSeq := -1
	if o.To == "live" {
		if sb.State == api.StateSuspended {
			return nil, stateForbids(sb, `diff its live disk (it is in the blob store until it resumes; compare checkpoints, or resume it)`)
		}
		// A dry run (nothing stored), bounded like a capture.
		cctx, cancel := context.WithTimeout(ctx, e.cfg.CaptureTimeout)
		limit := e.captureMaxBytes(ctx, sb.ID)
		to, _, err = disk.Capture(cctx, disk.CaptureOptions{Upper: e.layers.Paths(sb.ID).Upper, Cache: e.layers.LoadCache(sb.ID), MaxBytes: limit})
		if err != nil {
			err = e.captureErr(cctx, err, limit)
		}
		cancel()
		if err != nil {
			return nil, err
		}
	} else {
		if toSeq, err = parseCheckpointID(o.To); err != nil {
			return nil, err
		}
		if to, err = e.loadManifest(ctx, sb.ID, toSeq); err != nil {
			return nil, err
		}
	}
	if o.From == "" {
		cps, err := e.st.ListCheckpoints(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		for _, cp := range cps {
			if toSeq < 0 || cp.Seq < toSeq {
				o.From = CheckpointID(cp.Seq)
				break
			}
		}
		if o.From == "" {
			o.From = CheckpointID(0)
		}
	}
	fromSeq, err := parseCheckpointID(o.From)
	if err != nil {
		return nil, err
	}
	from, err := e.loadManifest(ctx, sb.ID, fromSeq)
	if err != nil {
		return nil, err
	}
	d := disk.Diff(from, to, e.images.RootFS(sb.ImageID))
	out := &api.Diff{From: o.From, To: o.To}
	conv := func(cs []disk.Change) []api.Change {
		res := make([]api.Change, 0, min(len(cs), o.Limit))
		for i, c := range cs {
			if i == o.Limit {
				out.Truncated = true
				break
			}
			res = append(res, api.Change{Path: c.Path, Type: string(c.Type), OldType: string(c.OldType), Size: c.Size,
				OldSize: c.OldSize, LinkTarget: c.LinkTarget})
		}
		return res
	}
	out.Added, out.Modified, out.Deleted = conv(d.Added), conv(d.Modified), conv(d.Deleted)
	return out, nil
}

func (e *Engine) loadManifest(ctx context.Context, sandboxID string, seq int) (*disk.Manifest, error) {
	cp, err := e.storedCheckpoint(ctx, sandboxID, seq)
	if err != nil {
		return nil, err
	}
	m, err := disk.GetManifest(ctx, e.blobs, manifestRef(cp))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", CheckpointID(seq), err)
	}
	return m, nil
}

func newOpID() string { return "op_" + newID()[4:] }
