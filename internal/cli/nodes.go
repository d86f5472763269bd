package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) nodesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the nodes of the cluster sbxd belongs to (an admin key's command)",
		Long: `List the sbxd nodes that share sbxd's PostgreSQL store: each node's state
(active, draining, stopped, or lost when its lease ran out without it
leaving), its advertised URL, when its lease ends, and the capacity it
published in its last heartbeat. The node that answered is marked with *.
A single sbxd lists itself alone.`,
		Example: `  sbx nodes
  sbx nodes -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			nodes, err := a.c.Nodes(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(nodes)
			}
			rows := make([][]string, 0, len(nodes))
			for _, n := range nodes {
				name := n.Name
				if n.Self {
					name += " *"
				}
				lease := "-"
				if n.LeaseExpireTime != nil {
					if d := time.Until(*n.LeaseExpireTime); d > 0 {
						lease = "in " + d.Round(time.Second).String()
					} else {
						lease = (-d).Round(time.Second).String() + " ago"
					}
				}
				url := n.URL
				if url == "" {
					url = "-"
				}
				c := n.Capacity
				rows = append(rows, []string{name, string(n.State), url, fmt.Sprint(c.Sandboxes), fmt.Sprint(c.CPUs),
					humanBytes(c.FreeMemoryBytes) + "/" + humanBytes(c.MemoryBytes), fmt.Sprint(len(c.Images)),
					fmt.Sprint(len(c.SnapshotImages)), lease, n.Version})
			}
			a.table("NODE\tSTATE\tURL\tSANDBOXES\tCPUS\tMEMORY_FREE\tIMAGES\tSNAPSHOT_IMAGES\tLEASE_ENDS\tVERSION", rows)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

func (a *app) nodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Manage a node of the cluster (an admin key's command)",
	}
	var cancel bool
	drain := &cobra.Command{
		Use:   "drain NAME",
		Short: "Move a node's sandboxes to other nodes, with their processes, and stop placing new ones on it",
		Long: `Drain a node: it takes no new sandboxes, and each sandbox it runs is
suspended there and resumed on another node (the one placement picks), its
processes running on. A sandbox with a volume stays (its volume is that
host's directory). The drain lasts across restarts of the node until
--cancel. The command answers at once; sbx ls shows where each sandbox
runs, and sbx nodes that the node drains.`,
		Example: `  sbx node drain node-a
  sbx node drain node-a --cancel`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			n, err := a.c.DrainNode(cmd.Context(), args[0], !cancel)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(n)
			}
			fmt.Fprintf(a.stdout, "node %s: %s\n", n.Name, n.State)
			return nil
		},
	}
	drain.Flags().BoolVar(&cancel, "cancel", false, "end the drain: the node takes sandboxes again")
	a.addOutput(drain)
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove the record of a node that will not come back",
		Long: `Remove a node's record, and its journal entries, from the cluster: for a
node that is lost or stopped for good. It is refused while the node is live,
and while sandboxes still name it: running ones are recovered on other
nodes once it is lost (from their last durable point), suspended ones wake
anywhere (resume them, or delete them, through another node).`,
		Example: `  sbx node rm node-a`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.c.RemoveNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "node %s: removed\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(drain, rm)
	return cmd
}
