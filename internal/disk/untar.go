package disk

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// untar extracts a flattened root filesystem tar (no OCI whiteouts: the
// caller flattens layers first) into dir, as root: owners, modes (setuid and
// setgid bits too: they work inside gVisor, as su and ping need; on the host
// the image dir is under the 0700 data dir and layers mount nosuid), times,
// xattrs, symlinks, hard links and FIFOs are kept. Device nodes are skipped. An entry whose
// name has a ".." element, or whose parent path passes through a symlink,
// is refused, so an archive cannot write outside dir. It returns the sum of
// regular files' sizes in bytes.
func untar(r io.Reader, dir string) (int64, error) {
	tr := tar.NewReader(r)
	var size int64
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirTimes []dirTime
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return size, fmt.Errorf("read tar: %w", err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		if slices.Contains(strings.Split(name, "/"), "..") {
			return size, fmt.Errorf("tar entry %q: path leaves the root", hdr.Name)
		}
		rel := filepath.Clean("/" + name)
		if rel == "/" {
			if hdr.Typeflag == tar.TypeDir {
				_ = os.Chmod(dir, fs.FileMode(hdr.Mode&0o7777))
				_ = os.Lchown(dir, hdr.Uid, hdr.Gid)
			}
			continue
		}
		target := filepath.Join(dir, rel)
		if err := checkParents(dir, rel); err != nil {
			return size, fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
		mode := fs.FileMode(hdr.Mode & 0o777)
		if fi, err := os.Lstat(target); err == nil && !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if err := os.RemoveAll(target); err != nil {
				return size, err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return size, err
			}
			dirTimes = append(dirTimes, dirTime{target, hdr.ModTime})
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
			if err != nil {
				return size, err
			}
			n, err := io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return size, fmt.Errorf("write %s: %w", rel, err)
			}
			size += n
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return size, err
			}
		case tar.TypeLink:
			lrel := filepath.Clean("/" + strings.TrimPrefix(hdr.Linkname, "./"))
			if slices.Contains(strings.Split(hdr.Linkname, "/"), "..") {
				return size, fmt.Errorf("tar entry %q: link target leaves the root", hdr.Name)
			}
			if err := checkParents(dir, lrel); err != nil {
				return size, fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
			if err := os.Link(filepath.Join(dir, lrel), target); err != nil {
				return size, err
			}
			continue // a hard link shares the target's metadata
		case tar.TypeChar, tar.TypeBlock:
			// Device nodes are skipped: on the host one would open a host
			// device (gVisor refuses them in the sandbox anyway).
			continue
		case tar.TypeFifo:
			if err := unix.Mknod(target, unix.S_IFIFO|uint32(mode), 0); err != nil {
				return size, fmt.Errorf("mknod %s: %w", rel, err)
			}
		default:
			continue // pax globals and the like carry no file
		}
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return size, err
		}
		for k, v := range hdr.PAXRecords {
			if xk, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if err := unix.Lsetxattr(target, xk, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
					return size, fmt.Errorf("xattr %s on %s: %w", xk, rel, err)
				}
			}
		}
		if hdr.Typeflag != tar.TypeSymlink {
			// After chown, which clears setuid bits.
			if err := os.Chmod(target, fs.FileMode(hdr.Mode&0o777)|modeBits(hdr.Mode)); err != nil {
				return size, err
			}
			if hdr.Typeflag != tar.TypeDir {
				_ = os.Chtimes(target, hdr.ModTime, hdr.ModTime)
			}
		} else {
			ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
			_ = unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	// Directory times last: writing entries into a directory changes them.
	for i := len(dirTimes) - 1; i >= 0; i-- {
		_ = os.Chtimes(dirTimes[i].path, dirTimes[i].t, dirTimes[i].t)
	}
	return size, nil
}

// modeBits converts tar's setuid, setgid and sticky bits to fs.FileMode's.
func modeBits(m int64) fs.FileMode {
	var out fs.FileMode
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// checkParents refuses rel (a clean absolute path inside root) when one of
// its parent directories is a symlink: following it could leave root. A
// missing parent is created as a plain directory.
func checkParents(root, rel string) error {
	parts := strings.Split(strings.Trim(filepath.Dir(rel), "/"), "/")
	cur := root
	for _, p := range parts {
		if p == "" {
			continue
		}
		cur = filepath.Join(cur, p)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("parent %s is not a directory", strings.TrimPrefix(cur, root))
		}
	}
	return nil
}
