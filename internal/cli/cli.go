// Package cli is the sbx command line. It talks to sbxd only through the
// public Go client (client/), like any other program would.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// exitError carries a process exit code out of a command (sbx exec exits
// with the command's exit code), and the error to print, if any.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e *exitError) Unwrap() error { return e.err }

// Run runs the CLI with args and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code := 1
	if cmd != nil && cmd.Name() == "exec" {
		// sbx exec keeps 1..124 for the command: its own failures,
		// usage errors included, exit 125 (as docker run does).
		code = 125
	}
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil {
			return code
		}
		err = ee.err
	}
	printError(stderr, err)
	return code
}

// printError prints each of err's lines prefixed with "sbx:", with a hint
// when sbxd is not reachable or the command line was wrong.
func printError(w io.Writer, err error) {
	msg := err.Error()
	for _, line := range strings.Split(msg, "\n") {
		fmt.Fprintln(w, "sbx:", line)
	}
	var ne *net.OpError
	switch {
	case errors.As(err, &ne) && ne.Op == "dial":
		if ne.Addr == nil || ne.Addr.String() == client.DefaultSocket {
			fmt.Fprintln(w, "sbx: is sbxd running? (./scripts/install.sh starts it; its log is /var/log/sbxd.log)")
		} else {
			fmt.Fprintf(w, "sbx: is sbxd running? (nothing answers at %s: start sbxd with that --socket or --listen, or point $SBX_SOCKET or $SBX_URL at a running one)\n", ne.Addr)
		}
	case strings.HasPrefix(msg, "unknown command"), strings.HasPrefix(msg, "unknown flag"),
		strings.HasPrefix(msg, "unknown shorthand flag"), strings.HasPrefix(msg, "accepts "),
		strings.HasPrefix(msg, "requires "), strings.HasPrefix(msg, "invalid argument"):
		fmt.Fprintln(w, "sbx: run 'sbx --help' or 'sbx COMMAND --help' for usage")
	}
}

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	socket, url    string
	output         string
	c              *client.Client
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "sbx",
		Short:         "sbx runs AI agents' commands in isolated gVisor sandboxes with a real undo",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var opts []client.Option
			if a.url != "" {
				opts = append(opts, client.WithURL(a.url), client.WithAPIKey(os.Getenv("SBX_API_KEY")))
			} else if a.socket != "" {
				opts = append(opts, client.WithSocket(a.socket))
			}
			c, err := client.New(opts...)
			a.c = c
			return err
		},
	}
	root.PersistentFlags().StringVar(&a.socket, "socket", "", "sbxd's Unix socket (default $SBX_SOCKET or "+client.DefaultSocket+")")
	root.PersistentFlags().StringVar(&a.url, "url", "", "sbxd's URL over TCP (default $SBX_URL; key from $SBX_API_KEY)")
	root.AddCommand(a.createCmd(), a.lsCmd(), a.getCmd(), a.rmCmd(), a.stopCmd(), a.execCmd(),
		a.cpCmd(), a.checkpointCmd(), a.checkpointsCmd(), a.restoreCmd(), a.diffCmd(),
		a.snapshotCmd(), a.snapshotsCmd(), a.forkCmd(), a.psCmd(), a.attachCmd(), a.killCmd(), a.portsCmd(),
		a.suspendCmd(), a.resumeCmd(), a.eventCmd(), a.eventsCmd(), a.updateCmd(),
		a.netCmd(), a.secretCmd(), a.imageCmd(), a.deliverCmd(), a.deliveriesCmd(), a.deliveryCmd(), a.usageCmd(), a.limitCmd(), a.nodesCmd(), a.nodeCmd(), a.benchCmd(), a.versionCmd(), a.mcpCmd(), a.shellCmd(), a.classifyCmd())
	root.AddCommand(a.keyCmd())
	for _, c := range root.Commands() {
		if c.HasSubCommands() && !c.Runnable() {
			c.RunE = needSubcommand
		}
	}
	return root
}

// needSubcommand runs a command group (sbx net, sbx image, ...) called
// without one of its subcommands: a usage error, exit 2, that names them.
func needSubcommand(cmd *cobra.Command, _ []string) error {
	var subs []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			subs = append(subs, c.Name())
		}
	}
	return &exitError{code: 2, err: fmt.Errorf("%s needs a subcommand: %s (run '%s --help' for usage)",
		cmd.CommandPath(), strings.Join(subs, ", "), cmd.CommandPath())}
}

// addOutput adds -o/--output to a read command.
func (a *app) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
}

