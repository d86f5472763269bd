// Package gvisor implements runtime.Runtime with gVisor's runsc. It owns
// every runsc invocation: each runs under exec.CommandContext with a
// timeout, Cancel and WaitDelay, so a hung runsc cannot hang sbxd.
//
// Flags (see runsc's config/flags.go): --root (state dir), --platform
// (systrap, or kvm where /dev/kvm exists), --overlay2=none (the root's
// writes land in the host overlayfs's upperdir as plain files),
// --host-uds=create (the agent's socket is a host socket) and
// --network=sandbox with a prepared namespace (or none).
package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/internal/runtime"
)

// Config configures the runtime.
type Config struct {
	// Runsc is the runsc binary; default "runsc" from PATH.
	Runsc string
	// Root is runsc's --root state directory.
	Root string
	// Platform is runsc's --platform. Empty chooses by probe (kvm where
	// KVM works, else systrap; see ChoosePlatform); "kvm" is verified by
	// the same probe and refused with ErrKVMUnusable when it does not work.
	Platform string
	// CgroupParent is the cgroup under which each sandbox gets <id>
	// (default "/sbx").
	CgroupParent string
	// DebugLogDir, when set, is given to runsc as --debug-log (one file per
	// command and container) with --debug.
	DebugLogDir string
}

// Runtime drives runsc.
type Runtime struct {
	cfg     Config
	version string // runsc --version's first line
	choice  PlatformChoice
	strays  int // runsc commands of an earlier sbxd that New killed

	logsMu sync.Mutex
	logs   map[string]*initLog // container id → the drain of its init's output
}

var _ runtime.Runtime = (*Runtime)(nil)

// New checks that runsc runs, chooses the platform (a probe of at most
// ProbeTimeout, remembered in cfg.Root/platform.json) and returns a
// Runtime. It fails when runsc is missing or does not run, or with
// ErrKVMUnusable when cfg.Platform is "kvm" and KVM does not work.
func New(cfg Config) (*Runtime, error) {
	if cfg.Runsc == "" {
		cfg.Runsc = "runsc"
	}
	p, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return nil, fmt.Errorf("runsc not found (install it: see README): %w", err)
	}
	cfg.Runsc = p
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "/sbx"
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, err
	}
	r := &Runtime{cfg: cfg, logs: map[string]*initLog{}}
	if r.strays, err = EndStrayVerbs(cfg.Runsc, cfg.Root); err != nil {
		return nil, fmt.Errorf("end the runsc commands an earlier sbxd left: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := r.run(ctx, nil, "--version")
	if err != nil {
		return nil, fmt.Errorf("runsc does not run: %w", err)
	}
	r.version, _, _ = strings.Cut(string(out), "\n")
	r.choice, err = r.ChoosePlatform(ctx, cfg.Platform, cfg.Root)
	if err != nil {
		return nil, err
	}
	r.cfg.Platform = r.choice.Platform
	return r, nil
}

// Strays is how many runsc commands an earlier sbxd on the same root left
// running when it died, which New killed (see EndStrayVerbs).
func (r *Runtime) Strays() int { return r.strays }

// Choice is the platform in use and why it was chosen.
func (r *Runtime) Choice() PlatformChoice { return r.choice }

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "runsc/" + r.cfg.Platform }

// Platform is the runsc platform in use.
func (r *Runtime) Platform() string { return r.cfg.Platform }

// ExitError is a runsc command that failed; Stderr holds its last output.
type ExitError struct {
	Args   []string
	Err    error
	Stderr string
	// verbDeadline: the verb's own deadline (verbTimeout) cut it, while
	// the caller's context was still live.
	verbDeadline bool
}

// Unwrap returns the command's error: errors.Is(err,
// context.DeadlineExceeded) holds when a deadline cut it.
func (e *ExitError) Unwrap() error { return e.Err }

// Is reports runtime.ErrUnresponsive for a command that the verb's own
// deadline cut (not the caller's: see runNet).
func (e *ExitError) Is(target error) bool {
	return target == runtime.ErrUnresponsive && e.verbDeadline
}

func (e *ExitError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = msg[i+1:]
	}
	return fmt.Sprintf("runsc %s: %v: %s", strings.Join(e.Args, " "), e.Err, msg)
}

func (r *Runtime) globalFlags(netns bool) []string {
	network := "none"
	if netns {
		network = "sandbox"
	}
	flags := []string{
		"--root=" + r.cfg.Root,
		"--platform=" + r.cfg.Platform,
		"--overlay2=none",
		"--host-uds=create",
		"--network=" + network,
	}
	if r.cfg.DebugLogDir != "" {
		flags = append(flags, "--debug", "--debug-log="+r.cfg.DebugLogDir+"/")
	}
	return flags
}

