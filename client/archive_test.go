package client

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestExtractArchiveWritesHoles(t *testing.T) {
	const size = 16 << 20
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "d/big", Typeflag: tar.TypeReg, Mode: 0o640, Size: size})
	body := make([]byte, size)
	copy(body[size/2:], "hello")
	body[size-1] = 'z'
	tw.Write(body)
	tw.WriteHeader(&tar.Header{Name: "d/tail", Typeflag: tar.TypeReg, Mode: 0o644, Size: 10 << 20})
	tw.Write(make([]byte, 10<<20)) // ends in a hole
	// A symlink out, then a file through it: os.Root keeps it inside.
	outside := t.TempDir()
	tw.WriteHeader(&tar.Header{Name: "lnk", Typeflag: tar.TypeSymlink, Linkname: outside})
	tw.WriteHeader(&tar.Header{Name: "lnk/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()

	dir := t.TempDir()
	err := ExtractArchive(&b, dir)
	if err == nil {
		t.Error("an entry through a symlink out of the directory was extracted")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("an entry was written outside the directory")
	}
	for name, want := range map[string]int64{"d/big": size, "d/tail": 10 << 20} {
		p := filepath.Join(dir, name)
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != want || st.Blocks*512 > 1<<20 {
			t.Errorf("%s: size %d (want %d), %d bytes allocated", name, st.Size, want, st.Blocks*512)
		}
	}
	got, _ := os.ReadFile(filepath.Join(dir, "d/big"))
	if !bytes.Equal(got, body) {
		t.Fatal("content differs")
	}
}