func (a *app) checkOutput() error {
	if a.output != "table" && a.output != "json" {
		return fmt.Errorf("-o %q: want table or json", a.output)
	}
	return nil
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = clean(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// clean makes text from a sandbox or a caller safe to print on a
// terminal: control characters, tabs and bytes that are not UTF-8 are
// shown escaped, so a file name cannot move the cursor or break a table.
func clean(s string) string {
	ok := utf8.ValidString(s)
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// parseKV parses repeated K=V flags.
func parseKV(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func labelString(l map[string]string) string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// sandboxTable prints one row per sandbox; with a NODE column when sbxd is
// a cluster's node (a sandbox has a node; a suspended one shows "-").
func (a *app) sandboxTable(sbs []*client.Sandbox) {
	clustered := false
	for _, sb := range sbs {
		clustered = clustered || sb.Node != ""
	}
	var rows [][]string
	for _, sb := range sbs {
		state := string(sb.State)
		if sb.StateReason != "" {
			state += " (" + strings.SplitN(sb.StateReason, ":", 2)[0] + ")"
		}
		row := []string{sb.Name, sb.ID, state}
		if clustered {
			node := sb.Node
			if node == "" {
				node = "-"
			}
			row = append(row, node)
		}
		rows = append(rows, append(row, sb.Image, fmt.Sprintf("%g", sb.CPUs),
			fmt.Sprintf("%d", sb.MemoryMB), age(sb.CreateTime), labelString(sb.Labels)))
	}
	header := "NAME\tID\tSTATE\tIMAGE\tCPUS\tMEMORY_MB\tAGE\tLABELS"
	if clustered {
		header = "NAME\tID\tSTATE\tNODE\tIMAGE\tCPUS\tMEMORY_MB\tAGE\tLABELS"
	}
	a.table(header, rows)
}

func (a *app) createCmd() *cobra.Command {
	var req api.CreateSandboxRequest
	var labels, env []string
	var nf netFlags
	var idle, recovery time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create and start a sandbox",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			for _, f := range []string{"cpus", "memory", "disk"} {
				if fl := cmd.Flags().Lookup(f); fl.Changed && (fl.Value.String() == "0") {
					return fmt.Errorf("--%s 0: give a positive value, or leave the flag out for the default", f)
				}
			}
			var err error
			if req.Labels, err = parseKV("label", labels); err != nil {
				return err
			}
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			if req.Network, err = nf.rules(cmd); err != nil {
				return err
			}
			req.TimeoutMS = idle.Milliseconds()
			req.RecoveryIntervalMS = recovery.Milliseconds()
			ctx := cmd.Context()
			var prog *progress
			sb, err := a.c.Sandboxes.CreateStream(ctx, req, func(msg string, _ time.Time) {
				if prog == nil {
					prog = newProgress(a.stderr, "creating "+req.Name)
				}
				prog.update(msg)
			})
			if prog != nil {
				prog.done(err == nil)
			}
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(sb.Sandbox)
			}
			fmt.Fprintln(a.stdout, sb.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "sandbox name (default: generated)")
	f.StringVar(&req.Image, "image", "", "image (default: default)")
	f.Float64Var(&req.CPUs, "cpus", 0, "CPU limit in cores (default 1)")
	f.Var((*mibValue)(&req.MemoryMB), "memory", "memory limit: MiB (1024) or with a unit (512M, 2G) (default 1024)")
	f.Var((*mibValue)(&req.DiskMB), "disk", "disk quota of what the sandbox writes: MiB (10240) or with a unit (512M, 20G) (default: sbxd's, 10240; needs btrfs layers)")
	f.StringArrayVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	f.StringArrayVar(&env, "env", nil, "environment KEY=VALUE for every exec (repeatable)")
	f.StringVar(&req.Snapshot, "from-snapshot", "", "start from a memory snapshot (ID), running")
	f.DurationVar(&idle, "timeout", 0, "suspend after this long without exec, file or port activity (default: never)")
	f.BoolVar(&req.KeepAliveWhileRunning, "keep-alive", false, "with --timeout: a running process counts as activity")
	f.DurationVar(&recovery, "recovery-interval", 0, "a cluster's node: take a recovery snapshot this often (5s to 24h), from which another node recovers the sandbox, processes and all, if its node is lost (default: none)")
	nf.add(cmd, false)
	a.addOutput(cmd)
	return cmd
}

// lsPageSize is how many sandboxes sbx ls asks for at a time.
const lsPageSize = 500

func (a *app) lsCmd() *cobra.Command {
	var labels []string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			l, err := parseKV("label", labels)
			if err != nil {
				return err
			}
			// In pages, so that no one answer holds every sandbox of a
			// large cluster (an sbxd without pages answers all at once).
			var sbs []*client.Sandbox
			for token := ""; ; {
				page, next, err := a.c.Sandboxes.ListPage(cmd.Context(), l, lsPageSize, token)
				if err != nil {
					return err
				}
				sbs = append(sbs, page...)
				if token = next; token == "" {
					break
				}
			}
			if a.output == "json" {
				out := make([]api.Sandbox, 0, len(sbs))
				for _, sb := range sbs {
					out = append(out, sb.Sandbox)
				}
				return a.printJSON(out)
			}
			a.sandboxTable(sbs)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with label KEY=VALUE (repeatable)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) getCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(sb.Sandbox)
			}
			a.sandboxTable([]*client.Sandbox{sb})
			if sb.StateReason != "" {
				fmt.Fprintf(a.stdout, "\nstate reason: %s\n", sb.StateReason)
			}
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

func (a *app) rmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete sandboxes and everything they own",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, n := range args {
				if err := a.c.Sandboxes.Delete(cmd.Context(), n); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", n, err))
					continue
				}
				fmt.Fprintln(a.stdout, n)
			}
			return errors.Join(errs...)
		},
	}
}

