package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseProcNetTCP(t *testing.T) {
	// Lines as Linux prints them on a little-endian machine: a listener on
	// 127.0.0.1:3000, an established connection, and in tcp6 a listener
	// on [::]:8080 and one on [::1]:5173.
	v4 := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0BB8 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 4243 1 0000000000000000 20 4 30 10 -1
`
	v6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1435 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 78 1 0000000000000000 100 0 0 10 0
`
	if !littleEndian() {
		t.Skip("fixture is little-endian")
	}
	ls, err := parseProcNetTCP(strings.NewReader(v4))
	if err != nil || len(ls) != 1 || ls[0].addr != netip.MustParseAddr("127.0.0.1") || ls[0].port != 3000 || ls[0].inode != "4242" {
		t.Fatalf("tcp: %+v %v", ls, err)
	}
	ls, err = parseProcNetTCP(strings.NewReader(v6))
	if err != nil || len(ls) != 2 {
		t.Fatalf("tcp6: %+v %v", ls, err)
	}
	if ls[0].addr.String() != "::" || ls[0].port != 8080 || ls[1].addr.String() != "::1" || ls[1].port != 5173 {
		t.Fatalf("tcp6: %+v", ls)
	}
}

func littleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }

func TestPorts(t *testing.T) {
	cl := startAgent(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ports, err := cl.Ports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.ReadFile("/proc/self/comm")
	var found *Port
	for i, p := range ports {
		if i > 0 && ports[i-1].Port >= p.Port {
			t.Fatalf("ports are not sorted and unique: %+v", ports)
		}
		if p.Port == port {
			found = &ports[i]
		}
	}
	if found == nil {
		t.Fatalf("port %d is not listed: %+v", port, ports)
	}
	if found.Address != "127.0.0.1" || found.PID != os.Getpid() || found.Command != strings.TrimSpace(string(self)) {
		t.Fatalf("port %d: %+v, want 127.0.0.1, pid %d, %q", port, *found, os.Getpid(), strings.TrimSpace(string(self)))
	}
	ln.Close()
	ports, err = cl.Ports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p.Port == port {
			t.Fatalf("port %d is still listed after its listener closed", port)
		}
	}
}

// echoUntilEOF accepts one connection, reads until the peer half-closes,
// then answers "got: " and what it read, and closes.
func echoUntilEOF(t *testing.T, network, addr string) (int, <-chan error) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		b, err := io.ReadAll(c)
		if err != nil {
			done <- err
			return
		}
		_, err = c.Write(append([]byte("got: "), b...))
		done <- err
	}()
	return ln.Addr().(*net.TCPAddr).Port, done
}

func TestDialHalfClose(t *testing.T) {
	for _, spare := range []int{0, 2} {
		cl := startAgent(t, spare)
		port, done := echoUntilEOF(t, "tcp", "127.0.0.1:0")
		c, res, err := cl.Dial(context.Background(), port)
		if err != nil {
			t.Fatal(err)
		}
		if res.Address != "127.0.0.1:"+strconv.Itoa(port) {
			t.Errorf("dialed %q", res.Address)
		}
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		// The server answers only once it sees EOF: the half-close must
		// reach it, and its answer and EOF must come back.
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != "got: hello" {
			t.Fatalf("spare=%d: %q %v", spare, b, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestDialFallsBackToIPv6(t *testing.T) {
	probe, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	probe.Close()
	cl := startAgent(t, 0)
	port, done := echoUntilEOF(t, "tcp6", "[::1]:0")
	c, res, err := cl.Dial(context.Background(), port)
	if err != nil {
		t.Fatalf("a server on [::1] only: %v", err)
	}
	defer c.Close()
	if res.Address != "[::1]:"+strconv.Itoa(port) {
		t.Errorf("dialed %q", res.Address)
	}
	c.Write([]byte("v6"))
	c.(*net.UnixConn).CloseWrite()
	if b, _ := io.ReadAll(c); string(b) != "got: v6" {
		t.Fatalf("%q", b)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDialRefused(t *testing.T) {
	cl := startAgent(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, _, err = cl.Dial(context.Background(), port)
	if !isKind(err, FailRefused) || !strings.Contains(err.Error(), "nothing listens on port "+strconv.Itoa(port)) {
		t.Fatalf("dial of a closed port: %v", err)
	}
	for _, bad := range []int{0, -1, 65536} {
		if _, _, err := cl.Dial(context.Background(), bad); !isKind(err, FailInvalid) {
			t.Errorf("dial port %d: %v", bad, err)
		}
	}
	// The agent still answers other operations.
	if err := cl.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestDialStreams sends 8 MiB through an echo server while reading its
// answer, both directions at once, and checks every byte.
func TestDialStreams(t *testing.T) {
	cl := startAgent(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
		c.Close()
	}()
	c, _, err := cl.Dial(context.Background(), ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 8<<20)
	rand.Read(data)
	go func() {
		c.Write(data)
		c.(*net.UnixConn).CloseWrite()
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("echoed %d of %d bytes, equal=%v, err %v", len(got), len(data), bytes.Equal(got, data), err)
	}
}

// TestDialHostCloseEndsPipe checks that closing the host side closes the
// TCP connection in the sandbox, so a server sees its client go.
func TestDialHostCloseEndsPipe(t *testing.T) {
	cl := startAgent(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gone := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			gone <- err
			return
		}
		defer c.Close()
		c.Write([]byte("hi"))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c)
		gone <- err
	}()
	c, _, err := cl.Dial(context.Background(), ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("%q %v", b, err)
	}
	c.Close()
	if err := <-gone; err != nil {
		t.Fatalf("the server did not see its client go: %v", err)
	}
}

// TestDialCancelledContext checks that a dial's context bounds only the
// dial: the connection outlives it.
func TestDialCancelledContext(t *testing.T) {
	cl := startAgent(t, 0)
	port, done := echoUntilEOF(t, "tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	c, _, err := cl.Dial(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(20 * time.Millisecond)
	c.Write([]byte("after"))
	c.(*net.UnixConn).CloseWrite()
	if b, _ := io.ReadAll(c); string(b) != "got: after" {
		t.Fatalf("%q", b)
	}
	c.Close()
	<-done
}
