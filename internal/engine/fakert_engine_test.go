package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/store"
)

// waitLog waits (hangDeadline at most) for the engine's log to contain s.
func (f *fakeEnv) waitLog(t *testing.T, s string) { t.Helper(); f.waitLogN(t, s, 1) }

// waitLogN waits (hangDeadline at most) for the engine's log to contain s
// n times.
func (f *fakeEnv) waitLogN(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(hangDeadline)
	for strings.Count(f.logs.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the log never says %q:\n%s", s, f.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFakeCreateExecDelete: a created sandbox runs a command and answers
// its output; a delete removes its record, container, network, layer and
// directory.
func TestFakeCreateExecDelete(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	sb := f.create(t, "a")
	if sb.State != api.StateRunning {
		t.Fatalf("created sandbox is %s, want running", sb.State)
	}
	out, code := f.run(t, "a", "echo", "hello")
	if out != "hello\n" || code != 0 {
		t.Fatalf("echo hello: %q exit %d", out, code)
	}
	if _, code := f.run(t, "a", "false"); code != 1 {
		t.Fatalf("false exited %d, want 1", code)
	}
	if got := f.state(t, sb.ID); got != runtime.StatusRunning {
		t.Fatalf("container is %s, want running", got)
	}
	if !f.net.has(sb.ID) {
		t.Fatal("a running sandbox has no network")
	}
	f.writeFile(t, "a", "/note.txt", "kept")
	if got := f.readFile(t, "a", "/note.txt"); got != "kept" {
		t.Fatalf("read back %q", got)
	}
	if err := f.e.Delete(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Get(context.Background(), "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want not found", err)
	}
	if got := f.state(t, sb.ID); got != runtime.StatusMissing {
		t.Fatalf("container after delete is %s, want missing", got)
	}
	if f.net.has(sb.ID) {
		t.Fatal("the network outlived the sandbox")
	}
	for _, d := range []string{f.e.sandboxDir(sb.ID), filepath.Join(f.dir, "layers", sb.ID)} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s after delete: %v, want gone", d, err)
		}
	}
	if err := f.e.Delete(context.Background(), "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v, want not found", err)
	}
}

// TestFakeConflictWhileOperationHolds: while an operation holds a sandbox
// (a checkpoint begun, not finished), other lifecycle operations answer
// conflict naming it, exec still runs, and a delete waits for the
// operation and then deletes.
func TestFakeConflictWhileOperationHolds(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	op, err := f.e.BeginCheckpoint(ctx, "a", "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Stop(ctx, "a"); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "checkpoint is in progress") {
		t.Fatalf("stop during a checkpoint: %v, want conflict naming the checkpoint", err)
	}
	if _, err := f.e.BeginCheckpoint(ctx, "a", ""); !errdefs.IsConflict(err) {
		t.Fatalf("second checkpoint: %v, want conflict", err)
	}
	if _, err := f.e.BeginRestore(ctx, "a", "v0"); !errdefs.IsConflict(err) {
		t.Fatalf("restore during a checkpoint: %v, want conflict", err)
	}
	if out, _ := f.run(t, "a", "echo", "still"); out != "still\n" {
		t.Fatalf("exec during a checkpoint: %q", out)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- f.e.Delete(ctx, "a") }()
	f.waitLog(t, "delete: waiting for the operation in progress")
	select {
	case err := <-deleted:
		t.Fatalf("the delete did not wait for the checkpoint: %v", err)
	default:
	}
	if got := f.state(t, sb.ID); got != runtime.StatusRunning {
		t.Fatalf("the sandbox is %s while the delete waits, want running", got)
	}
	op.Cancel()
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatalf("delete after the checkpoint ended: %v", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("the delete did not go on once the checkpoint ended")
	}
	if _, err := f.e.Get(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want not found", err)
	}
}

