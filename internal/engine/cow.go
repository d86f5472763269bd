package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// Copy-on-write disk checkpoints (btrfs layers). The rules:
//
//   - A checkpoint is a read-only snapshot of the layer, taken while the
//     sandbox runs (no pause), and recorded at once without a manifest
//     (store.Checkpoint.StoreTime zero): it is listed as soon as it can be
//     restored on this node.
//   - The ingester stores it in the blob store in the background (chunks
//     shared with earlier checkpoints), then records its manifest and
//     store_time. A crash before that leaves the record and the snapshot;
//     the next Start stores it again.
//   - A restore of a checkpoint that has its snapshot swaps in a writable
//     snapshot of it; without one (dropped after storing, or another
//     node), the layer is built from the manifest as before.
//   - Snapshots are kept, once stored, for the keepSnapshots newest
//     checkpoints of a sandbox and for v0, the fresh disk (fast
//     restores), and dropped when the sandbox is deleted or suspended.
//   - A snapshot without a record (a crash between the two) is dropped at
//     Start; a record waiting to be stored whose snapshot is gone cannot be
//     restored and is marked damaged.

// keepSnapshots is how many stored checkpoints of a sandbox keep their
// snapshot as a restore cache (pending ones always keep theirs).
const keepSnapshots = 4

// ingester stores snapshot checkpoints in the blob store. The stores of
// one sandbox's checkpoints run one at a time, oldest first (each store
// seeds the next one's capture cache); different sandboxes' stores do not
// wait for each other, and a delete of a sandbox cancels its stores.
type ingester struct {
	// kick wakes the background loop.
	kick chan struct{}
	// mu guards sandboxes and next.
	mu sync.Mutex
	// sandboxes holds, by sandbox id, the stores of that sandbox's
	// checkpoints in progress or waiting (lockStores); an entry goes when
	// its last user leaves.
	sandboxes map[string]*sandboxStores
	// next numbers the users of sandboxStores.cancels.
	next int
}

// sandboxStores serialises the stores of one sandbox's checkpoints and
// lets a delete of the sandbox cancel them.
type sandboxStores struct {
	// sem holds one token while a store (or a cache seed) of the sandbox
	// runs.
	sem chan struct{}
	// cancels cancels, by user number, every call that holds or waits for
	// sem; the entry goes when it is empty.
	cancels map[int]context.CancelCauseFunc
}

func newIngester() *ingester {
	return &ingester{kick: make(chan struct{}, 1), sandboxes: map[string]*sandboxStores{}}
}

// kickIngest asks the background loop for a round.
func (e *Engine) kickIngest() {
	select {
	case e.ingest.kick <- struct{}{}:
	default:
	}
}

// ingestLoop stores pending checkpoints and snapshots' hot images
// (hot.go) whenever kicked, until Close.
func (e *Engine) ingestLoop() {
	defer e.bg.Done()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.ingest.kick:
		}
		if err := e.storeRound(e.ctx); err != nil && e.ctx.Err() == nil {
			e.log.Error("store checkpoints in the blob store", "err", err)
		}
		if err := e.storeHotRound(e.ctx); err != nil && e.ctx.Err() == nil {
			e.log.Error("store snapshots' memory images in the blob store", "err", err)
		}
	}
}

// lockStores waits for the turn to store sandbox id's checkpoints (or to
// seed its capture cache): one at a time per sandbox. It returns the
// context to do it in, which a delete of the sandbox cancels (cause
// errCaptureCancelled, see cancelStores), and the unlock. It fails with
// ctx's cause when ctx ends, or a delete cancels it, while it waits.
func (e *Engine) lockStores(ctx context.Context, id string) (context.Context, func(), error) {
	ctx, cancel := context.WithCancelCause(ctx)
	g := e.ingest
	g.mu.Lock()
	s := g.sandboxes[id]
	if s == nil {
		s = &sandboxStores{sem: make(chan struct{}, 1), cancels: map[int]context.CancelCauseFunc{}}
		g.sandboxes[id] = s
	}
	n := g.next
	g.next++
	s.cancels[n] = cancel
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		delete(s.cancels, n)
		if len(s.cancels) == 0 {
			delete(g.sandboxes, id)
		}
		g.mu.Unlock()
		cancel(nil)
	}
	select {
	case s.sem <- struct{}{}:
	default:
		e.log.Info("waiting for the store of the sandbox's checkpoint in progress", "sandbox", id)
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			leave()
			return nil, nil, context.Cause(ctx)
		}
	}
	return ctx, func() {
		<-s.sem
		leave()
	}, nil
}

