// Command try-in-copy shows the install-then-verify flow of sbx's Go SDK:
// an agent installs a tool in a live copy of its sandbox (offline by
// default) and keeps the copy only if the tool works. A broken install is
// thrown away with its copy, and the agent's sandbox never saw it; a good
// one replaces the sandbox, keeping its name and network rules.
//
//	go run ./examples/go/try-in-copy [--step CMD --verify CMD --online] [--keep]
//
// Without --step it installs a small tool from a script (no network
// needed); with --step 'apt-get install -y jq' --verify 'jq --version'
// --online it installs a real package (the sandbox's rules must allow the
// mirror). It talks to sbxd at $SBX_URL (with $SBX_API_KEY) or the socket
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

const (
	brokenInstall = `mkdir -p /opt/greet && printf '#!/bin/sh\nexit 1\n' > /opt/greet/greet && chmod +x /opt/greet/greet && ln -sf /opt/greet/greet /usr/local/bin/greet`
	goodInstall   = `mkdir -p /opt/greet && printf '#!/bin/sh\necho hello from greet\n' > /opt/greet/greet && chmod +x /opt/greet/greet && ln -sf /opt/greet/greet /usr/local/bin/greet`
	verifyGreet   = `greet | grep -q hello`
)

func main() {
	step := flag.String("step", "", "install command (default: a small tool from a script)")
	verify := flag.String("verify", "", "check command (default: the tool says hello)")
	online := flag.Bool("online", false, "let the copy use the sandbox's network rules while the step runs")
	keep := flag.Bool("keep", false, "keep the sandbox at the end")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, *step, *verify, *online, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "try-in-copy: FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("try-in-copy: OK")
}

func report(what string, res *client.TryResult) {
	fmt.Printf("\n### %s\n", what)
	fmt.Printf("step exit %d", res.Step.ExitCode)
	if res.Verify != nil {
		fmt.Printf(", verify exit %d", res.Verify.ExitCode)
	}
	if res.Kept {
		fmt.Printf(" → the copy was kept: %s is now %s\n", res.Sandbox.Name, res.Sandbox.ID)
	} else {
		fmt.Printf(" → the copy was thrown away; %s (%s) is untouched\n", res.Sandbox.Name, res.Sandbox.ID)
	}
}

func run(ctx context.Context, step, verify string, online, keep bool) error {
	c, err := client.New()
	if err != nil {
		return err
	}
	sb, err := c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"example": "try-in-copy"}})
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	defer func() {
		if !keep {
			_ = sb.Delete(context.WithoutCancel(ctx))
		}
	}()
	fmt.Printf("sandbox %s (%s)\n", sb.Name, sb.ID)
	opts := client.TryOptions{Online: online}

	if step != "" {
		res, err := client.TryInCopy(ctx, sb, step, verify, opts)
		if err != nil {
			return err
		}
		report(step, res)
		sb = res.Sandbox
		return nil
	}

	res, err := client.TryInCopy(ctx, sb, brokenInstall, verifyGreet, opts)
	if err != nil {
		return err
	}
	report("a broken install", res)
	if res.Kept {
		return fmt.Errorf("a copy whose check failed was kept")
	}
	if r, err := sb.Exec(ctx, "command -v greet"); err != nil || r.ExitCode == 0 {
		return fmt.Errorf("the broken tool reached the sandbox (%v)", err)
	}

	res, err = client.TryInCopy(ctx, sb, goodInstall, verifyGreet, opts)
	if err != nil {
		return err
	}
	report("a good install", res)
	if !res.Kept {
		return fmt.Errorf("the copy that passed was not kept: %s", res.Verify.Stderr)
	}
	sb = res.Sandbox
	r, err := sb.Exec(ctx, "greet")
	if err != nil || strings.TrimSpace(r.Stdout) != "hello from greet" {
		return fmt.Errorf("greet in the kept sandbox: %v %q", err, r.Stdout)
	}
	fmt.Printf("$ greet\n  %s", r.Stdout)
	return nil
}
