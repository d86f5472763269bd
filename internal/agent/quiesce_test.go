package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestQuiesceClosesBeforeAnswer: when Quiesce returns on the host, the
// agent has no host socket left, however slowly it closes them (a runsc
// checkpoint started earlier fails with "Cannot save endpoint with bound
// host socket").
func TestQuiesceClosesBeforeAnswer(t *testing.T) {
	quiesceLag = 200 * time.Millisecond
	defer func() { quiesceLag = 0 }()
	sock := filepath.Join(t.TempDir(), "a.sock")
	srv, err := NewServer(sock, controlName(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl := NewClient(sock, 2)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	idle, err := net.Dial("unix", sock) // a connection open at the quiesce
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if err := cl.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		t.Fatal("the agent still listens after Quiesce returned")
	}
	_ = idle.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection open at the quiesce is still open after Quiesce returned")
	}
	if err := srv.Unquiesce(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("ping after unquiesce: %v", err)
	}
}

// TestQuiesceWakesAfterCheckpoint: a quiesced agent listens again by
// itself when the checkpoint file answers (gVisor's /proc/gvisor/checkpoint
// at the end of the checkpoint that follows the quiesce), without a
// SIGUSR1; until then it stays quiesced. Here the file is a FIFO the test
// writes "restore" to.
func TestQuiesceWakesAfterCheckpoint(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "checkpoint")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Held open for writing, so that the agent's open does not block.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	old := CheckpointFile
	CheckpointFile = fifo
	defer func() { CheckpointFile = old }()
	sock := filepath.Join(t.TempDir(), "a.sock")
	srv, err := NewServer(sock, controlName(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl := NewClient(sock, 0)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := cl.WaitReady(short); err == nil {
		t.Fatal("the agent listens again before the checkpoint ended")
	}
	if _, err := w.WriteString("restore\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatalf("the agent did not listen again after the checkpoint: %v", err)
	}
	t.Logf("listening again %v after the checkpoint ended", time.Since(start))
	// A second quiesce waits for the next checkpoint again.
	if err := cl.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("resume\n"); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatalf("the agent did not listen again after the second checkpoint: %v", err)
	}
}
