package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestIsolation: a sandbox cannot read host files, see host processes, see
// another sandbox's files (network containment: network_test.go).
func TestIsolation(t *testing.T) {
	a := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	b := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})

	t.Run("HostFiles", func(t *testing.T) {
		secret := "host-secret-" + randomHex(8)
		path := fmt.Sprintf("/tmp/sbx-e2e-secret-%s", randomHex(4))
		if err := os.WriteFile(path, []byte(secret), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		res := sh(t, a, "cat "+path+"; grep -r "+secret+" /tmp /etc /root /workspace 2>/dev/null; echo done")
		if strings.Contains(res.Stdout, secret) {
			t.Fatalf("the sandbox read a host file: %q", res.Stdout)
		}
		// The host's data dir and its sbx.db are not visible either.
		res = sh(t, a, "ls "+h.dataDir+" 2>&1; ls /var/lib/sbx 2>&1")
		if strings.Contains(res.Stdout, "sbx.db") {
			t.Fatalf("the sandbox sees sbxd's data: %q", res.Stdout)
		}
	})
	t.Run("HostProcesses", func(t *testing.T) {
		out := mustSh(t, a, "ps -o pid,args")
		if strings.Contains(out, "sbxd") || strings.Contains(out, "runsc") || strings.Contains(out, "go test") {
			t.Fatalf("the sandbox sees host processes:\n%s", out)
		}
		if n := len(strings.Split(strings.TrimSpace(out), "\n")); n > 6 {
			t.Fatalf("the sandbox sees %d processes:\n%s", n-1, out)
		}
		if pid1 := mustSh(t, a, "cat /proc/1/cmdline | tr '\\0' ' '"); !strings.Contains(pid1, "sbx-agent") {
			t.Fatalf("pid 1 is %q, want sbx-agent", pid1)
		}
	})
	t.Run("OtherSandboxFiles", func(t *testing.T) {
		mustSh(t, a, "echo mine > /workspace/a-only; echo mine > /tmp/a-only")
		res := sh(t, b, "cat /workspace/a-only /tmp/a-only; find / -name a-only 2>/dev/null")
		if strings.Contains(res.Stdout, "mine") || strings.Contains(res.Stdout, "a-only") {
			t.Fatalf("sandbox b sees a's files: %q", res.Stdout)
		}
	})
	t.Run("Interfaces", func(t *testing.T) {
		// Loopback and the veth to the host, nothing of the host's.
		out := mustSh(t, a, "cat /proc/net/dev")
		var names []string
		for _, line := range strings.Split(out, "\n")[2:] {
			if f := strings.Fields(line); len(f) > 0 {
				names = append(names, f[0])
			}
		}
		if strings.Join(names, " ") != "lo: eth0:" {
			t.Fatalf("sandbox has interfaces %v:\n%s", names, out)
		}
		// Loopback works inside.
		mustSh(t, a, "(nc -l -p 8080 -e echo pong &) ; sleep 0.3; echo ping | nc 127.0.0.1 8080 | grep pong")
	})
	t.Run("LimitsApplied", func(t *testing.T) {
		c := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", MemoryMB: 300, CPUs: 0.5})
		out := mustSh(t, c, "free -m | awk '/Mem:/ {print $2}'")
		var mb int
		fmt.Sscan(out, &mb)
		if mb < 200 || mb > 320 {
			t.Fatalf("sandbox with memory_mb=300 sees %d MB of memory", mb)
		}
	})
}
