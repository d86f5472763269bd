package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// The fake runtime cannot checkpoint, so these tests plant what a capture
// leaves (a hot image dir and a pending record, as recordHot makes them)
// and check what the ingester, the trim and the recovery do with it.

// plantHot writes a hot image of size bytes (random, in two files) for
// snapshot id and, with record, its pending record, created at created.
// It returns the files' contents by name.
func (f *fakeEnv) plantHot(t *testing.T, id string, size int, record bool, created time.Time) map[string][]byte {
	t.Helper()
	// Held while planted, as a capture holds it until it is recorded: a
	// running ingester's trim would drop a hot image without a record.
	defer f.e.holdHot(id)()
	dir := filepath.Join(f.dir, "snapshots", "hot", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"checkpoint.img": make([]byte, size/4), "pages.img": make([]byte, size-size/4)}
	for name, b := range files {
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if record {
		sn := &store.Snapshot{ID: id, Name: id, SandboxID: "sbx_src", SandboxName: "src", Image: "default", ImageID: testImageID,
			Memory: []byte("[]"), MemoryBytes: int64(size), StoredBytes: 7, State: "ready", CreateTime: created.UTC(),
			ExpireTime: created.Add(time.Hour).UTC()}
		if err := f.st.AddSnapshot(context.Background(), sn); err != nil {
			t.Fatal(err)
		}
		if got, err := f.st.GetSnapshot(context.Background(), id); err != nil || !got.StoreTime.IsZero() {
			t.Fatalf("planted snapshot is not pending: %+v %v", got, err)
		}
	}
	return files
}

// waitStored waits until snapshot id records its memory image.
func (f *fakeEnv) waitStored(t *testing.T, id string) *store.Snapshot {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sn, err := f.st.GetSnapshot(context.Background(), id)
		if err == nil && !sn.StoreTime.IsZero() {
			return sn
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %s not stored: %+v %v\nlog:\n%s", id, sn, err, f.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkStoredImage fetches sn's memory image from the blob store and
// compares it with files; with fresh, its chunks were new to the store
// (stored_bytes counts them).
func (f *fakeEnv) checkStoredImage(t *testing.T, sn *store.Snapshot, files map[string][]byte, fresh bool) {
	t.Helper()
	var im snapshot.Image
	if err := json.Unmarshal(sn.Memory, &im); err != nil || len(im) != len(files) {
		t.Fatalf("memory record of %s: %s %v", sn.ID, sn.Memory, err)
	}
	out := t.TempDir()
	if err := snapshot.Fetch(context.Background(), f.e.blobs, im, out); err != nil {
		t.Fatal(err)
	}
	var size int64
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s of the stored image: %d bytes, %v; want the hot image's %d", name, len(got), err, len(want))
		}
		size += int64(len(want))
	}
	if sn.MemoryBytes != size || sn.StoredBytes < 7 || (fresh && sn.StoredBytes <= 7) {
		t.Fatalf("sizes of stored %s: memory %d (want %d), stored %d (want the disk's 7 plus the image's)", sn.ID, sn.MemoryBytes, size, sn.StoredBytes)
	}
}

func (f *fakeEnv) hotExists(id string) bool {
	_, err := os.Stat(filepath.Join(f.dir, "snapshots", "hot", id))
	return err == nil
}

// TestHotImageStoredInBackground: a pending snapshot's hot image is stored
// by the ingester and its record completed; the hot image stays as a
// cache and serves restores (memoryImage) before and after; deleting the
// snapshot drops it.
func TestHotImageStoredInBackground(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	files := f.plantHot(t, "snap_a", 300<<10, true, time.Now())
	sn, _ := f.st.GetSnapshot(ctx, "snap_a")
	dir, hot, release, err := f.e.memoryImage(ctx, sn)
	if err != nil || !hot || dir != filepath.Join(f.dir, "snapshots", "hot", "snap_a") {
		t.Fatalf("memory image of a pending snapshot: %q hot=%v %v", dir, hot, err)
	}
	release()
	f.e.kickIngest()
	sn = f.waitStored(t, "snap_a")
	f.checkStoredImage(t, sn, files, true)
	if !f.hotExists("snap_a") {
		t.Fatal("the hot image of a stored snapshot was dropped within the budget")
	}
	// A stored snapshot without its hot image is fetched from the blob store.
	if !f.e.dropHot("snap_a") {
		t.Fatal("dropHot of an unused hot image did nothing")
	}
	dir, hot, release, err = f.e.memoryImage(ctx, sn)
	if err != nil || hot {
		t.Fatalf("memory image without a hot image: %q hot=%v %v", dir, hot, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pages.img")); !bytes.Equal(got, files["pages.img"]) {
		t.Fatal("fetched image differs")
	}
	release()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a fetched image is left after its release: %v", err)
	}
	// Deleting a snapshot drops its hot image.
	f.plantHot(t, "snap_b", 10<<10, true, time.Now())
	f.e.kickIngest()
	f.waitStored(t, "snap_b")
	if err := f.e.DeleteSnapshot(ctx, "snap_b"); err != nil {
		t.Fatal(err)
	}
	if f.hotExists("snap_b") {
		t.Fatal("the hot image of a deleted snapshot is left")
	}
}

// TestHotImageLostIsNotRestorable: a pending snapshot whose hot image is
// gone cannot be restored (no empty image is fetched), and the ingester
// deletes its record.
func TestHotImageLostIsNotRestorable(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	// A pending record whose hot image is not there (as if lost).
	sn := &store.Snapshot{ID: "snap_l", SandboxID: "sbx_src", SandboxName: "src", Image: "default", ImageID: testImageID,
		Memory: []byte("[]"), State: "ready", CreateTime: time.Now().UTC()}
	if err := f.st.AddSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := f.e.memoryImage(ctx, sn); !errors.Is(err, errMemoryImageLost) {
		t.Fatalf("memory image of a pending snapshot without its hot image: %v", err)
	}
	f.e.kickIngest()
	f.waitLog(t, "has lost its memory image")
	if _, err := f.st.GetSnapshot(ctx, "snap_l"); !errors.Is(err, errdefs.ErrSnapshotNotFound) {
		t.Fatalf("the record of a lost snapshot: %v", err)
	}
}

// TestHotImageTrim: stored snapshots' hot images are kept newest first
// within HotImageBytes; a pending one and one in use stay past it.
func TestHotImageTrim(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{HotImageBytes: 250 << 10})
	ctx := context.Background()
	now := time.Now()
	for i, id := range []string{"snap_1", "snap_2", "snap_3"} {
		f.plantHot(t, id, 100<<10, true, now.Add(time.Duration(i)*time.Second))
	}
	release := f.e.holdHot("snap_1") // the oldest, in use
	f.e.kickIngest()
	for _, id := range []string{"snap_1", "snap_2", "snap_3"} {
		f.waitStored(t, id)
	}
	f.e.trimHot(ctx)
	if !f.hotExists("snap_3") || !f.hotExists("snap_2") || !f.hotExists("snap_1") {
		t.Fatalf("hot images after the trim: 3 %v, 2 %v, 1 %v; want all (1 is in use)", f.hotExists("snap_3"), f.hotExists("snap_2"), f.hotExists("snap_1"))
	}
	release()
	f.plantHot(t, "snap_p", 100<<10, true, now.Add(-time.Hour)) // pending, and oldest
	f.e.trimHot(ctx)
	if !f.hotExists("snap_3") || !f.hotExists("snap_2") || f.hotExists("snap_1") || !f.hotExists("snap_p") {
		t.Fatalf("hot images after the second trim: 3 %v, 2 %v, 1 %v, pending %v; want 3, 2 and the pending one",
			f.hotExists("snap_3"), f.hotExists("snap_2"), f.hotExists("snap_1"), f.hotExists("snap_p"))
	}
}

