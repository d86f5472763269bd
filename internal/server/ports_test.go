package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

const testKey = "0123456789abcdef"

// seen is what the program behind the proxy saw of a request.
type seen struct {
	URI, Host, Auth, Cookie, Prefix, ForwardedHost string
}

// previewServer is an API server whose port dials reach a local backend:
// "nobody" is an unknown sandbox, "stopped" a stopped one, and port 4000
// has nothing listening.
type previewServer struct {
	front  *httptest.Server
	mu     sync.Mutex
	dialed []string
}

func newPreviewServer(t *testing.T, auth bool) *previewServer {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			brw.Flush()
			buf := make([]byte, 1024)
			for {
				n, err := brw.Read(buf)
				if err != nil {
					return
				}
				c.Write([]byte(strings.ToUpper(string(buf[:n]))))
			}
		}
		if r.URL.Path == "/sw.js" {
			// A guest's script asking to be a service worker over
			// every path of its origin.
			w.Header().Set("Service-Worker-Allowed", "/")
		}
		json.NewEncoder(w).Encode(seen{URI: r.URL.RequestURI(), Host: r.Host, Auth: r.Header.Get("Authorization"),
			Cookie: r.Header.Get("Cookie"), Prefix: r.Header.Get("X-Forwarded-Prefix"), ForwardedHost: r.Header.Get("X-Forwarded-Host")})
	}))
	t.Cleanup(backend.Close)
	ps := &previewServer{}
	s := New(nil, Config{APIKeys: []string{testKey}, PreviewDomain: "localhost"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.dial = func(ctx context.Context, name string, port int) (net.Conn, error) {
		switch {
		case name == "nobody":
			return nil, errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", name)
		case name == "stopped":
			return nil, errdefs.Conflictf("sandbox %q is stopped: cannot reach its ports", name)
		case name == "mute":
			a, b := net.Pipe()
			b.Close()
			return a, nil
		case port == 4000:
			return nil, errdefs.New(errdefs.ErrPortUnreachable, "nothing listens on port %d in sandbox %s", port, name)
		}
		ps.mu.Lock()
		ps.dialed = append(ps.dialed, fmt.Sprintf("%s:%d", name, port))
		ps.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", backend.Listener.Addr().String())
	}
	s.lookup = func(ctx context.Context, name string) (string, error) {
		if name == "nobody" {
			return "", errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", name)
		}
		return nameIsID(ctx, name)
	}
	ps.front = httptest.NewServer(s.Handler(auth))
	t.Cleanup(ps.front.Close)
	return ps
}

// nameIsID is a Server.lookup for tests without an engine: every sandbox
// exists, and its id is the name the request gave.
func nameIsID(_ context.Context, name string) (string, error) { return name, nil }

// do sends a request to the front with Host host (if not "") and headers
// (name, value pairs), without following redirects.
func (ps *previewServer) do(t *testing.T, method, path, host string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, ps.front.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func seenOf(t *testing.T, resp *http.Response) seen {
	t.Helper()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var s seen
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func errorOf(t *testing.T, resp *http.Response, status int, code api.Code) string {
	t.Helper()
	var er api.ErrorResponse
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || json.Unmarshal(b, &er) != nil || er.Error.Code != code {
		t.Fatalf("want %d %s, got %d %s", status, code, resp.StatusCode, b)
	}
	return er.Error.Message
}

func TestPreviewPathBased(t *testing.T) {
	ps := newPreviewServer(t, false)
	got := seenOf(t, ps.do(t, "GET", "/v1/sandboxes/web/ports/3000/a/b%2Fc?x=1&y=2", ""))
	if got.URI != "/a/b%2Fc?x=1&y=2" || got.Prefix != "/v1/sandboxes/web/ports/3000" {
		t.Fatalf("%+v", got)
	}
	if ps.dialed[0] != "web:3000" {
		t.Fatalf("dialed %v", ps.dialed)
	}
	got = seenOf(t, ps.do(t, "POST", "/v1/sandboxes/sbx_0123456789abcdef/ports/8080/", ""))
	if got.URI != "/" || ps.dialed[len(ps.dialed)-1] != "sbx_0123456789abcdef:8080" {
		t.Fatalf("%+v %v", got, ps.dialed)
	}
	// Without the slash after the port: redirected to the port's root.
	resp := ps.do(t, "GET", "/v1/sandboxes/web/ports/3000?q=1", "")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/v1/sandboxes/web/ports/3000/?q=1" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	errorOf(t, ps.do(t, "GET", "/v1/sandboxes/web/ports/abc/", ""), 400, api.CodeInvalidArgument)
	if msg := errorOf(t, ps.do(t, "GET", "/v1/sandboxes/web/ports/70000/", ""), 400, api.CodeInvalidArgument); !strings.HasPrefix(msg, "port:") {
		t.Fatalf("%q", msg)
	}
	errorOf(t, ps.do(t, "GET", "/v1/sandboxes/we%24b/ports/3000/", ""), 404, api.CodeSandboxNotFound)
}

func TestPreviewHostBased(t *testing.T) {
	ps := newPreviewServer(t, false)
	got := seenOf(t, ps.do(t, "GET", "/index.html?v=1", "3000-web.localhost:7070"))
	if got.URI != "/index.html?v=1" || got.Host != "3000-web.localhost:7070" || got.Prefix != "" || got.ForwardedHost != "3000-web.localhost:7070" {
		t.Fatalf("%+v", got)
	}
	// Even a path that looks like the API's goes to the program.
	got = seenOf(t, ps.do(t, "GET", "/v1/health", "5173-My-App.LOCALHOST"))
	if got.URI != "/v1/health" || ps.dialed[len(ps.dialed)-1] != "my-app:5173" {
		t.Fatalf("%+v %v", got, ps.dialed)
	}
	// Other hosts are the API.
	for _, host := range []string{"localhost:7070", "web.localhost", "x-web.localhost", "3000-web.example.org", "a.3000-web.localhost"} {
		resp := ps.do(t, "GET", "/v1/nope", host)
		errorOf(t, resp, 404, api.CodeNotFound)
	}
}

func TestPreviewErrors(t *testing.T) {
	ps := newPreviewServer(t, false)
	errorOf(t, ps.do(t, "GET", "/v1/sandboxes/nobody/ports/3000/", ""), 404, api.CodeSandboxNotFound)
	errorOf(t, ps.do(t, "GET", "/", "3000-stopped.localhost"), 409, api.CodeConflict)
	msg := errorOf(t, ps.do(t, "GET", "/v1/sandboxes/web/ports/4000/x", ""), 502, api.CodePortUnreachable)
	if msg != "nothing listens on port 4000 in sandbox web" {
		t.Fatalf("%q", msg)
	}
	// A connection that ends before an answer: 502, without the cause
	// (it may name host paths), which is logged.
	msg = errorOf(t, ps.do(t, "GET", "/v1/sandboxes/mute/ports/3000/", ""), 502, api.CodePortUnreachable)
	if msg != "port 3000 in sandbox mute: the connection failed before an answer" {
		t.Fatalf("%q", msg)
	}
}

func TestPreviewAuth(t *testing.T) {
	ps := newPreviewServer(t, true)
	// No key: 401, with the way to give one.
	msg := errorOf(t, ps.do(t, "GET", "/v1/sandboxes/web/ports/3000/", ""), 401, api.CodeUnauthorized)
	if !strings.Contains(msg, "sbx_key") {
		t.Fatalf("%q", msg)
	}
	errorOf(t, ps.do(t, "GET", "/", "3000-web.localhost"), 401, api.CodeUnauthorized)
	if len(ps.dialed) != 0 {
		t.Fatalf("dialed without a key: %v", ps.dialed)
	}
	// The bearer key works and does not reach the sandbox.
	got := seenOf(t, ps.do(t, "GET", "/", "3000-web.localhost", "Authorization", "Bearer "+testKey))
	if got.Auth != "" {
		t.Fatalf("the API key reached the sandbox: %+v", got)
	}
	// ?sbx_key= sets a cookie and redirects without the key.
	resp := ps.do(t, "GET", "/page?a=1&sbx_key="+testKey, "3000-web.localhost")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/page?a=1" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || cookies[0].Name != previewCookie || !cookies[0].HttpOnly || cookies[0].Path != "/" ||
		strings.Contains(cookies[0].Value, testKey) {
		t.Fatalf("cookie %+v", cookies)
	}
	cookie := cookies[0].Name + "=" + cookies[0].Value
	errorOf(t, ps.do(t, "GET", "/?sbx_key=wrongwrongwrong1", "3000-web.localhost"), 401, api.CodeUnauthorized)
	// The cookie admits the browser; it is not passed on, other cookies
	// and the program's own Authorization are.
	got = seenOf(t, ps.do(t, "GET", "/page", "3000-web.localhost", "Cookie", "theme=dark; "+cookie+"; lang=en", "Authorization", "Basic dTpw"))
	if got.Cookie != "theme=dark; lang=en" || got.Auth != "Basic dTpw" {
		t.Fatalf("%+v", got)
	}
	// It opens only that sandbox port, and not the API.
	errorOf(t, ps.do(t, "GET", "/", "3001-web.localhost", "Cookie", cookie), 401, api.CodeUnauthorized)
	errorOf(t, ps.do(t, "GET", "/v1/sandboxes", "", "Cookie", cookie), 401, api.CodeUnauthorized)
}

func TestPreviewAuthPathBased(t *testing.T) {
	ps := newPreviewServer(t, true)
	resp := ps.do(t, "GET", "/v1/sandboxes/web/ports/3000/x?sbx_key="+testKey, "")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/v1/sandboxes/web/ports/3000/x" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	c := resp.Cookies()[0]
	if c.Path != "/v1/sandboxes/web/ports/3000/" {
		t.Fatalf("cookie path %q", c.Path)
	}
	cookie := c.Name + "=" + c.Value
	seenOf(t, ps.do(t, "GET", "/v1/sandboxes/web/ports/3000/x", "", "Cookie", cookie))
	errorOf(t, ps.do(t, "GET", "/v1/sandboxes/web", "", "Cookie", cookie), 401, api.CodeUnauthorized)
	errorOf(t, ps.do(t, "GET", "/v1/sandboxes/other/ports/3000/", "", "Cookie", cookie), 401, api.CodeUnauthorized)
}

// TestPreviewUpgrade checks an HTTP upgrade (as WebSocket does) through
// the proxy: after the 101, bytes flow both ways.
func TestPreviewUpgrade(t *testing.T) {
	ps := newPreviewServer(t, false)
	for _, tc := range []struct{ path, host string }{
		{"/v1/sandboxes/web/ports/3000/ws", ""},
		{"/ws", "3000-web.localhost"},
	} {
		c, err := net.Dial("tcp", ps.front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		host := tc.host
		if host == "" {
			host = "sbxd"
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", tc.path, host)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" {
			t.Fatalf("%s: %d %v", tc.path, resp.StatusCode, resp.Header)
		}
		for _, msg := range []string{"hello", "again"} {
			if _, err := c.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, len(msg))
			if _, err := io.ReadFull(br, b); err != nil || string(b) != strings.ToUpper(msg) {
				t.Fatalf("%s: echoed %q %v", tc.path, b, err)
			}
		}
	}
}

func TestWithoutCookie(t *testing.T) {
	got := withoutCookie([]string{"a=1; sbx_preview=x; b=2", "sbx_preview=y"}, "sbx_preview")
	if len(got) != 1 || got[0] != "a=1; b=2" {
		t.Fatalf("%q", got)
	}
}

// TestPreviewToken: ?sbx_preview=<token> (the cookie's value, which the web
// console computes from the key it holds) sets the cookie once and
// redirects without it; a token of another port, another sandbox or a
// wrong key is 401 and dials nothing. A WebSocket subprotocol carrying
// the key does not admit a preview (its subprotocols go to the program).
func TestPreviewToken(t *testing.T) {
	ps := newPreviewServer(t, true)
	token := previewToken(testKey, "web", "3000")
	for _, bad := range []string{previewToken(testKey, "web", "3001"), previewToken(testKey, "other", "3000"),
		previewToken("wrongwrongwrong1", "web", "3000"), "", testKey} {
		errorOf(t, ps.do(t, "GET", "/?sbx_preview="+bad, "3000-web.localhost"), 401, api.CodeUnauthorized)
	}
	errorOf(t, ps.do(t, "GET", "/", "3000-web.localhost", "Upgrade", "websocket", "Sec-WebSocket-Protocol", "bearer."+base64.RawURLEncoding.EncodeToString([]byte(testKey))),
		401, api.CodeUnauthorized)
	if len(ps.dialed) != 0 {
		t.Fatalf("dialed without a credential: %v", ps.dialed)
	}
	resp := ps.do(t, "GET", "/page?a=1&sbx_preview="+token, "3000-web.localhost")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/page?a=1" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || cookies[0].Name != previewCookie || cookies[0].Value != token || !cookies[0].HttpOnly {
		t.Fatalf("cookie %+v", cookies)
	}
	seenOf(t, ps.do(t, "GET", "/page", "3000-web.localhost", "Cookie", previewCookie+"="+token))
	resp = ps.do(t, "GET", "/v1/sandboxes/web/ports/3000/x?sbx_preview="+token, "")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/v1/sandboxes/web/ports/3000/x" {
		t.Fatalf("path-based: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestPreviewStripsCredentials: a request a cookie or bearer already
// admits reaches the program without ?sbx_preview= or ?sbx_key= (the token
// opens the port; the key opens everything), the other parameters intact.
func TestPreviewStripsCredentials(t *testing.T) {
	ps := newPreviewServer(t, true)
	token := previewToken(testKey, "web", "3000")
	cookie := previewCookie + "=" + token
	for _, tc := range []struct{ path, host string }{
		{"/page?a=1&sbx_preview=" + token + "&b=2", "3000-web.localhost"},
		{"/page?a=1&sbx_key=" + testKey + "&sbx_preview=" + token + "&b=2", "3000-web.localhost"},
		{"/v1/sandboxes/web/ports/3000/page?a=1&sbx_preview=" + token + "&b=2", ""},
	} {
		got := seenOf(t, ps.do(t, "GET", tc.path, tc.host, "Cookie", cookie))
		if got.URI != "/page?a=1&b=2" {
			t.Errorf("%s: the program saw %q", tc.path, got.URI)
		}
		got = seenOf(t, ps.do(t, "GET", tc.path, tc.host, "Authorization", "Bearer "+testKey))
		if got.URI != "/page?a=1&b=2" || got.Auth != "" {
			t.Errorf("%s with a bearer: the program saw %q %q", tc.path, got.URI, got.Auth)
		}
	}
}

// TestPreviewServiceWorkerScope: a path-based preview, on sbxd's (and the
// web console's) origin, cannot widen a service worker's scope beyond its
// path: Service-Worker-Allowed is dropped. A host-based preview has its
// own origin and keeps it.
func TestPreviewServiceWorkerScope(t *testing.T) {
	ps := newPreviewServer(t, true)
	resp := ps.do(t, "GET", "/v1/sandboxes/web/ports/3000/sw.js", "", "Authorization", "Bearer "+testKey, "Service-Worker", "script")
	seenOf(t, resp)
	if v, ok := resp.Header["Service-Worker-Allowed"]; ok {
		t.Fatalf("a path-based preview answered Service-Worker-Allowed: %q", v)
	}
	resp = ps.do(t, "GET", "/sw.js", "3000-web.localhost", "Authorization", "Bearer "+testKey, "Service-Worker", "script")
	seenOf(t, resp)
	if v := resp.Header.Get("Service-Worker-Allowed"); v != "/" {
		t.Fatalf("a host-based preview lost Service-Worker-Allowed: %q", v)
	}
}
