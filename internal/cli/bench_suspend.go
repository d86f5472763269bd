package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// suspendRow is one line of the suspend bench table (ms, bytes).
type suspendRow struct {
	MemoryMB     int     `json:"memory_mb"`
	SuspendMS    float64 `json:"suspend_ms"`
	ResumeMS     float64 `json:"resume_ms"`
	FirstExecMS  float64 `json:"resume_to_first_exec_ms"`
	SuspendedRAM int64   `json:"suspended_host_memory_bytes"`
	// Breakdowns say where the suspend's and the resume's time went.
	Breakdowns []breakdown `json:"breakdowns"`
}

func (a *app) benchSuspendCmd() *cobra.Command {
	var sizes string
	var density int
	var cpuWindow time.Duration
	var sbxdPID int
	cmd := &cobra.Command{
		Use:   "suspend",
		Short: "Measure suspend, resume and idle density and print a table",
		Long: "For sandboxes whose processes hold SIZES MB of touched memory: suspend time, resume time,\n" +
			"the time from a suspended sandbox to the answer of its first exec (the resume an exec\n" +
			"triggers), and the host memory a suspended sandbox holds. With --density N, N idle\n" +
			"sandboxes (a shell sleeping) are created; the host memory per idle sandbox and sbxd's own\n" +
			"CPU while they sit idle (an upper bound on what metering costs) are reported.\n" +
			"Run it on sbxd's host: memory is read from /proc and the memory cgroups.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			mbs, err := parseSizes(sizes)
			if err != nil {
				return err
			}
			var rows []suspendRow
			for _, mb := range mbs {
				row, err := a.benchSuspend(cmd.Context(), mb)
				if err != nil {
					return fmt.Errorf("%d MB: %w", mb, err)
				}
				rows = append(rows, *row)
			}
			var dens *densityResult
			if density > 0 {
				d, err := a.benchDensity(cmd.Context(), density, cpuWindow, sbxdPID)
				if err != nil {
					return err
				}
				dens = d
			}
			if a.output == "json" {
				return a.printJSON(map[string]any{"suspend": rows, "density": dens})
			}
			var out [][]string
			for _, r := range rows {
				out = append(out, []string{strconv.Itoa(r.MemoryMB), fmt.Sprintf("%.0f", r.SuspendMS), fmt.Sprintf("%.0f", r.ResumeMS),
					fmt.Sprintf("%.0f", r.FirstExecMS), humanBytes(r.SuspendedRAM)})
			}
			a.table("MEMORY_MB\tSUSPEND_MS\tRESUME_MS\tRESUME_TO_FIRST_EXEC_MS\tSUSPENDED_HOST_RAM", out)
			fmt.Fprintln(a.stdout, "targets: suspend of 512 MB ≤ 1 s; resume of 512 MB to first exec ≤ 300 ms; 0 bytes of RAM while suspended")
			var bs []breakdown
			for _, r := range rows {
				bs = append(bs, r.Breakdowns...)
			}
			a.printBreakdowns(bs)
			if dens != nil {
				fmt.Fprintf(a.stdout, "\ndensity: %d idle sandboxes running (asked %d), %s of host memory each (PSS), %s available left\n",
					dens.Running, density, humanBytes(dens.PerSandboxPSS), humanBytes(dens.AvailableAfter))
				fmt.Fprintln(a.stdout, "target: ≥ 200 idle sandboxes")
				if dens.SbxdCPUPercent >= 0 {
					fmt.Fprintf(a.stdout, "sbxd's own CPU with them running (metering every 30 s included): %.2f%% of a core over %.0f s\n",
						dens.SbxdCPUPercent, dens.SbxdCPUWindowS)
					fmt.Fprintln(a.stdout, "target: metering ≤ 1% CPU with 200 running sandboxes")
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&sizes, "sizes", "50,500,2000", "touched memory of each case, MB")
	cmd.Flags().IntVar(&density, "density", 0, "also create this many idle sandboxes and measure memory per sandbox")
	cmd.Flags().DurationVar(&cpuWindow, "cpu-window", 65*time.Second, "with --density: how long to measure sbxd's own CPU while the sandboxes sit idle (0: not at all)")
	cmd.Flags().IntVar(&sbxdPID, "sbxd-pid", 0, "with --density: the pid of the sbxd to measure (default: the only process named sbxd)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) benchSuspend(ctx context.Context, mb int) (*suspendRow, error) {
	sb, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"sbx-bench": "1"}, MemoryMB: mb + 768})
	if err != nil {
		return nil, err
	}
	defer sb.Delete(context.WithoutCancel(ctx))
	if err := a.fillMemory(ctx, sb, mb); err != nil {
		return nil, err
	}
	row := &suspendRow{MemoryMB: mb}
	var steps stepRecorder
	start := time.Now()
	if err := sb.SuspendStream(ctx, "", steps.progress()); err != nil {
		return nil, err
	}
	row.SuspendMS = ms(time.Since(start))
	row.Breakdowns = append(row.Breakdowns, breakdown{Op: fmt.Sprintf("suspend %d MB", mb), TotalMS: row.SuspendMS, Steps: steps.take()})
	row.SuspendedRAM = cgroupMemory(sb.ID)
	start = time.Now()
	if err := sb.ResumeStream(ctx, steps.progress()); err != nil {
		return nil, err
	}
	row.ResumeMS = ms(time.Since(start))
	row.Breakdowns = append(row.Breakdowns, breakdown{Op: fmt.Sprintf("resume %d MB", mb), TotalMS: row.ResumeMS, Steps: steps.take()})
	if err := sb.Suspend(ctx, ""); err != nil {
		return nil, err
	}
	start = time.Now()
	if res, err := sb.Exec(ctx, "test -f /tmp/ready"); err != nil {
		return nil, fmt.Errorf("first exec after the resume: %w", err)
	} else if res.ExitCode != 0 {
		return nil, fmt.Errorf("first exec after the resume: the process holding the memory is gone (test -f /tmp/ready exited %d: %s)", res.ExitCode, res.Stderr)
	}
	row.FirstExecMS = ms(time.Since(start))
	fmt.Fprintf(a.stderr, "%d MB: suspend %.0f ms, resume %.0f ms, to first exec %.0f ms\n", mb, row.SuspendMS, row.ResumeMS, row.FirstExecMS)
	return row, nil
}

