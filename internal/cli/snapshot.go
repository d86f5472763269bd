package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// parseRetention parses "1d", "12h", "90m" or a number of days.
func parseRetention(s string) (float64, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		return strconv.ParseFloat(d, 64)
	}
	if dur, err := time.ParseDuration(s); err == nil {
		return dur.Hours() / 24, nil
	}
	return strconv.ParseFloat(s, 64)
}

func (a *app) snapshotCmd() *cobra.Command {
	var name, retention, metadata string
	cmd := &cobra.Command{
		Use:   "snapshot NAME [--name LABEL] [--retention 1d]",
		Short: "Take a memory snapshot of a running sandbox: disk, memory and processes",
		Long: "Take a memory snapshot: the sandbox's disk, memory and running processes at one paused instant.\n" +
			"The sandbox is paused only while captured. Start a new sandbox from it with\n" +
			"sbx create --from-snapshot ID.",
		Example: "  sbx snapshot dev --name step-3 --retention 1d --metadata '{\"step\": 3}'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			req := api.SnapshotRequest{Name: name}
			if retention != "" {
				days, err := parseRetention(retention)
				if err != nil {
					return fmt.Errorf("--retention %q: want e.g. 1d, 12h or 7", retention)
				}
				req.RetentionDays = &days
			}
			if metadata != "" {
				if !json.Valid([]byte(metadata)) {
					return fmt.Errorf("--metadata: not valid JSON")
				}
				req.Metadata = json.RawMessage(metadata)
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := newProgress(a.stderr, "snapshot of "+sb.Name)
			sn, err := sb.SnapshotStream(cmd.Context(), req, func(msg string, _ time.Time) { p.update(msg) })
			p.done(err == nil)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(sn)
			}
			fmt.Fprintln(a.stdout, sn.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a label for the snapshot")
	cmd.Flags().StringVar(&retention, "retention", "", "how long to keep it: 1d, 12h, 7 (days); default 7d")
	cmd.Flags().StringVar(&metadata, "metadata", "", "a JSON object kept with it (at most 64 KiB)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) snapshotsCmd() *cobra.Command {
	var sandbox string
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "List memory snapshots, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			sns, err := a.c.Snapshots.List(cmd.Context(), sandbox)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(sns)
			}
			var rows [][]string
			for _, sn := range sns {
				exp := "never"
				if sn.ExpireTime != nil {
					exp = time.Until(*sn.ExpireTime).Round(time.Minute).String()
				}
				kind := "snapshot"
				if !sn.Billable {
					kind = "fork"
				}
				if sn.Health == api.HealthDamaged {
					kind += " (damaged)"
				}
				rows = append(rows, []string{sn.ID, sn.Name, sn.Sandbox, age(sn.CreateTime), exp, humanBytes(sn.MemoryBytes),
					humanBytes(sn.DiskBytes), humanBytes(sn.StoredBytes), kind})
			}
			a.table("ID\tNAME\tSANDBOX\tAGE\tEXPIRES IN\tMEMORY\tDISK\tSTORED\tKIND", rows)
			return nil
		},
	}
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "only the snapshots of this sandbox")
	a.addOutput(cmd)
	rm := &cobra.Command{
		Use:   "rm ID...",
		Short: "Delete snapshots",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, id := range args {
				if err := a.c.Snapshots.Delete(cmd.Context(), id); err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, id)
			}
			return nil
		},
	}
	cmd.AddCommand(rm)
	return cmd
}

func (a *app) forkCmd() *cobra.Command {
	var req api.ForkRequest
	var nf netFlags
	var labels []string
	cmd := &cobra.Command{
		Use:   "fork NAME [--name COPY] [--count N] [--offline]",
		Short: "Make live copies of a running sandbox; the original runs on untouched",
		Example: "  sbx fork dev --name trial --offline\n" +
			"  sbx fork dev --name try --count 4     # try-1 ... try-4",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			var err error
			if req.Labels, err = parseKV("label", labels); err != nil {
				return err
			}
			if req.Network, err = nf.rules(cmd); err != nil {
				return err
			}
			if req.Count < 1 || req.Count > api.MaxForkCount {
				return fmt.Errorf("--count %d: want 1 to %d copies", req.Count, api.MaxForkCount)
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := newProgress(a.stderr, "fork of "+sb.Name)
			res, err := sb.ForkStream(cmd.Context(), req, func(msg string, _ time.Time) { p.update(msg) })
			p.done(err == nil)
			if err != nil {
				return err
			}
			failed := 0
			if a.output == "json" {
				var out []any
				for i, c := range res.Copies {
					if c != nil {
						out = append(out, c.Sandbox)
					} else {
						out = append(out, map[string]string{"error": res.Errors[i].Error()})
						failed++
					}
				}
				if err := a.printJSON(out); err != nil {
					return err
				}
			} else {
				for i, c := range res.Copies {
					if c != nil {
						fmt.Fprintln(a.stdout, c.Name)
					} else {
						fmt.Fprintln(a.stderr, "sbx: copy", i+1, "failed:", res.Errors[i])
						failed++
					}
				}
			}
			if failed > 0 {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "name of the copy (with --count, NAME-1, NAME-2, ...)")
	f.IntVar(&req.Count, "count", 1, "number of copies (1-16)")
	nf.add(cmd, false)
	f.StringArrayVar(&labels, "label", nil, "label KEY=VALUE of the copies (repeatable)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) psCmd() *cobra.Command {
	return sandboxReadCmd(a, &cobra.Command{
		Use:   "ps NAME",
		Short: "List the processes started by exec in a sandbox",
	},
		func(ctx context.Context, sb *client.Sandbox) ([]api.Process, error) { return sb.Processes(ctx) },
		func(sb *client.Sandbox, ps []api.Process) error {
			var rows [][]string
			for _, p := range ps {
				exit := "-"
				if p.ExitCode != nil {
					exit = strconv.Itoa(*p.ExitCode)
				}
				rows = append(rows, []string{strconv.Itoa(p.PID), p.State, exit, age(p.StartTime), humanBytes(p.OutputBytes), strings.Join(p.Cmd, " ")})
			}
			a.table("PID\tSTATE\tEXIT\tAGE\tOUTPUT\tCMD", rows)
			return nil
		})
}

func (a *app) attachCmd() *cobra.Command {
	var offset int64
	cmd := &cobra.Command{
		Use:   "attach NAME PID",
		Short: "Stream the output of a process started by exec, until it exits (Ctrl-C detaches)",
		Long: "Stream the output of a process started by exec (see sbx ps), from --offset bytes, until it\n" +
			"exits; sbx exits with its exit code. Works in a sandbox started from a snapshot, or a fork,\n" +
			"for the processes captured with it. Ctrl-C detaches; the process goes on.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("PID %q: not a number", args[1])
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			st, err := sb.Attach(cmd.Context(), pid, offset, api.EncodingBase64)
			if err != nil {
				return err
			}
			code, err := st.Wait(a.stdout, a.stderr)
			if cmd.Context().Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&offset, "offset", 0, "bytes of output to skip")
	return cmd
}

func (a *app) killCmd() *cobra.Command {
	var sig int
	cmd := &cobra.Command{
		Use:   "kill NAME PID",
		Short: "Send a signal to a process started by exec (and its process group)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("PID %q: not a number", args[1])
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return sb.Signal(cmd.Context(), pid, sig)
		},
	}
	cmd.Flags().IntVarP(&sig, "signal", "s", 15, "signal number")
	return cmd
}
