package network

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
)

// An interrupted dump is read again; its last answer counts. Other errors
// and a dump that never settles are returned.
func TestConsistent(t *testing.T) {
	n := 0
	got, err := Consistent(func() (int, error) {
		n++
		if n < 3 {
			return -1, fmt.Errorf("link list: %w", netlink.ErrDumpInterrupted)
		}
		return 42, nil
	})
	if err != nil || got != 42 || n != 3 {
		t.Fatalf("got %d, %v after %d reads; want 42, nil after 3", got, err, n)
	}
	boom := errors.New("boom")
	n = 0
	if _, err := Consistent(func() (int, error) { n++; return 0, boom }); !errors.Is(err, boom) || n != 1 {
		t.Fatalf("other error: %v after %d reads", err, n)
	}
	n = 0
	if _, err := Consistent(func() (int, error) { n++; return 0, netlink.ErrDumpInterrupted }); !errors.Is(err, netlink.ErrDumpInterrupted) || n != dumpTries {
		t.Fatalf("never settles: %v after %d reads", err, n)
	}
}
