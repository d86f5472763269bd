package cli

import (
	"os"
	"testing"
	"time"
)

// TestCPUTicks: the CPU reading behind sbx bench suspend --density grows
// while this process works, and is -1 for a process that does not exist.
func TestCPUTicks(t *testing.T) {
	before := cpuTicks(os.Getpid())
	if before < 0 {
		t.Fatal("cpuTicks of this process: -1")
	}
	x := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		x++
	}
	if after := cpuTicks(os.Getpid()); after <= before {
		t.Errorf("cpuTicks after 300 ms of work: %d, before: %d (x=%d)", after, before, x)
	}
	if got := cpuTicks(1 << 30); got != -1 {
		t.Errorf("cpuTicks of a missing pid: %d, want -1", got)
	}
}