// stdio is what a detached runsc command hands to the sandbox: the init's
// stdin and its stdout and stderr (one file); tail returns the end of what
// was written to them, for an error.
type stdio struct {
	in, out *os.File
	tail    func() string
}

// run runs runsc with global flags (netns given) and args; it returns stdout.
// io, when set, becomes the command's stdio (runsc run -detach hands its
// stdio to the sandbox, so its stdout is never read to the end).
func (r *Runtime) run(ctx context.Context, io *stdio, args ...string) ([]byte, error) {
	return r.runNet(ctx, false, io, args...)
}

func (r *Runtime) runNet(ctx context.Context, netns bool, io *stdio, args ...string) ([]byte, error) {
	full := append(r.globalFlags(netns), args...)
	if args[0] == "--version" {
		full = args
	}
	// Every verb has its own deadline, which holds even when the caller's
	// ctx has none (context.WithoutCancel): no runsc call waits forever.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.verbTimeout(args))
	defer cancel()
	cmd := exec.CommandContext(ctx, r.cfg.Runsc, full...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	if io != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = io.in, io.out, io.out
	} else {
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
	}
	if err := cmd.Run(); err != nil {
		cut := ctx.Err() != nil && parent.Err() == nil
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		tail := stderr.String()
		if io != nil {
			tail = io.tail()
		}
		return nil, &ExitError{Args: args, Err: err, Stderr: tail, verbDeadline: cut}
	}
	return stdout.Bytes(), nil
}

// Deadlines of runsc verbs. A quick verb (state, kill, pause, resume,
// delete, list, events) answers in well under a second on a healthy
// sandbox; a boot (run) reaches its init in about one; checkpoint and
// restore move the sandbox's memory, so theirs grow with it.
const (
	QuickTimeout = 10 * time.Second
	BootTimeout  = 60 * time.Second
	// CaptureTimeout is the base deadline of checkpoint and restore, to
	// which CapturePerGiB is added per GiB of the sandbox's memory limit.
	CaptureTimeout = 30 * time.Second
	CapturePerGiB  = 20 * time.Second
)

// verbTimeout is the deadline of `runsc args...`.
func (r *Runtime) verbTimeout(args []string) time.Duration {
	switch args[0] {
	case "run":
		return BootTimeout
	case "checkpoint", "restore":
		return CaptureTimeout + time.Duration(float64(CapturePerGiB)*r.memoryGiB(args[len(args)-1]))
	case "--version":
		return 30 * time.Second
	}
	return QuickTimeout
}

// memoryGiB is container id's memory limit in GiB, from its cgroup (the
// restore's spec is written before runsc reads it); 4 when unknown.
func (r *Runtime) memoryGiB(id string) float64 {
	b, err := os.ReadFile(r.cgroupFile("memory", id, "memory.limit_in_bytes"))
	if err != nil {
		b, err = os.ReadFile(r.cgroupFile("memory", id, "memory.max"))
	}
	if n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && perr == nil && n > 0 && n < 1<<50 {
		return float64(n) / (1 << 30)
	}
	return 4
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// capabilities are those of root in the sandbox: Docker's default set plus
// CAP_SYS_ADMIN (sethostname, mounts inside the sandbox). gVisor implements
// them in its own kernel; none reaches the host's.
var capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE", "CAP_SYS_ADMIN",
}

// ociSpec turns s into an OCI runtime spec (runtime-spec v1.2).
func (r *Runtime) ociSpec(s *runtime.Spec) *specs.Spec {
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	for _, m := range s.Mounts {
		opts := []string{"rbind", "rw"}
		if m.ReadOnly {
			opts = []string{"rbind", "ro"}
		}
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	ns := []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: s.NetNS}}
	period := uint64(100000)
	res := &specs.LinuxResources{}
	if s.CPUs > 0 {
		quota := int64(math.Round(s.CPUs * float64(period)))
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if s.MemoryBytes > 0 {
		limit := s.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	if s.PidsLimit > 0 {
		res.Pids = &specs.LinuxPids{Limit: s.PidsLimit}
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: s.Args,
			Env:  s.Env,
			Cwd:  "/",
			User: specs.User{UID: 0, GID: 0},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: capabilities, Effective: capabilities, Permitted: capabilities,
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1048576, Soft: 1048576}},
		},
		Root:     &specs.Root{Path: s.RootFS},
		Hostname: s.Hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			Namespaces:  ns,
			CgroupsPath: r.cfg.CgroupParent + "/" + s.ID,
			Resources:   res,
		},
	}
}

