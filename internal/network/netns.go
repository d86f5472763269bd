// Package network gives each sandbox its own network namespace on the host,
// which runsc joins with --network=sandbox. Today a namespace has loopback
// only: the sandbox has no egress at all. It is the layer where veth pairs,
// nftables rules and the egress proxy attach.
package network

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Manager creates and removes sandboxes' network namespaces, each bind
// mounted at dir/sbx-<id> (dir is /run/sbx/netns by default).
type Manager struct {
	dir string
}

// NewManager returns a Manager that keeps namespace files in dir. The dir
// is made a private mount of itself, so that a change of propagation of a
// parent (iproute2 makes /run/netns shared) cannot pin its mounts.
func NewManager(dir string) (*Manager, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if !isMountPoint(dir) {
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("bind mount %s: %w", dir, err)
		}
	}
	if err := unix.Mount("none", dir, "none", unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make %s private: %w", dir, err)
	}
	return &Manager{dir: dir}, nil
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

// Prefix starts the file name of every namespace sbx creates.
const Prefix = "sbx-"

// Path is the namespace file of sandbox id.
func (m *Manager) Path(id string) string { return filepath.Join(m.dir, Prefix+id) }

// Create makes a new network namespace for id with its loopback up and
// returns its path. An existing one is reused.
func (m *Manager) Create(id string) (string, error) {
	path := m.Path(id)
	if isNSMount(path) {
		return path, nil
	}
	if err := newNamespace(path); err != nil {
		return "", fmt.Errorf("create netns for %s: %w", id, err)
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		_ = m.Delete(id)
		return "", err
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		_ = m.Delete(id)
		return "", err
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err == nil {
		err = nh.LinkSetUp(lo)
	}
	if err != nil {
		_ = m.Delete(id)
		return "", fmt.Errorf("loopback up in netns of %s: %w", id, err)
	}
	return path, nil
}

// newNamespace unshares a network namespace on a locked thread and bind
// mounts it at path, then returns the thread to the original namespace.
func newNamespace(path string) error {
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

func isNSMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// Delete unmounts and removes id's namespace; a missing one is fine.
func (m *Manager) Delete(id string) error {
	path := m.Path(id)
	for isNSMount(path) {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount netns %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List returns the ids of every namespace sbx has in its dir.
func (m *Manager) List() ([]string, error) {
	des, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, de := range des {
		if len(de.Name()) > len(Prefix) && de.Name()[:len(Prefix)] == Prefix {
			ids = append(ids, de.Name()[len(Prefix):])
		}
	}
	return ids, nil
}
