package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sbxhq/sbx/client"
)

func (a *app) shellCmd() *cobra.Command {
	var (
		cwd string
		env []string
	)
	cmd := &cobra.Command{
		Use:   "shell NAME [-- CMD [ARG...]]",
		Short: "Open an interactive terminal in a sandbox (a login shell, or CMD)",
		Long: "Open a terminal in a sandbox, as docker exec -it does: a login shell (bash where the image\n" +
			"has it, else sh), or CMD. Your terminal is put in raw mode; its size follows yours; Ctrl-C and\n" +
			"Ctrl-D go to the program. sbx exits with its exit code. A stopped sandbox is booted first, a\n" +
			"suspended one resumed.",
		Example: "  sbx shell dev\n  sbx shell dev -- python3",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := parseKV("env", env)
			if err != nil {
				return err
			}
			return a.terminal(cmd.Context(), args[0], client.TerminalOptions{Cmd: args[1:], Cwd: cwd, Env: e})
		},
	}
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory (default /workspace)")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "environment KEY=VALUE (repeatable)")
	return cmd
}

// terminal runs opts on a terminal in sandbox name, joined to this
// process's standard input and output, and returns its exit code as an
// exitError (125 for sbx's own failures).
func (a *app) terminal(ctx context.Context, name string, opts client.TerminalOptions) error {
	sb, err := a.c.Sandboxes.Get(ctx, name)
	if err != nil {
		return &exitError{code: 125, err: err}
	}
	in, _ := a.stdin.(*os.File)
	out, _ := a.stdout.(*os.File)
	if out != nil && term.IsTerminal(int(out.Fd())) {
		if w, h, err := term.GetSize(int(out.Fd())); err == nil && w > 0 && h > 0 {
			opts.Rows, opts.Cols = uint16(h), uint16(w)
		}
	}
	// The terminal lives until the program exits, not until Ctrl-C: in raw
	// mode Ctrl-C is a byte for the program.
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	t, err := sb.Terminal(tctx, opts)
	if err != nil {
		return &exitError{code: execErrorCode(err), err: err}
	}
	defer t.Close()
	if in != nil && term.IsTerminal(int(in.Fd())) {
		old, err := term.MakeRaw(int(in.Fd()))
		if err == nil {
			defer func() { _ = term.Restore(int(in.Fd()), old) }()
		}
	}
	if out != nil && term.IsTerminal(int(out.Fd())) {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(int(out.Fd())); err == nil && w > 0 && h > 0 {
					_ = t.Resize(uint16(h), uint16(w))
				}
			}
		}()
	}
	go func() {
		// The end of piped input is typed as Ctrl-D, as a terminal would:
		// a shell at its prompt exits, cat ends.
		if _, err := io.Copy(t, a.stdin); err == nil {
			_, _ = t.Write([]byte{4})
		}
	}()
	// SIGINT or SIGTERM to sbx (ctx) ends the terminal and its command; in
	// raw mode Ctrl-C is not a signal here but a byte for the program.
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = t.Close()
		case <-stopped:
		}
	}()
	_, _ = io.Copy(a.stdout, t)
	code, err := t.Wait()
	close(stopped)
	if ctx.Err() != nil {
		return &exitError{code: 130}
	}
	if err != nil {
		return &exitError{code: 125, err: err}
	}
	if code == 124 {
		fmt.Fprintf(a.stderr, "\r\nsbx: the terminal's command timed out and was killed\r\n")
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}
