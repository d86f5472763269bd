package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
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

// ingester stores snapshot checkpoints in the blob store, one at a time.
type ingester struct {
	// mu makes one store at a time (a background round or a caller that
	// needs a sandbox's checkpoints stored now).
	mu sync.Mutex
	// kick wakes the background loop.
	kick chan struct{}
	// failed holds, by "<sandbox id>/<seq>", the error of a store that
	// failed for a reason a retry will not change (a capture limit): the
	// loop does not retry it until sbxd restarts. Guarded by mu.
	failed map[string]error
}

func newIngester() *ingester {
	return &ingester{kick: make(chan struct{}, 1), failed: map[string]error{}}
}

// kickIngest asks the background loop for a round.
func (e *Engine) kickIngest() {
	select {
	case e.ingest.kick <- struct{}{}:
	default:
	}
}

// ingestLoop stores pending checkpoints whenever kicked, until Close.
func (e *Engine) ingestLoop() {
	defer e.bg.Done()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.ingest.kick:
		}
		if err := e.storePending(e.ctx, "", false); err != nil && e.ctx.Err() == nil {
			e.log.Error("store checkpoints in the blob store", "err", err)
		}
	}
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
	e.log.Info("checkpoint", "sandbox", sb.Name, "id", CheckpointID(seq), "mechanism", disk.MechanismSnapshot,
		"snapshot_ms", took.Milliseconds(), "ms", time.Since(start).Milliseconds())
	return cp, nil
}

// storePending stores the checkpoints of sandbox id (every sandbox's when
// id is "") that have a snapshot and no manifest yet, oldest first. With
// all it retries those that failed before and returns the first error of
// any; without, it skips them (the background loop). It returns early
// when ctx ends.
func (e *Engine) storePending(ctx context.Context, id string, all bool) error {
	e.ingest.mu.Lock()
	defer e.ingest.mu.Unlock()
	cps, err := e.st.ListCheckpoints(ctx, id)
	if err != nil {
		return err
	}
	var firstErr error
	touched := map[string]bool{}
	// Listed by sandbox, newest first: backwards is oldest first.
	for i := len(cps) - 1; i >= 0; i-- {
		cp := cps[i]
		if !cp.StoreTime.IsZero() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		key := cp.SandboxID + "/" + strconv.Itoa(cp.Seq)
		if _, ok := e.ingest.failed[key]; ok && !all {
			continue
		}
		touched[cp.SandboxID] = true
		if err := e.storeCheckpoint(ctx, cp); err != nil {
			if errors.Is(err, errdefs.ErrCaptureLimit) {
				e.ingest.failed[key] = err
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("checkpoint %s of %s: %w", CheckpointID(cp.Seq), cp.SandboxID, err)
			}
			continue
		}
		delete(e.ingest.failed, key)
	}
	for sid := range touched {
		e.trimSnapshots(ctx, sid, false)
	}
	return firstErr
}

// storeCheckpoint stores checkpoint cp's snapshot in the blob store and
// records its manifest. A checkpoint deleted meanwhile (its sandbox) is
// not an error; a snapshot that is gone makes the checkpoint damaged. The
// caller holds e.ingest.mu.
func (e *Engine) storeCheckpoint(ctx context.Context, cp *store.Checkpoint) error {
	ctx, release := e.withLease(ctx)
	defer release()
	cctx, cancel := context.WithTimeoutCause(ctx, e.cfg.CaptureTimeout, errCaptureTimeout)
	defer cancel()
	limit := e.captureMaxBytes(ctx, cp.SandboxID)
	o := disk.StoreOptions{
		Blobs: e.blobsFor(ctx), MaxBytes: limit,
		Fault: func(_ context.Context, point string) {
			if point == disk.StoreCaptured {
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
		e.freeFailedCapture(ctx)
		if _, gerr := e.st.GetCheckpoint(ctx, cp.SandboxID, cp.Seq); errors.Is(gerr, errdefs.ErrCheckpointNotFound) {
			return nil // deleted with its sandbox meanwhile
		}
		if errors.Is(err, fs.ErrNotExist) {
			e.log.Error("a checkpoint waiting to be stored lost its snapshot: damaged", "sandbox", cp.SandboxID, "id", CheckpointID(cp.Seq))
			_ = e.st.SetCheckpointHealth(ctx, cp.SandboxID, cp.Seq, api.HealthDamaged)
		}
		return e.captureErr(cctx, err, limit)
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

// storedCheckpoint returns checkpoint seq of sb with its manifest in the
// blob store, storing it (and older pending ones) first if needed.
// Errors: ErrCheckpointNotFound, those of the store.
func (e *Engine) storedCheckpoint(ctx context.Context, sandboxID string, seq int) (*store.Checkpoint, error) {
	cp, err := e.st.GetCheckpoint(ctx, sandboxID, seq)
	if err != nil || !cp.StoreTime.IsZero() {
		return cp, err
	}
	serr := e.storePending(ctx, sandboxID, true) // an older one's failure need not be this one's
	cp, err = e.st.GetCheckpoint(ctx, sandboxID, seq)
	if err == nil && cp.StoreTime.IsZero() {
		if serr == nil {
			serr = errors.New("not stored")
		}
		return nil, fmt.Errorf("checkpoint %s is not in the blob store: %w", CheckpointID(seq), serr)
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
func (e *Engine) restoreSnapshotLocked(ctx context.Context, sb *store.Sandbox, cp *store.Checkpoint, opID string) (fallback bool, err error) {
	err = e.layers.RestoreCheckpoint(sb.ID, opID, cp.Seq, disk.RestoreOptions{
		Fault: func(point string) { e.fault("restore:" + point) },
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !cp.StoreTime.IsZero() {
			return true, nil
		}
		e.deleteOp(ctx, sb.ID, opID)
		return false, err
	}
	if err := e.recordRestore(ctx, sb, opID, cp.Seq); err != nil {
		return false, err
	}
	err = e.layers.FinishSnapshotRestore(sb.ID, opID)
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
		e.ingest.mu.Lock()
		defer e.ingest.mu.Unlock()
		m, err := disk.GetManifest(e.ctx, e.blobs, manifestRef(cp))
		if err == nil {
			err = e.layers.SaveCacheOf(id, lineage, m)
		}
		if err != nil && e.ctx.Err() == nil {
			e.log.Warn("restore: the layer has no capture cache (its next checkpoint's store reads it whole)", "sandbox", id, "err", err)
		}
	}()
}
