package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// layerScript writes the layer of a checkpoint bench case with python3 in
// the sandbox: random (incompressible) bytes, so stored bytes measure what
// deduplication saves, not compression.
const layerScript = `
import os, sys
mode, total = sys.argv[1], int(sys.argv[2])
os.makedirs("/workspace/data", exist_ok=True)
if mode == "small":
    size = 64 << 10
    for i in range(total // size):
        with open("/workspace/data/f%05d" % i, "wb") as f:
            f.write(os.urandom(size))
else:
    with open("/workspace/data/big", "wb") as f:
        for i in range(total // (8 << 20)):
            f.write(os.urandom(8 << 20))
`

// changeScript changes 10 MB of the layer: 160 of the 64 KiB files, or a
// 10 MB range in the middle of the big file.
const changeScript = `
import os, sys
mode, change = sys.argv[1], int(sys.argv[2])
if mode == "small":
    size = 64 << 10
    for i in range(change // size):
        with open("/workspace/data/f%05d" % (i * 7), "r+b") as f:
            f.write(os.urandom(size))
else:
    with open("/workspace/data/big", "r+b") as f:
        f.seek(os.path.getsize("/workspace/data/big") // 2)
        f.write(os.urandom(change))
`

func (a *app) benchCheckpointCmd() *cobra.Command {
	var sizeMB, changeMB int
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Measure disk checkpoints and restores and print a table",
		Long: "Measure checkpoint time and stored bytes, and restore time, for: a fresh sandbox;\n" +
			"(with btrfs layers, STORED_AFTER_MS is when the background store of the snapshot ended);\n" +
			"SIZE MB written as 64 KiB files; SIZE MB in one file; then CHANGE MB changed in each.\n" +
			"Needs the default image (python3). It creates and deletes sandboxes labelled sbx-bench=1.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if err := checkLayerSizes(sizeMB, changeMB); err != nil {
				return err
			}
			rows, err := a.benchCheckpoints(cmd.Context(), int64(sizeMB)<<20, int64(changeMB)<<20)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(rows)
			}
			var out [][]string
			for _, r := range rows {
				out = append(out, []string{r.Case, fmt.Sprintf("%.0f", r.CheckpointMS), fmt.Sprintf("%.0f", r.StoredAfterMS), humanBytes(r.Changed),
					humanBytes(r.Added), fmt.Sprintf("%.2f", r.Ratio), fmt.Sprintf("%.0f", r.RestoreMS)})
			}
			a.table("CASE\tCHECKPOINT_MS\tSTORED_AFTER_MS\tCHANGED\tSTORED\tSTORED/CHANGED\tRESTORE_MS", out)
			fmt.Fprintln(a.stdout, "targets: stored ≤ 1.1 × changed; checkpoint after a 10 MB change ≤ 30 ms; restore ≤ 100 ms")
			var bs []breakdown
			for _, r := range rows {
				bs = append(bs, r.Breakdowns...)
			}
			if len(bs) > 0 {
				a.printBreakdowns(bs)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&sizeMB, "size", 1024, "layer size in MB")
	cmd.Flags().IntVar(&changeMB, "change", 10, "change in MB")
	a.addOutput(cmd)
	return cmd
}

// checkLayerSizes checks the bench's --size and --change (MB) before any
// work: the layer is written in 8 MB pieces, and the change rewrites every
// seventh 64 KiB file, so it needs seven times its size in files.
func checkLayerSizes(size, change int) error {
	if size < 8 {
		return fmt.Errorf("--size %d: want at least 8 (MB)", size)
	}
	if change < 1 || change*7 > size {
		return fmt.Errorf("--change %d: want 1 to %d (MB): a seventh of --size", change, size/7)
	}
	return nil
}

// checkpointRow is one line of the checkpoint bench table.
type checkpointRow struct {
	Case         string  `json:"case"`
	CheckpointMS float64 `json:"checkpoint_ms"`
	// StoredAfterMS is how long after the checkpoint its bytes were in
	// the blob store when it was stored in the background (a btrfs
	// snapshot checkpoint); 0 when the call stored them itself.
	StoredAfterMS float64 `json:"stored_after_ms"`
	Changed       int64   `json:"changed_bytes"`
	Added         int64   `json:"stored_bytes"`
	Ratio         float64 `json:"stored_per_changed"`
	RestoreMS     float64 `json:"restore_ms"`
	// Breakdowns are where the checkpoint's and the restore's time went,
	// when sbxd reported their steps (btrfs layers).
	Breakdowns []breakdown `json:"breakdowns,omitempty"`
}

