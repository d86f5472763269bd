package engine

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// btrfsLayers mounts a fresh loop btrfs at dir/vol (unmounted at the end,
// after the engines of the test) and returns unmounted btrfs layers on it:
// the engine's unit tier with snapshot checkpoints. It needs root and
// mkfs.btrfs: without them it skips, or fails with CI=true.
func btrfsLayers(t *testing.T, dir string) *disk.Layers {
	t.Helper()
	var why string
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		why = "mkfs.btrfs missing"
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	vol := filepath.Join(dir, "vol")
	if !isMounted(vol) {
		img := filepath.Join(dir, "vol.img")
		if err := os.MkdirAll(vol, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 1<<30); err != nil {
			f, cerr := os.Create(img)
			if cerr != nil {
				t.Fatal(cerr)
			}
			f.Close()
			if err := os.Truncate(img, 1<<30); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := exec.Command("mkfs.btrfs", "-q", img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.btrfs: %v: %s", err, out)
		}
		if out, err := exec.Command("mount", "-o", "loop", img, vol).CombinedOutput(); err != nil {
			t.Fatalf("mount: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = unix.Unmount(vol, unix.MNT_DETACH) })
	}
	l, err := disk.NewUnmountedBtrfsLayers(filepath.Join(vol, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func isMounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// startCowEngine starts an engine of the fake tier on btrfs layers in dir
// (again on the same dir: a restarted sbxd).
func startCowEngine(t *testing.T, dir string, cfg Config) *fakeEnv {
	t.Helper()
	return startFakeEngineOn(t, dir, cfg, btrfsLayers(t, dir))
}

// snapshotsOf lists the checkpoint snapshots sandbox id has.
func snapshotsOf(t *testing.T, f *fakeEnv, id string) []int {
	t.Helper()
	seqs, err := f.e.layers.CheckpointSnapshots(id)
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// TestFakeCowCheckpointRestore: on btrfs a checkpoint is a snapshot,
// listed at once and stored in the background; a restore swaps it in:
// files back as they were, later ones gone, nothing left over; the
// sandbox was never paused for it.
func TestFakeCowCheckpointRestore(t *testing.T) {
	t.Parallel()
	dir := newFakeDataDir(t)
	f := startCowEngine(t, dir, Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	if kind, _, _, _ := f.e.DiskLayers(); kind != disk.LayersBtrfs || f.e.CheckpointMechanism() != disk.MechanismSnapshot {
		t.Fatalf("layers %q, checkpoints %q", kind, f.e.CheckpointMechanism())
	}
	f.writeFile(t, "a", "/work/a.txt", "first")
	cp, err := f.e.Checkpoint(ctx, "a", "one", nil)
	if err != nil {
		t.Fatalf("checkpoint: %v\nlog:\n%s", err, f.logs.String())
	}
	if !slices.Contains(snapshotsOf(t, f, sb.ID), cp.Seq) {
		t.Fatal("the checkpoint has no snapshot")
	}
	// A snapshot, not a capture (which pauses the sandbox for its end).
	if logs := f.logs.String(); !strings.Contains(logs, "mechanism="+disk.MechanismSnapshot) || strings.Contains(logs, "frozen_ms") {
		t.Fatalf("the checkpoint was not a snapshot:\n%s", logs)
	}
	f.writeFile(t, "a", "/work/a.txt", "second")
	f.writeFile(t, "a", "/work/b.txt", "later")
	// The background store records the manifest and its time.
	deadline := time.Now().Add(hangDeadline)
	for {
		got, err := f.e.GetCheckpoint(ctx, "a", CheckpointID(cp.Seq), false)
		if err != nil {
			t.Fatal(err)
		}
		if !got.StoreTime.IsZero() {
			if len(got.Manifest) == 0 || got.Files == 0 || got.SizeBytes != int64(len("first")) {
				t.Fatalf("stored checkpoint: %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint was not stored in the background\nlog:\n%s", f.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := f.e.Restore(ctx, "a", CheckpointID(cp.Seq), nil)
	if err != nil {
		t.Fatalf("restore: %v\nlog:\n%s", err, f.logs.String())
	}
	if got.State != api.StateStopped || got.DiskSource != CheckpointID(cp.Seq) {
		t.Fatalf("after restore: state %s, disk source %q", got.State, got.DiskSource)
	}
	if !strings.Contains(f.logs.String(), `from=snapshot`) {
		t.Fatal("the restore did not swap in the snapshot")
	}
	if s := f.readFile(t, "a", "/work/a.txt"); s != "first" {
		t.Fatalf("a.txt after restore: %q, want first", s)
	}
	if out, code := f.run(t, "a", "cat", "work/b.txt"); code == 0 {
		t.Fatalf("b.txt, made after the checkpoint, is still there: %q", out)
	}
	if ops, err := f.st.ListOps(ctx, ""); err != nil || len(ops) != 0 {
		t.Fatalf("journal after a restore: %v %v, want empty", ops, err)
	}
	if ids, _ := f.e.layers.IDs(); !slices.Equal(ids, []string{sb.ID}) {
		t.Fatalf("layers after the restore: %v", ids)
	}
	// The restored disk takes checkpoints again, and a diff of a
	// checkpoint not stored yet stores it first.
	f.writeFile(t, "a", "/work/c.txt", "third")
	cp2, err := f.e.Checkpoint(ctx, "a", "two", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.e.Diff(ctx, "a", DiffOptions{To: CheckpointID(cp2.Seq), From: CheckpointID(cp.Seq)})
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	if len(d.Added) != 1 || d.Added[0].Path != "/work/c.txt" || len(d.Modified)+len(d.Deleted) != 0 {
		t.Fatalf("diff v1..v2: %+v", d)
	}
	// A blob collection with checkpoints in any state keeps them whole.
	if err := f.e.GC(ctx); err != nil {
		t.Fatalf("gc: %v", err)
	}
	if c, err := f.e.GetCheckpoint(ctx, "a", CheckpointID(cp.Seq), true); err != nil || c.Health != api.HealthOK {
		t.Fatalf("verify after gc: %+v %v", c, err)
	}
	// Delete drops the snapshots with the sandbox.
	if err := f.e.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if s := snapshotsOf(t, f, sb.ID); len(s) != 0 {
		t.Fatalf("snapshots after delete: %v", s)
	}
}

// TestFakeCowSnapshotsAreBounded: stored checkpoints keep their snapshot
// only for the newest few (and v0, the fresh disk); an older one restores
// from the blob store, and a restore from a snapshot leaves the layer a
// capture cache (the next store reads only what changed).
func TestFakeCowSnapshotsAreBounded(t *testing.T) {
	t.Parallel()
	f := startCowEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/base", strings.Repeat("b", 1<<20))
	time.Sleep(50 * time.Millisecond) // base is not racy for the captures
	n := keepSnapshots + 2
	for i := 1; i <= n; i++ {
		f.writeFile(t, "a", "/f", strings.Repeat("x", i))
		if _, err := f.e.Checkpoint(ctx, "a", "", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.e.storePending(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := snapshotsOf(t, f, sb.ID); len(got) != keepSnapshots+1 || got[0] != 0 || got[1] != n-keepSnapshots+1 {
		t.Fatalf("snapshots kept: %v, want v0's and the %d newest of 1..%d", got, keepSnapshots, n)
	}
	if _, err := f.e.Restore(ctx, "a", "v1", nil); err != nil {
		t.Fatalf("restore of a checkpoint without its snapshot: %v\nlog:\n%s", err, f.logs.String())
	}
	if s := f.readFile(t, "a", "/f"); s != "x" {
		t.Fatalf("f after restoring v1 from the blob store: %q", s)
	}
	last := CheckpointID(n)
	if _, err := f.e.Restore(ctx, "a", last, nil); err != nil {
		t.Fatal(err)
	}
	f.writeFile(t, "a", "/g", "new")
	// The log is read from before the checkpoint: the background loop,
	// kicked by it, may store it before storePending runs.
	off := len(f.logs.String())
	cp, err := f.e.Checkpoint(ctx, "a", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.e.storePending(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	logs := f.logs.String()[off:]
	i := strings.Index(logs, "read_bytes=")
	if !strings.Contains(logs, "id="+CheckpointID(cp.Seq)) || i < 0 {
		t.Fatalf("no store of %s:\n%s", CheckpointID(cp.Seq), logs)
	}
	if n, _ := strconv.Atoi(strings.Fields(logs[i+len("read_bytes="):])[0]); n >= 1<<20 {
		t.Fatalf("the store after a snapshot restore read the unchanged 1 MiB again:\n%s", logs)
	}
}

// TestFakeCowRecover: after a crash of sbxd, a snapshot never recorded is
// dropped, a recorded one not yet stored is stored, and a record whose
// snapshot is gone is damaged (it cannot be restored): everything listed
// restores.
func TestFakeCowRecover(t *testing.T) {
	t.Parallel()
	dir := newFakeDataDir(t)
	f := startCowEngine(t, dir, Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/f", "one")
	f.e.Close()
	// The engine is gone: take checkpoints as a crash would leave them.
	if err := f.e.layers.SnapshotCheckpoint(sb.ID, 1); err != nil { // recorded, not stored
		t.Fatal(err)
	}
	if err := f.st.AddCheckpoint(ctx, &store.Checkpoint{SandboxID: sb.ID, Seq: 1, Health: api.HealthOK, CreateTime: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.AddCheckpoint(ctx, &store.Checkpoint{SandboxID: sb.ID, Seq: 2, Health: api.HealthOK, CreateTime: time.Now().UTC()}); err != nil { // no snapshot
		t.Fatal(err)
	}
	if err := f.e.layers.SnapshotCheckpoint(sb.ID, 3); err != nil { // never recorded
		t.Fatal(err)
	}

	g := startCowEngine(t, dir, Config{})
	if got := snapshotsOf(t, g, sb.ID); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("snapshots after restart: %v, want [0 1] (v0 and the recorded one)", got)
	}
	if err := g.e.storePending(ctx, sb.ID); err != nil { // v2, damaged, is skipped
		t.Fatal(err)
	}
	if c, err := g.e.GetCheckpoint(ctx, "a", "v1", true); err != nil || c.StoreTime.IsZero() || c.Health != api.HealthOK {
		t.Fatalf("v1 after restart: %+v %v, want stored and ok", c, err)
	}
	if c, err := g.e.GetCheckpoint(ctx, "a", "v2", false); err != nil || c.Health != api.HealthDamaged {
		t.Fatalf("v2 (no snapshot, never stored) after restart: %+v %v, want damaged", c, err)
	}
	if _, err := g.e.Restore(ctx, "a", "v2", nil); !errors.Is(err, errdefs.ErrRestoreFailed) {
		t.Fatalf("restore of v2: %v, want restore_failed", err)
	}
	if s := g.readFile(t, "a", "/f"); s != "one" {
		t.Fatalf("f after a failed restore: %q", s)
	}
	g.writeFile(t, "a", "/f", "two")
	if _, err := g.e.Restore(ctx, "a", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if s := g.readFile(t, "a", "/f"); s != "one" {
		t.Fatalf("f after restoring v1: %q", s)
	}
}

// TestFakeCowUnstorableDoesNotBlockSuspend: a checkpoint that can never
// be stored in the blob store (its data past the capture limit, or its
// snapshot gone after a crash) is listed as damaged, a verify of it
// answers capture_limit naming the limit, and it does not keep the
// sandbox from being suspended (review finding 1: every suspend failed).
func TestFakeCowUnstorableDoesNotBlockSuspend(t *testing.T) {
	t.Parallel()
	dir := newFakeDataDir(t)
	f := startCowEngine(t, dir, Config{CaptureMaxBytes: 1 << 20})
	ctx := context.Background()
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/big", strings.Repeat("b", 2<<20))
	cp, err := f.e.Checkpoint(ctx, "a", "", nil)
	if err != nil {
		t.Fatalf("checkpoint (a snapshot, taken whatever the size): %v", err)
	}
	f.waitLog(t, "checkpoint damaged: it can never be stored")
	if c, err := f.e.GetCheckpoint(ctx, "a", CheckpointID(cp.Seq), false); err != nil || c.Health != api.HealthDamaged || !c.StoreTime.IsZero() {
		t.Fatalf("checkpoint past the capture limit: %+v %v, want damaged and not stored", c, err)
	}
	_, err = f.e.GetCheckpoint(ctx, "a", CheckpointID(cp.Seq), true)
	if !errors.Is(err, errdefs.ErrCaptureLimit) || !strings.Contains(err.Error(), strconv.Itoa(1<<20)) {
		t.Fatalf("verify of it: %v, want capture_limit naming the limit", err)
	}
	// The guest removes what passed the limit: the live disk can be
	// captured again, the checkpoint still cannot.
	f.writeFile(t, "a", "/big", "small now")
	// And a record whose snapshot is gone (a power loss before the
	// snapshot's transaction committed).
	f.e.Close()
	if err := f.st.AddCheckpoint(ctx, &store.Checkpoint{SandboxID: sb.ID, Seq: cp.Seq + 1, Health: api.HealthOK, CreateTime: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	g := startCowEngine(t, dir, Config{CaptureMaxBytes: 1 << 20})
	// The fake runtime has no memory snapshots: a suspend that got past
	// the store of the pending checkpoints and the disk fails there.
	if _, err := g.e.Suspend(ctx, "a", api.SuspendRequest{}, nil); err != nil && !strings.Contains(err.Error(), "checkpoint the memory") {
		t.Fatalf("suspend with checkpoints that can never be stored: %v\nlog:\n%s", err, g.logs.String())
	}
	if err := g.e.storePending(ctx, sb.ID); err != nil {
		t.Fatalf("store of the pending checkpoints (a suspend's first step): %v", err)
	}
	cps, err := g.e.ListCheckpoints(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if c.Seq > 0 && c.Health != api.HealthDamaged {
			t.Errorf("%s after the suspend: %s, want damaged", CheckpointID(c.Seq), c.Health)
		}
	}
}

// TestFakeCowStoresPerSandbox: a store of one sandbox's checkpoint that
// runs long (held at its fault point) keeps no other sandbox waiting: its
// checkpoints are stored, verified and it suspends (review finding 2: one
// lock for every store). A delete of the slow sandbox cancels its store
// and answers; a verify waiting for that store learns of the delete
// (conflict).
func TestFakeCowStoresPerSandbox(t *testing.T) {
	t.Parallel()
	dir := newFakeDataDir(t)
	f := startCowEngine(t, dir, Config{})
	ctx := context.Background()
	slow := f.create(t, "slow")
	f.create(t, "other")
	f.e.Close()
	g := startCowEngine(t, dir, Config{Faults: map[string]time.Duration{"capture:" + slow.ID: time.Hour}})
	g.writeFile(t, "slow", "/f", "slow")
	g.writeFile(t, "other", "/f", "other")
	scp, err := g.e.Checkpoint(ctx, "slow", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "fault point reached")
	ocp, err := g.e.Checkpoint(ctx, "other", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := g.e.GetCheckpoint(ctx, "other", CheckpointID(ocp.Seq), true); err != nil || c.StoreTime.IsZero() || c.Health != api.HealthOK {
		t.Fatalf("verify of another sandbox's checkpoint while a store runs long: %+v %v", c, err)
	}
	if _, err := g.e.Suspend(ctx, "other", api.SuspendRequest{}, nil); err != nil && !strings.Contains(err.Error(), "checkpoint the memory") {
		t.Fatalf("suspend of another sandbox while a store runs long: %v", err) // the fake runtime fails at the memory
	}
	verified := make(chan error, 1)
	go func() {
		_, err := g.e.GetCheckpoint(ctx, "slow", CheckpointID(scp.Seq), true)
		verified <- err
	}()
	// The verify waits for the store's turn (two users of slow's stores:
	// the held store and the verify).
	for waiting := 0; waiting < 2; {
		g.e.ingest.mu.Lock()
		if s := g.e.ingest.sandboxes[slow.ID]; s != nil {
			waiting = len(s.cancels)
		}
		g.e.ingest.mu.Unlock()
		goruntime.Gosched()
	}
	if err := g.e.Delete(ctx, "slow"); err != nil {
		t.Fatalf("delete of the sandbox whose store runs long: %v", err)
	}
	if err := <-verified; !errdefs.IsConflict(err) {
		t.Fatalf("verify waiting for the store of a deleted sandbox: %v, want conflict", err)
	}
	if !strings.Contains(g.logs.String(), "checkpoint store cancelled") {
		t.Fatalf("the store of the deleted sandbox's checkpoint was not cancelled:\n%s", g.logs.String())
	}
}

// TestFakeCowRecoverRestore: a crash of sbxd in a snapshot restore leaves
// the old disk before the swap and the checkpoint's after it, and no
// subvolume of the restore behind.
func TestFakeCowRecoverRestore(t *testing.T) {
	t.Parallel()
	for _, point := range []string{disk.RestoreBuilt, disk.RestoreSwapped} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			dir := newFakeDataDir(t)
			f := startCowEngine(t, dir, Config{Faults: map[string]time.Duration{"restore:" + point: time.Hour}})
			ctx := context.Background()
			sb := f.create(t, "a")
			f.writeFile(t, "a", "/f", "checkpointed")
			cp, err := f.e.Checkpoint(ctx, "a", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			f.writeFile(t, "a", "/f", "live")
			go func() { _, _ = f.e.Restore(ctx, "a", CheckpointID(cp.Seq), nil) }()
			f.waitLog(t, "fault point reached")
			f.e.Close()

			g := startCowEngine(t, dir, Config{})
			want, source := "live", ""
			if point == disk.RestoreSwapped {
				want, source = "checkpointed", CheckpointID(cp.Seq)
			}
			got, err := g.e.Get(ctx, "a")
			if err != nil || got.State != api.StateStopped || got.DiskSource != source {
				t.Fatalf("after restart: %+v %v, want stopped on %q", got, err, source)
			}
			if s := g.readFile(t, "a", "/f"); s != want {
				t.Fatalf("f after recovery: %q, want %q", s, want)
			}
			if ops, _ := g.st.ListOps(ctx, ""); len(ops) != 0 {
				t.Fatalf("journal after recovery: %d entries", len(ops))
			}
			des, err := os.ReadDir(g.e.layers.Dir())
			if err != nil {
				t.Fatal(err)
			}
			for _, de := range des {
				if de.Name() != sb.ID {
					t.Fatalf("left beside the layer: %s", de.Name())
				}
			}
		})
	}
}

// TestFakeCowPoolClaimV0: a sandbox claimed from the warm pool records v0
// without a snapshot (the claim is the fast create path), and a restore
// to v0 gives the fresh disk back from the blob store; a cold create
// keeps v0's snapshot.
func TestFakeCowPoolClaimV0(t *testing.T) {
	t.Parallel()
	f := startCowEngine(t, newFakeDataDir(t), Config{PoolSize: 1})
	ctx := context.Background()
	for deadline := time.Now().Add(hangDeadline); f.e.WarmSandboxes() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled; log:\n%s", f.logs.String())
		}
	}
	sb := f.create(t, "claimed")
	if got := snapshotsOf(t, f, sb.ID); len(got) != 0 {
		t.Fatalf("snapshots of a claimed sandbox: %v, want none", got)
	}
	f.writeFile(t, "claimed", "/f", "later")
	if _, err := f.e.Restore(ctx, "claimed", "v0", nil); err != nil {
		t.Fatalf("restore of v0 without its snapshot: %v", err)
	}
	if _, _, _, err := f.e.OpenFile(ctx, "claimed", "/f", 1<<20); err == nil {
		t.Fatal("/f is still there after restoring v0")
	}
	// Another disk size is another shape: not from the pool.
	cold, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "cold", DiskMB: 333}})
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshotsOf(t, f, cold.ID); !slices.Equal(got, []int{0}) {
		t.Fatalf("snapshots of a cold-created sandbox: %v, want v0's", got)
	}
}
