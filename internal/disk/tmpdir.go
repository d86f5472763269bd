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
// the guest can replace with a link to any host directory. Call it while
// the sandbox does not run.
//
// /tmp is resolved as the sandbox would, with openat2(RESOLVE_IN_ROOT) on
// the root filesystem's fd: a link the guest made is followed inside the
// sandbox's root only. An empty directory gets TmpKeepName. A /tmp that
// leads nowhere (missing, or a dangling or looping link, on which runsc
// could not boot) is replaced by an empty directory (mode 1777) with
// TmpKeepName; one that leads to a file is left (runsc boots with it).
// Errors are those of opening the root filesystem or writing to it.
func (l *Layers) KeepTmp(id string) error {
	root, err := unix.Open(l.Paths(id).RootFS, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the root filesystem of %s: %w", id, err)
	}
	defer unix.Close(root)
	inRoot := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	tmp, err := unix.Openat2(root, "tmp", inRoot)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP):
		if err := unix.Unlinkat(root, "tmp", 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove /tmp: %w", err)
		}
		if err := unix.Mkdirat(root, "tmp", 0o755); err != nil {
			return fmt.Errorf("make /tmp: %w", err)
		}
		how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath}
		if tmp, err = unix.Openat2(root, "tmp", how); err != nil {
			return fmt.Errorf("open /tmp: %w", err)
		}
		if err := unix.Fchmod(tmp, 0o1777); err != nil {
			unix.Close(tmp)
			return fmt.Errorf("chmod /tmp: %w", err)
		}
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
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
