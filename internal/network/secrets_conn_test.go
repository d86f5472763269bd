package network

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// How a terminated connection lives: upgrades, bodies, idle bounds, an
// upstream that closes a kept-alive connection. The test hosts here speak
// raw HTTP/1.1 over TLS, to do what net/http servers do not on request.

// serveTLS accepts TLS connections on ln with cert until t ends, and runs
// serve on each once its handshake is done.
func serveTLS(t testing.TB, ln net.Listener, cert tls.Certificate, serve func(c *tls.Conn)) {
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				tc := tls.Server(c, conf)
				if tc.Handshake() != nil {
					return
				}
				serve(tc)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
}

// dial opens a TLS connection to api.test through the proxy, as the
// sandbox would (trusting the sandbox's CA). It fails the test if a read
// waits more than 30 s: a proxy that never gives up.
func (r *secretRig) dial(t *testing.T) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.p.port), &tls.Config{ServerName: "api.test", RootCAs: r.sandCA})
	must(t, err)
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, bufio.NewReader(c)
}

// ended fails t unless err says the proxy ended the connection (EOF or a
// reset), rather than the test's own 30 s deadline passing.
func ended(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: the connection still works", what)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: the proxy never ended the connection (the test's deadline passed)", what)
	}
}

// upgrader is a test host that switches protocols on any request with an
// Upgrade header and then, by path: /echo echoes; /tick writes "t" every
// tick for ticks times, reading nothing, then closes; any other reads
// until the connection ends, then closes ended. It records the requests'
// Authorization headers.
type upgrader struct {
	tick  time.Duration
	ticks int

	mu    sync.Mutex
	auth  []string
	ended chan struct{}
}

func (u *upgrader) serve(c *tls.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil || req.Header.Get("Upgrade") == "" {
		return
	}
	u.mu.Lock()
	u.auth = append(u.auth, req.Header.Get("Authorization"))
	u.mu.Unlock()
	fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\n", req.Header.Get("Upgrade"))
	switch req.URL.Path {
	case "/items/echo":
		_, _ = io.Copy(c, c)
	case "/items/tick":
		for range u.ticks {
			time.Sleep(u.tick)
			if _, err := c.Write([]byte("t")); err != nil {
				return
			}
		}
	default:
		_, _ = io.Copy(io.Discard, c)
		u.mu.Lock()
		close(u.ended)
		u.mu.Unlock()
	}
}

func (r *secretRig) upgrade(t *testing.T, path string) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, br := r.dial(t)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n", path, r.ph)
	resp, err := http.ReadResponse(br, nil)
	must(t, err)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	return c, br
}

// An upgraded connection (a WebSocket) lives as long as bytes move, in
// either direction, well past the idle bound; once nothing moves for the
// idle bound the proxy closes both sides.
func TestSecretsProxyUpgrade(t *testing.T) {
	// The bound is long next to the gaps between bytes (idle/5, idle/3),
	// so a busy machine's scheduling delays do not pass it (300 ms with
	// 150 ms gaps failed under a load of 16 on 2 cores).
	const idle = time.Second
	u := &upgrader{tick: idle / 3, ticks: 12}
	r := newSecretRigWith(t, api.NetworkRules{Internet: true}, u.serve)
	r.p.idle = idle

	t.Run("echo past the idle bound", func(t *testing.T) {
		c, br := r.upgrade(t, "/items/echo")
		for i := range 15 { // 15 × idle/5: 3 idle bounds
			time.Sleep(idle / 5)
			msg := fmt.Sprintf("frame %d\n", i)
			if _, err := io.WriteString(c, msg); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			got, err := br.ReadString('\n')
			if err != nil || got != msg {
				t.Fatalf("frame %d: %q %v", i, got, err)
			}
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		if len(u.auth) != 1 || u.auth[0] != "Bearer "+testValue {
			t.Fatalf("the upgrade request's Authorization at the host: %q", u.auth)
		}
	})
	t.Run("one direction only keeps both alive", func(t *testing.T) {
		_, br := r.upgrade(t, "/items/tick")
		b := make([]byte, u.ticks)
		if _, err := io.ReadFull(br, b); err != nil || string(b) != strings.Repeat("t", u.ticks) {
			t.Fatalf("ticks: %q %v", b, err)
		}
	})
	t.Run("silence ends it", func(t *testing.T) {
		u.mu.Lock()
		u.ended = make(chan struct{})
		ch := u.ended
		u.mu.Unlock()
		_, br := r.upgrade(t, "/items/quiet")
		_, err := br.ReadByte()
		ended(t, "an upgraded connection idle for longer than the bound", err)
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("the host's side of the idle connection stays open")
		}
	})
}

