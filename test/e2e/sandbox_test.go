package e2e

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func TestExec(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Env: map[string]string{"FROM_SANDBOX": "s", "OVERRIDE": "sandbox"}})
	ctx := ctxT(t)

	t.Run("OutputAndExitCode", func(t *testing.T) {
		res := sh(t, sb, "echo out; echo err >&2; exit 7")
		if res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 7 {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("HostnameCwdEnv", func(t *testing.T) {
		res, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "hostname; pwd; echo $FROM_SANDBOX $OVERRIDE $BUSYBOX $HOME"},
			Env: map[string]string{"OVERRIDE": "request"}})
		if err != nil {
			t.Fatal(err)
		}
		want := sb.Name + "\n/workspace\ns request 1 /root\n"
		if res.Stdout != want {
			t.Fatalf("stdout %q, want %q", res.Stdout, want)
		}
		res, err = sb.Run(ctx, api.ExecRequest{Cmd: []string{"pwd"}, Cwd: "/etc"})
		if err != nil || res.Stdout != "/etc\n" {
			t.Fatalf("cwd /etc: %+v %v", res, err)
		}
	})
	t.Run("Stdin", func(t *testing.T) {
		res, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"wc", "-c"}, Stdin: strings.Repeat("x", 100000)})
		if err != nil || strings.TrimSpace(res.Stdout) != "100000" {
			t.Fatalf("wc -c of 100000 bytes of stdin: %+v %v", res, err)
		}
	})
	t.Run("TimeoutIs124", func(t *testing.T) {
		start := time.Now()
		res, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "echo before; sleep 30"}, TimeoutMS: 500})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 124 || !res.TimedOut || res.Stdout != "before\n" {
			t.Fatalf("got %+v", res)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("timeout of 500 ms took %v", d)
		}
		// The whole process group is gone: nothing still sleeps.
		if out := mustSh(t, sb, "ps -o args | grep 'sleep 30' | grep -v grep || true"); out != "" {
			t.Fatalf("timed-out process still running: %q", out)
		}
	})
	t.Run("Stream", func(t *testing.T) {
		st, err := sb.Stream(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "echo one; sleep 0.3; echo two >&2; printf 'caf\\303\\251'; exit 3"}})
		if err != nil {
			t.Fatal(err)
		}
		var seq []string
		var stdout string
		var exit *api.ExecEvent
		for ev, err := range st.Events() {
			if err != nil {
				t.Fatal(err)
			}
			seq = append(seq, ev.Type)
			if ev.Type == api.ExecStdout {
				stdout += ev.Data
			}
			if ev.Type == api.ExecExit {
				exit = &ev
			}
		}
		st.Close()
		if exit == nil || *exit.ExitCode != 3 {
			t.Fatalf("no exit 3 line: %v", seq)
		}
		if stdout != "one\ncafé" {
			t.Fatalf("stdout %q", stdout)
		}
		if seq[0] != api.ExecStart || st.PID == 0 || seq[1] != api.ExecStdout || !strings.Contains(strings.Join(seq, ","), api.ExecStderr) {
			t.Fatalf("event order %v", seq)
		}
	})
	t.Run("BackgroundChildDoesNotHoldAnswer", func(t *testing.T) {
		start := time.Now()
		res := sh(t, sb, "sleep 20 & echo started")
		if res.ExitCode != 0 || res.Stdout != "started\n" {
			t.Fatalf("got %+v", res)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("exec waited %v for a background child", d)
		}
	})
	t.Run("MissingBinary", func(t *testing.T) {
		_, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"no-such-binary"}})
		ae := wantCode(t, err, api.CodeInvalidArgument)
		if !strings.Contains(ae.Message, "no-such-binary") || !strings.HasPrefix(ae.Message, "cmd") {
			t.Fatalf("message does not name the binary and field: %q", ae.Message)
		}
		_, err = sb.Stream(ctx, api.ExecRequest{Cmd: []string{"/no/such"}})
		wantCode(t, err, api.CodeInvalidArgument)
	})
	t.Run("BadCwdAndArgs", func(t *testing.T) {
		_, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"ls"}, Cwd: "/nope"})
		if ae := wantCode(t, err, api.CodeInvalidArgument); !strings.HasPrefix(ae.Message, "cwd") {
			t.Fatalf("message %q does not name cwd", ae.Message)
		}
		_, err = sb.Run(ctx, api.ExecRequest{Cmd: []string{"ls"}, Cwd: "relative"})
		wantCode(t, err, api.CodeInvalidArgument)
		_, err = sb.Run(ctx, api.ExecRequest{})
		wantCode(t, err, api.CodeInvalidArgument)
		_, err = sb.Run(ctx, api.ExecRequest{Cmd: []string{"ls"}, TimeoutMS: -1})
		wantCode(t, err, api.CodeInvalidArgument)
	})
}

