package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func (a *app) secretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Hold secrets outside a sandbox: it sees a placeholder, the egress proxy sends the value",
		Long: "A secret's value never enters the sandbox: the sandbox sees a placeholder in an env var\n" +
			"named after the secret, and sbxd's egress proxy replaces it with the value in the headers\n" +
			"of HTTPS requests that a rule allows (host, method, path prefix). Other requests that\n" +
			"carry the placeholder are refused (403) and logged: see 'sbx net log'.",
	}
	cmd.AddCommand(a.secretSetCmd(), a.secretLsCmd(), a.secretRmCmd())
	return cmd
}

func (a *app) secretSetCmd() *cobra.Command {
	var hosts, methods []string
	var path, fromEnv, fromFile string
	var keep bool
	cmd := &cobra.Command{
		Use:   "set NAME SECRET --host HOST [--host HOST]... [--method GET]... [--path /PREFIX] [--from-env VAR | --from-file FILE | --keep-value]",
		Short: "Add a secret to a sandbox, or replace its value and rules",
		Long: "Add secret SECRET (an env var name) to sandbox NAME, or replace its value and rules.\n" +
			"The value is read from standard input (one line, its newline dropped), from an env var\n" +
			"of this shell (--from-env) or from a file (--from-file), never from the command line.\n" +
			"Each --host is a rule with the --method list (default GET) and --path prefix (default /).\n" +
			"--keep-value changes only the rules of a secret that exists. Processes started in the\n" +
			"sandbox from now on see $SECRET holding the placeholder.",
		Example: "  printf %s \"$GITHUB_TOKEN\" | sbx secret set dev GITHUB_TOKEN --host api.github.com\n" +
			"  sbx secret set dev API_TOKEN --from-env API_TOKEN --host api.example.org --method GET --method HEAD --path /v1",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if len(hosts) == 0 {
				return fmt.Errorf("give at least one --host: a secret without rules could go nowhere")
			}
			var value *string
			if !keep {
				v, err := a.secretValue(fromEnv, fromFile)
				if err != nil {
					return err
				}
				value = &v
			} else if fromEnv != "" || fromFile != "" {
				return fmt.Errorf("--keep-value and --from-env/--from-file contradict each other")
			}
			if len(methods) == 0 {
				methods = []string{"GET"}
			}
			var rules []api.SecretRule
			for _, h := range hosts {
				rules = append(rules, api.SecretRule{Host: h, Methods: methods, PathPrefix: path})
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			info, err := sb.Secrets().Put(cmd.Context(), args[1], value, rules)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(info)
			}
			a.printSecrets([]api.SecretInfo{*info})
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&hosts, "host", nil, "a host the value may go to: api.example.org or *.example.org (repeatable: one rule each)")
	f.StringArrayVar(&methods, "method", nil, "an HTTP method the rules allow (repeatable; default GET)")
	f.StringVar(&path, "path", "", "the path prefix the rules allow (default /, every path)")
	f.StringVar(&fromEnv, "from-env", "", "read the value from this env var of the sbx command")
	f.StringVar(&fromFile, "from-file", "", "read the value from this file")
	f.BoolVar(&keep, "keep-value", false, "keep the value of the secret that exists; change only its rules")
	a.addOutput(cmd)
	return cmd
}

// maxSecretValue is the most the CLI reads of a value (sbxd's limit is 64
// KiB; a longer value is sent, and refused, naming the field).
const maxSecretValue = 64 << 10

// secretValue reads a secret's value: from env var fromEnv, file
// fromFile, or standard input (one trailing newline dropped).
func (a *app) secretValue(fromEnv, fromFile string) (string, error) {
	switch {
	case fromEnv != "" && fromFile != "":
		return "", fmt.Errorf("give --from-env or --from-file, not both")
	case fromEnv != "":
		v, ok := os.LookupEnv(fromEnv)
		if !ok {
			return "", fmt.Errorf("--from-env %s: no such variable in this shell", fromEnv)
		}
		return v, nil
	}
	var r io.Reader = a.stdin
	if fromFile != "" {
		f, err := os.Open(fromFile)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxSecretValue+2))
	if err != nil {
		return "", err
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", fmt.Errorf("the value is empty: pipe it in, or use --from-env or --from-file")
	}
	return v, nil
}

func (a *app) secretLsCmd() *cobra.Command {
	return sandboxReadCmd(a, &cobra.Command{
		Use:   "ls NAME",
		Short: "List a sandbox's secrets: placeholders and rules, never values",
	},
		func(ctx context.Context, sb *client.Sandbox) ([]api.SecretInfo, error) { return sb.Secrets().List(ctx) },
		func(sb *client.Sandbox, l []api.SecretInfo) error {
			a.printSecrets(l)
			return nil
		})
}

func (a *app) printSecrets(l []api.SecretInfo) {
	var rows [][]string
	for _, s := range l {
		var rules []string
		for _, r := range s.Rules {
			rules = append(rules, strings.Join(r.Methods, ",")+" "+r.Host+r.PathPrefix)
		}
		rows = append(rows, []string{s.Name, s.Placeholder, fmt.Sprint(s.ValueBytes), strings.Join(rules, "; ")})
	}
	a.table("NAME\tPLACEHOLDER\tBYTES\tRULES", rows)
}

func (a *app) secretRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME SECRET",
		Short: "Remove a secret from a sandbox (its placeholder goes nowhere from now on)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return sb.Secrets().Delete(cmd.Context(), args[1])
		},
	}
}
