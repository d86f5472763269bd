package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Deadlines of agent calls: a stopped agent (SIGSTOP in the sandbox, a
// frozen runsc-sandbox) makes a call fail with ErrStalled within them
// instead of hanging it.
const (
	// DialTimeout bounds the connect to the agent's socket.
	DialTimeout = 5 * time.Second
	// StallTimeout bounds the wait for the agent's next frame when it has
	// no long work to do first (a ping, a read's result, the next frame of
	// a file or archive stream, an exec's started frame), and each frame
	// written to it. An agent that works long without sending (sizing an
	// archive, scanning a sparse file) sends FrameBusy meanwhile.
	StallTimeout = 20 * time.Second
	// WorkTimeout bounds the wait for the answer of an operation that
	// works without sending (a list, a recursive remove, the last entries
	// of a tar_in after its body).
	WorkTimeout = 2 * time.Minute
)

// ErrStalled reports an agent that sent nothing (or read nothing) within a
// deadline: it is stopped, or the sandbox is frozen or overloaded.
var ErrStalled = errors.New("the sandbox's agent did not answer in time")

// Client is the host side of the channel: it uses one connection to the
// agent's socket (the host path of /.sbx/run/agent.sock) per operation. A
// client made with spare > 0 keeps that many connections dialed ahead, so
// an operation does not wait for the agent to accept (~1-2 ms in gVisor).
//
// The output of an exec has no deadline (a process may be silent for
// hours); every other wait does (DialTimeout, StallTimeout, WorkTimeout).
type Client struct {
	sock  string
	spare int
	// Stall and Work replace StallTimeout and WorkTimeout when set (tests).
	Stall, Work time.Duration

	mu      sync.Mutex
	idle    []net.Conn
	dialing bool
	closed  bool
}

// NewClient returns a client of the agent listening at the host path sock,
// keeping spare connections dialed ahead (0: dial per operation). Close
// releases them.
func NewClient(sock string, spare int) *Client { return &Client{sock: sock, spare: spare} }

func (cl *Client) stall() time.Duration {
	if cl.Stall > 0 {
		return cl.Stall
	}
	return StallTimeout
}

func (cl *Client) work() time.Duration {
	if cl.Work > 0 {
		return cl.Work
	}
	return WorkTimeout
}

// Close closes the connections dialed ahead; operations in flight go on.
func (cl *Client) Close() {
	cl.mu.Lock()
	cl.closed = true
	idle := cl.idle
	cl.idle = nil
	cl.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// refill dials spare connections in the background.
func (cl *Client) refill() {
	cl.mu.Lock()
	if cl.closed || cl.dialing || len(cl.idle) >= cl.spare {
		cl.mu.Unlock()
		return
	}
	cl.dialing = true
	cl.mu.Unlock()
	go func() {
		for {
			c, err := cl.dial(context.Background())
			cl.mu.Lock()
			if err != nil || cl.closed {
				cl.dialing = false
				cl.mu.Unlock()
				if c != nil {
					c.Close()
				}
				return
			}
			cl.idle = append(cl.idle, c)
			full := len(cl.idle) >= cl.spare
			if full {
				cl.dialing = false
			}
			cl.mu.Unlock()
			if full {
				return
			}
		}
	}()
}

// alive reports whether an idle connection is still open: a peek that
// would block means open; EOF or an error means the agent went away.
func alive(c net.Conn) bool {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return ok
}

// conn returns a connection for one operation: a spare one if it is alive,
// else a new one.
func (cl *Client) conn(ctx context.Context) (net.Conn, error) {
	for {
		cl.mu.Lock()
		if len(cl.idle) == 0 {
			cl.mu.Unlock()
			break
		}
		c := cl.idle[0]
		cl.idle = cl.idle[1:]
		cl.mu.Unlock()
		if alive(c) {
			cl.refill()
			return c, nil
		}
		c.Close()
	}
	c, err := cl.dialRetry(ctx)
	if err != nil {
		return nil, err
	}
	if cl.spare > 0 {
		cl.refill()
	}
	return c, nil
}

// dialRetry dials a new connection to the agent. The agent re-creates its
// socket within a second if something in the sandbox removed it: a missing
// or refusing socket is retried for 2 s.
func (cl *Client) dialRetry(ctx context.Context) (net.Conn, error) {
	var c net.Conn
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; {
		c, err = cl.dial(ctx)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil ||
			!(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	return c, nil
}

// Reachable reports whether a new connection to the agent opens now,
// whatever the connections dialed ahead: nil, or the dial's error
// (ErrNotSocket; ENOENT when the socket file is gone, ECONNREFUSED when
// nothing listens on it), after the retries of a missing socket.
func (cl *Client) Reachable(ctx context.Context) error {
	c, err := cl.dialRetry(ctx)
	if err != nil {
		return err
	}
	return c.Close()
}

// op is one connection carrying one operation. Cancelling ctx closes it.
type op struct {
	c    net.Conn
	stop func() bool
	buf  []byte
	// wait bounds each read of a frame (0: none); stall bounds each write.
	wait, stall time.Duration
}

// start sends req on a connection whose frame reads wait at most wait
// (0: no bound).
func (cl *Client) start(ctx context.Context, req *Request, wait time.Duration) (*op, error) {
	c, err := cl.conn(ctx)
	if err != nil {
		return nil, err
	}
	o := &op{c: c, stop: context.AfterFunc(ctx, func() { c.Close() }), wait: wait, stall: cl.stall()}
	b, err := json.Marshal(req)
	if err == nil {
		err = o.write(FrameRequest, b)
	}
	if err != nil {
		o.close()
		return nil, ctxErr(ctx, err)
	}
	return o, nil
}

func (o *op) close() {
	o.stop()
	o.c.Close()
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// stalled turns a deadline's timeout into ErrStalled.
func stalled(err error, d time.Duration, what string) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: it %s nothing for %s", ErrStalled, what, d)
	}
	return err
}

// write writes one frame within the stall deadline.
func (o *op) write(typ byte, p []byte) error {
	_ = o.c.SetWriteDeadline(time.Now().Add(o.stall))
	return stalled(WriteFrame(o.c, typ, p), o.stall, "read")
}

// next reads a frame within o.wait, skipping FrameBusy; an agent Failure
// is returned as *Error.
func (o *op) next() (byte, []byte, error) {
	var typ byte
	var p []byte
	var err error
	for {
		if o.wait > 0 {
			_ = o.c.SetReadDeadline(time.Now().Add(o.wait))
		}
		typ, p, err = ReadFrame(o.c, o.buf)
		if err != nil || typ != FrameBusy {
			break
		}
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("agent connection: %w", stalled(err, o.wait, "sent"))
	}
	o.buf = p[:0]
	if typ == FrameFail {
		var f Failure
		if err := json.Unmarshal(p, &f); err != nil {
			return 0, nil, fmt.Errorf("%w: bad failure frame", ErrProtocol)
		}
		return typ, nil, &Error{f}
	}
	return typ, p, nil
}

// result reads one FrameResult into v.
func (o *op) result(v any) error {
	typ, p, err := o.next()
	if err != nil {
		return err
	}
	if typ != FrameResult {
		return fmt.Errorf("%w: got frame %q, want result", ErrProtocol, typ)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(p, v)
}

// simple runs an operation that answers one result, within wait.
func (cl *Client) simple(ctx context.Context, req *Request, wait time.Duration, v any) error {
	o, err := cl.start(ctx, req, wait)
	if err != nil {
		return err
	}
	defer o.close()
	return ctxErr(ctx, o.result(v))
}

// Ping checks that the agent answers.
func (cl *Client) Ping(ctx context.Context) error {
	return cl.simple(ctx, &Request{Op: OpPing}, cl.stall(), nil)
}

// WaitReady pings until the agent answers or ctx ends: every 1 ms at
// first, then every 16 ms. Until its socket takes connections it only
// dials (a dial that fails costs microseconds; a Ping's dial would wait
// 100 ms for a missing socket, see dialRetry).
func (cl *Client) WaitReady(ctx context.Context) error {
	delay := time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := cl.dial(pctx)
		if err == nil {
			c.Close()
			err = cl.Ping(pctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent did not answer: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 16*time.Millisecond)
	}
}

// Quiesce asks the agent to close every host socket (for a gVisor
// checkpoint); SIGUSR1 to the agent makes it listen again.
func (cl *Client) Quiesce(ctx context.Context) error {
	cl.mu.Lock()
	idle := cl.idle
	cl.idle = nil
	cl.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	c, err := cl.dial(ctx)
	if err != nil {
		return fmt.Errorf("dial agent: %w", err)
	}
	o := &op{c: c, stop: context.AfterFunc(ctx, func() { c.Close() }), wait: cl.stall(), stall: cl.stall()}
	defer o.close()
	b, _ := json.Marshal(&Request{Op: OpQuiesce})
	if err := o.write(FrameRequest, b); err != nil {
		return err
	}
	if err := o.result(nil); err != nil {
		return ctxErr(ctx, err)
	}
	// The agent closes this connection once its other host sockets are
	// closed; its EOF is the signal that a checkpoint may start. (Going on
	// at the answer raced the checkpoint: "Cannot save endpoint with bound
	// host socket".)
	_ = c.SetReadDeadline(time.Now().Add(cl.stall()))
	if _, err := io.Copy(io.Discard, c); err != nil {
		return ctxErr(ctx, fmt.Errorf("quiesce: waiting for the agent to close its sockets: %w", stalled(err, cl.stall(), "closed")))
	}
	return ctx.Err()
}

// SetHostname sets the sandbox's hostname (its UTS namespace).
func (cl *Client) SetHostname(ctx context.Context, name string) error {
	return cl.simple(ctx, &Request{Op: OpHostname, Hostname: name}, cl.stall(), nil)
}

// Process is an exec whose process has started, attached to its output.
type Process struct {
	o   *op
	ctx context.Context
	// PID is the process id inside the sandbox.
	PID int
	// Offset is the bytes of output (stdout and stderr, with gaps) received
	// so far: where an Attach resumes.
	Offset int64
}

// Start starts req.Cmd in the sandbox. When stdin is not nil it is copied to
// the process's standard input, which is closed at its EOF. Failures to
// start (no such executable, bad cwd) come back as *Error before any output.
func (cl *Client) Start(ctx context.Context, req *Request, stdin io.Reader) (*Process, error) {
	req.Op = OpExec
	req.Stdin = stdin != nil
	o, err := cl.start(ctx, req, cl.stall())
	if err != nil {
		return nil, err
	}
	typ, p, err := o.next()
	if err != nil {
		o.close()
		return nil, ctxErr(ctx, err)
	}
	var st Started
	if typ != FrameStarted || json.Unmarshal(p, &st) != nil {
		o.close()
		return nil, fmt.Errorf("%w: got frame %q, want started", ErrProtocol, typ)
	}
	o.wait = 0 // a process may be silent for as long as it likes
	_ = o.c.SetReadDeadline(time.Time{})
	if req.Detach {
		o.close()
		return &Process{PID: st.PID, ctx: ctx}, nil
	}
	if stdin != nil {
		go copyStdin(o, stdin, true)
	}
	return &Process{o: o, ctx: ctx, PID: st.PID}, nil
}

// copyStdin sends what stdin yields as FrameStdin frames on o until stdin
// ends (then an empty frame, when eof) or o fails.
func copyStdin(o *op, stdin io.Reader, eof bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 && writeFrameNoDeadline(o, FrameStdin, buf[:n]) != nil {
			return
		}
		if err != nil {
			if eof {
				_ = writeFrameNoDeadline(o, FrameStdin, nil)
			}
			return
		}
	}
}

// Wait copies the process's output to stdout and stderr until it exits and
// returns its exit. A write error on stdout or stderr cancels the process.
// Cancelling the context given to Start kills the process group.
func (p *Process) Wait(stdout, stderr io.Writer) (*Exit, error) {
	defer p.o.close()
	for {
		typ, b, err := p.o.next()
		if err != nil {
			return nil, ctxErr(p.ctx, err)
		}
		switch typ {
		case FrameStdout, FrameStderr:
			w := stdout
			if typ == FrameStderr {
				w = stderr
			}
			p.Offset += int64(len(b))
			if _, err := w.Write(b); err != nil {
				return nil, fmt.Errorf("write output: %w", err)
			}
		case FrameGap:
			var g Gap
			if json.Unmarshal(b, &g) == nil {
				p.Offset += g.Lost
			}
		case FrameExit:
			var ex Exit
			if err := json.Unmarshal(b, &ex); err != nil {
				return nil, fmt.Errorf("%w: bad exit frame", ErrProtocol)
			}
			return &ex, nil
		default:
			return nil, fmt.Errorf("%w: unexpected frame %q during exec", ErrProtocol, typ)
		}
	}
}

// Resize sets the terminal size of a process started with TTY (rows and
// columns, both > 0); it is ignored for one without.
func (p *Process) Resize(rows, cols uint16) error {
	if p.o == nil {
		return errors.New("resize: the process is not attached")
	}
	b, _ := json.Marshal(Winsize{Rows: rows, Cols: cols})
	return writeFrameNoDeadline(p.o, FrameResize, b)
}

// Input types b on the terminal of a process started or attached with
// TTY (FrameStdin); an error means the connection is gone and b was not
// sent whole.
func (p *Process) Input(b []byte) error {
	if p.o == nil {
		return errors.New("input: the process is not attached")
	}
	return writeFrameNoDeadline(p.o, FrameStdin, b)
}

// Close abandons the process: the agent kills its process group if it
// still runs (not for an attach, which only detaches).
func (p *Process) Close() {
	if p.o != nil {
		p.o.close()
	}
}

// Attach attaches to the output of a process started by exec, from offset
// (bytes already received); Wait then copies the rest and returns its
// exit. Closing it only detaches. A process the agent does not know is
// *Error of kind not_found.
func (cl *Client) Attach(ctx context.Context, pid int, offset int64) (*Process, error) {
	return cl.attach(ctx, &Request{Op: OpAttach, PID: pid, Offset: offset}, nil)
}

// AttachTerminal attaches to the terminal of a process started by exec
// with TTY, from output offset (bytes): as Attach, and besides what is
// read from stdin (when not nil) is typed on the terminal, Resize resizes
// it, and size (when not nil) is set first. Closing it only detaches. A
// process without a terminal is *Error of kind invalid (field pid); one
// the agent does not know, of kind not_found.
func (cl *Client) AttachTerminal(ctx context.Context, pid int, offset int64, size *Winsize, stdin io.Reader) (*Process, error) {
	return cl.attach(ctx, &Request{Op: OpAttach, PID: pid, Offset: offset, TTY: true, Size: size}, stdin)
}

func (cl *Client) attach(ctx context.Context, req *Request, stdin io.Reader) (*Process, error) {
	pid, offset := req.PID, req.Offset
	o, err := cl.start(ctx, req, cl.stall())
	if err != nil {
		return nil, err
	}
	typ, b, err := o.next()
	if err != nil {
		o.close()
		return nil, ctxErr(ctx, err)
	}
	var st Started
	if typ != FrameStarted || json.Unmarshal(b, &st) != nil {
		o.close()
		return nil, fmt.Errorf("%w: got frame %q, want started", ErrProtocol, typ)
	}
	o.wait = 0
	_ = o.c.SetReadDeadline(time.Time{})
	if stdin != nil {
		go copyStdin(o, stdin, false)
	}
	return &Process{o: o, ctx: ctx, PID: pid, Offset: offset}, nil
}

// Ps lists the processes started by exec (running, and the latest
// finished).
func (cl *Client) Ps(ctx context.Context) ([]ProcInfo, error) {
	var out []ProcInfo
	err := cl.simple(ctx, &Request{Op: OpPs}, cl.stall(), &out)
	return out, err
}

// Signal sends sig to the process group of a running exec'd process.
func (cl *Client) Signal(ctx context.Context, pid, sig int) error {
	return cl.simple(ctx, &Request{Op: OpSignal, PID: pid, Signal: sig}, cl.stall(), nil)
}

// fileReader yields the FrameData payloads of a read or tar_out.
type fileReader struct {
	o   *op
	ctx context.Context
	cur []byte
	eof bool
}

func (r *fileReader) Read(b []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		typ, p, err := r.o.next()
		if err != nil {
			return 0, ctxErr(r.ctx, err)
		}
		if typ != FrameData {
			return 0, fmt.Errorf("%w: got frame %q, want data", ErrProtocol, typ)
		}
		if len(p) == 0 {
			r.eof = true
			continue
		}
		r.cur = p
	}
	n := copy(b, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *fileReader) Close() error { r.o.close(); return nil }

// Open opens the regular file at path for reading. The caller closes the
// reader; a read that ends early returns an error, never a short file with
// io.EOF. A file over maxBytes (0: any size) is *Error of kind too_large;
// a FIFO, socket or device is kind not_regular; a path that resolves into
// ReservedPaths is kind reserved.
func (cl *Client) Open(ctx context.Context, path string, maxBytes int64) (FileStat, io.ReadCloser, error) {
	o, err := cl.start(ctx, &Request{Op: OpRead, Path: path, MaxBytes: maxBytes}, cl.stall())
	if err != nil {
		return FileStat{}, nil, err
	}
	var st FileStat
	if err := o.result(&st); err != nil {
		o.close()
		return FileStat{}, nil, ctxErr(ctx, err)
	}
	return st, &fileReader{o: o, ctx: ctx}, nil
}

// writeFrameNoDeadline writes a frame with no write deadline: stdin of a
// process that does not read it may wait as long as the process runs.
func writeFrameNoDeadline(o *op, typ byte, p []byte) error {
	_ = o.c.SetWriteDeadline(time.Time{})
	return WriteFrame(o.c, typ, p)
}

// sendData streams r as FrameData frames ending with the empty one, each
// frame written within the stall deadline.
func sendData(o *op, r io.Reader) error {
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := o.write(FrameData, buf[:n]); werr != nil {
				return &writeError{werr}
			}
		}
		if err == io.EOF {
			if werr := o.write(FrameData, nil); werr != nil {
				return &writeError{werr}
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// writeError is sendData's failure to write to the agent (as opposed to
// a failure to read the body): the agent stopped reading, and its answer
// may already be on the way.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// upload sends r after req and reads the result into v. The agent reads the
// whole body even when it fails, so the result is read after sending: the
// wait for it has no deadline while the body goes (each frame written has
// the stall deadline), then the work deadline.
func (cl *Client) upload(ctx context.Context, req *Request, r io.Reader, v any) error {
	o, err := cl.start(ctx, req, 0)
	if err != nil {
		return err
	}
	defer o.close()
	sendErr := make(chan error, 1)
	go func() {
		err := sendData(o, r)
		var we *writeError
		switch {
		case errors.As(err, &we):
			// The agent stopped reading: it answered (an error, or a
			// result it gave before the body's end) or it died. Read what
			// it said rather than close under its answer.
			_ = o.c.SetReadDeadline(time.Now().Add(cl.stall()))
		case err != nil:
			o.c.Close() // the agent would wait for the rest of the body
		default:
			// The pending read of the result takes this deadline.
			_ = o.c.SetReadDeadline(time.Now().Add(cl.work()))
		}
		sendErr <- err
	}()
	rerr := o.result(v)
	var ae *Error
	if errors.As(rerr, &ae) || rerr == nil {
		return rerr
	}
	if serr := <-sendErr; serr != nil && rerr != nil {
		return ctxErr(ctx, serr)
	}
	return ctxErr(ctx, rerr)
}

// WriteFile writes r to path (created with mode, default 0644, parents
// created), atomically: the agent writes a temp file and renames it.
func (cl *Client) WriteFile(ctx context.Context, path string, mode uint32, r io.Reader) (FileStat, error) {
	var st FileStat
	err := cl.upload(ctx, &Request{Op: OpWrite, Path: path, Mode: mode}, r, &st)
	return st, err
}

// List lists the directory at path.
func (cl *Client) List(ctx context.Context, path string) ([]Entry, error) {
	var out []Entry
	err := cl.simple(ctx, &Request{Op: OpList, Path: path}, cl.work(), &out)
	return out, err
}

// Remove deletes path; a non-empty directory needs recursive.
func (cl *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return cl.simple(ctx, &Request{Op: OpRemove, Path: path, Recursive: recursive}, cl.work(), nil)
}

// TarOut streams the directory (or file) at path as a tar archive, sparse
// files as PAX 1.0 sparse entries (see writeSparse). With maxBytes > 0 an
// archive estimated larger is *Error of kind too_large, before any data,
// and one that grows past it while streaming ends in an error.
func (cl *Client) TarOut(ctx context.Context, path string, maxBytes int64) (TarOutResult, io.ReadCloser, error) {
	o, err := cl.start(ctx, &Request{Op: OpTarOut, Path: path, MaxBytes: maxBytes}, cl.stall())
	if err != nil {
		return TarOutResult{}, nil, err
	}
	var res TarOutResult
	if err := o.result(&res); err != nil {
		o.close()
		return TarOutResult{}, nil, ctxErr(ctx, err)
	}
	return res, &fileReader{o: o, ctx: ctx}, nil
}

// TarIn extracts the tar archive r into the directory path, creating it.
func (cl *Client) TarIn(ctx context.Context, path string, r io.Reader) (TarResult, error) {
	var res TarResult
	err := cl.upload(ctx, &Request{Op: OpTarIn, Path: path}, r, &res)
	return res, err
}

// Ports lists the TCP ports that programs listen on in the sandbox, one
// entry a port, by port.
func (cl *Client) Ports(ctx context.Context) ([]Port, error) {
	var out []Port
	err := cl.simple(ctx, &Request{Op: OpPorts}, cl.stall(), &out)
	return out, err
}

// Dial connects to TCP port in the sandbox through the agent, whatever the
// sandbox's network rules, and returns the connection: bytes written to it
// reach the program listening on the port and its answers can be read;
// CloseWrite (on the *net.UnixConn underneath) half-closes. Cancelling ctx
// only aborts the dial, not the connection it returns. Nothing listening is
// *Error of kind refused.
func (cl *Client) Dial(ctx context.Context, port int) (net.Conn, DialResult, error) {
	o, err := cl.start(ctx, &Request{Op: OpDial, Port: port}, cl.stall())
	if err != nil {
		return nil, DialResult{}, err
	}
	var res DialResult
	if err := o.result(&res); err != nil {
		o.close()
		return nil, DialResult{}, ctxErr(ctx, err)
	}
	if !o.stop() {
		// ctx ended meanwhile and its AfterFunc closed the connection.
		o.c.Close()
		return nil, DialResult{}, ctx.Err()
	}
	_ = o.c.SetDeadline(time.Time{}) // a proxied connection may idle
	return o.c, res, nil
}