// TestFakeStateChecks: what a stopped or suspended sandbox refuses, and
// what boots a stopped one.
func TestFakeStateChecks(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/f", "1")
	stopped, err := f.e.Stop(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if stopped.State != api.StateStopped || f.state(t, sb.ID) != runtime.StatusMissing || f.net.has(sb.ID) {
		t.Fatalf("after stop: state %s, container %s, network %v", stopped.State, f.state(t, sb.ID), f.net.has(sb.ID))
	}
	if _, err := f.e.Stop(ctx, "a"); err != nil {
		t.Fatalf("stop of a stopped sandbox: %v, want no error", err)
	}
	if _, err := f.e.AttachProcess(ctx, "a", 1, 0); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "is stopped") {
		t.Fatalf("attach on a stopped sandbox: %v, want conflict (stopped)", err)
	}
	if err := f.e.SignalProcess(ctx, "a", 1, 15); !errdefs.IsConflict(err) {
		t.Fatalf("signal on a stopped sandbox: %v, want conflict", err)
	}
	if _, err := f.e.Suspend(ctx, "a", api.SuspendRequest{}, nil); !errdefs.IsConflict(err) {
		t.Fatalf("suspend of a stopped sandbox: %v, want conflict", err)
	}
	// Exec boots a stopped sandbox, on the disk it had.
	if out, _ := f.run(t, "a", "echo", "up"); out != "up\n" {
		t.Fatalf("exec on a stopped sandbox: %q", out)
	}
	if got, _ := f.e.Get(ctx, "a"); got.State != api.StateRunning {
		t.Fatalf("after exec the sandbox is %s, want running", got.State)
	}
	if got := f.readFile(t, "a", "/f"); got != "1" {
		t.Fatalf("file after reboot: %q, want 1", got)
	}

	// A suspended sandbox (its record planted: the fake cannot save a
	// process's memory) refuses what needs its disk, saying to resume it.
	// (An attach resumes it instead: TestExecAcrossSuspend, e2e.)
	if _, err := f.e.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rec, err := f.st.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.State = api.StateSuspended
	if err := f.st.UpdateSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func() error{
		"checkpoint": func() error { _, err := f.e.BeginCheckpoint(ctx, "a", ""); return err },
		"restore":    func() error { _, err := f.e.BeginRestore(ctx, "a", "v0"); return err },
		"stop":       func() error { _, err := f.e.Stop(ctx, "a"); return err },
	} {
		if err := call(); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "resume it first") {
			t.Errorf("%s of a suspended sandbox: %v, want conflict saying resume it first", what, err)
		}
	}
}

// TestFakeSuspendUnsupportedRollsBack: the fake cannot checkpoint a
// process, so a suspend fails (suspend_failed) and leaves the sandbox
// running as it was, its journal entry gone.
func TestFakeSuspendUnsupportedRollsBack(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	f.writeFile(t, "a", "/f", "1")
	if _, err := f.e.Suspend(ctx, "a", api.SuspendRequest{}, nil); !errors.Is(err, errdefs.ErrSuspendFailed) {
		t.Fatalf("suspend on the fake: %v, want suspend_failed", err)
	}
	got, err := f.e.Get(ctx, "a")
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("after a failed suspend: %v %v, want running", got, err)
	}
	if out, _ := f.run(t, "a", "cat", "f"); out != "1" {
		t.Fatalf("after a failed suspend, cat f: %q", out)
	}
	if ops, err := f.st.ListOps(ctx, ""); err != nil || len(ops) != 0 {
		t.Fatalf("journal after a failed suspend: %v %v, want empty", ops, err)
	}
}

