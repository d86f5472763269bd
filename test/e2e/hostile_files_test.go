package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// Hostile guest, files API: sparse files that expand on the way out, FIFOs
// and a stopped agent that hang requests, and archives and symlinks that
// lead writes out of their target (issue 11, findings 9 and the lows).

// allocatedBytes is the disk space a host file takes.
func allocatedBytes(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// readAtHost reads n bytes of a host file at off.
func readAtHost(t *testing.T, p string, off int64, n int) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHostileSparseDownload(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	ctx := ctxT(t)
	const size = 2 << 30
	mustSh(t, sb, "mkdir -p /data && truncate -s 2G /data/sparse && "+
		"printf hello | dd of=/data/sparse bs=1 seek=1073741824 conv=notrunc 2>/dev/null && "+
		"dd if=/dev/urandom of=/data/dense bs=1k count=64 2>/dev/null")

	// The archive carries the sparse file in a few KB, not 2 GiB.
	start := time.Now()
	ar, err := sb.DownloadMax(ctx, "/data", 0)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(io.LimitReader(ar, 64<<20))
	ar.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("archive of a 2 GiB sparse file and 64 KiB of data: %d bytes in %s", len(body), time.Since(start))
	if len(body) > 1<<20 {
		t.Fatalf("the archive of a 2 GiB sparse file (and 64 KiB of data) is over %d bytes: holes were sent as zeros", len(body))
	}
	if ar.Type != "dir" {
		t.Fatalf("X-Sbx-Type %q, want dir", ar.Type)
	}
	out := t.TempDir()
	if err := client.ExtractArchive(bytes.NewReader(body), out); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(out, "sparse"))
	if err != nil || fi.Size() != size {
		t.Fatalf("extracted %v %v, want %d bytes", fi, err, size)
	}
	if a := allocatedBytes(t, filepath.Join(out, "sparse")); a > 1<<20 {
		t.Fatalf("the extracted sparse file takes %d bytes of disk", a)
	}
	if got := readAtHost(t, filepath.Join(out, "sparse"), 1<<30, 5); got != "hello" {
		t.Fatalf("data at 1 GiB: %q", got)
	}

	// The file GET sends every byte: over the default max_bytes (1 GiB) it
	// is refused before any, and so is anything over a given max_bytes.
	_, err = sb.OpenFile(ctx, "/data/sparse")
	ae := wantCode(t, err, api.CodeTooLarge)
	t.Logf("GET file of 2 GiB: %s", ae.Message)
	_, err = sb.OpenFileMax(ctx, "/data/dense", 1000)
	wantCode(t, err, api.CodeTooLarge)
	_, err = sb.DownloadMax(ctx, "/data", 1000)
	wantCode(t, err, api.CodeTooLarge)
	f, err := sb.OpenFileMax(ctx, "/data/dense", 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, f)
	f.Close()
	if n != 64<<10 {
		t.Fatalf("read %d bytes of a 64 KiB file", n)
	}

	// sbx cp out: a sparse file of the right size, data in place.
	dst := filepath.Join(t.TempDir(), "copy")
	_, errs, code := sbxCLI(t, "", "cp", sb.Name+":/data/sparse", dst)
	if code != 0 {
		t.Fatalf("sbx cp: exit %d: %s", code, errs)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Size() != size {
		t.Fatalf("sbx cp wrote %v %v, want %d bytes", fi, err, size)
	}
	if a := allocatedBytes(t, dst); a > 1<<20 {
		t.Fatalf("sbx cp of a 2 GiB sparse file wrote %d bytes of disk", a)
	}
	if got := readAtHost(t, dst, 1<<30, 5); got != "hello" {
		t.Fatalf("data at 1 GiB: %q", got)
	}
	// ...and refuses a copy over --max-bytes, writing nothing.
	small := filepath.Join(t.TempDir(), "small")
	_, errs, code = sbxCLI(t, "", "cp", "--max-bytes", "1000", sb.Name+":/data/dense", small)
	if code == 0 || !strings.Contains(errs, "--max-bytes") {
		t.Fatalf("sbx cp over --max-bytes: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(small); err == nil {
		t.Fatal("sbx cp over --max-bytes wrote the file")
	}
}

// runscSandboxPid is the host pid of a sandbox's runsc-sandbox process.
func runscSandboxPid(t *testing.T, id string) int {
	t.Helper()
	out, err := exec.Command("runsc", "--root", filepath.Join(h.dataDir, "runsc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runsc state: %v", err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid == 0 {
		t.Fatalf("runsc state: %v %s", err, out)
	}
	return st.Pid
}

// answersWithin runs f, which must return an error, and fails the test if
// it takes longer than d (a hang).
func answersWithin(t *testing.T, d time.Duration, what string, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	took := time.Since(start)
	t.Logf("%s: %v after %s", what, err, took.Round(time.Millisecond))
	if took > d || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: no answer within %s (took %s): %v", what, d, took, err)
	}
	return err
}

func TestHostileFifo(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "mkdir -p /data && mkfifo /data/fifo && echo hi > /data/f")

	err := answersWithin(t, 10*time.Second, "GET of a FIFO", func(ctx context.Context) error {
		f, err := sb.OpenFile(ctx, "/data/fifo")
		if err == nil {
			f.Close()
		}
		return err
	})
	ae := wantCode(t, err, api.CodeInvalidArgument)
	if !strings.Contains(ae.Message, "not a regular file") {
		t.Fatalf("message %q", ae.Message)
	}
	// A FIFO in an archived directory is an entry, never opened.
	answersWithin(t, 10*time.Second, "GET archive of a dir with a FIFO", func(ctx context.Context) error {
		ar, err := sb.Download(ctx, "/data")
		if err != nil {
			t.Fatal(err)
		}
		defer ar.Close()
		_, err = io.Copy(io.Discard, ar)
		if err != nil {
			t.Fatal(err)
		}
		return errors.New("(done)")
	})

	// A stopped agent: requests answer an error within the agent deadline
	// (20 s without a frame), not never.
	mustSh(t, sb, "(sleep 1; kill -STOP 1) >/dev/null 2>&1 &")
	time.Sleep(2 * time.Second)
	probe, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, perr := sb.ReadFile(probe, "/data/f")
	cancel()
	if perr == nil {
		// gVisor keeps SIGSTOP from the sandbox's init: freeze the whole
		// sandbox from the host instead.
		pid := runscSandboxPid(t, sb.ID)
		t.Logf("kill -STOP 1 in the sandbox did not stop the agent; SIGSTOP to runsc-sandbox (pid %d)", pid)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	}
	err = answersWithin(t, 45*time.Second, "GET file while the agent is stopped", func(ctx context.Context) error {
		_, err := sb.ReadFile(ctx, "/data/f")
		return err
	})
	wantCode(t, err, api.CodeUnavailable)
	err = answersWithin(t, 45*time.Second, "GET archive while the agent is stopped", func(ctx context.Context) error {
		ar, err := sb.Download(ctx, "/data")
		if err == nil {
			ar.Close()
		}
		return err
	})
	wantCode(t, err, api.CodeUnavailable)
	err = answersWithin(t, 45*time.Second, "PUT file while the agent is stopped", func(ctx context.Context) error {
		return sb.WriteFile(ctx, "/data/g", bytes.NewReader(make([]byte, 8<<20)), 0o644)
	})
	wantCode(t, err, api.CodeUnavailable)
}

func TestHostileTarSymlink(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	ctx := ctxT(t)
	canary := t.TempDir() // a host directory a link might point to
	mustSh(t, sb, "mkdir -p /data/pre && ln -s /etc /data/pre/lnk && ln -s /.sbx /data/sbxlnk && ln -s /proc /data/proclnk && ln -s /dev /data/devlnk")

	tarOf := func(hdrs ...*tar.Header) *bytes.Buffer {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hdrs {
			body := ""
			if h.Typeflag == tar.TypeReg {
				body = "pwned\n"
				h.Size = int64(len(body))
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(body))
		}
		tw.Close()
		return &b
	}
	// The archive makes lnk -> /etc, then writes lnk/x; and the same to a
	// host path.
	err := sb.Upload(ctx, "/data/up", tarOf(
		&tar.Header{Name: "lnk", Typeflag: tar.TypeSymlink, Linkname: "/etc", Mode: 0o777},
		&tar.Header{Name: "lnk/x", Typeflag: tar.TypeReg, Mode: 0o644}))
	ae := wantCode(t, err, api.CodeInvalidArgument)
	t.Logf("tar through its own symlink: %s", ae.Message)
	err = sb.Upload(ctx, "/data/up", tarOf(
		&tar.Header{Name: "hl", Typeflag: tar.TypeSymlink, Linkname: canary, Mode: 0o777},
		&tar.Header{Name: "hl/y", Typeflag: tar.TypeReg, Mode: 0o644}))
	wantCode(t, err, api.CodeInvalidArgument)
	// A symlink the sandbox has in the target is not followed either.
	err = sb.Upload(ctx, "/data/pre", tarOf(&tar.Header{Name: "lnk/z", Typeflag: tar.TypeReg, Mode: 0o644}))
	wantCode(t, err, api.CodeInvalidArgument)
	if out := mustSh(t, sb, "ls /etc/x /etc/y /etc/z 2>/dev/null; true"); out != "" {
		t.Fatalf("tar entries landed in /etc through a symlink: %q", out)
	}
	if ents, _ := os.ReadDir(canary); len(ents) > 0 {
		t.Fatalf("a tar entry landed in a host directory: %v", ents)
	}

	// Reserved places reached through a symlink are refused.
	for _, tc := range []struct {
		what string
		f    func() error
	}{
		{"PUT file through a link to /.sbx", func() error {
			return sb.WriteFile(ctx, "/data/sbxlnk/run/evil", strings.NewReader("x"), 0o644)
		}},
		{"PUT archive into a link to /.sbx", func() error {
			return sb.Upload(ctx, "/data/sbxlnk/run", tarOf(&tar.Header{Name: "evil2", Typeflag: tar.TypeReg, Mode: 0o644}))
		}},
		{"PUT file through a link to /dev", func() error {
			return sb.WriteFile(ctx, "/data/devlnk/evil3", strings.NewReader("x"), 0o644)
		}},
		{"GET file through a link to /proc", func() error {
			_, err := sb.ReadFile(ctx, "/data/proclnk/self/status")
			return err
		}},
		{"GET archive through a link to /proc", func() error {
			ar, err := sb.Download(ctx, "/data/proclnk/self")
			if err == nil {
				ar.Close()
			}
			return err
		}},
		{"list through a link to /.sbx", func() error {
			_, err := sb.ListFiles(ctx, "/data/sbxlnk/run")
			return err
		}},
		{"DELETE through a link to /.sbx", func() error {
			return sb.RemoveFile(ctx, "/data/sbxlnk/run/agent.sock", false)
		}},
	} {
		ae := wantCode(t, tc.f(), api.CodeInvalidArgument)
		if !strings.Contains(ae.Message, "reserve") {
			t.Errorf("%s: message %q", tc.what, ae.Message)
		}
	}
	if out := mustSh(t, sb, "ls /.sbx/run/evil /.sbx/run/evil2 /dev/evil3 2>/dev/null; true"); out != "" {
		t.Fatalf("writes landed in reserved places: %q", out)
	}
	// Removing the link itself is fine (it is not followed), and the
	// agent still answers.
	if err := sb.RemoveFile(ctx, "/data/sbxlnk", false); err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "true")

	// What held: ".." entries are refused; plain archives extract.
	err = sb.Upload(ctx, "/data/up", tarOf(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}))
	wantCode(t, err, api.CodeInvalidArgument)
	if err := sb.Upload(ctx, "/data/ok", tarOf(
		&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o600})); err != nil {
		t.Fatal(err)
	}
	if out := mustSh(t, sb, "cat /data/ok/d/f; ls /data/escape 2>/dev/null; true"); out != "pwned\n" {
		t.Fatalf("%q", out)
	}
}
