//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/creack/pty"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// reaper collects exit statuses. As PID 1 it waits for any child, so
// orphans re-parented to init do not stay zombies; otherwise it waits for
// each started pid.
type reaper struct {
	pid1    bool
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}

func newReaper(pid1 bool) *reaper {
	r := &reaper{pid1: pid1, waiting: map[int]chan syscall.WaitStatus{}}
	if pid1 {
		sigs := make(chan os.Signal, 64)
		signal.Notify(sigs, syscall.SIGCHLD)
		go func() {
			for range sigs {
				r.reapAll()
			}
		}()
	}
	return r
}

func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		ch := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if ch != nil {
			ch <- ws
		}
	}
}

// start starts a process and returns its pid and a channel that receives
// its wait status once.
func (r *reaper) start(path string, argv []string, attr *os.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	ch := make(chan syscall.WaitStatus, 1)
	r.mu.Lock()
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		r.mu.Unlock()
		return 0, nil, err
	}
	pid := p.Pid
	if r.pid1 {
		r.waiting[pid] = ch
	}
	r.mu.Unlock()
	_ = p.Release()
	if r.pid1 {
		// A SIGCHLD may have come before the registration; reap again.
		go r.reapAll()
	} else {
		go func() {
			var ws syscall.WaitStatus
			for {
				_, err := syscall.Wait4(pid, &ws, 0, nil)
				if err != syscall.EINTR {
					break
				}
			}
			ch <- ws
		}()
	}
	return pid, ch, nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// pathCache remembers where lookPath found a command in a PATH; a hit is
// checked with one stat instead of one per PATH entry.
var pathCache sync.Map // "PATH\x00file" → path

// lookPath finds file like a shell does, in the PATH of the given env.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return lookPathUncached(file, env)
	}
	key := envValue(env, "PATH") + "\x00" + file
	if p, ok := pathCache.Load(key); ok {
		if fi, err := os.Stat(p.(string)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p.(string), nil
		}
		pathCache.Delete(key)
	}
	p, err := lookPathUncached(file, env)
	if err == nil {
		pathCache.Store(key, p)
	}
	return p, err
}

func lookPathUncached(file string, env []string) (string, error) {
	notFound := &Error{Failure{Kind: FailNotFound, Message: fmt.Sprintf("executable file not found in $PATH: %q", file)}}
	isExec := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return &Error{Failure{Kind: FailInvalid, Message: fmt.Sprintf("%s is a directory, not an executable", p)}}
		}
		if fi.Mode()&0o111 == 0 {
			return &Error{Failure{Kind: FailPermission, Message: fmt.Sprintf("%s is not executable", p)}}
		}
		return nil
	}
	if strings.Contains(file, "/") {
		if err := isExec(file); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", &Error{Failure{Kind: FailNotFound, Message: fmt.Sprintf("no such executable: %s", file)}}
			}
			return "", err
		}
		return file, nil
	}
	path := envValue(env, "PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if isExec(p) == nil {
			return p, nil
		}
	}
	return "", notFound
}

// devNull returns /dev/null, opened once and shared as every exec's
// standard input when it has none.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// Output buffering: each process keeps its latest output (stdout and
// stderr interleaved, as they came) so that a caller can attach, detach
// and attach again, across a snapshot or from a copy, without losing
// anything that fits. An attached reader that falls MaxBacklog behind
// holds the process back (the pipes fill); with nobody attached, the oldest
// output is dropped.
const MaxBacklog = 8 << 20

// outChunk is a piece of a process's output.
type outChunk struct {
	typ  byte  // FrameStdout or FrameStderr
	off  int64 // offset of data[0] in the process's whole output
	data []byte
}

// ProcInfo describes a process started by exec, as ps reports it.
type ProcInfo struct {
	PID       int       `json:"pid"`
	Cmd       []string  `json:"cmd"`
	StartTime time.Time `json:"start_time"`
	Running   bool      `json:"running"`
	Exit      *Exit     `json:"exit,omitempty"`
	// TTY is true for a process on a pseudo-terminal (an exec with TTY).
	TTY bool `json:"tty,omitempty"`
	// OutputBytes is how many bytes of output it has produced.
	OutputBytes int64 `json:"output_bytes"`
}

// proc is a process started by exec.
type proc struct {
	pid   int
	cmd   []string
	start time.Time
	// tty is the terminal's master side for a process on a pseudo-terminal
	// (nil otherwise): what an attach with TTY types on and resizes. It
	// stays open while the process runs.
	tty *os.File

	mu      sync.Mutex
	cond    *sync.Cond
	chunks  []outChunk
	kept    int64         // bytes held in chunks
	total   int64         // bytes produced
	readers map[int]int64 // attached readers → offset each has sent
	nextID  int
	exit    *Exit
}