// TestFakeCheckpointRestore: a disk checkpoint of a running sandbox, then a
// restore, brings back the files as they were, removes the ones made
// since, and leaves the sandbox stopped on the checkpoint's disk.
func TestFakeCheckpointRestore(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	f.writeFile(t, "a", "/work/a.txt", "first")
	cp, err := f.e.Checkpoint(ctx, "a", "one", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := f.run(t, "a", "echo", "alive"); out != "alive\n" {
		t.Fatalf("exec after the checkpoint (the capture pauses and resumes the sandbox): %q", out)
	}
	f.writeFile(t, "a", "/work/a.txt", "second")
	f.writeFile(t, "a", "/work/b.txt", "later")
	sb, err := f.e.Restore(ctx, "a", CheckpointID(cp.Seq), nil)
	if err != nil {
		t.Fatalf("restore: %v\nlog:\n%s", err, f.logs.String())
	}
	if sb.State != api.StateStopped || sb.DiskSource != CheckpointID(cp.Seq) {
		t.Fatalf("after restore: state %s, disk source %q", sb.State, sb.DiskSource)
	}
	if got := f.readFile(t, "a", "/work/a.txt"); got != "first" {
		t.Fatalf("a.txt after restore: %q, want first", got)
	}
	if out, code := f.run(t, "a", "cat", "work/b.txt"); code == 0 {
		t.Fatalf("b.txt, made after the checkpoint, is still there: %q", out)
	}
	if ops, err := f.st.ListOps(ctx, ""); err != nil || len(ops) != 0 {
		t.Fatalf("journal after a restore: %v %v, want empty", ops, err)
	}
}

// TestFakeRecoverRunning: sbxd goes away (the engine is dropped) while a
// sandbox runs; a new engine on the same data dir reattaches it: running,
// its agent answers, its files are there, its network is back.
func TestFakeRecoverRunning(t *testing.T) {
	t.Parallel()
	dir := newFakeDataDir(t)
	f := startFakeEngine(t, dir, Config{})
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/f", "before")
	f.e.Close()

	g := startFakeEngine(t, dir, Config{})
	got, err := g.e.Get(context.Background(), "a")
	if err != nil || got.State != api.StateRunning || got.ID != sb.ID {
		t.Fatalf("after restart: %+v %v, want the same sandbox running", got, err)
	}
	if !g.net.has(sb.ID) {
		t.Fatal("the new engine did not take over the sandbox's network")
	}
	if out, _ := g.run(t, "a", "cat", "f"); out != "before" {
		t.Fatalf("cat f after restart: %q", out)
	}
	if err := g.e.Delete(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if got := g.state(t, sb.ID); got != runtime.StatusMissing {
		t.Fatalf("container after delete is %s", got)
	}
}

// TestFakeRecoverDeadContainer: the container died while sbxd was away; the
// new engine marks the sandbox stopped (saying why), and the next exec
// boots it on its disk.
func TestFakeRecoverDeadContainer(t *testing.T) {
	t.Parallel()
	dir := newFakeDataDir(t)
	f := startFakeEngine(t, dir, Config{})
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/f", "disk")
	f.e.Close()
	if err := f.rt.Delete(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}

	g := startFakeEngine(t, dir, Config{})
	got, err := g.e.Get(context.Background(), "a")
	if err != nil || got.State != api.StateStopped || got.StateReason != "stopped while sbxd was not running" {
		t.Fatalf("after restart: %+v %v, want stopped while sbxd was not running", got, err)
	}
	if out, _ := g.run(t, "a", "cat", "f"); out != "disk" {
		t.Fatalf("cat f after the reboot: %q", out)
	}
}

// TestFakeRecoverInterruptedCreateDelete: a sandbox left creating or
// deleting by a crash is removed whole by the next start: record,
// container, layer and directory.
func TestFakeRecoverInterruptedCreateDelete(t *testing.T) {
	t.Parallel()
	for _, state := range []api.State{api.StateCreating, api.StateDeleting} {
		t.Run(string(state), func(t *testing.T) {
			t.Parallel()
			dir := newFakeDataDir(t)
			f := startFakeEngine(t, dir, Config{})
			sb := f.create(t, "a")
			f.e.Close()
			rec, err := f.st.GetSandbox(context.Background(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			rec.State = state
			if err := f.st.UpdateSandbox(context.Background(), rec); err != nil {
				t.Fatal(err)
			}

			g := startFakeEngine(t, dir, Config{})
			if _, err := g.st.GetSandbox(context.Background(), sb.ID); !errdefs.IsNotFound(err) {
				t.Fatalf("record after restart: %v, want gone", err)
			}
			if got := g.state(t, sb.ID); got != runtime.StatusMissing {
				t.Fatalf("container after restart is %s, want missing", got)
			}
			for _, d := range []string{g.e.sandboxDir(sb.ID), filepath.Join(dir, "layers", sb.ID)} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Fatalf("%s after restart: %v, want gone", d, err)
				}
			}
			// The name is free again.
			g.create(t, "a")
		})
	}
}

// TestFakeRecoverRestoreJournal: recovery from each point of a restore's
// journal entry. Before the swap: the restore rolls back, the disk is as it
// was. After the swap: it finishes, the disk is the checkpoint's. An
// unreadable entry: the disk stays whole, the sandbox is stopped saying so.
func TestFakeRecoverRestoreJournal(t *testing.T) {
	t.Parallel()
	// setup makes a sandbox with a checkpoint of f = "checkpointed", then f
	// = "live".
	setup := func(t *testing.T, faults map[string]time.Duration) (*fakeEnv, *store.Sandbox, *store.Checkpoint) {
		dir := newFakeDataDir(t)
		f := startFakeEngine(t, dir, Config{Faults: faults})
		sb := f.create(t, "a")
		f.writeFile(t, "a", "/f", "checkpointed")
		cp, err := f.e.Checkpoint(context.Background(), "a", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		f.writeFile(t, "a", "/f", "live")
		return f, sb, cp
	}
	t.Run("not swapped", func(t *testing.T) {
		t.Parallel()
		f, sb, cp := setup(t, nil)
		ctx := context.Background()
		f.e.Close()
		data, _ := json.Marshal(restoreOp{Seq: cp.Seq})
		if err := f.st.PutOp(ctx, &store.Op{ID: newOpID(), SandboxID: sb.ID, Kind: "restore", Data: data}); err != nil {
			t.Fatal(err)
		}
		g := startFakeEngine(t, f.dir, Config{})
		got, err := g.e.Get(ctx, "a")
		if err != nil || got.State != api.StateStopped || got.StateReason != "a restore was interrupted; the disk is as it was" {
			t.Fatalf("after restart: %+v %v", got, err)
		}
		if f := g.readFile(t, "a", "/f"); f != "live" {
			t.Fatalf("f after a rolled back restore: %q, want live", f)
		}
		if ops, _ := g.st.ListOps(ctx, ""); len(ops) != 0 {
			t.Fatalf("journal after recovery: %d entries", len(ops))
		}
	})
	t.Run("swapped", func(t *testing.T) {
		t.Parallel()
		// The restore stops at restore:swapped (a fault that outlasts the
		// test: that engine is abandoned there, as if sbxd was killed).
		f, _, cp := setup(t, map[string]time.Duration{"restore:swapped": time.Hour})
		ctx := context.Background()
		go func() { _, _ = f.e.Restore(ctx, "a", CheckpointID(cp.Seq), nil) }()
		f.waitLog(t, "fault point reached")
		f.e.Close()
		g := startFakeEngine(t, f.dir, Config{})
		got, err := g.e.Get(ctx, "a")
		if err != nil || got.State != api.StateStopped || got.DiskSource != CheckpointID(cp.Seq) {
			t.Fatalf("after restart: %+v %v, want stopped on %s", got, err, CheckpointID(cp.Seq))
		}
		if f := g.readFile(t, "a", "/f"); f != "checkpointed" {
			t.Fatalf("f after a finished restore: %q, want checkpointed", f)
		}
		if ops, _ := g.st.ListOps(ctx, ""); len(ops) != 0 {
			t.Fatalf("journal after recovery: %d entries", len(ops))
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		t.Parallel()
		f, sb, _ := setup(t, nil)
		ctx := context.Background()
		f.e.Close()
		if err := f.st.PutOp(ctx, &store.Op{ID: newOpID(), SandboxID: sb.ID, Kind: "restore", Data: []byte("{")}); err != nil {
			t.Fatal(err)
		}
		g := startFakeEngine(t, f.dir, Config{})
		got, err := g.e.Get(ctx, "a")
		if err != nil || got.State != api.StateStopped || !strings.Contains(got.StateReason, "journal entry was unreadable") {
			t.Fatalf("after restart: %+v %v", got, err)
		}
		if f := g.readFile(t, "a", "/f"); f != "live" {
			t.Fatalf("f: %q, want live (nothing was swapped)", f)
		}
		if ops, _ := g.st.ListOps(ctx, ""); len(ops) != 0 {
			t.Fatalf("journal after recovery: %d entries", len(ops))
		}
	})
	t.Run("unknown kind", func(t *testing.T) {
		t.Parallel()
		f, sb, _ := setup(t, nil)
		ctx := context.Background()
		f.e.Close()
		if err := f.st.PutOp(ctx, &store.Op{ID: newOpID(), SandboxID: sb.ID, Kind: "teleport", Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		g := startFakeEngine(t, f.dir, Config{})
		if ops, _ := g.st.ListOps(ctx, ""); len(ops) != 0 {
			t.Fatalf("an unknown journal entry stayed: %d entries", len(ops))
		}
		if got, err := g.e.Get(ctx, "a"); err != nil || got.State != api.StateRunning {
			t.Fatalf("after restart: %+v %v, want running", got, err)
		}
	})
}

// TestFakePoolClaim: with a pool, a create of the default shape gets the
// warm sandbox (already booted: same id), named as asked, running
// commands; the pool boots a replacement.
func TestFakePoolClaim(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{PoolSize: 1})
	ctx := context.Background()
	waitWarm := func() string {
		deadline := time.Now().Add(hangDeadline)
		for f.e.WarmSandboxes() < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("the pool never filled; log:\n%s", f.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		all, err := f.st.ListSandboxes(ctx, storeAll)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.Pooled {
				return s.ID
			}
		}
		t.Fatal("the pool counts a warm sandbox but no record is pooled")
		return ""
	}
	warm := waitWarm()
	if _, err := f.e.Get(ctx, warm); !errdefs.IsNotFound(err) {
		t.Fatalf("a warm sandbox is visible by its id: %v", err)
	}
	sb := f.create(t, "claimed")
	if sb.ID != warm {
		t.Fatalf("create made %s, not the warm %s", sb.ID, warm)
	}
	if sb.Pooled || sb.Name != "claimed" || sb.State != api.StateRunning {
		t.Fatalf("claimed sandbox: pooled %v, name %q, state %s", sb.Pooled, sb.Name, sb.State)
	}
	if out, _ := f.run(t, "claimed", "echo", "warm"); out != "warm\n" {
		t.Fatalf("exec in the claimed sandbox: %q", out)
	}
	if next := waitWarm(); next == warm {
		t.Fatal("the pool counts the claimed sandbox as warm")
	}
	// A create of another shape boots cold, leaving the warm one.
	other, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "cold", MemoryMB: 128}})
	if err != nil {
		t.Fatal(err)
	}
	if other.ID == warm || f.e.WarmSandboxes() != 1 {
		t.Fatalf("a create of another shape took a warm sandbox (id %s, %d warm)", other.ID, f.e.WarmSandboxes())
	}
}

// plantOp writes a journal entry as an operation cut short by a crash
// leaves it.
func (f *fakeEnv) plantOp(t *testing.T, sandboxID, kind string, data any) {
	t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.PutOp(context.Background(), &store.Op{ID: newOpID(), SandboxID: sandboxID, Kind: kind, Data: b}); err != nil {
		t.Fatal(err)
	}
}

// plantSuspendSnapshot records the snapshot a suspend stores (memory and
// disk stored; the fake cannot make a real one, and recovery reads only
// the record).
func (f *fakeEnv) plantSuspendSnapshot(t *testing.T, sb *store.Sandbox, id string) {
	t.Helper()
	sn := &store.Snapshot{ID: id, Name: id, SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image, ImageID: sb.ImageID,
		Suspend: true, State: "ready", CreateTime: time.Now().UTC(), StoreTime: time.Now().UTC()}
	if err := f.st.AddSnapshot(context.Background(), sn); err != nil {
		t.Fatal(err)
	}
}

// TestFakeRecoverSuspendJournal: recovery from each outcome of a suspend's
// and a resume's journal entry, and of an in-place snapshot restore whose
// snapshot is gone.
func TestFakeRecoverSuspendJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// setup makes a running sandbox with a file, and drops the engine.
	setup := func(t *testing.T) (*fakeEnv, *store.Sandbox) {
		f := startFakeEngine(t, newFakeDataDir(t), Config{})
		sb := f.create(t, "a")
		f.writeFile(t, "a", "/f", "live")
		f.e.Close()
		return f, sb
	}
	released := func(t *testing.T, g *fakeEnv, sb *store.Sandbox) {
		t.Helper()
		if got := g.state(t, sb.ID); got != runtime.StatusMissing {
			t.Errorf("container is %s, want missing", got)
		}
		if g.net.has(sb.ID) {
			t.Error("the network is still there")
		}
		if _, err := os.Stat(filepath.Join(g.dir, "layers", sb.ID)); !os.IsNotExist(err) {
			t.Errorf("layer: %v, want gone", err)
		}
	}
	noOps := func(t *testing.T, g *fakeEnv) {
		t.Helper()
		if ops, err := g.st.ListOps(ctx, ""); err != nil || len(ops) != 0 {
			t.Fatalf("journal after recovery: %v %v, want empty", ops, err)
		}
	}
	t.Run("suspend not stored", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantOp(t, sb.ID, "suspend", suspendOp{Snapshot: "snap_notstored"})
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		if got, err := g.e.Get(ctx, "a"); err != nil || got.State != api.StateRunning {
			t.Fatalf("after restart: %+v %v, want running", got, err)
		}
		if out, _ := g.run(t, "a", "cat", "f"); out != "live" {
			t.Fatalf("cat f: %q", out)
		}
	})
	t.Run("suspend stored", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantSuspendSnapshot(t, sb, "snap_stored")
		f.plantOp(t, sb.ID, "suspend", suspendOp{Snapshot: "snap_stored", WakeOn: "k1"})
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		got, err := g.e.Get(ctx, "a")
		if err != nil || got.State != api.StateSuspended || got.SuspendSnapshot != "snap_stored" {
			t.Fatalf("after restart: %+v %v, want suspended on snap_stored", got, err)
		}
		if got.WakeOn != "k1" {
			t.Errorf("wake key after the recovered suspend: %q, want k1 (an event could never wake it)", got.WakeOn)
		}
		released(t, g, sb)
	})
	t.Run("resume not recorded", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantSuspendSnapshot(t, sb, "snap_res")
		rec, err := f.st.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec.State, rec.SuspendSnapshot = api.StateSuspended, "snap_res"
		if err := f.st.UpdateSandbox(ctx, rec); err != nil {
			t.Fatal(err)
		}
		f.plantOp(t, sb.ID, "resume", suspendOp{Snapshot: "snap_res"})
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		got, err := g.e.Get(ctx, "a")
		if err != nil || got.State != api.StateSuspended || got.SuspendSnapshot != "snap_res" {
			t.Fatalf("after restart: %+v %v, want still suspended", got, err)
		}
		if _, err := g.st.GetSnapshot(ctx, "snap_res"); err != nil {
			t.Fatalf("the suspended sandbox's snapshot: %v, want kept", err)
		}
		released(t, g, sb)
	})
	t.Run("resume recorded", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantSuspendSnapshot(t, sb, "snap_done")
		f.plantOp(t, sb.ID, "resume", suspendOp{Snapshot: "snap_done"})
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		if _, err := g.st.GetSnapshot(ctx, "snap_done"); !errdefs.IsNotFound(err) {
			t.Fatalf("the snapshot of a finished resume: %v, want deleted", err)
		}
		if out, _ := g.run(t, "a", "cat", "f"); out != "live" {
			t.Fatalf("cat f: %q", out)
		}
	})
	// A journal entry that cannot be read loses which snapshot it was: the
	// sandbox stays as its record has it, and the suspend snapshots it
	// does not use (stored by the cut suspend, or left by the cut resume)
	// are removed instead of pinning their blobs for ever.
	damaged := func(t *testing.T, f *fakeEnv, sb *store.Sandbox, kind string) {
		t.Helper()
		if err := f.st.PutOp(ctx, &store.Op{ID: newOpID(), SandboxID: sb.ID, Kind: kind, Data: []byte(`{"snapshot":`)}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("suspend, unreadable entry, stored", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantSuspendSnapshot(t, sb, "snap_cut")
		damaged(t, f, sb, "suspend")
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		if got, err := g.e.Get(ctx, "a"); err != nil || got.State != api.StateRunning {
			t.Fatalf("after restart: %+v %v, want running", got, err)
		}
		if out, _ := g.run(t, "a", "cat", "f"); out != "live" {
			t.Fatalf("cat f: %q", out)
		}
		if _, err := g.st.GetSnapshot(ctx, "snap_cut"); !errdefs.IsNotFound(err) {
			t.Fatalf("the cut suspend's snapshot of a running sandbox: %v, want removed", err)
		}
	})
	t.Run("resume, unreadable entry", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantSuspendSnapshot(t, sb, "snap_old")
		damaged(t, f, sb, "resume")
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		if out, _ := g.run(t, "a", "cat", "f"); out != "live" {
			t.Fatalf("cat f: %q", out)
		}
		if _, err := g.st.GetSnapshot(ctx, "snap_old"); !errdefs.IsNotFound(err) {
			t.Fatalf("the snapshot of a resumed sandbox: %v, want removed", err)
		}
	})
	t.Run("resume, unreadable entry, still suspended", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantSuspendSnapshot(t, sb, "snap_keep")
		f.plantSuspendSnapshot(t, sb, "snap_stray")
		rec, err := f.st.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec.State, rec.SuspendSnapshot = api.StateSuspended, "snap_keep"
		if err := f.st.UpdateSandbox(ctx, rec); err != nil {
			t.Fatal(err)
		}
		damaged(t, f, sb, "resume")
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		got, err := g.e.Get(ctx, "a")
		if err != nil || got.State != api.StateSuspended || got.SuspendSnapshot != "snap_keep" {
			t.Fatalf("after restart: %+v %v, want still suspended", got, err)
		}
		if _, err := g.st.GetSnapshot(ctx, "snap_keep"); err != nil {
			t.Fatalf("the suspended sandbox's snapshot: %v, want kept", err)
		}
		if _, err := g.st.GetSnapshot(ctx, "snap_stray"); !errdefs.IsNotFound(err) {
			t.Fatalf("a suspend snapshot it does not use: %v, want removed", err)
		}
		released(t, g, sb)
	})
	t.Run("snapshot restore, snapshot gone", func(t *testing.T) {
		t.Parallel()
		f, sb := setup(t)
		f.plantOp(t, sb.ID, opSnapRestore, snapRestoreOp{Snapshot: "snap_gone"})
		g := startFakeEngine(t, f.dir, Config{})
		noOps(t, g)
		got, err := g.e.Get(ctx, "a")
		if err != nil || got.State != api.StateStopped || !strings.Contains(got.StateReason, "could not be finished") {
			t.Fatalf("after restart: %+v %v, want stopped, saying the restore could not be finished", got, err)
		}
		if got := g.state(t, sb.ID); got != runtime.StatusMissing {
			t.Fatalf("container is %s, want missing (its processes were being replaced)", got)
		}
		if out, _ := g.run(t, "a", "cat", "f"); out != "live" {
			t.Fatalf("cat f after the reboot: %q (the disk was not touched)", out)
		}
	})
}

