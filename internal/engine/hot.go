package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// Memory images off the request path (hot images). The rules:
//
//   - A memory snapshot's capture (a kept snapshot's, a fork's) writes its
//     image into snapshots/tmp-<id>, then renames it whole to
//     snapshots/hot/<id>: the snapshot's hot image.
//   - The snapshot is then recorded at once, without a memory record
//     (store.Snapshot.StoreTime zero), and the call answers: a snapshot is
//     listed as soon as it can be restored on this node.
//   - The ingester (ingestLoop) stores the hot images of pending
//     snapshots in the blob store, oldest first, and records their memory
//     image and store_time (store.SetSnapshotStored): from then on the
//     snapshot survives the loss of this node's disk.
//   - A fork's copies and a start from a snapshot restore from the hot
//     image when this node has it (no fetch, no decompression); otherwise
//     from a copy fetched from the blob store.
//   - Hot images of stored snapshots stay as a restore cache, the newest
//     first, within Config.HotImageBytes; those of pending snapshots, and
//     those a restore or the ingester is reading, are never dropped.
//   - At start (recoverHot), a hot image without a ready record goes (a
//     crash between the rename and the record, or a delete); a pending
//     record whose hot image is gone can never be restored: it is deleted,
//     and logged.
//
// A suspend uses them too: a suspended sandbox's snapshot is pending until
// its image is stored. One whose hot image is lost before that is not
// deleted (its sandbox names it): its resume fails (errMemoryImageLost);
// the sandbox can be deleted.

// DefaultHotImageBytes is the default of Config.HotImageBytes: 2 GiB of
// stored snapshots' hot images kept on this node for fast restores.
const DefaultHotImageBytes = 2 << 30

// hotImages counts the users of each hot image (by snapshot id): a
// capture between its rename and its record, a restore reading it, the
// ingester storing it. trimHot drops none that has a user.
type hotImages struct {
	mu    sync.Mutex
	users map[string]int
}

func newHotImages() *hotImages { return &hotImages{users: map[string]int{}} }

// hotDir holds the hot images, one directory per snapshot id.
func (e *Engine) hotDir() string { return filepath.Join(e.snapshotsDir(), "hot") }

// hotImage is the path of snapshot id's hot image.
func (e *Engine) hotImage(id string) string { return filepath.Join(e.hotDir(), id) }

// holdHot marks snapshot id's hot image in use (it need not exist yet);
// the returned func, to be called once, ends the use.
func (e *Engine) holdHot(id string) func() {
	e.hot.mu.Lock()
	defer e.hot.mu.Unlock()
	return e.hot.holdLocked(id)
}

// holdLocked counts a user of id's hot image and returns the func that
// ends its use (once). The caller holds h.mu.
func (h *hotImages) holdLocked(id string) func() {
	h.users[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			if h.users[id]--; h.users[id] <= 0 {
				delete(h.users, id)
			}
			h.mu.Unlock()
		})
	}
}

// openHot returns snapshot id's hot image, held until release, or ok
// false when this node does not have it.
func (e *Engine) openHot(id string) (dir string, release func(), ok bool) {
	e.hot.mu.Lock()
	defer e.hot.mu.Unlock()
	dir = e.hotImage(id)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", nil, false
	}
	return dir, e.hot.holdLocked(id), true
}

// keepHot makes dir, a capture's whole memory image, snapshot id's hot
// image (a rename), and returns its path. The caller holds it (holdHot)
// until the snapshot is recorded.
func (e *Engine) keepHot(dir, id string) (string, error) {
	if err := os.MkdirAll(e.hotDir(), 0o700); err != nil {
		return "", err
	}
	hot := e.hotImage(id)
	if err := os.Rename(dir, hot); err != nil {
		return "", fmt.Errorf("keep the memory image: %w", err)
	}
	return hot, nil
}

// dropHot removes snapshot id's hot image unless something uses it (it
// then goes with a later trimHot). It reports whether it removed one.
func (e *Engine) dropHot(id string) bool {
	h := e.hot
	h.mu.Lock()
	if h.users[id] > 0 {
		h.mu.Unlock()
		return false
	}
	// Renamed aside under the lock, so that no openHot finds it half
	// removed; removed outside it.
	trash := filepath.Join(e.snapshotsDir(), "tmp-drop-"+id)
	err := os.Rename(e.hotImage(id), trash)
	h.mu.Unlock()
	if err != nil {
		return false
	}
	_ = os.RemoveAll(trash)
	return true
}

