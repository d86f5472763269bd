//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a poller.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls out until it holds want (the process answers when it
// does; the deadline only ends a broken run).
func waitFor(t *testing.T, out *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal's output %q", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKeptTerminalReattach: a terminal started with Keep outlives its
// host connection; an attach with TTY replays its kept output, types on
// it and resizes it; without Keep the hang-up kills it (as before).
func TestKeptTerminalReattach(t *testing.T) {
	cl := startAgent(t, 0)
	inR, inW := io.Pipe()
	defer inW.Close()
	p, err := cl.Start(context.Background(), &Request{Cmd: []string{"sh"}, Env: append(env, "PS1=$ "), TTY: true, Keep: true, Size: &Winsize{Rows: 24, Cols: 80}}, inR)
	if err != nil {
		t.Fatal(err)
	}
	var first lockedBuffer
	go func() { _, _ = p.Wait(&first, io.Discard) }()
	if _, err := io.WriteString(inW, "echo one-$((40+2))\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &first, "one-42")
	p.Close() // the host hangs up: a kept terminal only detaches

	ps, err := cl.Ps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var info *ProcInfo
	for i := range ps {
		if ps[i].PID == p.PID {
			info = &ps[i]
		}
	}
	if info == nil || !info.TTY {
		t.Fatalf("ps after the hang-up: %+v, want pid %d with tty", ps, p.PID)
	}

	in2R, in2W := io.Pipe()
	a, err := cl.AttachTerminal(context.Background(), p.PID, 0, &Winsize{Rows: 33, Cols: 101}, in2R)
	if err != nil {
		t.Fatal(err)
	}
	var second lockedBuffer
	exc := make(chan *Exit, 1)
	go func() {
		ex, err := a.Wait(&second, io.Discard)
		if err != nil {
			t.Error(err)
		}
		exc <- ex
	}()
	waitFor(t, &second, "one-42") // the kept output is replayed
	if _, err := io.WriteString(in2W, "stty size; exit 7\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &second, "33 101")
	if ex := <-exc; ex == nil || ex.ExitCode != 7 {
		t.Fatalf("exit %+v, want 7", ex)
	}
}

// TestAttachTerminalRefusesPlainProcess: a process without a terminal
// cannot be attached as one (kind invalid, naming the pid).
func TestAttachTerminalRefusesPlainProcess(t *testing.T) {
	cl := startAgent(t, 0)
	p, err := cl.Start(context.Background(), &Request{Cmd: []string{"sleep", "30"}, Env: env, Detach: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Signal(context.Background(), p.PID, 9) }()
	_, err = cl.AttachTerminal(context.Background(), p.PID, 0, nil, nil)
	var ae *Error
	if !errors.As(err, &ae) || ae.Kind != FailInvalid || ae.Field != "pid" || !strings.Contains(ae.Message, "is not a terminal") {
		t.Fatalf("attach terminal to a plain process: %v, want invalid naming pid", err)
	}
}

// TestUnkeptTerminalDiesWithHost: without Keep, the host's hang-up kills
// the terminal's process.
func TestUnkeptTerminalDiesWithHost(t *testing.T) {
	cl := startAgent(t, 0)
	inR, inW := io.Pipe()
	defer inW.Close()
	p, err := cl.Start(context.Background(), &Request{Cmd: []string{"sleep", "30"}, Env: env, TTY: true, Size: &Winsize{Rows: 24, Cols: 80}}, inR)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := syscallKill(p.PID); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("an unkept terminal's process outlived its host connection")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
