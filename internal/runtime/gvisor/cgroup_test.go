package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/runtime"
)

// TestDeleteRemovesCgroups: a boot that failed before runsc kept state
// leaves the container's cgroups; Delete removes them.
func TestDeleteRemovesCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	base := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(base); err != nil {
		base = "/sys/fs/cgroup"
	}
	parent := "/sbx-test-" + filepath.Base(t.TempDir())
	cg := filepath.Join(base, parent, "sbx_dead")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	defer os.Remove(filepath.Join(base, parent))
	defer os.Remove(cg)
	r := &Runtime{cfg: Config{Root: t.TempDir(), CgroupParent: parent}, logs: map[string]*initLog{}}
	if err := r.Delete(context.Background(), "sbx_dead"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Fatalf("the cgroup %s is still there: %v", cg, err)
	}
}

// TestDeleteKillsLeftovers: a runsc run or restore cut short by a crash of
// sbxd can leave the container's processes in its cgroup without runsc
// state; Delete kills them and removes the cgroup (it used to leave both).
func TestDeleteKillsLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	base := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(base); err != nil {
		base = "/sys/fs/cgroup"
	}
	parent := "/sbx-test-" + filepath.Base(t.TempDir())
	cg := filepath.Join(base, parent, "sbx_left")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	defer os.Remove(filepath.Join(base, parent))
	defer os.Remove(cg)
	left := exec.Command("sleep", "3600")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = left.Process.Kill() }()
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(left.Process.Pid)), 0o644); err != nil {
		t.Skipf("cannot move a process into a cgroup: %v", err)
	}
	r := &Runtime{cfg: Config{Root: t.TempDir(), CgroupParent: parent}, logs: map[string]*initLog{}}
	if err := r.Delete(context.Background(), "sbx_left"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- left.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the leftover process exited 0; want killed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Delete left a process of the container running in its cgroup")
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Fatalf("the cgroup %s is still there: %v", cg, err)
	}
}

// TestEndStrayVerbs: a runsc command on this root that outlived the sbxd
// that ran it is killed; runsc commands on another root, and the sandbox
// and gofer processes on this root, are left alone.
func TestEndStrayVerbs(t *testing.T) {
	runsc := filepath.Join(t.TempDir(), "runsc")
	root := t.TempDir()
	start := func(argv0, rootFlag string) *exec.Cmd {
		// sh reads stdin, which never gets a line: it waits until killed.
		c := &exec.Cmd{Path: "/bin/sh", Args: []string{argv0, "-c", "read x", "sh", rootFlag}}
		if _, err := c.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	stray := start(runsc, "--root="+root)
	other := start(runsc, "--root="+root+"-other")
	sandbox := start("runsc-sandbox", "--root="+root)
	// The processes must have exec'd before their cmdline names runsc.
	waitCmdline := func(c *exec.Cmd, want string) {
		for i := 0; i < 500; i++ {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/cmdline")
			if strings.HasPrefix(string(b), want+"\x00") {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("process %d never showed %s in its cmdline", c.Process.Pid, want)
	}
	waitCmdline(stray, runsc)
	waitCmdline(other, runsc)
	waitCmdline(sandbox, "runsc-sandbox")
	n, err := EndStrayVerbs(runsc, root)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("EndStrayVerbs killed %d processes, want 1 (the runsc command on this root)", n)
	}
	if err := stray.Wait(); err == nil {
		t.Fatal("the stray runsc command exited 0; want killed")
	}
	for _, c := range []*exec.Cmd{other, sandbox} {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("process %v was killed: %v", c.Args, err)
		}
	}
}

// TestStatsFromCgroup: Stats reads a container's CPU and memory from its
// cgroup, without runsc (the container here is a plain busy process put
// into a cgroup under a test parent; no runsc state exists for it, so
// `runsc events` could not have answered).
func TestStatsFromCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	parent := "/sbx-test-" + filepath.Base(t.TempDir())
	var dirs []string
	for _, c := range []string{"cpuacct", "memory"} {
		base := filepath.Join("/sys/fs/cgroup", c)
		if _, err := os.Stat(base); err != nil {
			t.Skipf("no cgroup v1 %s controller", c)
		}
		cg := filepath.Join(base, parent, "sbx_live")
		if err := os.MkdirAll(cg, 0o755); err != nil {
			t.Skipf("cannot make a cgroup: %v", err)
		}
		dirs = append(dirs, cg)
	}
	// The process waits to be moved into the cgroups, then allocates (a
	// cgroup v1 memory controller charges pages when they are allocated,
	// not what a process brings along) and spins.
	busy := exec.Command("sh", "-c", `read go; x=$(head -c 4000000 /dev/zero | tr '\0' a); while :; do :; done`)
	stdin, err := busy.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = busy.Process.Kill()
		_ = busy.Wait()
		for _, d := range dirs {
			_ = os.Remove(d)
			_ = os.Remove(filepath.Dir(d))
		}
	}()
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(busy.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{cfg: Config{Root: t.TempDir(), Runsc: "/nonexistent/runsc", CgroupParent: parent}, logs: map[string]*initLog{}}
	ctx := context.Background()
	var s runtime.Stats
	for deadline := time.Now().Add(30 * time.Second); s.CPUNanos < uint64(50*time.Millisecond) || s.MemoryBytes == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the busy process's cgroup shows %v of CPU and %d bytes after 30 s", time.Duration(s.CPUNanos), s.MemoryBytes)
		}
		var err error
		if s, err = r.Stats(ctx, "sbx_live"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := r.Stats(ctx, "sbx_missing"); err == nil {
		t.Fatal("stats of a container with neither cgroup nor runsc state succeeded")
	}
}

// BenchmarkCgroupStats is the usage meter's cost per running sandbox per
// sample: reading the counters of one cgroup (the host's root cgroup,
// which has the same files).
func BenchmarkCgroupStats(b *testing.B) {
	if _, err := os.Stat("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err != nil {
		b.Skip("no cgroup v1 cpuacct")
	}
	r := &Runtime{cfg: Config{CgroupParent: "/"}}
	for b.Loop() {
		if _, err := r.cgroupStats(""); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUnresponsiveOnlyForVerbDeadline: a runsc command cut by its verb's
// own deadline is runtime.ErrUnresponsive (the sandbox does not answer);
// one cut by the caller's deadline is not (the caller gave up, nothing is
// known of the sandbox).
func TestUnresponsiveOnlyForVerbDeadline(t *testing.T) {
	stub := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{cfg: Config{Runsc: stub, Root: t.TempDir(), Platform: "systrap"}, logs: map[string]*initLog{}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := r.run(ctx, nil, "state", "x")
	if err == nil || errors.Is(err, runtime.ErrUnresponsive) {
		t.Fatalf("a command the caller's deadline cut: %v; want an error that is not ErrUnresponsive", err)
	}
	if !errors.Is(&ExitError{Args: []string{"state", "x"}, Err: context.DeadlineExceeded, verbDeadline: true}, runtime.ErrUnresponsive) {
		t.Fatal("a command its verb's deadline cut is not ErrUnresponsive")
	}
}
