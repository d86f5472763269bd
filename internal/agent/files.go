//go:build linux

package agent

import (
	"crypto/rand"
	"encoding/hex"
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

// The files operations resolve paths with directory file descriptors: what
// a path resolves to (through symlinks the sandbox made) is checked against
// ReservedPaths on the opened object, never on the path's text, and nothing
// beneath a tar_in's target is reached through a symlink.

// isReserved reports whether the resolved path p lies in a place sbx
// reserves.
func isReserved(p string) bool {
	for _, r := range ReservedPaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// resolved returns the path (in the agent's view) of what fd is open on.
func resolved(fd int) (string, error) {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	return inRoot(p)
}

func reservedErr(path, where string) error {
	return &Error{Failure{Kind: FailReserved, Message: fmt.Sprintf("%s resolves to %s, which sbx reserves (%s)",
		path, where, strings.Join(ReservedPaths, ", "))}}
}

// checkResolved fails if fd is open on something in a reserved place.
func checkResolved(fd int, path string) error {
	where, err := resolved(fd)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", path, err)
	}
	if isReserved(where) {
		return reservedErr(path, where)
	}
	return nil
}

// openDir opens the directory path, following symlinks on the way (they
// are the sandbox's own paths) but checking where each component resolves:
// a path that passes through a reserved place fails with kind reserved.
// With create, missing components are made (0755), and never through a
// symlink. The caller closes the fd.
func openDir(path string, create bool) (int, error) {
	fd, err := openInRoot("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	sofar := ""
	for _, comp := range strings.Split(path, "/") {
		if comp == "" {
			continue
		}
		sofar += "/" + comp
		var nfd int
		if fsRoot == "" {
			nfd, err = unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		} else {
			// Symlinks on the way resolve inside the root, as in a chroot.
			nfd, err = openInRoot(sofar, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
		}
		if err == unix.ENOENT && create {
			if err = unix.Mkdirat(fd, comp, 0o755); err == nil || err == unix.EEXIST {
				nfd, err = openDirAt(fd, comp)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: sofar, Err: err}
		}
		fd = nfd
		if err := checkResolved(fd, path); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// openParent opens the directory that holds path's last element and
// returns it with that element's name. path must not be "/".
func openParent(path string, create bool) (int, string, error) {
	dir, base := filepath.Split(filepath.Clean(path))
	if base == "" {
		return -1, "", &Error{Failure{Kind: FailInvalid, Message: "path names no file"}}
	}
	fd, err := openDir(dir, create)
	return fd, base, err
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	}
	return "other"
}

// openRegular opens path for reading without blocking (a FIFO would block
// an open and a read forever) and checks that it is a regular file, in no
// reserved place, of at most maxBytes (0: any size).
func openRegular(path string, maxBytes int64) (*os.File, *unix.Stat_t, error) {
	fd, err := openInRoot(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := checkResolved(fd, path); err != nil {
		f.Close()
		return nil, nil, err
	}
	switch t := fileType(st.Mode); t {
	case "file":
	case "dir":
		f.Close()
		return nil, nil, &Error{Failure{Kind: FailIsDir, Message: path + " is a directory"}}
	default:
		f.Close()
		return nil, nil, &Error{Failure{Kind: FailNotRegular, Message: fmt.Sprintf("%s is a %s, not a regular file", path, t)}}
	}
	if maxBytes > 0 && st.Size > maxBytes {
		f.Close()
		return nil, nil, &Error{Failure{Kind: FailTooLarge,
			Message: fmt.Sprintf("%s is %d bytes, over max_bytes %d", path, st.Size, maxBytes)}}
	}
	return f, &st, nil
}

func readFile(c *conn, path string, maxBytes int64) error {
	f, st, err := openRegular(path, maxBytes)
	if err != nil {
		return c.fail(err)
	}
	defer f.Close()
	if err := c.sendJSON(FrameResult, FileStat{Size: st.Size, Mode: st.Mode & 0o777}); err != nil {
		return err
	}
	// Send exactly the size announced: a file that grows meanwhile is cut
	// there; one that shrinks ends the stream without its EOF frame, which
	// the host reports as a truncated read.
	n, err := io.CopyBuffer(dataWriter{c}, io.LimitReader(f, st.Size), make([]byte, 256<<10))
	if err == nil && n < st.Size {
		err = fmt.Errorf("%s shrank while read: %w", path, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return err
	}
	return c.send(FrameData, nil)
}

func randomName(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func writeFile(c *conn, path string, mode uint32) error {
	if mode == 0 {
		mode = 0o644
	}
	// Read the whole body before answering, so the host's writer never
	// blocks on a full socket while we fail.
	body := &dataReader{r: c.c}
	fail := func(err error) error {
		_, _ = io.Copy(io.Discard, body)
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = &fs.PathError{Op: "write", Path: path, Err: pe.Err}
		}
		return c.fail(err)
	}
	dirfd, base, err := openParent(path, true)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if unix.Fstatat(dirfd, base, &st, 0) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fail(&Error{Failure{Kind: FailIsDir, Message: path + " is a directory"}})
	}
	tmp := randomName(".sbx-write-")
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fail(&fs.PathError{Op: "write", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.CopyBuffer(f, body, make([]byte, 256<<10))
	if err == nil {
		// Setuid, setgid and sticky bits are kept (os.File.Chmod takes
		// Go's FileMode, whose bits for them are not 0o7000).
		err = unix.Fchmod(fd, mode&0o7777)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, base)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		if !errors.As(err, new(*fs.PathError)) {
			err = &fs.PathError{Op: "write", Path: path, Err: err}
		}
		return fail(err)
	}
	return c.sendJSON(FrameResult, FileStat{Size: n, Mode: mode & 0o7777})
}

// Entry is one directory entry of a list.
type Entry struct {
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"`
	ModTime    time.Time `json:"mod_time"`
	LinkTarget string    `json:"link_target,omitempty"`
}

func listDir(c *conn, path string) error {
	fd, err := openInRoot(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return c.fail(&fs.PathError{Op: "open", Path: path, Err: err})
	}
	d := os.NewFile(uintptr(fd), path)
	defer d.Close()
	if err := checkResolved(fd, path); err != nil {
		return c.fail(err)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return c.fail(err)
	}
	out := make([]Entry, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // removed meanwhile
		}
		e := Entry{Name: name, Size: st.Size, Mode: st.Mode & 0o777,
			ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(), Type: fileType(st.Mode)}
		switch e.Type {
		case "file", "dir", "symlink":
		default:
			e.Type = "other"
		}
		if e.Type == "symlink" {
			e.LinkTarget = readlinkat(fd, name)
		}
		out = append(out, e)
	}
	return c.sendJSON(FrameResult, out)
}

func readlinkat(dirfd int, name string) string {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func remove(c *conn, path string, recursive bool) error {
	dirfd, base, err := openParent(path, false)
	if err != nil {
		return c.fail(err)
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return c.fail(&fs.PathError{Op: "remove", Path: path, Err: err})
	}
	if where, err := resolved(dirfd); err == nil && isReserved(filepath.Join(where, base)) {
		return c.fail(reservedErr(path, filepath.Join(where, base)))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err = unix.Unlinkat(dirfd, base, 0)
	} else if !recursive {
		err = unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR)
	} else {
		// os.Root removes beneath the directory's fd and never follows a
		// symlink it meets.
		var root *os.Root
		if root, err = os.OpenRoot(fmt.Sprintf("/proc/self/fd/%d", dirfd)); err == nil {
			err = root.RemoveAll(base)
			root.Close()
		}
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return c.fail(&fs.PathError{Op: "remove", Path: path, Err: err})
	}
	return c.sendJSON(FrameResult, struct{}{})
}

// skipUnder lists the names a walk leaves out of a directory it archives:
// in "/", the kernel and sbx mounts, which are not the sandbox's disk.
func skipUnder(dir, name string) bool {
	return isReserved(filepath.Join(dir, name))
}

// sortedNames reads a directory's entry names, sorted. It reads through a
// new open of the directory: a dup would share fd's offset, and a second
// walk of the same fd (a tar_out sizes, then writes) would see no entry.
func sortedNames(fd int, path string) ([]string, error) {
	nfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(nfd), path)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// openDirAt opens the directory name in dirfd without following a symlink
// (ELOOP if name is one, ENOTDIR if it is not a directory).
//
// gVisor follows a final symlink for openat(O_DIRECTORY|O_NOFOLLOW)
// (measured with the pinned runsc: the open succeeds on a link to /etc),
// so the flag pair cannot be trusted inside a sandbox. openat2 with
// RESOLVE_NO_SYMLINKS works in gVisor and in Linux since 5.6; where it is
// missing, a non-blocking O_NOFOLLOW open without O_DIRECTORY and an fstat
// do the same.
func openDirAt(dirfd int, name string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(dirfd, name, &how)
	if err != unix.ENOSYS && err != unix.EPERM {
		return fd, err
	}
	fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		if err == nil {
			err = unix.ENOTDIR
		}
		return -1, err
	}
	return fd, nil
}
