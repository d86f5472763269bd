package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Every host-side access to a writable layer goes through this file. A
// layer is storage the sandbox writes: while sbxd works on it, a guest can
// swap any directory for a symlink (to a host directory) or nest a tree
// deeper than PATH_MAX. So nothing here resolves a layer path as a whole
// through the host's namespace: the layer's root is opened once, by its
// host-owned path, and every entry below it is reached relative to a
// directory fd, one component at a time or with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), never following a symlink; sizes
// and times come from fstat of the fd that is read. Errors name paths as
// the sandbox sees them ("/etc/x"), never host paths.

// maxDepth is how deep a layer's tree may nest (directories below its
// root). A walk holds one fd per level; deeper trees fail with ErrTooDeep.
const maxDepth = 8192

// ErrTooDeep: a layer's tree nests deeper than maxDepth directories.
var ErrTooDeep = errors.New("directory tree nested too deep")

// openFlags are added to every open of a layer entry.
const openFlags = unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NOCTTY

// openRoot opens dir, a host-owned path (a layer's upperdir or a restore
// dir), as a directory fd.
func openRoot(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the layer's root: %w", err)
	}
	return fd, nil
}

// splitRel checks a layer-relative path ("a/b/c", "" for the root) and
// returns its components: no empty, "." or ".." component, not absolute.
func splitRel(rel string) ([]string, error) {
	if rel == "" {
		return nil, nil
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("%s: not a clean relative path", shown(rel))
		}
	}
	return parts, nil
}

// shown is how a layer path appears in errors: as the sandbox sees it,
// shortened when very long (deep trees).
func shown(rel string) string {
	const max = 256
	p := "/" + rel
	if len(p) > max {
		return p[:max/2] + "…" + p[len(p)-max/2:]
	}
	return p
}

// openBeneath opens rel (a layer-relative path) beneath dirfd with flags,
// following no symlink in any component (ELOOP when one is met) and never
// leaving dirfd's tree. Paths longer than openat2 takes are walked one
// component at a time.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	parts, err := splitRel(rel)
	if err != nil {
		return -1, err
	}
	if len(parts) == 0 {
		return unix.Openat(dirfd, ".", flags|openFlags, 0)
	}
	if len(rel) < 4000 {
		all := flags | openFlags
		if flags&unix.O_PATH != 0 {
			all &^= unix.O_NOCTTY // openat2 refuses flags O_PATH ignores
		}
		how := &unix.OpenHow{
			Flags:   uint64(all),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		}
		for i := 0; ; i++ {
			fd, err := unix.Openat2(dirfd, rel, how)
			if errors.Is(err, unix.EAGAIN) && i < 8 {
				continue // a rename raced the lookup; openat2 asks to retry
			}
			if !errors.Is(err, unix.ENOSYS) {
				return fd, err
			}
			break
		}
	}
	pfd, err := openDirWalk(dirfd, parts[:len(parts)-1])
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	return unix.Openat(pfd, parts[len(parts)-1], flags|openFlags, 0)
}