func TestFiles(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	ctx := ctxT(t)

	if err := sb.WriteFile(ctx, "/workspace/a/b/hello.sh", strings.NewReader("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out := mustSh(t, sb, "/workspace/a/b/hello.sh; stat -c %a /workspace/a/b/hello.sh"); out != "hi\n755\n" {
		t.Fatalf("written script: %q", out)
	}
	b, err := sb.ReadFile(ctx, "/workspace/a/b/hello.sh")
	if err != nil || string(b) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("read back %q %v", b, err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	if err := sb.WriteFile(ctx, "/tmp/big", bytes.NewReader(big), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := sb.ReadFile(ctx, "/tmp/big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("4 MiB round trip: %d bytes, %v", len(got), err)
	}
	ents, err := sb.ListFiles(ctx, "/workspace/a/b")
	if err != nil || len(ents) != 1 || ents[0].Name != "hello.sh" || ents[0].Type != api.FileRegular || ents[0].Mode != 0o755 {
		t.Fatalf("list: %+v %v", ents, err)
	}

	// A tar round trip: upload a tree, download it again.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "src/main.py", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	_, _ = tw.Write([]byte("print"))
	_ = tw.WriteHeader(&tar.Header{Name: "src/link", Typeflag: tar.TypeSymlink, Linkname: "main.py"})
	_ = tw.Close()
	if err := sb.Upload(ctx, "/workspace/proj", &tb); err != nil {
		t.Fatal(err)
	}
	if out := mustSh(t, sb, "cat /workspace/proj/src/link"); out != "print" {
		t.Fatalf("uploaded tree: %q", out)
	}
	rc, err := sb.Download(ctx, "/workspace/proj")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[hdr.Name] = true
	}
	rc.Close()
	for _, n := range []string{"src/", "src/main.py", "src/link"} {
		if !names[n] {
			t.Fatalf("downloaded archive lacks %s: %v", n, names)
		}
	}

	if err := sb.RemoveFile(ctx, "/workspace/a", false); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("non-recursive delete of a non-empty dir: %v", err)
	}
	if err := sb.RemoveFile(ctx, "/workspace/a", true); err != nil {
		t.Fatal(err)
	}
	_, err = sb.ReadFile(ctx, "/workspace/a/b/hello.sh")
	wantCode(t, err, api.CodeFileNotFound)

	t.Run("BadPaths", func(t *testing.T) {
		for _, p := range []string{"relative/x", "/workspace/../etc/passwd", "/workspace/./x", "", "/.sbx/bin/sbx-agent", "/proc/1/environ"} {
			_, err := sb.ReadFile(ctx, p)
			ae := wantCode(t, err, api.CodeInvalidArgument)
			if !strings.HasPrefix(ae.Message, "path") {
				t.Fatalf("%q: message %q does not name the path field", p, ae.Message)
			}
			err = sb.WriteFile(ctx, p, strings.NewReader("x"), 0)
			wantCode(t, err, api.CodeInvalidArgument)
		}
		_, err := sb.ReadFile(ctx, "/workspace")
		wantCode(t, err, api.CodeInvalidArgument)
		_, err = sb.ListFiles(ctx, "/nope")
		wantCode(t, err, api.CodeFileNotFound)
		err = sb.RemoveFile(ctx, "/", true)
		wantCode(t, err, api.CodeInvalidArgument)
		var evil bytes.Buffer
		tw := tar.NewWriter(&evil)
		_ = tw.WriteHeader(&tar.Header{Name: "../../etc/evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		err = sb.Upload(ctx, "/workspace/x", &evil)
		wantCode(t, err, api.CodeInvalidArgument)
	})
}

func TestBadInput(t *testing.T) {
	ctx := ctxT(t)
	before := runscIDs(t)
	for _, tc := range []struct {
		name string
		req  api.CreateSandboxRequest
		code api.Code
		says string
	}{
		{"uppercase name", api.CreateSandboxRequest{Name: "Bad"}, api.CodeInvalidArgument, "name"},
		{"underscore name", api.CreateSandboxRequest{Name: "a_b"}, api.CodeInvalidArgument, "name"},
		{"long name", api.CreateSandboxRequest{Name: strings.Repeat("a", 64)}, api.CodeInvalidArgument, "name"},
		{"leading dash", api.CreateSandboxRequest{Name: "-a"}, api.CodeInvalidArgument, "name"},
		{"missing image", api.CreateSandboxRequest{Image: "no-such-image"}, api.CodeImageNotFound, "no-such-image"},
		{"cpus", api.CreateSandboxRequest{Image: "busybox", CPUs: 1000}, api.CodeInvalidArgument, "cpus"},
		{"memory", api.CreateSandboxRequest{Image: "busybox", MemoryMB: 1}, api.CodeInvalidArgument, "memory_mb"},
		{"env key", api.CreateSandboxRequest{Image: "busybox", Env: map[string]string{"A=B": "c"}}, api.CodeInvalidArgument, "env"},
		{"volume path", api.CreateSandboxRequest{Image: "busybox", Volumes: []api.Volume{{Name: "v", Path: "/proc"}}}, api.CodeInvalidArgument, "volumes"},
	} {
		_, err := h.c.Sandboxes.Create(ctx, tc.req)
		ae := wantCode(t, err, tc.code)
		if !strings.Contains(ae.Message, tc.says) {
			t.Errorf("%s: message %q does not mention %q", tc.name, ae.Message, tc.says)
		}
	}

	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	_, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: sb.Name, Image: "busybox"})
	wantCode(t, err, api.CodeNameTaken)
	_, err = h.c.Sandboxes.Get(ctx, "no-such-sandbox")
	wantCode(t, err, api.CodeSandboxNotFound)
	err = h.c.Sandboxes.Delete(ctx, "no-such-sandbox")
	wantCode(t, err, api.CodeSandboxNotFound)

	t.Run("RawHTTP", func(t *testing.T) {
		hc := &http.Client{}
		base := "http://" + h.listen
		do := func(method, path, body string) (int, string) {
			req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+h.apiKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := do("POST", "/v1/sandboxes", `{"name": "x", "memory": 5}`); code != 400 || !strings.Contains(body, `memory: unknown field`) {
			t.Fatalf("unknown field: %d %s", code, body)
		}
		if code, body := do("POST", "/v1/sandboxes", `{"name": 5}`); code != 400 || !strings.Contains(body, "invalid_argument") {
			t.Fatalf("wrong type: %d %s", code, body)
		}
		if code, body := do("POST", "/v1/sandboxes", `{"name": "x"`); code != 400 {
			t.Fatalf("truncated JSON: %d %s", code, body)
		}
		// Over the create body's bound (8 MiB: it may carry 100 secrets of
		// 64 KiB; server.MaxSecretsBody).
		if code, body := do("POST", "/v1/sandboxes", `{"name": "`+strings.Repeat("a", 9<<20)+`"}`); code != 413 || !strings.Contains(body, "too_large") {
			t.Fatalf("over-long body: %d %.200s", code, body)
		}
		if code, body := do("GET", "/v1/nothing", ""); code != 404 || !strings.Contains(body, "not_found") {
			t.Fatalf("unknown route: %d %s", code, body)
		}
		if code, body := do("PUT", "/v1/sandboxes", ""); code != 405 || !strings.Contains(body, "method_not_allowed") {
			t.Fatalf("wrong method: %d %s", code, body)
		}
	})

	t.Run("ConcurrentDeletes", func(t *testing.T) {
		victim, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				errs[i] = h.c.Sandboxes.Delete(ctx, victim.Name)
			}(i)
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, client.ErrConflict), errors.Is(err, client.ErrSandboxNotFound):
			default:
				t.Errorf("concurrent delete: unexpected %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d deletes succeeded, want exactly 1: %v", ok, errs)
		}
		if left := hostLeftovers(t, victim.ID); len(left) > 0 {
			t.Fatalf("deleted sandbox left %v", left)
		}
	})

	// Failed creates left nothing: no container beyond those before (and
	// the sandbox of this test, and warm ones), no record.
	after := runscIDs(t)
	sbs, _ := h.c.Sandboxes.List(ctx, nil)
	names := map[string]bool{}
	for _, s := range sbs {
		names[s.ID] = true
	}
	for id := range after {
		if !before[id] && !names[id] && id != sb.ID && !isWarm(t, id) {
			t.Errorf("container %s appeared and is not a listed sandbox", id)
		}
	}
}

