package disk

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// needBtrfs skips unless the test can make loop-mounted btrfs volumes
// (root, mkfs.btrfs); in CI a missing piece fails.
func needBtrfs(t *testing.T) {
	t.Helper()
	var why string
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		why = "mkfs.btrfs missing (apt-get install btrfs-progs)"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// openTestVolume opens btrfs layers on a loop image in a fresh data dir;
// the volume is unmounted at the end.
func openTestVolume(t *testing.T) (*Layers, string) {
	t.Helper()
	needBtrfs(t)
	dataDir := t.TempDir()
	l, err := OpenLayers(LayersConfig{DataDir: dataDir, Mode: LayersBtrfs, ImageBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(dataDir, "volume"), unix.MNT_DETACH) })
	return l, dataDir
}

// fill writes up to n bytes of non-zero data into p (fsynced) and returns
// the error that stopped it, if any.
func fill(p string, n int) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for written := 0; written < n; written += len(buf) {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Sync()
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOSPC)
}

func TestLayersBtrfsQuota(t *testing.T) {
	l, dataDir := openTestVolume(t)
	if l.Kind() != LayersBtrfs || !l.Quota() {
		t.Fatalf("kind %q quota %v, want btrfs with quota", l.Kind(), l.Quota())
	}
	if !isBtrfs(filepath.Join(dataDir, "volume")) {
		t.Fatal("the volume is not a mounted btrfs")
	}
	for _, id := range []string{"a", "b"} {
		if err := l.Create(id); err != nil {
			t.Fatal(err)
		}
		if err := l.SetQuota(id, 64); err != nil {
			t.Fatal(err)
		}
	}
	if !isSubvolume(filepath.Join(l.Dir(), "a")) {
		t.Fatal("layer a is not a subvolume")
	}
	// Past its quota, a's writes fail with a quota error...
	err := fill(filepath.Join(l.Paths("a").Upper, "big"), 200<<20)
	if !isNoSpace(err) {
		t.Fatalf("writing 200 MiB into a layer with a 64 MiB quota: %v, want EDQUOT or ENOSPC", err)
	}
	// ...and b can still write its own 32 MiB.
	if err := fill(filepath.Join(l.Paths("b").Upper, "f"), 32<<20); err != nil {
		t.Fatalf("the other layer cannot write: %v", err)
	}
	// Lifting the quota (a restore builds its layer so) lets a write more.
	if err := l.SetQuota("a", 0); err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(l.Paths("a").Upper, "more"), 100<<20); err != nil {
		t.Fatalf("no quota: %v", err)
	}
	// Remove deletes the subvolume.
	if err := l.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(l.Dir(), "a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("layer a after Remove: %v", err)
	}
}

func TestLayersBtrfsReopen(t *testing.T) {
	l, dataDir := openTestVolume(t)
	if err := l.Create("keep"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.Paths("keep").Upper, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// sbxd restarts with the volume mounted: it is used as is.
	l2, err := OpenLayers(LayersConfig{DataDir: dataDir, Mode: LayersBtrfs})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(l2.Paths("keep").Upper, "f")); err != nil || string(b) != "x" {
		t.Fatalf("after reopen: %q %v", b, err)
	}
	// After a reboot (the volume unmounted), it is mounted again.
	if err := unix.Unmount(filepath.Join(dataDir, "volume"), 0); err != nil {
		t.Fatal(err)
	}
	l3, err := OpenLayers(LayersConfig{DataDir: dataDir, Mode: LayersBtrfs})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(l3.Paths("keep").Upper, "f")); err != nil || string(b) != "x" {
		t.Fatalf("after remount: %q %v", b, err)
	}
	if err := l3.SetQuota("keep", 64); err != nil {
		t.Fatal(err)
	}
	// Its layers live on the volume: plain directories cannot be asked for.
	if _, err := OpenLayers(LayersConfig{DataDir: dataDir, Mode: LayersDir}); err == nil {
		t.Fatal("--layers dir on a data dir with a layers volume was accepted")
	}
}

// A data dir with layers made before btrfs keeps them where they are,
// without a quota; new layers go to the volume.
func TestLayersLegacyKept(t *testing.T) {
	needBtrfs(t)
	dataDir := t.TempDir()
	old := NewLayers(filepath.Join(dataDir, "layers"))
	if err := old.Create("old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old.Paths("old").Upper, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLayers(LayersConfig{DataDir: dataDir, Mode: LayersBtrfs, ImageBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(dataDir, "volume"), unix.MNT_DETACH) })
	if got := l.Paths("old").Upper; got != old.Paths("old").Upper {
		t.Fatalf("legacy layer at %s, want %s", got, old.Paths("old").Upper)
	}
	if err := l.SetQuota("old", 64); err != nil {
		t.Fatalf("quota on a legacy layer: %v (want a no-op)", err)
	}
	if err := l.Create("new"); err != nil {
		t.Fatal(err)
	}
	if !isSubvolume(filepath.Join(l.Dir(), "new")) {
		t.Fatal("a new layer is not a subvolume on the volume")
	}
	ids, err := l.IDs()
	if err != nil || len(ids) != 2 {
		t.Fatalf("IDs = %v, %v; want old and new", ids, err)
	}
	if err := l.Remove("old"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "layers", "old")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("legacy layer after Remove: %v", err)
	}
}

