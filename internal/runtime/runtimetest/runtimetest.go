// Package runtimetest is the conformance suite of runtime.Runtime: the
// behaviour the engine relies on, checked the same way against every
// implementation (the host-process fake in internal/runtime/fake, gVisor
// in internal/runtime/gvisor). Each container it starts runs the real
// sbx-agent, reached with the real host client (agent.Client) on the host
// socket the engine would dial.
package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/agent"
	"github.com/sbxhq/sbx/internal/runtime"
)

// Harness is what the suite needs of the runtime under test.
type Harness struct {
	// Runtime is the runtime under test.
	Runtime runtime.Runtime
	// Spec returns the spec of a new container id whose init is the
	// sbx-agent (Args[0], the agent's path inside the sandbox, with no
	// further arguments), the bundle directory to start it in and the host
	// path of the agent's socket. The suite may append arguments to Args
	// and replace Args[0].
	Spec func(t *testing.T, id string) (spec *runtime.Spec, bundle, socket string)
	// Env is the environment of commands the suite execs through the agent
	// (their PATH must find echo and sleep).
	Env []string
	// Checkpoint is true when the runtime can Checkpoint and Restore; when
	// false both must fail with runtime.ErrUnsupported.
	Checkpoint bool
	// BootTimeout bounds a boot: Start plus the agent's first answer.
	BootTimeout time.Duration
}

// Run runs the conformance suite as subtests of t; newHarness is called
// once per subtest, with the subtest's t (register cleanups on it).
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"StartExecDelete", testStartExecDelete},
		{"DeleteMissing", testDeleteMissing},
		{"TwoContainers", testTwoContainers},
		{"PauseResume", testPauseResume},
		{"SignalKillsInit", testSignalKillsInit},
		{"AgentNeverAnswers", testAgentNeverAnswers},
		{"MissingInit", testMissingInit},
		{"CheckpointRestore", testCheckpointRestore},
		{"Stats", testStats},
		{"MissingContainerOps", testMissingContainerOps},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t)) })
	}
}

// NewID returns a fresh container id ("rtt-" and 12 hex digits).
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "rtt-" + hex.EncodeToString(b[:])
}

var (
	agentOnce sync.Once
	agentDir  string
	agentErr  error
)

// AgentBinary builds the static sbx-agent (CGO_ENABLED=0, as install.sh
// does) once per test process and returns the directory that holds it as
// "sbx-agent" (remove it with Cleanup). It fails t when the build fails.
func AgentBinary(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbx-rtt-agent-")
		if err != nil {
			agentErr = err
			return
		}
		// -buildvcs=false: the test binary needs no version stamp, and
		// git refuses to read a checkout another user owns (a root-owned
		// clone tested as an unprivileged user).
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", filepath.Join(dir, "sbx-agent"), "github.com/sbxhq/sbx/cmd/sbx-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = errors.New("build sbx-agent: " + err.Error() + ": " + string(out))
			return
		}
		agentDir = dir
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentDir
}

// Cleanup removes what AgentBinary built; call it from TestMain after
// m.Run.
func Cleanup() {
	if agentDir != "" {
		_ = os.RemoveAll(agentDir)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// boot starts a container and waits for its agent, as the engine boots a
// sandbox; the container is deleted when t ends.
func boot(t *testing.T, h *Harness) (spec *runtime.Spec, bundle, sock string, cl *agent.Client) {
	t.Helper()
	spec, bundle, sock = h.Spec(t, NewID())
	ctx := ctxFor(t, h.BootTimeout)
	if err := h.Runtime.Start(ctx, spec, bundle); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Runtime.Delete(context.Background(), spec.ID); err != nil {
			t.Errorf("cleanup: delete %s: %v", spec.ID, err)
		}
	})
	cl = agent.NewClient(sock, 0)
	t.Cleanup(cl.Close)
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatalf("the agent of a started container: %v", err)
	}
	return spec, bundle, sock, cl
}

