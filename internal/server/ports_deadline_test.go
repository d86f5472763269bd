package server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// hostileBackend is a program in a sandbox that accepts connections on
// behalf of a preview and then misbehaves, by the sandbox name dialed:
// "stuck" never finishes the connect (an agent that does not answer),
// "silent" reads the request and never answers, "trickle" sends its
// response head one byte a second and "stall" sends a head and one byte of
// body, then nothing.
func hostileBackend(t *testing.T, ctx context.Context, name string) (net.Conn, error) {
	if name == "stuck" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	a, b := net.Pipe()
	go func() {
		t.Cleanup(func() { b.Close() })
		if _, err := http.ReadRequest(bufio.NewReader(b)); err != nil {
			return
		}
		switch name {
		case "trickle":
			for _, c := range []byte("HTTP/1.1 200 OK\r\nX-Slow: " + strings.Repeat("x", 600)) {
				if _, err := b.Write([]byte{c}); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		case "stall":
			io.WriteString(b, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nx")
		}
		// Keep the connection open and answer nothing more; drain what
		// the proxy writes.
		io.Copy(io.Discard, b)
	}()
	return a, nil
}

// TestPreviewDeadlines: a program that never lets a preview finish (no
// connect, no answer, a trickled head, a silent body) holds neither the
// client nor sbxd: the client gets 504 port_timeout, or the body ends.
func TestPreviewDeadlines(t *testing.T) {
	s := New(nil, Config{
		PreviewConnectTimeout:  300 * time.Millisecond,
		PreviewResponseTimeout: 500 * time.Millisecond,
		PreviewIdleTimeout:     500 * time.Millisecond,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.dial = func(ctx context.Context, name string, port int) (net.Conn, error) {
		return hostileBackend(t, ctx, name)
	}
	s.lookup = nameIsID
	front := httptest.NewServer(s.Handler(false))
	t.Cleanup(front.Close)
	// Generous deadlines that detect a hang (60 s a request, 30 s for the
	// stalled body), far above the deadlines under test.
	hc := &http.Client{}
	get := func(t *testing.T, name string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", front.URL+"/v1/sandboxes/"+name+"/ports/3000/", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, c := range []struct{ name, msg string }{
		{"stuck", "port 3000 in sandbox stuck: the connection did not open within 300ms"},
		{"silent", "port 3000 in sandbox silent: the program did not answer within 500ms"},
		{"trickle", "port 3000 in sandbox trickle: the program did not answer within 500ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if msg := errorOf(t, get(t, c.name), http.StatusGatewayTimeout, api.CodePortTimeout); msg != c.msg {
				t.Errorf("message %q, want %q", msg, c.msg)
			}
		})
	}
	t.Run("stall", func(t *testing.T) {
		t.Parallel()
		resp := get(t, "stall")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		type result struct {
			b   []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			b, err := io.ReadAll(resp.Body)
			done <- result{b, err}
		}()
		select {
		case r := <-done:
			// The byte sent passes (unless the machine stalled past the
			// idle deadline before the proxy read it); then the body ends
			// in an error, not at its Content-Length.
			if r.err == nil || (string(r.b) != "x" && len(r.b) != 0) {
				t.Fatalf("body %q, err %v; want the one byte sent, then an error", r.b, r.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the silent body is still open after 30 s")
		}
	})
}
