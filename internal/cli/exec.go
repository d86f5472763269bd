package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
)

func (a *app) execCmd() *cobra.Command {
	var (
		interactive bool
		cwd         string
		env         []string
		timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "exec NAME [flags] -- CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its exit code",
		Long: "Run a command in a sandbox, streaming its output; sbx exits with the command's exit code\n" +
			"(124 when it timed out). A stopped sandbox is booted first. Use -- before the command.",
		Example: "  sbx exec dev -- python3 -m unittest -v\n  sbx exec dev -- sh -c 'ls | wc -l'\n  echo hi | sbx exec -i dev -- cat",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := parseKV("env", env)
			if err != nil {
				return err
			}
			req := api.ExecRequest{Cmd: args[1:], Cwd: cwd, Env: e, TimeoutMS: timeout.Milliseconds()}
			if timeout < 0 {
				return fmt.Errorf("--timeout %v must be positive", timeout)
			}
			if interactive {
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				req.Stdin = string(b)
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			st, err := sb.Stream(cmd.Context(), req)
			if err != nil {
				return err
			}
			code, err := st.Wait(a.stdout, a.stderr)
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	f.StringVar(&cwd, "cwd", "", "working directory (default /workspace)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment KEY=VALUE (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (default 10m)")
	return cmd
}