// writeBundle writes bundle/config.json.
func (r *Runtime) writeBundle(s *runtime.Spec, bundle string) error {
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r.ociSpec(s), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
}

// runDetached writes the bundle and runs a runsc command that leaves the
// container running (run or restore --detach), its init's output drained
// into bounded logs (initLog). A failed command's container is deleted.
func (r *Runtime) runDetached(ctx context.Context, s *runtime.Spec, bundle string, args ...string) error {
	if err := r.writeBundle(s, bundle); err != nil {
		return err
	}
	r.closeLog(s.ID)
	l, in, out, err := newInitLog(bundle)
	if err != nil {
		return fmt.Errorf("init output pipe: %w", err)
	}
	r.logsMu.Lock()
	r.logs[s.ID] = l
	r.logsMu.Unlock()
	_, err = r.runNet(ctx, s.NetNS != "", &stdio{in: in, out: out, tail: func() string {
		l.settle()
		return tailFile(filepath.Join(bundle, "init.log"), 2048)
	}}, args...)
	in.Close()
	out.Close()
	if err != nil {
		// A failed run can leave a created container behind.
		_ = r.Delete(context.WithoutCancel(ctx), s.ID)
	}
	return err
}

// closeLog stops draining container id's init output.
func (r *Runtime) closeLog(id string) {
	r.logsMu.Lock()
	l := r.logs[id]
	delete(r.logs, id)
	r.logsMu.Unlock()
	if l != nil {
		l.close()
	}
}

// Attach implements runtime.Runtime: it drains the init output of a
// container that an earlier sbxd started (bundle/init.pipe).
func (r *Runtime) Attach(id, bundle string) error {
	r.logsMu.Lock()
	_, ok := r.logs[id]
	r.logsMu.Unlock()
	if ok {
		return nil
	}
	l, err := attachInitLog(bundle)
	if err != nil {
		return fmt.Errorf("drain the init output of %s: %w", id, err)
	}
	r.logsMu.Lock()
	defer r.logsMu.Unlock()
	if _, ok := r.logs[id]; ok {
		go l.close()
		return nil
	}
	r.logs[id] = l
	return nil
}

// Checkpoint implements runtime.Runtime with `runsc checkpoint
// --leave-running --direct` (O_DIRECT pages: PLATFORM.md measured it
// faster on both sides).
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string) error {
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return err
	}
	_, err := r.run(ctx, nil, "checkpoint", "--leave-running", "--direct", "--image-path", imageDir, id)
	return err
}

// Restore implements runtime.Runtime with `runsc restore --direct --detach`
// (and --background: pages load after restore returns; the image must be
// uncompressed, which checkpoints here are).
func (r *Runtime) Restore(ctx context.Context, s *runtime.Spec, bundle, imageDir string, background bool) error {
	ctx, cancel := context.WithTimeout(ctx, CaptureTimeout+time.Duration(float64(CapturePerGiB)*float64(s.MemoryBytes)/(1<<30)))
	defer cancel()
	args := []string{"restore", "--direct", "--detach"}
	if background {
		args = append(args, "--background")
	}
	return r.runDetached(ctx, s, bundle, append(args, "--image-path", imageDir, "--bundle", bundle, s.ID)...)
}

// Signal implements runtime.Runtime with `runsc kill ID SIG`.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := r.run(ctx, nil, "kill", id, strconv.Itoa(int(sig)))
	return err
}

// Start implements runtime.Runtime: it writes bundle/config.json and runs
// `runsc run --detach`. The init's stdout and stderr go to bundle/init.log,
// bounded (InitLogMax).
func (r *Runtime) Start(ctx context.Context, s *runtime.Spec, bundle string) error {
	return r.runDetached(ctx, s, bundle, "run", "--detach", "--bundle", bundle, s.ID)
}

type stateJSON struct {
	ID      string    `json:"id"`
	Status  string    `json:"status"`
	Pid     int       `json:"pid"`
	Created time.Time `json:"created"`
}