// TestFakeLockTable: docs/api.md "Concurrent requests on one sandbox",
// row by row, while a checkpoint holds the sandbox: checkpoint, restore,
// snapshot, fork and stop answer conflict at once naming it; rename,
// labels, network rules and suspend wait for it and then run; exec on a
// running sandbox runs alongside; two deletes wait, one deletes and the
// other answers sandbox_not_found.
func TestFakeLockTable(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	op, err := f.e.BeginCheckpoint(ctx, "a", "held")
	if err != nil {
		t.Fatal(err)
	}
	atOnce := map[string]func() error{
		"checkpoint": func() error { _, err := f.e.BeginCheckpoint(ctx, "a", ""); return err },
		"restore":    func() error { _, err := f.e.BeginRestore(ctx, "a", "v0"); return err },
		"snapshot":   func() error { _, err := f.e.BeginSnapshot(ctx, "a", api.SnapshotRequest{}); return err },
		"fork":       func() error { _, err := f.e.BeginFork(ctx, "a", api.ForkRequest{Name: "copy"}); return err },
		"stop":       func() error { _, err := f.e.Stop(ctx, "a"); return err },
	}
	for what, call := range atOnce {
		if err := call(); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), `sandbox "a": checkpoint is in progress`) {
			t.Errorf("%s while a checkpoint holds the sandbox: %v, want conflict naming the checkpoint", what, err)
		}
	}
	if out, _ := f.run(t, "a", "echo", "alongside"); out != "alongside\n" {
		t.Fatalf("exec while a checkpoint holds the sandbox: %q", out)
	}
	type result struct {
		what string
		err  error
	}
	results := make(chan result, 5)
	name := "b"
	go func() {
		_, err := f.e.Update(ctx, "a", api.UpdateSandboxRequest{Name: &name, Labels: map[string]string{"k": "v"}})
		results <- result{"update", err}
	}()
	go func() {
		_, err := f.e.SetNetwork(ctx, "a", api.NetworkRules{Internet: false, Allow: []string{}, Deny: []string{}, Connect: []string{}})
		results <- result{"network", err}
	}()
	go func() {
		_, err := f.e.Suspend(ctx, "a", api.SuspendRequest{}, nil)
		results <- result{"suspend", err}
	}()
	for range 2 {
		go func() { results <- result{"delete", f.e.Delete(ctx, "a")} }()
	}
	// Nothing that waits may answer before the checkpoint ends. Both
	// deletes must be waiting before it runs: a delete that comes during
	// the capture cancels it (another row of the table).
	f.waitLogN(t, "delete: waiting for the operation in progress", 2)
	select {
	case r := <-results:
		t.Fatalf("%s answered while the checkpoint held the sandbox: %v", r.what, r.err)
	default:
	}
	if _, err := op.Run(ctx, nil); err != nil {
		t.Fatalf("the held checkpoint: %v", err)
	}
	var deleted, notFound int
	for range 5 {
		var r result
		select {
		case r = <-results:
		case <-time.After(hangDeadline):
			t.Fatal("a request waiting for the lock never ran")
		}
		switch {
		case r.what == "delete" && r.err == nil:
			deleted++
		case r.what == "delete" && errdefs.IsNotFound(r.err):
			notFound++
		case r.what == "suspend" && (errors.Is(r.err, errdefs.ErrSuspendFailed) || errdefs.IsNotFound(r.err)):
			// It ran (and failed: the fake cannot save memory), or the
			// sandbox was deleted before its turn.
		case r.what != "delete" && r.what != "suspend" && (r.err == nil || errdefs.IsNotFound(r.err)):
		default:
			t.Errorf("%s after the checkpoint ended: %v", r.what, r.err)
		}
		if errdefs.IsConflict(r.err) {
			t.Errorf("%s answered conflict: it should have waited", r.what)
		}
	}
	if deleted != 1 || notFound != 1 {
		t.Fatalf("two deletes: %d deleted, %d sandbox_not_found; want one of each", deleted, notFound)
	}
}