// cgroupMemory is the memory a sandbox's cgroup charges (0 when it has
// none: not running). Its cgroup is under /sbx, or /sbx-TAG for an sbxd
// with another network tag (daemon's cgroupParent); ids are unique.
func cgroupMemory(id string) int64 {
	v1, _ := filepath.Glob("/sys/fs/cgroup/memory/sbx*/" + id + "/memory.usage_in_bytes")
	v2, _ := filepath.Glob("/sys/fs/cgroup/sbx*/" + id + "/memory.current")
	for _, p := range append(v1, v2...) {
		if b, err := os.ReadFile(p); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
	}
	return 0
}

type densityResult struct {
	Running        int   `json:"running"`
	PerSandboxPSS  int64 `json:"per_sandbox_pss_bytes"`
	AvailableAfter int64 `json:"available_after_bytes"`
	// SbxdCPUPercent is the CPU sbxd itself used while the sandboxes sat
	// idle, % of one core over SbxdCPUWindowS seconds (user + system, from
	// /proc/PID/stat); -1 when sbxd's pid is not known (--sbxd-pid, or the
	// only process named sbxd on this host). It bounds what metering (and every other loop of
	// sbxd's) costs with Running sandboxes to meter.
	SbxdCPUPercent float64 `json:"sbxd_cpu_percent"`
	SbxdCPUWindowS float64 `json:"sbxd_cpu_window_s"`
}

// benchDensity creates n idle sandboxes (a shell sleeping in each, 256 MiB
// limit) until n run or one fails, then measures their host memory.
func (a *app) benchDensity(ctx context.Context, n int, window time.Duration, pid int) (*densityResult, error) {
	var made []*client.Sandbox
	defer func() {
		fmt.Fprintf(a.stderr, "density: deleting %d sandboxes...\n", len(made))
		for _, sb := range made {
			_ = sb.Delete(context.WithoutCancel(ctx))
		}
	}()
	for i := 0; i < n; i++ {
		sb, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{MemoryMB: 256, CPUs: 0.1,
			Labels: map[string]string{"sbx-bench": "1"}, Network: &api.NetworkRules{Internet: false}})
		if err != nil {
			fmt.Fprintf(a.stderr, "density: sandbox %d failed: %v\n", i+1, err)
			break
		}
		made = append(made, sb)
		if _, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "sleep 100000"}}); err != nil {
			fmt.Fprintf(a.stderr, "density: sandbox %d: %v\n", i+1, err)
			break
		}
		if (i+1)%25 == 0 {
			fmt.Fprintf(a.stderr, "density: %d idle sandboxes\n", i+1)
		}
	}
	time.Sleep(2 * time.Second)
	var total int64
	for _, sb := range made {
		p, _ := sandboxPSS(sb.ID)
		total += p
	}
	res := &densityResult{Running: len(made), AvailableAfter: memAvailable(), SbxdCPUPercent: -1, SbxdCPUWindowS: window.Seconds()}
	if len(made) > 0 {
		res.PerSandboxPSS = total / int64(len(made))
	}
	if pid == 0 {
		pid = onlyProcess("sbxd")
	}
	if pid > 0 && window > 0 {
		fmt.Fprintf(a.stderr, "density: measuring sbxd's CPU for %s\n", window)
		before, t0 := cpuTicks(pid), time.Now()
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(window):
		}
		after, el := cpuTicks(pid), time.Since(t0)
		if before >= 0 && after >= before {
			// USER_HZ is 100 on Linux whatever the kernel's HZ.
			res.SbxdCPUPercent = float64(after-before) / 100 / el.Seconds() * 100
		}
	}
	return res, nil
}

// onlyProcess is the pid of the one process whose comm is name, or 0 when
// there is none or more than one.
func onlyProcess(name string) int {
	ents, _ := os.ReadDir("/proc")
	found := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == name {
			if found != 0 {
				return 0
			}
			found = pid
		}
	}
	return found
}

// cpuTicks is pid's user + system CPU time in clock ticks (USER_HZ), from
// fields 14 and 15 of /proc/PID/stat (proc(5)), or -1 when unreadable.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The comm field (2) may hold spaces: the fields after it start past
	// the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return u + s
}

// memAvailable is the host's MemAvailable, bytes.
func memAvailable() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
