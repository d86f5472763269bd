//go:build linux

package agent

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
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

// Server is the in-sandbox side: it accepts connections on a Unix socket and
// runs one operation per connection. When it runs as PID 1 it also reaps
// every orphaned process of the sandbox.
type Server struct {
	ln     net.Listener
	reaper *reaper
	logf   func(format string, args ...any)
}

// NewServer listens on the Unix socket at sock, replacing a stale socket
// file left there by an earlier boot.
func NewServer(sock string, logf func(string, ...any)) (*Server, error) {
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, logf: logf, reaper: newReaper(os.Getpid() == 1)}
	return s, nil
}

// WatchSocket re-creates the socket if something in the sandbox removes
// its file (rm -rf / as root does): it checks every interval.
func (s *Server) WatchSocket(sock string, interval time.Duration) {
	for range time.Tick(interval) {
		if _, err := os.Lstat(sock); err == nil {
			continue
		}
		ln, err := net.Listen("unix", sock)
		if err != nil {
			if s.logf != nil {
				s.logf("agent: re-listen on %s: %v", sock, err)
			}
			continue
		}
		if s.logf != nil {
			s.logf("agent: socket %s was removed; listening again", sock)
		}
		go s.serve(ln)
	}
}

// Serve accepts connections until the listener is closed.
func (s *Server) Serve() error { return s.serve(s.ln) }

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
		go s.handle(c)
	}
}

// Close stops accepting connections.
func (s *Server) Close() error { return s.ln.Close() }

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
	defer nc.Close()
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
		err = readFile(c, req.Path)
	case OpWrite:
		err = writeFile(c, req.Path, req.Mode)
	case OpList:
		err = listDir(c, req.Path)
	case OpRemove:
		err = remove(c, req.Path, req.Recursive)
	case OpTarOut:
		err = tarOut(c, req.Path)
	case OpTarIn:
		err = tarIn(c, req.Path)
	case OpHostname:
		if err = syscall.Sethostname([]byte(req.Hostname)); err != nil {
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
	}
	return Failure{Kind: kind, Message: err.Error()}
}

// --- processes ---

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
	if fi, err := os.Stat(cwd); err != nil {
		return c.fail(&Error{Failure{Kind: FailNotFound, Message: fmt.Sprintf("%s: no such directory", cwd), Field: "cwd"}})
	} else if !fi.IsDir() {
		return c.fail(&Error{Failure{Kind: FailNotDir, Message: fmt.Sprintf("%s: not a directory", cwd), Field: "cwd"}})
	}

	var stdinR, stdinW *os.File
	if req.Stdin {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return c.fail(err)
		}
	} else if stdinR, err = devNull(); err != nil {
		return c.fail(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return c.fail(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return c.fail(err)
	}
	attr := &os.ProcAttr{
		Dir:   cwd,
		Env:   req.Env,
		Files: []*os.File{stdinR, outW, errW},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	start := time.Now()
	pid, waitc, err := s.reaper.start(path, req.Cmd, attr)
	if req.Stdin {
		stdinR.Close()
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		return c.fail(err)
	}
	killGroup := func(sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }

	var pumps sync.WaitGroup
	pump := func(r *os.File, typ byte) {
		defer pumps.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if c.send(typ, buf[:n]) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	pumps.Add(2)
	go pump(outR, FrameStdout)
	go pump(errR, FrameStderr)
	if err := c.sendJSON(FrameStarted, Started{PID: pid}); err != nil {
		killGroup(syscall.SIGKILL)
	}

	// Frames from the host: stdin, signals, and the connection's end, which
	// cancels a process that still runs.
	exited := make(chan struct{})
	cancelled := make(chan struct{})
	go func() {
		var buf []byte
		stdinOpen := stdinW != nil
		defer func() {
			if stdinOpen {
				stdinW.Close()
			}
		}()
		for {
			typ, p, err := ReadFrame(c.c, buf)
			if err != nil {
				select {
				case <-exited:
				default:
					close(cancelled)
				}
				return
			}
			buf = p[:0]
			switch typ {
			case FrameStdin:
				if !stdinOpen {
					continue
				}
				if len(p) == 0 {
					stdinW.Close()
					stdinOpen = false
					continue
				}
				if _, err := stdinW.Write(p); err != nil {
					// The process closed its stdin; drop the rest.
					stdinW.Close()
					stdinOpen = false
				}
			case FrameSignal:
				var sig struct {
					Signal int `json:"signal"`
				}
				if json.Unmarshal(p, &sig) == nil && sig.Signal > 0 {
					killGroup(syscall.Signal(sig.Signal))
				}
			}
		}
	}()

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
		case <-cancelled:
			cancelled = nil
			killGroup(syscall.SIGKILL)
		}
	}
	close(exited)
	dur := time.Since(start)
	// Drain what is left in the pipes, but do not wait for background
	// children that inherited them.
	_ = outR.SetReadDeadline(time.Now().Add(outputGrace))
	_ = errR.SetReadDeadline(time.Now().Add(outputGrace))
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
	return c.sendJSON(FrameExit, ex)
}

// devNull returns /dev/null, opened once and shared as every exec's
// standard input when it has none.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

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

func readFile(c *conn, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return c.fail(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return c.fail(err)
	}
	if fi.IsDir() {
		return c.fail(&Error{Failure{Kind: FailIsDir, Message: path + " is a directory"}})
	}
	if err := c.sendJSON(FrameResult, FileStat{Size: fi.Size(), Mode: uint32(fi.Mode().Perm())}); err != nil {
		return err
	}
	bw := dataWriter{c}
	if _, err := io.CopyBuffer(bw, f, make([]byte, 256<<10)); err != nil {
		// The result frame is sent; the host sees the stream end without
		// its EOF frame and reports a truncated read.
		return err
	}
	return c.send(FrameData, nil)
}

func writeFile(c *conn, path string, mode uint32) error {
	if mode == 0 {
		mode = 0o644
	}
	// Read the whole body before answering, so the host's writer never
	// blocks on a full socket while we fail.
	body := &dataReader{r: c.c}
	fail := func(err error) error {
		_, _ = io.Copy(io.Discard, body)
		return c.fail(err)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fail(&Error{Failure{Kind: FailIsDir, Message: path + " is a directory"}})
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.CreateTemp(dir, ".sbx-write-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = &fs.PathError{Op: "write", Path: path, Err: pe.Err}
		}
		return fail(err)
	}
	n, err := io.CopyBuffer(tmp, body, make([]byte, 256<<10))
	if err == nil {
		err = tmp.Chmod(fs.FileMode(mode & 0o7777))
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = &fs.PathError{Op: "write", Path: path, Err: pe.Err}
		}
		return fail(err)
	}
	return c.sendJSON(FrameResult, FileStat{Size: n, Mode: mode & 0o7777})
}

