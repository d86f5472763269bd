package disk

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// TmpKeepName is the file that KeepTmp leaves in an empty /tmp.
const TmpKeepName = ".sbx-keep"

// beneath resolves a path below a directory fd without crossing a symlink,
// a magic link or a mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// KeepTmp makes sure that /tmp in id's mounted root filesystem is not an
// empty directory, so that runsc keeps it on the writable layer (runsc
// mounts a tmpfs, memory that checkpoints do not capture, on an empty /tmp)
// without a bind mount: a bind mount's source inside the layer is a path
// the guest can replace with a link to any host directory.
//
// /tmp is opened beneath the root filesystem without following links; a
// missing /tmp is made (mode 1777); an empty one gets TmpKeepName. A /tmp
// that is not a directory (a link or a file the guest made) is left alone:
// inside the sandbox it resolves in the sandbox's own root. Errors are
// those of opening the root filesystem or writing to it.
func (l *Layers) KeepTmp(id string) error {
	root, err := unix.Open(l.Paths(id).RootFS, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the root filesystem of %s: %w", id, err)
	}
	defer unix.Close(root)
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath}
	tmp, err := unix.Openat2(root, "tmp", how)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(root, "tmp", 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("make /tmp: %w", err)
		}
		if tmp, err = unix.Openat2(root, "tmp", how); err == nil {
			if err := unix.Fchmod(tmp, 0o1777); err != nil {
				unix.Close(tmp)
				return fmt.Errorf("chmod /tmp: %w", err)
			}
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
		return nil
	case err != nil:
		return fmt.Errorf("open /tmp: %w", err)
	}
	defer unix.Close(tmp)
	empty, err := dirEmpty(tmp)
	if err != nil || !empty {
		return err
	}
	f, err := unix.Openat(tmp, TmpKeepName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("keep /tmp: %w", err)
	}
	return unix.Close(f)
}

// dirEmpty reports whether the directory open at fd has no entry but . and
// .. (it reads from fd's offset, which must be the start).
func dirEmpty(fd int) (bool, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return false, fmt.Errorf("read /tmp: %w", err)
		}
		if n <= 0 {
			return true, nil
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		if len(names) > 0 { // ParseDirent leaves out . and ..
			return false, nil
		}
	}
}
