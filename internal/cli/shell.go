package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sbxhq/sbx/client"
)

func (a *app) shellCmd() *cobra.Command {
	var (
		cwd    string
		env    []string
		keep   bool
		attach int
	)
	cmd := &cobra.Command{
		Use:   "shell NAME [-- CMD [ARG...]]",
		Short: "Open an interactive terminal in a sandbox (a login shell, or CMD)",
		Long: "Open a terminal in a sandbox, as docker exec -it does: a login shell (bash where the image\n" +
			"has it, else sh), or CMD. Your terminal is put in raw mode; its size follows yours; Ctrl-C and\n" +
			"Ctrl-D go to the program. sbx exits with its exit code. A stopped sandbox is booted first, a\n" +
			"suspended one resumed.\n\n" +
			"With --keep the program goes on when sbx exits (its window closed, SIGTERM): attach to it\n" +
			"again with --attach PID (the pid is printed at the start), from this sandbox or from a copy\n" +
			"made by a snapshot or fork. The latest 64 KiB of its output are shown first. One client at a\n" +
			"time: while another is attached, --attach fails (conflict). Ctrl-P Ctrl-Q detaches from a\n" +
			"kept or attached terminal (as docker's default detach keys) and leaves the program running;\n" +
			"without --keep or --attach these keys go to the program.",
		Example: "  sbx shell dev\n  sbx shell dev -- python3\n  sbx shell --keep dev\n  sbx shell dev --attach 42",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := parseKV("env", env)
			if err != nil {
				return err
			}
			if attach != 0 {
				if len(args) > 1 || cwd != "" || len(env) > 0 || keep {
					return fmt.Errorf("--attach takes the sandbox only: the program, --cwd, --env and --keep were given when it started")
				}
				if attach < 0 {
					return fmt.Errorf("--attach %d: not a process id", attach)
				}
				return a.terminal(cmd.Context(), args[0], true, func(ctx context.Context, sb *client.Sandbox, rows, cols uint16) (*client.Terminal, error) {
					return sb.AttachTerminal(ctx, attach, client.AttachOptions{Rows: rows, Cols: cols})
				})
			}
			return a.terminal(cmd.Context(), args[0], keep, func(ctx context.Context, sb *client.Sandbox, rows, cols uint16) (*client.Terminal, error) {
				t, err := sb.Terminal(ctx, client.TerminalOptions{Cmd: args[1:], Cwd: cwd, Env: e, Keep: keep, Rows: rows, Cols: cols})
				if err == nil && keep {
					fmt.Fprintf(a.stderr, "sbx: terminal process %d is kept when sbx exits: sbx shell %s --attach %d\n", t.PID, sb.Name, t.PID)
				}
				return t, err
			})
		},
	}
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory (default /workspace)")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "environment KEY=VALUE (repeatable)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the program running when sbx exits (attach again with --attach PID)")
	cmd.Flags().IntVar(&attach, "attach", 0, "attach again to the terminal of process PID (kept, or copied by a snapshot or fork)")
	return cmd
}

// openTerminal starts or attaches a terminal in sb, of rows x cols
// cells (0 x 0: the default, or the size it has).
type openTerminal func(ctx context.Context, sb *client.Sandbox, rows, cols uint16) (*client.Terminal, error)

// Ctrl-P then Ctrl-Q typed on a detachable terminal detach sbx from it
// (docker's default detach keys).
const (
	detachKey1 = 0x10
	detachKey2 = 0x11
)

// errDetached ends a terminal's input when the detach keys were typed.
var errDetached = errors.New("detach keys typed")

// detachReader passes r's bytes on until Ctrl-P Ctrl-Q, then answers
// errDetached (what follows the keys is dropped). A Ctrl-P is held back
// until the next byte shows it is not the start of the keys; at the end
// of r a held Ctrl-P is passed on.
type detachReader struct {
	r    io.Reader
	tmp  [32 << 10]byte
	out  []byte
	held bool
	err  error
}

func (d *detachReader) Read(p []byte) (int, error) {
	for len(d.out) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		n, err := d.r.Read(d.tmp[:])
		for _, c := range d.tmp[:n] {
			if d.held {
				d.held = false
				if c == detachKey2 {
					d.err = errDetached
					break
				}
				d.out = append(d.out, detachKey1)
			}
			if c == detachKey1 {
				d.held = true
				continue
			}
			d.out = append(d.out, c)
		}
		if err != nil && d.err == nil {
			if d.held {
				d.out, d.held = append(d.out, detachKey1), false
			}
			d.err = err
		}
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}

// terminal runs the terminal open makes in sandbox name, joined to this
// process's standard input and output, and returns its exit code as an
// exitError (125 for sbx's own failures). A detachable terminal (kept, or
// attached again) is left running when Ctrl-P Ctrl-Q are typed; sbx then
// exits 0.
func (a *app) terminal(ctx context.Context, name string, detachable bool, open openTerminal) error {
	sb, err := a.c.Sandboxes.Get(ctx, name)
	if err != nil {
		return &exitError{code: 125, err: err}
	}
	in, _ := a.stdin.(*os.File)
	out, _ := a.stdout.(*os.File)
	var rows, cols uint16
	if out != nil && term.IsTerminal(int(out.Fd())) {
		if w, h, err := term.GetSize(int(out.Fd())); err == nil && w > 0 && h > 0 {
			rows, cols = uint16(h), uint16(w)
		}
	}
	// The terminal lives until the program exits, not until Ctrl-C: in raw
	// mode Ctrl-C is a byte for the program.
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	t, err := open(tctx, sb, rows, cols)
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
	input := a.stdin
	if detachable {
		input = &detachReader{r: a.stdin}
	}
	var detached atomic.Bool
	go func() {
		// The end of piped input is typed as Ctrl-D, as a terminal would:
		// a shell at its prompt exits, cat ends.
		switch _, err := io.Copy(t, input); {
		case errors.Is(err, errDetached):
			detached.Store(true)
			_ = t.Close() // a kept terminal's program runs on
		case err == nil:
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
	if detached.Load() {
		fmt.Fprintf(a.stderr, "\r\nsbx: detached; process %d runs on: sbx shell %s --attach %d\r\n", t.PID, name, t.PID)
		return nil
	}
	if ctx.Err() != nil {
		return &exitError{code: 130}
	}
	if err != nil {
		if detachable {
			// A kept terminal outlives its client, sbxd's restart too.
			err = fmt.Errorf("%w\nsbx: process %d was kept: when sbxd answers again, attach to it with sbx shell %s --attach %d", err, t.PID, name, t.PID)
		}
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
