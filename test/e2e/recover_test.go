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
	"syscall"
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

// TestRecoverHungPaused: of three sandboxes left paused mid-snapshot by a
// SIGKILL of sbxd, one hangs (its runsc-sandbox process stopped, SIGSTOP).
// sbxd still starts; the two others are reattached before the hung one's
// resume gives up (each runsc call has its deadline), run and answer; the
// hung one is marked stopped, and is deleted cleanly once it runs again.
func TestRecoverHungPaused(t *testing.T) {
	ctx := ctxT(t)
	var sbs []*client.Sandbox
	for i := 0; i < 3; i++ {
		sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Name: fmt.Sprintf("rh%d-%s", i, randomHex(3))})
		mustSh(t, sb, fmt.Sprintf("echo before-%d > /workspace/f", i))
		sbs = append(sbs, sb)
	}
	hung := sbs[0] // the oldest: handled first by an sbxd that goes one by one
	off := h.logSize()
	h.restartWith(t, "SBX_FAULTS=snapshot:paused=300s")
	t.Cleanup(func() { h.restartWith(t) })
	for _, sb := range sbs {
		go func(sb *client.Sandbox) {
			_, _ = sb.Snapshot(context.Background(), api.SnapshotRequest{Name: "cut"})
		}(sb)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for strings.Count(logSince(off), "fault point reached") < len(sbs) {
		if time.Now().After(deadline) {
			t.Fatal("the snapshots did not reach their pause in 2 min")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pids := sandboxPIDs(t, hung.ID)
	if len(pids) == 0 {
		t.Fatalf("no runsc-sandbox process for %s", hung.ID)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	cont := func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer cont()
	off = h.logSize()
	start := time.Now()
	h.restartWith(t)
	t.Logf("sbxd answered %.1fs after a SIGKILL beside a hung paused sandbox", time.Since(start).Seconds())
	log := logSince(off)
	failed := strings.Index(log, "reconcile: resume failed\" sandbox="+hung.Name)
	if failed < 0 {
		t.Fatalf("sbxd's log has no failed resume of the hung sandbox %s:\n%s", hung.Name, log)
	}
	for _, sb := range sbs[1:] {
		if i := strings.Index(log, "reconcile: reattached\" sandbox="+sb.Name); i < 0 || i > failed {
			t.Errorf("%s was not reattached before the hung sandbox's resume gave up:\n%s", sb.Name, log)
		}
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
		mustSh(t, sb, "cat /workspace/f")
	}
	got, err := h.c.Sandboxes.Get(ctx, hung.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.StateStopped || !strings.Contains(got.StateReason, "did not resume") {
		t.Errorf("the hung sandbox is %s (%q), want stopped saying it did not resume", got.State, got.StateReason)
	}
	cont()
	if err := hung.Delete(ctx); err != nil {
		t.Fatalf("delete the sandbox that hung: %v", err)
	}
	if left := hostLeftovers(t, hung.ID); len(left) > 0 {
		t.Errorf("deleted sandbox %s left on the host: %v", hung.ID, left)
	}
}
