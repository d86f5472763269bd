package disk

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/internal/blob"
)

// storeHolds reports whether any blob of st contains needle.
func storeHolds(t *testing.T, st blob.Store, needle []byte) bool {
	t.Helper()
	ctx := context.Background()
	found := false
	err := st.Walk(ctx, func(d blob.Digest, _ int64) error {
		raw, err := blob.GetRaw(ctx, st, d)
		if err != nil {
			return err
		}
		if bytes.Contains(raw, needle) {
			found = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// treeHolds reports whether any regular file under root contains needle.
func treeHolds(t *testing.T, root string, needle []byte) bool {
	t.Helper()
	found := false
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
				found = true
			}
		}
		return nil
	})
	return found
}

// TestCaptureRaceNeverReadsOutside: a "sandbox" swaps a directory of its
// layer for a symlink to a host directory, over and over, while captures
// run. No capture may hold a byte of the host's canary file, and no tree
// restored from them.
func TestCaptureRaceNeverReadsOutside(t *testing.T) {
	st := newStore(t)
	upper := t.TempDir()
	canaryDir := t.TempDir()
	canary := []byte("HOST-CANARY-" + strings.Repeat("c", 64))
	// The host file has the name the layer's file has.
	os.WriteFile(filepath.Join(canaryDir, "f"), canary, 0o644)
	os.MkdirAll(filepath.Join(upper, "d"), 0o755)
	for i := 0; i < 4; i++ {
		os.WriteFile(filepath.Join(upper, "d", "f"), []byte("guest data"), 0o644)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var swaps atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		d, real, tmp := filepath.Join(upper, "d"), filepath.Join(upper, "d.real"), filepath.Join(upper, "d.lnk")
		os.Symlink(canaryDir, tmp)
		for ctx.Err() == nil {
			// d: a directory, then a symlink to the host's canary dir.
			os.Rename(d, real)
			os.Rename(tmp, d)
			time.Sleep(20 * time.Microsecond)
			os.Rename(d, tmp)
			os.Rename(real, d)
			// Touch the file so that every capture reads it again.
			os.WriteFile(filepath.Join(upper, "d", "f"), []byte("guest data"), 0o644)
			swaps.Add(1)
		}
	}()
	var cache *Manifest
	for i := 0; i < 200; i++ {
		m, stats, err := Capture(context.Background(), CaptureOptions{Upper: upper, Store: st, Cache: cache})
		if err != nil {
			cancel()
			wg.Wait()
			t.Fatalf("capture %d: %v", i, err)
		}
		st.Flush(context.Background(), stats.Chunks)
		if i%20 == 0 {
			dst := t.TempDir()
			if _, err := Materialize(context.Background(), MaterializeOptions{Target: m, Dst: dst, Store: st}); err != nil {
				cancel()
				wg.Wait()
				t.Fatalf("materialize %d: %v", i, err)
			}
			if treeHolds(t, dst, canary) {
				cancel()
				wg.Wait()
				t.Fatalf("capture %d: the restored tree holds the host canary's bytes", i)
			}
		}
		cache = m
	}
	cancel()
	wg.Wait()
	if swaps.Load() < 10 {
		t.Fatalf("only %d swaps raced the captures", swaps.Load())
	}
	if storeHolds(t, st, canary) {
		t.Fatal("a capture stored the host canary's bytes")
	}
}

// mkDeep makes depth nested directories "d" under root (beyond PATH_MAX:
// with directory fds) and a file "leaf" in the deepest; it returns the
// layer path of the leaf.
func mkDeep(t *testing.T, root string, depth int) string {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]string, 0, depth+1)
	for i := 0; i < depth; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
		parts = append(parts, "d")
	}
	lf, err := unix.Openat(fd, "leaf", unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(lf, []byte("deep leaf"))
	unix.Close(lf)
	unix.Close(fd)
	return strings.Join(append(parts, "leaf"), "/")
}

// TestCaptureDeepTree: a tree nested deeper than PATH_MAX is captured and
// restored whole, and no error names a host path.
func TestCaptureDeepTree(t *testing.T) {
	st := newStore(t)
	upper := t.TempDir()
	leaf := mkDeep(t, upper, 2100) // 4200+ bytes of path
	if len(leaf) <= 4096 {
		t.Fatalf("leaf path only %d bytes", len(leaf))
	}
	m, stats, err := Capture(context.Background(), CaptureOptions{Upper: upper, Store: st})
	if err != nil {
		if strings.Contains(err.Error(), upper) {
			t.Fatalf("error names the host path: %v", err)
		}
		t.Fatalf("capture: %v", err)
	}
	st.Flush(context.Background(), stats.Chunks)
	found := false
	for _, e := range m.Entries {
		if e.Path == leaf && e.Type == TypeFile && e.Size == 9 {
			found = true
		}
	}
	if !found {
		t.Fatalf("the deep leaf is not in the manifest (%d entries)", len(m.Entries))
	}
	dst := t.TempDir()
	if _, err := Materialize(context.Background(), MaterializeOptions{Target: m, Dst: dst, Store: st}); err != nil {
		t.Fatalf("materialize: %v", err)
	}
	rfd, _ := openRoot(dst)
	defer unix.Close(rfd)
	fd, err := openBeneath(rfd, leaf, unix.O_RDONLY)
	if err != nil {
		t.Fatalf("open the restored leaf: %v", err)
	}
	buf := make([]byte, 64)
	n, _ := unix.Read(fd, buf)
	unix.Close(fd)
	if string(buf[:n]) != "deep leaf" {
		t.Fatalf("restored leaf holds %q", buf[:n])
	}
	// A second capture from the cache works too (the bug made every later
	// one fail).
	if _, _, err := Capture(context.Background(), CaptureOptions{Upper: upper, Store: st, Cache: m}); err != nil {
		t.Fatalf("second capture: %v", err)
	}
}