// echo runs `echo word` through cl and checks its output and exit code.
func echo(t *testing.T, h *Harness, cl *agent.Client, word string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	p, err := cl.Start(ctx, &agent.Request{Cmd: []string{"echo", word}, Env: h.Env}, nil)
	if err != nil {
		t.Fatalf("exec echo: %v", err)
	}
	var out, errb bytes.Buffer
	ex, err := p.Wait(&out, &errb)
	if err != nil {
		t.Fatalf("exec echo: %v", err)
	}
	if ex.ExitCode != 0 || out.String() != word+"\n" {
		t.Fatalf("echo %s: exit %d, stdout %q, stderr %q", word, ex.ExitCode, out.String(), errb.String())
	}
}

func wantStatus(t *testing.T, h *Harness, id string, want runtime.Status) runtime.State {
	t.Helper()
	st, err := h.Runtime.State(ctxFor(t, 30*time.Second), id)
	if err != nil {
		t.Fatalf("state %s: %v", id, err)
	}
	if st.Status != want {
		t.Fatalf("state %s: %s, want %s", id, st.Status, want)
	}
	return st
}

// listed returns container id's entry in List, if any.
func listed(t *testing.T, h *Harness, id string) (runtime.State, bool) {
	t.Helper()
	sts, err := h.Runtime.List(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	i := slices.IndexFunc(sts, func(s runtime.State) bool { return s.ID == id })
	if i < 0 {
		return runtime.State{}, false
	}
	return sts[i], true
}

// wantGone checks that container id left nothing the runtime knows of.
func wantGone(t *testing.T, h *Harness, id string) {
	t.Helper()
	wantStatus(t, h, id, runtime.StatusMissing)
	if st, ok := listed(t, h, id); ok {
		t.Fatalf("list still shows %s (%s)", id, st.Status)
	}
}

// answers reports whether the agent answers a ping within d. A paused or
// dead agent never answers, so a short d cannot make this flaky for them.
func answers(cl *agent.Client, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return cl.Ping(ctx) == nil
}

func testStartExecDelete(t *testing.T, h *Harness) {
	spec, _, _, cl := boot(t, h)
	echo(t, h, cl, "hello")
	st := wantStatus(t, h, spec.ID, runtime.StatusRunning)
	if st.PID <= 0 {
		t.Errorf("state of a running container: pid %d", st.PID)
	}
	if ls, ok := listed(t, h, spec.ID); !ok || ls.Status != runtime.StatusRunning {
		t.Fatalf("list: %s listed %v as %s, want running", spec.ID, ok, ls.Status)
	}
	if err := h.Runtime.Delete(ctxFor(t, h.BootTimeout), spec.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantGone(t, h, spec.ID)
	if answers(cl, 2*time.Second) {
		t.Fatal("the agent of a deleted container still answers")
	}
	if err := h.Runtime.Delete(ctxFor(t, h.BootTimeout), spec.ID); err != nil {
		t.Fatalf("delete again: %v", err)
	}
}

func testDeleteMissing(t *testing.T, h *Harness) {
	id := NewID()
	if err := h.Runtime.Delete(ctxFor(t, h.BootTimeout), id); err != nil {
		t.Fatalf("delete of a container that never existed: %v", err)
	}
	wantGone(t, h, id)
}

// testTwoContainers runs two containers at once: each agent answers on its
// own socket, List shows both, and deleting one leaves the other running.
func testTwoContainers(t *testing.T, h *Harness) {
	a, _, _, cla := boot(t, h)
	b, _, _, clb := boot(t, h)
	echo(t, h, cla, "a")
	echo(t, h, clb, "b")
	for _, id := range []string{a.ID, b.ID} {
		if st, ok := listed(t, h, id); !ok || st.Status != runtime.StatusRunning {
			t.Fatalf("list: %s listed %v as %q, want running", id, ok, st.Status)
		}
	}
	if err := h.Runtime.Delete(ctxFor(t, h.BootTimeout), a.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantGone(t, h, a.ID)
	wantStatus(t, h, b.ID, runtime.StatusRunning)
	echo(t, h, clb, "b-still")
}

func testPauseResume(t *testing.T, h *Harness) {
	spec, _, _, cl := boot(t, h)
	ctx := ctxFor(t, h.BootTimeout)
	if err := h.Runtime.Pause(ctx, spec.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	wantStatus(t, h, spec.ID, runtime.StatusPaused)
	if answers(cl, 500*time.Millisecond) {
		t.Fatal("the agent of a paused container answered")
	}
	if err := h.Runtime.Resume(ctx, spec.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	wantStatus(t, h, spec.ID, runtime.StatusRunning)
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatalf("the agent after resume: %v", err)
	}
	echo(t, h, cl, "resumed")
}

func testSignalKillsInit(t *testing.T, h *Harness) {
	spec, _, _, cl := boot(t, h)
	ctx := ctxFor(t, h.BootTimeout)
	if err := h.Runtime.Signal(ctx, spec.ID, syscall.SIGKILL); err != nil {
		t.Fatalf("signal KILL: %v", err)
	}
	for {
		st, err := h.Runtime.State(ctx, spec.ID)
		if err != nil {
			t.Fatalf("state: %v", err)
		}
		if st.Status == runtime.StatusStopped {
			break
		}
		if st.Status != runtime.StatusRunning {
			t.Fatalf("state of a container whose init was killed: %s, want stopped", st.Status)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the container still runs %v after its init was sent SIGKILL", h.BootTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if answers(cl, 2*time.Second) {
		t.Fatal("the agent answers after SIGKILL")
	}
	if err := h.Runtime.Delete(ctx, spec.ID); err != nil {
		t.Fatalf("delete of a stopped container: %v", err)
	}
	wantGone(t, h, spec.ID)
}

// testAgentNeverAnswers boots an init that runs but never serves (the
// agent, given a flag it refuses): the boot must fail within its deadline
// with the client's clear error, and Delete must leave nothing.
func testAgentNeverAnswers(t *testing.T, h *Harness) {
	spec, bundle, sock := h.Spec(t, NewID())
	spec.Args = append(spec.Args, "--no-such-flag")
	deadline := 3 * time.Second
	ctx := ctxFor(t, h.BootTimeout)
	start := time.Now()
	err := h.Runtime.Start(ctx, spec, bundle)
	if err == nil {
		cl := agent.NewClient(sock, 0)
		defer cl.Close()
		wctx, cancel := context.WithTimeout(ctx, deadline)
		err = cl.WaitReady(wctx)
		cancel()
		if err == nil {
			t.Fatal("an agent that exits at once answered")
		}
		if !strings.Contains(err.Error(), "agent did not answer") {
			t.Errorf("error %q does not say the agent did not answer", err)
		}
	}
	// Generous: detects a hang, not a slow machine.
	if took := time.Since(start); took > h.BootTimeout+deadline {
		t.Errorf("the failed boot took %v", took)
	}
	if err := h.Runtime.Delete(context.Background(), spec.ID); err != nil {
		t.Fatalf("delete after a failed boot: %v", err)
	}
	wantGone(t, h, spec.ID)
}

// testMissingInit starts a container whose init does not exist: Start
// fails with an error and leaves no container.
func testMissingInit(t *testing.T, h *Harness) {
	spec, bundle, _ := h.Spec(t, NewID())
	spec.Args[0] = filepath.Join(filepath.Dir(spec.Args[0]), "no-such-agent")
	err := h.Runtime.Start(ctxFor(t, h.BootTimeout), spec, bundle)
	if err == nil {
		_ = h.Runtime.Delete(context.Background(), spec.ID)
		t.Fatal("start of a container whose init does not exist succeeded")
	}
	t.Logf("start error (expected): %v", err)
	wantGone(t, h, spec.ID)
}

func testCheckpointRestore(t *testing.T, h *Harness) {
	spec, bundle, sock, cl := boot(t, h)
	ctx := ctxFor(t, 2*time.Minute)
	imageDir := filepath.Join(t.TempDir(), "image")
	if !h.Checkpoint {
		if err := h.Runtime.Checkpoint(ctx, spec.ID, imageDir); !errors.Is(err, runtime.ErrUnsupported) {
			t.Fatalf("checkpoint on a runtime without the capability: %v, want ErrUnsupported", err)
		}
		if err := h.Runtime.Restore(ctx, spec, bundle, imageDir, false); !errors.Is(err, runtime.ErrUnsupported) {
			t.Fatalf("restore on a runtime without the capability: %v, want ErrUnsupported", err)
		}
		// Neither touched the running container.
		wantStatus(t, h, spec.ID, runtime.StatusRunning)
		echo(t, h, cl, "still")
		return
	}
	// A process started before the checkpoint must be in the restored
	// container: the image holds processes, not just files.
	p, err := cl.Start(ctx, &agent.Request{Cmd: []string{"sleep", "1000"}, Env: h.Env, Detach: true}, nil)
	if err != nil {
		t.Fatalf("exec sleep: %v", err)
	}
	sleepPID := p.PID
	// The engine's capture: the agent drops its host sockets, the
	// container is paused, checkpointed, resumed, and told to listen.
	if err := cl.Quiesce(ctx); err != nil {
		t.Fatalf("quiesce: %v", err)
	}
	if err := h.Runtime.Pause(ctx, spec.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := h.Runtime.Checkpoint(ctx, spec.ID, imageDir); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if err := h.Runtime.Resume(ctx, spec.ID); err != nil {
		t.Fatalf("resume after checkpoint: %v", err)
	}
	if err := h.Runtime.Signal(ctx, spec.ID, syscall.SIGUSR1); err != nil {
		t.Fatalf("signal USR1: %v", err)
	}
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatalf("the agent after checkpoint: %v", err)
	}
	echo(t, h, cl, "left-running")
	if err := h.Runtime.Delete(ctx, spec.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantGone(t, h, spec.ID)
	if err := h.Runtime.Restore(ctx, spec, bundle, imageDir, false); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if err := h.Runtime.Signal(ctx, spec.ID, syscall.SIGUSR1); err != nil {
		t.Fatalf("signal USR1 after restore: %v", err)
	}
	cl2 := agent.NewClient(sock, 0)
	defer cl2.Close()
	if err := cl2.WaitReady(ctx); err != nil {
		t.Fatalf("the agent of the restored container: %v", err)
	}
	wantStatus(t, h, spec.ID, runtime.StatusRunning)
	ps, err := cl2.Ps(ctx)
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	if !slices.ContainsFunc(ps, func(pi agent.ProcInfo) bool { return pi.PID == sleepPID && pi.Running }) {
		t.Fatalf("the restored agent does not run the sleep (pid %d) started before the checkpoint: %+v", sleepPID, ps)
	}
	echo(t, h, cl2, "restored")
}

// testStats reads a running container's counters: at least its init, and
// some memory.
func testStats(t *testing.T, h *Harness) {
	spec, _, _, cl := boot(t, h)
	echo(t, h, cl, "counted")
	st, err := h.Runtime.Stats(ctxFor(t, h.BootTimeout), spec.ID)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.Pids < 1 || st.MemoryBytes == 0 {
		t.Fatalf("stats of a running container: %+v, want at least 1 pid and some memory", st)
	}
}

// testMissingContainerOps: pause, resume and signal of a container that
// does not exist fail (they must not pretend to have acted).
func testMissingContainerOps(t *testing.T, h *Harness) {
	id := NewID()
	ctx := ctxFor(t, h.BootTimeout)
	if err := h.Runtime.Pause(ctx, id); err == nil {
		t.Error("pause of a missing container succeeded")
	}
	if err := h.Runtime.Resume(ctx, id); err == nil {
		t.Error("resume of a missing container succeeded")
	}
	if err := h.Runtime.Signal(ctx, id, syscall.SIGTERM); err == nil {
		t.Error("signal of a missing container succeeded")
	}
	wantGone(t, h, id)
}
