package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAgentSession runs the README's agent session (examples/agent-session)
// against the sbxd under test, on the default image.
func TestAgentSession(t *testing.T) {
	cmd := exec.Command("go", "run", "../../examples/agent-session")
	cmd.Env = append(os.Environ(), "SBX_SOCKET="+h.sock, "SBX_URL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agent session failed: %v\n%s", err, out)
	}
	for _, want := range []string{"Ran 2 tests", "FAILED (failures=1)", "→ exit code 1", "→ exit code 127", "restore v1", "calc with tests", "agent-session: OK"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("transcript lacks %q:\n%s", want, out)
		}
	}
}