func (a *app) stopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop a sandbox's processes, keeping its disk (the next exec boots it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return sb.Stop(cmd.Context())
		},
	}
}

func (a *app) classifyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "classify COMMAND...",
		Short: "Show the undo a guarded exec (--undo auto) would take for a shell command, and why",
		Long: `Asks sbxd (POST /v1/classify) which undo covers a shell command line:
none (it reads), git (it edits the working tree), checkpoint (it changes the
system) or fork (it changes running processes). The words are joined by
spaces into one line, as sh -c runs it. Nothing runs.`,
		Example: "  sbx classify git checkout -- .\n  sbx classify 'npm install && rm -rf dist'",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			res, err := a.c.Classify(cmd.Context(), strings.Join(args, " "))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(res)
			}
			fmt.Fprintf(a.stdout, "%s: %s\n", res.Undo, res.Reason)
			return nil
		},
	}
	// The command's own options (rm -rf) are words of the command.
	c.Flags().SetInterspersed(false)
	return c
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show sbxd's version and runtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := a.c.Health(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "sbxd %s (%s)\n", h.Version, h.Runtime)
			if h.PlatformReason != "" {
				fmt.Fprintf(a.stdout, "platform %s: %s\n", h.Platform, h.PlatformReason)
			}
			return nil
		},
	}
}

// sandboxReadCmd completes c as a command "VERB NAME" that reads something
// of the sandbox NAME: read fetches it; with -o json it is printed as JSON,
// else show prints it for people.
func sandboxReadCmd[T any](a *app, c *cobra.Command, read func(context.Context, *client.Sandbox) (T, error), show func(*client.Sandbox, T) error) *cobra.Command {
	c.Args = cobra.ExactArgs(1)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := a.checkOutput(); err != nil {
			return err
		}
		sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		v, err := read(cmd.Context(), sb)
		if err != nil {
			return err
		}
		if a.output == "json" {
			return a.printJSON(v)
		}
		return show(sb, v)
	}
	a.addOutput(c)
	return c
}

// mibValue is a flag's size in MiB: a whole number of MiB ("1024"), or a
// whole number with a binary unit: M/MiB (MiB), G/GiB (GiB), T/TiB; MB, GB
// and TB are read as MiB, GiB and TiB too.
type mibValue int

// String gives the size in MiB.
func (v *mibValue) String() string { return strconv.Itoa(int(*v)) }

// Type names the flag's value in usage text.
func (v *mibValue) Type() string { return "size" }

// Set parses s; an error names the forms it accepts.
func (v *mibValue) Set(s string) error {
	num := strings.TrimRight(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
	unit := strings.ToUpper(s[len(num):])
	mul := map[string]int64{"": 1, "M": 1, "MB": 1, "MIB": 1, "G": 1 << 10, "GB": 1 << 10, "GIB": 1 << 10,
		"T": 1 << 20, "TB": 1 << 20, "TIB": 1 << 20}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if err == nil && mul != 0 && (n > math.MaxInt32/mul || n < 0) {
		return fmt.Errorf("%q: out of range: 0 to %d MiB (%d GiB)", s, math.MaxInt32, math.MaxInt32>>10)
	}
	if err != nil || mul == 0 {
		return fmt.Errorf("%q: give MiB as a whole number (1024) or a whole number with a unit: 512M, 2G (M = MiB, G = GiB)", s)
	}
	*v = mibValue(n * mul)
	return nil
}
