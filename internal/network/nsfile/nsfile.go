// Package nsfile keeps network namespaces as files: a namespace made by
// unshare(CLONE_NEWNET) on a locked thread is bind mounted on a file (as
// `ip netns add` does), so it outlives every process in it and runsc can
// be given its path (OCI spec linux.namespaces[].path).
package nsfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	goruntime "runtime"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// PrivateDir makes dir (created if missing) a private bind mount of itself,
// so that a change of propagation of a parent (iproute2 makes /run/netns
// shared) cannot pin the namespace mounts in it.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if !isMountPoint(dir) {
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", dir, err)
		}
	}
	if err := unix.Mount("none", dir, "none", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether dir is the root of a mount.
func isMountPoint(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// Create unshares a new network namespace on a locked thread and bind
// mounts it on path (created), then returns the thread to the original
// namespace. The namespace has only a loopback interface, down.
func Create(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if f != nil {
		f.Close()
	}
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		// The thread is not unlocked: if switching back failed, it must die
		// with the goroutine rather than run other code in the new netns.
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		mountErr := unix.Mount(src, path, "none", unix.MS_BIND, "")
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return to host netns: %w", err)
			return
		}
		goruntime.UnlockOSThread()
		errc <- mountErr
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// IsMount reports whether path is a bind mount of a namespace (nsfs).
func IsMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// Delete unmounts and removes a namespace file; a missing one is fine.
// The namespace itself ends when no process is left in it.
func Delete(path string) error {
	for IsMount(path) {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount netns %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