// openDirWalk opens the directory dirfd/parts... one component at a time,
// each with O_NOFOLLOW|O_DIRECTORY. It returns a new fd (a dup of dirfd
// for no parts).
func openDirWalk(dirfd int, parts []string) (int, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|openFlags, 0)
	if err != nil {
		return -1, err
	}
	for _, p := range parts {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|openFlags, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// procPath names the entry name of the directory open as dirfd through
// /proc/self/fd: an l*xattr call on it looks name up in exactly that
// directory and does not follow it when it is a symlink.
func procPath(dirfd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
}

// dirStack keeps the directory fds of one path of a layer open, so that a
// sequence of accesses in walk order (parents before children) opens each
// directory once, at any depth.
type dirStack struct {
	root  int
	parts []string // the components of the open path
	fds   []int    // fds[i] is the directory parts[:i+1]
	// onPop, when set, is called with a directory's layer path and fd
	// before the stack closes it (a restore sets directory times there).
	onPop func(rel string, fd int) error
}

// newDirStack returns a stack over the directory tree whose root is open
// as root (the stack does not close root).
func newDirStack(root int) *dirStack { return &dirStack{root: root} }

// dir returns an fd of the layer directory rel ("" for the root), opening
// the components it lacks with O_NOFOLLOW. The fd stays owned by the
// stack; it is valid until the next call.
func (s *dirStack) dir(rel string) (int, error) {
	parts, err := splitRel(rel)
	if err != nil {
		return -1, err
	}
	if len(parts) > maxDepth {
		return -1, fmt.Errorf("%s: %w (more than %d levels)", shown(rel), ErrTooDeep, maxDepth)
	}
	common := 0
	for common < len(parts) && common < len(s.parts) && parts[common] == s.parts[common] {
		common++
	}
	if err := s.popTo(common); err != nil {
		return -1, err
	}
	for i := common; i < len(parts); i++ {
		fd, err := unix.Openat(s.top(), parts[i], unix.O_RDONLY|unix.O_DIRECTORY|openFlags, 0)
		if err != nil {
			return -1, err
		}
		s.parts = append(s.parts, parts[i])
		s.fds = append(s.fds, fd)
	}
	return s.top(), nil
}

func (s *dirStack) top() int {
	if len(s.fds) == 0 {
		return s.root
	}
	return s.fds[len(s.fds)-1]
}

// popTo closes the open directories deeper than n components.
func (s *dirStack) popTo(n int) error {
	var first error
	for len(s.fds) > n {
		i := len(s.fds) - 1
		if s.onPop != nil {
			if err := s.onPop(strings.Join(s.parts, "/"), s.fds[i]); err != nil && first == nil {
				first = err
			}
		}
		unix.Close(s.fds[i])
		s.fds, s.parts = s.fds[:i], s.parts[:i]
	}
	return first
}

// close closes every directory the stack opened.
func (s *dirStack) close() error { return s.popTo(0) }

// splitParent returns rel's parent ("" for a top-level entry) and name.
func splitParent(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// ReadFileBeneath reads the regular file rel (e.g. "etc/ssl/certs/ca-certificates.crt")
// beneath dir (a host-owned directory: an image's root filesystem) without
// following a symlink in any component, up to max bytes. ok is false when
// it is missing, a symlink (or below one) or not a regular file.
//
// Errors: the file is longer than max; an open, stat or read failure other
// than the file's absence (EACCES, EMFILE, EIO...).
func ReadFileBeneath(dir, rel string, max int64) (b []byte, ok bool, err error) {
	root, err := openRoot(dir)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if absent(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", shown(rel), err)
	}
	return readRegular(fd, rel, max)
}

// ReadFileInRoot reads the regular file rel (e.g. "etc/ssl/certs/ca-certificates.crt")
// of dir, an image's root filesystem (host-owned, never written by a
// guest), up to max bytes, resolving symlinks as the image would see them:
// with openat2 RESOLVE_IN_ROOT, an absolute link or ".." resolves inside
// dir and never leaves it; magic links (/proc) are refused. resolved is
// the path, relative to dir ("etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"),
// of the file read once links are resolved. ok is false when rel is
// missing (or a dangling link), a loop of links, or not a regular file.
//
// Errors: the file is longer than max; the kernel has no openat2 (Linux
// 5.6); an open, stat or read failure other than the file's absence.
func ReadFileInRoot(dir, rel string, max int64) (b []byte, resolved string, ok bool, err error) {
	if _, err := splitRel(rel); err != nil || rel == "" {
		return nil, "", false, fmt.Errorf("%s: not a clean relative path", shown(rel))
	}
	root, err := openRoot(dir)
	if err != nil {
		return nil, "", false, err
	}
	defer unix.Close(root)
	how := &unix.OpenHow{
		Flags:   uint64(unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	var fd int
	for i := 0; ; i++ {
		fd, err = unix.Openat2(root, rel, how)
		if !errors.Is(err, unix.EAGAIN) || i >= 8 {
			break // EAGAIN: a rename raced the lookup; openat2 asks to retry
		}
	}
	if absent(err) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("%s: %w", shown(rel), err)
	}
	rootPath, rerr := os.Readlink("/proc/self/fd/" + strconv.Itoa(root))
	filePath, ferr := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if rerr != nil || ferr != nil || !strings.HasPrefix(filePath, strings.TrimSuffix(rootPath, "/")+"/") {
		unix.Close(fd)
		return nil, "", false, fmt.Errorf("%s: cannot tell the path it resolves to", shown(rel))
	}
	resolved = strings.TrimPrefix(filePath, strings.TrimSuffix(rootPath, "/")+"/")
	b, ok, err = readRegular(fd, resolved, max)
	return b, resolved, ok, err
}

// absent reports whether err, from an open beneath a root, means that the
// file is not there to read: missing, a component not a directory, or a
// symlink met where none may be followed (or a loop of them).
func absent(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)
}

// readRegular reads fd, the open file rel, and closes it: ok is false when
// it is not a regular file; more than max bytes is an error.
func readRegular(fd int, rel string, max int64) ([]byte, bool, error) {
	f := os.NewFile(uintptr(fd), shown(rel))
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !st.Mode().IsRegular() {
		return nil, false, nil
	}
	if st.Size() > max {
		return nil, false, fmt.Errorf("%s: %d bytes, more than %d", shown(rel), st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > max {
		return nil, false, fmt.Errorf("%s: more than %d bytes", shown(rel), max)
	}
	return b, true, nil
}
