package disk

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/internal/blob"
)

func newStore(t *testing.T) *blob.Local {
	t.Helper()
	s, err := blob.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func write(t *testing.T, root, rel string, data []byte, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

func capture(t *testing.T, st blob.Store, upper string, cache *Manifest) (*Manifest, *CaptureStats) {
	t.Helper()
	m, stats, err := Capture(context.Background(), CaptureOptions{Upper: upper, Cache: cache, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(context.Background(), stats.Chunks); err != nil {
		t.Fatal(err)
	}
	return m, stats
}

// treeOf describes a directory tree for comparison: path, type, mode,
// owner, content or target, xattrs.
func treeOf(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p, root)
		st := fi.Sys().(*unixStat)
		line := rel + " " + fi.Mode().String() + " " + strconv.Itoa(int(st.Uid)) + ":" + strconv.Itoa(int(st.Gid))
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			line += " " + string(blob.DigestOf(b))[:20]
			if !fi.ModTime().IsZero() {
				line += " " + fi.ModTime().UTC().String()
			}
		case fi.Mode()&os.ModeSymlink != 0:
			tg, _ := os.Readlink(p)
			line += " -> " + tg
		case fi.Mode()&os.ModeCharDevice != 0:
			line += " rdev=" + strconv.Itoa(int(st.Rdev))
		}
		x, _ := readXattrs(pathXattrs(p))
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k+"="+string(x[k]))
		}
		sort.Strings(keys)
		line += " " + strings.Join(keys, ",")
		lines = append(lines, line)
		return nil
	})
	return strings.Join(lines, "\n")
}

type unixStat = syscall.Stat_t

func TestCaptureMaterializeRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: owners, whiteouts and trusted xattrs")
	}
	st := newStore(t)
	upper := t.TempDir()
	write(t, upper, "workspace/a.txt", []byte("hello"), 0o644)
	write(t, upper, "workspace/big.bin", randBytes(3<<20), 0o600)
	write(t, upper, "workspace/empty", nil, 0o644)
	write(t, upper, "usr/bin/tool", []byte("#!/bin/sh\n"), 0o4755)
	os.Chown(filepath.Join(upper, "workspace/a.txt"), 1000, 1000)
	os.Symlink("a.txt", filepath.Join(upper, "workspace/link"))
	os.Link(filepath.Join(upper, "workspace/a.txt"), filepath.Join(upper, "workspace/hard"))
	unix.Mknod(filepath.Join(upper, "workspace/deleted-from-image"), unix.S_IFCHR, 0)
	os.MkdirAll(filepath.Join(upper, "etc/opaque"), 0o755)
	unix.Setxattr(filepath.Join(upper, "etc/opaque"), "trusted.overlay.opaque", []byte("y"), 0)
	unix.Setxattr(filepath.Join(upper, "usr/bin/tool"), "security.capability", []byte{1, 0, 0, 2, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0)
	// A sparse file: mostly a hole.
	f, _ := os.Create(filepath.Join(upper, "var/sparse"))
	if f == nil {
		os.MkdirAll(filepath.Join(upper, "var"), 0o755)
		f, _ = os.Create(filepath.Join(upper, "var/sparse"))
	}
	f.WriteAt([]byte("end"), 50<<20)
	f.Close()

	m, stats := capture(t, st, upper, nil)
	if stats.Files == 0 || stats.ReadFiles != stats.Files {
		t.Fatalf("first capture read %d of %d files", stats.ReadFiles, stats.Files)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	os.Mkdir(dst, 0o755)
	if _, err := Materialize(context.Background(), MaterializeOptions{Target: m, Dst: dst, Store: st}); err != nil {
		t.Fatal(err)
	}
	if got, want := treeOf(t, dst), treeOf(t, upper); got != want {
		t.Fatalf("restored tree differs:\n--- got\n%s\n--- want\n%s", got, want)
	}
	a, _ := os.Stat(filepath.Join(dst, "workspace/a.txt"))
	h, _ := os.Stat(filepath.Join(dst, "workspace/hard"))
	if !os.SameFile(a, h) {
		t.Fatal("hard link not restored")
	}
	var sst unix.Stat_t
	unix.Stat(filepath.Join(dst, "var/sparse"), &sst)
	if sst.Blocks*512 > 1<<20 {
		t.Fatalf("the sparse file takes %d bytes on disk", sst.Blocks*512)
	}
}

func TestIncrementalCaptureReadsOnlyChanges(t *testing.T) {
	st := newStore(t)
	upper := t.TempDir()
	for i := 0; i < 200; i++ {
		write(t, upper, filepath.Join("files", "f"+string(rune('a'+i%26))+strconv.Itoa(i)), randBytes(20<<10), 0o644)
	}
	big := randBytes(8 << 20)
	write(t, upper, "big", big, 0o644)
	m1, s1 := capture(t, st, upper, nil)
	// Make the files look old, as the next capture would see them.
	m1.CaptureNS += int64(racyWindow) * 10
	for i := range m1.Entries {
		m1.Entries[i].MtimeNS -= int64(racyWindow) * 10
		m1.Entries[i].CtimeNS -= int64(racyWindow) * 10
	}
	for _, e := range m1.Entries {
		if e.Type == TypeFile {
			p := filepath.Join(upper, e.Path)
			ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNS), unix.NsecToTimespec(e.MtimeNS)}
			unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0)
		}
	}
	// utimes moved ctime: refresh the cache's stat as a capture would.
	m1, _ = capture(t, st, upper, nil)
	ageCache(m1)

	// Change 1 MB in the middle of the big file and one small file.
	copy(big[4<<20:], randBytes(1<<20))
	write(t, upper, "big", big, 0o644)
	write(t, upper, "files/fa0", randBytes(20<<10), 0o644)
	m2, s2 := capture(t, st, upper, m1)
	if s2.ReadFiles != 2 {
		t.Fatalf("second capture read %d files, want the 2 changed", s2.ReadFiles)
	}
	if limit := int64(1<<20) + 20<<10 + 3*blob.ChunkMax; s2.AddedBytes > limit {
		t.Fatalf("a 1 MB change stored %d bytes (first capture: %d)", s2.AddedBytes, s1.AddedBytes)
	}
	t.Logf("first capture stored %d bytes, after a ~1 MB change %d bytes", s1.AddedBytes, s2.AddedBytes)
	d := Diff(m1, m2, t.TempDir())
	if len(d.Modified) != 2 || len(d.Added) != 0 || len(d.Deleted) != 0 {
		t.Fatalf("diff: %+v", d)
	}
}

