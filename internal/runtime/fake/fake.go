// Package fake implements runtime.Runtime without isolation: a container is
// the real sbx-agent binary run as an ordinary host process, as the user
// who runs the tests (no root, no namespaces, no cgroups). It lets tests of
// what sits above the runtime (the engine, the server) drive real agents in
// seconds on any machine; internal/runtime/runtimetest holds the behaviour
// it shares with gVisor.
//
// How a Spec maps to a process:
//   - Spec.Args[0] (the agent's path inside the sandbox, e.g.
//     /.sbx/bin/sbx-agent) and the socket dir /.sbx/run are resolved
//     through Spec.Mounts to host paths (a path under no mount resolves
//     under Spec.RootFS). /.sbx/run must be a mount: the agent listens on
//     <its host source>/agent.sock, the very path sbxd dials for a gVisor
//     sandbox (runsc --host-uds=create makes it a host socket there).
//   - The agent runs as `<host agent> --socket <host socket> --control
//     @sbx-fake-... --root <Spec.RootFS>` followed by Spec.Args[1:], with
//     Spec.Env, in its own session (setsid), its working directory
//     Spec.RootFS and its output appended to <bundle>/init.log. --control
//     gives each fake agent its own abstract socket: all of them share the
//     host's network namespace. --root (agent.SetRoot) makes its file
//     operations and an exec's cwd resolve beneath Spec.RootFS as if it
//     were "/" (symlinks included), and keeps set_hostname off the host.
//   - Each container is a file <Root>/<id>.json (pid, the process's start
//     time, creation time, paused), so a new Runtime on the same Root sees
//     the containers an earlier one started, as a restarted sbxd sees
//     runsc's. A recorded pid whose start time no longer matches is a
//     stopped container, never someone else's process.
//
// What it does not do, honestly:
//   - The agent is not isolated: the commands it execs are host binaries
//     (found in the host's PATH) acting on the host's filesystem with the
//     test user's rights (only their working directory is in the rootfs),
//     and Spec.Mounts other than the agent's and /.sbx/run are not made.
//     Commands that tests run on the fake use paths in their own temp dirs.
//   - Pause stops (SIGSTOP) every process of the agent's session, Resume
//     continues them (SIGCONT); a process that starts its own session
//     (setsid) is not paused. Signal goes to the agent alone, as runsc kill
//     signals the init; Delete kills the whole session with SIGKILL.
//   - Checkpoint and Restore return runtime.ErrUnsupported: a host process
//     cannot be saved. The conformance suite expects that error from a
//     runtime that does not claim the capability.
//   - LimitAll records the limits (Limits) without enforcing them;
//     OOMKilled is always false; Stats sums /proc counters of the session.
package fake

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sbxhq/sbx/internal/runtime"
)

// RunDir is the directory, inside a sandbox, of the agent's socket; the
// fake needs it bind-mounted (Spec.Mounts) to a host directory.
const RunDir = "/.sbx/run"

// SocketName is the agent's socket file in RunDir.
const SocketName = "agent.sock"

// DeleteTimeout bounds how long Delete waits for a killed agent to exit
// when the caller's ctx has no earlier deadline.
const DeleteTimeout = 10 * time.Second

// ErrNotExist is returned (wrapped) by Pause, Resume, Signal and Stats for
// a container the runtime does not have or whose agent has exited.
var ErrNotExist = errors.New("no such running container")

// Config configures a fake Runtime.
type Config struct {
	// Root is the state directory (like runsc --root): one <id>.json per
	// container. It is made (0700) if missing.
	Root string
}

// Runtime is the host-process fake. Its methods are safe for concurrent
// use on different ids.
type Runtime struct {
	root string

	mu      sync.Mutex
	exited  map[string]chan struct{} // children of this Runtime: closed once reaped
	cpus    float64
	memory  int64
	limited bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a fake Runtime keeping its state in cfg.Root. It fails only
// when cfg.Root is empty or cannot be made.
func New(cfg Config) (*Runtime, error) {
	if cfg.Root == "" {
		return nil, errors.New("fake runtime: Config.Root is empty")
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, err
	}
	return &Runtime{root: cfg.Root, exited: map[string]chan struct{}{}}, nil
}

// Name implements runtime.Runtime: "fake".
func (r *Runtime) Name() string { return "fake" }

// record is a container's state file.
type record struct {
	ID      string    `json:"id"`
	PID     int       `json:"pid"`
	Start   uint64    `json:"start"` // the process's start time (/proc/PID/stat field 22)
	Created time.Time `json:"created"`
	Bundle  string    `json:"bundle"`
	Paused  bool      `json:"paused"`
}

func validID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return fmt.Errorf("fake runtime: invalid container id %q", id)
	}
	return nil
}

