package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/internal/blob"
)

// A restore puts a layer back as a manifest describes it: the new upperdir
// is built beside the current one (restore-<op>, unchanged files
// hard-linked, the rest written from chunks), marked with the operation id
// and exchanged with the current upperdir in one rename(2). Whatever
// happens, the upperdir is either the old layer or the new one, whole; the
// mark tells a recovery after a crash which one it is (RecoverRestore).
//
// The steps, for one operation id:
//
//	Restore         unmount, build in restore-<op>, mark, swap
//	                (a failure before the swap removes restore-<op>)
//	FinishRestore   after the caller recorded the swap: the old layer
//	                (now restore-<op>) and the mark go, the cache is redone
//	AbandonRestore  a restore that did not swap: restore-<op> goes
//	RecoverRestore  after a crash: one of the two above, from the mark

// Fault points of Restore, for RestoreOptions.Fault.
const (
	// RestoreBuilt: the new layer is built, not swapped in.
	RestoreBuilt = "built"
	// RestoreSwapped: the new layer is the upperdir; nothing is finished.
	RestoreSwapped = "swapped"
)

// RestoreOptions are the inputs of Restore.
type RestoreOptions struct {
	// Blobs holds the chunks of the target manifest.
	Blobs blob.Store
	// Fault, when set, is called at RestoreBuilt and RestoreSwapped (crash
	// tests stop there). It may block; it cannot fail the restore.
	Fault func(point string)
	// Step, when set, is told how long each step of a restore from a
	// checkpoint's snapshot took (RestoreCheckpoint): "unmount", "btrfs
	// snapshot" (the writable snapshot), "btrfs qgroup" (lifting its
	// limit), "swap" (the mark, the rename(2), their fsyncs). sbx bench
	// prints them beside the restore.
	Step func(name string, took time.Duration)
}

// step calls o.Step, if set, with the time since start, and returns now.
func (o RestoreOptions) step(name string, start time.Time) time.Time {
	now := time.Now()
	if o.Step != nil {
		o.Step(name, now.Sub(start))
	}
	return now
}

// Restore builds target as a new upperdir for layer id beside the current
// one and swaps it in, for restore operation opID (an id unique to this
// restore, that the caller journals before: RecoverRestore needs it after a
// crash). The overlay is unmounted first, so that nothing writes while the
// current layer is read, and the layer's quota lifted (the build may need up
// to twice the space until the old layer goes; the caller sets it again).
// After it returns nil the new layer is the upperdir and the caller must
// record that, then call FinishRestore.
//
// On an error the swap did not happen: the old layer is the upperdir,
// whole, and nothing of the build is left. A chunk missing from or corrupt
// in Blobs fails with an error wrapping blob.ErrNotFound or
// blob.ErrCorrupt; errors name paths as the sandbox sees them.
func (l *Layers) Restore(ctx context.Context, id, opID string, target *Manifest, o RestoreOptions) (*MaterializeStats, error) {
	if err := l.Unmount(id); err != nil {
		return nil, err
	}
	if err := l.SetQuota(id, 0); err != nil {
		return nil, err
	}
	dst, err := l.newRestoreDir(id, opID)
	if err != nil {
		return nil, err
	}
	stats, err := Materialize(ctx, MaterializeOptions{
		Target: target, Dst: dst, Store: o.Blobs,
		Current: l.Paths(id).Upper, CurrentCache: l.LoadCache(id),
	})
	if err == nil {
		fault(o.Fault, RestoreBuilt)
		err = l.swap(id, opID)
	}
	if err != nil {
		if rerr := l.AbandonRestore(id, opID); rerr != nil {
			err = fmt.Errorf("%w (and removing its half-built layer: %v)", err, rerr)
		}
		return nil, err
	}
	fault(o.Fault, RestoreSwapped)
	return stats, nil
}

func fault(f func(string), point string) {
	if f != nil {
		f(point)
	}
}

