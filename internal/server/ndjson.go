package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
)

// stream writes an NDJSON answer (application/x-ndjson), one object a line,
// each flushed at once. Writes after the client left are dropped: the
// operation goes on.
type stream struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	enc *json.Encoder
	// cut: the answer ended early (its key was revoked); later lines are
	// dropped.
	cut bool
}

func startStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	st := &stream{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
	_ = st.rc.Flush()
	return st
}

func (st *stream) line(v any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cut {
		return
	}
	if st.enc.Encode(v) == nil {
		_ = st.rc.Flush()
	}
}

// end writes v, the answer's last line, and drops every later line: under
// one lock, so no line of the operation (its progress) follows it.
func (st *stream) end(v any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cut {
		return
	}
	st.cut = true
	if st.enc.Encode(v) == nil {
		_ = st.rc.Flush()
	}
}

func now() time.Time { return time.Now().UTC() }

func (st *stream) info(msg string) {
	b, _ := json.Marshal(msg)
	st.line(api.StreamLine{Type: api.LineInfo, Data: b, Time: now()})
}

func (st *stream) complete(data any) {
	b, _ := json.Marshal(data)
	st.line(api.StreamLine{Type: api.LineComplete, Data: b, Time: now()})
}

// long runs a long operation as an NDJSON answer: info lines from progress,
// then complete with fn's result or error with its code. fn's context is
// not cancelled when the client disconnects: an accepted operation
// finishes. When the request's key is revoked, the answer ends at once
// with an error line (unauthorized) while the operation goes on.
func (s *Server) long(w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, progress func(string)) (any, error)) {
	st := startStream(w)
	ctx := context.WithoutCancel(r.Context())
	type result struct {
		res any
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := fn(ctx, st.info)
		done <- result{res, err}
	}()
	var d result
	select {
	case d = <-done:
	case <-r.Context().Done():
		if errors.Is(context.Cause(r.Context()), errRevoked) {
			body := s.errorOf(r.Context(), errRevoked)
			st.end(api.StreamLine{Type: api.LineError, Error: body.Message, Code: body.Code, Time: now()})
			return
		}
		d = <-done
	}
	res, err := d.res, d.err
	if err != nil {
		body := s.errorOf(ctx, err)
		st.line(api.StreamLine{Type: api.LineError, Error: body.Message, Code: body.Code, RequestID: body.RequestID, Time: now()})
		return
	}
	st.complete(res)
}
