package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/undo"
)

// errTTYOnPOST answers a POST .../exec that asks for a terminal (?tty= or
// "tty" in the body): the terminal is its own route.
var errTTYOnPOST = errdefs.Invalid("tty", "POST .../exec runs a command without a terminal; "+
	"a terminal is a WebSocket: GET /v1/sandboxes/{name}/exec?tty=1 with Upgrade: websocket (sbx shell, sbx exec -t)")

// exec runs a command: buffered ({stdout, stderr, exit_code, duration_ms})
// or, with Accept: application/x-ndjson, streamed as stdout/stderr lines
// ending with an exit line. Failures to start (no such executable, bad cwd,
// unknown sandbox) are plain error answers in both modes. A client that
// disconnects kills the process.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	// POST runs a command without a terminal: ?tty= is refused rather
	// than ignored, and so is "tty" in the body, whatever its JSON kind.
	if r.URL.Query().Has("tty") {
		s.writeError(w, r, errTTYOnPOST)
		return
	}
	var req api.ExecRequest
	if err := decode(w, r, MaxExecBody, &req, false); err != nil {
		if errdefs.IsInvalidArgument(err) && strings.HasPrefix(err.Error(), "tty: ") {
			err = errTTYOnPOST
		}
		s.writeError(w, r, err)
		return
	}
	if req.TTY != nil {
		s.writeError(w, r, errTTYOnPOST)
		return
	}
	var stdin io.Reader
	switch {
	case req.Stdin != "" && req.StdinBase64 != "":
		s.writeError(w, r, errdefs.Invalid("stdin_base64", "give stdin or stdin_base64, not both"))
		return
	case req.Stdin != "":
		stdin = strings.NewReader(req.Stdin)
	case req.StdinBase64 != "":
		b, err := base64.StdEncoding.DecodeString(req.StdinBase64)
		if err != nil {
			s.writeError(w, r, errdefs.Invalid("stdin_base64", "not standard base64: %v", err))
			return
		}
		stdin = bytes.NewReader(b)
	}
	b64 := false
	switch req.Encoding {
	case "", api.EncodingUTF8:
	case api.EncodingBase64:
		b64 = true
	default:
		s.writeError(w, r, errdefs.Invalid("encoding", "%q: want utf-8 or base64", req.Encoding))
		return
	}
	if err := engine.ValidateUndo(req); err != nil {
		s.writeError(w, r, err)
		return
	}
	// The undo is taken before the command starts; a failure to take it
	// runs nothing.
	u, err := s.eng.TakeUndo(r.Context(), r.PathValue("name"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	proc, err := s.eng.Exec(r.Context(), r.PathValue("name"), req, stdin)
	if err != nil {
		// Nothing ran: nothing to roll back.
		_ = s.eng.FinishUndo(r.Context(), r.PathValue("name"), u, req.RollbackOnFailure, 0)
		s.writeError(w, r, err)
		return
	}
	// rollback puts the undo back after a failed command; it runs to the
	// end even when the client has gone.
	rollback := func(exitCode int) *api.UndoResult {
		if err := s.eng.FinishUndo(context.WithoutCancel(r.Context()), r.PathValue("name"), u, req.RollbackOnFailure, exitCode); err != nil {
			s.log.Warn("guarded exec: rollback failed", "sandbox", r.PathValue("name"), "err", err)
		}
		return u
	}
	if req.Detach {
		writeJSON(w, http.StatusAccepted, map[string]int{"pid": proc.PID()})
		return
	}
	defer proc.Close()
	if wantsNDJSON(r) {
		s.streamProcess(w, r, proc, b64, rollback)
		return
	}
	stdout := &cappedBuffer{max: api.MaxBufferedOutput}
	stderr := &cappedBuffer{max: api.MaxBufferedOutput}
	ex, err := proc.Wait(stdout, stderr)
	if err != nil {
		// The command did not finish (the client went, the sandbox died):
		// that is a failure too.
		rollback(-1)
		s.writeError(w, r, err)
		return
	}
	undone := rollback(ex.ExitCode)
	enc := func(b *bytes.Buffer) string {
		if b64 {
			return base64.StdEncoding.EncodeToString(b.Bytes())
		}
		return b.String()
	}
	writeJSON(w, http.StatusOK, api.ExecResult{
		PID:    proc.PID(),
		Stdout: enc(&stdout.buf), Stderr: enc(&stderr.buf), ExitCode: ex.ExitCode,
		DurationMS: ex.DurationMS, TimedOut: ex.TimedOut, Truncated: stdout.truncated || stderr.truncated,
		Undo: undone,
	})
}

// streamProcess streams a process as NDJSON: a start line with its pid,
// stdout and stderr lines, then exit (or error).
func (s *Server) streamProcess(w http.ResponseWriter, r *http.Request, proc *engine.Process, b64 bool, after func(exitCode int) *api.UndoResult) {
	st := startStream(w)
	st.line(api.ExecEvent{Type: api.ExecStart, PID: proc.PID()})
	stdout := &utf8Lines{st: st, typ: api.ExecStdout, b64: b64}
	stderr := &utf8Lines{st: st, typ: api.ExecStderr, b64: b64}
	ex, err := proc.Wait(stdout, stderr)
	stdout.flush()
	stderr.flush()
	if err != nil {
		if after != nil {
			after(-1) // the command did not finish: a failure too
		}
		body := s.errorOf(r.Context(), err)
		st.line(api.ExecEvent{Type: api.ExecError, Error: body.Message, Code: body.Code})
		return
	}
	code := ex.ExitCode
	var u *api.UndoResult
	if after != nil {
		u = after(code)
	}
	st.line(api.ExecEvent{Type: api.ExecExit, ExitCode: &code, DurationMS: ex.DurationMS, TimedOut: ex.TimedOut, Undo: u})
}

// cappedBuffer keeps the first max bytes written and counts the rest.
type cappedBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room < len(p) {
		b.truncated = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

// utf8Lines turns output chunks into NDJSON lines of one type without
// splitting a UTF-8 sequence across two lines (JSON strings must be valid
// UTF-8; bytes that are not become U+FFFD), or, with b64, as base64.
type utf8Lines struct {
	st      *stream
	typ     string
	b64     bool
	pending []byte
}

func (u *utf8Lines) Write(p []byte) (int, error) {
	if u.b64 {
		u.st.line(api.ExecEvent{Type: u.typ, Data: base64.StdEncoding.EncodeToString(p)})
		return len(p), nil
	}
	data := append(u.pending, p...)
	cut := len(data)
	// Hold back an incomplete sequence at the end (at most 3 bytes).
	for i := len(data) - 1; i >= 0 && i >= len(data)-3; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				cut = i
			}
			break
		}
	}
	u.pending = append([]byte(nil), data[cut:]...)
	if cut > 0 {
		u.st.line(api.ExecEvent{Type: u.typ, Data: string(data[:cut])})
	}
	return len(p), nil
}

func (u *utf8Lines) flush() {
	if len(u.pending) > 0 {
		u.st.line(api.ExecEvent{Type: u.typ, Data: string(u.pending)})
		u.pending = nil
	}
}

// classify answers POST /v1/classify: the lightest undo that covers a
// command (package undo), with the reason. Any caller may ask; nothing in
// a sandbox is read.
func (s *Server) classify(w http.ResponseWriter, r *http.Request) {
	var req api.ClassifyRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Cmd == nil {
		s.writeError(w, r, errdefs.Invalid("cmd", "is required: a shell line (\"git checkout -- .\") or an argv ([\"rm\", \"-rf\", \"build\"])"))
		return
	}
	k, why := undo.ExplainArgv(req.Cmd)
	writeJSON(w, http.StatusOK, api.ClassifyResult{Undo: k.String(), Reason: why})
}
