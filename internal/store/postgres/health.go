package postgres

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sbxhq/sbx/internal/errdefs"
)

// DefaultDialTimeout bounds each new connection to the server when the URL
// gives no connect_timeout, so that a request made while the server does
// not answer (a host that drops packets) fails instead of waiting on.
const DefaultDialTimeout = 5 * time.Second

// ErrOutage is the error of a store call while the database does not
// answer: class errdefs.ErrUnavailable (503 unavailable). Its text names
// neither the server nor its user; the cause goes to sbxd's log.
var ErrOutage = errdefs.New(errdefs.ErrUnavailable,
	"the record store (PostgreSQL) does not answer; running sandboxes keep running; retry when it is back")

// health tracks whether the database answers, from pgx's tracer hooks: a
// connection that cannot be made or that breaks starts an outage, the next
// statement that succeeds ends it. It is pgx's tracer (pgx.QueryTracer,
// pgx.ConnectTracer, pgxpool.AcquireTracer) for every connection of the
// pool.
type health struct {
	mu    sync.Mutex
	cause error     // nil while the database answers
	since time.Time // when the outage began
	log   *slog.Logger
	where string
}

var (
	_ pgx.QueryTracer       = (*health)(nil)
	_ pgx.ConnectTracer     = (*health)(nil)
	_ pgxpool.AcquireTracer = (*health)(nil)
)

func (h *health) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (h *health) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	h.seen(ctx, d.Err)
}

func (h *health) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	return ctx
}

func (h *health) TraceConnectEnd(ctx context.Context, d pgx.TraceConnectEndData) {
	if d.Err != nil {
		h.seen(ctx, d.Err)
	}
}

func (h *health) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

func (h *health) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if d.Err != nil {
		h.seen(ctx, d.Err)
	}
}

// seen records one call's outcome: a success ends an outage, a connection
// failure begins one; any other error (a constraint, no rows, the
// caller's own cancellation) says nothing about the server.
func (h *health) seen(ctx context.Context, err error) {
	switch {
	case err == nil:
		h.mu.Lock()
		was, since, log := h.cause, h.since, h.log
		h.cause = nil
		h.mu.Unlock()
		if was != nil && log != nil {
			log.Info("the record store answers again", "store", h.where, "outage_ms", time.Since(since).Milliseconds())
		}
	case ctx.Err() == nil && isConnectionError(err):
		h.mu.Lock()
		was, log := h.cause, h.log
		h.cause = err
		if was == nil {
			h.since = time.Now()
		}
		h.mu.Unlock()
		if was == nil && log != nil {
			log.Error("the record store does not answer; requests that need it answer 503 unavailable until it does", "store", h.where, "err", err)
		}
	}
}

// outage is the connection error that began the current outage, nil when
// the database answers.
func (h *health) outage() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cause
}

// isConnectionError reports whether err says the server could not be
// reached or the connection broke, rather than that a statement failed: a
// failed connect, a network error, a connection closed under a statement,
// or a PostgreSQL error of class 08 (connection exception), 57P01-57P03
// (shutdown, cannot connect now) or 53300 (too many connections).
func isConnectionError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300":
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ENOENT):
		return true
	case errors.Is(err, pgx.ErrNoRows), errors.Is(err, pgx.ErrTxClosed):
		return false
	}
	// pgconn's own text for a connection it has closed.
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// Outage returns ErrOutage while the database does not answer (the last
// connection to it failed or broke and no statement has succeeded since),
// nil otherwise. Store calls made during an outage fail with their own
// errors, which the engine may wrap; the server answers 503 with
// ErrOutage for any call that failed while Outage was not nil.
func (s *Store) Outage() error {
	if s.health.outage() == nil {
		return nil
	}
	return ErrOutage
}

// SetLogger makes the store log the start and end of an outage to l.
func (s *Store) SetLogger(l *slog.Logger) {
	s.health.mu.Lock()
	s.health.log = l
	s.health.mu.Unlock()
}
