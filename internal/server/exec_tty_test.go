package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestExecPOSTRefusesTTY: POST .../exec that asks for a terminal, by
// ?tty=1 or by "tty" in the body (of any JSON kind), is 400
// invalid_argument pointing at the terminal's route (a WebSocket GET),
// and runs nothing (the server here has no engine: running would panic).
func TestExecPOSTRefusesTTY(t *testing.T) {
	s := New(nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, tc := range []struct{ query, body string }{
		{"?tty=1", `{"cmd":["true"]}`},
		{"?tty=true", `{"cmd":["true"]}`},
		{"", `{"cmd":["true"],"tty":true}`},
		{"", `{"cmd":["true"],"tty":1}`},
		{"", `{"cmd":["true"],"tty":{"rows":24,"cols":80}}`},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/sandboxes/x/exec"+tc.query, strings.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/json")
		ran := func() (ran bool) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("POST exec%s %s went on to run the command (panic: %v)", tc.query, tc.body, p)
					ran = true
				}
			}()
			s.Handler(false).ServeHTTP(rec, r)
			return false
		}()
		if ran {
			continue
		}
		var e api.ErrorResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != 400 || e.Error.Code != api.CodeInvalidArgument ||
			!strings.HasPrefix(e.Error.Message, "tty: ") || !strings.Contains(e.Error.Message, "GET /v1/sandboxes/{name}/exec?tty=1") ||
			!strings.Contains(e.Error.Message, "WebSocket") {
			t.Errorf("POST exec%s %s: %d %s, want 400 invalid_argument naming tty and the WebSocket GET route", tc.query, tc.body, rec.Code, rec.Body)
		}
	}
}

// TestAttachTTYRefusesBeforeEngine: the terminal attach route answers a
// bad pid, a bad size, a missing upgrade and a cross-origin request
// before anything is attached (the server here has no engine: reaching it
// would panic); so does the terminal route for a bad keep.
func TestAttachTTYRefusesBeforeEngine(t *testing.T) {
	s := New(nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	upgrade := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	for _, tc := range []struct {
		path    string
		headers map[string]string
		code    int
		want    string
	}{
		{"/v1/sandboxes/x/processes/abc/tty", upgrade, 400, "pid: "},
		{"/v1/sandboxes/x/processes/0/tty", upgrade, 400, "pid: "},
		{"/v1/sandboxes/x/processes/5/tty?rows=x", upgrade, 400, "rows: "},
		{"/v1/sandboxes/x/processes/5/tty", nil, 400, "tty: "},
		{"/v1/sandboxes/x/processes/5/tty", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example"}, 403, "cross-origin"},
		{"/v1/sandboxes/x/exec?tty=1&keep=yes", upgrade, 400, "keep: "},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", tc.path, nil)
		for k, v := range tc.headers {
			r.Header.Set(k, v)
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("GET %s went on to the engine (panic: %v)", tc.path, p)
				}
			}()
			s.Handler(false).ServeHTTP(rec, r)
		}()
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("GET %s %v: %d %s, want %d with %q", tc.path, tc.headers, rec.Code, rec.Body, tc.code, tc.want)
		}
	}
}
