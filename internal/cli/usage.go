package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// usageChartWidth is the longest bar of `sbx usage`'s chart, in columns.
const usageChartWidth = 40

func (a *app) usageCmd() *cobra.Command {
	var since, until, by string
	var days int
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show usage and its cost: a table, and a bar chart of the cost per day",
		Long: `Show what sandboxes used and what it costs at sbxd's prices: CPU seconds used,
memory GiB-seconds allocated while running, bytes stored (checkpoints and
snapshots) and the cost in US dollars.

The table covers --since to --until (default: today, UTC), one row per
sandbox (--by sandbox), API key (--by key) or UTC day (--by day). Below it,
a bar chart shows the cost of each of the last --days days (default 7).
Times are RFC 3339 (2026-12-01T09:00:00Z) or a UTC day (2026-12-01).`,
		Example: `  sbx usage
  sbx usage --since 2026-12-01 --by day --days 30
  sbx usage -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if days < 1 || days > 400 {
				return fmt.Errorf("--days %d: want 1 to 400", days)
			}
			q := client.UsageQuery{GroupBy: by}
			var err error
			if q.Since, err = parseUsageTime("--since", since); err != nil {
				return err
			}
			if q.Until, err = parseUsageTime("--until", until); err != nil {
				return err
			}
			u, err := a.c.Usage(cmd.Context(), q)
			if err != nil {
				return err
			}
			today := time.Now().UTC().Truncate(24 * time.Hour)
			chartFrom := today.AddDate(0, 0, 1-days)
			perDay, err := a.c.Usage(cmd.Context(), client.UsageQuery{Since: chartFrom, Until: today.AddDate(0, 0, 1), GroupBy: api.UsageByDay})
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(struct {
					Usage  *api.Usage `json:"usage"`
					PerDay *api.Usage `json:"per_day"`
				}{u, perDay})
			}
			a.usageTable(u)
			fmt.Fprintf(a.stdout, "\nCost per day (UTC), %s to %s:\n", chartFrom.Format(time.DateOnly), today.Format(time.DateOnly))
			usageChart(a.stdout, perDay.Usage, chartFrom, days)
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "start of the table's window (default: the start of today, UTC)")
	cmd.Flags().StringVar(&until, "until", "", "end of the table's window (default: now)")
	cmd.Flags().StringVar(&by, "by", "sandbox", "rows of the table: sandbox, key or day")
	cmd.Flags().IntVar(&days, "days", 7, "days in the chart, ending today")
	a.addOutput(cmd)
	return cmd
}

// parseUsageTime parses a flag's RFC 3339 time or UTC day; "" is zero.
func parseUsageTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time (2026-12-01T09:00:00Z) or a day (2026-12-01)", flag, v)
}

// usageTable prints one row per entry of u and a total.
func (a *app) usageTable(u *api.Usage) {
	first := map[string]string{api.UsageBySandbox: "SANDBOX", api.UsageByKey: "KEY", api.UsageByDay: "DAY"}[u.GroupBy]
	fmt.Fprintf(a.stdout, "%s to %s\n", u.Since.Format(time.RFC3339), u.Until.Format(time.RFC3339))
	rows := make([][]string, 0, len(u.Usage)+1)
	for _, e := range u.Usage {
		name := e.Day
		switch u.GroupBy {
		case api.UsageBySandbox:
			name = e.Sandbox
			if name == "" {
				name = e.SandboxID
			}
		case api.UsageByKey:
			name = e.Key
			if name == "" {
				name = "operator"
			}
		}
		rows = append(rows, usageRow(name, e))
	}
	rows = append(rows, usageRow("TOTAL", u.Total))
	a.table(first+"\tCPU-SECONDS\tMEMORY-GIB-HOURS\tSTORED-GB-DAYS\tCOST", rows)
}

func usageRow(name string, e api.UsageEntry) []string {
	return []string{name, fmt.Sprintf("%.1f", e.CPUSeconds), fmt.Sprintf("%.3f", e.MemoryGiBSeconds/3600),
		fmt.Sprintf("%.3f", e.StoredByteSeconds/1e9/86400), formatUSD(e.Cost)}
}

// formatUSD shows dollars with four significant decimals below a cent.
func formatUSD(v float64) string {
	if v != 0 && math.Abs(v) < 0.01 {
		return fmt.Sprintf("$%.5f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}

// usageChart draws one bar per day from `from` for `days` days, the
// longest usageChartWidth columns, in eighths of a block; days with no
// entry are zero.
func usageChart(w io.Writer, perDay []api.UsageEntry, from time.Time, days int) {
	cost := map[string]float64{}
	peak := 0.0
	for _, e := range perDay {
		cost[e.Day] = e.Cost
		peak = max(peak, e.Cost)
	}
	for i := range days {
		day := from.AddDate(0, 0, i).Format(time.DateOnly)
		c := cost[day]
		bar := ""
		if peak > 0 {
			bar = usageBar(c / peak * usageChartWidth)
		}
		pad := strings.Repeat(" ", usageChartWidth-utf8.RuneCountInString(bar))
		fmt.Fprintf(w, "%s │%s%s %s\n", day, bar, pad, formatUSD(c))
	}
}

// usageBar is a bar of cols columns (fractions in eighths).
func usageBar(cols float64) string {
	eighths := int(math.Round(cols * 8))
	s := strings.Repeat("█", eighths/8)
	if r := eighths % 8; r > 0 {
		s += string([]rune("▏▎▍▌▋▊▉")[r-1])
	}
	return s
}

func (a *app) limitCmd() *cobra.Command {
	var resume bool
	cmd := &cobra.Command{
		Use:   "limit KEY USD|none",
		Short: "Set an API key's daily spending limit (admin keys only)",
		Long: `Set the daily spending limit of an API key (its id or name), in US dollars
per UTC day, or "none" to remove it. It is enforced at once: a key over its
limit gets 429 quota_exceeded on create, fork, resume and exec, and its
running sandboxes are suspended (memory and disk kept, not killed).
--resume resumes them once the key is under its limit again: at once if the
new limit allows it, else when the limit is raised or the UTC day turns.`,
		Example: `  sbx limit ci-agent 5
  sbx limit ci-agent 20 --resume
  sbx limit ci-agent none`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.KeyLimitRequest{ResumeSuspended: resume}
			if args[1] != "none" {
				v, err := strconv.ParseFloat(strings.TrimPrefix(args[1], "$"), 64)
				if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("limit %q: want US dollars (5, 0.25) or none", args[1])
				}
				req.DailyLimitUSD = &v
			}
			k, err := a.c.SetKeyLimit(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if k.DailyLimitUSD == nil {
				fmt.Fprintf(a.stdout, "%s (%s): no daily limit\n", clean(k.Name), k.ID)
				return nil
			}
			fmt.Fprintf(a.stdout, "%s (%s): daily limit %s\n", clean(k.Name), k.ID, formatUSD(*k.DailyLimitUSD))
			return nil
		},
	}
	cmd.Flags().BoolVar(&resume, "resume", false, "resume the sandboxes the limit suspended once the key is under it")
	return cmd
}
