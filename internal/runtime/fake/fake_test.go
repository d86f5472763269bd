package fake

import (
	"os"
	"path/filepath"
	"testing"
	"time"

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
