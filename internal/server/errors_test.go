package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
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

// TestStoreOutageIsUnavailable: while the record store does not answer,
// an operation that failed (whatever the engine wrapped the store's error
// in) answers 503 unavailable with the store's text, not 500 internal or
// the operation's failure; a classified answer (a missing sandbox) stays
// what it is, and so does every answer once the store is back.
func TestStoreOutageIsUnavailable(t *testing.T) {
	down := errdefs.New(errdefs.ErrUnavailable, "the record store (PostgreSQL) does not answer")
	var outage error
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), outage: func() error { return outage }}
	ctx := context.Background()
	failed := fmt.Errorf("%w: record: dial unix /tmp/pg/.s.PGSQL.5432: connect: no such file or directory", errdefs.ErrCheckpointFailed)
	internal := errors.New("get sandbox: failed to connect to user=sbx database=postgres")

	if b := s.errorOf(ctx, internal); b.Code != api.CodeInternal {
		t.Fatalf("no outage: %+v", b)
	}
	outage = down
	for _, err := range []error{failed, internal, fmt.Errorf("list: %w", context.DeadlineExceeded)} {
		b := s.errorOf(ctx, err)
		if b.Code != api.CodeUnavailable || b.Message != down.Error() {
			t.Fatalf("%v during an outage: %+v, want 503 with the store's text", err, b)
		}
	}
	if b := s.errorOf(ctx, errdefs.ErrSandboxNotFound); b.Code != api.CodeSandboxNotFound {
		t.Fatalf("a missing sandbox during an outage: %+v", b)
	}
	outage = nil
	if b := s.errorOf(ctx, failed); b.Code != api.CodeCheckpointFailed {
		t.Fatalf("after the outage: %+v", b)
	}
}
