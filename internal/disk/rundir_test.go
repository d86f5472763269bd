package disk

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRunDirBounded: the agent's socket dir takes at most RunDirBytes of
// writes, on its own filesystem, and unmounts cleanly.
func TestRunDirBounded(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mount needs root")
	}
	dir := filepath.Join(t.TempDir(), "run")
	if err := MountRunDir(dir); err != nil {
		t.Fatal(err)
	}
	defer UnmountRunDir(dir)
	if err := MountRunDir(dir); err != nil { // again: already mounted
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte{1}, 1<<20), 0o644)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 1 MiB into the run dir: %v, want ENOSPC", err)
	}
	if err := UnmountRunDir(dir); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := isMountPoint(dir); mounted {
		t.Fatal("still mounted")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := UnmountRunDir(dir); err != nil {
		t.Fatalf("unmount of a missing dir: %v", err)
	}
}
