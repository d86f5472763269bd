//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Version is the agent protocol version reported by ping.
const Version = "1"

// outputGrace is how long an exec keeps reading stdout and stderr after its
// process exits, for output still in the pipes. A background child that
// keeps the pipes open (`server &`) does not hold the exec's answer longer.
const outputGrace = 50 * time.Millisecond

// Server is the in-sandbox side: it accepts connections on a Unix socket
// that runsc creates on the host (--host-uds=create) and runs one operation
// per connection. When it runs as PID 1 it also reaps every orphaned
// process of the sandbox.
//
// A gVisor checkpoint cannot save host sockets, so around a snapshot the
// agent quiesces: runsc runs `sbx-agent hook` in the sandbox before the
// save and after the restore or resume (runsc checkpoint
// --save-restore-exec-argv), which asks the agent, over an abstract socket
// inside the sandbox, to close every host socket and later to listen again.
// Processes started by exec keep running meanwhile; sbxd attaches to them
// again afterwards.
type Server struct {
	sock   string
	reaper *reaper
	procs  *procTable
	logf   func(format string, args ...any)

	mu        sync.Mutex
	lns       []net.Listener
	conns     map[net.Conn]bool
	quiescing bool
	// checkpointWait: a goroutine waits on /proc/gvisor/checkpoint to wake
	// the agent when the checkpoint ends (wakeAfterCheckpoint).
	checkpointWait bool
	// wakeMu makes wake's check and listen one step (a SIGUSR1 and the end
	// of a checkpoint may come together).
	wakeMu   sync.Mutex
	ctl      net.Listener
	hostname string // the last set_hostname, when fsRoot is set (the host's is not changed)
}

// ControlSocket is the abstract Unix socket (inside the sandbox) on which
// the agent takes quiesce requests from its hook.
const ControlSocket = "@sbx-agent-control"

// NewServer listens on the Unix socket at sock, replacing a stale socket
// file left there by an earlier boot, and on the abstract socket control
// (ControlSocket in a sandbox).
func NewServer(sock, control string, logf func(string, ...any)) (*Server, error) {
	s := &Server{sock: sock, logf: logf, reaper: newReaper(os.Getpid() == 1),
		procs: &procTable{procs: map[int]*proc{}}, conns: map[net.Conn]bool{}}
	if err := s.listen(); err != nil {
		return nil, err
	}
	ctl, err := net.Listen("unix", control)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s.ctl = ctl
	go s.serveControl(ctl)
	usr1 := make(chan os.Signal, 4)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			if err := s.wake(); err != nil && s.logf != nil {
				s.logf("agent: listen again: %v", err)
			}
		}
	}()
	return s, nil
}

// listen (re)creates the host socket and serves it.
func (s *Server) listen() error {
	_ = os.Remove(s.sock)
	ln, err := net.Listen("unix", s.sock)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	go s.serve(ln)
	return nil
}

func (s *Server) isQuiescing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quiescing
}

// Quiesce closes every host socket: listeners and connections. Exec'd
// processes go on; their output is kept for a later attach.
func (s *Server) Quiesce() { s.quiesceExcept(nil) }

// quiesceLag delays the closing of sockets in tests, to show that the
// host does not go on before they are closed.
var quiesceLag time.Duration

