package e2e

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
	"github.com/sbxhq/sbx/internal/server"
)

// screen collects what a terminal shows, for tests to wait on.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// waitFor waits until the screen shows want after mark (bytes seen before
// the call), or fails after timeout.
func (s *screen) waitFor(t *testing.T, mark int, want string, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		seen := s.buf.String()
		s.mu.Unlock()
		if i := strings.Index(seen[mark:], want); i >= 0 {
			return mark + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within %v; it showed:\n%q", want, timeout, seen[mark:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shows reports whether the screen shows want after mark within timeout.
func (s *screen) shows(mark int, want string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		seen := s.buf.String()
		s.mu.Unlock()
		if strings.Contains(seen[mark:], want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestTerminal: a shell on a pseudo-terminal, as docker exec -it: it is a
// tty of the size asked, follows a resize, Ctrl-C interrupts the
// foreground command and not the shell, and the exit code comes back.
func TestTerminal(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	term, err := sb.Terminal(ctx, client.TerminalOptions{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	scr := &screen{}
	go func() { _, _ = copyAll(scr, term) }()
	type_ := func(s string) {
		t.Helper()
		if _, err := term.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	type_("tty; stty size; echo shell-$((6*7))\r")
	m := scr.waitFor(t, 0, "/dev/pts/", 30*time.Second)
	m = scr.waitFor(t, m, "30 100", 10*time.Second)
	m = scr.waitFor(t, m, "shell-42", 10*time.Second)

	if err := term.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	// The resize travels apart from the keystrokes (a control message, an
	// ioctl in the agent): a command typed at once may still see the old
	// size on a loaded machine. Ask again until the new size shows.
	for deadline := time.Now().Add(10 * time.Second); ; {
		type_("stty size\r")
		if scr.shows(m, "40 120", time.Second) {
			break
		}
		if time.Now().After(deadline) {
			m = scr.waitFor(t, m, "40 120", 0)
		}
	}
	m = scr.waitFor(t, m, "40 120", time.Second)

	// Ctrl-C stops the foreground sleep; the shell answers at once.
	type_("sleep 100; echo not-$((2+3))-interrupted\r")
	time.Sleep(time.Second)
	type_("\x03")
	type_("echo after-$((1+1))\r")
	m = scr.waitFor(t, m, "after-2", 15*time.Second)
	if strings.Contains(scr.buf.String(), "not-5-interrupted") {
		t.Fatal("Ctrl-C did not interrupt the foreground command")
	}

	type_("exit 7\r")
	done := make(chan struct{})
	var code int
	go func() { code, err = term.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("exit 7 did not end the terminal; it showed:\n%q", scr.buf.String()[m:])
	}
	if err != nil || code != 7 {
		t.Fatalf("the terminal's exit: %d, %v; want 7", code, err)
	}
}

func copyAll(dst *screen, src *client.Terminal) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			_, _ = dst.Write(buf[:k])
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

// TestTerminalBadInput: a size out of range, a missing sandbox, a POST
// exec asking for a terminal, and a cross-origin WebSocket (a page in a
// browser) are refused, and nothing runs.
func TestTerminalBadInput(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	_, err := sb.Terminal(ctx, client.TerminalOptions{Rows: 5000, Cols: 80})
	wantCode(t, err, api.CodeInvalidArgument)
	missing := *sb
	missing.Name = "no-such-" + randomHex(3)
	_, err = missing.Terminal(ctx, client.TerminalOptions{})
	wantCode(t, err, api.CodeSandboxNotFound)
	_, err = sb.Run(ctx, api.ExecRequest{Cmd: []string{"true"}, TTY: &api.Winsize{Rows: 24, Cols: 80}})
	wantCode(t, err, api.CodeInvalidArgument)

	// A cross-origin upgrade, with a valid key: 403, and no process starts.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+h.listen+"/v1/sandboxes/"+sb.Name+"/exec?tty=1&cmd=touch&cmd=/tmp/ran", nil)
	req.Header.Set("Authorization", "Bearer "+h.apiKey)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Origin", "http://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-origin terminal answered %d, want 403", resp.StatusCode)
	}
	if out := mustSh(t, sb, "ls /tmp/ran 2>&1 || true"); !strings.Contains(out, "No such file") && !strings.Contains(out, "can't access") {
		t.Fatalf("the refused terminal ran its command: %s", out)
	}
}

// TestCLITerminalEnds: piped input's end reaches the program as Ctrl-D
// (cat ends, exit 0), and SIGTERM to sbx ends the terminal and its command.
func TestCLITerminalEnds(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	cmd := exec.Command(h.binDir+"/sbx", "--socket", h.sock, "exec", "-t", sb.Name, "--", "cat")
	cmd.Stdin = strings.NewReader("typed\n")
	done := make(chan error, 1)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "typed") {
			t.Fatalf("sbx exec -t -- cat with piped input: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("sbx exec -t -- cat did not end at the end of its input:\n%s", out.String())
	}

	cmd = exec.Command(h.binDir+"/sbx", "--socket", h.sock, "shell", sb.Name, "--", "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	time.Sleep(3 * time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("SIGTERM did not end sbx shell")
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Contains(mustSh(t, sb, "ps"), "sleep 300") {
		if time.Now().After(deadline) {
			t.Fatal("the terminal's command outlived sbx shell's SIGTERM")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCLIExecTTY: sbx exec -t runs the command on a terminal even when
// sbx's own input is not one, and exits with its code.
func TestCLIExecTTY(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	cmd := exec.CommandContext(context.Background(), h.binDir+"/sbx", "--socket", h.sock, "exec", "-t", sb.Name, "--",
		"sh", "-c", "test -t 0 && test -t 1 && echo on-a-tty && exit 3")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 || !strings.Contains(string(out), "on-a-tty") {
		t.Fatalf("sbx exec -t: %v\n%s", err, out)
	}
}

// TestTerminalOutputExact: what a terminal shows is exactly what the
// pseudo-terminal gives, through the Go client and through sbx exec -t
// with no input: no stray byte (a NUL shown as ^@) before the output.
func TestTerminalOutputExact(t *testing.T) {
	for _, image := range []string{"busybox", "default"} {
		t.Run(image, func(t *testing.T) { testTerminalOutputExact(t, image) })
	}
}

func testTerminalOutputExact(t *testing.T, image string) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: image})
	term, err := sb.Terminal(ctx, client.TerminalOptions{Cmd: []string{"echo", "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(term)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := term.Wait(); err != nil || code != 0 {
		t.Fatalf("echo hi on a terminal: exit %d, %v", code, err)
	}
	if string(got) != "hi\r\n" {
		t.Fatalf("sb.Terminal(echo hi) showed %q, want %q", got, "hi\r\n")
	}

	for _, args := range [][]string{{"exec", "-t", sb.Name, "--", "echo", "hi"}, {"shell", sb.Name, "--", "echo", "hi"}} {
		cmd := exec.Command(h.binDir+"/sbx", append([]string{"--socket", h.sock}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("sbx %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if string(out) != "hi\r\n" {
			t.Fatalf("sbx %s showed %q, want %q", strings.Join(args, " "), out, "hi\r\n")
		}
	}

	// Piped input, whose end is typed as Ctrl-D: no NUL either.
	for _, c := range []struct{ in, cmd string }{{"", "cat"}, {"x\n", "cat"}, {"echo hi\nexit\n", ""}} {
		args := []string{"--socket", h.sock, "exec", "-t", sb.Name, "--", "sh", "-c", c.cmd}
		if c.cmd == "" {
			args = []string{"--socket", h.sock, "shell", sb.Name}
		}
		cmd := exec.Command(h.binDir+"/sbx", args...)
		cmd.Stdin = strings.NewReader(c.in)
		out, err := cmd.CombinedOutput()
		if err != nil || bytes.IndexByte(out, 0) >= 0 {
			t.Fatalf("sbx %s with input %q: %v, showed %q (want no NUL)", strings.Join(args[2:], " "), c.in, err, out)
		}
	}

	// On a terminal of its own (raw mode: what sbx writes arrives as is).
	cmd := exec.Command(h.binDir+"/sbx", "--socket", h.sock, "shell", sb.Name, "--", "echo", "hi")
	ptm, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	got, _ = io.ReadAll(ptm) // EIO once sbx exits and the terminal closes
	_ = cmd.Wait()
	if !bytes.HasSuffix(got, []byte("hi\r\n")) || bytes.IndexByte(got, 0) >= 0 || bytes.Contains(got, []byte("^@")) {
		t.Fatalf("sbx shell on a terminal showed %q, want hi\\r\\n and no NUL", got)
	}
}

// TestTerminalStalledClient: a terminal client that stops reading its
// WebSocket is cut off after sbxd's write timeout: the command is killed
// (not left to run for the terminal's 24 h) and the sandbox answers
// execs as before.
func TestTerminalStalledClient(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	u := "ws://" + h.listen + "/v1/sandboxes/" + sb.Name + "/exec?tty=1&cmd=yes&cmd=stalled-terminal"
	// A small receive buffer on the client's socket, set before it
	// connects: sbxd's writes block after tens of KiB, not after the
	// megabytes that autotuned loopback buffers take (which a pty in a
	// sandbox on a loaded machine fills only slowly).
	small := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + h.apiKey}},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: small.DialContext}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	// Never read c: sbxd's writes fill the socket's buffers and block.
	running := func() bool { return strings.Contains(mustSh(t, sb, "ps"), "stalled-terminal") }
	deadline := time.Now().Add(10 * time.Second)
	for !running() {
		if time.Now().After(deadline) {
			t.Fatal("the terminal's command did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Generous: the bug this catches is a wait of the terminal's whole
	// timeout (24 h by default).
	limit := server.TerminalWriteTimeout + 3*time.Minute
	deadline = time.Now().Add(limit)
	for running() {
		if time.Now().After(deadline) {
			t.Fatalf("the command of a terminal whose client reads nothing still runs after %v (write timeout %v)",
				limit, server.TerminalWriteTimeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out := mustSh(t, sb, "echo still-$((20+1))"); !strings.Contains(out, "still-21") {
		t.Fatalf("exec after the cut terminal: %q", out)
	}
}

// TestCLIShellDetach: Ctrl-P Ctrl-Q typed on a kept terminal detach sbx
// shell (exit 0, the pid named) and leave the program running; attached
// again, the keys detach again, and the program still runs.
func TestCLIShellDetach(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	_, errOut, code := sbxCLI(t, "\x10\x11", "shell", "--keep", sb.Name, "--", "sh", "-c", "echo started; sleep 300")
	m := regexp.MustCompile(`detached; process (\d+) runs on: sbx shell \S+ --attach (\d+)`).FindStringSubmatch(errOut)
	if code != 0 || m == nil || m[1] != m[2] {
		t.Fatalf("sbx shell --keep with the detach keys: exit %d\n%s", code, errOut)
	}
	running := func(when string) {
		t.Helper()
		if !strings.Contains(mustSh(t, sb, "ps"), "sleep 300") {
			t.Fatalf("%s: the kept program is gone", when)
		}
	}
	running("after the detach")
	_, errOut, code = sbxCLI(t, "\x10\x11", "shell", sb.Name, "--attach", m[1])
	if code != 0 || !strings.Contains(errOut, "detached; process "+m[1]) {
		t.Fatalf("sbx shell --attach with the detach keys: exit %d\n%s", code, errOut)
	}
	running("after the second detach")
}