// FinishRestore completes restore opID of layer id, whose swap happened
// and is recorded by the caller: the old layer goes, and the capture cache
// describes the new one (target, as Restore built it; nil when unknown,
// after a crash: the cache is dropped and the next capture reads every
// file). linked says whether the new layer shares inodes with the old one
// (MaterializeStats.LinkedFiles > 0): then the old one is deleted now,
// before the cache is taken, as its deletion changes the shared files'
// ctimes. Otherwise it is moved aside and emptyLater is true: the caller
// calls EmptyTrash(id) when it likes (in the background). Calling it again
// after a crash is harmless.
func (l *Layers) FinishRestore(id, opID string, target *Manifest, linked bool) (emptyLater bool, err error) {
	later := !linked && target != nil
	if err := l.finishSwap(id, opID, later); err != nil {
		return false, err
	}
	if target == nil {
		return later, l.DropCache(id)
	}
	cache, err := Rescan(l.Paths(id).Upper, target)
	if err != nil {
		return later, err
	}
	return later, l.SaveCache(id, cache)
}

// AbandonRestore removes what restore opID of layer id built: for a
// restore that did not swap, the layer is as it was. Nothing built is
// fine.
func (l *Layers) AbandonRestore(id, opID string) error {
	if err := removeSubvolume(l.restoreSubvolume(id, opID)); err != nil {
		return err
	}
	return os.RemoveAll(l.restoreDir(id, opID))
}

// RecoverRestore finishes or rolls back restore opID of layer id after a
// crash cut it short, from what is on disk: swapped reports whether the
// swap had happened (the upperdir carries the operation's mark). The
// overlay is unmounted first (a failure to is ignored: the swap needs it
// gone, the steps after it do not).
//
// record is called once the outcome is known and must make it durable
// (the caller's journal entry goes, its records say which disk it is):
// for a restore that did not swap, after its half-built layer was removed
// (a failure to remove it is returned, after record); for one that did,
// before FinishRestore (with no manifest: the cache is dropped), as the
// finish erases the mark that tells the two apart. An error of record is
// returned as is and stops a finish.
func (l *Layers) RecoverRestore(id, opID string, record func(swapped bool) error) (swapped bool, err error) {
	_ = l.Unmount(id)
	if !l.swapped(id, opID) {
		rmErr := l.AbandonRestore(id, opID)
		if err := record(false); err != nil {
			return false, err
		}
		return false, rmErr
	}
	if err := record(true); err != nil {
		return true, err
	}
	_, err = l.FinishRestore(id, opID, nil, true)
	return true, err
}

// restoreXattr marks an upperdir built by a restore with the restore's
// operation id, so that recovery after a crash can tell whether the swap
// happened. overlayfs ignores trusted.sbx.* names.
const restoreXattr = "trusted.sbx.restore"

// unmountedRestoreXattr marks a swapped restore on unmounted layers (see
// NewUnmountedLayers).
const unmountedRestoreXattr = "user.sbx.restore"

// restoreMark is the xattr that marks a swapped restore on l.
func (l *Layers) restoreMark() string {
	if l.unmounted {
		return unmountedRestoreXattr
	}
	return restoreXattr
}

// newRestoreDir makes an empty directory beside id's upperdir for a
// restore to build the new layer in, named by the operation id.
func (l *Layers) newRestoreDir(id, opID string) (string, error) {
	d := l.restoreDir(id, opID)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", err
	}
	return d, nil
}

// restoreDir is the directory a restore with operation opID builds in
// (and, after the swap, where the old upperdir goes).
func (l *Layers) restoreDir(id, opID string) string {
	return filepath.Join(l.base(id), "restore-"+opID)
}

