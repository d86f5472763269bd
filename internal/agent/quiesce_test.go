package agent

import (
	"context"
	"net"
	"path/filepath"
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