// quiesceExcept closes every host socket but keep (nil: all of them).
func (s *Server) quiesceExcept(keep net.Conn) {
	time.Sleep(quiesceLag)
	s.wakeAfterCheckpoint()
	s.mu.Lock()
	s.quiescing = true
	lns, conns := s.lns, s.conns
	s.lns, s.conns = nil, map[net.Conn]bool{}
	if keep != nil && conns[keep] {
		s.conns[keep] = true
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for c := range conns {
		if c != keep {
			c.Close()
		}
	}
}

// Unquiesce listens on the host socket again (after a resume, or in a copy
// restored from a snapshot, where the socket is a new host file).
func (s *Server) Unquiesce() error {
	if err := s.listen(); err != nil {
		return err
	}
	s.mu.Lock()
	s.quiescing = false
	s.mu.Unlock()
	return nil
}

// wake listens on the host socket again if the agent is quiesced
// (Unquiesce); otherwise it does nothing.
func (s *Server) wake() error {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if !s.isQuiescing() {
		return nil
	}
	return s.Unquiesce()
}

// CheckpointFile is gVisor's /proc/gvisor/checkpoint: a read of it blocks
// until the first checkpoint that ends after the open, then gives
// "resume" (the sandbox that was saved runs on), "restore" (a copy
// restored from it runs) or "error" (the save failed; it runs on). The
// open file is saved with the sandbox. A variable for tests.
var CheckpointFile = "/proc/gvisor/checkpoint"

// wakeAfterCheckpoint makes the agent listen again by itself when the
// checkpoint that follows a quiesce ends, in the sandbox that was saved and
// in every copy restored from it: the host need not signal it (a runsc
// kill, ~60-100 ms of CLI start-up) and only waits for its socket. It
// opens CheckpointFile now, before the quiesce is answered, so the wait is
// for that checkpoint; one wait at a time (a capture that failed before
// its checkpoint leaves its wait for the next one). Without the file (not
// gVisor) it does nothing: SIGUSR1 wakes the agent.
func (s *Server) wakeAfterCheckpoint() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpointWait {
		return
	}
	f, err := os.Open(CheckpointFile)
	if err != nil {
		return
	}
	s.checkpointWait = true
	go func() {
		buf := make([]byte, 16)
		_, err := f.Read(buf)
		f.Close()
		s.mu.Lock()
		s.checkpointWait = false
		s.mu.Unlock()
		if err != nil {
			if s.logf != nil {
				s.logf("agent: wait for the checkpoint: %v", err)
			}
			return
		}
		if err := s.wake(); err != nil && s.logf != nil {
			s.logf("agent: listen again after the checkpoint: %v", err)
		}
	}()
}

// serveControl takes one line a connection from the hook: "save" to
// quiesce, "resume" or "restore" to listen again; it answers "ok" or the
// error.
func (s *Server) serveControl(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			var err error
			switch mode := strings.TrimSpace(string(buf[:n])); mode {
			case "save":
				s.Quiesce()
			case "resume", "restore":
				err = s.Unquiesce()
			default:
				err = fmt.Errorf("unknown mode %q", mode)
			}
			if err != nil {
				fmt.Fprintf(c, "error: %v\n", err)
				return
			}
			fmt.Fprintln(c, "ok")
		}()
	}
}

// Hook is `sbx-agent hook`, which runsc runs inside the sandbox around a
// checkpoint with GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE set to save, restore
// or resume: it relays the mode to the agent and fails if the agent does.
func Hook(control, mode string) error {
	c, err := net.DialTimeout("unix", control, 5*time.Second)
	if err != nil {
		return fmt.Errorf("reach the agent: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintln(c, mode); err != nil {
		return err
	}
	buf := make([]byte, 256)
	n, _ := c.Read(buf)
	if ans := strings.TrimSpace(string(buf[:n])); ans != "ok" {
		return fmt.Errorf("agent: %s", ans)
	}
	return nil
}

// WatchSocket re-creates the socket if something in the sandbox removes
// its file (rm -rf / as root does): it checks every interval.
func (s *Server) WatchSocket(interval time.Duration) {
	for range time.Tick(interval) {
		if s.isQuiescing() {
			continue
		}
		if _, err := os.Lstat(s.sock); err == nil {
			continue
		}
		if err := s.listen(); err != nil {
			if s.logf != nil {
				s.logf("agent: re-listen on %s: %v", s.sock, err)
			}
			continue
		}
		if s.logf != nil {
			s.logf("agent: socket %s was removed; listening again", s.sock)
		}
	}
}

// Wait blocks forever: the agent serves until the sandbox ends.
func (s *Server) Wait() { select {} }

func (s *Server) serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.quiescing {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns[c] = true
		s.mu.Unlock()
		go s.handle(c)
	}
}

// Close stops accepting connections.
func (s *Server) Close() error {
	s.Quiesce()
	return s.ctl.Close()
}

// conn serialises frame writes from the goroutines of one operation.
type conn struct {
	c   net.Conn
	wmu sync.Mutex
}

func (c *conn) send(typ byte, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return WriteFrame(c.c, typ, payload)
}

func (c *conn) sendJSON(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.send(typ, b)
}

func (c *conn) fail(err error) error {
	return c.sendJSON(FrameFail, failureOf(err))
}

