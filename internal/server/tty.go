package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// defaultShell is what a terminal runs when the request names no command:
// a login bash where the image has one, else sh.
var defaultShell = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"}

// ttyProtocol is the WebSocket subprotocol sbxd selects for a terminal
// when the client offers it (the web console does; the Go client offers
// none, and then none is selected). ttyKeyProtocol prefixes the subprotocol
// that carries a browser's API key (requestKey).
const (
	ttyProtocol    = "sbx.tty"
	ttyKeyProtocol = "bearer."
)

// TerminalWriteTimeout bounds each write of sbxd to a terminal's
// WebSocket: a client that reads nothing for this long (its socket's
// buffers full) is cut off, as if it had disconnected: the socket is
// closed and the command killed.
const TerminalWriteTimeout = 30 * time.Second

// execTTY serves GET /v1/sandboxes/{name}/exec?tty=1: a command on a
// pseudo-terminal, over a WebSocket (api.TTYMessage; docs/api.md). Binary
// messages carry the terminal's bytes both ways; text messages carry
// JSON control messages. Closing the WebSocket kills the command, unless
// ?keep=1 kept it: then it only detaches, and the terminal is attached
// again by pid (attachTTY). A cross-origin request is refused (403)
// before anything runs.
func (s *Server) execTTY(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("tty") != "1" && q.Get("tty") != "true" {
		s.writeError(w, r, errdefs.Invalid("tty", "GET .../exec opens a terminal: add ?tty=1 (and a WebSocket upgrade); run a command with POST .../exec"))
		return
	}
	req := api.ExecRequest{Cmd: q["cmd"], Cwd: q.Get("cwd"), TTY: &api.Winsize{Rows: 24, Cols: 80}}
	if len(req.Cmd) == 0 {
		req.Cmd = defaultShell
	}
	for _, kv := range q["env"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			s.writeError(w, r, errdefs.Invalid("env", "%q: want KEY=VALUE", kv))
			return
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	if err := parseSize(q, req.TTY); err != nil {
		s.writeError(w, r, err)
		return
	}
	switch q.Get("keep") {
	case "", "0", "false":
	case "1", "true":
		req.Keep = true
	default:
		s.writeError(w, r, errdefs.Invalid("keep", "%q: want 1 (keep the command when the client goes) or 0", q.Get("keep")))
		return
	}
	if v := q.Get("timeout_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.writeError(w, r, errdefs.Invalid("timeout_ms", "%q is not a number", v))
			return
		}
		req.TimeoutMS = n
	} else {
		req.TimeoutMS = engine.MaxExecTimeoutMS // a terminal stays while it is used
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.writeError(w, r, errdefs.Invalid("tty", "a terminal needs a WebSocket: send Upgrade: websocket"))
		return
	}
	// The upgrade is checked (origin) before the command starts, so that
	// a refused request runs nothing.
	ctx, cancel := terminalContext(r)
	defer cancel()
	inR, inW := io.Pipe()
	defer inW.Close()
	// Accept checks that the Origin, when there is one, is the Host.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ttyProtocol}})
	if err != nil {
		s.log.Info("terminal refused", "sandbox", r.PathValue("name"), "err", err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	out := &wsWriter{ctx: ctx, c: c, cancel: cancel, timeout: TerminalWriteTimeout}
	send := func(m api.TTYMessage) error {
		b, _ := json.Marshal(m)
		return out.write(websocket.MessageText, b)
	}
	proc, err := s.eng.Exec(ctx, r.PathValue("name"), req, inR)
	if err != nil {
		body := s.errorOf(ctx, err)
		_ = send(api.TTYMessage{Type: api.ExecError, Error: body.Message, Code: body.Code})
		_ = c.Close(websocket.StatusNormalClosure, "")
		return
	}
	defer proc.Close()
	s.ttySession(ctx, cancel, c, out, proc, r.PathValue("name"), inW)
}

// attachTTY serves GET /v1/sandboxes/{name}/processes/{pid}/tty: the
// terminal of a process started by GET .../exec?tty=1 (kept with keep=1,
// or in a copy made by a snapshot or fork), over a WebSocket with the
// terminal route's messages. Its latest output
// (engine.TerminalReplayBytes) is replayed first; ?rows=&cols= resize it
// on attach. One client at a time: while one is attached (the one that
// started it too) another gets 409 conflict. A process without a terminal
// is 400 naming the pid; an unknown one 404 process_not_found. These
// answer before the upgrade, as does a cross-origin request (403).
// Closing the WebSocket only detaches.
func (s *Server) attachTTY(w http.ResponseWriter, r *http.Request) {
	pid, err := pidOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	var size *api.Winsize
	if q.Get("rows") != "" || q.Get("cols") != "" {
		size = &api.Winsize{Rows: 24, Cols: 80}
		if err := parseSize(q, size); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.writeError(w, r, errdefs.Invalid("tty", "a terminal needs a WebSocket: send Upgrade: websocket"))
		return
	}
	if err := sameOrigin(r); err != nil {
		s.log.Info("terminal refused", "sandbox", r.PathValue("name"), "err", err)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	ctx, cancel := terminalContext(r)
	defer cancel()
	inR, inW := io.Pipe()
	defer inW.Close()
	proc, err := s.eng.AttachTerminal(ctx, r.PathValue("name"), pid, size, inR)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer proc.Close()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ttyProtocol}})
	if err != nil {
		s.log.Info("terminal refused", "sandbox", r.PathValue("name"), "err", err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	out := &wsWriter{ctx: ctx, c: c, cancel: cancel, timeout: TerminalWriteTimeout}
	s.ttySession(ctx, cancel, c, out, proc, r.PathValue("name"), inW)
}

// sameOrigin refuses a request whose Origin, when it has one, is not its
// Host (as websocket.Accept does), for a check before anything runs.
func sameOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil {
		return fmt.Errorf("bad Origin %q: %v", o, err)
	}
	if !strings.EqualFold(u.Host, r.Host) {
		return fmt.Errorf("request Origin %q is not the Host %q: cross-origin terminals are refused", o, r.Host)
	}
	return nil
}

// parseSize reads ?rows= and ?cols= (cells) over the defaults in size.
func parseSize(q url.Values, size *api.Winsize) error {
	for _, f := range []struct {
		name string
		dst  *uint16
	}{{"rows", &size.Rows}, {"cols", &size.Cols}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return errdefs.Invalid(f.name, "%q is not a number of cells", v)
			}
			*f.dst = uint16(n)
		}
	}
	return nil
}

