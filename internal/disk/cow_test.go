package disk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// snapLayer makes btrfs layer "sb" on a loop volume with a few files and
// takes checkpoint 1 of it, then changes the layer: it returns the
// layers, the tree at the checkpoint and the tree as changed, and when the
// snapshot was asked for.
func snapLayer(t *testing.T) (*Layers, string, string, time.Time) {
	t.Helper()
	l, _ := openTestVolume(t)
	if err := l.Create("sb"); err != nil {
		t.Fatal(err)
	}
	upper := l.Paths("sb").Upper
	write(t, upper, "keep", randBytes(1<<20), 0o644)
	write(t, upper, "etc/conf", []byte("v1"), 0o600)
	write(t, upper, "gone-later", randBytes(300<<10), 0o644)
	if !l.CanSnapshot("sb") || l.Mechanism() != MechanismSnapshot {
		t.Fatalf("btrfs layer: CanSnapshot %v, mechanism %q", l.CanSnapshot("sb"), l.Mechanism())
	}
	time.Sleep(2 * racyWindow) // the files are not racy at the checkpoint
	taken := time.Now()
	if err := l.SnapshotCheckpoint("sb", 1); err != nil {
		t.Fatal(err)
	}
	at := treeOf(t, upper)
	write(t, upper, "etc/conf", []byte("v2, longer"), 0o600)
	write(t, upper, "new", []byte("added after the checkpoint"), 0o644)
	if err := os.Remove(filepath.Join(upper, "gone-later")); err != nil {
		t.Fatal(err)
	}
	changed := treeOf(t, upper)
	if changed == at {
		t.Fatal("the change changed nothing")
	}
	return l, at, changed, taken
}