// state converts runsc's answer. runsc judges a sandbox alive with
// kill(pid, 0), which succeeds for a zombie: when the sandbox process died
// (an OOM kill) and nobody has reaped it yet, the sandbox is stopped.
func (s stateJSON) state() runtime.State {
	st := runtime.State{ID: s.ID, Status: runtime.Status(s.Status), PID: s.Pid, Created: s.Created}
	if (st.Status == runtime.StatusRunning || st.Status == runtime.StatusPaused) && st.PID > 0 && !processAlive(st.PID) {
		st.Status = runtime.StatusStopped
	}
	return st
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself
	// contain ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

func isNotExist(err error) bool {
	var ee *ExitError
	if !errors.As(err, &ee) {
		return false
	}
	s := ee.Stderr
	return strings.Contains(s, "does not exist") || strings.Contains(s, "no such file or directory") ||
		strings.Contains(s, "not found")
}

// State implements runtime.Runtime.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	out, err := r.run(ctx, nil, "state", id)
	if err != nil {
		if isNotExist(err) {
			return runtime.State{ID: id, Status: runtime.StatusMissing}, nil
		}
		return runtime.State{}, err
	}
	var st stateJSON
	if err := json.Unmarshal(out, &st); err != nil {
		return runtime.State{}, fmt.Errorf("runsc state %s: %w", id, err)
	}
	return st.state(), nil
}

// List implements runtime.Runtime. It asks `runsc list` first, one command
// for every container, under listTimeout. `runsc list` asks every sandbox,
// so one stopped with SIGSTOP holds it up: then List falls back to the
// state files in the root ("<id>_sandbox:<sandbox id>.state"), each asked
// with `runsc state` on its own, listWorkers at once, each under
// QuickTimeout. One that does not answer is StatusUnresponsive; one whose
// state went meanwhile is left out.
func (r *Runtime) List(ctx context.Context) ([]runtime.State, error) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	out, err := r.run(lctx, nil, "list", "--format=json")
	cancel()
	if err == nil {
		var sts []stateJSON
		if len(bytes.TrimSpace(out)) > 0 && !bytes.Equal(bytes.TrimSpace(out), []byte("null")) {
			if err := json.Unmarshal(out, &sts); err != nil {
				return nil, fmt.Errorf("runsc list: %w", err)
			}
		}
		res := make([]runtime.State, 0, len(sts))
		for _, s := range sts {
			res = append(res, s.state())
		}
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, err
	}
	return r.listEach(ctx)
}

// listEach is List one container at a time (see List).
func (r *Runtime) listEach(ctx context.Context) ([]runtime.State, error) {
	files, err := filepath.Glob(filepath.Join(r.cfg.Root, "*_sandbox:*.state"))
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(files))
	for _, f := range files {
		if id, _, ok := strings.Cut(filepath.Base(f), "_sandbox:"); ok && id != "" {
			ids = append(ids, id)
		}
	}
	res := make([]runtime.State, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, listWorkers)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res[i], errs[i] = r.State(ctx, id)
			if errors.Is(errs[i], runtime.ErrUnresponsive) {
				res[i], errs[i] = runtime.State{ID: id, Status: runtime.StatusUnresponsive}, nil
			}
		}()
	}
	wg.Wait()
	out := res[:0]
	for i, st := range res {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if st.Status != runtime.StatusMissing {
			out = append(out, st)
		}
	}
	return out, nil
}

// listWorkers is how many `runsc state` List runs at once when `runsc
// list` did not answer; listTimeout is how long List waits for `runsc list`
// (it answers in well under a second for hundreds of containers).
const (
	listWorkers = 8
	listTimeout = 5 * time.Second
)

// Delete implements runtime.Runtime: delete --force, which kills a running
// or paused sandbox; then the container's cgroups go (runsc leaves them
// after a failed boot).
func (r *Runtime) Delete(ctx context.Context, id string) error {
	r.closeLog(id)
	if r.exists(id) {
		// delete --force stops a running or paused sandbox itself (SIGKILL
		// to its sandbox and gofer processes, then waits for them): no
		// runsc kill before it, which cost a runsc start-up (~40 ms) on
		// every stop, restore and suspend.
		_, err := r.run(ctx, nil, "delete", "--force", id)
		if err != nil && !isNotExist(err) {
			// A sandbox that does not answer (stopped with SIGSTOP,
			// frozen) holds runsc's delete up until its deadline: kill
			// its processes through its cgroups, which needs nothing from
			// it, then delete its state again.
			r.removeCgroups(id)
			if _, err2 := r.run(ctx, nil, "delete", "--force", id); err2 != nil && !isNotExist(err2) {
				return fmt.Errorf("%w (and after its processes were killed: %v)", err, err2)
			}
		}
	}
	r.removeCgroups(id)
	return nil
}

