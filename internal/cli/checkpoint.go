package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func (a *app) checkpointCmd() *cobra.Command {
	var comment string
	cmd := &cobra.Command{
		Use:   "checkpoint NAME [-m COMMENT]",
		Short: "Take a disk checkpoint of a sandbox (v1, v2, ...)",
		Long: "Take a disk checkpoint of a sandbox: what is on its disk now (not what is only in memory).\n" +
			"A running sandbox is frozen for a few ms at the end of the capture; it keeps running.",
		Example: "  sbx checkpoint dev -m 'deps installed'\n  sbx checkpoint verify dev v1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := newProgress(a.stderr, "checkpoint of "+sb.Name)
			cp, err := sb.CheckpointStream(cmd.Context(), comment, func(msg string, _ time.Time) { p.update(msg) })
			p.done(err == nil)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(cp)
			}
			fmt.Fprintln(a.stdout, cp.ID)
			return nil
		},
	}
	cmd.Flags().StringVarP(&comment, "message", "m", "", "comment (at most 1024 bytes)")
	a.addOutput(cmd)
	verify := &cobra.Command{
		Use:   "verify NAME ID",
		Short: "Reread every chunk of a checkpoint and report its health",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			cp, err := sb.GetCheckpoint(cmd.Context(), args[1], true)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s %s\n", cp.ID, cp.Health)
			if cp.Health != api.HealthOK {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.AddCommand(verify)
	return cmd
}

func (a *app) checkpointsCmd() *cobra.Command {
	return sandboxReadCmd(a, &cobra.Command{
		Use:   "checkpoints NAME",
		Short: "List a sandbox's checkpoints, newest first",
	},
		func(ctx context.Context, sb *client.Sandbox) ([]api.Checkpoint, error) {
			return sb.ListCheckpoints(ctx)
		},
		func(sb *client.Sandbox, cps []api.Checkpoint) error {
			var rows [][]string
			for _, cp := range cps {
				src := "-"
				if cp.SourceID != nil {
					src = *cp.SourceID
				}
				files, size, added := strconv.Itoa(cp.Files), humanBytes(cp.SizeBytes), humanBytes(cp.AddedBytes)
				if cp.StoreTime == nil {
					// A snapshot on the sandbox's node, being stored.
					files, size, added = "-", "-", "storing"
				}
				rows = append(rows, []string{cp.ID, age(cp.CreateTime), files, size, added, src, cp.Health, cp.Comment})
			}
			a.table("ID\tAGE\tFILES\tSIZE\tADDED\tSOURCE\tHEALTH\tCOMMENT", rows)
			return nil
		})
}

func (a *app) restoreCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "restore NAME ID",
		Short: "Put a sandbox's disk back as it was in a checkpoint (its processes end)",
		Long: "Stop the sandbox and put its disk back as it was in checkpoint ID. Running processes end;\n" +
			"the next command boots the sandbox on the restored disk. Newer checkpoints are kept.",
		Example: "  sbx restore dev v1\n  sbx restore dev v0   # the fresh disk",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := newProgress(a.stderr, "restore of "+sb.Name+" to "+args[1])
			err = sb.Restore(cmd.Context(), args[1], func(msg string, _ time.Time) { p.update(msg) })
			p.done(err == nil)
			return err
		},
	}
}

func (a *app) diffCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "diff NAME [FROM] [TO]",
		Short: "List the paths added, modified and deleted between two checkpoints",
		Long: "List the paths added (+), modified (~) and deleted (-) from checkpoint FROM to checkpoint TO.\n" +
			"TO defaults to live (the disk now) and FROM to the checkpoint before TO.",
		Example: "  sbx diff dev v1 v2\n  sbx diff dev          # since the newest checkpoint\n  sbx diff dev v0 live",
		Args:    cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			from, to := "", "live"
			if len(args) >= 2 {
				from = args[1]
			}
			if len(args) == 3 {
				to = args[2]
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: want a positive number of entries (0: sbxd's default)", limit)
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			d, err := sb.DiffN(cmd.Context(), from, to, limit)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(d)
			}
			printChanges(a, "+", d.Added)
			printChanges(a, "~", d.Modified)
			printChanges(a, "-", d.Deleted)
			if d.Truncated {
				fmt.Fprintln(a.stderr, "sbx: the list was cut at its limit (--limit)")
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "most entries of each list (0: sbxd's default, 10000)")
	a.addOutput(cmd)
	return cmd
}

func printChanges(a *app, mark string, cs []api.Change) {
	for _, c := range cs {
		size := ""
		switch mark {
		case "+":
			size = humanBytes(c.Size)
		case "-":
			size = humanBytes(c.OldSize)
		default:
			size = humanBytes(c.OldSize) + " → " + humanBytes(c.Size)
		}
		switch {
		case c.Type == "dir":
			size = "dir"
		case c.Type == "symlink":
			size = "→ " + clean(c.LinkTarget)
		case c.Type != "file":
			size = c.Type
		}
		if c.OldType != "" {
			size = c.OldType + " → " + size
		}
		fmt.Fprintf(a.stdout, "%s %s\t(%s)\n", mark, clean(c.Path), size)
	}
}
