// Command chain shows sbx's snapshot chain in the Go SDK: an agent
// remembers a memory snapshot after each of five steps that passed, then
// goes back to step 3. The sandbox keeps its name and runs again with
// step 3's files and processes; the chain lives in sbxd, so a restarted
// agent can still go back.
//
//	go run ./examples/go/chain [--keep]
//
// It talks to sbxd at $SBX_URL (with $SBX_API_KEY) or the socket
// $SBX_SOCKET (default /run/sbx/sbx.sock), and exits non-zero if sbx did
// not behave as described.
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

func main() {
	keep := flag.Bool("keep", false, "keep the sandbox and its snapshots at the end")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "chain: FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("chain: OK")
}

func run(ctx context.Context, keep bool) error {
	c, err := client.New()
	if err != nil {
		return err
	}
	sb, err := c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"example": "chain"}})
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	var remembered []string // the snapshots this run made, deleted at the end
	defer func() {
		if !keep {
			_ = sb.Delete(context.WithoutCancel(ctx))
			for _, id := range remembered {
				_ = c.Snapshots.Delete(context.WithoutCancel(ctx), id)
			}
		}
	}()
	fmt.Printf("sandbox %s (%s)\n", sb.Name, sb.ID)
	for i := 1; i <= 5; i++ {
		step := fmt.Sprintf("step-%d", i)
		cmd := fmt.Sprintf("echo %s >> /workspace/progress", step)
		if i == 2 {
			// A server the agent started: it lives in memory, and going
			// back brings it back.
			cmd += " && (python3 -m http.server 8000 >/dev/null 2>&1 &)"
		}
		if i == 4 {
			cmd += " && pkill -f 'http[.]server'"
		}
		if r, err := sb.Exec(ctx, cmd); err != nil || r.ExitCode != 0 {
			return fmt.Errorf("%s: %v", step, err)
		}
		sn, err := client.Remember(ctx, sb, step, client.RememberOptions{})
		if err != nil {
			return fmt.Errorf("remember %s: %w", step, err)
		}
		remembered = append(remembered, sn.ID)
		fmt.Printf("%s done, remembered as %s (%d bytes of memory)\n", step, sn.ID, sn.MemoryBytes)
	}
	chain, err := client.Chain(ctx, sb)
	if err != nil {
		return err
	}
	var steps []string
	for _, sn := range chain {
		steps = append(steps, sn.Name)
	}
	fmt.Printf("chain: %s\n", strings.Join(steps, " → "))
	if len(chain) != 5 {
		return fmt.Errorf("chain has %d steps, want 5", len(chain))
	}
	name := sb.Name
	back, err := client.GoBackTo(ctx, sb, "step-3")
	if err != nil {
		return err
	}
	sb = back
	fmt.Printf("went back to step-3: %s is now %s\n", sb.Name, sb.ID)
	r, err := sb.Exec(ctx, "cat /workspace/progress; pgrep -f 'http[.]server' >/dev/null && echo server running")
	if err != nil {
		return err
	}
	fmt.Print(r.Stdout)
	if sb.Name != name || r.Stdout != "step-1\nstep-2\nstep-3\nserver running\n" {
		return fmt.Errorf("after going back: name %s, %q", sb.Name, r.Stdout)
	}
	return nil
}
