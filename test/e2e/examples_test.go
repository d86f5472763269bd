package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sdkEnv is the environment that points an SDK's tests and examples at
// the sbxd under test: its socket, and its TCP listener with the key.
func sdkEnv() []string {
	return append(os.Environ(), "SBX_SOCKET="+h.sock, "SBX_URL=http://"+h.listen, "SBX_API_KEY="+h.apiKey)
}

// TestExamplesGo runs the Go SDK's undo examples (examples/go) against the
// sbxd under test, on the default image: each checks what it shows and
// exits non-zero if sbx did not behave so.
func TestExamplesGo(t *testing.T) {
	for _, ex := range []string{"try-in-copy", "guarded-edit", "chain"} {
		t.Run(ex, func(t *testing.T) {
			cmd := exec.Command("go", "run", "../../examples/go/"+ex)
			cmd.Env = append(sdkEnv(), "SBX_URL=")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), ex+": OK") {
				t.Fatalf("%s: %v\n%s", ex, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// need finds a program the SDK suites need; with CI=true a missing one
// fails the test.
func need(t *testing.T, prog string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (scripts/install.sh --test-deps installs it)", prog)
		}
		t.Skipf("%s is not installed", prog)
	}
	return p
}

// TestSDKTypeScript runs the TypeScript SDK's own suite (node's test
// runner: unit, conformance, and integration against this sbxd, its
// examples included).
func TestSDKTypeScript(t *testing.T) {
	npm := need(t, "npm")
	dir, _ := filepath.Abs("../../sdk/typescript")
	for _, args := range [][]string{{"ci", "--no-audit", "--no-fund"}, {"test"}} {
		cmd := exec.Command(npm, args...)
		cmd.Dir = dir
		cmd.Env = sdkEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("npm %s:\n%s", strings.Join(args, " "), tailStr(string(out), 6000))
	}
}

// TestSDKPython runs the Python SDK's own suite (unittest: unit,
// conformance, and integration against this sbxd, its examples included).
func TestSDKPython(t *testing.T) {
	py := need(t, "python3")
	root, _ := filepath.Abs("../..")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", "sdk/python/tests", "-t", "sdk/python")
	cmd.Dir = root
	cmd.Env = append(sdkEnv(), "PYTHONPATH="+filepath.Join(root, "sdk/python"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python SDK tests: %v\n%s", err, out)
	}
	t.Logf("%s", tailStr(string(out), 6000))
}
