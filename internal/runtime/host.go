package runtime

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Host is what the host has for sandboxes, before any reserve.
type Host struct {
	// CPUs is the number of CPUs sbxd may run on (its affinity mask).
	CPUs int
	// MemoryBytes is MemTotal of /proc/meminfo.
	MemoryBytes int64
}

// HostCapacity reads the host's CPUs (sched_getaffinity) and memory
// (/proc/meminfo MemTotal).
func HostCapacity() (Host, error) {
	var h Host
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return h, fmt.Errorf("cpu affinity: %w", err)
	}
	h.CPUs = set.Count()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return h, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return h, fmt.Errorf("/proc/meminfo MemTotal %q: %w", v, err)
			}
			h.MemoryBytes = kb << 10
			return h, nil
		}
	}
	return h, fmt.Errorf("/proc/meminfo has no MemTotal")
}
