package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestUsageBadQuery: a malformed since or until, and a window longer than
// MaxUsageWindow, are 400 invalid_argument naming the parameter, before
// the engine is asked (this server has none).
func TestUsageBadQuery(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /v1/usage", s.usage)
	for q, field := range map[string]string{
		"since=yesterday":            "since",
		"until=2026-13-01T00:00:00Z": "until",
		"since=2026-12-01":           "since",
		"since=2020-01-01T00:00:00Z&until=2026-01-01T00:00:00Z": "since",
	} {
		rec := httptest.NewRecorder()
		s.Handler(false).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/usage?"+q, nil))
		var body api.ErrorResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != 400 || body.Error.Code != api.CodeInvalidArgument || !strings.HasPrefix(body.Error.Message, field+":") {
			t.Errorf("%s: %d %s", q, rec.Code, rec.Body)
		}
	}
}