func ageCache(m *Manifest) { m.CaptureNS += int64(racyWindow) * 100 }

func TestCaptureDetectsRewriteWithSameSize(t *testing.T) {
	st := newStore(t)
	upper := t.TempDir()
	write(t, upper, "f", []byte("aaaa"), 0o644)
	m1, _ := capture(t, st, upper, nil)
	// Same size, written right away: the times may not move (coarse clock),
	// but the file was captured too recently to trust them.
	write(t, upper, "f", []byte("bbbb"), 0o644)
	m2, s2 := capture(t, st, upper, m1)
	if s2.ReadFiles != 1 {
		t.Fatal("a file rewritten within the racy window was not read again")
	}
	if slicesEqualExtents(m1.Entries[1].Extents, m2.Entries[1].Extents) {
		t.Fatal("content change not captured")
	}
}

func slicesEqualExtents(a, b []Extent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMaterializeLinksUnchangedFiles(t *testing.T) {
	st := newStore(t)
	base := t.TempDir()
	upper := filepath.Join(base, "upper")
	write(t, upper, "keep", randBytes(1<<20), 0o644)
	write(t, upper, "change", []byte("v1"), 0o644)
	m1, _ := capture(t, st, upper, nil)
	ageCache(m1)
	write(t, upper, "change", []byte("v2, longer"), 0o644)
	cache, _ := capture(t, st, upper, m1)
	ageCache(cache)
	dst := filepath.Join(base, "new")
	os.Mkdir(dst, 0o755)
	stats, err := Materialize(context.Background(), MaterializeOptions{Target: m1, Dst: dst, Store: st, Current: upper, CurrentCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if stats.LinkedFiles != 1 || stats.WrittenFiles != 1 {
		t.Fatalf("linked %d, wrote %d; want 1 and 1", stats.LinkedFiles, stats.WrittenFiles)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "change")); string(b) != "v1" {
		t.Fatalf("%q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(upper, "change")); string(b) != "v2, longer" {
		t.Fatal("materialize changed the current layer")
	}
}

func TestMaterializeMissingChunkFails(t *testing.T) {
	st := newStore(t)
	upper := t.TempDir()
	write(t, upper, "f", randBytes(1<<20), 0o644)
	m, stats := capture(t, st, upper, nil)
	for _, d := range stats.Chunks {
		st.Delete(context.Background(), d)
	}
	dst := t.TempDir()
	if _, err := Materialize(context.Background(), MaterializeOptions{Target: m, Dst: dst, Store: st}); err == nil {
		t.Fatal("materialized a file whose chunks are gone")
	}
}

func TestDiffAgainstImage(t *testing.T) {
	lower := t.TempDir()
	write(t, lower, "etc/conf", []byte("image"), 0o644)
	write(t, lower, "usr/share/doc/a", []byte("doc"), 0o644)
	write(t, lower, "usr/share/doc/b", []byte("doc"), 0o644)
	empty := &Manifest{Version: ManifestVersion, Entries: []Entry{{Path: "", Type: TypeDir}}}
	later := &Manifest{Version: ManifestVersion, Entries: []Entry{
		{Path: "", Type: TypeDir},
		{Path: "etc", Type: TypeDir, Mode: 0o755},
		{Path: "etc/conf", Type: TypeFile, Size: 3, Extents: []Extent{{Chunk: "sha256:x", Len: 3}}},
		{Path: "new.txt", Type: TypeFile, Size: 7, Extents: []Extent{{Chunk: "sha256:y", Len: 7}}},
		{Path: "usr", Type: TypeDir, Mode: 0o755},
		{Path: "usr/share", Type: TypeDir, Mode: 0o755},
		{Path: "usr/share/doc", Type: TypeWhiteout},
	}}
	d := Diff(empty, later, lower)
	var got []string
	for _, c := range d.Added {
		got = append(got, "+"+c.Path)
	}
	for _, c := range d.Modified {
		got = append(got, "~"+c.Path)
	}
	for _, c := range d.Deleted {
		got = append(got, "-"+c.Path)
	}
	want := "+/new.txt ~/etc/conf -/usr/share/doc -/usr/share/doc/a -/usr/share/doc/b"
	if strings.Join(got, " ") != want {
		t.Fatalf("diff %v, want %s", got, want)
	}
	back := Diff(later, empty, lower)
	if len(back.Added) != 3 || len(back.Deleted) != 1 || back.Deleted[0].Path != "/new.txt" {
		t.Fatalf("reverse diff: %+v", back)
	}
}

// TestChunkBoundariesAreStable pins the cut points of a known input: a
// change of algorithm or library that moves them would stop new captures
// from sharing chunks with stored ones.
func TestChunkBoundariesAreStable(t *testing.T) {
	data := make([]byte, 4<<20)
	x := uint64(88172645463325252)
	for i := range data {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		data[i] = byte(x)
	}
	chunks, err := blob.PutStream(context.Background(), nil, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, c := range chunks {
		sizes = append(sizes, c.Len)
	}
	got := fmt.Sprint(sizes)
	const want = "[163570 96454 151641 131104 154631 180569 62537 194404 71254 270465 187589 158116 166438 147186 183240 119162 105652 99930 221868 69699 179876 136511 137332 135269 146936 177167 150422 143770 51512]"
	if got != want {
		t.Fatalf("chunk boundaries moved:\n got %s\nwant %s", got, want)
	}
}

func newStoreB(b *testing.B) (*blob.Local, error) {
	return blob.OpenLocal(b.TempDir())
}

// A big file changed in the middle is restored by patching a copy of its
// current version: only the changed extents come from the store.
func TestMaterializePatchesBigFiles(t *testing.T) {
	st := newStore(t)
	base := t.TempDir()
	upper := filepath.Join(base, "upper")
	orig := randBytes(6 << 20)
	write(t, upper, "big", orig, 0o644)
	m1, _ := capture(t, st, upper, nil)
	ageCache(m1)
	changed := append([]byte(nil), orig...)
	copy(changed[3<<20:], randBytes(256<<10))
	write(t, upper, "big", changed, 0o644)
	cache, _ := capture(t, st, upper, m1)
	ageCache(cache)
	dst := filepath.Join(base, "new")
	os.Mkdir(dst, 0o755)
	stats, err := Materialize(context.Background(), MaterializeOptions{Target: m1, Dst: dst, Store: st, Current: upper, CurrentCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if stats.PatchedFiles != 1 || stats.WrittenBytes > 256<<10+4*blob.ChunkMax {
		t.Fatalf("patched %d files, %d bytes from the store", stats.PatchedFiles, stats.WrittenBytes)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "big")); !bytes.Equal(got, orig) {
		t.Fatal("the patched file differs from the checkpoint")
	}
}
