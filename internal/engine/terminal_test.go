package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// screen collects a terminal's output for a poller.
type screen struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *screen) has(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(hangDeadline)
	for {
		s.mu.Lock()
		got := s.b.String()
		s.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q on the terminal: %q", want, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFakeTerminalKeepAttach: a kept terminal outlives its client and is
// attached again by pid, with its output replayed and its shell alive; a
// second attachment while one holds it is a conflict; a process without a
// terminal is invalid naming pid; a disk restore ends an attached
// terminal with a conflict naming the checkpoint.
func TestFakeTerminalKeepAttach(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	cp, err := f.e.Checkpoint(ctx, "a", "one", nil)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := f.e.Exec(ctx, "a", api.ExecRequest{Cmd: []string{"sh"}, Keep: true}, nil); !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "keep") {
		t.Fatalf("keep without a terminal: %v, want invalid naming keep", err)
	}

	inR, inW := io.Pipe()
	p, err := f.e.Exec(ctx, "a", api.ExecRequest{Cmd: []string{"sh"}, Cwd: "/", Env: map[string]string{"PS1": "$ "},
		TTY: &api.Winsize{Rows: 24, Cols: 80}, Keep: true}, inR)
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	var first screen
	go func() { _, _ = p.Wait(&first, &first) }()
	_, _ = io.WriteString(inW, "echo before-$((6*7))\n")
	first.has(t, "before-42")
	// While the first client holds it, nobody else attaches.
	if _, err := f.e.AttachTerminal(ctx, "a", pid, nil, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a second attachment: %v, want conflict", err)
	}
	p.Close() // the client goes; the kept terminal stays
	inW.Close()

	in2R, in2W := io.Pipe()
	defer in2W.Close()
	a, err := f.e.AttachTerminal(ctx, "a", pid, &api.Winsize{Rows: 40, Cols: 120}, in2R)
	if err != nil {
		t.Fatalf("attach again: %v\nlog:\n%s", err, f.logs.String())
	}
	var second screen
	waited := make(chan error, 1)
	go func() { _, err := a.Wait(&second, &second); waited <- err }()
	second.has(t, "before-42") // replayed
	_, _ = io.WriteString(in2W, "stty size; echo after-$((6*7))\n")
	second.has(t, "40 120")
	second.has(t, "after-42")

	// A plain process is not a terminal.
	d, err := f.e.Exec(ctx, "a", api.ExecRequest{Cmd: []string{"sleep", "60"}, Cwd: "/", Detach: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.AttachTerminal(ctx, "a", d.PID(), nil, nil); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "is not a terminal") {
		t.Fatalf("attach a terminal to a plain process: %v, want invalid naming pid", err)
	}
	if _, err := f.e.AttachTerminal(ctx, "a", 99999, nil, nil); !errors.Is(err, errdefs.ErrProcessNotFound) {
		t.Fatalf("attach to no process: %v, want process not found", err)
	}

	// A restore ends the attached terminal, and says so.
	if _, err := f.e.Restore(ctx, "a", CheckpointID(cp.Seq), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "restored to checkpoint "+CheckpointID(cp.Seq)) {
			t.Fatalf("an attached terminal across a restore: %v, want conflict naming the restore", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("the attached terminal did not end with the restore")
	}
}
