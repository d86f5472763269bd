package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// runscStatus is what runsc says of container id ("running", "paused", …).
func runscStatus(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("runsc", "--root", filepath.Join(h.dataDir, "runsc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runsc state %s: %v", id, err)
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("runsc state %s: %v", id, err)
	}
	return st.Status
}

// logSince is sbxd's log after offset.
func logSince(offset int64) string {
	b, _ := os.ReadFile(h.logPath)
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

// TestRecoverManyPaused: sbxd is killed (SIGKILL) while six sandboxes are
// paused, their agents quiesced, in the middle of memory snapshots. After
// the restart every one runs again (runsc: running, not paused), answers
// execs and keeps its files, and no half snapshot is listed; and their
// recoveries overlapped (sbxd started resuming several before it had
// finished any), instead of costing one wait after another.
func TestRecoverManyPaused(t *testing.T) {
	const n = 6
	ctx := ctxT(t)
	var sbs []*client.Sandbox
	names := map[string]bool{}
	for i := 0; i < n; i++ {
		sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Name: fmt.Sprintf("rp%d-%s", i, randomHex(3))})
		mustSh(t, sb, fmt.Sprintf("echo before-%d > /workspace/f", i))
		sbs = append(sbs, sb)
		names[sb.Name] = true
	}
	off := h.logSize()
	h.restartWith(t, "SBX_FAULTS=snapshot:paused=300s")
	t.Cleanup(func() { h.restartWith(t) })
	for _, sb := range sbs {
		go func(sb *client.Sandbox) {
			_, _ = sb.Snapshot(context.Background(), api.SnapshotRequest{Name: "cut"})
		}(sb)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for strings.Count(logSince(off), "fault point reached") < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d snapshots reached their pause in 2 min", strings.Count(logSince(off), "fault point reached"), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, sb := range sbs {
		if st := runscStatus(t, sb.ID); st != "paused" {
			t.Fatalf("%s is %s in its snapshot's pause, want paused", sb.Name, st)
		}
	}
	off = h.logSize()
	start := time.Now()
	h.restartWith(t)
	t.Logf("sbxd answered %.1fs after a SIGKILL with %d sandboxes left paused mid-snapshot", time.Since(start).Seconds(), n)

	// Several were being resumed before the first was done.
	resuming, overlapped := 0, false
	for _, line := range strings.Split(logSince(off), "\n") {
		ours := false
		for name := range names {
			if strings.Contains(line, "sandbox="+name) {
				ours = true
			}
		}
		if !ours {
			continue
		}
		if strings.Contains(line, "reconcile: resuming a sandbox left paused") {
			resuming++
		}
		if strings.Contains(line, "reconcile: reattached") {
			overlapped = resuming > 1
			break
		}
	}
	if !overlapped {
		t.Errorf("sbxd recovered the paused sandboxes one after another: %d resumed before the first was reattached", resuming)
	}
	for i, sb := range sbs {
		got, err := h.c.Sandboxes.Get(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != api.StateRunning {
			t.Errorf("%s is %s after the restart", sb.Name, got.State)
		}
		if st := runscStatus(t, sb.ID); st != "running" {
			t.Errorf("%s: runsc says %s after the restart", sb.Name, st)
		}
		if out := mustSh(t, sb, "cat /workspace/f"); out != fmt.Sprintf("before-%d\n", i) {
			t.Errorf("%s: /workspace/f holds %q", sb.Name, out)
		}
		sns, err := h.c.Snapshots.List(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, sn := range sns {
			if sn.Name == "cut" {
				t.Errorf("%s: a half snapshot is listed: %+v", sb.Name, sn)
			}
		}
	}
}

// TestConcurrentDelete: a delete of a sandbox that another delete is
// removing waits for it and answers sandbox_not_found once it is gone, and
// a delete while a restore holds the sandbox waits for the restore and
// then deletes it; neither answers conflict. (sbxd holds the first
// operation at a fault point, so the second always arrives while it runs.)
func TestConcurrentDelete(t *testing.T) {
	ctx := ctxT(t)
	a := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	b := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, b, "echo v1 > /workspace/f")
	cp, err := b.Checkpoint(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	h.restartWith(t, "SBX_FAULTS=delete:marked=8s,restore:built=8s")
	t.Cleanup(func() { h.restartWith(t) })

	// Two deletes of one sandbox.
	off := h.logSize()
	first := make(chan error, 1)
	go func() { first <- h.c.Sandboxes.Delete(ctx, a.ID) }()
	h.waitLog(t, off, "fault point reached", time.Minute)
	err = h.c.Sandboxes.Delete(ctx, a.ID)
	if err != nil && !errors.Is(err, client.ErrSandboxNotFound) {
		t.Errorf("a second delete while the first runs: %v, want it to wait and answer 204 or 404", err)
	}
	if err := <-first; err != nil {
		t.Errorf("the first delete: %v", err)
	}
	if _, err := h.c.Sandboxes.Get(ctx, a.ID); !errors.Is(err, client.ErrSandboxNotFound) {
		t.Errorf("after both deletes: %v, want sandbox_not_found", err)
	}
	if left := hostLeftovers(t, a.ID); len(left) > 0 {
		t.Errorf("deleted sandbox %s left on the host: %v", a.ID, left)
	}

	// A delete while a restore runs.
	off = h.logSize()
	restored := make(chan error, 1)
	go func() { restored <- b.Restore(ctx, cp.ID, nil) }()
	h.waitLog(t, off, "fault point reached", time.Minute)
	if err := b.Delete(ctx); err != nil {
		t.Errorf("a delete while a restore runs: %v, want it to wait for the restore and delete", err)
	}
	if err := <-restored; err != nil {
		t.Errorf("the restore the delete waited for: %v", err)
	}
	if _, err := h.c.Sandboxes.Get(ctx, b.ID); !errors.Is(err, client.ErrSandboxNotFound) {
		t.Errorf("after the delete: %v, want sandbox_not_found", err)
	}
	if left := hostLeftovers(t, b.ID); len(left) > 0 {
		t.Errorf("deleted sandbox %s left on the host: %v", b.ID, left)
	}
}
