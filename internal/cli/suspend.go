package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func (a *app) suspendCmd() *cobra.Command {
	var wakeOn string
	cmd := &cobra.Command{
		Use:   "suspend NAME [--wake-on KEY]",
		Short: "Store a sandbox's memory and disk and release its CPU and memory",
		Long: "Suspend captures the sandbox's memory, processes and disk, stores them, and releases\n" +
			"its CPU, memory and network. `sbx resume`, any exec or file request, or an event\n" +
			"posted to KEY (sbx event KEY) brings it back with its processes.",
		Example: "  sbx suspend dev --wake-on approval-42\n  sbx event approval-42 --data '{\"approved\":true}'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := newProgress(a.stderr, "suspend "+sb.Name)
			err = sb.SuspendStream(cmd.Context(), wakeOn, func(msg string, _ time.Time) { p.update(msg) })
			p.done(err == nil)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(sb.Sandbox)
			}
			if sb.WakeOn != "" {
				fmt.Fprintf(a.stdout, "%s suspended; an event to %s wakes it\n", clean(sb.Name), clean(sb.WakeOn))
			} else {
				fmt.Fprintf(a.stdout, "%s suspended\n", clean(sb.Name))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&wakeOn, "wake-on", "", "event key that resumes it")
	a.addOutput(cmd)
	return cmd
}

func (a *app) resumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "Restore a suspended sandbox, running, with its processes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			start := time.Now()
			if err := sb.Resume(cmd.Context()); err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(sb.Sandbox)
			}
			fmt.Fprintf(a.stdout, "%s %s (%d ms)\n", clean(sb.Name), sb.State, time.Since(start).Milliseconds())
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

