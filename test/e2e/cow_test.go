package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// snapshotCheckpoints reports whether d takes checkpoints as btrfs
// snapshots (GET /v1/health).
func snapshotCheckpoints(t *testing.T, d *harness) bool {
	t.Helper()
	hl, err := d.c.Health(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return hl.Checkpoints == "btrfs-snapshot"
}

// checkpointSnapshotDir is where d keeps the checkpoint snapshots of
// sandbox id: beside the layers dir.
func checkpointSnapshotDir(d *harness, id string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(layerDir(d, id))), "layer-checkpoints", id)
}

// checkpointSnapshots lists the seqs of sandbox id's checkpoint snapshots.
func checkpointSnapshots(t *testing.T, d *harness, id string) []string {
	t.Helper()
	des, err := os.ReadDir(checkpointSnapshotDir(d, id))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	sort.Strings(out)
	return out
}

// dropCheckpointSnapshot deletes the btrfs snapshot of checkpoint cpID
// ("v3") of sandbox id, if it has one, as sbxd does once a checkpoint is
// stored and no longer among the newest: its restore then reads the blob
// store.
func dropCheckpointSnapshot(t *testing.T, d *harness, id, cpID string) {
	t.Helper()
	p := filepath.Join(checkpointSnapshotDir(d, id), strings.TrimPrefix(cpID, "v"))
	if _, err := os.Lstat(p); err != nil {
		return
	}
	if out, err := exec.Command("btrfs", "subvolume", "delete", p).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume delete %s: %v: %s", p, err, out)
	}
}

// waitStored waits until checkpoint id of sb is in the blob store.
func waitStored(t *testing.T, sb *client.Sandbox, id string) *api.Checkpoint {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cp, err := sb.GetCheckpoint(ctxT(t), id, false)
		if err != nil {
			t.Fatal(err)
		}
		if cp.StoreTime != nil {
			return cp
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint %s of %s not stored after 60 s", id, sb.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCowCheckpoints: on btrfs layers a checkpoint is a snapshot: listed
// at once, stored in the background (store_time, sizes), bounded in
// number, restored by a swap; a file being written while it is taken is
// whole in it or absent; delete leaves no snapshot behind.
func TestCowCheckpoints(t *testing.T) {
	if !snapshotCheckpoints(t, h) {
		t.Skip("checkpoints are captures here (no btrfs layers)")
	}
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "head -c 5000000 /dev/urandom > /workspace/data; echo one > /workspace/f")
	sum := mustSh(t, sb, "sha256sum /workspace/data")
	cp, err := sb.Checkpoint(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	if cp.ID != "v1" || cp.Health != api.HealthOK {
		t.Fatalf("checkpoint: %+v", cp)
	}
	stored := waitStored(t, sb, "v1")
	if stored.SizeBytes < 5000000 || stored.Files < 2 || stored.AddedBytes < 4000000 || stored.StoreTime.Before(stored.CreateTime) {
		t.Fatalf("stored checkpoint: %+v", stored)
	}
	// The next one stores only what changed. Its progress gives its
	// steps (sbx bench prints them): the btrfs snapshot, then the record.
	mustSh(t, sb, "echo two > /workspace/f")
	var lines []string
	progress := func(msg string, _ time.Time) { lines = append(lines, msg) }
	if _, err := sb.CheckpointStream(ctx, "two", progress); err != nil {
		t.Fatal(err)
	}
	if !hasSteps(lines, api.DiskStepsPrefix, "btrfs snapshot", "record") {
		t.Fatalf("checkpoint progress without its steps: %q", lines)
	}
	if v2 := waitStored(t, sb, "v2"); v2.AddedBytes > 1000000 {
		t.Fatalf("v2 added %d bytes for a 4-byte change", v2.AddedBytes)
	}
	// A writer rewrites a file by rename while checkpoints are taken:
	// every checkpoint has one whole version of it.
	mustSh(t, sb, `(i=0; while true; do i=$((i+1)); head -c 200000 /dev/zero | tr '\000' x > /workspace/w.tmp; echo " $i" >> /workspace/w.tmp; mv /workspace/w.tmp /workspace/w; done) >/dev/null 2>&1 &`)
	deadline := time.Now().Add(30 * time.Second)
	for sh(t, sb, "test -e /workspace/w").ExitCode != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer wrote nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ids []string
	for i := 0; i < 6; i++ {
		c, err := sb.Checkpoint(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	if out := mustSh(t, sb, "echo alive"); out != "alive\n" {
		t.Fatalf("after checkpoints: %q", out)
	}
	for _, id := range ids {
		waitStored(t, sb, id)
	}
	// Stored checkpoints keep a snapshot only for the newest few (and v0).
	if seqs := checkpointSnapshots(t, h, sb.ID); len(seqs) > 5 || seqs[0] != "0" {
		t.Fatalf("snapshots kept: %v", seqs)
	}
	for i, id := range []string{ids[len(ids)-1], ids[0]} { // from its snapshot, from the blob store
		lines = nil
		if err := sb.Restore(ctx, id, progress); err != nil {
			t.Fatal(err)
		}
		if i == 0 && !hasSteps(lines, api.DiskStepsPrefix, "stop", "btrfs snapshot", "swap", "record") {
			t.Fatalf("restore from a snapshot: progress without its steps: %q", lines)
		}
		out := mustSh(t, sb, "wc -c < /workspace/w; tail -c 20 /workspace/w | tr -d x; cat /workspace/f")
		lines := strings.Fields(out)
		if n, _ := strconv.Atoi(lines[0]); n < 200002 || lines[len(lines)-1] != "two" {
			t.Fatalf("restore of %s: a torn or missing file: %q", id, out)
		}
	}
	if err := sb.Restore(ctx, "v1", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "sha256sum /workspace/data; cat /workspace/f"); got != sum+"one\n" {
		t.Fatalf("after restoring v1: %q", got)
	}
	id := sb.ID
	if err := sb.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if seqs := checkpointSnapshots(t, h, id); len(seqs) != 0 {
		t.Fatalf("snapshots of a deleted sandbox: %v", seqs)
	}
}

// hasSteps reports whether one of lines begins with prefix and names every
// step, each followed by a number of ms.
func hasSteps(lines []string, prefix string, steps ...string) bool {
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, prefix)
		if !ok {
			continue
		}
		for _, s := range steps {
			i := strings.Index(rest, " "+s+" ")
			if i < 0 {
				return false
			}
			f := strings.FieldsFunc(rest[i+len(s)+2:], func(r rune) bool { return r == ',' || r == ' ' })
			if len(f) == 0 {
				return false
			}
			if _, err := strconv.ParseFloat(f[0], 64); err != nil {
				return false
			}
		}
		return true
	}
	return false
}