// behind is how far the slowest attached reader is behind (0 if none).
func (p *proc) behind() int64 {
	var most int64
	for _, off := range p.readers {
		most = max(most, p.total-off)
	}
	return most
}

func (p *proc) info() ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProcInfo{PID: p.pid, Cmd: p.cmd, StartTime: p.start, Running: p.exit == nil, Exit: p.exit, TTY: p.tty != nil, OutputBytes: p.total}
}

// write appends output, waiting while an attached reader is MaxBacklog
// behind; with nobody attached, the oldest output goes.
func (p *proc) write(typ byte, b []byte) {
	data := append([]byte(nil), b...)
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.behind() >= MaxBacklog && p.exit == nil {
		p.cond.Wait()
	}
	p.chunks = append(p.chunks, outChunk{typ: typ, off: p.total, data: data})
	p.kept += int64(len(data))
	p.total += int64(len(data))
	for p.kept > MaxBacklog && len(p.chunks) > 1 {
		p.kept -= int64(len(p.chunks[0].data))
		p.chunks = p.chunks[1:]
	}
	p.cond.Broadcast()
}

func (p *proc) finish(ex Exit) {
	p.mu.Lock()
	p.exit = &ex
	p.mu.Unlock()
	p.cond.Broadcast()
}

// procTable holds the processes started by exec: running ones, and the
// latest finished ones (so a caller that attaches after the end still gets
// the output and the exit).
type procTable struct {
	mu    sync.Mutex
	procs map[int]*proc
	done  []int // finished pids, oldest first
}

const keepFinished = 256

func (t *procTable) add(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.procs[p.pid] = p
}

func (t *procTable) get(pid int) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[pid]
}

func (t *procTable) finished(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = append(t.done, pid)
	for len(t.done) > keepFinished {
		delete(t.procs, t.done[0])
		t.done = t.done[1:]
	}
}

func (t *procTable) list() []ProcInfo {
	t.mu.Lock()
	ps := make([]*proc, 0, len(t.procs))
	for _, p := range t.procs {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	out := make([]ProcInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info())
	}
	return out
}

