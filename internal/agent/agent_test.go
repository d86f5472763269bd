package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var controls atomic.Int64

// controlName is an abstract socket name no other test, nor another test
// process on the machine, uses.
func controlName() string {
	return fmt.Sprintf("@sbx-test-%d-%d", os.Getpid(), controls.Add(1))
}

// startAgent runs a Server in-process (not as PID 1) on a socket in a
// temp dir and returns a client of it.
func startAgent(t *testing.T, spare int) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "a.sock")
	srv, err := NewServer(sock, controlName(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cl := NewClient(sock, spare)
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return cl
}

func run(t *testing.T, cl *Client, req *Request, stdin io.Reader) (string, string, *Exit) {
	t.Helper()
	p, err := cl.Start(context.Background(), req, stdin)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	ex, err := p.Wait(&out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), ex
}

var env = []string{"PATH=/usr/bin:/bin"}

func TestExec(t *testing.T) {
	for _, spare := range []int{0, 2} {
		cl := startAgent(t, spare)
		out, errs, ex := run(t, cl, &Request{Cmd: []string{"sh", "-c", "echo $FOO; pwd; echo e >&2; exit 5"}, Env: append(env, "FOO=bar"), Cwd: "/tmp"}, nil)
		if out != "bar\n/tmp\n" || errs != "e\n" || ex.ExitCode != 5 {
			t.Fatalf("spare=%d: %q %q %+v", spare, out, errs, ex)
		}
	}
}

func TestExecStdin(t *testing.T) {
	cl := startAgent(t, 0)
	big := strings.Repeat("y", 3<<20)
	out, _, ex := run(t, cl, &Request{Cmd: []string{"wc", "-c"}, Env: env}, strings.NewReader(big))
	if strings.TrimSpace(out) != "3145728" || ex.ExitCode != 0 {
		t.Fatalf("%q %+v", out, ex)
	}
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	cl := startAgent(t, 0)
	marker := filepath.Join(t.TempDir(), "m")
	start := time.Now()
	_, _, ex := run(t, cl, &Request{Cmd: []string{"sh", "-c", "(sleep 2; touch " + marker + ") & sleep 30"}, Env: env, TimeoutMS: 200}, nil)
	if ex.ExitCode != 124 || !ex.TimedOut {
		t.Fatalf("%+v", ex)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("timeout took too long")
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a child of the timed-out process survived the kill of its group")
	}
}

func TestExecCancelKills(t *testing.T) {
	cl := startAgent(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := cl.Start(ctx, &Request{Cmd: []string{"sleep", "30"}, Env: env}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := p.Wait(io.Discard, io.Discard); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after cancel: %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		if err := syscallKill(p.PID); err != nil {
			return // gone
		}
		if time.Now().After(deadline) {
			t.Fatal("cancelled process still runs")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecStartFailures(t *testing.T) {
	cl := startAgent(t, 0)
	for _, tc := range []struct {
		req   Request
		kind  string
		field string
	}{
		{Request{Cmd: []string{"no-such-cmd-xyz"}, Env: env}, FailNotFound, "cmd"},
		{Request{Cmd: []string{"/no/such"}, Env: env}, FailNotFound, "cmd"},
		{Request{Cmd: []string{"/tmp"}, Env: env}, FailInvalid, "cmd"},
		{Request{Cmd: []string{"true"}, Env: env, Cwd: "/no/such/dir"}, FailNotFound, "cwd"},
		{Request{Cmd: []string{"true"}, Env: env, Cwd: "/etc/hostname"}, FailNotDir, "cwd"},
	} {
		_, err := cl.Start(context.Background(), &tc.req, nil)
		var ae *Error
		if !errors.As(err, &ae) || ae.Kind != tc.kind || ae.Field != tc.field {
			t.Errorf("%v: got %v (%+v), want kind %s field %s", tc.req.Cmd, err, ae, tc.kind, tc.field)
		}
	}
}

func TestFiles(t *testing.T) {
	cl := startAgent(t, 0)
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "f.txt")
	st, err := cl.WriteFile(ctx, p, 0o600, strings.NewReader("hello"))
	if err != nil || st.Size != 5 {
		t.Fatalf("%+v %v", st, err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	st, rc, err := cl.Open(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "hello" || st.Size != 5 {
		t.Fatalf("%q %v", b, err)
	}
	if _, _, err := cl.Open(ctx, filepath.Join(dir, "nope"), 0); !isKind(err, FailNotFound) {
		t.Fatalf("open missing: %v", err)
	}
	if _, _, err := cl.Open(ctx, dir, 0); !isKind(err, FailIsDir) {
		t.Fatalf("open dir: %v", err)
	}
	if _, err := cl.WriteFile(ctx, dir, 0, strings.NewReader("x")); !isKind(err, FailIsDir) {
		t.Fatalf("write onto a dir: %v", err)
	}
	ents, err := cl.List(ctx, filepath.Join(dir, "a", "b"))
	if err != nil || len(ents) != 1 || ents[0].Name != "f.txt" || ents[0].Type != "file" {
		t.Fatalf("%+v %v", ents, err)
	}
	if err := cl.Remove(ctx, filepath.Join(dir, "a"), false); !isKind(err, FailNotEmpty) {
		t.Fatalf("remove non-empty: %v", err)
	}
	if err := cl.Remove(ctx, filepath.Join(dir, "a"), true); err != nil {
		t.Fatal(err)
	}
	if err := cl.Remove(ctx, filepath.Join(dir, "a"), true); !isKind(err, FailNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
}

func TestTarRoundTrip(t *testing.T) {
	cl := startAgent(t, 0)
	ctx := context.Background()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "x"), []byte("xx"), 0o644)
	os.Symlink("d/x", filepath.Join(src, "l"))
	_, rc, err := cl.TarOut(ctx, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	res, err := cl.TarIn(ctx, dst, rc)
	rc.Close()
	if err != nil || res.Files != 3 {
		t.Fatalf("%+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "l")); string(b) != "xx" {
		t.Fatalf("%q", b)
	}
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	if _, err := cl.TarIn(ctx, dst, &evil); !isKind(err, FailInvalid) {
		t.Fatalf("tar with ..: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "escape")); err == nil {
		t.Fatal("a tar entry escaped its directory")
	}
}

func TestFrameLimits(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, FrameData, make([]byte, MaxFrame+1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("oversized frame: %v", err)
	}
	buf.Reset()
	buf.Write([]byte{FrameData, 0xff, 0xff, 0xff, 0xff})
	if _, _, err := ReadFrame(&buf, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("oversized header: %v", err)
	}
}

func isKind(err error, kind string) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Kind == kind
}

// TestTarInReadsToTheEnd: an archive followed by record padding (GNU tar
// pads to 10 KiB records; here 4 MiB, more than a socket buffer holds) is
// extracted and answered. (The race a CI run met under gVisor, a write
// of the body's end failing with EPIPE after the agent answered and
// closed, does not show on the host's sockets: this holds the behaviour,
// not that race.)
func TestTarInReadsToTheEnd(t *testing.T) {
	cl := startAgent(t, 0)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644})
	tw.Write([]byte("hi"))
	tw.Close()
	b.Write(make([]byte, 4<<20))
	dst := filepath.Join(t.TempDir(), "out")
	res, err := cl.TarIn(context.Background(), dst, &b)
	if err != nil || res.Files != 1 {
		t.Fatalf("tar with trailing padding: %+v, %v", res, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "f")); string(got) != "hi" {
		t.Fatalf("f = %q", got)
	}
}
