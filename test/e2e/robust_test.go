package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// kvmWorks reports whether this machine can run runsc's kvm platform, as
// far as the cheap checks tell (the probe's boot test decides the rest).
func kvmWorks() bool {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false
	}
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Contains(string(b), " vmx") || strings.Contains(string(b), " svm")
}

// TestPlatformProbe: sbxd chooses its platform by a probe and says why in
// GET /v1/health; on a machine where KVM does not work, an explicit
// --platform kvm is a clear startup error within seconds, never a hang.
func TestPlatformProbe(t *testing.T) {
	hl, err := h.c.Health(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if hl.Platform == "" || hl.PlatformReason == "" {
		t.Fatalf("health has no platform or reason: %+v", hl)
	}
	if !strings.HasSuffix(hl.Runtime, "/"+hl.Platform) {
		t.Fatalf("runtime %q does not run on platform %q", hl.Runtime, hl.Platform)
	}
	if !kvmWorks() && hl.Platform != "systrap" {
		t.Fatalf("KVM cannot work here, but sbxd chose %q (%s)", hl.Platform, hl.PlatformReason)
	}
	out, err := exec.Command(filepath.Join(h.binDir, "sbx"), "--socket", h.sock, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "platform "+hl.Platform+": ") {
		t.Fatalf("sbx version does not say the platform and why: %v\n%s", err, out)
	}
	if kvmWorks() {
		return
	}
	tmp := t.TempDir()
	start := time.Now()
	cmd := exec.Command(filepath.Join(h.binDir, "sbxd"), "--data-dir", filepath.Join(tmp, "data"),
		"--socket", filepath.Join(tmp, "sock"), "--platform", "kvm", "--pool", "0",
		"--netns-dir", filepath.Join(tmp, "netns"), "--network-tag", "pk"+randomHex(1), "--network-cidr", "10.250.240.0/24")
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	out, err = cmd.CombinedOutput()
	close(done)
	if err == nil {
		t.Fatal("sbxd --platform kvm started on a machine where KVM does not work")
	}
	if !strings.Contains(string(out), "kvm platform does not work") {
		t.Fatalf("sbxd --platform kvm failed without saying why (%v):\n%s", err, out)
	}
	t.Logf("sbxd --platform kvm refused in %.1f s: %s", time.Since(start).Seconds(), strings.TrimSpace(string(out)))
}

// TestHungSandbox: a sandbox whose runsc-sandbox process is stopped
// (SIGSTOP) makes only its own calls fail, each within its deadline; other
// sandboxes and new creates carry on, and SIGTERM to sbxd returns within
// 10 s whatever that sandbox does.
func TestHungSandbox(t *testing.T) {
	d := second(t, "--pool", "0")
	ctx := ctxT(t)
	if err := d.importBusybox(ctx); err != nil {
		t.Fatal(err)
	}
	hung, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	well, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	pids := sandboxPIDs(t, hung.ID)
	if len(pids) == 0 {
		t.Fatalf("no runsc-sandbox process for %s", hung.ID)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	defer func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()

	// The hung sandbox's exec answers an error in bounded time.
	ectx, cancel := context.WithTimeout(ctx, 90*time.Second)
	start := time.Now()
	_, err = hung.Exec(ectx, "true")
	timedOut := ectx.Err() != nil
	cancel()
	if timedOut {
		t.Fatalf("exec on a stopped sandbox did not answer in 90 s")
	}
	if e := wantCode(t, err, api.CodeUnavailable); !strings.Contains(e.Message, "not answer") {
		t.Fatalf("the error does not say the sandbox does not answer: %v", err)
	}
	t.Logf("exec on the stopped sandbox answered in %.1f s: %v", time.Since(start).Seconds(), err)

	// Others carry on meanwhile.
	if r, err := well.Exec(ctx, "echo ok"); err != nil || strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("the other sandbox's exec: %+v, %v", r, err)
	}
	if _, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox"}); err != nil {
		t.Fatalf("a new create beside a hung sandbox: %v", err)
	}

	// SIGTERM returns within 10 s.
	start = time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	waited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Fatal("sbxd did not exit within 15 s of SIGTERM beside a hung sandbox")
	}
	d.cmd = nil
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("sbxd took %.1f s to exit on SIGTERM (want at most 10 s)", el.Seconds())
	}

	// sbxd starts again beside the hung sandbox (it used to exit: one
	// `runsc list` asked every sandbox and waited on the hung one), and the
	// other sandbox is reattached and answers.
	if err := d.start(); err != nil {
		t.Fatalf("sbxd does not start beside a hung sandbox: %v", err)
	}
	if r, err := d.c.Sandboxes.Get(ctx, well.Name); err != nil || r.State != api.StateRunning {
		t.Fatalf("the other sandbox after the restart: %+v, %v", r, err)
	}
	if r, err := well.Exec(ctx, "echo ok"); err != nil || strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("the other sandbox's exec after the restart: %+v, %v", r, err)
	}
	// A checkpoint of the hung one either is taken without its help (a
	// copy-on-write snapshot of its disk) or answers 503 unavailable,
	// saying why (it used to answer 500 checkpoint_failed).
	if _, err := hung.Checkpoint(ctx, "while-hung"); err != nil {
		if e := wantCode(t, err, api.CodeUnavailable); !strings.Contains(e.Message, "not answer") {
			t.Fatalf("checkpoint of a hung sandbox: %v, want it to say the sandbox does not answer", err)
		}
	}
	// Its delete leaves none of its processes (it used to answer success
	// and leave the stopped runsc-sandbox and gofer running).
	if err := hung.Delete(ctx); err != nil {
		t.Fatalf("delete of a hung sandbox: %v", err)
	}
	if left := sandboxPIDs(t, hung.ID); len(left) > 0 {
		t.Fatalf("the deleted hung sandbox still has runsc-sandbox processes %v", left)
	}
}

