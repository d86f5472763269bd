package network

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockDir holds the host-wide locks of sandbox networks.
const DefaultLockDir = "/run/sbx"

// hostLocks are the flocks that make a network tag and a sandbox CIDR one
// sbxd's on this host: net-tag-<tag>.lock, and net-cidr-<addr>-<bits>.lock
// for the CIDR. Two sbxd with the same tag, or with CIDRs that overlap,
// would delete each other's interfaces and firewall rules; the second
// refuses to start instead. The kernel drops a flock when its holder
// exits, however it exits, so a crashed sbxd never blocks the next one.
type hostLocks struct {
	dir   string
	files []*os.File
}

// lockNetwork takes the locks of tag and cidr in dir, writing holder (who
// this sbxd is, for the error another one gets) into them.
//
// Errors: the tag or an overlapping CIDR is held by another live process
// (the error names the lock, that process's pid and its holder text); the
// directory cannot be written.
func lockNetwork(dir, tag string, cidr netip.Prefix, holder string) (*hostLocks, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("network lock dir: %w", err)
	}
	// The registry lock serialises taking locks and removing stale CIDR
	// lock files; it is held only for the time of this function.
	reg, err := os.OpenFile(filepath.Join(dir, "net.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("network lock: %w", err)
	}
	defer reg.Close()
	if err := flockWait(reg, 10*time.Second); err != nil {
		return nil, fmt.Errorf("network lock %s: %w", reg.Name(), err)
	}
	l := &hostLocks{dir: dir}
	ok := false
	defer func() {
		if !ok {
			l.drop(true) // the registry lock is held
		}
	}()
	tagPath := filepath.Join(dir, "net-tag-"+tag+".lock")
	if err := l.take(tagPath, holder); err != nil {
		return nil, fmt.Errorf("network tag %q %w: give this sbxd another --network-tag and --network-cidr", tag, err)
	}
	own := cidrLockName(cidr)
	names, err := filepath.Glob(filepath.Join(dir, "net-cidr-*.lock"))
	if err != nil {
		return nil, err
	}
	for _, p := range names {
		other, ok := parseCIDRLockName(filepath.Base(p))
		if !ok || filepath.Base(p) == own || !other.Overlaps(cidr) {
			continue
		}
		if who, held := heldBy(p); held {
			return nil, fmt.Errorf("network CIDR %s overlaps %s, which is held by %s (lock %s): give this sbxd a --network-cidr apart from it", cidr, other, who, p)
		}
		_ = os.Remove(p) // stale: its holder is gone
	}
	if err := l.take(filepath.Join(dir, own), holder); err != nil {
		return nil, fmt.Errorf("network CIDR %s %w: give this sbxd another --network-cidr and --network-tag", cidr, err)
	}
	ok = true
	return l, nil
}

// take locks path and writes holder into it, or says who holds it
// ("is held by pid 12, ... (lock path)").
func (l *hostLocks) take(path, holder string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("cannot be locked: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("is held by %s (lock %s)", holderText(b), path)
		}
		return fmt.Errorf("cannot be locked (%s): %w", path, err)
	}
	l.files = append(l.files, f)
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d, %s\n", os.Getpid(), holder)), 0)
	return nil
}

// release drops the locks and removes their files, under the registry
// lock so that no other sbxd is between opening a file and locking it (a
// file left by a killed sbxd is harmless: its flock went with it).
func (l *hostLocks) release() {
	if l == nil || len(l.files) == 0 {
		return
	}
	reg, err := os.OpenFile(filepath.Join(l.dir, "net.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		l.drop(false)
		return
	}
	defer reg.Close()
	l.drop(flockWait(reg, 5*time.Second) == nil)
}

// drop closes the lock files, removing them first when remove is true
// (the caller holds the registry lock).
func (l *hostLocks) drop(remove bool) {
	for _, f := range l.files {
		if remove {
			_ = os.Remove(f.Name())
		}
		_ = f.Close()
	}
	l.files = nil
}

// heldBy reports whether another open file holds the flock of path, and
// what its holder wrote there.
func heldBy(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		return holderText(b), true
	}
	return "", false
}

func holderText(b []byte) string {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "another process"
	}
	return "another sbxd: " + s
}

// flockWait takes an exclusive flock on f, waiting at most d.
func flockWait(f *os.File, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cidrLockName is the lock file name of a CIDR: net-cidr-10.200.0.0-16.lock.
func cidrLockName(p netip.Prefix) string {
	return fmt.Sprintf("net-cidr-%s-%d.lock", p.Addr(), p.Bits())
}

func parseCIDRLockName(name string) (netip.Prefix, bool) {
	s, ok := strings.CutPrefix(name, "net-cidr-")
	if !ok {
		return netip.Prefix{}, false
	}
	s, ok = strings.CutSuffix(s, ".lock")
	i := strings.LastIndex(s, "-")
	if !ok || i < 0 {
		return netip.Prefix{}, false
	}
	a, err := netip.ParseAddr(s[:i])
	bits, berr := strconv.Atoi(s[i+1:])
	if err != nil || berr != nil {
		return netip.Prefix{}, false
	}
	p, err := a.Prefix(bits)
	return p, err == nil
}