func (r *Runtime) recordPath(id string) string { return filepath.Join(r.root, id+".json") }

// load reads container id's record; (nil, nil) when there is none.
func (r *Runtime) load(id string) (*record, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(r.recordPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("fake runtime: state of %s: %w", id, err)
	}
	return &rec, nil
}

// save writes rec atomically (temp file and rename).
func (r *Runtime) save(rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := r.recordPath(rec.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.recordPath(rec.ID))
}

// hostPath resolves p, a path inside the sandbox, to a host path: through
// the mount with the longest destination that holds it, else under
// RootFS. fromMount tells which.
func hostPath(s *runtime.Spec, p string) (host string, fromMount bool) {
	p = filepath.Clean("/" + p)
	best := -1
	for i, m := range s.Mounts {
		d := filepath.Clean("/" + m.Destination)
		if (p == d || strings.HasPrefix(p, d+"/") || d == "/") && (best < 0 || len(d) > len(filepath.Clean("/"+s.Mounts[best].Destination))) {
			best = i
		}
	}
	if best < 0 {
		return filepath.Join(s.RootFS, p), false
	}
	d := filepath.Clean("/" + s.Mounts[best].Destination)
	return filepath.Join(s.Mounts[best].Source, strings.TrimPrefix(p, d)), true
}

// procStat is what the fake reads of /proc/PID/stat.
type procStat struct {
	state      byte
	sid        int
	utime      uint64 // clock ticks
	stime      uint64
	start      uint64 // clock ticks after boot
	rssPages   int64
	alive      bool // exists and is not a zombie
	readFailed bool
}

func readStat(pid int) procStat {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{readFailed: true}
	}
	// The fields follow the command name in parentheses, which may itself
	// contain ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{readFailed: true}
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 22 {
		return procStat{readFailed: true}
	}
	num := func(k int) uint64 { n, _ := strconv.ParseUint(f[k], 10, 64); return n }
	// f[0] is field 3 (state): field N is f[N-3].
	st := procStat{state: f[0][0], sid: int(num(3)), utime: num(11), stime: num(12), start: num(19)}
	st.rssPages, _ = strconv.ParseInt(f[21], 10, 64)
	st.alive = st.state != 'Z' && st.state != 'X'
	return st
}

// running reports whether rec's agent is the live process it started.
func running(rec *record) bool {
	st := readStat(rec.PID)
	return st.alive && st.start == rec.Start
}

// session lists the live processes of the session led by pid.
func session(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st := readStat(p); st.alive && st.sid == pid {
			pids = append(pids, p)
		}
	}
	return pids
}

// signalSession sends sig to every process of the agent's session, the
// agent first, and scans again until a scan finds no process it has not
// signalled (one that was forking may have added a child).
func signalSession(pid int, sig syscall.Signal) {
	_ = syscall.Kill(pid, sig)
	done := map[int]bool{pid: true}
	for range 10 {
		fresh := false
		for _, p := range session(pid) {
			if !done[p] {
				done[p] = true
				fresh = true
				_ = syscall.Kill(p, sig)
			}
		}
		if !fresh {
			return
		}
	}
}