// sandboxPIDs are the host pids of the runsc-sandbox processes of
// container id.
func sandboxPIDs(t *testing.T, id string) []int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", "runsc-sandbox.*"+id).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestGuardedRollbackCrash: sbxd killed (SIGKILL) in the middle of a
// guarded exec's in-place snapshot rollback, after the old processes ended
// and before the disk was rebuilt, leaves the sandbox whole after the
// restart: the interrupted restore is finished (the snapshot's disk, the
// command's damage undone), and the guarded exec's journal entry then
// rolls the undo back in full, so the sandbox runs the snapshot again.
func TestGuardedRollbackCrash(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "echo before > /workspace/f")
	off := h.logSize()
	h.restartWith(t, "SBX_FAULTS=snaprestore:stopped=60s")
	c, err := h.c.Sandboxes.Get(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = c.Run(context.Background(), api.ExecRequest{Cmd: []string{"sh", "-c", "echo broken > /workspace/f; exit 1"},
			Undo: api.UndoSnapshot, RollbackOnFailure: true})
	}()
	h.waitLog(t, off, "fault point reached", 120*time.Second)
	h.restartWith(t) // SIGKILL, then a plain sbxd
	c, err = h.c.Sandboxes.Get(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != api.StateRunning {
		t.Fatalf("after the crash: state %s (%s), want running: the rollback finished on restart", c.State, c.StateReason)
	}
	h.waitLog(t, off, "rolled back a guarded exec cut by the restart", 30*time.Second)
	if got := mustSh(t, c, "cat /workspace/f"); got != "before\n" {
		t.Fatalf("after the crash the disk has f = %q, want the snapshot's %q", got, "before\n")
	}
}

// TestGuardedExecCutByCrash: sbxd is killed while the command of a guarded
// exec with rollback_on_failure runs (the command dies with the agent's
// connection; nobody gets its exit). The restarted sbxd rolls the undo
// back: the disk is as before the command, for a disk checkpoint and for
// a git undo (run in the sandbox again after the restart).
func TestGuardedExecCutByCrash(t *testing.T) {
	for _, c := range []struct{ undo, image, setup string }{
		{api.UndoCheckpoint, "busybox", "mkdir -p /workspace/project && echo precious > /workspace/project/f"},
		{api.UndoGit, "default", "mkdir -p /workspace/project && cd /workspace/project && git init -q && echo precious > f && git add f && " +
			"git -c user.name=a -c user.email=a@b commit -qm init"},
	} {
		t.Run(c.undo, func(t *testing.T) {
			ctx := ctxT(t)
			sb := newSandbox(t, api.CreateSandboxRequest{Image: c.image})
			mustSh(t, sb, c.setup)
			done := make(chan error, 1)
			go func() {
				_, err := sb.Run(context.Background(), api.ExecRequest{Cmd: []string{"sh", "-c", "rm -rf f; touch started; sleep 60; exit 1"},
					Cwd: "/workspace/project", Undo: c.undo, RollbackOnFailure: true})
				done <- err
			}()
			deadline := time.Now().Add(2 * time.Minute)
			for !strings.Contains(mustSh(t, sb, "ls /workspace/project"), "started") {
				if time.Now().After(deadline) {
					t.Fatal("the guarded command did not start")
				}
				time.Sleep(100 * time.Millisecond)
			}
			h.restartWith(t) // SIGKILL mid-command, then a plain sbxd
			if err := <-done; err == nil {
				t.Fatal("the exec cut by the crash answered as if it finished")
			}
			c, err := h.c.Sandboxes.Get(ctx, sb.Name)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
				// The git rollback runs in the sandbox after the restart.
				if got = mustSh(t, c, "cat /workspace/project/f 2>&1; ls /workspace/project"); strings.Contains(got, "precious") && !strings.Contains(got, "started") {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("after the restart the disk is not as before the guarded command:\n%s", got)
				}
			}
		})
	}
}
