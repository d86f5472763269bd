package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// TestFakeInstancesForgottenOnDelete: what sbxd keeps in memory of a
// sandbox (its lock, agent client, monitor, activity, capture count) goes
// with it: after sandboxes that ran commands, took a checkpoint and were
// deleted (one by two deletes at once), and a lock asked for with a
// record read before the delete, no instance is left.
func TestFakeInstancesForgottenOnDelete(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	const n = 4
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		f.create(t, name)
		if out, _ := f.run(t, name, "echo", "hi"); out != "hi\n" {
			t.Fatalf("echo in %s: %q", name, out)
		}
		if _, err := f.e.Checkpoint(ctx, name, "", func(string) {}); err != nil {
			t.Fatalf("checkpoint of %s: %v", name, err)
		}
	}
	if got := f.e.instanceCount(); got < n {
		t.Fatalf("%d instances while %d sandboxes run", got, n)
	}
	stale, err := f.e.Get(ctx, "s0")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := f.e.Delete(ctx, fmt.Sprintf("s%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- f.e.Delete(ctx, "s0") }()
	}
	for range 2 {
		if err := <-errs; err != nil && !errdefs.IsNotFound(err) {
			t.Fatalf("delete of s0: %v", err)
		}
	}
	// A request that found the sandbox before the delete takes its lock
	// after it: the lock (made anew) must not stay behind.
	if _, _, err := f.e.lockFound(ctx, stale, "stop", lockOrConflict); !errdefs.IsNotFound(err) {
		t.Fatalf("lock of a deleted sandbox: %v, want sandbox_not_found", err)
	}
	if got := f.e.instanceCount(); got != 0 {
		t.Fatalf("%d instances left after every sandbox was deleted, want 0", got)
	}
}

// TestFakeLockTryNamesHolder: an operation in try mode while another holds
// the sandbox answers conflict naming it, takes nothing, and runs once the
// holder is done.
func TestFakeLockTryNamesHolder(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	_, unlock, err := f.e.lockSandbox(ctx, "a", "resize", lockOrWait)
	if err != nil {
		t.Fatal(err)
	}
	// A stop that waited would end with this deadline, not a conflict.
	sctx, cancel := context.WithTimeout(ctx, hangDeadline)
	defer cancel()
	_, err = f.e.Stop(sctx, "a")
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), `sandbox "a": resize is in progress`) {
		t.Fatalf("stop while a resize holds the sandbox: %v, want conflict naming the resize", err)
	}
	unlock()
	sb, err := f.e.Stop(ctx, "a")
	if err != nil || sb.State != api.StateStopped {
		t.Fatalf("stop once the resize ended: %v (%v), want stopped", err, sb)
	}
}

// TestFakeLockWaitGetsCurrentRecord: an operation in wait mode returns once
// the holder is done, with the record as the holder left it (read again
// under the lock); a waiter whose context ends gives up with ctx's error
// and takes nothing.
func TestFakeLockWaitGetsCurrentRecord(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	held, unlock, err := f.e.lockSandbox(ctx, "a", "resize", lockOrWait)
	if err != nil {
		t.Fatal(err)
	}

	// A waiter whose context ends.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := f.e.Suspend(cctx, "a", api.SuspendRequest{}, nil)
		gaveUp <- err
	}()
	waitWaiters(t, f.e, held.ID, 1)
	cancel()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("suspend whose context ended while waiting: %v, want context.Canceled", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("a waiter whose context ended kept waiting")
	}

	// A waiter that gets the lock once the holder is done.
	type got struct {
		labels map[string]string
		err    error
	}
	waited := make(chan got, 1)
	before, err := f.e.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		sb, unlock, err := f.e.lockFound(ctx, before, "update", lockOrWait)
		if err != nil {
			waited <- got{err: err}
			return
		}
		unlock()
		waited <- got{labels: sb.Labels}
	}()
	held.Labels = map[string]string{"by": "holder"}
	if err := f.e.st.UpdateSandbox(ctx, held); err != nil {
		t.Fatal(err)
	}
	waitWaiters(t, f.e, held.ID, 1)
	select {
	case g := <-waited:
		t.Fatalf("the waiter returned while the lock was held: %+v", g)
	default:
	}
	unlock()
	select {
	case g := <-waited:
		if g.err != nil || g.labels["by"] != "holder" {
			t.Fatalf("waiter after the holder ended: %v, labels %v; want the holder's labels", g.err, g.labels)
		}
	case <-time.After(hangDeadline):
		t.Fatal("the waiter did not return once the holder ended")
	}
}

// waitWaiters waits (hangDeadline at most) until n requests wait for
// sandbox id's lock.
func waitWaiters(t *testing.T, e *Engine, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(hangDeadline)
	for e.instance(id).lock.waiters() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait for the lock of %s, want %d", e.instance(id).lock.waiters(), id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFakeNoInstanceAfterDeleteFromStaleRecord: requests that work without
// the sandbox's lock (exec, files, ports) read its record, then mark
// themselves busy, take its agent client or track a port connection. When
// a delete runs in between, whole, those steps come after it: they must
// not bring the deleted sandbox's instance (or an agent client) back.
// The interleaving is played in order: record read, delete, then each
// step, for a sandbox that had an instance (it ran a command) and one
// that had none (as after a restart of sbxd).
func TestFakeNoInstanceAfterDeleteFromStaleRecord(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "used")
	if out, _ := f.run(t, "used", "echo", "hi"); out != "hi\n" {
		t.Fatalf("echo: %q", out)
	}
	f.create(t, "fresh")
	var stale []*store.Sandbox
	for _, name := range []string{"used", "fresh"} {
		sb, err := f.e.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		stale = append(stale, sb)
	}
	// "fresh" as after a restart: no instance yet.
	f.e.forgetInstance(stale[1].ID)
	for _, sb := range stale {
		if err := f.e.Delete(ctx, sb.Name); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.e.instanceCount(); got != 0 {
		t.Fatalf("%d instances right after the deletes, want 0", got)
	}
	for _, sb := range stale {
		f.e.busy(sb.ID)()
		f.e.touch(sb.ID)
		if cl := f.e.agentFor(sb); cl == nil {
			t.Fatal("agentFor returned no client")
		}
		a, b := net.Pipe()
		c := f.e.trackPortConn(sb.ID, a)
		c.Close()
		b.Close()
	}
	if got := f.e.instanceCount(); got != 0 {
		t.Fatalf("%d instances after requests that read the records before the deletes, want 0 (a deleted sandbox's instance came back)", got)
	}
	// A live sandbox still gets its instance from a first request.
	live := f.create(t, "live")
	f.e.forgetInstance(live.ID)
	f.e.touch(live.ID)
	if f.e.peekInstance(live.ID) == nil {
		t.Fatal("a running sandbox's first request made no instance")
	}
}

// TestFakeClaimWaitsForRelease: an attach that comes while the client
// before it is letting go (closed its terminal just now) waits for it and
// gets the terminal; one that stays attached is a conflict after claimWait.
func TestFakeClaimWaitsForRelease(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	sb := f.create(t, "c")
	release, err := f.e.claimTerminal(sb.ID, "c", 42)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(200 * time.Millisecond); release() }()
	again, err := f.e.claimTerminal(sb.ID, "c", 42)
	if err != nil {
		t.Fatalf("an attach right after the other client let go: %v", err)
	}
	start := time.Now()
	if _, err := f.e.claimTerminal(sb.ID, "c", 42); !errors.Is(err, errdefs.ErrConflict) || time.Since(start) < claimWait {
		t.Fatalf("an attach while another client stays: %v after %s", err, time.Since(start))
	}
	again()
}
