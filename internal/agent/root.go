//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// fsRoot is the host directory that the agent's file operations treat as
// "/". It is "" in a sandbox (the agent's own root, unchanged behaviour);
// only an agent run as a host process by the fake runtime
// (internal/runtime/fake, sbx-agent --root) sets it, before serving.
var fsRoot string

// SetRoot makes the agent's file operations (read, write, list, remove,
// tar_in, tar_out) and an exec's working directory resolve paths beneath
// dir, an existing directory, as if it were "/": symlinks, absolute ones
// included, and ".." resolve inside it (openat2 RESOLVE_IN_ROOT), and
// ReservedPaths are checked relative to it. It also keeps set_hostname off
// the host (the name is only recorded). Commands themselves still run on
// the host: a command's own paths are the host's. Call it once, before
// NewServer; it is for the host-process fake runtime, never for an agent
// that is a sandbox's init. It fails when dir is not an absolute path of a
// directory.
func SetRoot(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("agent root %q is not an absolute path", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(real); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("agent root %s is not a directory", dir)
	}
	if real == "/" {
		real = ""
	}
	fsRoot = real
	return nil
}

// errOutsideRoot: an fd resolved outside fsRoot (never expected: opens
// beneath the root use RESOLVE_IN_ROOT).
var errOutsideRoot = errors.New("resolves outside the agent's root")

// inRoot turns a host path the kernel reports for an fd into the path in
// the agent's view (fsRoot stripped).
func inRoot(p string) (string, error) {
	if fsRoot == "" {
		return p, nil
	}
	if p == fsRoot {
		return "/", nil
	}
	if rest, ok := strings.CutPrefix(p, fsRoot+"/"); ok {
		return "/" + rest, nil
	}
	return "", fmt.Errorf("%s %w", p, errOutsideRoot)
}

// openInRoot opens path (in the agent's view) with flags: beneath fsRoot
// with RESOLVE_IN_ROOT when one is set, else as open(2) does. Errors are
// the open's errno.
func openInRoot(path string, flags int) (int, error) {
	if fsRoot == "" {
		return unix.Open(path, flags, 0)
	}
	rootfd, err := unix.Open(fsRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(rootfd)
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	// Not cleaned: ".." after a symlink must resolve as the kernel does.
	rel := strings.TrimLeft(path, "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(rootfd, rel, &how)
}

// cwdPath is the host path of an exec's working directory cwd, and the
// error (kind not_found or not_dir) when it is not a directory.
func cwdPath(cwd string) (string, error) {
	fd, err := openInRoot(cwd, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return "", &Error{Failure{Kind: FailNotFound, Message: fmt.Sprintf("%s: no such directory", cwd), Field: "cwd"}}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", &Error{Failure{Kind: FailNotDir, Message: fmt.Sprintf("%s: not a directory", cwd), Field: "cwd"}}
	}
	if fsRoot == "" {
		return cwd, nil
	}
	host, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", &fs.PathError{Op: "resolve", Path: cwd, Err: err}
	}
	return host, nil
}
