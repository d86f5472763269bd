package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The agent's socket directory (/.sbx/run in the sandbox) is a host
// directory the guest can write in: runsc --host-uds=create makes the
// agent's socket there. So that a guest cannot fill the host's disk through
// it, it is a tiny tmpfs of its own, not a directory on the data dir's
// filesystem.
const (
	// RunDirBytes bounds the bytes the guest can write in /.sbx/run.
	RunDirBytes = 64 << 10
	// RunDirInodes bounds the files it can make there (the socket is one).
	RunDirInodes = 64
)

// MountRunDir makes dir (created, mode 0755, if missing) a tmpfs of
// RunDirBytes and RunDirInodes, mounted nosuid,nodev,noexec, unless it is
// already a mount point (a reboot of the same sandbox). Files in a plain
// dir left by an older sbxd are removed first. Errors come from mkdir and
// mount(2).
func MountRunDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mounted, err := isMountPoint(dir)
	if err != nil || mounted {
		return err
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", RunDirBytes, RunDirInodes)
	if err := unix.Mount("sbx-run", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount the agent's socket dir: %w", err)
	}
	return nil
}

// UnmountRunDir unmounts dir's tmpfs, if it is mounted (lazily: a socket
// still open elsewhere does not keep it). A missing dir is not an error.
func UnmountRunDir(dir string) error {
	mounted, err := isMountPoint(dir)
	if errors.Is(err, os.ErrNotExist) || !mounted {
		return nil
	}
	if err != nil {
		return err
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount the agent's socket dir: %w", err)
	}
	return nil
}

// isMountPoint reports whether dir is on another filesystem than its
// parent.
func isMountPoint(dir string) (bool, error) {
	var st, pst unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, os.ErrNotExist
		}
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &pst); err != nil {
		return false, err
	}
	return st.Dev != pst.Dev, nil
}
