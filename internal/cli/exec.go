package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func (a *app) execCmd() *cobra.Command {
	var (
		interactive bool
		tty         bool
		detach      bool
		cwd         string
		env         []string
		timeout     time.Duration
		undoKind    string
		rollback    bool
	)
	cmd := &cobra.Command{
		Use:   "exec NAME [flags] -- CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its exit code",
		Long: "Run a command in a sandbox, streaming its output; sbx exits with the command's exit code\n" +
			"(124 when it timed out). A stopped sandbox is booted first. Use -- before the command.\n" +
			"sbx's own failures exit 125, a command that cannot run 126, a missing command 127, Ctrl-C 130.\n" +
			"With -i, standard input (at most 32 MiB; copy larger files in with sbx cp) is read to its end first.",
		Example: "  sbx exec dev -- python3 -m unittest -v\n  sbx exec dev -- sh -c 'ls | wc -l'\n  echo hi | sbx exec -i dev -- cat\n  sbx exec --undo auto --rollback dev -- sh -c 'apt-get install -y jq && jq --version'",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := parseKV("env", env)
			if err != nil {
				return err
			}
			req := api.ExecRequest{Cmd: args[1:], Cwd: cwd, Env: e, TimeoutMS: timeout.Milliseconds(),
				Undo: undoKind, RollbackOnFailure: rollback}
			if timeout < 0 {
				return fmt.Errorf("--timeout %v must be positive", timeout)
			}
			if tty {
				if detach || undoKind != "" || interactive {
					return fmt.Errorf("-t runs the command on a terminal: leave out -d, -i and --undo")
				}
				return a.terminal(cmd.Context(), args[0], func(ctx context.Context, sb *client.Sandbox, rows, cols uint16) (*client.Terminal, error) {
					return sb.Terminal(ctx, client.TerminalOptions{Cmd: args[1:], Cwd: cwd, Env: e, TimeoutMS: timeout.Milliseconds(), Rows: rows, Cols: cols})
				})
			}
			if interactive {
				b, err := readStdin(cmd.Context(), a.stdin, maxStdin)
				if err != nil {
					return &exitError{code: 125, err: err}
				}
				req.StdinBase64 = base64.StdEncoding.EncodeToString(b)
			}
			// Exact bytes both ways: the output may be a binary file.
			req.Encoding = api.EncodingBase64
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return &exitError{code: 125, err: err}
			}
			if detach {
				pid, err := sb.Start(cmd.Context(), req)
				if err != nil {
					return &exitError{code: execErrorCode(err), err: err}
				}
				fmt.Fprintln(a.stdout, pid)
				return nil
			}
			st, err := sb.Stream(cmd.Context(), req)
			if err != nil {
				return &exitError{code: execErrorCode(err), err: err}
			}
			code, err := st.Wait(a.stdout, a.stderr)
			if ev := st.ExitEvent(); ev != nil && ev.Undo != nil {
				describeUndo(a.stderr, ev.Undo)
			}
			switch {
			case cmd.Context().Err() != nil:
				return &exitError{code: 130}
			case err != nil:
				return &exitError{code: 125, err: err}
			case code == 124:
				fmt.Fprintf(a.stderr, "sbx: the command timed out and was killed\n")
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	f.BoolVarP(&tty, "tty", "t", false, "run it on a terminal, as sbx shell does (input typed, one output stream)")
	f.BoolVarP(&detach, "detach", "d", false, "start it and print its pid; follow it with sbx attach")
	f.StringVar(&cwd, "cwd", "", "working directory (default /workspace)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment KEY=VALUE (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (default 10m; none with -d)")
	f.StringVar(&undoKind, "undo", "", "take an undo first: auto (by what the command can break), git (a repository snapshot of the work tree of --cwd), checkpoint or snapshot")
	f.BoolVar(&rollback, "rollback", false, "with --undo: put the undo back when the command exits non-zero")
	return cmd
}

// describeUndo tells on stderr which undo a guarded exec took.
func describeUndo(w io.Writer, u *api.UndoResult) {
	what := "no undo (the command only reads)"
	switch u.Kind {
	case api.UndoCheckpoint:
		what = "checkpoint " + u.Checkpoint
	case api.UndoSnapshot:
		what = "snapshot " + u.Snapshot
	}
	if u.Class != "" {
		what += " (class " + u.Class + ")"
	}
	switch {
	case u.RolledBack:
		fmt.Fprintf(w, "sbx: undo: %s; the command failed and it was rolled back\n", what)
	case u.RollbackError != "":
		fmt.Fprintf(w, "sbx: undo: %s; the rollback failed: %s\n", what, u.RollbackError)
	default:
		fmt.Fprintf(w, "sbx: undo: %s\n", what)
	}
}

// maxStdin bounds what exec -i sends (the API takes up to 64 MiB of JSON,
// and base64 grows it by a third).
const maxStdin = 32 << 20

// readStdin reads r to its end, at most limit bytes, giving up when ctx
// ends (Ctrl-C).
func readStdin(ctx context.Context, r io.Reader, limit int64) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, limit+1))
		done <- result{b, err}
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("read stdin: %w", res.err)
		}
		if int64(len(res.b)) > limit {
			return nil, fmt.Errorf("stdin is over %d MiB: copy the data in with sbx cp and read the file instead", limit>>20)
		}
		return res.b, nil
	}
}

// execErrorCode is sbx exec's exit code for a failure to start: 127 for a
// missing command, 126 for one that cannot run, else 125, as shells and
// docker do.
func execErrorCode(err error) int {
	var ae *client.Error
	if errors.As(err, &ae) && ae.Code == api.CodeInvalidArgument && strings.HasPrefix(ae.Message, "cmd:") {
		switch {
		case strings.Contains(ae.Message, "not found"), strings.Contains(ae.Message, "no such executable"):
			return 127
		case strings.Contains(ae.Message, "not executable"), strings.Contains(ae.Message, "is a directory"):
			return 126
		}
	}
	return 125
}