// TestCaptureKeepsHoles: a 1 TiB sparse file is captured without reading
// its holes and restored sparse with its size.
func TestCaptureKeepsHoles(t *testing.T) {
	st := newStore(t)
	upper := t.TempDir()
	p := filepath.Join(upper, "sparse")
	f, _ := os.Create(p)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), 1<<39)
	f.Truncate(1 << 40)
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, stats, err := Capture(ctx, CaptureOptions{Upper: upper, Store: st})
	if err != nil {
		t.Fatalf("capture of a sparse file: %v", err)
	}
	st.Flush(ctx, stats.Chunks)
	if stats.ReadBytes > 64<<20 {
		t.Fatalf("read %d bytes of a file with 10 bytes of data", stats.ReadBytes)
	}
	var e *Entry
	for i := range m.Entries {
		if m.Entries[i].Path == "sparse" {
			e = &m.Entries[i]
		}
	}
	if e == nil || e.Size != 1<<40 || !hasHoles(e) {
		t.Fatalf("manifest entry %+v: want size 1 TiB with holes", e)
	}
	dst := t.TempDir()
	if _, err := Materialize(ctx, MaterializeOptions{Target: m, Dst: dst, Store: st}); err != nil {
		t.Fatalf("materialize: %v", err)
	}
	var sst unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "sparse"), &sst); err != nil {
		t.Fatal(err)
	}
	if sst.Size != 1<<40 || sst.Blocks*512 > 64<<20 {
		t.Fatalf("restored: size %d, %d bytes allocated; want 1 TiB, sparse", sst.Size, sst.Blocks*512)
	}
	rf, _ := os.Open(filepath.Join(dst, "sparse"))
	defer rf.Close()
	buf := make([]byte, 6)
	rf.ReadAt(buf, 1<<39)
	if string(buf) != "middle" {
		t.Fatalf("restored data at 512 GiB: %q", buf)
	}
	rf.ReadAt(buf[:4], 0)
	if string(buf[:4]) != "head" {
		t.Fatalf("restored data at 0: %q", buf[:4])
	}
}

// TestCaptureMaxBytes: a capture that would read more than its limit fails
// with ErrTooLarge, and says so without host paths.
func TestCaptureMaxBytes(t *testing.T) {
	upper := t.TempDir()
	os.WriteFile(filepath.Join(upper, "big"), randBytes(2<<20), 0o644)
	_, _, err := Capture(context.Background(), CaptureOptions{Upper: upper, MaxBytes: 1 << 20})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("capture of 2 MiB with a 1 MiB limit: %v, want ErrTooLarge", err)
	}
	if strings.Contains(err.Error(), upper) || !strings.Contains(err.Error(), "/big") {
		t.Fatalf("error %q: want the sandbox path /big and no host path", err)
	}
}

// TestOpenBeneathRefusesSymlinks: no component of the path may be a
// symlink, long paths too.
func TestOpenBeneathRefusesSymlinks(t *testing.T) {
	root := t.TempDir()
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "f"), []byte("host"), 0o644)
	os.MkdirAll(filepath.Join(root, "a"), 0o755)
	os.Symlink(out, filepath.Join(root, "a", "l"))
	rfd, _ := openRoot(root)
	defer unix.Close(rfd)
	if fd, err := openBeneath(rfd, "a/l/f", unix.O_RDONLY); err == nil {
		unix.Close(fd)
		t.Fatal("opened a file through a symlinked directory")
	}
	for _, bad := range []string{"../x", "a/../a", "/etc", "a//b"} {
		if fd, err := openBeneath(rfd, bad, unix.O_RDONLY); err == nil {
			unix.Close(fd)
			t.Fatalf("opened %q", bad)
		}
	}
	// The component walk (paths beyond openat2's reach) refuses too.
	long := strings.Repeat("x/", 2100) + "l/f"
	if err := os.MkdirAll(filepath.Join(root, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if fd, err := openBeneath(rfd, long, unix.O_RDONLY); err == nil {
		unix.Close(fd)
		t.Fatal("opened a long path")
	}
}
