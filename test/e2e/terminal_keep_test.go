package e2e

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// TestTerminalKeepAttach is issue 18's "a PTY session survives a
// snapshot, can be re-attached, and ends cleanly on restore": a kept
// terminal outlives its client and is attached again by pid with its
// output replayed and its shell (and a variable in it) alive; one client
// at a time; a plain process is not a terminal; another tenant sees no
// such sandbox; across a fork the shell runs on in the source (still
// typed on) and in the copy, where it is attached by the same pid; a disk
// restore ends the attached terminal with a conflict naming it.
func TestTerminalKeepAttach(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	cp, err := sb.Checkpoint(ctx, "before the terminal")
	if err != nil {
		t.Fatal(err)
	}
	term, err := sb.Terminal(ctx, client.TerminalOptions{Keep: true, Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	pid := term.PID
	scr := &screen{}
	go func() { _, _ = copyAll(scr, term) }()
	typeOn := func(tm *client.Terminal, s string) {
		t.Helper()
		if _, err := tm.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	typeOn(term, "X=alive-$((40+2)); echo kept-$((6*7))\r")
	scr.waitFor(t, 0, "kept-42", 30*time.Second)

	// One client at a time: the one that started it holds it.
	_, err = sb.AttachTerminal(ctx, pid, client.AttachOptions{})
	wantCode(t, err, api.CodeConflict)
	// A process without a terminal is refused, naming its pid.
	plain, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb.AttachTerminal(ctx, plain, client.AttachOptions{})
	if ae := wantCode(t, err, api.CodeInvalidArgument); !strings.Contains(ae.Message, strconv.Itoa(plain)) {
		t.Fatalf("attach to plain process %d: %q does not name it", plain, ae.Message)
	}
	// Another tenant: no such sandbox.
	k, _ := tenantKey(t, "pty")
	_, resp, err := websocket.Dial(ctx, "ws://"+h.listen+"/v1/sandboxes/"+sb.Name+"/processes/"+strconv.Itoa(pid)+"/tty",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + k.Secret}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's attach: %v %v, want 404", resp, err)
	}

	// The client goes; the kept shell stays.
	if err := term.Close(); err != nil {
		t.Fatal(err)
	}
	var a *client.Terminal
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The first client's claim ends as sbxd sees it go.
		if a, err = sb.AttachTerminal(ctx, pid, client.AttachOptions{Rows: 40, Cols: 120}); !errors.Is(err, client.ErrConflict) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("attach again to %d: %v", pid, err)
	}
	defer a.Close()
	scr2 := &screen{}
	go func() { _, _ = copyAll(scr2, a) }()
	m := scr2.waitFor(t, 0, "kept-42", 30*time.Second) // replayed
	typeOn(a, "echo $X; stty size\r")
	m = scr2.waitFor(t, m, "alive-42", 30*time.Second)
	m = scr2.waitFor(t, m, "40 120", 10*time.Second)

	// A fork: the shell runs on in both; the source's stays typed on.
	res, err := sb.Fork(ctx, api.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Copies) != 1 || res.Copies[0] == nil {
		t.Fatalf("fork: %+v", res)
	}
	cpy := res.Copies[0]
	t.Cleanup(func() { _ = cpy.Delete(context.Background()) })
	typeOn(a, "echo src-$((4*4))\r")
	scr2.waitFor(t, m, "src-16", 30*time.Second)
	inCopy, err := cpy.AttachTerminal(ctx, pid, client.AttachOptions{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatalf("attach in the copy to %d: %v", pid, err)
	}
	scr3 := &screen{}
	go func() { _, _ = copyAll(scr3, inCopy) }()
	typeOn(inCopy, "echo $X in-copy-$((3*3)); exit 5\r")
	scr3.waitFor(t, 0, "alive-42 in-copy-9", 30*time.Second)
	if code, err := inCopy.Wait(); err != nil || code != 5 {
		t.Fatalf("the copy's shell: exit %d %v, want 5", code, err)
	}

	// A restore ends the source's attached terminal, naming the restore.
	if err := sb.Restore(ctx, cp.ID, nil); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := a.Wait(); waited <- err }()
	select {
	case err := <-waited:
		if ae := wantCode(t, err, api.CodeConflict); !strings.Contains(ae.Message, "restored to checkpoint "+cp.ID) {
			t.Fatalf("the terminal across a restore: %q, want it to name the restore", ae.Message)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the attached terminal did not end with the restore")
	}
}
