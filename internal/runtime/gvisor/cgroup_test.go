package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
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
