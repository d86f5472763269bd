package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/sbxhq/sbx/api"
)

// TerminalOptions configures a terminal. All fields are optional.
type TerminalOptions struct {
	// Cmd is the argv; default a login shell (bash -l where the image has
	// bash, else sh -l).
	Cmd []string
	// Cwd is the working directory (default /workspace); Env is merged
	// over the sandbox's env.
	Cwd string
	Env map[string]string
	// Rows and Cols are the terminal's size in cells (default 24x80).
	Rows, Cols uint16
	// TimeoutMS ends the command after this many ms (default: 24 h).
	TimeoutMS int64
	// Keep keeps the command running when the terminal is closed (Close
	// only detaches): attach again with AttachTerminal and its PID.
	Keep bool
}

// AttachOptions configures AttachTerminal. All fields are optional.
type AttachOptions struct {
	// Rows and Cols resize the terminal on attach (cells, 1..1000; both
	// or neither: 0 leaves the size as it is).
	Rows, Cols uint16
}

// Terminal is a command running on a pseudo-terminal in a sandbox, as
// with docker exec -it: Write types on it, Read reads what it shows (one
// stream: stdout and stderr together, with the terminal's echo). Close
// ends it (the command is killed, unless kept: then it only detaches).
type Terminal struct {
	// PID is the command's process id in the sandbox.
	PID int

	c    *websocket.Conn
	ctx  context.Context
	out  *io.PipeReader
	done chan struct{}
	mu   sync.Mutex
	exit *api.TTYMessage
	err  error
}

// Terminal starts opts.Cmd on a pseudo-terminal in the sandbox, over the
// terminal WebSocket (GET .../exec?tty=1), booting or resuming the
// sandbox as an exec does. Errors: ErrInvalidArgument (bad size, a
// missing command), ErrSandboxNotFound, ErrConflict. ctx bounds the
// terminal's whole life.
func (sb *Sandbox) Terminal(ctx context.Context, opts TerminalOptions) (*Terminal, error) {
	q := url.Values{"tty": {"1"}}
	for _, a := range opts.Cmd {
		q.Add("cmd", a)
	}
	if opts.Cwd != "" {
		q.Set("cwd", opts.Cwd)
	}
	for k, v := range opts.Env {
		q.Add("env", k+"="+v)
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(int(opts.Rows)))
	}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(int(opts.Cols)))
	}
	if opts.TimeoutMS > 0 {
		q.Set("timeout_ms", strconv.FormatInt(opts.TimeoutMS, 10))
	}
	if opts.Keep {
		q.Set("keep", "1")
	}
	return sb.dialTerminal(ctx, "/v1/sandboxes/"+url.PathEscape(sb.Name)+"/exec", q)
}

// AttachTerminal attaches again to the terminal of process pid: one
// started with TerminalOptions.Keep whose client went, or one in a copy
// made by a snapshot or fork (same pid), over GET
// .../processes/{pid}/tty. Its latest output (64 KiB) is read first. A
// suspended sandbox is resumed. Close only detaches. Errors:
// ErrInvalidArgument (the process is not a terminal), ErrProcessNotFound,
// ErrSandboxNotFound, ErrConflict (another client is attached: one at a
// time).
func (sb *Sandbox) AttachTerminal(ctx context.Context, pid int, opts AttachOptions) (*Terminal, error) {
	q := url.Values{}
	if opts.Rows > 0 || opts.Cols > 0 {
		q.Set("rows", strconv.Itoa(int(opts.Rows)))
		q.Set("cols", strconv.Itoa(int(opts.Cols)))
	}
	return sb.dialTerminal(ctx, "/v1/sandboxes/"+url.PathEscape(sb.Name)+"/processes/"+strconv.Itoa(pid)+"/tty", q)
}