// TestFakeSnapshotForkUnsupported: the fake cannot save a process's
// memory, so a memory snapshot fails (snapshot_failed) and a fork fails
// (fork_failed); either way the sandbox runs on and nothing is recorded.
func TestFakeSnapshotForkUnsupported(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	if _, err := f.e.Snapshot(ctx, "a", api.SnapshotRequest{}, nil); !errors.Is(err, errdefs.ErrSnapshotFailed) {
		t.Fatalf("snapshot on the fake: %v, want snapshot_failed", err)
	}
	if _, err := f.e.Fork(ctx, "a", api.ForkRequest{Name: "copy"}, nil); !errors.Is(err, errdefs.ErrForkFailed) {
		t.Fatalf("fork on the fake: %v, want fork_failed", err)
	}
	if out, _ := f.run(t, "a", "echo", "on"); out != "on\n" {
		t.Fatalf("exec after the failed snapshot and fork: %q", out)
	}
	if sns, err := f.st.ListSnapshots(ctx, ""); err != nil || len(sns) != 0 {
		t.Fatalf("snapshots recorded: %d %v, want none", len(sns), err)
	}
	if _, err := f.e.Get(ctx, "copy"); !errdefs.IsNotFound(err) {
		t.Fatalf("the failed fork's copy: %v, want none", err)
	}
	if ops, err := f.st.ListOps(ctx, ""); err != nil || len(ops) != 0 {
		t.Fatalf("journal: %v %v, want empty", ops, err)
	}
}

