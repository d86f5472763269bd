// Command sbx is the command line of sbx: create sandboxes, run commands
// in them, copy files, manage images. It talks to sbxd through client/.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sbxhq/sbx/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
