package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// killInit kills the sandbox's init (the agent, PID 1) from inside, as
// root in the sandbox can, and waits until sbxd has seen it stop: the next
// exec boots the sandbox again.
func killInit(t *testing.T, sb *client.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, _ = sb.Exec(ctx, "kill -TERM 1; sleep 5")
	cancel()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := sb.Refresh(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if sb.State == api.StateStopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox is %s 90 s after its init was killed", sb.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// canaryUntouched fails the test if the host canary dir holds anything but
// its secret file with its content.
func canaryUntouched(t *testing.T, dir, secret string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "secret.txt" {
			t.Errorf("a file was created in the host canary dir: %s", e.Name())
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "secret.txt")); err != nil || string(b) != secret {
		t.Errorf("the host canary file changed: %q %v", b, err)
	}
}

// probeTmp reads and writes /tmp of sb (booting it), and fails the test if
// the host canary dir was reached.
func probeTmp(t *testing.T, sb *client.Sandbox, dir, secret string) {
	t.Helper()
	res, err := sb.Exec(ctxT(t), "cat /tmp/secret.txt; echo pwned > /tmp/pwned; ls -la /tmp/; mount | grep ' /tmp '")
	if err != nil {
		t.Fatalf("exec after the planted link: %v", err)
	}
	if strings.Contains(res.Stdout+res.Stderr, secret) {
		t.Errorf("the sandbox read the host canary file through /tmp:\n%s", res.Stdout)
	}
	canaryUntouched(t, dir, secret)
}

// TestHostileTmpMountEscape: root in the sandbox replaces /tmp with a link
// to a host directory and kills init; neither the next boot nor a restore
// of a checkpoint that holds the link may mount the host directory.
func TestHostileTmpMountEscape(t *testing.T) {
	// The canary is not under the host's /tmp: the link's target must also
	// exist inside the sandbox (runsc mounts at the link's target there),
	// and the guest cannot make a dir below its own /tmp, the link itself.
	dir, err := os.MkdirTemp("/var/tmp", "sbx-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := "host-secret-" + randomHex(8)
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "echo kept > /tmp/kept")
	plant := fmt.Sprintf("umount /tmp 2>/dev/null; rm -rf /tmp && mkdir -p %[1]s && ln -s %[1]s /tmp && ls -ld /tmp", dir)
	mustSh(t, sb, plant)

	t.Run("reboot", func(t *testing.T) {
		killInit(t, sb)
		probeTmp(t, sb, dir, secret)
	})

	t.Run("checkpoint", func(t *testing.T) {
		// The planted link goes into a checkpoint; the sandbox then repairs
		// its /tmp, and the restore brings the link back.
		mustSh(t, sb, plant)
		cp, err := sb.Checkpoint(ctxT(t), "planted")
		if err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb, "rm -f /tmp; mkdir -m 1777 /tmp")
		if err := sb.Restore(ctxT(t), cp.ID, nil); err != nil {
			t.Fatal(err)
		}
		probeTmp(t, sb, dir, secret)
	})

	t.Run("tmp-kept", func(t *testing.T) {
		// /tmp is still on the writable layer: a file survives a reboot.
		mustSh(t, sb, "rm -f /tmp; mkdir -m 1777 /tmp; echo again > /tmp/again")
		killInit(t, sb)
		if out := mustSh(t, sb, "cat /tmp/again; mount | grep -c ' /tmp ' || true"); out != "again\n0\n" {
			t.Fatalf("/tmp after a reboot: %q, want the file and no mount", out)
		}
	})
}

// TestHostileAgentSocketRedirect: sandbox A replaces its agent socket with
// a link to B's socket, then to a host Unix socket; sbxd must dial neither.
func TestHostileAgentSocketRedirect(t *testing.T) {
	b := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	canaryPath := filepath.Join(t.TempDir(), "c.sock")
	canary, err := net.Listen("unix", canaryPath)
	if err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	bSock := filepath.Join(h.dataDir, "sandboxes", b.ID, "run", "agent.sock")
	if _, err := os.Stat(bSock); err != nil {
		t.Fatalf("B's socket: %v", err)
	}

	// A new sandbox A points its socket at target; a few execs of A
	// follow (the first ones may use connections dialed ahead): none may
	// run in B or reach the canary, and A's errors say why.
	attack := func(target string) {
		a := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
		mustSh(t, a, "ln -sf "+target+" /.sbx/run/agent.sock.new && mv -f /.sbx/run/agent.sock.new /.sbx/run/agent.sock")
		var errs []string
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := a.Exec(ctx, "hostname")
			cancel()
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if strings.TrimSpace(res.Stdout) != a.Name {
				t.Errorf("an exec of A ran elsewhere: hostname %q (B is %q)", res.Stdout, b.Name)
			}
		}
		if len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), "agent socket was replaced") {
			t.Errorf("A's execs through a link to %s: want a clear error, got %q", target, errs)
		}
		// A is not lost: a stop and the next exec boot it again.
		if err := a.Stop(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if out := mustSh(t, a, "hostname"); strings.TrimSpace(out) != a.Name {
			t.Fatalf("A after a reboot answers %q", out)
		}
	}

	attack(bSock)
	if out := mustSh(t, b, "hostname"); strings.TrimSpace(out) != b.Name {
		t.Fatalf("B answers %q", out)
	}

	attack(canaryPath)
	// The canary's first connection must be the test's own: sbxd's never came.
	c, err := net.Dial("unix", canaryPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	got, err := canary.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	_ = got.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	if _, err := got.Read(buf); err != nil || buf[0] != 'x' {
		t.Errorf("sbxd connected to the host canary socket (first bytes %q, %v)", buf, err)
	}
}