// removeCgroups kills what is left in the cgroups of container id and
// removes them, under every cgroup v1 controller or the v2 hierarchy;
// missing ones are fine. Processes can be left there without runsc state:
// a runsc run or restore that an sbxd crash cut short after it started the
// sandbox and gofer processes but before it saved the container's state.
// Such processes are invisible to runsc list, kill and delete.
func (r *Runtime) removeCgroups(id string) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", r.cfg.CgroupParent, id))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", r.cfg.CgroupParent, id))
	for _, d := range dirs {
		if err := unix.Rmdir(d); err == nil || !errors.Is(err, unix.EBUSY) {
			continue
		}
		// EBUSY: processes are left in it. Kill them and wait (bounded)
		// until the kernel has reaped them, then remove the cgroup.
		for i := 0; i < 50; i++ {
			pids := cgroupPids(d)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = unix.Rmdir(d)
	}
}

// cgroupPids lists the processes of cgroup dir d (its cgroup.procs file).
func cgroupPids(d string) []int {
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// EndStrayVerbs kills, with SIGKILL, the runsc commands (runsc run,
// restore, checkpoint, delete, …: processes whose argv[0] is runsc's path
// and whose flags name root with --root=) that an earlier sbxd on root left
// running when it died, and waits up to 5 s until they are gone. Call it
// before anything else reads runsc's state on root: a runsc restore that
// outlived a crashed sbxd would otherwise start a container after the next
// sbxd decided that the sandbox is suspended. The sandbox and gofer
// processes (argv[0] "runsc-sandbox", "runsc-gofer") are not touched. It
// returns how many it killed; an error only when /proc cannot be read.
func EndStrayVerbs(runsc, root string) (int, error) {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	var killed []int
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", de.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if isStrayVerb(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), runsc, root) {
			if unix.Kill(pid, unix.SIGKILL) == nil {
				killed = append(killed, pid)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range killed {
		for time.Now().Before(deadline) && unix.Kill(pid, 0) == nil && !isZombie(pid) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return len(killed), nil
}

// isStrayVerb reports whether argv is a runsc command on root: argv[0] is
// runsc (the path sbxd runs) and one argument is --root=root.
func isStrayVerb(argv []string, runsc, root string) bool {
	if len(argv) < 2 || argv[0] != runsc {
		return false
	}
	for _, a := range argv[1:] {
		if a == "--root="+root {
			return true
		}
	}
	return false
}

// isZombie reports whether pid has exited but is not reaped yet (state Z
// in /proc/PID/stat); a stray verb's parent is gone, so init reaps it.
func isZombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// exists reports whether runsc has state for container id in its root
// (files "<id>_sandbox:<sandbox id>.state"); when unsure, true.
func (r *Runtime) exists(id string) bool {
	m, err := filepath.Glob(filepath.Join(r.cfg.Root, id+"_sandbox:*"))
	return err != nil || len(m) > 0
}

// Pause implements runtime.Runtime.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	_, err := r.run(ctx, nil, "pause", id)
	return err
}

// Resume implements runtime.Runtime.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	_, err := r.run(ctx, nil, "resume", id)
	return err
}

// cgroupFile returns the path of a cgroup control file of sandbox id,
// under cgroup v1 (controller dir) or v2.
func (r *Runtime) cgroupFile(controller, id, file string) string {
	v1 := filepath.Join("/sys/fs/cgroup", controller, r.cfg.CgroupParent, id, file)
	if _, err := os.Stat(filepath.Dir(v1)); err == nil {
		return v1
	}
	return filepath.Join("/sys/fs/cgroup", r.cfg.CgroupParent, id, file)
}

// LimitAll implements runtime.Runtime on the parent cgroup (CgroupParent):
// cpu.cfs_quota_us and memory.limit_in_bytes under cgroup v1, cpu.max and
// memory.max under v2. The parent is made if missing. A limit below what
// the containers use now is refused by the kernel: the error says so.
func (r *Runtime) LimitAll(cpus float64, memoryBytes int64) error {
	const period = 100000
	quota := int64(cpus * period)
	v1 := filepath.Join("/sys/fs/cgroup", "memory")
	if _, err := os.Stat(v1); err == nil {
		for _, c := range []string{"cpu", "memory"} {
			if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", c, r.cfg.CgroupParent), 0o755); err != nil {
				return err
			}
		}
		if err := writeCgroup(filepath.Join("/sys/fs/cgroup", "cpu", r.cfg.CgroupParent, "cpu.cfs_period_us"), strconv.Itoa(period)); err != nil {
			return err
		}
		if err := writeCgroup(filepath.Join("/sys/fs/cgroup", "cpu", r.cfg.CgroupParent, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
		return writeCgroup(filepath.Join("/sys/fs/cgroup", "memory", r.cfg.CgroupParent, "memory.limit_in_bytes"), strconv.FormatInt(memoryBytes, 10))
	}
	dir := filepath.Join("/sys/fs/cgroup", r.cfg.CgroupParent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = writeCgroup("/sys/fs/cgroup/cgroup.subtree_control", "+cpu +memory")
	if err := writeCgroup(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, period)); err != nil {
		return err
	}
	return writeCgroup(filepath.Join(dir, "memory.max"), strconv.FormatInt(memoryBytes, 10))
}

func writeCgroup(p, v string) error {
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		return fmt.Errorf("cgroup %s = %s: %w", p, v, err)
	}
	return nil
}

// OOMKilled implements runtime.Runtime from the memory cgroup's oom_kill
// counter (memory.oom_control in v1, memory.events in v2).
func (r *Runtime) OOMKilled(id string) bool {
	for _, p := range []string{r.cgroupFile("memory", id, "memory.oom_control"), r.cgroupFile("memory", id, "memory.events")} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				f.Close()
				return n > 0
			}
		}
		f.Close()
	}
	return false
}