// swap exchanges id's upperdir with the restore dir of opID in one
// rename(2) (RENAME_EXCHANGE): either the old layer or the new one is the
// upperdir, whole, whatever happens. The overlay must be unmounted. The
// new upperdir is marked with opID until finishSwap.
func (l *Layers) swap(id, opID string) error {
	if !l.unmounted && l.Mounted(id) {
		return fmt.Errorf("swap layer of %s: overlay still mounted", id)
	}
	newDir := l.restoreDir(id, opID)
	if l.btrfs {
		// An older state of the layer: a lineage of its own (see
		// lineageXattr), before the swap makes it the layer.
		if err := newLineage(l.base(id)); err != nil {
			return err
		}
	}
	if err := unix.Setxattr(newDir, l.restoreMark(), []byte(opID), 0); err != nil {
		return fmt.Errorf("mark restored layer: %w", err)
	}
	if err := fsyncDir(newDir); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, l.Paths(id).Upper, unix.AT_FDCWD, newDir, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("swap layer of %s: %w", id, err)
	}
	return fsyncDir(l.base(id))
}

// swapped reports whether the swap of restore opID happened: the upperdir
// carries its mark.
func (l *Layers) swapped(id, opID string) bool {
	buf := make([]byte, 128)
	n, err := unix.Getxattr(l.Paths(id).Upper, l.restoreMark(), buf)
	return err == nil && string(buf[:n]) == opID
}

// finishSwap removes the old layer (now in the restore dir) — or, with
// later, moves it aside for EmptyTrash — and the swap mark and overlayfs's
// work dir, which may hold state of the old layer.
func (l *Layers) finishSwap(id, opID string, later bool) error {
	if _, err := os.Lstat(l.restoreSubvolume(id, opID)); err == nil {
		// A restore from a snapshot: the old layer is a whole subvolume,
		// deleted now or moved aside for EmptyTrash.
		if later {
			err = os.Rename(l.restoreSubvolume(id, opID), l.trashSubvolume(id, opID))
		} else {
			err = removeSubvolume(l.restoreSubvolume(id, opID))
		}
		if err != nil {
			return err
		}
		if err := l.cleanRestored(id); err != nil {
			return err
		}
	} else if later {
		if err := os.Rename(l.restoreDir(id, opID), filepath.Join(l.base(id), "trash-"+opID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	} else if err := os.RemoveAll(l.restoreDir(id, opID)); err != nil {
		return err
	}
	if err := unix.Removexattr(l.Paths(id).Upper, l.restoreMark()); err != nil && !errors.Is(err, unix.ENODATA) {
		return err
	}
	work := l.Paths(id).Work
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	return os.Mkdir(work, 0o755)
}

// EmptyTrash deletes the old layers FinishRestore and
// FinishSnapshotRestore moved aside for id.
func (l *Layers) EmptyTrash(id string) error {
	if err := l.removeTrashSubvolumes(id); err != nil {
		return err
	}
	ents, err := os.ReadDir(l.base(id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if len(e.Name()) > 6 && e.Name()[:6] == "trash-" {
			if err := os.RemoveAll(filepath.Join(l.base(id), e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// Build makes layer id (Create) and builds target in its upperdir, which
// must be empty (a new layer: a sandbox restored from a snapshot, or one
// whose layer was removed to be built again), with the chunks in blobs.
// The capture cache then describes it (when the rescan fails, the layer
// has none and its next capture reads every file). On an error the
// half-built layer is left for the caller's removal (Remove); a chunk
// missing from or corrupt in blobs is an error wrapping blob.ErrNotFound
// or blob.ErrCorrupt.
func (l *Layers) Build(ctx context.Context, id string, target *Manifest, blobs blob.Store) error {
	if err := l.Create(id); err != nil {
		return err
	}
	upper := l.Paths(id).Upper
	if _, err := Materialize(ctx, MaterializeOptions{Target: target, Dst: upper, Store: blobs}); err != nil {
		return fmt.Errorf("build the disk: %w", err)
	}
	if cache, err := Rescan(upper, target); err == nil {
		_ = l.SaveCache(id, cache)
	}
	return nil
}
