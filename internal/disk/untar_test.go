package disk

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func mkTar(t *testing.T, es ...entry) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: mode, Linkname: e.link, Size: int64(len(e.body))}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return bytes.NewReader(buf.Bytes())
}

func TestUntarKeepsTree(t *testing.T) {
	dir := t.TempDir()
	size, err := untar(mkTar(t,
		entry{name: "./etc/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "./etc/passwd", typ: tar.TypeReg, body: "root"},
		entry{name: "./bin/sh", typ: tar.TypeReg, body: "elf", mode: 0o4755},
		entry{name: "./bin/bash", typ: tar.TypeLink, link: "./bin/sh"},
		entry{name: "./usr/lib/x", typ: tar.TypeSymlink, link: "../../etc/passwd"},
	), dir)
	if err != nil || size != 7 {
		t.Fatalf("untar: %d %v", size, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, "bin/sh"))
	if fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("setuid bit lost: %v", fi.Mode())
	}
	a, _ := os.Stat(filepath.Join(dir, "bin/sh"))
	b, _ := os.Stat(filepath.Join(dir, "bin/bash"))
	if !os.SameFile(a, b) {
		t.Fatal("hard link not kept")
	}
	if target, _ := os.Readlink(filepath.Join(dir, "usr/lib/x")); target != "../../etc/passwd" {
		t.Fatalf("symlink %q", target)
	}
}

func TestUntarRefusesEscapes(t *testing.T) {
	outside := t.TempDir()
	for name, r := range map[string]*bytes.Reader{
		"dotdot": mkTar(t, entry{name: "../x", typ: tar.TypeReg, body: "x"}),
		"through a symlink": mkTar(t,
			entry{name: "evil", typ: tar.TypeSymlink, link: outside},
			entry{name: "evil/pwned", typ: tar.TypeReg, body: "x"}),
		"hard link out": mkTar(t, entry{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}),
	} {
		dir := t.TempDir()
		if _, err := untar(r, dir); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
			t.Fatalf("%s: wrote outside the root", name)
		}
	}
}

func TestPrepareRootFS(t *testing.T) {
	dir := t.TempDir()
	if err := prepareRootFS(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".sbx/run", "workspace", "tmp", "proc"} {
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || !fi.IsDir() {
			t.Fatalf("%s missing", p)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "tmp")); fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Fatalf("/tmp mode %v", fi.Mode())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc", "hosts")); err != nil || !strings.Contains(string(b), "127.0.0.1\tlocalhost") {
		t.Fatalf("/etc/hosts: %q %v", b, err)
	}
	// An image's own /etc/hosts is kept.
	own := t.TempDir()
	os.MkdirAll(filepath.Join(own, "etc"), 0o755)
	os.WriteFile(filepath.Join(own, "etc", "hosts"), []byte("10.0.0.1 db\n"), 0o644)
	if err := prepareRootFS(own); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(own, "etc", "hosts")); string(b) != "10.0.0.1 db\n" {
		t.Fatalf("the image's /etc/hosts was replaced: %q", b)
	}
	// The builder host's name (mmdebstrap copies /etc/hostname) does not
	// stay in the image, nor does a link there.
	for _, mk := range []func(p string) error{
		func(p string) error { return os.WriteFile(p, []byte("buildhost\n"), 0o644) },
		func(p string) error { return os.Symlink("/etc/passwd", p) },
	} {
		img := t.TempDir()
		os.MkdirAll(filepath.Join(img, "etc"), 0o755)
		if err := mk(filepath.Join(img, "etc", "hostname")); err != nil {
			t.Fatal(err)
		}
		if err := prepareRootFS(img); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(img, "etc", "hostname"))
		if b, _ := os.ReadFile(filepath.Join(img, "etc", "hostname")); err != nil || !fi.Mode().IsRegular() || string(b) != "localhost\n" {
			t.Fatalf("the image's /etc/hostname: %v %q", fi, b)
		}
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "workspace"), nil, 0o644)
	if err := prepareRootFS(bad); err == nil || !strings.Contains(err.Error(), "/workspace") {
		t.Fatalf("a file where a mount point goes: %v", err)
	}
}

func TestArchiveKind(t *testing.T) {
	for want, r := range map[string]*bytes.Reader{
		"oci":    mkTar(t, entry{name: "oci-layout", typ: tar.TypeReg, body: "{}"}, entry{name: "index.json", typ: tar.TypeReg, body: "{}"}),
		"docker": mkTar(t, entry{name: "manifest.json", typ: tar.TypeReg, body: "[]"}),
		"rootfs": mkTar(t, entry{name: "./etc/passwd", typ: tar.TypeReg, body: "x"}),
	} {
		p := filepath.Join(t.TempDir(), "a.tar")
		b := make([]byte, r.Len())
		r.Read(b)
		os.WriteFile(p, b, 0o644)
		if got, err := archiveKind(p); err != nil || got != want {
			t.Errorf("%s: got %s %v", want, got, err)
		}
	}
}

// TestUntarSkipsDevices: an image's device nodes are not made on the host.
func TestUntarSkipsDevices(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "dev/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "dev/mem", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 1},
		{Name: "dev/sda", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 8, Devminor: 0},
		{Name: "ok", Typeflag: tar.TypeReg, Mode: 0o644},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	if _, err := untar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"dev/mem", "dev/sda"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("%s was made on the host: %v", n, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "ok")); err != nil {
		t.Fatal(err)
	}
}
