package disk

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// imageRoot makes a root filesystem laid out like a RHEL-family image's
// trust store (symlinked directory and file, one absolute link) plus the
// hostile and odd entries the readers must not read through.
func imageRoot(t *testing.T) (root, outside string) {
	t.Helper()
	root = t.TempDir()
	outside = t.TempDir()
	mk := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, rel string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	mk("etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "IMAGE BUNDLE")
	link("/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "etc/pki/tls/certs/ca-bundle.crt")
	link("../pki/tls/certs", "etc/ssl/certs")
	mk("etc/plain.pem", "PLAIN")
	if err := os.WriteFile(filepath.Join(outside, "host.pem"), []byte("HOST SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	link(filepath.Join(outside, "host.pem"), "etc/abs-out.pem")            // absolute: must stay in the root
	link("../../../../../../../../"+outside+"/host.pem", "etc/up-out.pem") // ".." past the root
	link("/proc/self/root/"+outside+"/host.pem", "etc/magic.pem")
	link("loop-b", "etc/loop-a")
	link("loop-a", "etc/loop-b")
	if err := syscall.Mkfifo(filepath.Join(root, "etc/fifo.pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	mk("etc/big.pem", strings.Repeat("x", 100))
	return root, outside
}

// ReadFileInRoot follows an image's links inside the image (RHEL's
// /etc/ssl/certs -> ../pki/tls/certs, its absolute link to the extracted
// bundle) and names the file it read; no link reaches a host file; odd
// entries are absent, not errors, and a FIFO does not block it.
func TestReadFileInRoot(t *testing.T) {
	root, _ := imageRoot(t)
	for _, c := range []struct {
		rel, want, resolved string
		ok, err             bool
	}{
		{rel: "etc/ssl/certs/ca-bundle.crt", want: "IMAGE BUNDLE", resolved: "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", ok: true},
		{rel: "etc/pki/tls/certs/ca-bundle.crt", want: "IMAGE BUNDLE", resolved: "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", ok: true},
		{rel: "etc/plain.pem", want: "PLAIN", resolved: "etc/plain.pem", ok: true},
		{rel: "etc/ssl/certs/ca-certificates.crt"}, // missing
		{rel: "etc/abs-out.pem"},                   // resolves inside the root: missing there
		{rel: "etc/up-out.pem"},                    // likewise
		{rel: "etc/loop-a"},                        // a loop
		{rel: "etc/fifo.pem"},                      // not a regular file
		{rel: "etc/plain.pem/x"},                   // below a file
		{rel: "etc/magic.pem"},                     // /proc resolves inside the root: missing there
		{rel: "etc/big.pem", err: true},            // more than max
		{rel: "../etc/plain.pem", err: true},       // not clean
	} {
		b, resolved, ok, err := ReadFileInRoot(root, c.rel, 64)
		if strings.Contains(string(b), "HOST SECRET") {
			t.Fatalf("%s: read a host file", c.rel)
		}
		if (err != nil) != c.err || ok != c.ok || string(b) != c.want || resolved != c.resolved && c.ok {
			t.Errorf("%s: %q %q ok=%v err=%v", c.rel, b, resolved, ok, err)
		}
	}
}

// ReadFileBeneath follows no link at all; an entry it cannot open for
// another reason than its absence is an error, not "absent".
func TestReadFileBeneath(t *testing.T) {
	root, _ := imageRoot(t)
	for _, c := range []struct {
		rel, want string
		ok, err   bool
	}{
		{rel: "etc/plain.pem", want: "PLAIN", ok: true},
		{rel: "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", want: "IMAGE BUNDLE", ok: true},
		{rel: "etc/ssl/certs/ca-bundle.crt"},     // below a symlinked dir
		{rel: "etc/pki/tls/certs/ca-bundle.crt"}, // a symlink
		{rel: "etc/abs-out.pem"},
		{rel: "etc/missing.pem"},
		{rel: "etc/fifo.pem"},
		{rel: "etc/big.pem", err: true},
	} {
		b, ok, err := ReadFileBeneath(root, c.rel, 64)
		if (err != nil) != c.err || ok != c.ok || string(b) != c.want {
			t.Errorf("%s: %q ok=%v err=%v", c.rel, b, ok, err)
		}
	}
	if os.Geteuid() == 0 {
		t.Log("root reads a mode-000 file: the open-error case needs a non-root user")
		return
	}
	p := filepath.Join(root, "etc/plain.pem")
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadFileBeneath(root, "etc/plain.pem", 64); err == nil || ok {
		t.Errorf("an unreadable file: ok=%v err=%v, want an error", ok, err)
	}
	if _, _, ok, err := ReadFileInRoot(root, "etc/plain.pem", 64); err == nil || ok {
		t.Errorf("an unreadable file (in root): ok=%v err=%v, want an error", ok, err)
	}
}