// cancelStores cancels the stores of sandbox id's checkpoints in progress
// or waiting for their turn (cause errCaptureCancelled), for a delete of
// the sandbox, and reports whether there was any.
func (e *Engine) cancelStores(id string) bool {
	g := e.ingest
	if g == nil {
		return false // an engine without stores (unit tests of the locks)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sandboxes[id]
	if s == nil {
		return false
	}
	for _, cancel := range s.cancels {
		cancel(errCaptureCancelled)
	}
	return len(s.cancels) > 0
}

// endStores, for a delete of sandbox id (which holds its lock), cancels
// the stores of its checkpoints and waits, up to a minute, until none
// runs: the delete then drops the snapshots they read. It returns the
// function that lets later stores run (they find the records gone).
func (e *Engine) endStores(id string) func() {
	if e.cancelStores(id) {
		e.log.Info("delete: cancelling the store of the sandbox's checkpoints", "sandbox", id)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	_, unlock, err := e.lockStores(ctx, id)
	if err != nil {
		e.log.Error("delete: a store of the sandbox's checkpoints did not end; deleting anyway", "sandbox", id, "err", err)
		return func() {}
	}
	return unlock
}

// snapshotCheckpointLocked takes checkpoint v<next> of sb as a snapshot
// of its layer, without pausing it, records it and kicks the ingester.
// The caller holds sb's lock. Errors: ErrCheckpointFailed.
func (e *Engine) snapshotCheckpointLocked(ctx context.Context, sb *store.Sandbox, comment string, progress func(string)) (*store.Checkpoint, error) {
	ctx = context.WithoutCancel(ctx)
	failed := func(err error) (*store.Checkpoint, error) {
		return nil, fmt.Errorf("checkpoint of %s: %v: %w", sb.Name, err, errdefs.ErrCheckpointFailed)
	}
	cps, err := e.st.ListCheckpoints(ctx, sb.ID)
	if err != nil {
		return failed(err)
	}
	seq := 1
	if len(cps) > 0 {
		seq = cps[0].Seq + 1
	}
	progress("snapshotting the disk")
	start := time.Now()
	// CreateTime is the instant the snapshot was asked for: the layer's
	// capture cache trusts times up to it (disk.Layers.StoreCheckpoint).
	if err := e.layers.SnapshotCheckpoint(sb.ID, seq); err != nil {
		return failed(err)
	}
	took := time.Since(start)
	recorded := time.Now()
	cp := &store.Checkpoint{
		SandboxID: sb.ID, Seq: seq, Comment: comment, SourceID: sb.DiskSource, Health: api.HealthOK,
		Manifest: []string{}, CreateTime: start.UTC(),
	}
	e.fault("checkpoint:before-record")
	if err := e.st.AddCheckpoint(ctx, cp); err != nil {
		if derr := e.layers.DropCheckpointSnapshot(sb.ID, seq); derr != nil {
			e.log.Error("drop the snapshot of an unrecorded checkpoint", "sandbox", sb.Name, "seq", seq, "err", derr)
		}
		return failed(err)
	}
	e.kickIngest()
	progress(fmt.Sprintf("%s btrfs snapshot %.1f, record %.1f", api.DiskStepsPrefix, msOf(took), msOf(time.Since(recorded))))
	e.log.Info("checkpoint", "sandbox", sb.Name, "id", CheckpointID(seq), "mechanism", disk.MechanismSnapshot,
		"snapshot_ms", took.Milliseconds(), "ms", time.Since(start).Milliseconds())
	return cp, nil
}

// errSnapshotLost is the failure of a store whose snapshot is gone (a
// power loss before the snapshot's btrfs transaction committed, or a drop
// racing the store): the checkpoint can never be stored.
var errSnapshotLost = errors.New("its snapshot is gone and it was never stored in the blob store")

// cannotStore reports whether err, of storeCheckpoint, means the
// checkpoint can never be stored (storeCheckpoint marked it damaged): a
// capture limit passed, or the snapshot gone.
func cannotStore(err error) bool {
	return errors.Is(err, errdefs.ErrCaptureLimit) || errors.Is(err, errSnapshotLost)
}

// storeRound is one round of the background loop: it stores the pending
// checkpoints of every sandbox (those not damaged), oldest first, each
// under its sandbox's store lock and read again under it, then trims the
// snapshots of the sandboxes it stored. It returns the first error of a
// store that may work when retried (those that never can were recorded as
// damage), or ctx's when it ends.
func (e *Engine) storeRound(ctx context.Context) error {
	cps, err := e.st.ListCheckpoints(ctx, "")
	if err != nil {
		return err
	}
	var firstErr error
	touched := map[string]bool{}
	// Listed by sandbox, newest first: backwards is oldest first.
	for i := len(cps) - 1; i >= 0; i-- {
		cp := cps[i]
		if !cp.StoreTime.IsZero() || cp.Health == api.HealthDamaged {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		touched[cp.SandboxID] = true
		err := e.storeOne(ctx, cp.SandboxID, cp.Seq)
		if err != nil && !cannotStore(err) && !errors.Is(err, errCaptureCancelled) && firstErr == nil {
			firstErr = fmt.Errorf("checkpoint %s of %s: %w", CheckpointID(cp.Seq), cp.SandboxID, err)
		}
	}
	for sid := range touched {
		e.trimSnapshots(ctx, sid, false)
	}
	return firstErr
}

// storeOne stores checkpoint seq of sandbox id under the sandbox's store
// lock, if it still waits to be stored and is not damaged then.
func (e *Engine) storeOne(ctx context.Context, id string, seq int) error {
	ctx, unlock, err := e.lockStores(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	cp, err := e.st.GetCheckpoint(ctx, id, seq)
	if errors.Is(err, errdefs.ErrCheckpointNotFound) {
		return nil // deleted with its sandbox meanwhile
	}
	if err != nil {
		return err
	}
	if !cp.StoreTime.IsZero() || cp.Health == api.HealthDamaged {
		return nil
	}
	return e.storeCheckpoint(ctx, cp)
}

// storePending stores the pending checkpoints of sandbox id, oldest
// first, before a suspend (which drops every snapshot). Checkpoints that
// are damaged, or become so because they can never be stored (a capture
// limit, a snapshot gone: cannotStore), are skipped: they are lost, and
// listed as damaged. It returns the first other error (the checkpoint's
// only copy would go with its snapshot), or ctx's cause when it ends.
func (e *Engine) storePending(ctx context.Context, id string) error {
	ctx, unlock, err := e.lockStores(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	err = e.storePendingLocked(ctx, id, -1)
	e.trimSnapshots(ctx, id, false)
	return err
}

// storePendingLocked stores the pending checkpoints of sandbox id older
// than seq (all of them when seq < 0), oldest first, skipping damaged
// ones, as storePending does; the caller holds id's store lock
// (lockStores) and ctx is the lock's.
func (e *Engine) storePendingLocked(ctx context.Context, id string, seq int) error {
	cps, err := e.st.ListCheckpoints(ctx, id)
	if err != nil {
		return err
	}
	var firstErr error
	for i := len(cps) - 1; i >= 0; i-- {
		cp := cps[i]
		if seq >= 0 && cp.Seq >= seq {
			break
		}
		if !cp.StoreTime.IsZero() || cp.Health == api.HealthDamaged {
			continue
		}
		if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
			return err
		}
		if err := e.storeCheckpoint(ctx, cp); err != nil && !cannotStore(err) && firstErr == nil {
			firstErr = fmt.Errorf("checkpoint %s: %w", CheckpointID(cp.Seq), err)
		}
	}
	return firstErr
}

// storeCheckpoint stores checkpoint cp's snapshot in the blob store and
// records its manifest. The caller holds the sandbox's store lock and ctx
// is the lock's (a delete cancels it: the error is then
// errCaptureCancelled's). A checkpoint deleted meanwhile (its sandbox) is
// not an error. A checkpoint that can never be stored (cannotStore: a
// capture limit, ErrCaptureLimit with a message naming the limit; its
// snapshot gone, errSnapshotLost) is marked damaged, logged with the
// reason, and the error returned.
func (e *Engine) storeCheckpoint(ctx context.Context, cp *store.Checkpoint) error {
	ctx, release := e.withLease(ctx)
	defer release()
	cctx, cancel := context.WithTimeoutCause(ctx, e.cfg.CaptureTimeout, errCaptureTimeout)
	defer cancel()
	limit := e.captureMaxBytes(ctx, cp.SandboxID)
	o := disk.StoreOptions{
		Blobs: e.blobsFor(ctx), MaxBytes: limit,
		Fault: func(fctx context.Context, point string) {
			switch point {
			case disk.StoreCapturing:
				e.faultCtx(fctx, "capture:"+cp.SandboxID)
			case disk.StoreCaptured:
				e.fault("ingest:captured")
			}
		},
	}
	if le := leaseOf(ctx); le != nil {
		o.Pin = le.Pin
	}
	start := time.Now()
	s, err := e.layers.StoreCheckpoint(cctx, cp.SandboxID, cp.Seq, cp.CreateTime, o)
	if err != nil {
		// What it put goes now (a full blob store must not stay full):
		// the lease is let go first, as nothing will record its blobs.
		release()
		bg := context.WithoutCancel(ctx)
		e.freeFailedCapture(bg)
		if _, gerr := e.st.GetCheckpoint(bg, cp.SandboxID, cp.Seq); errors.Is(gerr, errdefs.ErrCheckpointNotFound) {
			return nil // deleted with its sandbox meanwhile
		}
		if errors.Is(err, fs.ErrNotExist) {
			err = errSnapshotLost
		} else {
			err = e.captureErr(cctx, err, limit)
		}
		switch {
		case errors.Is(err, errCaptureCancelled):
			e.log.Info("checkpoint store cancelled: the sandbox is being deleted", "sandbox", cp.SandboxID, "id", CheckpointID(cp.Seq))
		case cannotStore(err):
			e.log.Error("checkpoint damaged: it can never be stored in the blob store", "sandbox", cp.SandboxID, "id", CheckpointID(cp.Seq), "reason", err)
			if herr := e.st.SetCheckpointHealth(bg, cp.SandboxID, cp.Seq, api.HealthDamaged); herr != nil {
				e.log.Error("mark a checkpoint damaged", "sandbox", cp.SandboxID, "id", CheckpointID(cp.Seq), "err", herr)
			}
		}
		return err
	}
	files, size := s.Manifest.Stats()
	rec := &store.Checkpoint{
		SandboxID: cp.SandboxID, Seq: cp.Seq, Manifest: refStrings(s.Ref),
		SizeBytes: size, Files: files, AddedBytes: s.Stats.AddedBytes, StoreTime: time.Now().UTC(),
	}
	if err := e.st.SetCheckpointStored(context.WithoutCancel(ctx), rec); err != nil {
		if errors.Is(err, errdefs.ErrCheckpointNotFound) {
			return nil
		}
		return err
	}
	e.log.Info("checkpoint stored", "sandbox", cp.SandboxID, "id", CheckpointID(cp.Seq), "ms", time.Since(start).Milliseconds(),
		"after_ms", time.Since(cp.CreateTime).Milliseconds(), "read_files", s.Stats.ReadFiles, "read_bytes", s.Stats.ReadBytes,
		"added_bytes", s.Stats.AddedBytes)
	return nil
}

// trimSnapshots drops the snapshots of sandbox id that are no longer
// needed: of stored checkpoints beyond the keepSnapshots newest (all of
// them when the sandbox is suspended) and, with orphans (at Start, when no
// checkpoint is being taken), of checkpoints without a record.
func (e *Engine) trimSnapshots(ctx context.Context, id string, orphans bool) {
	seqs, err := e.layers.CheckpointSnapshots(id)
	if err != nil || len(seqs) == 0 {
		return
	}
	sb, err := e.st.GetSandbox(ctx, id)
	if errors.Is(err, errdefs.ErrSandboxNotFound) {
		if orphans {
			e.dropSnapshots(id)
		}
		return
	} else if err != nil {
		return
	}
	cps, err := e.st.ListCheckpoints(ctx, id)
	if err != nil {
		return
	}
	bySeq := map[int]*store.Checkpoint{}
	for _, cp := range cps {
		bySeq[cp.Seq] = cp
	}
	keep := keepSnapshots
	if sb.State == api.StateSuspended {
		keep = 0
	}
	stored := 0
	for i := len(seqs) - 1; i >= 0; i-- { // newest first
		seq := seqs[i]
		cp := bySeq[seq]
		switch {
		case seq == 0 && cp != nil && keep > 0:
			continue // the fresh disk: kept while the sandbox runs here
		case cp == nil:
			if !orphans {
				continue // being recorded, perhaps
			}
		case cp.StoreTime.IsZero():
			continue // waiting to be stored: the only copy
		case stored < keep:
			stored++
			continue
		}
		if err := e.layers.DropCheckpointSnapshot(id, seq); err != nil {
			e.log.Error("drop a checkpoint's snapshot", "sandbox", id, "seq", seq, "err", err)
		}
	}
}

// dropSnapshots drops every checkpoint snapshot of sandbox id, logging a
// failure.
func (e *Engine) dropSnapshots(id string) {
	if err := e.layers.DropCheckpointSnapshots(id); err != nil {
		e.log.Error("drop checkpoint snapshots", "sandbox", id, "err", err)
	}
}

// storedCheckpoint returns checkpoint seq of sandbox sandboxID with its
// manifest in the blob store, storing it (and older pending ones) first
// if needed, under the sandbox's store lock. A damaged pending checkpoint
// whose snapshot is still there is tried again (the error says why it
// cannot be stored). Errors: ErrCheckpointNotFound; ErrCaptureLimit
// naming the limit; ErrConflict when a delete of the sandbox cancelled the
// store; ErrCheckpointFailed when the store failed otherwise or the
// snapshot is gone.
func (e *Engine) storedCheckpoint(ctx context.Context, sandboxID string, seq int) (*store.Checkpoint, error) {
	cp, err := e.st.GetCheckpoint(ctx, sandboxID, seq)
	if err != nil || !cp.StoreTime.IsZero() {
		return cp, err
	}
	id := CheckpointID(seq)
	failed := func(err error) (*store.Checkpoint, error) {
		switch {
		case errors.Is(err, errdefs.ErrCaptureLimit):
			return nil, errdefs.New(errdefs.ErrCaptureLimit, "checkpoint %s cannot be stored in the blob store (it is damaged and is lost when the sandbox is suspended or deleted): %v", id, err)
		case errors.Is(err, errCaptureCancelled):
			return nil, errdefs.Conflictf("the sandbox of checkpoint %s was deleted while the checkpoint was being stored", id)
		case errors.Is(err, errSnapshotLost):
			return nil, errdefs.WithDetail(fmt.Errorf("checkpoint %s: %w: %w", id, err, errdefs.ErrCheckpointFailed),
				"checkpoint %s is damaged: %v", id, errSnapshotLost)
		}
		return nil, fmt.Errorf("checkpoint %s could not be stored in the blob store: %v: %w", id, err, errdefs.ErrCheckpointFailed)
	}
	lctx, unlock, err := e.lockStores(ctx, sandboxID)
	if err != nil {
		return failed(err)
	}
	defer unlock()
	// Older ones first (each seeds the next one's capture cache); their
	// failures need not be this one's.
	_ = e.storePendingLocked(lctx, sandboxID, seq)
	cp, err = e.st.GetCheckpoint(lctx, sandboxID, seq)
	if err != nil || !cp.StoreTime.IsZero() {
		return cp, err
	}
	if err := e.storeCheckpoint(lctx, cp); err != nil {
		return failed(err)
	}
	cp, err = e.st.GetCheckpoint(ctx, sandboxID, seq)
	if err == nil && cp.StoreTime.IsZero() {
		return failed(errors.New("not stored")) // deleted and made again meanwhile
	}
	return cp, err
}

// recoverCheckpoints puts checkpoint snapshots and records in agreement
// after a restart (after reconcile): snapshots of sandboxes that are gone
// or of checkpoints never recorded are dropped, a pending record whose
// snapshot is gone is damaged, restores' leftover subvolumes go, and the
// ingester is kicked for the pending rest.
func (e *Engine) recoverCheckpoints(ctx context.Context) error {
	ids, err := e.layers.SnapshotLayerIDs()
	if err != nil {
		return err
	}
	for _, id := range ids {
		e.trimSnapshots(ctx, id, true)
	}
	cps, err := e.st.ListCheckpoints(ctx, "")
	if err != nil {
		return err
	}
	for _, cp := range cps {
		if cp.StoreTime.IsZero() && cp.Health != api.HealthDamaged && !e.layers.HasCheckpointSnapshot(cp.SandboxID, cp.Seq) {
			e.log.Error("recover: a checkpoint waiting to be stored has no snapshot: damaged", "sandbox", cp.SandboxID, "id", CheckpointID(cp.Seq))
			if err := e.st.SetCheckpointHealth(ctx, cp.SandboxID, cp.Seq, api.HealthDamaged); err != nil {
				return err
			}
		}
	}
	// recoverOps finished or rolled back every restore: what a restore
	// left beside the layers is garbage now.
	if err := e.layers.RemoveRestoreLeftovers(); err != nil {
		e.log.Error("recover: remove restores' leftovers", "err", err)
	}
	e.kickIngest()
	return nil
}

// restoreSnapshotLocked is the restore of sb (stopped) to checkpoint cp
// from its snapshot, journalled as opID: swap, record, finish. It returns
// fallback true, having done nothing, when the snapshot went meanwhile and
// the checkpoint is stored (the caller builds the layer from the manifest
// instead). On an error before the swap the journal entry is gone and the
// disk is as it was; after it, the entry stays for the recovery.
func (e *Engine) restoreSnapshotLocked(ctx context.Context, sb *store.Sandbox, cp *store.Checkpoint, opID string, steps *stepTimes) (fallback bool, err error) {
	err = e.layers.RestoreCheckpoint(sb.ID, opID, cp.Seq, disk.RestoreOptions{
		Fault: func(point string) { e.fault("restore:" + point) },
		Step:  steps.add,
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !cp.StoreTime.IsZero() {
			return true, nil
		}
		e.deleteOp(ctx, sb.ID, opID)
		return false, err
	}
	recorded := time.Now()
	if err := e.recordRestore(ctx, sb, opID, cp.Seq); err != nil {
		return false, err
	}
	err = e.layers.FinishSnapshotRestore(sb.ID, opID)
	steps.add("record", time.Since(recorded))
	e.emptyTrash(sb)
	if err != nil {
		return false, err
	}
	if !cp.StoreTime.IsZero() {
		e.seedCache(sb.ID, cp)
	}
	return false, nil
}

// seedCache makes the manifest of checkpoint cp, stored, the capture
// cache of sandbox id's layer just restored from cp's snapshot (which it
// describes exactly: same inodes and times), in the background but before
// the next store of a checkpoint: that store then reads only what changed
// since the restore, not the whole layer.
func (e *Engine) seedCache(id string, cp *store.Checkpoint) {
	lineage := e.layers.Lineage(id)
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		ctx, unlock, err := e.lockStores(e.ctx, id)
		if err != nil {
			return // a delete, or Close
		}
		defer unlock()
		m, err := disk.GetManifest(ctx, e.blobs, manifestRef(cp))
		if err == nil {
			err = e.layers.SaveCacheOf(id, lineage, m)
		}
		if err != nil && e.ctx.Err() == nil {
			e.log.Warn("restore: the layer has no capture cache (its next checkpoint's store reads it whole)", "sandbox", id, "err", err)
		}
	}()
}
