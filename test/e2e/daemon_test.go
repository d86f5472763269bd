package e2e

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
	"github.com/sbxhq/sbx/internal/store/sqlite"
)

// TestRestartReattaches: sandboxes outlive sbxd, and a new sbxd reattaches
// them, processes and all, after a clean stop or a crash.
func TestRestartReattaches(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "echo state > /workspace/f; (sleep 600 &) ; true")
	for _, crash := range []bool{false, true} {
		h.restart(t, crash)
		ctx := ctxT(t)
		got, err := h.c.Sandboxes.Get(ctx, sb.Name)
		if err != nil || got.State != api.StateRunning {
			t.Fatalf("after restart (crash=%v): %+v %v", crash, got, err)
		}
		out := mustSh(t, got, "cat /workspace/f; ps -o args | grep -c '^sleep 600'")
		if out != "state\n1\n" {
			t.Fatalf("after restart (crash=%v): %q, want the file and the background process", crash, out)
		}
	}
}

// TestReconcileRemovesOrphans: a container whose record is gone (sbxd
// crashed between steps) is removed with its layer, netns and dirs; a
// record whose container died is marked stopped and boots on demand; a
// record left "creating" is rolled back.
func TestReconcileRemovesOrphans(t *testing.T) {
	ctx := ctxT(t)
	orphan, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	dead := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	half, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, dead, "echo still-here > /workspace/f")
	h.kill()

	st, err := sqlite.Open(ctx, filepath.Join(h.dataDir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSandbox(ctx, orphan.ID); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetSandbox(ctx, half.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.State = api.StateCreating
	if err := st.UpdateSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// The sandbox dies while sbxd is down (as in a host reboot).
	if out, err := runsc("kill", dead.ID, "KILL"); err != nil {
		t.Fatalf("runsc kill: %v %s", err, out)
	}
	time.Sleep(300 * time.Millisecond)

	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{orphan.ID, half.ID} {
		if left := hostLeftovers(t, id); len(left) > 0 {
			t.Errorf("after reconcile, %s still has %v", id, left)
		}
	}
	_, err = h.c.Sandboxes.Get(ctx, half.Name)
	wantCode(t, err, api.CodeSandboxNotFound)
	got, err := h.c.Sandboxes.Get(ctx, dead.Name)
	if err != nil || got.State != api.StateStopped {
		t.Fatalf("dead sandbox after reconcile: %+v %v", got, err)
	}
	if out := mustSh(t, got, "cat /workspace/f"); out != "still-here\n" {
		t.Fatalf("dead sandbox after boot: %q", out)
	}
}

func runsc(args ...string) (string, error) {
	full := append([]string{"--root", filepath.Join(h.dataDir, "runsc")}, args...)
	out, err := execCommand("runsc", full...)
	return out, err
}

// TestTCPNeedsKey: over TCP, no key or a wrong key is 401 unauthorized.
func TestTCPNeedsKey(t *testing.T) {
	ctx := ctxT(t)
	for _, key := range []string{"", "wrong-key-wrong-key"} {
		c, err := client.New(client.WithURL("http://"+h.listen), client.WithAPIKey(key))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Sandboxes.List(ctx, nil)
		ae := wantCode(t, err, api.CodeUnauthorized)
		if ae.Status != http.StatusUnauthorized {
			t.Fatalf("status %d", ae.Status)
		}
	}
	c, err := client.New(client.WithURL("http://"+h.listen), client.WithAPIKey(h.apiKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sandboxes.List(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// TestWarmPool: with a pool, a create of the default image and shape takes
// a warm sandbox, which answers at once and carries the caller's identity.
func TestWarmPool(t *testing.T) {
	ctx := ctxT(t)
	waitWarm(t)
	start := time.Now()
	sb := newSandbox(t, api.CreateSandboxRequest{Env: map[string]string{"X": "1"}, Labels: map[string]string{"k": "v"}})
	out := mustSh(t, sb, "hostname; echo $X; ls -A /workspace | wc -l")
	took := time.Since(start)
	if out != sb.Name+"\n1\n0\n" {
		t.Fatalf("warm sandbox: %q", out)
	}
	t.Logf("create → first exec from the pool: %v", took)
	got, err := h.c.Sandboxes.Get(ctx, sb.Name)
	if err != nil || got.Labels["k"] != "v" || got.Image != "default" {
		t.Fatalf("%+v %v", got, err)
	}
	// The pool refills.
	waitWarm(t)
}

// waitWarm waits until sbxd has a warm sandbox ready: a running container
// that is not a listed sandbox.
func waitWarm(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		sbs, err := h.c.Sandboxes.List(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, sb := range sbs {
			listed[sb.ID] = true
		}
		for id := range runscIDs(t) {
			if !listed[id] {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("no warm sandbox after 90 s")
}

func execCommand(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
