package cli

import (
	"os"
	"strings"
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

// TestBenchFlags: sizes, changes, fan-outs and limits that cannot be
// measured are refused before any request, naming the flag.
func TestBenchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"bench", "checkpoint", "--size", "0"}, "--size"},
		{[]string{"bench", "checkpoint", "--size", "-5"}, "--size"},
		{[]string{"bench", "checkpoint", "--size", "10", "--change", "500"}, "--change"},
		{[]string{"bench", "checkpoint", "--change", "0"}, "--change"},
		{[]string{"bench", "suspend", "--sizes", ","}, "--sizes"},
		{[]string{"bench", "snapshot", "--sizes", ""}, "--sizes"},
		{[]string{"bench", "snapshot", "--fanout", "-1"}, "--fanout"},
		{[]string{"bench", "snapshot", "--fanout", "100"}, "--fanout"},
		{[]string{"diff", "dev", "--limit", "-5"}, "--limit"},
	} {
		_, errs, code := runCLI(t, c.args...)
		if code == 0 || strings.Contains(errs, "sbxd running") || !strings.Contains(errs, c.flag) {
			t.Errorf("sbx %v: exit %d, stderr %q", c.args, code, errs)
		}
	}
}
