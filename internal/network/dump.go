package network

import (
	"errors"
	"time"

	"github.com/vishvananda/netlink"
)

// dumpTries bounds how often Consistent reads a list again.
const dumpTries = 20

// Consistent returns what the netlink dump f lists (links, addresses,
// routes), reading it again while the kernel reports that the list
// changed during the read (netlink.ErrDumpInterrupted: another program
// added or removed interfaces meanwhile, as every sandbox boot does). A
// busy host interrupts dumps now and then; treating that as a failure
// made sbxd's start fail. After dumpTries interrupted reads (with 10–200 ms
// between them) it returns the last error; other errors at once.
func Consistent[T any](f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for i := 0; i < dumpTries; i++ {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
		time.Sleep(min(time.Duration(i+1)*10*time.Millisecond, 200*time.Millisecond))
	}
	return v, err
}
