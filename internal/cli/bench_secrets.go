package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// secretProxyTimes is what `sbxd bench-secrets N` prints (its
// network.SecretProxyTimes): round trips in ms.
type secretProxyTimes struct {
	DirectNewConn   []float64 `json:"direct_new_conn_ms"`
	ProxyNewConn    []float64 `json:"proxy_new_conn_ms"`
	DirectKeepAlive []float64 `json:"direct_keep_alive_ms"`
	ProxyKeepAlive  []float64 `json:"proxy_keep_alive_ms"`
}

func (a *app) benchSecretsCmd() *cobra.Command {
	var n int
	var sbxd string
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Measure the latency the secrets proxy adds and print a table",
		Long: "Time an HTTPS GET carrying a secret's placeholder through sbxd's egress proxy (TLS\n" +
			"terminated with a sandbox CA, the value put in, TLS re-originated to the host) against\n" +
			"the same GET sent straight to the host, on new and on kept-alive connections. It runs\n" +
			"sbxd's proxy code (sbxd bench-secrets N, a process of its own, no daemon), with a TLS host\n" +
			"on 127.0.0.1 and CAs made for the measure: it needs no running sbxd and sends nothing off\n" +
			"the machine. The sandbox's network namespace and\n" +
			"the firewall's redirect are not in the measure (go test ./internal/network -bench\n" +
			"ProxySecret is the same measure as a Go benchmark). Target (issue 14): ≤ 2 ms added, p50.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if n < 1 {
				return fmt.Errorf("--n must be at least 1")
			}
			bin, err := findSbxd(sbxd)
			if err != nil {
				return fmt.Errorf("sbxd binary: %w (give --sbxd)", err)
			}
			var stdout, errb bytes.Buffer
			run := exec.CommandContext(cmd.Context(), bin, "bench-secrets", strconv.Itoa(n))
			run.Stdout, run.Stderr = &stdout, &errb
			if err := run.Run(); err != nil {
				return fmt.Errorf("%s bench-secrets: %w: %s", bin, err, strings.TrimSpace(errb.String()))
			}
			var t secretProxyTimes
			if err := json.Unmarshal(stdout.Bytes(), &t); err != nil {
				return fmt.Errorf("%s bench-secrets answered %q: %w", bin, stdout.String(), err)
			}
			added := func(metric string, proxy, direct []float64) benchRow {
				p, d := msRow("", proxy, ""), msRow("", direct, "")
				return benchRow{Metric: metric, N: len(proxy), P50: p.P50 - d.P50, P95: p.P95 - d.P95, Unit: "ms", Target: "≤ 2"}
			}
			rows := []benchRow{
				msRow("GET, new connection, direct", t.DirectNewConn, ""),
				msRow("GET, new connection, through the proxy", t.ProxyNewConn, ""),
				added("added by the proxy, new connection", t.ProxyNewConn, t.DirectNewConn),
				msRow("GET, kept-alive connection, direct", t.DirectKeepAlive, ""),
				msRow("GET, kept-alive connection, through the proxy", t.ProxyKeepAlive, ""),
				added("added by the proxy, kept-alive connection", t.ProxyKeepAlive, t.DirectKeepAlive),
			}
			if a.output == "json" {
				return a.printJSON(rows)
			}
			var out [][]string
			for _, r := range rows {
				out = append(out, []string{r.Metric, strconv.Itoa(r.N), fmt.Sprintf("%.2f", r.P50), fmt.Sprintf("%.2f", r.P95), r.Unit, r.Target})
			}
			a.table("METRIC\tN\tP50\tP95\tUNIT\tTARGET", out)
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "n", 200, "requests of each kind")
	cmd.Flags().StringVar(&sbxd, "sbxd", "", "sbxd binary that runs the measure (default: next to sbx, else PATH)")
	a.addOutput(cmd)
	return cmd
}
