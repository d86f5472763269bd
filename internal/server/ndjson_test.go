package server

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestStreamEndIsLast: once a stream's last line is written (the
// unauthorized line of a revoked key's long operation), the operation's
// later progress and completion are dropped, and a second end too.
func TestStreamEndIsLast(t *testing.T) {
	rec := httptest.NewRecorder()
	st := startStream(rec)
	st.info("begun")
	st.end(api.StreamLine{Type: api.LineError, Code: api.CodeUnauthorized})
	st.info("late progress")
	st.complete(map[string]bool{"done": true})
	st.end(api.StreamLine{Type: api.LineError, Code: api.CodeInternal})
	lines := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "begun") || !strings.Contains(lines[1], string(api.CodeUnauthorized)) {
		t.Fatalf("stream:\n%s", rec.Body.String())
	}
}
