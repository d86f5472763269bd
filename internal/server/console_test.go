package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/console"
)

// TestConsoleServed: on TCP, "/" and /console/ are the console, without a
// key (the page holds no data); the API beside it still wants the key. The
// Unix socket serves no console.
func TestConsoleServed(t *testing.T) {
	s := New(nil, Config{APIKeys: []string{testKey}, Console: console.Handler(console.Config{})}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	do := func(auth bool, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.Handler(auth).ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	if rec := do(true, "/"); rec.Code != 200 || !strings.Contains(rec.Body.String(), "/console/app.js") || rec.Header().Get("Content-Security-Policy") == "" {
		t.Errorf("TCP GET /: %d, CSP %q", rec.Code, rec.Header().Get("Content-Security-Policy"))
	}
	if rec := do(true, "/console/app.js"); rec.Code != 200 {
		t.Errorf("TCP GET /console/app.js: %d", rec.Code)
	}
	for _, p := range []string{"/v1/sandboxes", "/v1/health", "/consoles"} {
		if rec := do(true, p); rec.Code != 401 {
			t.Errorf("TCP GET %s without a key: %d, want 401", p, rec.Code)
		}
	}
	var e api.ErrorResponse
	rec := do(false, "/")
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	if rec.Code != 404 || e.Error.Code != api.CodeNotFound {
		t.Errorf("socket GET /: %d %s, want the API's 404", rec.Code, rec.Body)
	}
}

func keyProtocol(key string) string {
	return ttyKeyProtocol + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// TestWebSocketKey: a WebSocket upgrade may carry the key as the
// subprotocol bearer.<base64url> (a browser cannot send Authorization);
// a wrong or malformed one, or one on a request that is not an upgrade,
// is 401.
func TestWebSocketKey(t *testing.T) {
	s := &Server{cfg: Config{APIKeys: []string{testKey}}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /v1/ok", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	for _, tc := range []struct {
		name, upgrade, protocols string
		want                     int
	}{
		{"key", "websocket", "sbx.tty, " + keyProtocol(testKey), 204},
		{"key alone", "websocket", keyProtocol(testKey), 204},
		{"wrong key", "websocket", "sbx.tty, " + keyProtocol("0123456789abcdeX"), 401},
		{"key in padded base64", "websocket", "sbx.tty, bearer." + base64.URLEncoding.EncodeToString([]byte(testKey+"x")), 401},
		{"malformed", "websocket", "sbx.tty, bearer.!!!", 401},
		{"empty", "websocket", "sbx.tty, bearer.", 401},
		{"no key", "websocket", "sbx.tty", 401},
		{"not an upgrade", "", "sbx.tty, " + keyProtocol(testKey), 401},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/ok", nil)
		if tc.upgrade != "" {
			r.Header.Set("Upgrade", tc.upgrade)
		}
		r.Header.Set("Sec-WebSocket-Protocol", tc.protocols)
		s.Handler(true).ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, rec.Code, tc.want)
		}
	}
}

// TestTerminalRefusesCrossOrigin: a terminal upgrade whose Origin is not
// sbxd's is 403 before anything runs, key or not; from sbxd's own origin
// the upgrade is accepted with the subprotocol sbx.tty (never the one
// carrying the key) and goes on to run the command (here the server has
// no engine, so running ends the connection).
func TestTerminalRefusesCrossOrigin(t *testing.T) {
	s := New(nil, Config{APIKeys: []string{testKey}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewUnstartedServer(s.Handler(true))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the nil engine's panic, below
	srv.Start()
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/sandboxes/x/exec?tty=1"
	for _, origin := range []string{"http://evil.test", "http://" + strings.TrimPrefix(srv.URL, "http://") + ".evil.test", "null"} {
		h := http.Header{"Origin": {origin}}
		_, resp, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{"sbx.tty", keyProtocol(testKey)}})
		if err == nil || resp == nil || resp.StatusCode != 403 {
			t.Errorf("Origin %s: %v %v, want 403", origin, resp, err)
		}
	}
	_, resp, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.test"}}})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("cross-origin without a key: %v %v, want 401", resp, err)
	}
	c, resp, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {srv.URL}}, Subprotocols: []string{"sbx.tty", keyProtocol(testKey)}})
	if err != nil {
		t.Fatalf("same origin with the key: %v %v", resp, err)
	}
	defer c.CloseNow()
	if c.Subprotocol() != "sbx.tty" || resp.Header.Get("Sec-WebSocket-Protocol") != "sbx.tty" {
		t.Errorf("selected subprotocol %q (header %q), want sbx.tty", c.Subprotocol(), resp.Header.Get("Sec-WebSocket-Protocol"))
	}
}