// Stats implements runtime.Runtime from the container's cgroup: under
// cgroup v1 cpuacct.usage (ns), memory.usage_in_bytes and pids.current;
// under v2 cpu.stat's usage_usec, memory.current and pids.current (each
// found by cgroupFile). The sandbox's cgroup holds the sentry and the
// gofer, so CPU is what the whole sandbox used. A few file reads, cheap
// enough for the usage meter to sample every sandbox (BenchmarkCgroupStats,
// BenchmarkUsageSample); when the cgroup cannot be read, `runsc events
// --stats`.
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if s, err := r.cgroupStats(id); err == nil {
		return s, nil
	}
	return r.eventsStats(ctx, id)
}

// cgroupStats reads container id's counters from its cgroup files (see
// Stats): the v1 file of each counter, else the v2 one. The pids counter
// is optional.
func (r *Runtime) cgroupStats(id string) (runtime.Stats, error) {
	var s runtime.Stats
	cpu, err := readCgroupUint(r.cgroupFile("cpuacct", id, "cpuacct.usage"))
	if err != nil {
		// cgroup v2: cpu.stat's usage_usec.
		p := r.cgroupFile("cpu", id, "cpu.stat")
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return s, rerr
		}
		usec, ok := uint64(0), false
		for line := range strings.Lines(string(b)) {
			if v, found := strings.CutPrefix(line, "usage_usec "); found {
				usec, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				ok = err == nil
			}
		}
		if !ok {
			return s, fmt.Errorf("%s: no usage_usec", p)
		}
		cpu = usec * 1000
	}
	mem, err := readCgroupUint(r.cgroupFile("memory", id, "memory.usage_in_bytes"))
	if err != nil {
		if mem, err = readCgroupUint(r.cgroupFile("memory", id, "memory.current")); err != nil {
			return s, err
		}
	}
	pids, _ := readCgroupUint(r.cgroupFile("pids", id, "pids.current"))
	return runtime.Stats{CPUNanos: cpu, MemoryBytes: mem, Pids: pids}, nil
}

// readCgroupUint reads a cgroup file holding one unsigned number.
func readCgroupUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// eventsStats reads container id's counters with `runsc events --stats`.
func (r *Runtime) eventsStats(ctx context.Context, id string) (runtime.Stats, error) {
	out, err := r.run(ctx, nil, "events", "--stats", id)
	if err != nil {
		return runtime.Stats{}, err
	}
	var ev struct {
		Data struct {
			CPU struct {
				Usage struct {
					Total uint64 `json:"total"`
				} `json:"usage"`
			} `json:"cpu"`
			Memory struct {
				Usage struct {
					Usage uint64 `json:"usage"`
				} `json:"usage"`
			} `json:"memory"`
			Pids struct {
				Current uint64 `json:"current"`
			} `json:"pids"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &ev); err != nil {
		return runtime.Stats{}, fmt.Errorf("runsc events --stats: %w", err)
	}
	return runtime.Stats{CPUNanos: ev.Data.CPU.Usage.Total, MemoryBytes: ev.Data.Memory.Usage.Usage, Pids: ev.Data.Pids.Current}, nil
}
