package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
