// Command agent-session plays the part of an AI agent working in an sbx
// sandbox, through the Go SDK: it creates a sandbox on the default image,
// writes a small Python project with unittest tests, commits it with git,
// runs the tests, breaks a file, sees the tests fail, and puts the file
// back with git. Then it takes a disk checkpoint, wrecks the machine (rm -rf
// of the project, apt-get remove git), sees what changed, and restores the
// checkpoint: everything is back. Last it narrows the sandbox's network to
// one package registry and sees a request elsewhere refused on the host,
// with the reason in the network log. It prints each step with its exit code
// and exits non-zero if the sandbox did not behave as an agent expects.
//
//	go run ./examples/agent-session [--keep]
//
// It talks to sbxd at $SBX_URL (with $SBX_API_KEY) or the socket $SBX_SOCKET
// (default /run/sbx/sbx.sock).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

const calc = `def add(a, b):
    return a + b


def mul(a, b):
    return a * b
`

const tests = `import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(4, 5), 20)


if __name__ == "__main__":
    unittest.main()
`

func main() {
	keep := flag.Bool("keep", false, "keep the sandbox at the end")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "agent-session: FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("agent-session: OK")
}

type session struct {
	sb *client.Sandbox
}

// step runs a shell command, prints it with its output and exit code, and
// checks the exit code.
func (s *session) step(ctx context.Context, what, cmd string, wantExit int) (*client.ExecResult, error) {
	fmt.Printf("\n### %s\n$ %s\n", what, cmd)
	start := time.Now()
	res, err := s.sb.Exec(ctx, cmd)
	if err != nil {
		return nil, err
	}
	out := strings.TrimRight(res.Stdout+res.Stderr, "\n")
	if out != "" {
		fmt.Println(indent(out))
	}
	fmt.Printf("→ exit code %d (%d ms)\n", res.ExitCode, time.Since(start).Milliseconds())
	if res.ExitCode != wantExit {
		return res, fmt.Errorf("%s: exit code %d, want %d", what, res.ExitCode, wantExit)
	}
	return res, nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func run(ctx context.Context, keep bool) error {
	c, err := client.New()
	if err != nil {
		return err
	}
	start := time.Now()
	sb, err := c.Sandboxes.CreateStream(ctx, api.CreateSandboxRequest{
		Labels: map[string]string{"example": "agent-session"},
		// No .pyc files: a file put back within the same second as its
		// broken version would otherwise be shadowed by a stale .pyc.
		Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}},
		func(msg string, _ time.Time) { fmt.Println("  [sbxd]", msg) })
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	fmt.Printf("sandbox %s (%s) is %s on image %q, created in %d ms\n", sb.Name, sb.ID, sb.State, sb.Image, time.Since(start).Milliseconds())
	if !keep {
		defer func() {
			if err := sb.Delete(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintln(os.Stderr, "delete sandbox:", err)
			} else {
				fmt.Printf("\nsandbox %s deleted\n", sb.Name)
			}
		}()
	}
	s := &session{sb: sb}

	fmt.Println("\n### write the project: calc.py and test_calc.py")
	for path, body := range map[string]string{"/workspace/proj/calc.py": calc, "/workspace/proj/test_calc.py": tests} {
		if err := sb.WriteFile(ctx, path, strings.NewReader(body), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Println("  wrote", path)
	}
	steps := []struct {
		what, cmd string
		exit      int
	}{
		{"commit it with git", `cd /workspace/proj && git init -q && git add -A && git -c user.name=agent -c user.email=agent@example.org commit -qm "calc with tests" && git log --oneline`, 0},
		{"run the tests", "cd /workspace/proj && python3 -m unittest -v", 0},
		{"break a file (the agent's mistake)", `cd /workspace/proj && sed -i 's/return a + b/return a - b/' calc.py && git diff --stat`, 0},
		{"run the tests again: they fail", "cd /workspace/proj && python3 -m unittest >/tmp/out 2>&1; code=$?; tail -n 6 /tmp/out; exit $code", 1},
		{"see what changed", "cd /workspace/proj && git diff", 0},
		{"undo the change with git, tests pass again", "cd /workspace/proj && git checkout -- calc.py && python3 -m unittest >/tmp/out 2>&1; code=$?; tail -n 3 /tmp/out; exit $code", 0},
	}
	for _, st := range steps {
		if _, err := s.step(ctx, st.what, st.cmd, st.exit); err != nil {
			return err
		}
	}

	fmt.Println("\n### take a disk checkpoint before a risky step")
	start = time.Now()
	cp, err := sb.Checkpoint(ctx, "tests pass")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	fmt.Printf("  %s (%q): %d files, %d bytes stored, in %d ms\n", cp.ID, cp.Comment, cp.Files, cp.AddedBytes, time.Since(start).Milliseconds())
	if _, err := s.step(ctx, "the risky step goes wrong: the project and git are gone",
		"rm -rf /workspace/proj && apt-get remove -y git >/dev/null 2>&1; ls /workspace/proj; git --version", 127); err != nil {
		return err
	}
	d, err := sb.Diff(ctx, cp.ID, "live")
	if err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	fmt.Printf("\n### what the step did (diff %s..live): %d added, %d modified, %d deleted, e.g.\n", cp.ID, len(d.Added), len(d.Modified), len(d.Deleted))
	for i, c := range d.Deleted {
		if i == 4 {
			break
		}
		fmt.Println("  -", c.Path)
	}
	fmt.Printf("\n### restore %s\n", cp.ID)
	start = time.Now()
	if err := sb.Restore(ctx, cp.ID, nil); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Printf("  restored in %d ms; the sandbox is %s and boots on the next command\n", time.Since(start).Milliseconds(), sb.State)
	if _, err := s.step(ctx, "everything is back: git, the project, its history, passing tests",
		"cd /workspace/proj && git --version && git log --oneline && python3 -m unittest >/tmp/out 2>&1; code=$?; tail -n 1 /tmp/out; exit $code", 0); err != nil {
		return err
	}

	fmt.Println("\n### before running code it did not write, the agent narrows the network to one registry")
	rules, err := sb.Network().Set(ctx, api.NetworkRules{Internet: true, Allow: []string{"pypi.org", "files.pythonhosted.org"}})
	if err != nil {
		return fmt.Errorf("network rules: %w", err)
	}
	fmt.Printf("  internet %v, allow %v (enforced on the host)\n", rules.Internet, rules.Allow)
	// The name is refused by sbxd's DNS server on the host: nothing leaves.
	if _, err := s.step(ctx, "a name outside the rules does not even resolve",
		"getent hosts exfil.example.com; echo \"exit $?\"; exit 0", 0); err != nil {
		return err
	}
	nlog, err := sb.Network().Log(ctx)
	if err != nil {
		return fmt.Errorf("network log: %w", err)
	}
	fmt.Println("\n### the network log says why")
	found := false
	for _, e := range nlog.Refused {
		fmt.Printf("  %s %s: %s\n", e.Kind, e.Destination, e.Reason)
		found = found || e.Destination == "exfil.example.com"
	}
	if !found {
		return fmt.Errorf("the network log does not show the refused name")
	}
	return nil
}
