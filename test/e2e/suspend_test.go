package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// waitState polls a sandbox until it is in state, or fails after timeout.
func waitState(t *testing.T, name string, state api.State, timeout time.Duration) *client.Sandbox {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sb, err := h.c.Sandboxes.Get(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == state {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s after %v, want %s", name, sb.State, timeout, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// suspendedLeftovers lists what a suspended sandbox must not hold on the
// host: a runsc container, a process in its cgroup, a network namespace,
// an interface, a writable layer.
func suspendedLeftovers(t *testing.T, id string) []string {
	t.Helper()
	var left []string
	if runscIDs(t)[id] {
		left = append(left, "runsc container")
	}
	for _, p := range []string{filepath.Join(h.netnsDir, "sbx-"+id), layerDir(h, id)} {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory" + cgroupParentOf(h) + "/" + id + "/cgroup.procs"); err == nil && strings.TrimSpace(string(b)) != "" {
		left = append(left, "processes in its memory cgroup")
	}
	if out, _ := exec.Command("ip", "-o", "link", "show", vethOf(h, id)).Output(); len(out) > 0 {
		left = append(left, "interface "+vethOf(h, id))
	}
	return left
}

// TestSuspendResume: suspend releases everything but the record and the
// stored memory and disk; an exec resumes it with its files and running
// processes.
func TestSuspendResume(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	mustSh(t, sb, "echo kept > /workspace/file")
	start, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done"}, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	var said []string
	if err := sb.SuspendStream(ctx, "approval-"+randomHex(3), func(msg string, _ time.Time) { said = append(said, msg) }); err != nil {
		t.Fatal(err)
	}
	// Its progress says where the time went (sbx bench prints it).
	if !hasSteps(said, api.CaptureStepsPrefix, "runsc pause", "runsc checkpoint") ||
		!hasSteps(said, api.ReleaseStepsPrefix, "runsc delete", "netns", "layer", "record") {
		t.Fatalf("suspend progress without its steps: %q", said)
	}
	if sb.State != api.StateSuspended || sb.SuspendTime == nil || sb.WakeOn == "" {
		t.Fatalf("the sandbox object after suspend: %+v", sb.Sandbox)
	}
	if left := suspendedLeftovers(t, sb.ID); len(left) > 0 {
		t.Fatalf("a suspended sandbox holds: %v", left)
	}
	// Suspend snapshots are not the caller's snapshots.
	if sns, _ := h.c.Snapshots.List(ctx, sb.Name); len(sns) != 0 {
		t.Fatalf("the suspend is listed as a snapshot: %+v", sns)
	}
	// Exec resumes it.
	t0 := time.Now()
	out := mustSh(t, sb, "cat /workspace/file; cat /tmp/counter; sleep 0.5; cat /tmp/counter; ps -o pid,args | grep -c 'while true'")
	t.Logf("exec on the suspended sandbox answered in %v", time.Since(t0))
	lines := strings.Fields(out)
	if len(lines) != 4 || lines[0] != "kept" || lines[1] == lines[2] {
		t.Fatalf("after resume: %q (want the file and a counter that moves)", out)
	}
	ps, err := sb.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ps {
		found = found || (p.PID == start.PID && p.State == "running")
	}
	if !found {
		t.Fatalf("process %d did not survive the suspend: %+v", start.PID, ps)
	}
	got, _ := h.c.Sandboxes.Get(ctx, sb.Name)
	if got.State != api.StateRunning || got.WakeOn != "" || got.SuspendTime != nil {
		t.Fatalf("after resume: %+v", got.Sandbox)
	}
	// Explicit resume of a running sandbox is a no-op; of a stopped one a
	// conflict; suspend of a stopped one a conflict.
	if err := got.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := got.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	wantCode(t, got.Resume(ctx), api.CodeConflict)
	wantCode(t, got.Suspend(ctx, ""), api.CodeConflict)
	wantCode(t, got.Suspend(ctx, "bad key with spaces"), api.CodeInvalidArgument)
	vol := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Volumes: []api.Volume{{Name: "v-" + randomHex(3), Path: "/v"}}})
	wantCode(t, vol.Suspend(ctx, ""), api.CodeSandboxHasVolume)
}

// TestSuspendEvents: an event wakes the sandboxes waiting on its key; an
// event that comes first is kept and wakes the sandbox as it suspends; the
// sandbox reads why it woke.
func TestSuspendEvents(t *testing.T) {
	ctx := ctxT(t)
	key := "approval-" + randomHex(4)
	a := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	b := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	for _, sb := range []*client.Sandbox{a, b} {
		if err := sb.Suspend(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	res, err := h.c.Events.Post(ctx, key, []byte(`{"approved":true,"by":"ana"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending || len(res.Woken) != 2 {
		t.Fatalf("event result: %+v", res)
	}
	for _, sb := range []*client.Sandbox{a, b} {
		waitState(t, sb.Name, api.StateRunning, 30*time.Second)
		evs, err := sb.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].Key != key || string(evs[0].Data) != `{"approved":true,"by":"ana"}` {
			t.Fatalf("events of %s: %+v", sb.Name, evs)
		}
	}
	// The event first, the suspend after: it resumes at once.
	key2 := "build-" + randomHex(4)
	res, err = h.c.Events.Post(ctx, key2, []byte("build 7 done"), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pending || res.ExpireTime == nil {
		t.Fatalf("an event nobody waits for: %+v", res)
	}
	if err := a.Suspend(ctx, key2); err != nil {
		t.Fatal(err)
	}
	waitState(t, a.Name, api.StateRunning, 30*time.Second)
	evs, _ := a.Events(ctx)
	if len(evs) != 2 || evs[1].DataText != "build 7 done" {
		t.Fatalf("events after the early event: %+v", evs)
	}
	// Bad input.
	_, err = h.c.Events.Post(ctx, "key with spaces", nil, "")
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = h.c.Events.Post(ctx, key, make([]byte, 1<<20+1), "")
	wantCode(t, err, api.CodeTooLarge)
}

// TestSuspendEventDuringSuspend: an event posted while the suspend is
// still storing the sandbox wakes it once the suspend is done.
func TestSuspendEventDuringSuspend(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	off := h.logSize()
	h.restartWith(t, "SBX_FAULTS=suspend:stored=3s")
	defer h.restartWith(t)
	key := "race-" + randomHex(4)
	done := make(chan error, 1)
	go func() { done <- sb.Suspend(context.Background(), key) }()
	h.waitLog(t, off, "fault point reached", 60*time.Second)
	res, err := h.c.Events.Post(ctx, key, []byte(`"go"`), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("event during the suspend: %+v", res)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitState(t, sb.Name, api.StateRunning, 30*time.Second)
	if evs, _ := sb.Events(ctx); len(evs) != 1 {
		t.Fatalf("events: %+v", evs)
	}
}

// TestIdleTimeout: a sandbox without activity for timeout_ms is
// suspended; keep_alive_while_running keeps one with a running process
// up; PUT changes the timeout.
func TestIdleTimeout(t *testing.T) {
	ctx := ctxT(t)
	idle := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", TimeoutMS: 2000})
	busy := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", TimeoutMS: 2000, KeepAliveWhileRunning: true})
	if _, err := busy.Run(ctx, api.ExecRequest{Cmd: []string{"sleep", "600"}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	mustSh(t, idle, "echo hi > /workspace/f")
	// A detached process without keep-alive is not activity once started.
	if _, err := idle.Run(ctx, api.ExecRequest{Cmd: []string{"sleep", "600"}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	waitState(t, idle.Name, api.StateSuspended, 20*time.Second)
	if got, _ := h.c.Sandboxes.Get(ctx, busy.Name); got.State != api.StateRunning {
		t.Fatalf("a sandbox with a running process and keep-alive is %s", got.State)
	}
	if out := mustSh(t, idle, "cat /workspace/f"); out != "hi\n" {
		t.Fatalf("after an idle suspend: %q", out)
	}
	// Never again.
	zero := int64(0)
	if err := idle.Update(ctx, api.UpdateSandboxRequest{TimeoutMS: &zero}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if got, _ := h.c.Sandboxes.Get(ctx, idle.Name); got.State != api.StateRunning || got.TimeoutMS != 0 {
		t.Fatalf("timeout 0 yet: %+v", got.Sandbox)
	}
	bad := int64(5)
	wantCode(t, idle.Update(ctx, api.UpdateSandboxRequest{TimeoutMS: &bad}), api.CodeInvalidArgument)
}

// TestSuspendRenameAndRetry: a retried suspend keeps the wake key; a
// sandbox renamed while suspended resumes with its new name as hostname.
func TestSuspendRenameAndRetry(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	key := "retry-" + randomHex(4)
	if err := sb.Suspend(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := sb.Suspend(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := sb.Refresh(ctx); err != nil || sb.WakeOn != key {
		t.Fatalf("after a retried suspend: wake_on %q, %v", sb.WakeOn, err)
	}
	name := "renamed-" + randomHex(4)
	if err := sb.Update(ctx, api.UpdateSandboxRequest{Name: &name}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(mustSh(t, sb, "hostname")); got != name {
		t.Fatalf("hostname after the resume %q, want %q", got, name)
	}
}

// TestExecAcrossSuspend: an exec streaming when its sandbox is suspended
// ends with a conflict that says the process is kept and how to attach
// again; attaching resumes the sandbox, and the process goes on from where
// the stream stopped, to its exit.
func TestExecAcrossSuspend(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	st, err := sb.Stream(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo line $i; sleep 0.1; done"}})
	if err != nil {
		t.Fatal(err)
	}
	var before strings.Builder
	done := make(chan error, 1)
	go func() {
		_, err := st.Wait(&before, nil)
		done <- err
	}()
	time.Sleep(800 * time.Millisecond)
	if err := sb.Suspend(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the exec's stream did not end after its sandbox was suspended")
	}
	ae := wantCode(t, werr, api.CodeConflict)
	pid := strconv.Itoa(st.PID)
	if !strings.Contains(ae.Message, "suspended while process "+pid) || !strings.Contains(ae.Message, "attach") {
		t.Fatalf("the cut exec's error does not say the process is kept and how to attach: %s", ae.Message)
	}
	got := strings.Count(before.String(), "line ")
	if got == 0 || got >= 40 {
		t.Fatalf("%d lines before the suspend: the test did not cut the exec", got)
	}
	at, err := sb.Attach(ctx, st.PID, int64(before.Len()), "")
	if err != nil {
		t.Fatalf("attach to the kept process of a suspended sandbox: %v", err)
	}
	var after strings.Builder
	code, err := at.Wait(&after, nil)
	if err != nil || code != 0 {
		t.Fatalf("attach after the suspend: exit %d, %v", code, err)
	}
	lines := strings.Fields(strings.ReplaceAll(before.String()+after.String(), "line ", "line_"))
	if len(lines) != 40 {
		t.Fatalf("%d lines across the suspend, want 40 (none lost or repeated): %v", len(lines), lines)
	}
	for i, l := range lines {
		if l != "line_"+strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q", i+1, l)
		}
	}
	if err := sb.Refresh(ctx); err != nil || sb.State != api.StateRunning {
		t.Fatalf("after the attach the sandbox is %s (%v), want running", sb.State, err)
	}
}

// TestSuspendCycles: 100 suspend/resume cycles of one sandbox that writes
// a file each cycle lose no file.
//
// Each cycle has its own deadline (2 min), not one for the whole run: on a
// loaded machine 100 cycles take longer than any one budget would allow,
// while a cycle that hangs still fails.
func TestSuspendCycles(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	n := 100
	if testing.Short() {
		n = 10
	}
	start := time.Now()
	for i := 1; i <= n; i++ {
		mustSh(t, sb, fmt.Sprintf("echo %d > /workspace/cycle-%03d", i, i))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := sb.Suspend(ctx, ""); err != nil {
			cancel()
			t.Fatalf("cycle %d: suspend: %v", i, err)
		}
		if err := sb.Resume(ctx); err != nil {
			cancel()
			t.Fatalf("cycle %d: resume: %v", i, err)
		}
		cancel()
		if i%25 == 0 {
			out := mustSh(t, sb, "ls /workspace | grep -c cycle-")
			if strings.TrimSpace(out) != fmt.Sprint(i) {
				t.Fatalf("after %d cycles, %s files", i, strings.TrimSpace(out))
			}
		}
	}
	t.Logf("%d cycles in %v", n, time.Since(start))
	out := mustSh(t, sb, "cat /workspace/cycle-* | tr '\\n' ' '")
	want := ""
	for i := 1; i <= n; i++ {
		want += fmt.Sprint(i) + " "
	}
	if out != want {
		t.Fatalf("files after %d cycles: %q", n, out)
	}
}

// TestCrashRecovery kills sbxd at a point of each lifecycle operation and
// checks, after the restart, that the operation was finished or rolled
// back: nothing half-made listed, nothing orphaned, nothing left paused.
func TestCrashRecovery(t *testing.T) {
	ctx := ctxT(t)
	crash := func(t *testing.T, point string, op func()) {
		t.Helper()
		off := h.logSize()
		h.restartWith(t, "SBX_FAULTS="+point+"=60s")
		go op()
		h.waitLog(t, off, "fault point reached", 60*time.Second)
		h.restartWith(t)
	}
	// noOrphans: every runsc container belongs to a listed sandbox or the
	// warm pool, and none is paused.
	noOrphans := func(t *testing.T) {
		t.Helper()
		sbs, _ := h.c.Sandboxes.List(ctx, nil)
		listed := map[string]bool{}
		for _, s := range sbs {
			listed[s.ID] = true
			if s.State == api.StateCreating || s.State == api.StateDeleting || s.State == api.StatePaused {
				t.Fatalf("%s is %s after a restart", s.Name, s.State)
			}
		}
		for id := range runscIDs(t) {
			if !listed[id] && !isWarm(t, id) {
				t.Fatalf("orphan container %s", id)
			}
		}
	}
	t.Run("create", func(t *testing.T) {
		name := "crash-create-" + randomHex(3)
		crash(t, "create:booted", func() {
			_, _ = h.c.Sandboxes.Create(context.Background(), api.CreateSandboxRequest{Name: name, Image: "busybox"})
		})
		if _, err := h.c.Sandboxes.Get(ctx, name); err == nil {
			t.Fatalf("a half-made sandbox is listed")
		}
		noOrphans(t)
	})
	t.Run("delete", func(t *testing.T) {
		sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
		crash(t, "delete:marked", func() { _ = sb.Delete(context.Background()) })
		if _, err := h.c.Sandboxes.Get(ctx, sb.Name); err == nil {
			t.Fatalf("a half-deleted sandbox is listed")
		}
		if left := hostLeftovers(t, sb.ID); len(left) > 0 {
			t.Fatalf("left behind: %v", left)
		}
		noOrphans(t)
	})
	t.Run("suspend before storing", func(t *testing.T) {
		sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
		mustSh(t, sb, "echo before > /workspace/f")
		crash(t, "suspend:paused", func() { _ = sb.Suspend(context.Background(), "") })
		got, _ := h.c.Sandboxes.Get(ctx, sb.Name)
		if got.State != api.StateRunning {
			t.Fatalf("a suspend cut before its memory was stored left the sandbox %s", got.State)
		}
		if out := mustSh(t, sb, "cat /workspace/f"); out != "before\n" {
			t.Fatalf("disk: %q", out)
		}
		noOrphans(t)
	})
	t.Run("suspend after storing", func(t *testing.T) {
		sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
		mustSh(t, sb, "echo before > /workspace/f")
		crash(t, "suspend:stored", func() { _ = sb.Suspend(context.Background(), "") })
		got, _ := h.c.Sandboxes.Get(ctx, sb.Name)
		if got.State != api.StateSuspended {
			t.Fatalf("a suspend cut after its memory was stored left the sandbox %s", got.State)
		}
		if left := suspendedLeftovers(t, sb.ID); len(left) > 0 {
			t.Fatalf("the suspended sandbox holds: %v", left)
		}
		if out := mustSh(t, sb, "cat /workspace/f"); out != "before\n" {
			t.Fatalf("after resume: %q", out)
		}
		noOrphans(t)
	})
	t.Run("resume", func(t *testing.T) {
		sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
		mustSh(t, sb, "echo before > /workspace/f")
		if err := sb.Suspend(ctx, ""); err != nil {
			t.Fatal(err)
		}
		crash(t, "resume:restored", func() { _ = sb.Resume(context.Background()) })
		got, _ := h.c.Sandboxes.Get(ctx, sb.Name)
		if got.State != api.StateSuspended {
			t.Fatalf("a resume cut before its record left the sandbox %s", got.State)
		}
		if left := suspendedLeftovers(t, sb.ID); len(left) > 0 {
			t.Fatalf("the rolled-back resume left: %v", left)
		}
		if out := mustSh(t, sb, "cat /workspace/f"); out != "before\n" {
			t.Fatalf("after resume: %q", out)
		}
		noOrphans(t)
	})
}

// TestHostReboot simulates a reboot: sbxd and every runsc process killed,
// every mount of the data dir and the netns dir gone. Suspended sandboxes
// come back suspended (and resume), running ones come back stopped with
// their disk, and boot on the next exec.
func TestHostReboot(t *testing.T) {
	ctx := ctxT(t)
	running := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, running, "echo on-disk > /workspace/f")
	sleeping := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sleeping, "echo suspended > /workspace/f")
	if err := sleeping.Suspend(ctx, "after-reboot"); err != nil {
		t.Fatal(err)
	}
	h.kill()
	// Every runsc process of this sbxd goes, as in a power cut.
	out, _ := exec.Command("pgrep", "-f", "runsc.*--root="+filepath.Join(h.dataDir, "runsc")).Output()
	for _, p := range strings.Fields(string(out)) {
		var pid int
		fmt.Sscan(p, &pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(500 * time.Millisecond)
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && (strings.HasPrefix(f[1], h.dataDir) || strings.HasPrefix(f[1], h.netnsDir)) {
			_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
	// A reboot also clears the runsc state in /run-like places; the data
	// dir's runsc root survives here, as it would on disk.
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	got, _ := h.c.Sandboxes.Get(ctx, running.Name)
	if got.State != api.StateStopped {
		t.Fatalf("a sandbox running at the reboot is %s", got.State)
	}
	if out := mustSh(t, got, "cat /workspace/f"); out != "on-disk\n" {
		t.Fatalf("its disk after the reboot: %q", out)
	}
	got, _ = h.c.Sandboxes.Get(ctx, sleeping.Name)
	if got.State != api.StateSuspended || got.WakeOn != "after-reboot" {
		t.Fatalf("a sandbox suspended at the reboot: %+v", got.Sandbox)
	}
	if _, err := h.c.Events.Post(ctx, "after-reboot", []byte(`1`), ""); err != nil {
		t.Fatal(err)
	}
	waitState(t, sleeping.Name, api.StateRunning, 30*time.Second)
	if out := mustSh(t, got, "cat /workspace/f"); out != "suspended\n" {
		t.Fatalf("the suspended sandbox after the reboot: %q", out)
	}
}
