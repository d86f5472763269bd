package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func (a *app) portsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ports NAME",
		Short: "List the TCP ports that programs listen on in a sandbox, with their preview URLs",
		Long: "List the TCP ports that programs listen on in a running sandbox. sbxd proxies HTTP and\n" +
			"WebSocket traffic to each at URL (path-based), or at http://PORT-NAME.localhost:LISTEN-PORT/\n" +
			"(host-based; see --preview-domain of sbxd). Over TCP, a browser opens a URL once with\n" +
			"?sbx_key=KEY, which sets a cookie for that port. URLs need sbxd on TCP (--url, $SBX_URL).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ports, err := sb.Ports(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(ports)
			}
			dash := func(s string) string {
				if s == "" {
					return "-"
				}
				return s
			}
			var rows [][]string
			noURL := false
			for _, p := range ports {
				pid := "-"
				if p.PID != 0 {
					pid = strconv.Itoa(p.PID)
				}
				u := sb.PortURL(p.Port)
				noURL = noURL || u == ""
				rows = append(rows, []string{strconv.Itoa(p.Port), p.Address, pid, dash(p.Command), dash(u)})
			}
			a.table("PORT\tADDRESS\tPID\tCOMMAND\tURL", rows)
			if noURL {
				fmt.Fprintln(a.stderr, "sbx: no URLs: sbx reaches sbxd over its Unix socket; serve sbxd on TCP (--listen) and use --url or $SBX_URL to open ports in a browser")
			}
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}