func TestLayersDirHasNoQuota(t *testing.T) {
	l, err := OpenLayers(LayersConfig{DataDir: t.TempDir(), Mode: LayersDir})
	if err != nil {
		t.Fatal(err)
	}
	if l.Quota() || l.Kind() != LayersDir {
		t.Fatalf("dir layers: kind %q quota %v", l.Kind(), l.Quota())
	}
	if err := l.SetQuota("x", 64); !errors.Is(err, ErrNoQuota) {
		t.Fatalf("SetQuota on dir layers: %v, want ErrNoQuota", err)
	}
	if _, err := OpenLayers(LayersConfig{DataDir: t.TempDir(), Mode: "zfs"}); err == nil {
		t.Fatal("an unknown mode was accepted")
	}
}

// A volume that runs low grows its image (sparse) when a layer is made.
func TestLayersVolumeGrows(t *testing.T) {
	l, dataDir := openTestVolume(t)
	img := filepath.Join(dataDir, "layers.img")
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	// A 1 GiB volume has less than growFreeBytes free: the next layer grows it.
	if err := l.Create("a"); err != nil {
		t.Fatal(err)
	}
	if err := l.GrowError(); err != nil {
		t.Fatal(err)
	}
	fi2, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if fi2.Size() <= fi.Size() {
		t.Fatalf("image is %d bytes after a create on a low volume, was %d", fi2.Size(), fi.Size())
	}
	if c := l.Capacity(); c < fi2.Size()*9/10 {
		t.Fatalf("btrfs sees %d bytes of a %d-byte image", c, fi2.Size())
	}
	if err := l.SetQuota("a", 64); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLayerCreate: make a layer and set its quota, then remove it, on
// btrfs (subvolume + qgroup limit) and on plain directories; "btrfs+v0"
// also takes the v0 snapshot a create takes on btrfs (recordV0).
func BenchmarkLayerCreate(b *testing.B) {
	for _, name := range []string{LayersBtrfs, LayersBtrfs + "+v0", LayersDir} {
		mode, v0 := strings.CutSuffix(name, "+v0")
		b.Run(name, func(b *testing.B) {
			if os.Geteuid() != 0 {
				b.Skip("not root")
			}
			dataDir := b.TempDir()
			l, err := OpenLayers(LayersConfig{DataDir: dataDir, Mode: mode, ImageBytes: 4 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Unmount(filepath.Join(dataDir, "volume"), unix.MNT_DETACH)
			_ = l.Create("warm") // grows a small volume once, outside the loop
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := "b" + strconv.Itoa(i)
				if err := l.Create(id); err != nil {
					b.Fatal(err)
				}
				if l.Quota() {
					if err := l.SetQuota(id, 1024); err != nil {
						b.Fatal(err)
					}
				}
				if v0 {
					if err := l.SnapshotCheckpoint(id, 0); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if v0 {
					if err := l.DropCheckpointSnapshots(id); err != nil {
						b.Fatal(err)
					}
				}
				if err := l.Remove(id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// TestVolumeQuota: a named volume on btrfs layers is a subvolume with a
// quota (a guest cannot fill the host's disk through it); a volume made
// before, in the legacy dir, is kept where it is.
func TestVolumeQuota(t *testing.T) {
	l, dataDir := openTestVolume(t)
	legacy := filepath.Join(dataDir, "volumes", "v")
	if err := l.MakeVolume("v", legacy, 64); err != nil {
		t.Fatal(err)
	}
	p := l.VolumePath("v", legacy)
	if p == legacy || !isSubvolume(p) {
		t.Fatalf("volume at %s is not a subvolume beside the layers", p)
	}
	if err := l.MakeVolume("v", legacy, 64); err != nil { // again: kept
		t.Fatal(err)
	}
	if err := fill(filepath.Join(p, "big"), 200<<20); !isNoSpace(err) {
		t.Fatalf("writing 200 MiB into a volume with a 64 MiB quota: %v, want EDQUOT or ENOSPC", err)
	}
	old := filepath.Join(dataDir, "volumes", "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := l.VolumePath("old", old); got != old {
		t.Fatalf("a legacy volume moved to %s", got)
	}
}