// TestHotImageRecover: at start, a pending record without its hot image
// is deleted, a hot image without a record goes, and a pending snapshot
// whose store a crash cut (after its chunks, before its record) is stored.
func TestHotImageRecover(t *testing.T) {
	t.Parallel()
	dir := newFakeDataDir(t)
	f := startFakeEngine(t, dir, Config{Faults: map[string]time.Duration{"snapshot:stored": time.Hour}})
	ctx := context.Background()
	files := f.plantHot(t, "snap_cut", 200<<10, true, time.Now())
	f.e.kickIngest()
	f.waitLog(t, "fault point reached")
	f.e.Close() // sbxd killed between the chunks and the record
	f.plantHot(t, "snap_orphan", 1<<10, false, time.Now())
	f.plantHot(t, "snap_gone", 1<<10, true, time.Now())
	if err := os.RemoveAll(filepath.Join(dir, "snapshots", "hot", "snap_gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "snapshots", "tmp-snap_half"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A suspended sandbox's pending snapshot whose hot image is gone.
	susp := &store.Snapshot{ID: "snap_susp", SandboxID: "sbx_s", SandboxName: "s", Image: "default", ImageID: testImageID,
		Memory: []byte("[]"), Suspend: true, State: "ready", CreateTime: time.Now().UTC()}
	if err := f.st.AddSnapshot(ctx, susp); err != nil {
		t.Fatal(err)
	}
	g := startFakeEngine(t, dir, Config{})
	// It stays (its sandbox names it); its resume fails, saying why.
	if _, err := g.st.GetSnapshot(ctx, "snap_susp"); err != nil {
		t.Fatalf("a suspended sandbox's snapshot whose image is lost: %v, want kept", err)
	}
	if !strings.Contains(g.logs.String(), "cannot be resumed") {
		t.Fatalf("the lost suspend image is not logged:\n%s", g.logs.String())
	}
	if _, _, _, err := g.e.memoryImage(ctx, susp); !errors.Is(err, errMemoryImageLost) {
		t.Fatalf("memory image of the lost suspend snapshot: %v", err)
	}
	if _, err := g.st.GetSnapshot(ctx, "snap_gone"); !errors.Is(err, errdefs.ErrSnapshotNotFound) {
		t.Fatalf("a pending snapshot whose hot image is gone: %v, want deleted", err)
	}
	if !strings.Contains(g.logs.String(), "has no memory image on this node") {
		t.Fatalf("the lost snapshot is not logged:\n%s", g.logs.String())
	}
	if g.hotExists("snap_orphan") {
		t.Fatal("a hot image without a record is left")
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots", "tmp-snap_half")); !os.IsNotExist(err) {
		t.Fatalf("a half capture's dir is left: %v", err)
	}
	sn := g.waitStored(t, "snap_cut")
	// The cut store's chunks may still be there: they count once.
	g.checkStoredImage(t, sn, files, false)
	if !g.hotExists("snap_cut") {
		t.Fatal("the recovered snapshot's hot image was dropped")
	}
}

// TestHotImageGoneWithItsRecord: a round that listed a pending snapshot
// whose record and hot image went before its turn (a delete, a resume)
// does nothing and logs nothing.
func TestHotImageGoneWithItsRecord(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	for _, susp := range []bool{false, true} {
		sn := &store.Snapshot{ID: "snap_gone", SandboxID: "sbx_src", SandboxName: "src", Image: "default", ImageID: testImageID,
			Memory: []byte("[]"), Suspend: susp, State: "ready", CreateTime: time.Now().UTC()}
		// As listed by a round; the record is gone by the time of its store.
		if err := f.e.storeHot(ctx, sn); err != nil {
			t.Fatalf("store of a snapshot deleted meanwhile (suspend %v): %v", susp, err)
		}
	}
	if strings.Contains(f.logs.String(), "lost its memory image") {
		t.Fatalf("a deleted snapshot was logged as lost:\n%s", f.logs.String())
	}
}

// TestStoreHotOnce: the stores of one snapshot's memory image that run at
// once (the ingester's round, and a suspend or recovery snapshot that
// needs it stored now) are one store, not one each.
func TestStoreHotOnce(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	dir := filepath.Join(f.e.snapshotsDir(), "tmp-snap_test")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), bytes.Repeat([]byte("memory"), 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	sn := newSnapshotRecord(sb, "snap_test", &captured{dir: dir, disk: &disk.Manifest{}}, snapshotKind{suspend: true})
	hold := f.e.holdHot(sn.ID)
	defer hold()
	if err := f.e.recordHot(ctx, sn, &captured{dir: dir, disk: &disk.Manifest{}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.e.storeHot(ctx, sn); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	f.e.kickIngest()
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(f.logs.String(), `msg="snapshot stored" snapshot=snap_test`); n != 1 {
		t.Fatalf("the memory image was stored %d times, want once\n%s", n, f.logs.String())
	}
}