// Start implements runtime.Runtime: it runs the agent as a host process
// (see the package doc) and returns once the process runs; the agent's
// readiness is the caller's to wait for, as with gVisor. It fails when id
// exists and runs, when /.sbx/run is not a mount, or when the agent's
// binary cannot be started; it then leaves nothing behind.
func (r *Runtime) Start(ctx context.Context, s *runtime.Spec, bundle string) error {
	if err := validID(s.ID); err != nil {
		return err
	}
	if len(s.Args) == 0 {
		return fmt.Errorf("fake runtime: start %s: Spec.Args is empty", s.ID)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec, err := r.load(s.ID); err != nil {
		return err
	} else if rec != nil && running(rec) {
		return fmt.Errorf("fake runtime: start %s: container already exists", s.ID)
	}
	runDir, ok := hostPath(s, RunDir)
	if !ok {
		return fmt.Errorf("fake runtime: start %s: %s is not a mount in the spec (the agent's socket must be on a host dir)", s.ID, RunDir)
	}
	bin, _ := hostPath(s, s.Args[0])
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(bundle, "init.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	args := append([]string{"--socket", filepath.Join(runDir, SocketName),
		"--control", "@sbx-fake-" + s.ID + "-" + hex.EncodeToString(nonce[:]),
		"--root", s.RootFS}, s.Args[1:]...)
	// Not CommandContext: the container outlives the call that starts it.
	var cmd *exec.Cmd
	for try := 0; ; try++ {
		cmd = exec.Command(bin, args...)
		cmd.Dir = s.RootFS
		cmd.Env = s.Env
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		err := cmd.Start()
		if err == nil {
			break
		}
		// ETXTBSY: the agent binary was just written, and a process
		// forked meanwhile (another test's, in this process) still holds
		// its write descriptor until it execs (golang/go#22315). It passes.
		if !errors.Is(err, syscall.ETXTBSY) || try >= 100 {
			return fmt.Errorf("fake runtime: start %s: %w", s.ID, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	rec := &record{ID: s.ID, PID: pid, Start: readStat(pid).start, Created: time.Now().UTC(), Bundle: bundle}
	if err := r.save(rec); err != nil {
		signalSession(pid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("fake runtime: start %s: %w", s.ID, err)
	}
	r.mu.Lock()
	r.exited[s.ID] = exited
	r.mu.Unlock()
	return nil
}

// Attach implements runtime.Runtime: the agent's output already goes to
// <bundle>/init.log, so there is nothing to take over; it fails only for a
// container the runtime does not have.
func (r *Runtime) Attach(id, bundle string) error {
	rec, err := r.load(id)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("fake runtime: attach %s: %w", id, ErrNotExist)
	}
	return nil
}

func (r *Runtime) state(rec *record) runtime.State {
	st := runtime.State{ID: rec.ID, Status: runtime.StatusStopped, PID: rec.PID, Created: rec.Created}
	if running(rec) {
		st.Status = runtime.StatusRunning
		if rec.Paused {
			st.Status = runtime.StatusPaused
		}
	}
	return st
}

// State implements runtime.Runtime: running or paused while the agent
// process lives, stopped once it has exited, missing without a record.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	rec, err := r.load(id)
	if err != nil {
		return runtime.State{}, err
	}
	if rec == nil {
		return runtime.State{ID: id, Status: runtime.StatusMissing}, nil
	}
	return r.state(rec), nil
}

// List implements runtime.Runtime from the records in Root.
func (r *Runtime) List(ctx context.Context) ([]runtime.State, error) {
	ents, err := os.ReadDir(r.root)
	if err != nil {
		return nil, err
	}
	res := []runtime.State{}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		rec, err := r.load(id)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			res = append(res, r.state(rec))
		}
	}
	return res, nil
}

// live loads id's record and fails with ErrNotExist unless its agent runs.
func (r *Runtime) live(op, id string) (*record, error) {
	rec, err := r.load(id)
	if err != nil {
		return nil, err
	}
	if rec == nil || !running(rec) {
		return nil, fmt.Errorf("fake runtime: %s %s: %w", op, id, ErrNotExist)
	}
	return rec, nil
}