// isWarm reports whether id is a warm (pooled) sandbox: it has a record
// that the API hides.
func isWarm(t *testing.T, id string) bool {
	_, err := h.c.Sandboxes.Get(ctxT(t), id)
	return errors.Is(err, client.ErrSandboxNotFound) && len(hostLeftovers(t, id)) > 0
}

// TestArchiveOfRoot: an archive of / holds the disk (not /proc, /sys, /dev
// or sbx's own files) and ends cleanly.
func TestArchiveOfRoot(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "echo deep > /workspace/deep.txt")
	rc, err := sb.Download(ctxT(t), "/")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	names := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("archive of /: %v", err)
		}
		names[strings.SplitN(hdr.Name, "/", 2)[0]] = true
		if hdr.Name == "workspace/deep.txt" {
			names["found"] = true
		}
	}
	if !names["found"] || !names["bin"] {
		t.Fatalf("archive of / lacks the disk: %v", names)
	}
	for _, bad := range []string{"proc", "sys", "dev", ".sbx"} {
		if names[bad] {
			t.Fatalf("archive of / has %s", bad)
		}
	}
}

// TestAgentSurvivesRmRf: root in the sandbox removing everything it can
// does not cut sbxd off from it.
func TestAgentSurvivesRmRf(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	sh(t, sb, "rm -rf --no-preserve-root / 2>/dev/null; true")
	time.Sleep(1500 * time.Millisecond)
	res, err := sb.Run(ctxT(t), api.ExecRequest{Cmd: []string{"/.sbx/bin/sbx-agent", "-h"}})
	if err != nil {
		t.Fatalf("exec after rm -rf /: %v", err)
	}
	_ = res
}