// errMemoryImageLost: a pending snapshot's hot image is gone, and it was
// never stored in the blob store; it can never be restored.
var errMemoryImageLost = errors.New("its memory image was only on this node and is gone")

// memoryImage is the dir of snapshot sn's memory image to restore from:
// its hot image when this node has it (hot true; held until release),
// else a copy fetched from the blob store into a temporary dir (removed
// by release). A pending snapshot without a hot image fails with
// errMemoryImageLost; a fetch fails with the blob store's error.
func (e *Engine) memoryImage(ctx context.Context, sn *store.Snapshot) (dir string, hot bool, release func(), err error) {
	if dir, release, ok := e.openHot(sn.ID); ok {
		return dir, true, release, nil
	}
	if !sn.HasMemory() {
		return "", false, nil, errMemoryImageLost
	}
	var im snapshot.Image
	if err := json.Unmarshal(sn.Memory, &im); err != nil {
		return "", false, nil, fmt.Errorf("its memory image record: %w", err)
	}
	dir = filepath.Join(e.snapshotsDir(), "tmp-"+newSnapshotID())
	if err := snapshot.Fetch(ctx, e.blobsFor(ctx), im, dir); err != nil {
		os.RemoveAll(dir)
		return "", false, nil, fmt.Errorf("fetch its memory image: %w", err)
	}
	return dir, false, func() { os.RemoveAll(dir) }, nil
}

// storeHotRound is the ingester's round for memory images: it stores the
// hot image of every pending snapshot, oldest first, then trims the hot
// images (trimHot). It returns the first error of a store that may work
// when retried, or ctx's when it ends.
func (e *Engine) storeHotRound(ctx context.Context) error {
	all, err := e.st.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	var firstErr error
	// Listed newest first: backwards is oldest first.
	for i := len(all) - 1; i >= 0; i-- {
		sn := all[i]
		if !pendingHot(sn) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := e.storeHot(ctx, sn); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("snapshot %s of %s: %w", sn.ID, sn.SandboxName, err)
		}
	}
	e.trimHot(ctx)
	return firstErr
}

// pendingHot reports whether sn waits for its hot image to be stored: a
// ready snapshot without a StoreTime.
func pendingHot(sn *store.Snapshot) bool {
	return sn.State == "ready" && sn.StoreTime.IsZero()
}

// storeHot stores pending snapshot sn's hot image in the blob store and
// records it (SetSnapshotStored). A snapshot deleted, expired or stored
// meanwhile is not an error (what was put goes with the next collection).
// One whose hot image is gone can never be stored: its record is deleted,
// logged; a suspended sandbox's stays, and the error says why.
func (e *Engine) storeHot(ctx context.Context, sn *store.Snapshot) error {
	// One store of a snapshot at a time: the ingester's round and a
	// caller that needs it stored now (a suspend, a recovery snapshot or
	// a fork in a cluster) share it instead of storing it twice.
	_, err, _ := e.hotStores.Do(sn.ID, func() (any, error) { return nil, e.storeHotOnce(ctx, sn) })
	return err
}