// An upstream that stalls in the middle of a response body does not pin
// the connection: after the idle bound the proxy closes both sides.
func TestSecretsProxyStalledBody(t *testing.T) {
	closed := make(chan struct{})
	r := newSecretRigWith(t, api.NetworkRules{Internet: true}, func(c *tls.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nten bytes.")
		_, _ = io.Copy(io.Discard, c) // until the proxy closes
		close(closed)
	})
	r.p.idle = 300 * time.Millisecond
	c, br := r.dial(t)
	fmt.Fprintf(c, "GET /items HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n", r.ph)
	resp, err := http.ReadResponse(br, nil)
	must(t, err)
	b, err := io.ReadAll(resp.Body)
	if string(b) != "ten bytes." {
		t.Fatalf("body %q", b)
	}
	ended(t, "a response body stalled upstream", err)
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the host's side of the stalled connection stays open")
	}
}

// A sandbox that sends a request and then never reads does not pin the
// connection either.
func TestSecretsProxyClientStopsReading(t *testing.T) {
	closed := make(chan struct{})
	r := newSecretRigWith(t, api.NetworkRules{Internet: true}, func(c *tls.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				break
			}
		}
		close(closed)
	})
	r.p.idle = 300 * time.Millisecond
	c, _ := r.dial(t)
	fmt.Fprintf(c, "GET /items HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n", r.ph)
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy still holds the connection of a sandbox that stopped reading")
	}
}

// Expect: 100-continue: the client gets its 100, sends the body, and the
// host gets the body and the value.
func TestSecretsProxyExpectContinue(t *testing.T) {
	type got struct{ auth, body, expect string }
	seen := make(chan got, 1)
	r := newSecretRigWith(t, api.NetworkRules{Internet: true}, func(c *tls.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		seen <- got{req.Header.Get("Authorization"), string(b), req.Header.Get("Expect")}
		io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
	})
	r.a.getRules().Secrets.List[0].Rules[0].Methods = []string{"POST"} // before any connection
	c, br := r.dial(t)
	body := strings.Repeat("x", 100<<10)
	fmt.Fprintf(c, "POST /items HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", r.ph, len(body))
	resp, err := http.ReadResponse(br, nil)
	must(t, err)
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("before the body: %s", resp.Status)
	}
	_, err = io.WriteString(c, body)
	must(t, err)
	resp, err = http.ReadResponse(br, nil)
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || string(b) != "ok" {
		t.Fatalf("%s %q", resp.Status, b)
	}
	g := <-seen
	if g.auth != "Bearer "+testValue || g.body != body {
		t.Fatalf("the host got Authorization %q and %d bytes", g.auth, len(g.body))
	}
}

// A host that closes a kept-alive connection while it is idle (servers
// do after 5-75 s): the sandbox's next request on its connection is not
// answered with a 502 but its connection is closed unanswered, as the
// host's would be, so that HTTP clients retry it on a new one.
func TestSecretsProxyUpstreamClosesIdle(t *testing.T) {
	closed := make(chan struct{}, 8)
	var mu sync.Mutex
	var auth []string
	r := newSecretRigWith(t, api.NetworkRules{Internet: true}, func(c *tls.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		mu.Lock()
		auth = append(auth, req.Header.Get("Authorization"))
		mu.Unlock()
		// Keep-alive as far as the client can tell, then gone.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
		c.Close()
		closed <- struct{}{}
	})
	cl := r.client(nil)
	bearer := map[string]string{"Authorization": "Bearer " + r.ph}
	for i := range 3 {
		code, body := r.do(t, cl, "GET", "https://api.test/items", bearer)
		if code != 200 || body != "hello" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
		<-closed // the host closed the connection the client keeps
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) != 3 || auth[2] != "Bearer "+testValue {
		t.Fatalf("the host got %q", auth)
	}
}

// A rules change rechecks a sandbox's connections, resolving their names
// again; while a lookup is slow, other connections (any sandbox's) are
// still proxied: the recheck does not hold the proxy's lock across DNS.
func TestProxyRecheckDoesNotBlockNewConnections(t *testing.T) {
	r := newSecretRig(t, api.NetworkRules{Internet: true})
	target := r.target.Addr()
	var slow atomic.Bool
	started, release := make(chan struct{}, 1), make(chan struct{})
	r.p.resolve = func(context.Context, string) ([]netip.Addr, error) {
		if slow.CompareAndSwap(true, false) {
			started <- struct{}{}
			<-release
		}
		return []netip.Addr{target}, nil
	}
	bearer := map[string]string{"Authorization": "Bearer " + r.ph}
	kept := r.client(nil) // its connection stays open, tracked
	if code, _ := r.do(t, kept, "GET", "https://api.test/items", bearer); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	slow.Store(true)
	rechecked := make(chan struct{})
	go func() { r.p.recheck(r.a); close(rechecked) }()
	<-started // the recheck waits on DNS now
	done := make(chan int, 1)
	go func() {
		code, _ := r.do(t, r.client(nil), "GET", "https://api.test/items", bearer)
		done <- code
	}()
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("a new connection during the recheck: %d", code)
		}
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("a new connection waits for the recheck's DNS lookup")
	}
	close(release)
	<-rechecked
}