// Entry is one directory entry of a list.
type Entry struct {
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"`
	ModTime    time.Time `json:"mod_time"`
	LinkTarget string    `json:"link_target,omitempty"`
}

func listDir(c *conn, path string) error {
	des, err := os.ReadDir(path)
	if err != nil {
		return c.fail(err)
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		e := Entry{Name: de.Name(), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime().UTC()}
		switch {
		case fi.Mode().IsRegular():
			e.Type = "file"
		case fi.IsDir():
			e.Type = "dir"
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type = "symlink"
			e.LinkTarget, _ = os.Readlink(filepath.Join(path, de.Name()))
		default:
			e.Type = "other"
		}
		out = append(out, e)
	}
	return c.sendJSON(FrameResult, out)
}

func remove(c *conn, path string, recursive bool) error {
	if _, err := os.Lstat(path); err != nil {
		return c.fail(err)
	}
	var err error
	if recursive {
		err = os.RemoveAll(path)
	} else {
		err = os.Remove(path)
	}
	if err != nil {
		return c.fail(err)
	}
	return c.sendJSON(FrameResult, struct{}{})
}

// tarOut streams path (a directory's contents, or one file) as a tar.
func tarOut(c *conn, root string) error {
	fi, err := os.Lstat(root)
	if err != nil {
		return c.fail(err)
	}
	if err := c.sendJSON(FrameResult, struct{}{}); err != nil {
		return err
	}
	tw := tar.NewWriter(dataWriter{c})
	add := func(path, name string, fi fs.FileInfo) error {
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // sockets and the like are skipped
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX // keeps sub-second mtimes
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	}
	if !fi.IsDir() {
		err = add(root, filepath.Base(root), fi)
	} else {
		err = filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if path == root {
				return nil
			}
			if skipInArchive[path] {
				return filepath.SkipDir // kernel and sbx mounts, not the disk
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			return add(path, rel, fi)
		})
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return err // the host sees no EOF frame: a truncated archive
	}
	return c.send(FrameData, nil)
}

// skipInArchive are mount points that an archive of a directory above
// them leaves out: kernel filesystems and sbx's own.
var skipInArchive = map[string]bool{"/proc": true, "/sys": true, "/dev": true, "/.sbx": true}

// TarResult is the result of tar_in.
type TarResult struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// tarIn extracts a tar stream into the directory root, creating it.
func tarIn(c *conn, root string) error {
	body := &dataReader{r: c.c}
	fail := func(err error) error {
		_, _ = io.Copy(io.Discard, body)
		return c.fail(err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fail(err)
	}
	tr := tar.NewReader(body)
	var res TarResult
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(&Error{Failure{Kind: FailInvalid, Message: "bad tar stream: " + err.Error()}})
		}
		if slices.Contains(strings.Split(hdr.Name, "/"), "..") {
			return fail(&Error{Failure{Kind: FailInvalid, Message: fmt.Sprintf("tar entry %q leaves the target directory", hdr.Name)}})
		}
		name := filepath.Clean("/" + hdr.Name)
		target := filepath.Join(root, name)
		mode := fs.FileMode(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, mode|0o700); err != nil {
				return fail(err)
			}
			_ = os.Chmod(target, mode)
		case tar.TypeReg:
			_ = os.MkdirAll(filepath.Dir(target), 0o755)
			_ = os.Remove(target)
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return fail(err)
			}
			n, err := io.Copy(f, tr)
			f.Close()
			if err != nil {
				return fail(err)
			}
			res.Bytes += n
		case tar.TypeSymlink:
			_ = os.MkdirAll(filepath.Dir(target), 0o755)
			_ = os.Remove(target)
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return fail(err)
			}
		case tar.TypeLink:
			src := filepath.Join(root, filepath.Clean("/"+hdr.Linkname))
			_ = os.Remove(target)
			if err := os.Link(src, target); err != nil {
				return fail(err)
			}
		default:
			continue
		}
		_ = os.Lchown(target, hdr.Uid, hdr.Gid)
		if hdr.Typeflag != tar.TypeSymlink {
			_ = os.Chtimes(target, hdr.ModTime, hdr.ModTime)
		}
		res.Files++
	}
	return c.sendJSON(FrameResult, res)
}
