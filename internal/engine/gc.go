package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/gc"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// gcInterval is how often the background collection runs without a kick.
const gcInterval = time.Minute

// newCollector is the engine's blob collector: it keeps what checkpoints,
// snapshots and capture caches use, and what the engine's leases pin.
func (e *Engine) newCollector() *gc.Collector {
	return gc.New(e.blobs, e.leases, e.log,
		gc.RootsFunc(e.markCheckpoints),
		gc.RootsFunc(e.markSnapshots),
		gc.RootsFunc(e.markCaptureCaches),
		gc.RootsFunc(e.markDeliveries))
}

// markCheckpoints marks every blob a checkpoint uses: its manifest and the
// chunks the manifest lists. A checkpoint whose manifest is lost or
// corrupt is marked damaged (it cannot be restored, and what it used
// cannot be known; other checkpoints keep their chunks); any other read
// error aborts the round.
func (e *Engine) markCheckpoints(ctx context.Context, mark func(blob.Digest)) error {
	cps, err := e.st.ListCheckpoints(ctx, "")
	if err != nil {
		return err
	}
	for _, cp := range cps {
		if cp.StoreTime.IsZero() {
			continue // a snapshot checkpoint not stored yet: no blobs
		}
		ref := manifestRef(cp)
		for _, d := range ref {
			mark(d)
		}
		m, err := disk.GetManifest(ctx, e.blobs, ref)
		if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrCorrupt) {
			e.log.Error("gc: checkpoint without a readable manifest is damaged", "sandbox", cp.SandboxID, "id", CheckpointID(cp.Seq), "err", err)
			_ = e.st.SetCheckpointHealth(ctx, cp.SandboxID, cp.Seq, api.HealthDamaged)
			continue
		}
		if err != nil {
			return fmt.Errorf("gc: read manifest of %s/%s: %w", cp.SandboxID, CheckpointID(cp.Seq), err)
		}
		for _, d := range m.Chunks() {
			mark(d)
		}
	}
	return nil
}

// markSnapshots marks every blob a ready snapshot uses: its memory image,
// its disk manifest and the manifest's chunks. A lost or corrupt disk
// manifest is logged and skipped; a memory record that does not decode
// makes the snapshot damaged (see markDamagedMemory) and the round goes
// on; any other error aborts the round.
func (e *Engine) markSnapshots(ctx context.Context, mark func(blob.Digest)) error {
	all, err := e.st.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range all {
		if sn.State != "ready" {
			continue
		}
		im, err := snapshotImage(sn)
		if err != nil {
			e.log.Error("gc: snapshot with an unreadable memory record is damaged", "snapshot", sn.ID, "sandbox", sn.SandboxID, "err", err)
			markDamagedMemory(sn.Memory, mark)
		}
		for _, d := range im.Digests() {
			mark(d)
		}
		ref := make(disk.ManifestRef, len(sn.Disk))
		for i, d := range sn.Disk {
			ref[i] = blob.Digest(d)
			mark(ref[i])
		}
		m, err := disk.GetManifest(ctx, e.blobs, ref)
		if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrCorrupt) {
			e.log.Error("gc: snapshot without a readable disk manifest", "snapshot", sn.ID, "err", err)
			continue
		}
		if err != nil {
			return err
		}
		for _, d := range m.Chunks() {
			mark(d)
		}
	}
	return nil
}

// snapshotImage decodes sn's memory record: an error means the snapshot is
// damaged (it cannot be restored; SnapshotHealth says so).
func snapshotImage(sn *store.Snapshot) (snapshot.Image, error) {
	var im snapshot.Image
	if err := json.Unmarshal(sn.Memory, &im); err != nil {
		return nil, fmt.Errorf("snapshot %s: memory record: %w", sn.ID, err)
	}
	for _, f := range im {
		for _, d := range f.Chunks {
			if err := d.Validate(); err != nil {
				return nil, fmt.Errorf("snapshot %s: memory record: %w", sn.ID, err)
			}
		}
	}
	return im, nil
}

// SnapshotHealth is api.HealthOK, or api.HealthDamaged when sn's memory
// record cannot be decoded (the snapshot cannot be restored; delete it).
func SnapshotHealth(sn *store.Snapshot) string {
	if sn.State == "ready" {
		if _, err := snapshotImage(sn); err != nil {
			return api.HealthDamaged
		}
	}
	return api.HealthOK
}