// TestFakeRecoverUnreadableSnapRestore: an in-place snapshot restore whose
// journal entry cannot be read (which snapshot is lost) does not keep the
// engine from starting: the sandbox is stopped, saying the restore could
// not be finished, and the entry goes.
func TestFakeRecoverUnreadableSnapRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/f", "live")
	f.e.Close()
	if err := f.st.PutOp(ctx, &store.Op{ID: newOpID(), SandboxID: sb.ID, Kind: opSnapRestore, Data: []byte("{")}); err != nil {
		t.Fatal(err)
	}
	g := startFakeEngine(t, f.dir, Config{})
	if ops, err := g.st.ListOps(ctx, ""); err != nil || len(ops) != 0 {
		t.Fatalf("journal after recovery: %v %v, want empty", ops, err)
	}
	got, err := g.e.Get(ctx, "a")
	if err != nil || got.State != api.StateStopped || !strings.Contains(got.StateReason, "could not be finished") {
		t.Fatalf("after restart: %+v %v, want stopped, saying the restore could not be finished", got, err)
	}
	if got := g.state(t, sb.ID); got != runtime.StatusMissing {
		t.Fatalf("container is %s, want missing", got)
	}
}

// TestFakeRecoverWarmPool: warm sandboxes survive a restart of the engine
// (the same ones are adopted, not booted anew), and go when the new engine
// keeps no pool.
func TestFakeRecoverWarmPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled := func(f *fakeEnv) []string {
		all, err := f.st.ListSandboxes(ctx, storeAll)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range all {
			if s.Pooled {
				ids = append(ids, s.ID)
			}
		}
		return ids
	}
	waitWarm := func(f *fakeEnv, n int) {
		deadline := time.Now().Add(hangDeadline)
		for f.e.WarmSandboxes() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d warm sandboxes, want %d; log:\n%s", f.e.WarmSandboxes(), n, f.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	dir := newFakeDataDir(t)
	f := startFakeEngine(t, dir, Config{PoolSize: 1})
	waitWarm(f, 1)
	warm := pooled(f)
	f.e.Close()

	g := startFakeEngine(t, dir, Config{PoolSize: 1})
	if got := g.e.WarmSandboxes(); got != 1 {
		t.Fatalf("after restart %d warm sandboxes, want the 1 adopted", got)
	}
	if got := pooled(g); len(got) != 1 || got[0] != warm[0] {
		t.Fatalf("warm sandboxes after restart %v, want the same %v", got, warm)
	}
	if sb := g.create(t, "x"); sb.ID != warm[0] {
		t.Fatalf("create after restart made %s, not the adopted warm %s", sb.ID, warm[0])
	}
	waitWarm(g, 1)
	refill := pooled(g)
	g.e.Close()

	h := startFakeEngine(t, dir, Config{PoolSize: 0})
	waitWarm(h, 0)
	deadline := time.Now().Add(hangDeadline)
	for len(pooled(h)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("warm sandboxes of a pool no longer kept: %v", pooled(h))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := h.state(t, refill[0]); got != runtime.StatusMissing {
		t.Fatalf("the dropped warm sandbox's container is %s, want missing", got)
	}
	if out, _ := h.run(t, "x", "echo", "kept"); out != "kept\n" {
		t.Fatalf("the claimed sandbox after the pool went: %q", out)
	}
}

// TestFakeExecWaitsForIdleSuspend: an exec that arrives once the idle loop
// has decided to suspend the sandbox waits for that suspend to end and then
// runs (it used to start its command in the suspending sandbox and fail
// with "stopped while the request ran"); a request in flight keeps the idle
// loop from deciding at all.
func TestFakeExecWaitsForIdleSuspend(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	long := time.Now().Add(-time.Hour)
	done := f.e.busy(sb.ID)
	if f.e.claimIdle(sb.ID, long, time.Millisecond) {
		t.Fatal("the idle loop claimed a sandbox with a request in flight")
	}
	done()
	time.Sleep(5 * time.Millisecond)
	// What the idle loop does: the lock, then the claim, then the suspend.
	unlock, err := f.e.lockID(ctx, sb.ID, sb.Name, "suspend", lockOrConflict)
	if err != nil {
		t.Fatal(err)
	}
	if !f.e.claimIdle(sb.ID, long, time.Millisecond) {
		unlock()
		t.Fatal("the idle loop did not claim an idle sandbox")
	}
	ran := make(chan error, 1)
	go func() {
		out, code, err := f.tryRun("a", "echo", "after")
		if err == nil && (out != "after\n" || code != 0) {
			err = fmt.Errorf("exec: %q, exit %d", out, code)
		}
		ran <- err
	}()
	select {
	case err := <-ran:
		unlock()
		t.Fatalf("the exec did not wait for the idle suspend: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	f.e.releaseIdle(sb.ID)
	unlock()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("the exec after the idle suspend: %v", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("the exec did not go on once the idle suspend ended")
	}
}