// TestSnapshotCheckpointIsTheLayerThen: the snapshot keeps the layer as it
// was when taken; later writes do not reach it, and it cannot be written.
func TestSnapshotCheckpointIsTheLayerThen(t *testing.T) {
	l, at, _, _ := snapLayer(t)
	snapUpper := filepath.Join(l.checkpointPath("sb", 1), "upper")
	if got := treeOf(t, snapUpper); got != at {
		t.Fatalf("the snapshot is not the layer at the checkpoint:\n%s\nwant:\n%s", got, at)
	}
	if err := os.WriteFile(filepath.Join(snapUpper, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("writing into the snapshot: %v, want EROFS", err)
	}
	if seqs, err := l.CheckpointSnapshots("sb"); err != nil || !slices.Equal(seqs, []int{1}) {
		t.Fatalf("CheckpointSnapshots = %v, %v; want [1]", seqs, err)
	}
	// A leftover at a seq (a crash before its record) is replaced.
	if err := l.SnapshotCheckpoint("sb", 1); err != nil {
		t.Fatal(err)
	}
	if got := treeOf(t, snapUpper); got == at {
		t.Fatal("a second snapshot at seq 1 did not replace the first")
	}
	// The layer's Remove keeps the snapshots (a suspend or a rebuild of
	// the layer still needs them); DropCheckpointSnapshots removes them.
	if err := l.Remove("sb"); err != nil {
		t.Fatal(err)
	}
	if !l.HasCheckpointSnapshot("sb", 1) {
		t.Fatal("Remove of the layer dropped its checkpoint snapshots")
	}
	if ids, _ := l.SnapshotLayerIDs(); !slices.Equal(ids, []string{"sb"}) {
		t.Fatalf("SnapshotLayerIDs = %v", ids)
	}
	if err := l.DropCheckpointSnapshots("sb"); err != nil {
		t.Fatal(err)
	}
	if l.HasCheckpointSnapshot("sb", 1) {
		t.Fatal("the read-only snapshot stayed")
	}
	if ids, _ := l.SnapshotLayerIDs(); len(ids) != 0 {
		t.Fatalf("SnapshotLayerIDs after the drop = %v", ids)
	}
}

// TestRestoreCheckpointSwapsTheSnapshotIn: the layer becomes the
// checkpoint's, the snapshot stays for later restores, and nothing of the
// old layer is left.
func TestRestoreCheckpointSwapsTheSnapshotIn(t *testing.T) {
	l, at, _, _ := snapLayer(t)
	var points []string
	if err := l.RestoreCheckpoint("sb", "op_1", 1, RestoreOptions{Fault: func(p string) { points = append(points, p) }}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(points, []string{RestoreBuilt, RestoreSwapped}) {
		t.Fatalf("fault points %v", points)
	}
	if !l.swapped("sb", "op_1") {
		t.Fatal("the restored layer is not marked before the finish")
	}
	if err := l.FinishSnapshotRestore("sb", "op_1"); err != nil {
		t.Fatal(err)
	}
	upper := l.Paths("sb").Upper
	if got := treeOf(t, upper); got != at {
		t.Fatalf("the layer is not the checkpoint's:\n%s\nwant:\n%s", got, at)
	}
	if ids, err := l.IDs(); err != nil || !slices.Equal(ids, []string{"sb"}) {
		t.Fatalf("layers after the restore: %v, %v (the old layer is listed?)", ids, err)
	}
	// The old layer waits aside for EmptyTrash.
	if _, err := os.Lstat(l.trashSubvolume("sb", "op_1")); err != nil {
		t.Fatalf("the old layer is not in the trash: %v", err)
	}
	if err := l.EmptyTrash("sb"); err != nil {
		t.Fatal(err)
	}
	if des, _ := os.ReadDir(l.Dir()); len(des) != 1 {
		t.Fatalf("beside the layer after EmptyTrash: %v", des)
	}
	if l.swapped("sb", "op_1") {
		t.Fatal("the swap mark stayed")
	}
	// The restored layer is writable, a subvolume of its own, and takes
	// a quota.
	write(t, upper, "after", []byte("x"), 0o644)
	if !l.CanSnapshot("sb") {
		t.Fatal("the restored layer is not a subvolume")
	}
	if err := l.SetQuota("sb", 64); err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(upper, "big"), 200<<20); !isNoSpace(err) {
		t.Fatalf("200 MiB into the restored layer with a 64 MiB quota: %v", err)
	}
	if !l.HasCheckpointSnapshot("sb", 1) {
		t.Fatal("the restore used up the checkpoint's snapshot")
	}
	// A restore of a checkpoint without a snapshot fails and changes
	// nothing.
	before := treeOf(t, upper)
	if err := l.RestoreCheckpoint("sb", "op_2", 7, RestoreOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("restore of a checkpoint without a snapshot: %v", err)
	}
	if got := treeOf(t, upper); got != before {
		t.Fatal("a failed restore changed the layer")
	}
}

// TestRestoreCheckpointOfAFullLayer: a checkpoint of a layer at its quota
// restores (a snapshot inherits its source's limit), and the quota holds
// again once set.
func TestRestoreCheckpointOfAFullLayer(t *testing.T) {
	l, _ := openTestVolume(t)
	if err := l.Create("sb"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetQuota("sb", 64); err != nil {
		t.Fatal(err)
	}
	upper := l.Paths("sb").Upper
	if err := fill(filepath.Join(upper, "big"), 200<<20); !isNoSpace(err) {
		t.Fatalf("fill: %v", err)
	}
	if err := l.SnapshotCheckpoint("sb", 1); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(upper, "big")); err != nil {
		t.Fatal(err)
	}
	if err := l.RestoreCheckpoint("sb", "op_1", 1, RestoreOptions{}); err != nil {
		t.Fatalf("restore of a full layer's checkpoint: %v", err)
	}
	if err := l.FinishSnapshotRestore("sb", "op_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(upper, "big")); err != nil {
		t.Fatalf("the restored layer: %v", err)
	}
	if err := l.SetQuota("sb", 64); err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(upper, "more"), 64<<20); !isNoSpace(err) {
		t.Fatalf("the quota after the restore: %v", err)
	}
}

