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