func (s *Server) handle(nc net.Conn) {
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	c := &conn{c: nc}
	typ, payload, err := ReadFrame(nc, nil)
	if err != nil {
		return
	}
	if typ != FrameRequest {
		_ = c.fail(&Error{Failure{Kind: FailInvalid, Message: fmt.Sprintf("first frame is %q, want a request", typ)}})
		return
	}
	var req Request
	if err := json.Unmarshal(payload, &req); err != nil {
		_ = c.fail(&Error{Failure{Kind: FailInvalid, Message: "bad request: " + err.Error()}})
		return
	}
	switch req.Op {
	case OpPing:
		err = c.sendJSON(FrameResult, map[string]any{"version": Version, "pid": os.Getpid()})
	case OpExec:
		err = s.exec(c, &req)
	case OpRead:
		err = readFile(c, req.Path, req.MaxBytes)
	case OpWrite:
		err = writeFile(c, req.Path, req.Mode)
	case OpList:
		err = listDir(c, req.Path)
	case OpRemove:
		err = remove(c, req.Path, req.Recursive)
	case OpTarOut:
		err = tarOut(c, req.Path, req.MaxBytes)
	case OpTarIn:
		err = tarIn(c, req.Path)
	case OpAttach:
		err = s.attach(c, &req)
	case OpQuiesce:
		// Every other host socket is closed before the answer, and this
		// one right after it: the host takes EOF on this connection as
		// "no host socket left", and only then lets runsc checkpoint.
		// (Answering first raced the checkpoint: "Cannot save endpoint
		// with bound host socket".)
		s.quiesceExcept(nc)
		if err = c.sendJSON(FrameResult, struct{}{}); err == nil {
			nc.Close()
		}
	case OpPs:
		err = c.sendJSON(FrameResult, s.procs.list())
	case OpSignal:
		err = s.signalProc(c, &req)
	case OpPorts:
		var ports []Port
		if ports, err = listPorts(); err != nil {
			err = c.fail(err)
		} else {
			err = c.sendJSON(FrameResult, ports)
		}
	case OpDial:
		err = dialPort(c, req.Port)
	case OpHostname:
		if fsRoot != "" {
			// A host process (the fake runtime's agent): never the host's name.
			s.mu.Lock()
			s.hostname = req.Hostname
			s.mu.Unlock()
			err = c.sendJSON(FrameResult, struct{}{})
		} else if err = syscall.Sethostname([]byte(req.Hostname)); err != nil {
			err = c.fail(err)
		} else {
			err = c.sendJSON(FrameResult, struct{}{})
		}
	default:
		err = c.fail(&Error{Failure{Kind: FailInvalid, Message: "unknown op " + req.Op}})
	}
	if err != nil && s.logf != nil && !isClosed(err) {
		s.logf("agent: %s: %v", req.Op, err)
	}
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
}

// failureOf classifies err by errno.
func failureOf(err error) Failure {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Failure
	}
	kind := FailInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		kind = FailNotFound
	case errors.Is(err, syscall.ENOTEMPTY): // before ErrExist, which matches it too
		kind = FailNotEmpty
	case errors.Is(err, fs.ErrExist):
		kind = FailExists
	case errors.Is(err, syscall.EISDIR):
		kind = FailIsDir
	case errors.Is(err, syscall.ENOTDIR):
		kind = FailNotDir
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		kind = FailPermission
	case errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.ENOSPC):
		kind = FailNoSpace
	}
	return Failure{Kind: kind, Message: err.Error()}
}

// --- files ---

// FileStat is the result of a read or write.
type FileStat struct {
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// dataReader reads FrameData frames until the empty one.
type dataReader struct {
	r   io.Reader
	buf []byte
	cur []byte
	eof bool
}

func (d *dataReader) Read(p []byte) (int, error) {
	for len(d.cur) == 0 {
		if d.eof {
			return 0, io.EOF
		}
		typ, payload, err := ReadFrame(d.r, d.buf)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		d.buf = payload[:0]
		if typ != FrameData {
			return 0, fmt.Errorf("%w: got frame %q, want data", ErrProtocol, typ)
		}
		if len(payload) == 0 {
			d.eof = true
			continue
		}
		d.cur = payload
	}
	n := copy(p, d.cur)
	d.cur = d.cur[n:]
	return n, nil
}

// dataWriter sends writes as FrameData frames.
type dataWriter struct{ c *conn }

func (w dataWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), MaxFrame)
		if err := w.c.send(FrameData, p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}