// TestRecoverSnapshotRestore: a crash of sbxd before the swap leaves the
// old layer (the half-made one goes), after it the checkpoint's.
func TestRecoverSnapshotRestore(t *testing.T) {
	l, at, changed, _ := snapLayer(t)
	// Cut before the swap: the writable snapshot is made, not swapped.
	if err := snapshotSubvolume(l.checkpointPath("sb", 1), l.restoreSubvolume("sb", "op_3"), false); err != nil {
		t.Fatal(err)
	}
	if ids, _ := l.IDs(); !slices.Equal(ids, []string{"sb"}) {
		t.Fatalf("a restore's subvolume is listed as a layer: %v", ids)
	}
	swapped, err := l.RecoverRestore("sb", "op_3", func(bool) error { return nil })
	if err != nil || swapped {
		t.Fatalf("recover before the swap: swapped %v, %v", swapped, err)
	}
	if got := treeOf(t, l.Paths("sb").Upper); got != changed {
		t.Fatal("the rollback changed the layer")
	}
	if _, err := os.Lstat(l.restoreSubvolume("sb", "op_3")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the half-made layer stayed: %v", err)
	}
	// Cut after the swap.
	if err := snapshotSubvolume(l.checkpointPath("sb", 1), l.restoreSubvolume("sb", "op_4"), false); err != nil {
		t.Fatal(err)
	}
	if err := l.swapSubvolume("sb", "op_4"); err != nil {
		t.Fatal(err)
	}
	var calls []bool
	swapped, err = l.RecoverRestore("sb", "op_4", func(s bool) error { calls = append(calls, s); return nil })
	if err != nil || !swapped || !slices.Equal(calls, []bool{true}) {
		t.Fatalf("recover after the swap: swapped %v, %v, calls %v", swapped, err, calls)
	}
	if got := treeOf(t, l.Paths("sb").Upper); got != at {
		t.Fatalf("the layer is not the checkpoint's:\n%s\nwant:\n%s", got, at)
	}
	if _, err := os.Lstat(l.restoreSubvolume("sb", "op_4")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old layer stayed: %v", err)
	}
}

