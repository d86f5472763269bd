package cli

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sbxhq/sbx/api"
)

// TestUsageChart: one line per day, days without usage at zero, bars in
// proportion to cost (the dearest day full width, a day at 3/16 of it
// 7.5 columns: 7 blocks and a half block), the costs in one column.
func TestUsageChart(t *testing.T) {
	var b strings.Builder
	from := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	usageChart(&b, []api.UsageEntry{{Day: "2026-11-30", Cost: 0.0533}, {Day: "2026-12-02", Cost: 0.0533 * 3 / 16}}, from, 3)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "2026-11-30 │"+strings.Repeat("█", usageChartWidth)+" $0.0533") ||
		!strings.HasPrefix(lines[1], "2026-12-01 │ ") || !strings.HasSuffix(lines[1], " $0.0000") ||
		!strings.HasPrefix(lines[2], "2026-12-02 │"+strings.Repeat("█", 7)+"▌ ") {
		t.Fatalf("chart:\n%s", b.String())
	}
	for _, l := range lines[1:] {
		col := func(s string) int { return utf8.RuneCountInString(s[:strings.Index(s, "$")]) }
		if col(l) != col(lines[0]) {
			t.Errorf("ragged line %q", l)
		}
	}
}

// TestUsageTable: the fork example's row and the total, with dollars to
// five decimals below a cent.
func TestUsageTable(t *testing.T) {
	var out strings.Builder
	a := &app{stdout: &out}
	e := api.UsageEntry{Sandbox: "fork", SandboxID: "sbx_1", CPUSeconds: 180, MemoryGiBSeconds: 720, Cost: 0.00275}
	tot := e
	tot.Sandbox, tot.SandboxID = "", ""
	a.usageTable(&api.Usage{GroupBy: api.UsageBySandbox, Usage: []api.UsageEntry{e}, Total: tot})
	s := out.String()
	for _, want := range []string{"SANDBOX", "fork", "180.0", "0.200", "$0.00275", "TOTAL"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

// TestUsageFlags: a malformed --since or --days is refused before any
// request.
func TestUsageFlags(t *testing.T) {
	for _, args := range [][]string{{"usage", "--since", "yesterday"}, {"usage", "--days", "0"}, {"limit", "NaN"}, {"limit", "lots"}} {
		if args[0] == "limit" {
			args = []string{"limit", "ci-agent", args[1]}
		}
		_, errs, code := runCLI(t, args...)
		if code == 0 || strings.Contains(errs, "sbxd running") || !strings.Contains(errs, args[len(args)-1]) {
			t.Errorf("sbx %v: exit %d, stderr %q", args, code, errs)
		}
	}
}
