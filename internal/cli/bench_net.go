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

func (a *app) benchNetCmd() *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Measure network rules through the API and print a table",
		Long: "Create → first exec with internet on and offline (cold boots: a shape the warm pool does\n" +
			"not hold), the time for a rules change (PUT network) to answer, by which time it is\n" +
			"enforced. The egress proxy's added latency and throughput, DNS answers and the cost of\n" +
			"a sandbox's network are Go benchmarks: go test ./internal/network -bench .; the latency\n" +
			"a secret adds (TLS terminated and re-originated) is sbx bench secrets.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			rows, err := a.benchNet(cmd.Context(), n)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(rows)
			}
			var out [][]string
			for _, r := range rows {
				out = append(out, []string{r.Metric, strconv.Itoa(r.N), fmt.Sprintf("%.1f", r.P50), fmt.Sprintf("%.1f", r.P95), r.Unit, r.Target})
			}
			a.table("METRIC\tN\tP50\tP95\tUNIT\tTARGET", out)
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "n", 5, "sandboxes per create measure")
	a.addOutput(cmd)
	return cmd
}

func (a *app) benchNet(ctx context.Context, n int) ([]benchRow, error) {
	labels := map[string]string{"sbx-bench": "1"}
	var created []*client.Sandbox
	defer func() {
		for _, sb := range created {
			_ = sb.Delete(context.WithoutCancel(ctx))
		}
	}()
	var rows []benchRow
	for _, c := range []struct {
		name  string
		rules api.NetworkRules
	}{
		{"create→exec, internet on (cold)", api.NetworkRules{Internet: true}},
		{"create→exec, offline (cold)", api.NetworkRules{Internet: false}},
	} {
		var ms []float64
		for range n {
			rules := c.rules
			start := time.Now()
			// 1000 MiB: not the warm pool's shape, so every create boots.
			sb, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{MemoryMB: 1000, Labels: labels, Network: &rules})
			if err != nil {
				return nil, err
			}
			created = append(created, sb)
			if _, err := sb.Exec(ctx, "true"); err != nil {
				return nil, err
			}
			ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		}
		rows = append(rows, msRow(c.name, ms, ""))
	}
	sb := created[0]
	var put []float64
	for i := range 20 {
		rules := api.NetworkRules{Internet: true, Allow: []string{"pypi.org", "*.pythonhosted.org"}}
		if i%2 == 1 {
			rules = api.NetworkRules{Internet: false}
		}
		start := time.Now()
		if _, err := sb.Network().Set(ctx, rules); err != nil {
			return nil, err
		}
		put = append(put, float64(time.Since(start).Microseconds())/1000)
	}
	rows = append(rows, msRow("rules change (PUT network, enforced on return)", put, "≤ 1000"))
	return rows, nil
}