// TestStoreCheckpointStoresTheSnapshot: the background store of a
// snapshot describes the layer at the checkpoint, not as written since,
// and a later checkpoint reads only what changed between the two.
func TestStoreCheckpointStoresTheSnapshot(t *testing.T) {
	l, at, _, taken := snapLayer(t)
	st := newStore(t)
	s1, err := l.StoreCheckpoint(context.Background(), "sb", 1, taken, StoreOptions{Blobs: st})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Manifest.CaptureNS != taken.UnixNano() {
		t.Fatalf("manifest's capture time %d, want the snapshot's %d", s1.Manifest.CaptureNS, taken.UnixNano())
	}
	dst := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Materialize(context.Background(), MaterializeOptions{Target: s1.Manifest, Dst: dst, Store: st}); err != nil {
		t.Fatal(err)
	}
	if got := treeOf(t, dst); got != at {
		t.Fatalf("the stored checkpoint is not the layer at the checkpoint:\n%s\nwant:\n%s", got, at)
	}
	// Checkpoint 2 after one more change: only the changed files are read.
	upper := l.Paths("sb").Upper
	write(t, upper, "etc/conf", []byte("v3"), 0o600)
	time.Sleep(2 * racyWindow)
	t2 := time.Now()
	if err := l.SnapshotCheckpoint("sb", 2); err != nil {
		t.Fatal(err)
	}
	s2, err := l.StoreCheckpoint(context.Background(), "sb", 2, t2, StoreOptions{Blobs: st})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Stats.ReadFiles != 2 || s2.Stats.ReadBytes > 1<<10 {
		t.Fatalf("checkpoint 2 read %d files, %d bytes; want the 2 changed small files", s2.Stats.ReadFiles, s2.Stats.ReadBytes)
	}
	if _, err := l.StoreCheckpoint(context.Background(), "sb", 9, t2, StoreOptions{Blobs: st}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("store of a checkpoint without a snapshot: %v", err)
	}
	// After a restore to checkpoint 1 the layer is an older state: the
	// cache of checkpoint 2 must not serve it (a file's times may match
	// across the two), so the next store reads the layer whole.
	if err := l.RestoreCheckpoint("sb", "op_9", 1, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FinishRestore("sb", "op_9", nil, true); err != nil {
		t.Fatal(err)
	}
	if l.LoadCache("sb") != nil {
		t.Fatal("a cache of another lineage serves the restored layer")
	}
	// A store of checkpoint 2 finishing after the restore (a background
	// store) does not become the restored layer's cache either.
	if _, err := l.StoreCheckpoint(context.Background(), "sb", 2, t2, StoreOptions{Blobs: st}); err != nil {
		t.Fatal(err)
	}
	if l.LoadCache("sb") != nil {
		t.Fatal("the store of a snapshot of the layer before the restore became its cache")
	}
	time.Sleep(2 * racyWindow)
	if err := l.SnapshotCheckpoint("sb", 3); err != nil {
		t.Fatal(err)
	}
	s3, err := l.StoreCheckpoint(context.Background(), "sb", 3, time.Now(), StoreOptions{Blobs: st})
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := s3.Manifest.Stats(); s3.Stats.ReadFiles != files {
		t.Fatalf("store after a restore read %d of %d files, want all", s3.Stats.ReadFiles, files)
	}
}

// TestMountLimitedOnAFullLayer: a layer filled to its quota mounts
// writable with MountLimited (the guest can delete to make room), and the
// quota holds again after the mount. Mount itself refuses to hand out a
// read-only overlay.
func TestMountLimitedOnAFullLayer(t *testing.T) {
	l, _ := openTestVolume(t)
	if err := l.Create("sb"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetQuota("sb", 64); err != nil {
		t.Fatal(err)
	}
	upper := l.Paths("sb").Upper
	if err := fill(filepath.Join(upper, "big"), 200<<20); !isNoSpace(err) {
		t.Fatalf("fill: %v", err)
	}
	lower := t.TempDir()
	write(t, lower, "etc/os-release", []byte("image"), 0o644)
	err := l.Mount("sb", lower)
	if err == nil {
		defer l.Unmount("sb")
		var st unix.Statfs_t
		_ = unix.Statfs(l.Paths("sb").RootFS, &st)
		t.Fatalf("Mount of a full layer: nil error, read-only %v", st.Flags&unix.ST_RDONLY != 0)
	}
	if !errors.Is(err, ErrLayerFull) || l.Mounted("sb") {
		t.Fatalf("Mount of a full layer: %v (mounted %v), want ErrLayerFull and no mount", err, l.Mounted("sb"))
	}
	if err := l.MountLimited("sb", lower, 64); err != nil {
		t.Fatal(err)
	}
	defer l.Unmount("sb")
	rootfs := l.Paths("sb").RootFS
	if err := os.Remove(filepath.Join(rootfs, "big")); err != nil {
		t.Fatalf("the guest cannot make room on its full disk: %v", err)
	}
	if err := fill(filepath.Join(rootfs, "again"), 32<<20); err != nil {
		t.Fatalf("write after making room: %v", err)
	}
	if err := fill(filepath.Join(rootfs, "too-much"), 200<<20); !isNoSpace(err) {
		t.Fatalf("the quota is gone after MountLimited: %v", err)
	}
}

// BenchmarkSnapshotCheckpoint: a snapshot checkpoint of a layer of 2000
// files (128 MiB) after 1 MiB of it changed, then a restore of it by a
// swap (RestoreCheckpoint and FinishSnapshotRestore; the old layer's
// deletion, in the background in sbxd, is not timed): the btrfs
// operations that a checkpoint and a restore are built on.
func BenchmarkSnapshotCheckpoint(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("not root")
	}
	dataDir := b.TempDir()
	l, err := OpenLayers(LayersConfig{DataDir: dataDir, Mode: LayersBtrfs, ImageBytes: 4 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Unmount(filepath.Join(dataDir, "volume"), unix.MNT_DETACH)
	if err := l.Create("sb"); err != nil {
		b.Fatal(err)
	}
	upper := l.Paths("sb").Upper
	data := randBytes(64 << 10)
	for i := 0; i < 2000; i++ {
		p := filepath.Join(upper, "d"+strconv.Itoa(i%20), "f"+strconv.Itoa(i))
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	change := func(i int) {
		for k := 0; k < 16; k++ {
			p := filepath.Join(upper, "d"+strconv.Itoa(k), "f"+strconv.Itoa((i*16+k)%2000))
			if err := os.WriteFile(p, randBytes(64<<10), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("snapshot", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			change(i)
			b.StartTimer()
			if err := l.SnapshotCheckpoint("sb", i+1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("restore", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			change(i)
			op := "op_" + strconv.Itoa(i)
			b.StartTimer()
			if err := l.RestoreCheckpoint("sb", op, 1, RestoreOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := l.FinishSnapshotRestore("sb", op); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := l.EmptyTrash("sb"); err != nil { // in the background in sbxd
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}