// dialTerminal opens a terminal WebSocket at path and reads its start.
func (sb *Sandbox) dialTerminal(ctx context.Context, path string, q url.Values) (*Terminal, error) {
	u := *sb.c.base
	u.Path = path
	u.RawQuery = q.Encode()
	h := http.Header{}
	if sb.c.apiKey != "" {
		h.Set("Authorization", "Bearer "+sb.c.apiKey)
	}
	c, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: sb.c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			if aerr := decodeError(resp); aerr != nil {
				return nil, aerr
			}
		}
		return nil, fmt.Errorf("terminal of %s: %w", sb.Name, err)
	}
	c.SetReadLimit(4 << 20)
	_, b, err := c.Read(ctx)
	if err != nil {
		c.CloseNow()
		return nil, fmt.Errorf("terminal of %s: %w", sb.Name, err)
	}
	var first api.TTYMessage
	if err := json.Unmarshal(b, &first); err != nil {
		c.CloseNow()
		return nil, fmt.Errorf("terminal of %s: %w", sb.Name, err)
	}
	if first.Type == api.ExecError {
		c.CloseNow()
		return nil, &Error{Code: first.Code, Message: first.Error}
	}
	pr, pw := io.Pipe()
	t := &Terminal{PID: first.PID, c: c, ctx: ctx, out: pr, done: make(chan struct{})}
	go t.read(pw)
	return t, nil
}

// read copies the terminal's output to pw until the exit or an error.
func (t *Terminal) read(pw *io.PipeWriter) {
	defer close(t.done)
	for {
		typ, b, err := t.c.Read(t.ctx)
		if err != nil {
			t.finish(nil, fmt.Errorf("terminal: %w", err))
			pw.Close()
			return
		}
		if typ == websocket.MessageBinary {
			if _, err := pw.Write(b); err != nil {
				continue // nobody reads the output: drop it, keep the exit
			}
			continue
		}
		var m api.TTYMessage
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch m.Type {
		case api.ExecExit:
			t.finish(&m, nil)
			pw.Close()
			return
		case api.ExecError:
			t.finish(nil, &Error{Code: m.Code, Message: m.Error})
			pw.Close()
			return
		}
	}
}

func (t *Terminal) finish(exit *api.TTYMessage, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit == nil && t.err == nil {
		t.exit, t.err = exit, err
	}
}

// Read reads what the terminal shows; io.EOF once the command exited.
func (t *Terminal) Read(p []byte) (int, error) { return t.out.Read(p) }

// Write types p on the terminal (Ctrl-C is "\x03", Ctrl-D "\x04").
func (t *Terminal) Write(p []byte) (int, error) {
	if err := t.c.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize sets the terminal's size in cells (1..1000 each).
func (t *Terminal) Resize(rows, cols uint16) error {
	return t.control(api.TTYMessage{Type: api.TTYResize, Rows: rows, Cols: cols})
}

// Signal sends a signal (1-64) to the command's process group.
func (t *Terminal) Signal(sig int) error {
	return t.control(api.TTYMessage{Type: api.TTYSignal, Signal: sig})
}

func (t *Terminal) control(m api.TTYMessage) error {
	b, _ := json.Marshal(m)
	return t.c.Write(t.ctx, websocket.MessageText, b)
}

// Wait waits for the command to exit and returns its exit code (124 after
// its timeout, 128+N when signal N killed it). It reads and drops the
// output not read yet: call it once done reading. Errors: the sandbox died or was deleted (ErrConflict,
// ErrSandboxNotFound), or the connection broke.
func (t *Terminal) Wait() (int, error) {
	go func() { _, _ = io.Copy(io.Discard, t.out) }()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return -1, t.err
	}
	if t.exit == nil || t.exit.ExitCode == nil {
		return -1, errors.New("terminal: ended without an exit")
	}
	return *t.exit.ExitCode, nil
}

// Close ends the terminal; a command still running is killed, unless it
// was kept (TerminalOptions.Keep) or attached (AttachTerminal): then it
// is only detached.
func (t *Terminal) Close() error {
	t.out.Close()
	return t.c.Close(websocket.StatusNormalClosure, "")
}