// TestHostileInitLogGrowth: the guest writes 64 MiB to its init's stdout;
// the host keeps a bounded log of it.
func TestHostileInitLogGrowth(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "dd if=/dev/zero bs=1048576 count=64 of=/proc/1/fd/1 2>/dev/null; echo tail-of-the-log > /proc/1/fd/2")
	bundle := filepath.Join(h.dataDir, "sandboxes", sb.ID, "bundle")
	var total int64
	deadline := time.Now().Add(60 * time.Second)
	for {
		total = 0
		var last []byte
		ents, _ := os.ReadDir(bundle)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && strings.HasPrefix(e.Name(), "init.log") {
				total += fi.Size()
			}
		}
		last, _ = os.ReadFile(filepath.Join(bundle, "init.log"))
		if strings.Contains(string(last), "tail-of-the-log") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if total > 4<<20 {
		t.Fatalf("the init's log on the host is %d bytes after 64 MiB of output, want at most 4 MiB", total)
	}
	if out := mustSh(t, sb, "echo alive"); out != "alive\n" {
		t.Fatalf("exec after the flood: %q", out)
	}
}

// TestHostileLowItems: a volume over /etc is a 400 (it was a failed boot,
// a 500); localhost resolves in the default image.
func TestHostileLowItems(t *testing.T) {
	_, err := h.c.Sandboxes.Create(ctxT(t), api.CreateSandboxRequest{Image: "busybox", Name: "t-" + randomHex(4),
		Volumes: []api.Volume{{Name: "v-" + randomHex(4), Path: "/etc"}}})
	wantCode(t, err, api.CodeInvalidArgument)

	sb := newSandbox(t, api.CreateSandboxRequest{})
	if out := mustSh(t, sb, "getent hosts localhost"); !strings.Contains(out, "localhost") {
		t.Fatalf("getent hosts localhost: %q", out)
	}
}

// warmIDs lists the warm sandboxes: running containers that are not listed
// sandboxes.
func warmIDs(t *testing.T) []string {
	t.Helper()
	sbs, err := h.c.Sandboxes.List(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, sb := range sbs {
		listed[sb.ID] = true
	}
	var ids []string
	for id := range runscIDs(t) {
		if !listed[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitWarmCount waits until sbxd has n warm sandboxes.
func waitWarmCount(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		ids := warmIDs(t)
		if len(ids) == n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d warm sandboxes after 120 s, want %d", len(ids), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWarmPoolLowered: warm sandboxes beyond a lowered --pool go, and a
// warm sandbox can be deleted by its id.
func TestWarmPoolLowered(t *testing.T) {
	defer func(n int) {
		h.pool = n
		h.restart(t, false)
	}(h.pool)
	h.pool = 2
	h.restart(t, false)
	ids := waitWarmCount(t, 2)
	// A delete of a warm sandbox still booting waits for the boot; a
	// conflict (a boot that outlasts the delete's wait) is retried.
	for deadline := time.Now().Add(90 * time.Second); ; {
		err := h.c.Sandboxes.Delete(ctxT(t), ids[0])
		if err == nil {
			break
		}
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeConflict || time.Now().After(deadline) {
			t.Fatalf("delete warm sandbox %s: %v", ids[0], err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if runscIDs(t)[ids[0]] {
		t.Fatalf("the deleted warm sandbox %s still runs", ids[0])
	}
	waitWarmCount(t, 2)
	h.pool = 0
	h.restart(t, false)
	waitWarmCount(t, 0)
}

// TestHostileRunDirFill: /.sbx/run, where the agent's socket lives, is a
// host directory the guest can write in. Writes there must not reach the
// host's disk past a few KiB (a fresh review wrote 2 GiB in 0.6 s), and the
// sandbox keeps answering.
func TestHostileRunDirFill(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	sh(t, sb, "dd if=/dev/zero of=/.sbx/run/big bs=1M count=20 2>/dev/null; true")
	sh(t, sb, "fallocate -l 1G /.sbx/run/fa 2>/dev/null; true")
	var total int64
	for _, name := range []string{"big", "fa"} {
		if fi, err := os.Stat(filepath.Join(h.dataDir, "sandboxes", sb.ID, "run", name)); err == nil {
			total += fi.Size()
		}
	}
	if total > 1<<20 {
		t.Fatalf("the guest wrote %d bytes through /.sbx/run onto the host", total)
	}
	if out := mustSh(t, sb, "echo alive"); out != "alive\n" {
		t.Fatalf("after filling /.sbx/run: %q", out)
	}
}

// TestHostileVolumeFill: a named volume is a host directory the guest
// writes in; on btrfs layers it has a quota (the default disk quota), so a
// guest cannot fill the host's disk through it (a fresh review wrote 150 MB
// past a 64 MB disk_mb into a volume on the host's root filesystem).
func TestHostileVolumeFill(t *testing.T) {
	needQuota(t)
	withArgs(t, "--default-disk-mb", "64")
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox",
		Volumes: []api.Volume{{Name: "vq-" + randomHex(3), Path: "/mnt/vq"}}})
	res := sh(t, sb, "dd if=/dev/urandom of=/mnt/vq/big bs=1M count=150 2>&1; sync")
	size := fileSize(t, sb, "/mnt/vq/big")
	if size > 80<<20 {
		t.Fatalf("the guest wrote %d bytes into a volume with a 64 MiB quota (dd: exit %d %s)", size, res.ExitCode, res.Stdout)
	}
	if out := mustSh(t, sb, "echo alive"); out != "alive\n" {
		t.Fatalf("after filling the volume: %q", out)
	}
}
