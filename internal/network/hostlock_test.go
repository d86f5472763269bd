package network

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostLocks: a tag, or a CIDR overlapping another's, held by one
// holder is refused to a second with an error naming the first; released,
// it can be taken again.
func TestHostLocks(t *testing.T) {
	dir := t.TempDir()
	pfx := netip.MustParsePrefix
	a, err := lockNetwork(dir, "a", pfx("10.0.0.0/16"), "data dir /srv/a")
	must(t, err)
	for _, c := range []struct {
		tag, cidr, want string
	}{
		{"a", "10.1.0.0/16", `network tag "a" is held by another sbxd: pid`},
		{"b", "10.0.0.0/16", "network CIDR 10.0.0.0/16 is held by another sbxd: pid"},
		{"c", "10.0.5.0/24", "network CIDR 10.0.5.0/24 overlaps 10.0.0.0/16, which is held by another sbxd: pid"},
		{"d", "10.0.0.0/8", "overlaps 10.0.0.0/16"},
	} {
		_, err := lockNetwork(dir, c.tag, pfx(c.cidr), "data dir /srv/b")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "data dir /srv/a") {
			t.Errorf("%s %s: %v, want an error with %q naming the holder", c.tag, c.cidr, err, c.want)
		}
	}
	// A refused attempt holds nothing: tag b is free for a CIDR apart.
	b, err := lockNetwork(dir, "b", pfx("10.2.0.0/16"), "data dir /srv/b")
	must(t, err)
	a.release()
	// a's locks are gone with it; its stale CIDR file does not block.
	c, err := lockNetwork(dir, "a", pfx("10.0.0.0/15"), "data dir /srv/c")
	must(t, err)
	if _, err := os.Stat(dir + "/" + cidrLockName(pfx("10.0.0.0/16"))); !os.IsNotExist(err) {
		t.Errorf("the stale lock of 10.0.0.0/16 is still there: %v", err)
	}
	if _, err := lockNetwork(dir, "e", pfx("10.2.128.0/17"), ""); err == nil || !strings.Contains(err.Error(), "/srv/b") {
		t.Errorf("an overlap with b: %v", err)
	}
	b.release()
	c.release()
	if left, _ := filepath.Glob(filepath.Join(dir, "net-*-*.lock")); len(left) != 0 {
		t.Errorf("lock files left after release: %v", left)
	}
}
