package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestClientGoneIsNotAnInternalError: an operation cut because its client
// went away (the request's context cancelled) is not sbxd's failure: it is
// not answered 500 internal, and it is not logged as an error.
func TestClientGoneIsNotAnInternalError(t *testing.T) {
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := s.errorOf(ctx, fmt.Errorf("exec: read from the agent: %w", context.Canceled))
	if body.Code != api.CodeUnavailable || !strings.Contains(body.Message, "client went away") {
		t.Fatalf("body %+v, want unavailable saying the client went away", body)
	}
	if logs.Len() != 0 {
		t.Fatalf("logged at info or above: %s", logs.String())
	}
	// A cancellation underneath, while the client still waits, is still
	// the deadline's 503, logged.
	body = s.errorOf(context.Background(), context.Canceled)
	if body.Code != api.CodeUnavailable || strings.Contains(body.Message, "client went away") || logs.Len() == 0 {
		t.Fatalf("a cancellation underneath: %+v, log %q", body, logs.String())
	}
}
