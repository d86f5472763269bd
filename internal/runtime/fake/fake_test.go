package fake

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/agent"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/runtime/runtimetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

// newHarness is a fake Runtime on a fresh root, with the agent binary
// mounted at /.sbx/bin and a socket dir at /.sbx/run, as the engine's spec
// has them.
func newHarness(t *testing.T) *runtimetest.Harness {
	agentDir := runtimetest.AgentBinary(t)
	rt, err := New(Config{Root: filepath.Join(t.TempDir(), "state")})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	return &runtimetest.Harness{
		Runtime: rt,
		Spec: func(t *testing.T, id string) (*runtime.Spec, string, string) {
			dir := filepath.Join(base, id)
			rootfs, run := filepath.Join(dir, "rootfs"), filepath.Join(dir, "run")
			for _, d := range []string{rootfs, run} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			return &runtime.Spec{
				ID:     id,
				RootFS: rootfs,
				Args:   []string{"/.sbx/bin/sbx-agent"},
				Env:    []string{"PATH=/usr/bin:/bin"},
				Mounts: []runtime.Mount{
					{Source: agentDir, Destination: "/.sbx/bin", ReadOnly: true},
					{Source: run, Destination: RunDir},
				},
			}, filepath.Join(dir, "bundle"), filepath.Join(run, SocketName)
		},
		Env:         []string{"PATH=/usr/bin:/bin"},
		Checkpoint:  false,
		BootTimeout: 30 * time.Second,
	}
}

// TestConformance runs the runtime conformance suite on the fake: no root
// needed.
func TestConformance(t *testing.T) {
	runtimetest.Run(t, newHarness)
}

// TestNewRuntimeSeesEarlierContainers checks what a restarted sbxd relies
// on: a new Runtime on the same Root knows the containers an earlier one
// started (it has no handle on their processes) and can delete them.
func TestNewRuntimeSeesEarlierContainers(t *testing.T) {
	h := newHarness(t)
	spec, bundle, _ := h.Spec(t, runtimetest.NewID())
	ctx := context.Background()
	if err := h.Runtime.Start(ctx, spec, bundle); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Runtime.Delete(ctx, spec.ID) })
	rt2, err := New(Config{Root: h.Runtime.(*Runtime).root})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rt2.State(ctx, spec.ID)
	if err != nil || st.Status != runtime.StatusRunning {
		t.Fatalf("state from a new runtime: %+v, %v; want running", st, err)
	}
	if err := rt2.Attach(spec.ID, bundle); err != nil {
		t.Fatalf("attach: %v", err)
	}
	if err := rt2.Delete(ctx, spec.ID); err != nil {
		t.Fatalf("delete from a new runtime: %v", err)
	}
	if st, err := h.Runtime.State(ctx, spec.ID); err != nil || st.Status != runtime.StatusMissing {
		t.Fatalf("state after delete: %+v, %v; want missing", st, err)
	}
}

// TestStaleRecordIsStopped checks that a record whose pid now belongs to
// another process (same pid, other start time) is a stopped container:
// the fake never signals a process it did not start.
func TestStaleRecordIsStopped(t *testing.T) {
	rt, err := New(Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// This test's own process, with a start time it does not have.
	rec := &record{ID: "stale", PID: os.Getpid(), Start: readStat(os.Getpid()).start + 1}
	if err := rt.save(rec); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if st, err := rt.State(ctx, "stale"); err != nil || st.Status != runtime.StatusStopped {
		t.Fatalf("state of a stale record: %+v, %v; want stopped", st, err)
	}
	if err := rt.Signal(ctx, "stale", syscall.SIGKILL); !errors.Is(err, ErrNotExist) {
		t.Fatalf("signal of a stale record: %v, want ErrNotExist", err)
	}
	if err := rt.Delete(ctx, "stale"); err != nil {
		t.Fatalf("delete of a stale record: %v", err)
	}
	if st, _ := rt.State(ctx, "stale"); st.Status != runtime.StatusMissing {
		t.Fatalf("state after delete: %s, want missing", st.Status)
	}
}

// TestFilesStayInRootFS checks that the fake's agent treats Spec.RootFS as
// "/" for file operations (sbx-agent --root): a write to /f lands in the
// rootfs dir, never in the host's /.
func TestFilesStayInRootFS(t *testing.T) {
	h := newHarness(t)
	spec, bundle, sock := h.Spec(t, runtimetest.NewID())
	ctx, cancel := context.WithTimeout(context.Background(), h.BootTimeout)
	defer cancel()
	if err := h.Runtime.Start(ctx, spec, bundle); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Runtime.Delete(context.Background(), spec.ID) })
	cl := agent.NewClient(sock, 0)
	defer cl.Close()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	name := "/sbx-fake-test-" + spec.ID
	if _, err := cl.WriteFile(ctx, name, 0o644, strings.NewReader("in the rootfs")); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	if _, err := os.Lstat(name); err == nil {
		os.Remove(name)
		t.Fatalf("the fake's agent wrote %s in the host's /", name)
	}
	if b, err := os.ReadFile(filepath.Join(spec.RootFS, name)); err != nil || string(b) != "in the rootfs" {
		t.Fatalf("%s in the rootfs: %q, %v", name, b, err)
	}
}
