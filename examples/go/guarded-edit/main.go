// Command guarded-edit shows sbx's guarded run in the Go SDK: each command
// gets the lightest undo that covers what it can break, and a command that
// fails is rolled back. An edit in a git repository is undone with git; a
// command that wrecks the system is undone with a disk checkpoint.
//
//	go run ./examples/go/guarded-edit [--keep]
//
// It talks to sbxd at $SBX_URL (with $SBX_API_KEY) or the socket
// $SBX_SOCKET (default /run/sbx/sbx.sock), and exits non-zero if sbx did
// not behave as described. The guard is a convenience, not a security
// boundary: the sandbox is the boundary.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func main() {
	keep := flag.Bool("keep", false, "keep the sandbox at the end")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "guarded-edit: FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("guarded-edit: OK")
}

func guarded(ctx context.Context, sb *client.Sandbox, cmd string) (*client.GuardResult, error) {
	res, err := client.Guarded(ctx, sb, cmd, client.GuardOptions{Cwd: "/workspace/proj"})
	if err != nil {
		return nil, err
	}
	fmt.Printf("\n$ %s\n  undo %s, exit %d, rolled back %v\n", cmd, res.Undo, res.Result.ExitCode, res.RolledBack)
	return res, nil
}

func run(ctx context.Context, keep bool) error {
	c, err := client.New()
	if err != nil {
		return err
	}
	sb, err := c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"example": "guarded-edit"}})
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	defer func() {
		if !keep {
			_ = sb.Delete(context.WithoutCancel(ctx))
		}
	}()
	fmt.Printf("sandbox %s (%s)\n", sb.Name, sb.ID)
	setup := `mkdir -p /workspace/proj && cd /workspace/proj && git init -q &&
printf 'def add(a, b):\n    return a + b\n' > calc.py &&
git add -A && git -c user.name=agent -c user.email=agent@example.org commit -qm init`
	if r, err := sb.Exec(ctx, setup); err != nil || r.ExitCode != 0 {
		return fmt.Errorf("set up the project: %v %s", err, r.Stderr)
	}
	for _, cmd := range []string{"cat calc.py", "sed -i s/+/-/ calc.py", "rm -rf /usr/lib/python3.11", "psql -c 'DROP TABLE users'"} {
		fmt.Printf("checkpointFor(%q) = %s\n", cmd, client.CheckpointFor(cmd))
	}

	// An edit whose check fails: git puts the file back.
	res, err := guarded(ctx, sb, `sed -i 's/a + b/a - b/' calc.py && echo scratch > notes.txt && grep -q 'a + b' calc.py`)
	if err != nil {
		return err
	}
	if res.Undo != "git" || !res.RolledBack {
		return fmt.Errorf("the failed edit was not rolled back with git")
	}
	r, err := sb.Exec(ctx, "cd /workspace/proj && grep -c 'a + b' calc.py && ls")
	if err != nil || r.Stdout != "1\ncalc.py\n" {
		return fmt.Errorf("after the rollback: %v %q", err, r.Stdout)
	}
	fmt.Printf("  calc.py is back, notes.txt is gone\n")

	// A command that wrecks the system and fails: a checkpoint puts it back.
	res, err = guarded(ctx, sb, `rm -rf /usr/lib/python3.11 && python3 -c 'print(1)'`)
	if err != nil {
		return err
	}
	if res.Undo != "checkpoint" || !res.RolledBack {
		return fmt.Errorf("the wrecked system was not rolled back with a checkpoint")
	}
	r, err = sb.Exec(ctx, `python3 -c 'print("python is back")'`)
	if err != nil || r.ExitCode != 0 {
		return fmt.Errorf("python after the rollback: %v %q", err, r.Stderr)
	}
	fmt.Printf("  %s", r.Stdout)

	// A command that passes keeps its change.
	if res, err = guarded(ctx, sb, `printf 'def mul(a, b):\n    return a * b\n' >> calc.py`); err != nil {
		return err
	}
	if res.RolledBack || res.Result.ExitCode != 0 {
		return fmt.Errorf("a passing edit was rolled back")
	}
	return nil
}
