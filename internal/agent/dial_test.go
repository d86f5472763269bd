package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDialRefusesLink: a link planted at the agent's socket path, to
// another agent's socket or to any host socket, is never followed.
func TestDialRefusesLink(t *testing.T) {
	other := startAgent(t, 0) // another sandbox's agent
	canaryPath := filepath.Join(t.TempDir(), "canary.sock")
	canary, err := net.Listen("unix", canaryPath)
	if err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	for _, target := range []string{other.sock, canaryPath} {
		_ = os.Remove(sock)
		if err := os.Symlink(target, sock); err != nil {
			t.Fatal(err)
		}
		for _, spare := range []int{0, 2} {
			cl := NewClient(sock, spare)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := cl.Ping(ctx)
			cancel()
			cl.Close()
			if !errors.Is(err, ErrNotSocket) {
				t.Fatalf("ping through a link to %s: %v, want ErrNotSocket", target, err)
			}
		}
	}
	// The canary's first connection must be this one: sbxd's never came.
	c, err := net.Dial("unix", canaryPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	got, err := canary.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	_ = got.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	if _, err := got.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("the canary socket got a connection from sbxd first (read %q, %v)", b, err)
	}
	// A regular file is refused too; the real socket still works.
	_ = os.Remove(sock)
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := NewClient(sock, 0).Ping(context.Background()); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("ping of a regular file: %v", err)
	}
	if err := other.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDial compares a dial by path (following links, as before) with
// dial (O_PATH|O_NOFOLLOW, fstat, connect through /proc/self/fd), and an
// exec-less round trip (ping) on a fresh connection.
func BenchmarkDial(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "a.sock")
	srv, err := NewServer(sock, "@sbx-bench-"+filepath.Base(filepath.Dir(sock)), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	cl := NewClient(sock, 0)
	b.Run("by-path", func(b *testing.B) {
		for range b.N {
			c, err := net.Dial("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("nofollow", func(b *testing.B) {
		for range b.N {
			c, err := cl.dial(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("ping", func(b *testing.B) {
		for range b.N {
			if err := cl.Ping(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
