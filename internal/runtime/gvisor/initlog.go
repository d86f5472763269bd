package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// InitLogMax is the most bytes of a container's init output that one log
// file holds: bundle/init.log has the newest output; when it would pass
// InitLogMax it becomes bundle/init.log.1 (the one before is dropped). The
// host keeps at most 2×InitLogMax per container, whatever the guest writes
// to /proc/1/fd/1 or /proc/1/fd/2.
const InitLogMax = 1 << 20

// initLog drains a container's init output from a FIFO (bundle/init.pipe)
// into bounded log files. runsc's stdio is the FIFO: its write end for
// stdout and stderr, and a read end for stdin, so that a guest's write
// never meets a pipe without a reader while sbxd restarts (it waits while
// the pipe is full instead).
type initLog struct {
	dir  string
	pipe *os.File // read end, drained
	hold *os.File // a write end kept by sbxd until the container is deleted; nil when attached after a restart

	mu   sync.Mutex
	out  *os.File
	size int64
	done chan struct{}
}

func initPipe(bundle string) string { return filepath.Join(bundle, "init.pipe") }

// newInitLog makes bundle/init.pipe and starts draining it. It returns the
// log and the files runsc gets: stdin (a read end) and stdout/stderr (a
// write end); the caller closes those two after runsc returns.
func newInitLog(bundle string) (l *initLog, stdin, stdout *os.File, err error) {
	p := initPipe(bundle)
	_ = os.Remove(p)
	if err := unix.Mkfifo(p, 0o600); err != nil {
		return nil, nil, nil, err
	}
	l, err = openInitLog(bundle)
	if err != nil {
		return nil, nil, nil, err
	}
	// The drain starts once a writer holds the FIFO: a read with no
	// writer yet is EOF, which would end it before the container wrote.
	if l.hold, err = os.OpenFile(p, os.O_WRONLY, 0); err != nil {
		l.pipe.Close()
		return nil, nil, nil, err
	}
	go l.drain()
	if stdin, err = os.OpenFile(p, os.O_RDONLY, 0); err != nil {
		l.close()
		return nil, nil, nil, err
	}
	if stdout, err = os.OpenFile(p, os.O_WRONLY, 0); err != nil {
		stdin.Close()
		l.close()
		return nil, nil, nil, err
	}
	return l, stdin, stdout, nil
}

// attachInitLog drains an existing bundle/init.pipe (a container started
// by an earlier sbxd) until its last writer goes.
func attachInitLog(bundle string) (*initLog, error) {
	l, err := openInitLog(bundle)
	if err != nil {
		return nil, err
	}
	go l.drain()
	return l, nil
}

// openInitLog opens bundle/init.pipe's read end, without draining it yet.
func openInitLog(bundle string) (*initLog, error) {
	// O_NONBLOCK: opening a FIFO's read end does not wait for a writer,
	// and reads go through Go's poller.
	pipe, err := os.OpenFile(initPipe(bundle), os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := pipe.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		pipe.Close()
		return nil, errors.New("init.pipe is not a FIFO")
	}
	return &initLog{dir: bundle, pipe: pipe, done: make(chan struct{})}, nil
}

func (l *initLog) drain() {
	defer close(l.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := l.pipe.Read(buf)
		if n > 0 {
			l.write(buf[:n])
		}
		if err != nil {
			break // io.EOF: no writer is left; or closed
		}
	}
	l.mu.Lock()
	if l.out != nil {
		l.out.Close()
		l.out = nil
	}
	l.mu.Unlock()
}

// write appends b to init.log, rotating it at InitLogMax.
func (l *initLog) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(b) > 0 {
		if l.out == nil || l.size >= InitLogMax {
			if l.out != nil {
				l.out.Close()
				l.out = nil
				_ = os.Rename(filepath.Join(l.dir, "init.log"), filepath.Join(l.dir, "init.log.1"))
			}
			f, err := os.OpenFile(filepath.Join(l.dir, "init.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return
			}
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return
			}
			l.out, l.size = f, fi.Size()
			if l.size >= InitLogMax {
				continue
			}
		}
		n := min(int64(len(b)), InitLogMax-l.size)
		w, err := l.out.Write(b[:n])
		l.size += int64(w)
		if err != nil {
			return
		}
		b = b[n:]
	}
}

// settle waits, best effort and up to a second, for the output runsc wrote
// before it exited to reach init.log (for an error's tail).
func (l *initLog) settle() {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		rc, err := l.pipe.SyscallConn()
		if err != nil {
			return
		}
		n := 0
		_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
		if n == 0 {
			time.Sleep(20 * time.Millisecond) // the last chunk read is being written
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close stops draining and releases the pipe.
func (l *initLog) close() {
	if l.hold != nil {
		l.hold.Close()
	}
	l.pipe.Close()
	<-l.done
}