// pendingEvents lists the pending events of key, page after page.
func (a *app) pendingEvents(ctx context.Context, key string) error {
	all := []api.Event{}
	cursor := ""
	for {
		page, next, err := a.c.Events.Pending(ctx, key, client.PageOptions{Cursor: cursor})
		if err != nil {
			return err
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if a.output == "json" {
		return a.printJSON(all)
	}
	var rows [][]string
	for _, ev := range all {
		size := len(ev.Data) + len(ev.DataText) + base64.StdEncoding.DecodedLen(len(ev.DataBase64))
		expire := ""
		if ev.ExpireTime != nil {
			expire = ev.ExpireTime.Local().Format(time.DateTime)
		}
		rows = append(rows, []string{ev.ID, clean(ev.Key), ev.CreateTime.Local().Format(time.DateTime), expire, fmt.Sprint(size)})
	}
	a.table("ID\tKEY\tPOSTED\tEXPIRES\tBYTES", rows)
	return nil
}

func (a *app) eventCmd() *cobra.Command {
	var data, cancelID string
	var list, cancel bool
	cmd := &cobra.Command{
		Use:   "event KEY [--data TEXT|@FILE|@-] | KEY --list | KEY --cancel | --cancel-id ID",
		Short: "Post an event: wake the sandboxes suspended on KEY",
		Long: "Post an event to KEY. Every sandbox suspended with --wake-on KEY resumes and receives\n" +
			"it (sbx events NAME); when none waits, it is kept for one that suspends on KEY later.\n" +
			"--list shows the events kept for KEY (\"\" for every key), --cancel deletes them,\n" +
			"--cancel-id deletes one. sbxd keeps at most 100 events or 16 MiB per key.",
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			key := ""
			if len(args) == 1 {
				key = args[0]
			}
			switch {
			case cancelID != "":
				if err := a.c.Events.Cancel(cmd.Context(), cancelID); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%s cancelled\n", clean(cancelID))
				return nil
			case list:
				return a.pendingEvents(cmd.Context(), key)
			case len(args) != 1:
				return fmt.Errorf("give a KEY")
			case cancel:
				n, err := a.c.Events.CancelKey(cmd.Context(), key)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%d pending events of %s cancelled\n", n, clean(key))
				return nil
			}
			var body []byte
			switch {
			case data == "@-":
				b, err := io.ReadAll(io.LimitReader(a.stdin, 1<<20+1))
				if err != nil {
					return err
				}
				body = b
			case strings.HasPrefix(data, "@"):
				b, err := os.ReadFile(data[1:])
				if err != nil {
					return err
				}
				body = b
			default:
				body = []byte(data)
			}
			res, err := a.c.Events.Post(cmd.Context(), args[0], body, "")
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(res)
			}
			if res.Pending {
				fmt.Fprintf(a.stdout, "%s: no sandbox waits on %s; kept until %s for one that suspends on it\n",
					res.ID, clean(args[0]), res.ExpireTime.Local().Format(time.DateTime))
			} else {
				fmt.Fprintf(a.stdout, "%s: waking %s\n", res.ID, clean(strings.Join(res.Woken, ", ")))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the event's body: text, @FILE, or @- for stdin (at most 1 MiB)")
	cmd.Flags().BoolVar(&list, "list", false, "list the events kept for KEY (every key without KEY) instead of posting")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "delete the events kept for KEY instead of posting")
	cmd.Flags().StringVar(&cancelID, "cancel-id", "", "delete the kept event with this id instead of posting")
	a.addOutput(cmd)
	return cmd
}

func (a *app) eventsCmd() *cobra.Command {
	return sandboxReadCmd(a, &cobra.Command{
		Use:   "events NAME",
		Short: "List the events a sandbox received",
	},
		func(ctx context.Context, sb *client.Sandbox) ([]api.Event, error) { return sb.Events(ctx) },
		func(sb *client.Sandbox, evs []api.Event) error {
			var rows [][]string
			for _, ev := range evs {
				data := string(ev.Data)
				switch {
				case ev.DataText != "":
					data = ev.DataText
				case ev.DataBase64 != "":
					b, _ := base64.StdEncoding.DecodeString(ev.DataBase64)
					data = fmt.Sprintf("(%d bytes)", len(b))
				}
				if len(data) > 60 {
					data = data[:57] + "..."
				}
				rows = append(rows, []string{ev.ID, ev.Key, ev.DeliverTime.Local().Format(time.DateTime), data})
			}
			a.table("ID\tKEY\tDELIVERED\tDATA", rows)
			return nil
		})
}

func (a *app) updateCmd() *cobra.Command {
	var timeout time.Duration
	var keepAlive bool
	var recovery time.Duration
	var rename string
	var labels []string
	cmd := &cobra.Command{
		Use:   "update NAME [--name NEW] [--label k=v]... [--timeout DURATION] [--keep-alive=true|false] [--recovery-interval DURATION]",
		Short: "Rename a sandbox, replace its labels, change its idle timeout (0: never suspend), keep-alive and recovery interval (0: none)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			var req api.UpdateSandboxRequest
			if cmd.Flags().Changed("timeout") {
				ms := timeout.Milliseconds()
				req.TimeoutMS = &ms
			}
			if cmd.Flags().Changed("keep-alive") {
				req.KeepAliveWhileRunning = &keepAlive
			}
			if cmd.Flags().Changed("recovery-interval") {
				ms := recovery.Milliseconds()
				req.RecoveryIntervalMS = &ms
			}
			if cmd.Flags().Changed("name") {
				req.Name = &rename
			}
			if cmd.Flags().Changed("label") {
				l, err := parseKV("label", labels)
				if err != nil {
					return err
				}
				if l == nil {
					l = map[string]string{}
				}
				req.Labels = l
			}
			if req.TimeoutMS == nil && req.KeepAliveWhileRunning == nil && req.Name == nil && req.Labels == nil && req.RecoveryIntervalMS == nil {
				return fmt.Errorf("give --name, --label, --timeout, --keep-alive or --recovery-interval")
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := sb.Update(cmd.Context(), req); err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(sb.Sandbox)
			}
			labels := labelString(sb.Labels)
			if labels == "" {
				labels = "none"
			}
			fmt.Fprintf(a.stdout, "%s: labels %s, timeout %v, keep alive while running %v, recovery interval %v\n", clean(sb.Name), clean(labels),
				time.Duration(sb.TimeoutMS)*time.Millisecond, sb.KeepAliveWhileRunning, time.Duration(sb.RecoveryIntervalMS)*time.Millisecond)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "suspend after this long without exec, file or port activity (0: never)")
	cmd.Flags().BoolVar(&keepAlive, "keep-alive", false, "a running process counts as activity")
	cmd.Flags().DurationVar(&recovery, "recovery-interval", 0, "a cluster's node: take a recovery snapshot this often (5s to 24h; 0: none)")
	cmd.Flags().StringVar(&rename, "name", "", "rename the sandbox")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "replace the labels with these k=v (repeatable)")
	a.addOutput(cmd)
	return cmd
}