// exec starts req.Cmd, then (unless req.Detach) streams its output on c
// until it exits. If c closes while the process runs, the process group is
// killed — unless the agent is quiescing for a snapshot, in which case the
// process goes on and sbxd attaches again afterwards.
func (s *Server) exec(c *conn, req *Request) error {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return c.fail(&Error{Failure{Kind: FailInvalid, Message: "cmd[0] is empty", Field: "cmd"}})
	}
	path, err := lookPath(req.Cmd[0], req.Env)
	if err != nil {
		f := failureOf(err)
		f.Field = "cmd"
		return c.sendJSON(FrameFail, f)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if fsRoot == "" {
		if fi, err := os.Stat(cwd); err != nil {
			return c.fail(&Error{Failure{Kind: FailNotFound, Message: fmt.Sprintf("%s: no such directory", cwd), Field: "cwd"}})
		} else if !fi.IsDir() {
			return c.fail(&Error{Failure{Kind: FailNotDir, Message: fmt.Sprintf("%s: not a directory", cwd), Field: "cwd"}})
		}
	} else if cwd, err = cwdPath(cwd); err != nil {
		return c.fail(err)
	}

	var stdinR, stdinW, outR, outW, errR, errW *os.File
	attr := &os.ProcAttr{Dir: cwd, Env: req.Env, Sys: &syscall.SysProcAttr{Setpgid: true}}
	if req.TTY {
		// One terminal for stdin, stdout and stderr; the process leads a
		// new session whose controlling terminal it is (job control,
		// Ctrl-C as SIGINT to its foreground group).
		ptm, pts, err := pty.Open()
		if err != nil {
			return c.fail(err)
		}
		if req.Size != nil {
			_ = pty.Setsize(ptm, &pty.Winsize{Rows: req.Size.Rows, Cols: req.Size.Cols})
		}
		stdinR, stdinW, outR, outW = pts, ptm, ptm, pts
		attr.Files = []*os.File{pts, pts, pts}
		attr.Sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if envValue(attr.Env, "TERM") == "" {
			attr.Env = append(attr.Env, "TERM=xterm-256color")
		}
	} else {
		if req.Stdin {
			if stdinR, stdinW, err = os.Pipe(); err != nil {
				return c.fail(err)
			}
		} else if stdinR, err = devNull(); err != nil {
			return c.fail(err)
		}
		if outR, outW, err = os.Pipe(); err != nil {
			return c.fail(err)
		}
		if errR, errW, err = os.Pipe(); err != nil {
			return c.fail(err)
		}
		attr.Files = []*os.File{stdinR, outW, errW}
	}
	start := time.Now()
	pid, waitc, err := s.reaper.start(path, req.Cmd, attr)
	if req.Stdin || req.TTY {
		stdinR.Close()
	}
	outW.Close()
	if errW != nil {
		errW.Close()
	}
	if err != nil {
		outR.Close()
		if errR != nil {
			errR.Close()
		}
		if stdinW != nil && !req.TTY {
			stdinW.Close()
		}
		return c.fail(err)
	}
	p := &proc{pid: pid, cmd: req.Cmd, start: start.UTC(), readers: map[int]int64{}}
	if req.TTY {
		p.tty = stdinW
	}
	p.cond = sync.NewCond(&p.mu)
	s.procs.add(p)
	killGroup := func(sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }

	var pumps sync.WaitGroup
	pump := func(r *os.File, typ byte) {
		defer pumps.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				p.write(typ, buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	pumps.Add(1)
	go pump(outR, FrameStdout)
	if errR != nil {
		pumps.Add(1)
		go pump(errR, FrameStderr)
	}

	// The process's life: timeout, exit, the end of its output.
	go func() {
		var timeout <-chan time.Time
		if req.TimeoutMS > 0 {
			t := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
			defer t.Stop()
			timeout = t.C
		}
		var ws syscall.WaitStatus
		timedOut := false
		for done := false; !done; {
			select {
			case ws = <-waitc:
				done = true
			case <-timeout:
				timedOut = true
				timeout = nil
				killGroup(syscall.SIGKILL)
			}
		}
		dur := time.Since(start)
		// Drain what is left in the pipes, but do not wait for background
		// children that inherited them.
		_ = outR.SetReadDeadline(time.Now().Add(outputGrace))
		if errR != nil {
			_ = errR.SetReadDeadline(time.Now().Add(outputGrace))
		}
		pumps.Wait()
		ex := Exit{DurationMS: dur.Milliseconds(), TimedOut: timedOut}
		switch {
		case timedOut:
			ex.ExitCode = 124
		case ws.Signaled():
			ex.Signal = int(ws.Signal())
			ex.ExitCode = 128 + ex.Signal
		default:
			ex.ExitCode = ws.ExitStatus()
		}
		p.finish(ex)
		s.procs.finished(pid)
	}()

	if err := c.sendJSON(FrameStarted, Started{PID: pid}); err != nil {
		if !s.isQuiescing() && !req.Detach {
			killGroup(syscall.SIGKILL)
		}
		return err
	}
	if req.Detach {
		if stdinW != nil && !req.TTY {
			stdinW.Close()
		}
		return nil
	}

	// Frames from the host: stdin, signals, and the connection's end.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		var buf []byte
		stdinOpen := stdinW != nil
		defer func() {
			if stdinOpen && !req.TTY {
				stdinW.Close()
			}
		}()
		for {
			typ, b, err := ReadFrame(c.c, buf)
			if err != nil {
				return
			}
			buf = b[:0]
			switch typ {
			case FrameStdin:
				if !stdinOpen {
					continue
				}
				if len(b) == 0 {
					// On a terminal the end of input is typed (Ctrl-D);
					// the terminal stays: it carries the output too.
					if !req.TTY {
						stdinW.Close()
					}
					stdinOpen = false
					continue
				}
				if _, err := stdinW.Write(b); err != nil {
					if !req.TTY {
						stdinW.Close()
					}
					stdinOpen = false
				}
			case FrameResize:
				var ws Winsize
				if req.TTY && json.Unmarshal(b, &ws) == nil && ws.Rows > 0 && ws.Cols > 0 {
					_ = pty.Setsize(stdinW, &pty.Winsize{Rows: ws.Rows, Cols: ws.Cols})
				}
			case FrameSignal:
				var sig struct {
					Signal int `json:"signal"`
				}
				if json.Unmarshal(b, &sig) == nil && sig.Signal > 0 {
					killGroup(syscall.Signal(sig.Signal))
				}
			}
		}
	}()
	err = s.stream(c, p, 0, closed)
	if err != nil && !s.isQuiescing() && !(req.TTY && req.Keep) && p.info().Running {
		// The caller went away: the process goes with it (a kept
		// terminal's only detaches).
		killGroup(syscall.SIGKILL)
	}
	return err
}

// stream sends p's output from offset, then its exit, on c. It returns
// when the exit is sent or c fails (closed fires when the host hangs up).
func (s *Server) stream(c *conn, p *proc, offset int64, closed <-chan struct{}) error {
	p.mu.Lock()
	id := p.nextID
	p.nextID++
	p.readers[id] = offset
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.readers, id)
		p.mu.Unlock()
		p.cond.Broadcast()
	}()
	// Wake the waiter below when the host hangs up.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-closed:
			p.cond.Broadcast()
		case <-stop:
		}
	}()
	hungUp := func() bool {
		select {
		case <-closed:
			return true
		default:
			return false
		}
	}
	for {
		p.mu.Lock()
		for p.total <= offset && p.exit == nil && !hungUp() {
			p.cond.Wait()
		}
		if hungUp() {
			p.mu.Unlock()
			return errHungUp
		}
		var out []outChunk
		if len(p.chunks) > 0 && p.chunks[0].off > offset {
			// What the caller has not seen was dropped (nobody was
			// attached while more than MaxBacklog came).
			gap := p.chunks[0].off - offset
			p.mu.Unlock()
			if err := c.sendJSON(FrameGap, Gap{Lost: gap}); err != nil {
				return err
			}
			offset += gap
			p.mu.Lock()
			p.readers[id] = offset
			p.mu.Unlock()
			continue
		}
		for _, ch := range p.chunks {
			if ch.off+int64(len(ch.data)) > offset {
				out = append(out, ch)
			}
		}
		ex := p.exit
		total := p.total
		p.mu.Unlock()
		for _, ch := range out {
			data := ch.data
			if ch.off < offset {
				data = data[offset-ch.off:]
			}
			if err := c.send(ch.typ, data); err != nil {
				return err
			}
			offset += int64(len(data))
		}
		p.mu.Lock()
		p.readers[id] = offset
		p.mu.Unlock()
		p.cond.Broadcast() // the writer may wait for room
		if ex != nil && offset >= total {
			return c.sendJSON(FrameExit, *ex)
		}
	}
}