func (a *app) benchCheckpoints(ctx context.Context, size, change int64) ([]checkpointRow, error) {
	var rows []checkpointRow
	// measure takes a checkpoint, then restores the previous one and
	// (to leave the disk as it was) this one.
	var rec stepRecorder
	measure := func(sb *client.Sandbox, label string, changed int64, prev string) (string, error) {
		rec.take()
		start := time.Now()
		cp, err := sb.CheckpointStream(ctx, label, rec.progress())
		if err != nil {
			return "", err
		}
		cpMS := ms(time.Since(start))
		var bs []breakdown
		if steps := rec.take(); len(steps) > 0 {
			bs = append(bs, breakdown{Op: "checkpoint, " + strings.TrimSpace(label), TotalMS: cpMS, Steps: steps})
		}
		// A btrfs snapshot checkpoint answers before its bytes are in the
		// blob store: wait for them (what it stored, and when).
		storeMS := 0.0
		for deadline := time.Now().Add(time.Hour); cp.StoreTime == nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				return "", fmt.Errorf("checkpoint %s not in the blob store after an hour", cp.ID)
			}
			if cp, err = sb.GetCheckpoint(ctx, cp.ID, false); err != nil {
				return "", err
			}
			if cp.StoreTime != nil {
				storeMS = ms(cp.StoreTime.Sub(cp.CreateTime))
			}
		}
		start = time.Now()
		if err := sb.Restore(ctx, prev, rec.progress()); err != nil {
			return "", err
		}
		rsMS := ms(time.Since(start))
		if steps := rec.take(); len(steps) > 0 {
			bs = append(bs, breakdown{Op: "restore to " + prev + ", " + strings.TrimSpace(label), TotalMS: rsMS, Steps: steps})
		}
		if err := sb.Restore(ctx, cp.ID, nil); err != nil {
			return "", err
		}
		ratio := 0.0
		if changed > 0 {
			ratio = float64(cp.AddedBytes) / float64(changed)
		}
		rows = append(rows, checkpointRow{Case: label, CheckpointMS: cpMS, StoredAfterMS: storeMS, Changed: changed, Added: cp.AddedBytes,
			Ratio: ratio, RestoreMS: rsMS, Breakdowns: bs})
		fmt.Fprintf(a.stderr, "%s: checkpoint %.0f ms (in the blob store after %.0f ms), restore %.0f ms\n", label, cpMS, storeMS, rsMS)
		return cp.ID, nil
	}
	run := func(sb *client.Sandbox, script string, args ...string) error {
		res, err := sb.Run(ctx, api.ExecRequest{Cmd: append([]string{"python3", "-c", script}, args...), TimeoutMS: 3_600_000})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("python3 exited %d: %s", res.ExitCode, res.Stderr)
		}
		return nil
	}
	fresh, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"sbx-bench": "1"}, MemoryMB: 2048})
	if err != nil {
		return nil, err
	}
	defer fresh.Delete(context.WithoutCancel(ctx))
	if _, err := measure(fresh, "fresh sandbox", 0, "v0"); err != nil {
		return nil, err
	}
	for _, mode := range []string{"small", "big"} {
		sb, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"sbx-bench": "1"}, MemoryMB: 2048})
		if err != nil {
			return nil, err
		}
		defer sb.Delete(context.WithoutCancel(ctx))
		what := fmt.Sprintf("%d MB in 64 KiB files", size>>20)
		if mode == "big" {
			what = fmt.Sprintf("%d MB in one file", size>>20)
		}
		fmt.Fprintf(a.stderr, "writing %s...\n", what)
		if err := run(sb, layerScript, mode, fmt.Sprint(size)); err != nil {
			return nil, err
		}
		id, err := measure(sb, what, size, "v0")
		if err != nil {
			return nil, err
		}
		if err := run(sb, changeScript, mode, fmt.Sprint(change)); err != nil {
			return nil, err
		}
		if _, err := measure(sb, fmt.Sprintf("  then %d MB changed", change>>20), change, id); err != nil {
			return nil, err
		}
	}
	return rows, nil
}
