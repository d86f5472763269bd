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
