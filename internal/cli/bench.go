package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// benchRow is one line of the bench table; durations in ms.
type benchRow struct {
	Metric string  `json:"metric"`
	N      int     `json:"n"`
	P50    float64 `json:"p50"`
	P95    float64 `json:"p95"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s)-1)*p + 0.5)
	return s[i]
}

func msRow(metric string, xs []float64, target string) benchRow {
	return benchRow{Metric: metric, N: len(xs), P50: percentile(xs, 0.5), P95: percentile(xs, 0.95), Unit: "ms", Target: target}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (a *app) benchCmd() *cobra.Command {
	var n, execs int
	var image string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure sbx on this machine and print a table",
		Long: "Measure create → first exec (from the warm pool and by a cold boot), exec round trips,\n" +
			"delete time and host memory, against the running sbxd. Run it on sbxd's host:\n" +
			"memory is read from /proc. It creates and deletes sandboxes labelled sbx-bench=1.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			rows, err := a.bench(cmd.Context(), image, n, execs)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(rows)
			}
			var out [][]string
			for _, r := range rows {
				p95 := fmt.Sprintf("%.1f", r.P95)
				if r.N <= 1 {
					p95 = "-"
				}
				out = append(out, []string{r.Metric, strconv.Itoa(r.N), fmt.Sprintf("%.1f", r.P50), p95, r.Unit, r.Target})
			}
			a.table("METRIC\tN\tP50\tP95\tUNIT\tTARGET", out)
			return nil
		},
	}
	cmd.AddCommand(a.benchCheckpointCmd(), a.benchSnapshotCmd(), a.benchNetCmd(), a.benchSuspendCmd(), a.benchSecretsCmd(), a.benchSoakCmd())
	cmd.Flags().IntVar(&n, "sandboxes", 20, "sandboxes to create for the create and delete measures")
	cmd.Flags().IntVar(&execs, "execs", 50, "exec round trips to measure")
	cmd.Flags().StringVar(&image, "image", "default", "image to measure on")
	a.addOutput(cmd)
	return cmd
}

func (a *app) bench(ctx context.Context, image string, n, execs int) ([]benchRow, error) {
	labels := map[string]string{"sbx-bench": "1"}
	var created []*client.Sandbox
	defer func() {
		for _, sb := range created {
			_ = sb.Delete(context.WithoutCancel(ctx))
		}
	}()
	health, err := a.c.Health(ctx)
	if err != nil {
		return nil, err
	}
	waitWarm := func() bool {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			h, err := a.c.Health(ctx)
			if err == nil && h.WarmSandboxes > 0 {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	firstExec := func(req api.CreateSandboxRequest) (float64, *client.Sandbox, error) {
		start := time.Now()
		sb, err := a.c.Sandboxes.Create(ctx, req)
		if err != nil {
			return 0, nil, err
		}
		created = append(created, sb)
		res, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"true"}})
		if err != nil {
			return 0, nil, err
		}
		if res.ExitCode != 0 {
			return 0, nil, fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
		}
		return ms(time.Since(start)), sb, nil
	}
	var rows []benchRow
	fmt.Fprintf(a.stderr, "sbxd %s, %s, %d warm sandboxes\n", health.Version, health.Runtime, health.WarmSandboxes)

	// create → first exec, taking warm sandboxes (waiting for the pool to
	// refill between creates, as a steady trickle of agents would).
	var warm []float64
	if health.WarmSandboxes > 0 || waitWarm() {
		for i := 0; i < n; i++ {
			if !waitWarm() {
				break
			}
			d, _, err := firstExec(api.CreateSandboxRequest{Image: image, Labels: labels})
			if err != nil {
				return nil, err
			}
			warm = append(warm, d)
		}
		rows = append(rows, msRow("create → first exec (warm pool)", warm, "p50 ≤ 100"))
	} else {
		fmt.Fprintln(a.stderr, "no warm pool (sbxd --pool 0, or the default image is missing): skipping the warm measure")
	}
	// A shape the pool does not keep boots cold.
	var cold []float64
	coldN := min(n, 5)
	for i := 0; i < coldN; i++ {
		d, _, err := firstExec(api.CreateSandboxRequest{Image: image, Labels: labels, MemoryMB: 1000})
		if err != nil {
			return nil, err
		}
		cold = append(cold, d)
	}
	rows = append(rows, msRow("create → first exec (cold boot)", cold, ""))

	// Exec round trips on one sandbox, after a few to warm its caches.
	sb := created[0]
	for i := 0; i < 5; i++ {
		if _, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		label  string
		cmd    []string
		target string
	}{
		{"exec round trip: true", []string{"true"}, "p50 ≤ 20"},
		{"exec round trip: sh -c 'echo hi'", []string{"sh", "-c", "echo hi"}, ""},
	} {
		var xs []float64
		for i := 0; i < execs; i++ {
			start := time.Now()
			if _, err := sb.Run(ctx, api.ExecRequest{Cmd: c.cmd}); err != nil {
				return nil, err
			}
			xs = append(xs, ms(time.Since(start)))
		}
		rows = append(rows, msRow(c.label, xs, c.target))
	}

	// Host memory: sbxd's RSS, and the PSS of each idle sandbox's runsc
	// processes (the guest's memory lives in them).
	if rss, err := procRSS(health.PID); err == nil {
		rows = append(rows, benchRow{Metric: "sbxd RSS", N: 1, P50: float64(rss) / (1 << 20), Unit: "MiB"})
	}
	var pss []float64
	for _, s := range created {
		if v, err := sandboxPSS(s.ID); err == nil && v > 0 {
			pss = append(pss, float64(v)/(1<<20))
		}
	}
	if len(pss) > 0 {
		rows = append(rows, benchRow{Metric: "host memory per idle sandbox (PSS)", N: len(pss), P50: percentile(pss, 0.5), P95: percentile(pss, 0.95), Unit: "MiB"})
	}

	// Delete.
	var del []float64
	for _, s := range created {
		start := time.Now()
		if err := s.Delete(ctx); err != nil {
			return nil, err
		}
		del = append(del, ms(time.Since(start)))
	}
	created = nil
	rows = append(rows, msRow("delete", del, ""))
	return rows, nil
}

// procRSS reads VmRSS of pid in bytes.
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// sandboxPSS sums the proportional set size of the host processes whose
// command line names sandbox id (runsc's sandbox and gofer processes).
func sandboxPSS(id string) (int64, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		f, err := os.Open(filepath.Join(filepath.Dir(p), "smaps_rollup"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				total += kb << 10
				break
			}
		}
		f.Close()
	}
	return total, nil
}

// parseSizes parses --sizes: MB numbers separated by commas ("50,500");
// empty entries are skipped, so "" measures no size.
func parseSizes(sizes string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(sizes, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		mb, err := strconv.Atoi(f)
		if err != nil || mb < 1 {
			return nil, fmt.Errorf("--sizes %q: want MB numbers like 50,500", sizes)
		}
		out = append(out, mb)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--sizes %q: give at least one MB number, like 50,500", sizes)
	}
	return out, nil
}
