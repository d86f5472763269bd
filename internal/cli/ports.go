package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func (a *app) portsCmd() *cobra.Command {
	return sandboxReadCmd(a, &cobra.Command{
		Use:   "ports NAME",
		Short: "List the TCP ports that programs listen on in a sandbox, with their preview URLs",
		Long: "List the TCP ports that programs listen on in a running sandbox. sbxd proxies HTTP and\n" +
			"WebSocket traffic to each at URL (path-based), or at http://PORT-NAME.localhost:LISTEN-PORT/\n" +
			"(host-based; see --preview-domain of sbxd). Over TCP, a browser opens a URL once with\n" +
			"?sbx_key=KEY, which sets a cookie for that port. URLs need sbxd on TCP (--url, $SBX_URL).",
	},
		func(ctx context.Context, sb *client.Sandbox) ([]api.Port, error) { return sb.Ports(ctx) },
		func(sb *client.Sandbox, ports []api.Port) error {
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
		})
}
