package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// memoryScript holds N MB of random bytes in a Python process (touched,
// incompressible memory), then sleeps.
const memoryScript = `
import os, sys, time
mb = int(sys.argv[1])
blocks = [os.urandom(1 << 20) for _ in range(mb)]
open("/tmp/ready", "w").write("ok")
while True:
    time.sleep(1)
`

// snapshotRow is one line of the snapshot bench table (ms and bytes).
type snapshotRow struct {
	MemoryMB        int     `json:"memory_mb"`
	SnapshotMS      float64 `json:"snapshot_ms"`
	StoredAfterMS   float64 `json:"stored_after_ms"`
	PausedMS        int64   `json:"paused_ms"`
	StartMS         float64 `json:"start_from_snapshot_ms"`
	ForkMS          float64 `json:"fork_ms"`
	Fork8MS         float64 `json:"fork_8_ms"`
	StoredBytes     int64   `json:"stored_bytes"`
	SecondStoredB   int64   `json:"second_stored_bytes"`
	MemoryImageSize int64   `json:"memory_bytes"`
	// Breakdowns say where the snapshot's, the start's and the fork's
	// time went.
	Breakdowns []breakdown `json:"breakdowns"`
}

func (a *app) benchSnapshotCmd() *cobra.Command {
	var sizes string
	var fanout int
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Measure memory snapshots and forks and print a table",
		Long: "For sandboxes whose processes hold SIZES MB of touched memory: snapshot time (and how long\n" +
			"the source was paused), when its memory image was in the blob store (stored in the background\n" +
			"after the snapshot answers), start-from-snapshot time, fork time (to a copy that answers exec;\n" +
			"and how long the source was paused), a FANOUT-way fork, stored bytes, and the stored bytes of\n" +
			"a second snapshot right after.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if fanout < 0 || fanout > api.MaxForkCount {
				return fmt.Errorf("--fanout %d: want 0 (no fan-out fork) to %d", fanout, api.MaxForkCount)
			}
			mbs, err := parseSizes(sizes)
			if err != nil {
				return err
			}
			var rows []snapshotRow
			for _, mb := range mbs {
				row, err := a.benchSnapshot(cmd.Context(), mb, fanout)
				if err != nil {
					return fmt.Errorf("%d MB: %w", mb, err)
				}
				rows = append(rows, *row)
			}
			if a.output == "json" {
				return a.printJSON(rows)
			}
			var out [][]string
			for _, r := range rows {
				out = append(out, []string{strconv.Itoa(r.MemoryMB), fmt.Sprintf("%.0f", r.SnapshotMS),
					fmt.Sprintf("%.0f", r.StoredAfterMS), fmt.Sprintf("%.0f", r.StartMS), fmt.Sprintf("%.0f", r.ForkMS), strconv.FormatInt(r.PausedMS, 10),
					fmt.Sprintf("%.0f", r.Fork8MS), humanBytes(r.MemoryImageSize), humanBytes(r.StoredBytes), humanBytes(r.SecondStoredB)})
			}
			var bs []breakdown
			for _, r := range rows {
				bs = append(bs, r.Breakdowns...)
			}
			defer a.printBreakdowns(bs)
			a.table(fmt.Sprintf("MEMORY_MB\tSNAPSHOT_MS\tSTORED_AFTER_MS\tSTART_MS\tFORK_MS\tFORK_PAUSED_MS\tFORK_%d_MS\tIMAGE\tSTORED\tSECOND_STORED", fanout), out)
			fmt.Fprintln(a.stdout, "targets (50 MB / 512 MB): snapshot ≤ 300 ms; fork paused ≤ 150 ms (50 MB); fork ≤ 250 / 500 ms; 8 forks of 50 MB ≤ 1 s; second snapshot ≤ 10% of the first")
			return nil
		},
	}
	cmd.Flags().StringVar(&sizes, "sizes", "50,500,2000", "touched memory of each case, MB")
	cmd.Flags().IntVar(&fanout, "fanout", 8, "copies of the fan-out fork (0: none)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) benchSnapshot(ctx context.Context, mb, fanout int) (*snapshotRow, error) {
	labels := map[string]string{"sbx-bench": "1"}
	var made []*client.Sandbox
	defer func() {
		for _, sb := range made {
			_ = sb.Delete(context.WithoutCancel(ctx))
		}
	}()
	src, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Labels: labels, MemoryMB: mb + 768})
	if err != nil {
		return nil, err
	}
	made = append(made, src)
	if err := a.fillMemory(ctx, src, mb); err != nil {
		return nil, err
	}
	row := &snapshotRow{MemoryMB: mb}
	var steps stepRecorder
	start := time.Now()
	sn, err := src.SnapshotStream(ctx, api.SnapshotRequest{Name: "bench"}, steps.progress())
	if err != nil {
		return nil, err
	}
	row.SnapshotMS = ms(time.Since(start))
	row.Breakdowns = append(row.Breakdowns, breakdown{Op: fmt.Sprintf("snapshot %d MB", mb), TotalMS: row.SnapshotMS, Steps: steps.take()})
	// The snapshot answers once its memory image is on sbxd's node; the
	// image goes to the blob store in the background: wait for it (what
	// it stored, and when), so that no store runs under the next measure.
	if sn, err = a.waitSnapshotStored(ctx, sn); err != nil {
		return nil, err
	}
	row.StoredAfterMS = ms(sn.StoreTime.Sub(sn.CreateTime))
	row.StoredBytes, row.MemoryImageSize = sn.StoredBytes, sn.MemoryBytes
	sn2, err := src.Snapshot(ctx, api.SnapshotRequest{Name: "bench-2"})
	if err != nil {
		return nil, err
	}
	if sn2, err = a.waitSnapshotStored(ctx, sn2); err != nil {
		return nil, err
	}
	row.SecondStoredB = sn2.StoredBytes
	defer a.c.Snapshots.Delete(context.WithoutCancel(ctx), sn.ID)
	defer a.c.Snapshots.Delete(context.WithoutCancel(ctx), sn2.ID)

	start = time.Now()
	from, err := a.c.Sandboxes.CreateStream(ctx, api.CreateSandboxRequest{Labels: labels, Snapshot: sn.ID}, steps.progress())
	if err != nil {
		return nil, err
	}
	made = append(made, from)
	if _, err := from.Run(ctx, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
		return nil, err
	}
	row.StartMS = ms(time.Since(start))
	row.Breakdowns = append(row.Breakdowns, breakdown{Op: fmt.Sprintf("start from snapshot %d MB, to first exec", mb), TotalMS: row.StartMS, Steps: steps.take()})

	start = time.Now()
	res, err := src.ForkStream(ctx, api.ForkRequest{Labels: labels}, steps.progress())
	if err != nil {
		return nil, err
	}
	for i, c := range res.Copies {
		if c == nil {
			return nil, res.Errors[i]
		}
		made = append(made, c)
	}
	if _, err := res.Copies[0].Run(ctx, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
		return nil, err
	}
	row.ForkMS = ms(time.Since(start))
	row.PausedMS = res.PausedMS
	row.Breakdowns = append(row.Breakdowns, breakdown{Op: fmt.Sprintf("fork %d MB, to first exec (capture only)", mb), TotalMS: row.ForkMS, Steps: steps.take()})

	if fanout > 0 {
		start = time.Now()
		res, err = src.Fork(ctx, api.ForkRequest{Labels: labels, Count: fanout})
		if err != nil {
			return nil, err
		}
		for i, c := range res.Copies {
			if c == nil {
				return nil, res.Errors[i]
			}
			made = append(made, c)
		}
		row.Fork8MS = ms(time.Since(start))
	}
	fmt.Fprintf(a.stderr, "%d MB: snapshot %.0f ms (in the blob store after %.0f ms), start %.0f ms, fork %.0f ms (paused %d), %d-way fork %.0f ms\n",
		mb, row.SnapshotMS, row.StoredAfterMS, row.StartMS, row.ForkMS, row.PausedMS, fanout, row.Fork8MS)
	return row, nil
}

// waitSnapshotStored waits, up to an hour, until snapshot sn's memory
// image is in the blob store, and returns the snapshot then.
func (a *app) waitSnapshotStored(ctx context.Context, sn *api.Snapshot) (*api.Snapshot, error) {
	for deadline := time.Now().Add(time.Hour); sn.StoreTime == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("snapshot %s not in the blob store after an hour", sn.ID)
		}
		var err error
		if sn, err = a.c.Snapshots.Get(ctx, sn.ID); err != nil {
			return nil, err
		}
	}
	return sn, nil
}

// fillMemory starts a process in sb that holds mb MB of touched,
// incompressible memory, and waits until it does.
func (a *app) fillMemory(ctx context.Context, sb *client.Sandbox, mb int) error {
	if err := sb.WriteFile(ctx, "/workspace/mem.py", strings.NewReader(memoryScript), 0o644); err != nil {
		return err
	}
	if _, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"python3", "/workspace/mem.py", strconv.Itoa(mb)}}); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "%d MB: filling memory...\n", mb)
	for deadline := time.Now().Add(10 * time.Minute); ; {
		if res, err := sb.Exec(ctx, "test -f /tmp/ready"); err == nil && res.ExitCode == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the memory filler did not finish")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