// ttySession runs a terminal's WebSocket once its process is started or
// attached: "start", the bytes both ways, resizes and signals, then
// "exit" or "error" and a normal close. The client's going away cancels
// ctx (the process is killed unless it is kept or attached).
func (s *Server) ttySession(ctx context.Context, cancel context.CancelFunc, c *websocket.Conn, out *wsWriter, proc *engine.Process, name string, inW *io.PipeWriter) {
	send := func(m api.TTYMessage) error {
		b, _ := json.Marshal(m)
		return out.write(websocket.MessageText, b)
	}
	if err := send(api.TTYMessage{Type: api.ExecStart, PID: proc.PID()}); err != nil {
		return
	}
	// Input and control from the client; its going away ends the command.
	go func() {
		defer cancel()
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if _, err := inW.Write(b); err != nil {
					return
				}
				continue
			}
			var m api.TTYMessage
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			switch m.Type {
			case api.TTYResize:
				_ = proc.Resize(m.Rows, m.Cols)
			case api.TTYSignal:
				_ = s.eng.SignalProcess(ctx, name, proc.PID(), m.Signal)
			}
		}
	}()
	ex, err := proc.Wait(out, out)
	if out.stalled.Load() {
		s.log.Warn("terminal cut: its client read nothing for the write timeout",
			"sandbox", name, "pid", proc.PID(), "timeout", TerminalWriteTimeout)
		return
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // the client went: nobody to tell
		}
		body := s.errorOf(ctx, err)
		_ = send(api.TTYMessage{Type: api.ExecError, Error: body.Message, Code: body.Code})
		_ = c.Close(websocket.StatusNormalClosure, "")
		return
	}
	code := ex.ExitCode
	_ = send(api.TTYMessage{Type: api.ExecExit, ExitCode: &code, DurationMS: ex.DurationMS, TimedOut: ex.TimedOut})
	_ = c.Close(websocket.StatusNormalClosure, "")
}

// wsWriter sends each write as one binary message, each within timeout.
// A write that times out closes the connection (coder/websocket does, on
// the write's context) and cancels the terminal, as a client's disconnect
// does: the command is killed.
type wsWriter struct {
	ctx     context.Context
	c       *websocket.Conn
	cancel  context.CancelFunc
	timeout time.Duration
	stalled atomic.Bool
}

func (w *wsWriter) Write(b []byte) (int, error) {
	if err := w.write(websocket.MessageBinary, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (w *wsWriter) write(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(w.ctx, w.timeout)
	defer cancel()
	err := w.c.Write(ctx, typ, b)
	if err != nil && w.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		w.stalled.Store(true)
		w.cancel()
	}
	return err
}

// terminalContext is the context of a terminal's command: it outlives the
// request's own context (the WebSocket's end is handled by the session),
// but a revocation of the request's key ends it. cancel also releases the
// watch of the request's context.
func terminalContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	stop := context.AfterFunc(r.Context(), func() {
		if errors.Is(context.Cause(r.Context()), errRevoked) {
			cancel()
		}
	})
	return ctx, func() { stop(); cancel() }
}
