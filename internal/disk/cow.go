package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Copy-on-write disk checkpoints. On btrfs layers a sandbox's layer (upper
// dir, overlayfs work dir, capture cache) is one subvolume, LAYERS/<id>.
// A checkpoint is a read-only snapshot of it, SNAPS/<id>/<seq>, where
// SNAPS is "layer-checkpoints" beside LAYERS: milliseconds whatever the
// layer's size, and the sandbox keeps running (its writes reach the host
// upper dir at once, see ../../docs/undo.md for what that gives a file
// being written at that instant). The snapshot is then stored as chunks
// and a manifest in the background (StoreCheckpoint), and may be kept as a
// restore cache.
//
// A restore from a snapshot (RestoreCheckpoint) makes a writable snapshot
// of it beside the layer, LAYERS/<id>.restore-<op>, marks its upper dir
// with the operation id, and exchanges it with LAYERS/<id> in one
// rename(2) (RENAME_EXCHANGE): the layer is the old one or the new one,
// whole, whatever happens; FinishRestore, AbandonRestore and RecoverRestore
// complete it as they complete a restore from chunks.

// CheckpointsMechanism names how checkpoints are taken, for GET /v1/health:
// "btrfs-snapshot" (Layers.Snapshots) or "capture" (the layer is read into
// chunks while the sandbox is paused for the end of the read).
const (
	MechanismSnapshot = "btrfs-snapshot"
	MechanismCapture  = "capture"
)

// ErrNoSnapshots: a layer that is not a btrfs subvolume (plain directory
// layers, or a layer made before btrfs was turned on) has no snapshots.
var ErrNoSnapshots = errors.New("the layer is not a btrfs subvolume: no snapshot checkpoints")

// Snapshots reports whether new layers can have snapshot checkpoints (the
// layers are btrfs subvolumes).
func (l *Layers) Snapshots() bool { return l.btrfs }

// Mechanism is how checkpoints of new layers are taken: MechanismSnapshot
// or MechanismCapture.
func (l *Layers) Mechanism() string {
	if l.btrfs {
		return MechanismSnapshot
	}
	return MechanismCapture
}

// CanSnapshot reports whether checkpoints of id's layer can be snapshots:
// the layer is a btrfs subvolume.
func (l *Layers) CanSnapshot(id string) bool {
	return l.btrfs && isSubvolume(l.base(id))
}

// snapsDir holds the snapshot dirs of every layer.
func (l *Layers) snapsDir() string { return filepath.Join(filepath.Dir(l.dir), "layer-checkpoints") }

// checkpointDir holds the snapshots of id's layer.
func (l *Layers) checkpointDir(id string) string { return filepath.Join(l.snapsDir(), id) }

// checkpointPath is the snapshot of checkpoint seq of id's layer.
func (l *Layers) checkpointPath(id string, seq int) string {
	return filepath.Join(l.checkpointDir(id), strconv.Itoa(seq))
}

// SnapshotCheckpoint takes checkpoint seq of id's layer: a read-only
// snapshot of the whole layer, taken while the sandbox runs. A snapshot
// left at seq by an earlier attempt (a crash before the caller recorded
// it) is replaced. Errors: ErrNoSnapshots, the btrfs ioctls'.
func (l *Layers) SnapshotCheckpoint(id string, seq int) error {
	if !l.CanSnapshot(id) {
		return ErrNoSnapshots
	}
	if err := os.MkdirAll(l.checkpointDir(id), 0o700); err != nil {
		return err
	}
	p := l.checkpointPath(id, seq)
	if err := removeSubvolume(p); err != nil {
		return err
	}
	return snapshotSubvolume(l.base(id), p, true)
}

// HasCheckpointSnapshot reports whether checkpoint seq of id's layer has
// its snapshot on this node.
func (l *Layers) HasCheckpointSnapshot(id string, seq int) bool {
	return l.btrfs && isSubvolume(l.checkpointPath(id, seq))
}