var errHungUp = errors.New("the host hung up")

// attach streams an exec'd process's output from req.Offset, then its
// exit. Closing the connection only detaches. With req.TTY it also carries
// the terminal's input and resizes (the process must have one).
func (s *Server) attach(c *conn, req *Request) error {
	p := s.procs.get(req.PID)
	if p == nil {
		return c.fail(&Error{Failure{Kind: FailNotFound, Message: fmt.Sprintf("no process %d started by exec (finished ones are kept: the latest %d)", req.PID, keepFinished), Field: "pid"}})
	}
	if req.TTY && p.tty == nil {
		return c.fail(&Error{Failure{Kind: FailInvalid, Message: fmt.Sprintf("process %d is not a terminal: attach to its output instead", req.PID), Field: "pid"}})
	}
	if req.TTY && req.Size != nil && req.Size.Rows > 0 && req.Size.Cols > 0 && p.info().Running {
		_ = pty.Setsize(p.tty, &pty.Winsize{Rows: req.Size.Rows, Cols: req.Size.Cols})
	}
	if err := c.sendJSON(FrameStarted, Started{PID: p.pid}); err != nil {
		return err
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		var buf []byte
		for {
			typ, b, err := ReadFrame(c.c, buf)
			if err != nil {
				return
			}
			buf = b[:0]
			switch typ {
			case FrameSignal:
				var sig struct {
					Signal int `json:"signal"`
				}
				if json.Unmarshal(b, &sig) == nil && sig.Signal > 0 {
					_ = syscall.Kill(-p.pid, syscall.Signal(sig.Signal))
				}
			case FrameStdin:
				// Typed on the terminal; an empty frame (EOF) types nothing:
				// the end of input on a terminal is Ctrl-D.
				if req.TTY && len(b) > 0 && p.info().Running {
					_, _ = p.tty.Write(b)
				}
			case FrameResize:
				var ws Winsize
				if req.TTY && json.Unmarshal(b, &ws) == nil && ws.Rows > 0 && ws.Cols > 0 && p.info().Running {
					_ = pty.Setsize(p.tty, &pty.Winsize{Rows: ws.Rows, Cols: ws.Cols})
				}
			}
		}
	}()
	return s.stream(c, p, req.Offset, closed)
}

// signalProc sends a signal to an exec'd process's group.
func (s *Server) signalProc(c *conn, req *Request) error {
	p := s.procs.get(req.PID)
	if p == nil || !p.info().Running {
		return c.fail(&Error{Failure{Kind: FailNotFound, Message: fmt.Sprintf("no running process %d started by exec", req.PID), Field: "pid"}})
	}
	if err := syscall.Kill(-p.pid, syscall.Signal(req.Signal)); err != nil {
		return c.fail(err)
	}
	return c.sendJSON(FrameResult, struct{}{})
}