// digestPattern is a blob digest's form, as it appears in a JSON record.
var digestPattern = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// markDamagedMemory marks every digest still legible in a memory record
// that does not decode (a truncated or overwritten record).
//
// Why sweeping the rest is safe: the memory record is the only place sbx
// keeps the names of a snapshot's memory chunks. A chunk whose name is no
// longer in the record's bytes cannot be named by any restore, of this
// record or of any repair of it made from what is left, so keeping it
// could not help; every name that is still there is kept, so a repair
// (or an operator reading the record) finds its chunks. The snapshot's
// disk side (its manifest and chunks, in their own column) is marked as
// for a healthy one. Stopping every round instead would stop collection
// for all sandboxes until someone deleted the record, which is what a
// single damaged record must not do.
func markDamagedMemory(raw []byte, mark func(blob.Digest)) {
	for _, m := range digestPattern.FindAll(raw, -1) {
		mark(blob.Digest(m))
	}
}

// markCaptureCaches marks the chunks of every sandbox layer's capture
// cache: it lets the next capture reuse the chunk lists of unchanged files
// without reading them, so those chunks must stay even when the snapshot
// that stored them is gone (a fork's, a resumed suspend's, an expired one).
func (e *Engine) markCaptureCaches(ctx context.Context, mark func(blob.Digest)) error {
	sbs, err := e.localSandboxes(ctx, storeAll)
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		if m := e.layers.LoadCache(sb.ID); m != nil {
			for _, d := range m.Chunks() {
				mark(d)
			}
		}
	}
	return nil
}

// gcLoop is the background collection: every gcInterval or on a kick, it
// expires snapshots, collects blobs, then collects images.
func (e *Engine) gcLoop() {
	defer e.bg.Done()
	before := func(ctx context.Context) {
		if err := e.expireSnapshots(ctx); err != nil && ctx.Err() == nil {
			e.log.Error("expire snapshots", "err", err)
		}
	}
	after := func(ctx context.Context) {
		if err := e.collectImages(ctx); err != nil && ctx.Err() == nil {
			e.log.Error("image gc", "err", err)
		}
	}
	if err := e.blobGCOff(); err != nil {
		e.log.Warn("blob collection is off: the blob store grows until it is on", "reason", err)
		e.every(gcInterval, 10*time.Minute, func(ctx context.Context) {
			before(ctx)
			after(ctx)
		})
		return
	}
	e.collector.Run(e.ctx, gcInterval, before, after)
}

// blobGCOff says why blobs are not collected, nil when they are: the nodes
// of a cluster that share a blob store would each sweep blobs that
// another node has stored but not yet recorded (a blob lease is a
// process's own).
func (e *Engine) blobGCOff() error {
	if e.cfg.Node != "" && e.cfg.SharedBlobs {
		return errors.New("the nodes of this cluster share its blob store, and a node's blob leases do not reach the others yet")
	}
	return nil
}

// collectImages removes unpacked images that no image name and no sandbox
// uses any more (an image replaced while sandboxes used the old one).
func (e *Engine) collectImages(ctx context.Context) error {
	sbs, err := e.st.ListSandboxes(ctx, storeAll)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, sb := range sbs {
		keep[sb.ImageID] = true
	}
	return e.images.GC(ctx, keep, false)
}

// kickGC asks the background collection to run soon.
func (e *Engine) kickGC() {
	if e.blobGCOff() == nil {
		e.collector.Kick()
	}
}

// freeFailedCapture frees the blobs a failed capture under ctx's lease
// stored and nothing records, before the failure is answered (see
// gc.Collector.FreeFailedCapture). Release the lease first.
func (e *Engine) freeFailedCapture(ctx context.Context) {
	if e.blobGCOff() == nil {
		e.collector.FreeFailedCapture(ctx, leaseOf(ctx))
	}
}

// GC runs one blob collection round now (for tests and operators),
// waiting for a round in progress no longer than ctx allows. It returns
// the first error of a root provider (then nothing is deleted) or of the
// store.
func (e *Engine) GC(ctx context.Context) error {
	if err := e.blobGCOff(); err != nil {
		return errdefs.New(errdefs.ErrConflict, "blob collection is off: %v", err)
	}
	_, _, err := e.collector.Collect(ctx)
	return err
}