// CheckpointSnapshots lists the checkpoints of id's layer that have a
// snapshot, in ascending order; none is an empty list.
func (l *Layers) CheckpointSnapshots(id string) ([]int, error) {
	des, err := os.ReadDir(l.checkpointDir(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []int
	for _, de := range des {
		if n, err := strconv.Atoi(de.Name()); err == nil && n >= 0 && strconv.Itoa(n) == de.Name() {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

// SnapshotLayerIDs lists the sandbox ids that have checkpoint snapshots
// (or their directory).
func (l *Layers) SnapshotLayerIDs() ([]string, error) {
	if !l.btrfs {
		return nil, nil
	}
	des, err := os.ReadDir(l.snapsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out, nil
}

// DropCheckpointSnapshot deletes the snapshot of checkpoint seq of id's
// layer (btrfs frees its space in the background); none is fine.
func (l *Layers) DropCheckpointSnapshot(id string, seq int) error {
	return removeSubvolume(l.checkpointPath(id, seq))
}

// DropCheckpointSnapshots deletes every snapshot of id's layer and their
// directory; none is fine.
func (l *Layers) DropCheckpointSnapshots(id string) error {
	seqs, err := l.CheckpointSnapshots(id)
	if err != nil {
		return err
	}
	for _, seq := range seqs {
		if err := l.DropCheckpointSnapshot(id, seq); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(l.checkpointDir(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeSubvolume deletes the subvolume at p, read-only or not; a missing
// p is fine, and a plain directory is removed with its content.
func removeSubvolume(p string) error {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if isSubvolume(p) {
		if err := deleteSubvolume(p); err == nil {
			return nil
		}
	}
	return os.RemoveAll(p)
}

// StoreCheckpoint stores the snapshot of checkpoint seq of id's layer in
// o.Blobs as Store stores a layer (o.Freeze and o.Thaw are not used: the
// snapshot does not change), with id's capture cache. takenAt is when the
// snapshot was asked for (no later than the instant it shows). The new
// manifest becomes the cache when the layer is still there. Errors: as
// Store's; a missing snapshot wraps fs.ErrNotExist.
func (l *Layers) StoreCheckpoint(ctx context.Context, id string, seq int, takenAt time.Time, o StoreOptions) (*Stored, error) {
	snap := l.checkpointPath(id, seq)
	if !isSubvolume(snap) {
		return nil, fmt.Errorf("checkpoint %d of %s: no snapshot: %w", seq, id, fs.ErrNotExist)
	}
	return l.store(ctx, id, CaptureOptions{Upper: filepath.Join(snap, "upper"), Still: true, AsOfNS: takenAt.UnixNano()}, o)
}

// restoreSubvolume is where a restore from a snapshot builds id's new
// layer (and where the old one is after the swap).
func (l *Layers) restoreSubvolume(id, opID string) string {
	return filepath.Join(l.dir, id+".restore-"+opID)
}

// trashSubvolume is where FinishSnapshotRestore moves id's old layer for
// EmptyTrash.
func (l *Layers) trashSubvolume(id, opID string) string {
	return filepath.Join(l.dir, id+".trash-"+opID)
}

// isRestoreSubvolume reports whether a name in the layers dir is a
// restore's (being built, or an old layer waiting to be deleted), not a
// layer.
func isRestoreSubvolume(name string) bool {
	return strings.Contains(name, ".restore-") || strings.Contains(name, ".trash-")
}

// removeTrashSubvolumes deletes the old layers of id that restores from
// snapshots moved aside.
func (l *Layers) removeTrashSubvolumes(id string) error {
	if !l.btrfs {
		return nil
	}
	paths, err := filepath.Glob(filepath.Join(l.dir, id+".trash-*"))
	if err != nil {
		return err
	}
	for _, p := range paths {
		if err := removeSubvolume(p); err != nil {
			return err
		}
	}
	return nil
}

// FinishSnapshotRestore completes restore opID of layer id from a
// snapshot (RestoreCheckpoint), whose swap the caller recorded: the swap
// mark and overlayfs's work dir go, the capture cache is dropped (the
// caller may seed it: SaveCacheOf), and the old layer is moved aside for
// EmptyTrash, which the caller runs when it likes (deleting a subvolume
// costs a btrfs transaction). Calling it again after a crash is harmless.
func (l *Layers) FinishSnapshotRestore(id, opID string) error {
	if err := l.finishSwap(id, opID, true); err != nil {
		return err
	}
	return l.DropCache(id)
}

// RestoreCheckpoint puts id's layer back as checkpoint seq's snapshot has
// it, for restore operation opID (journalled by the caller before: see
// Restore): the overlay is unmounted, a writable snapshot of the
// checkpoint is made beside the layer, marked and swapped in with one
// rename(2). The new layer has no quota (the caller sets it before the
// sandbox boots). After it returns nil the caller records the swap, then
// calls FinishRestore (with the checkpoint's manifest when it is stored,
// else nil; linked true). On an error the swap did not happen and nothing
// of the restore is left. Errors: ErrNoSnapshots, a missing snapshot
// (wrapping fs.ErrNotExist), the btrfs ioctls', rename(2)'s.
func (l *Layers) RestoreCheckpoint(id, opID string, seq int, o RestoreOptions) error {
	if !l.CanSnapshot(id) {
		return ErrNoSnapshots
	}
	snap := l.checkpointPath(id, seq)
	if !isSubvolume(snap) {
		return fmt.Errorf("checkpoint %d of %s: no snapshot: %w", seq, id, fs.ErrNotExist)
	}
	t := time.Now()
	if err := l.Unmount(id); err != nil {
		return err
	}
	t = o.step("unmount", t)
	dst := l.restoreSubvolume(id, opID)
	err := removeSubvolume(dst)
	if err == nil {
		err = snapshotSubvolume(snap, dst, false)
		t = o.step("btrfs snapshot", t)
	}
	if err == nil && l.Quota() {
		// A snapshot inherits its source's qgroup limit: a checkpoint of
		// a layer at its quota would leave no room for the mark.
		err = limitSubvolume(dst, 0)
		o.step("btrfs qgroup", t)
	}
	if err == nil {
		fault(o.Fault, RestoreBuilt)
		t = time.Now()
		err = l.swapSubvolume(id, opID)
		o.step("swap", t)
	}
	if err != nil {
		if rerr := l.AbandonRestore(id, opID); rerr != nil {
			err = fmt.Errorf("%w (and removing its half-built layer: %v)", err, rerr)
		}
		return err
	}
	fault(o.Fault, RestoreSwapped)
	return nil
}

// swapSubvolume marks the upper dir of restore opID's new layer with opID
// and exchanges the new layer with id's in one rename(2).
func (l *Layers) swapSubvolume(id, opID string) error {
	if !l.unmounted && l.Mounted(id) {
		return fmt.Errorf("swap layer of %s: overlay still mounted", id)
	}
	newLayer := l.restoreSubvolume(id, opID)
	// An older state of the layer: a lineage of its own (see lineageXattr).
	if err := newLineage(newLayer); err != nil {
		return err
	}
	upper := filepath.Join(newLayer, "upper")
	if err := unix.Setxattr(upper, l.restoreMark(), []byte(opID), 0); err != nil {
		return fmt.Errorf("mark restored layer: %w", err)
	}
	if err := fsyncDir(upper); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, l.base(id), unix.AT_FDCWD, newLayer, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("swap layer of %s: %w", id, err)
	}
	return fsyncDir(l.dir)
}

// cleanRestored removes from a layer restored from a snapshot what the
// snapshot caught of restores that ran on the layer then: their build
// dirs and the old layers they moved aside.
func (l *Layers) cleanRestored(id string) error {
	ents, err := os.ReadDir(l.base(id))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "restore-") || strings.HasPrefix(e.Name(), "trash-") {
			if err := os.RemoveAll(filepath.Join(l.base(id), e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoveRestoreLeftovers deletes every restore subvolume beside the layers
// (LAYERS/<id>.restore-<op>): call it only when no restore runs and every
// journalled one was finished or rolled back (at start, after recovery).
func (l *Layers) RemoveRestoreLeftovers() error {
	if !l.btrfs {
		return nil
	}
	des, err := os.ReadDir(l.dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if isRestoreSubvolume(de.Name()) {
			if err := removeSubvolume(filepath.Join(l.dir, de.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// NewUnmountedBtrfsLayers is NewUnmountedLayers on a btrfs filesystem:
// layers are subvolumes, with quotas, and checkpoints are snapshots, as in
// OpenLayers' btrfs mode, but no overlayfs is mounted. dir must be on
// btrfs and the caller root (quotas). For the engine's unit tier; sbxd
// never uses it. Errors: dir not on btrfs, enabling quotas.
func NewUnmountedBtrfsLayers(dir string) (*Layers, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if !isBtrfs(dir) {
		return nil, fmt.Errorf("%s is not on btrfs", dir)
	}
	if err := enableQuota(dir); err != nil {
		return nil, err
	}
	l := NewUnmountedLayers(dir)
	l.btrfs = true
	return l, nil
}