// storeHotOnce is storeHot's work.
func (e *Engine) storeHotOnce(ctx context.Context, sn *store.Snapshot) error {
	ctx, release := e.withLease(ctx)
	defer release()
	dir, done, ok := e.openHot(sn.ID)
	if !ok {
		// A hot image goes only after its record is deleted, expired or
		// stored: read the record again to tell that from a lost image.
		cur, err := e.st.GetSnapshot(ctx, sn.ID)
		if errors.Is(err, errdefs.ErrSnapshotNotFound) || (err == nil && !pendingHot(cur)) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.Suspend {
			return fmt.Errorf("suspended sandbox %s: %w", sn.SandboxName, errMemoryImageLost)
		}
		e.log.Error("a snapshot waiting to be stored has lost its memory image: deleting it", "snapshot", sn.ID, "sandbox", sn.SandboxName)
		if err := e.removeSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, errdefs.ErrSnapshotNotFound) {
			return err
		}
		return nil
	}
	defer done()
	start := time.Now()
	// Bounded like a capture (CaptureTimeout): a blob store that never
	// answers fails this store, to be tried again at the next round,
	// instead of holding the ingester.
	sctx, cancel := context.WithTimeout(ctx, e.cfg.CaptureTimeout)
	im, stats, err := snapshot.Store(sctx, e.blobsFor(sctx), dir)
	cancel()
	if err != nil {
		return fmt.Errorf("store its memory image: %w", err)
	}
	e.fault("snapshot:stored")
	mem, err := json.Marshal(im)
	if err != nil {
		return err
	}
	err = e.st.SetSnapshotStored(ctx, &store.Snapshot{ID: sn.ID, Memory: mem, MemoryBytes: stats.Bytes, StoredBytes: sn.StoredBytes + stats.AddedBytes})
	if errors.Is(err, errdefs.ErrSnapshotNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record its memory image: %w", err)
	}
	e.log.Info("snapshot stored", "snapshot", sn.ID, "sandbox", sn.SandboxName, "fork", sn.Fork, "ms", time.Since(start).Milliseconds(),
		"memory_bytes", stats.Bytes, "stored_bytes", sn.StoredBytes+stats.AddedBytes)
	return nil
}

// trimHot drops the hot images that are not needed: those without a ready
// record (deleted, expired, or left by a crash before the record), then
// those of stored snapshots past Config.HotImageBytes, oldest first.
// Pending snapshots' images and images in use stay.
func (e *Engine) trimHot(ctx context.Context) {
	ents, err := os.ReadDir(e.hotDir())
	if err != nil {
		return
	}
	// The dirs are listed before the records: a dir whose capture was
	// recorded after this read is held until then (holdHot), and one
	// recorded before is in the list below.
	held := map[string]bool{}
	e.hot.mu.Lock()
	for id := range e.hot.users {
		held[id] = true
	}
	e.hot.mu.Unlock()
	all, err := e.st.ListSnapshots(ctx, "")
	if err != nil {
		return
	}
	ready := map[string]*store.Snapshot{}
	for _, sn := range all {
		if sn.State == "ready" {
			ready[sn.ID] = sn
		}
	}
	type kept struct {
		id    string
		bytes int64
		at    time.Time
	}
	var stored []kept
	for _, de := range ents {
		id := de.Name()
		sn := ready[id]
		switch {
		case held[id]:
		case sn == nil:
			if e.dropHot(id) {
				e.log.Info("dropped the memory image of a snapshot that is gone", "snapshot", id)
			}
		case !sn.StoreTime.IsZero():
			stored = append(stored, kept{id: id, bytes: dirBytes(e.hotImage(id)), at: sn.CreateTime})
		}
	}
	budget := e.cfg.HotImageBytes
	if budget == 0 {
		budget = DefaultHotImageBytes
	}
	sort.Slice(stored, func(i, j int) bool { return stored[i].at.After(stored[j].at) })
	var total int64
	for _, k := range stored {
		total += k.bytes
		if total > budget {
			e.dropHot(k.id)
		}
	}
}

// dirBytes is the bytes of the regular files directly in dir.
func dirBytes(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, de := range ents {
		if fi, err := de.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// recoverHot puts hot images and snapshot records in agreement at start:
// a pending record whose hot image is gone is deleted (it can never be
// restored), hot images without a ready record go, and the ingester is
// kicked for the rest.
func (e *Engine) recoverHot(ctx context.Context) error {
	all, err := e.st.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range all {
		if !pendingHot(sn) {
			continue
		}
		if fi, err := os.Stat(e.hotImage(sn.ID)); err == nil && fi.IsDir() {
			continue
		}
		if sn.Suspend {
			e.log.Error("recover: a suspended sandbox's memory image was only on this node and is gone: it cannot be resumed", "snapshot", sn.ID, "sandbox", sn.SandboxName)
			continue
		}
		e.log.Error("recover: a snapshot waiting to be stored has no memory image on this node: deleting it", "snapshot", sn.ID, "sandbox", sn.SandboxName)
		if err := e.st.DeleteSnapshot(ctx, sn.ID); err != nil {
			return err
		}
	}
	e.trimHot(ctx)
	e.kickIngest()
	return nil
}
