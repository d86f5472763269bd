package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
// JSON control messages. Closing the WebSocket kills the command. A
// cross-origin request is refused (403) before anything runs.
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
	for _, f := range []struct {
		name string
		dst  *uint16
	}{{"rows", &req.TTY.Rows}, {"cols", &req.TTY.Cols}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				s.writeError(w, r, errdefs.Invalid(f.name, "%q is not a number of cells", v))
				return
			}
			*f.dst = uint16(n)
		}
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
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	// A revocation of the key ends the terminal and its command.
	stop := context.AfterFunc(r.Context(), func() {
		if errors.Is(context.Cause(r.Context()), errRevoked) {
			cancel()
		}
	})
	defer stop()
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
				_ = s.eng.SignalProcess(ctx, r.PathValue("name"), proc.PID(), m.Signal)
			}
		}
	}()
	ex, err := proc.Wait(out, out)
	if out.stalled.Load() {
		s.log.Warn("terminal cut: its client read nothing for the write timeout",
			"sandbox", r.PathValue("name"), "pid", proc.PID(), "timeout", TerminalWriteTimeout)
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
