package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// randomText is n random hex characters: file content that shares no
// chunk with anything else.
func randomText(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// blobPath is where the local store of the fake tier keeps d.
func (f *fakeEnv) blobPath(d blob.Digest) string {
	h := d.Hex()
	return filepath.Join(f.dir, "blobs", "sha256", h[:2], h)
}

// putGarbage stores a blob that nothing records.
func (f *fakeEnv) putGarbage(t *testing.T) blob.Digest {
	t.Helper()
	ctx := context.Background()
	d, _, err := blob.PutRaw(ctx, f.e.blobs, []byte(randomText(t, 64)))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.e.blobs.Flush(ctx, []blob.Digest{d}); err != nil {
		t.Fatal(err)
	}
	return d
}

func (f *fakeEnv) hasBlob(t *testing.T, d blob.Digest) bool {
	t.Helper()
	ok, err := f.e.blobs.Has(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// checkpointBlobs is every blob cp uses: its manifest's and its chunks.
func (f *fakeEnv) checkpointBlobs(t *testing.T, cp *store.Checkpoint) []blob.Digest {
	t.Helper()
	m, err := disk.GetManifest(context.Background(), f.e.blobs, manifestRef(cp))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Chunks()) == 0 {
		t.Fatal("the checkpoint has no chunk: the test would prove nothing")
	}
	return append(manifestRef(cp), m.Chunks()...)
}

// TestFakeGCCheckpointRoots: the collection keeps every blob a checkpoint
// uses and deletes what nothing records; a checkpoint manifest that cannot
// be read (an I/O error) stops the round before it deletes anything, and
// a lost one marks its checkpoint damaged while the round goes on and the
// other checkpoints keep their chunks.
func TestFakeGCCheckpointRoots(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		f.create(t, name)
		f.writeFile(t, name, "/work/data.txt", randomText(t, 256<<10))
	}
	cpA, err := f.e.Checkpoint(ctx, "a", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	cpB, err := f.e.Checkpoint(ctx, "b", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	usedA, usedB := f.checkpointBlobs(t, cpA), f.checkpointBlobs(t, cpB)

	garbage := f.putGarbage(t)
	if err := f.e.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if f.hasBlob(t, garbage) {
		t.Fatal("a blob nothing records survived the collection")
	}
	for _, d := range append(usedA, usedB...) {
		if !f.hasBlob(t, d) {
			t.Fatalf("a checkpoint's blob %s was collected", d)
		}
	}

	// An I/O error on a manifest: the round must not sweep on what it
	// could not read (a directory in the blob's place fails the read with
	// EISDIR, neither missing nor corrupt). The first failed round also
	// waits out any background round begun before.
	p := f.blobPath(manifestRef(cpB)[0])
	if err := os.Rename(p, p+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := f.e.GC(ctx); err == nil {
		t.Fatal("a collection with an unreadable manifest succeeded")
	}
	garbage = f.putGarbage(t)
	if err := f.e.GC(ctx); err == nil {
		t.Fatal("a collection with an unreadable manifest succeeded")
	}
	if !f.hasBlob(t, garbage) {
		t.Fatal("a collection that could not read a manifest deleted blobs")
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".aside", p); err != nil {
		t.Fatal(err)
	}
	if got, err := f.st.GetCheckpoint(ctx, cpB.SandboxID, cpB.Seq); err != nil || got.Health == api.HealthDamaged {
		t.Fatalf("a checkpoint whose manifest failed a read is marked damaged: %+v %v", got, err)
	}

	// A lost manifest: its checkpoint is damaged, the round goes on.
	for _, d := range manifestRef(cpA) {
		if err := os.Remove(f.blobPath(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.e.GC(ctx); err != nil {
		t.Fatalf("a collection with a lost manifest: %v", err)
	}
	if f.hasBlob(t, garbage) {
		t.Fatal("a blob nothing records survived the collection after a lost manifest")
	}
	if got, err := f.st.GetCheckpoint(ctx, cpA.SandboxID, cpA.Seq); err != nil || got.Health != api.HealthDamaged {
		t.Fatalf("a checkpoint whose manifest is lost: %+v %v, want damaged", got, err)
	}
	for _, d := range usedB {
		if !f.hasBlob(t, d) {
			t.Fatalf("another checkpoint's blob %s was collected", d)
		}
	}
}

// TestFakeGCCaptureCacheRoots: the chunks a sandbox layer's capture cache
// lists stay when no record uses them any more (the next capture reuses
// them without reading the files), and go with the sandbox.
func TestFakeGCCaptureCacheRoots(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/work/data.txt", randomText(t, 256<<10))
	cp, err := f.e.Checkpoint(ctx, "a", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	used := f.checkpointBlobs(t, cp)
	chunks := used[len(cp.Manifest):]
	if err := f.st.DeleteCheckpoints(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.e.GC(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range chunks {
		if !f.hasBlob(t, d) {
			t.Fatalf("a chunk of the capture cache was collected: %s", d)
		}
	}
	if err := f.e.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.GC(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range chunks {
		if f.hasBlob(t, d) {
			t.Fatalf("a chunk of a deleted sandbox's cache survived: %s", d)
		}
	}
}

// TestFakeGCSnapshotRoots: a ready snapshot keeps its memory chunks, its
// disk manifest and the manifest's chunks; an expired one keeps nothing; a
// lost disk manifest is skipped (the round goes on) and a memory record
// that cannot be read stops the round before it deletes anything.
func TestFakeGCSnapshotRoots(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	mem, diskChunk, expiredMem := f.putGarbage(t), f.putGarbage(t), f.putGarbage(t)
	ref, _, err := disk.PutManifest(ctx, f.e.blobs, &disk.Manifest{Version: disk.ManifestVersion,
		Entries: []disk.Entry{{Path: "f", Type: disk.TypeFile, Mode: 0o644, Size: 64, Extents: []disk.Extent{{Chunk: diskChunk, Len: 64}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.e.blobs.Flush(ctx, ref); err != nil {
		t.Fatal(err)
	}
	image := func(d blob.Digest) []byte {
		b, err := json.Marshal(snapshot.Image{{Name: "pages", Size: 64, Chunks: []blob.Digest{d}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var diskRef []string
	for _, d := range ref {
		diskRef = append(diskRef, string(d))
	}
	now := time.Now().UTC()
	ready := &store.Snapshot{ID: "snap_ready", Name: "ready", SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image,
		ImageID: sb.ImageID, State: "ready", CreateTime: now, Memory: image(mem), Disk: diskRef}
	expired := &store.Snapshot{ID: "snap_expired", Name: "expired", SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image,
		ImageID: sb.ImageID, State: "expired", CreateTime: now, ExpireTime: now, Memory: image(expiredMem)}
	for _, sn := range []*store.Snapshot{ready, expired} {
		if err := f.st.AddSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.e.GC(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range append(ref, mem, diskChunk) {
		if !f.hasBlob(t, d) {
			t.Fatalf("a ready snapshot's blob %s was collected", d)
		}
	}
	if f.hasBlob(t, expiredMem) {
		t.Fatal("an expired snapshot's blob survived the collection")
	}

	// A lost disk manifest: skipped, the round goes on.
	for _, d := range ref {
		if err := os.Remove(f.blobPath(d)); err != nil {
			t.Fatal(err)
		}
	}
	garbage := f.putGarbage(t)
	if err := f.e.GC(ctx); err != nil {
		t.Fatalf("a collection with a snapshot's disk manifest lost: %v", err)
	}
	if f.hasBlob(t, garbage) || !f.hasBlob(t, mem) {
		t.Fatal("with a snapshot's disk manifest lost, the round did not go on as it should")
	}

	// A memory record that cannot be decoded (truncated after its first
	// chunk's digest) makes its snapshot damaged, not every round fail:
	// the digests still legible in it are kept, the blobs of healthy
	// snapshots stay, and what a deleted object left is collected.
	healthyMem, healthyChunk, lostMem := f.putGarbage(t), f.putGarbage(t), f.putGarbage(t)
	healthyRef, _, err := disk.PutManifest(ctx, f.e.blobs, &disk.Manifest{Version: disk.ManifestVersion,
		Entries: []disk.Entry{{Path: "g", Type: disk.TypeFile, Mode: 0o644, Size: 64, Extents: []disk.Extent{{Chunk: healthyChunk, Len: 64}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.e.blobs.Flush(ctx, healthyRef); err != nil {
		t.Fatal(err)
	}
	var healthyDisk []string
	for _, d := range healthyRef {
		healthyDisk = append(healthyDisk, string(d))
	}
	healthy := &store.Snapshot{ID: "snap_healthy", Name: "healthy", SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image,
		ImageID: sb.ImageID, State: "ready", CreateTime: now, Memory: image(healthyMem), Disk: healthyDisk}
	if err := f.st.AddSnapshot(ctx, healthy); err != nil {
		t.Fatal(err)
	}
	whole, err := json.Marshal(snapshot.Image{{Name: "pages", Size: 128, Chunks: []blob.Digest{mem, lostMem}}})
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(string(whole), string(mem)) + len(mem)
	ready.Memory = whole[:cut]
	if err := f.st.UpdateSnapshot(ctx, ready); err != nil {
		t.Fatal(err)
	}
	if got := SnapshotHealth(ready); got != api.HealthDamaged {
		t.Fatalf("health of a snapshot with a truncated memory record: %q, want damaged", got)
	}
	if got := SnapshotHealth(healthy); got != api.HealthOK {
		t.Fatalf("health of a healthy snapshot: %q, want ok", got)
	}
	deletedMem := f.putGarbage(t)
	gone := &store.Snapshot{ID: "snap_gone", Name: "gone", SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image,
		ImageID: sb.ImageID, State: "ready", CreateTime: now, Memory: image(deletedMem), Disk: healthyDisk}
	if err := f.st.AddSnapshot(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := f.e.DeleteSnapshot(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	garbage = f.putGarbage(t)
	if err := f.e.GC(ctx); err != nil {
		t.Fatalf("a collection with one damaged memory record failed: %v", err)
	}
	if f.hasBlob(t, deletedMem) || f.hasBlob(t, garbage) {
		t.Fatal("with one damaged memory record, a deleted snapshot's blob or an unrecorded blob was not collected")
	}
	for _, d := range append(healthyRef, healthyMem, healthyChunk) {
		if !f.hasBlob(t, d) {
			t.Fatalf("a healthy snapshot's blob %s was collected", d)
		}
	}
	if !f.hasBlob(t, mem) {
		t.Fatal("a chunk still named in a damaged memory record was collected")
	}

	// Not JSON at all: still damaged, still no failed round.
	ready.Memory = []byte("not json")
	if err := f.st.UpdateSnapshot(ctx, ready); err != nil {
		t.Fatal(err)
	}
	garbage = f.putGarbage(t)
	if err := f.e.GC(ctx); err != nil {
		t.Fatalf("a collection with an unreadable memory record: %v", err)
	}
	if f.hasBlob(t, garbage) || !f.hasBlob(t, healthyMem) {
		t.Fatal("with an unreadable memory record, the round did not go on as it should")
	}
}
