package gvisor

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/runtime/runtimetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

// conformancePrereqs returns what is missing to boot gVisor sandboxes
// here ("" when nothing is): root, runsc, a static busybox for the rootfs.
func conformancePrereqs() string {
	if os.Getuid() != 0 {
		return "runsc needs root"
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		return "busybox-static is not installed (/bin/busybox)"
	}
	return ""
}

// tinyRootFS makes a root filesystem of the static busybox (sh, echo,
// sleep) and the mount points the spec needs.
func tinyRootFS(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", ".sbx/bin", ".sbx/run", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "echo", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// unmountUnder unmounts what runsc left mounted below dir (with
// --network=none, the null-netns nsfs mount in its root), so that dir can
// be removed.
func unmountUnder(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mps = append(mps, fields[4])
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		if err := unix.Unmount(mps[i], unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mps[i], err)
		}
	}
}

// TestConformance runs the runtime conformance suite on gVisor (systrap,
// which works wherever runsc does), with a busybox rootfs and the static
// sbx-agent as init. It needs root and runsc: without them it skips, and
// with CI=true it fails.
func TestConformance(t *testing.T) {
	if missing := conformancePrereqs(); missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prerequisite missing (required in CI): %s", missing)
		}
		t.Skip(missing)
	}
	cgroupParent := "/sbx-rtt-" + runtimetest.NewID()
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupParent))
		for _, d := range append(dirs, filepath.Join("/sys/fs/cgroup", cgroupParent)) {
			_ = unix.Rmdir(d)
		}
	})
	runtimetest.Run(t, func(t *testing.T) *runtimetest.Harness {
		agentDir := runtimetest.AgentBinary(t)
		base := t.TempDir()
		root := filepath.Join(base, "runsc")
		t.Cleanup(func() { unmountUnder(t, root) })
		rt, err := New(Config{Root: root, Platform: "systrap", CgroupParent: cgroupParent})
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("runsc (required in CI): %v", err)
			}
			t.Skipf("runsc: %v", err)
		}
		env := []string{"PATH=/bin"}
		return &runtimetest.Harness{
			Runtime: rt,
			Spec: func(t *testing.T, id string) (*runtime.Spec, string, string) {
				dir := filepath.Join(base, id)
				run := filepath.Join(dir, "run")
				if err := os.MkdirAll(run, 0o755); err != nil {
					t.Fatal(err)
				}
				return &runtime.Spec{
					ID:       id,
					RootFS:   tinyRootFS(t, dir),
					Hostname: id,
					Args:     []string{"/.sbx/bin/sbx-agent"},
					Env:      append(env, "GOMAXPROCS=1"),
					Mounts: []runtime.Mount{
						{Source: agentDir, Destination: "/.sbx/bin", ReadOnly: true},
						{Source: run, Destination: "/.sbx/run"},
					},
					CPUs:        1,
					MemoryBytes: 256 << 20,
					PidsLimit:   256,
				}, filepath.Join(dir, "bundle"), filepath.Join(run, "agent.sock")
			},
			Env:         env,
			Checkpoint:  true,
			BootTimeout: BootTimeout,
		}
	})
}