func TestLabelsAndList(t *testing.T) {
	ctx := ctxT(t)
	a := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Labels: map[string]string{"team": "red", "run": "e2e"}})
	b := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Labels: map[string]string{"team": "blue", "run": "e2e"}})
	red, err := h.c.Sandboxes.List(ctx, map[string]string{"team": "red"})
	if err != nil || len(red) != 1 || red[0].ID != a.ID {
		t.Fatalf("team=red: %v %v", red, err)
	}
	both, err := h.c.Sandboxes.List(ctx, map[string]string{"run": "e2e"})
	if err != nil || len(both) != 2 {
		t.Fatalf("run=e2e: %d %v", len(both), err)
	}
	byID, err := h.c.Sandboxes.Get(ctx, b.ID)
	if err != nil || byID.Name != b.Name || byID.Labels["team"] != "blue" || byID.State != api.StateRunning {
		t.Fatalf("get by id: %+v %v", byID, err)
	}
}

func TestStopAndBootKeepsDisk(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	ctx := ctxT(t)
	mustSh(t, sb, "echo kept > /workspace/f; echo also > /tmp/t")
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateStopped {
		t.Fatalf("after stop: %s", sb.State)
	}
	if runscIDs(t)[sb.ID] {
		t.Fatal("stopped sandbox still has a runsc container")
	}
	// Exec on a stopped sandbox boots it, on the same disk.
	if out := mustSh(t, sb, "cat /workspace/f /tmp/t; hostname"); out != "kept\nalso\n"+sb.Name+"\n" {
		t.Fatalf("after boot: %q", out)
	}
	if err := sb.Refresh(ctx); err != nil || sb.State != api.StateRunning {
		t.Fatalf("state after boot: %s %v", sb.State, err)
	}
}

func TestOOMKillIsReported(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", MemoryMB: 128})
	ctx := ctxT(t)
	// Touch 400 MB in a 128 MB sandbox: the host memory cgroup kills it.
	res, err := sb.Exec(ctx, `python3 -c "b = bytearray(400 << 20); [b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; print('survived')"`)
	if err == nil && strings.Contains(res.Stdout, "survived") {
		t.Fatalf("400 MB fit in a 128 MB sandbox: %+v", res)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := sb.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if sb.State == api.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			// gVisor may kill only the process, leaving the sandbox up.
			if res != nil && res.ExitCode == 137 {
				t.Logf("the process was killed (137) and the sandbox kept running")
				return
			}
			t.Fatalf("sandbox still %s after its OOM; exec: %+v %v", sb.State, res, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.HasPrefix(sb.StateReason, "oom_killed") {
		t.Fatalf("state reason %q, want oom_killed", sb.StateReason)
	}
	// It boots again on the next exec.
	if out := mustSh(t, sb, "echo back"); out != "back\n" {
		t.Fatalf("after OOM: %q", out)
	}
}