// Delete implements runtime.Runtime: SIGKILL to the agent's whole session,
// a wait (at most DeleteTimeout, or ctx's deadline) for the agent to be
// gone, and the record removed. A missing container is fine. It fails when
// the agent outlives the wait; the record then stays.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	rec, err := r.load(id)
	if err != nil {
		return err
	}
	if rec == nil {
		return nil
	}
	if running(rec) {
		signalSession(rec.PID, syscall.SIGKILL)
		ctx, cancel := context.WithTimeout(ctx, DeleteTimeout)
		defer cancel()
		r.mu.Lock()
		exited := r.exited[id]
		r.mu.Unlock()
		for running(rec) {
			if exited != nil {
				select {
				case <-exited:
				case <-ctx.Done():
				}
			} else {
				// Not our child: its parent (or init) reaps it.
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil && running(rec) {
				return fmt.Errorf("fake runtime: delete %s: the agent (pid %d) did not exit: %w", id, rec.PID, ctx.Err())
			}
		}
	}
	r.mu.Lock()
	delete(r.exited, id)
	r.mu.Unlock()
	if err := os.Remove(r.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Pause implements runtime.Runtime with SIGSTOP to every process of the
// agent's session.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	rec, err := r.live("pause", id)
	if err != nil {
		return err
	}
	signalSession(rec.PID, syscall.SIGSTOP)
	waitStopped(ctx, rec.PID)
	rec.Paused = true
	return r.save(rec)
}

// waitStopped waits, up to 2 s or ctx's end, until every thread of every
// process of the agent's session is stopped: a SIGSTOP takes effect a
// moment after kill returns (each thread stops on its way back to user
// mode, later on a loaded machine), and runsc pause returns only once the
// sandbox is paused.
func waitStopped(ctx context.Context, pid int) {
	stopped := func() bool {
		for _, p := range session(pid) {
			tasks, err := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
			if err != nil {
				continue // gone
			}
			for _, t := range tasks {
				b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/stat")
				if err != nil {
					continue
				}
				i := bytes.LastIndexByte(b, ')')
				if i < 0 || i+2 >= len(b) {
					continue
				}
				if st := b[i+2]; st != 'T' && st != 't' && st != 'Z' && st != 'X' {
					return false
				}
			}
		}
		return true
	}
	for deadline := time.Now().Add(2 * time.Second); !stopped() && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(time.Millisecond)
	}
}

// Resume implements runtime.Runtime with SIGCONT to every process of the
// agent's session.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	rec, err := r.live("resume", id)
	if err != nil {
		return err
	}
	signalSession(rec.PID, syscall.SIGCONT)
	rec.Paused = false
	return r.save(rec)
}

// Checkpoint implements runtime.Runtime: a host process cannot be saved,
// so it returns runtime.ErrUnsupported (wrapped) and changes nothing.
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string) error {
	return fmt.Errorf("fake runtime: checkpoint %s: %w", id, runtime.ErrUnsupported)
}

// Restore implements runtime.Runtime: it returns runtime.ErrUnsupported
// (wrapped), as Checkpoint does, and starts nothing.
func (r *Runtime) Restore(ctx context.Context, s *runtime.Spec, bundle, imageDir string, background bool) error {
	return fmt.Errorf("fake runtime: restore %s: %w", s.ID, runtime.ErrUnsupported)
}

// Signal implements runtime.Runtime: sig goes to the agent process alone.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	rec, err := r.live("signal", id)
	if err != nil {
		return err
	}
	if err := syscall.Kill(rec.PID, sig); err != nil {
		return fmt.Errorf("fake runtime: signal %s: %w", id, err)
	}
	return nil
}

// OOMKilled implements runtime.Runtime: the fake enforces no memory limit,
// so it is always false.
func (r *Runtime) OOMKilled(id string) bool { return false }

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// Stats implements runtime.Runtime: CPU time (utime+stime), resident
// memory and the number of processes of the agent's session, from /proc.
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	rec, err := r.live("stats", id)
	if err != nil {
		return runtime.Stats{}, err
	}
	var s runtime.Stats
	page := uint64(os.Getpagesize())
	for _, p := range session(rec.PID) {
		st := readStat(p)
		if st.readFailed {
			continue
		}
		s.CPUNanos += (st.utime + st.stime) * uint64(clockTick)
		s.MemoryBytes += uint64(max(st.rssPages, 0)) * page
		s.Pids++
	}
	return s, nil
}

// LimitAll implements runtime.Runtime by recording the limits (see
// Limits); the fake has no cgroup to enforce them with.
func (r *Runtime) LimitAll(cpus float64, memoryBytes int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cpus, r.memory, r.limited = cpus, memoryBytes, true
	return nil
}

// Limits returns what the last LimitAll recorded: cores, bytes, and
// whether LimitAll was called at all.
func (r *Runtime) Limits() (cpus float64, memoryBytes int64, set bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cpus, r.memory, r.limited
}
