package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// importBusyboxWith imports busybox plus a layer of files (name: content)
// as image name, for the test's duration.
func importBusyboxWith(t *testing.T, name string, files map[string]string) {
	t.Helper()
	bb, err := busyboxLayer()
	if err != nil {
		t.Fatal(err)
	}
	var extra bytes.Buffer
	writeTar(t, &extra, files)
	b := extra.Bytes()
	top, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, bb, top)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin"}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarTree(dir, &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Images.Import(ctxT(t), name, &buf, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Images.Delete(ctxT(t), name) })
}

// TestHostileHostname: an image built on a host carries that host's name in
// /etc/hostname (mmdebstrap copies it). A sandbox must not learn the host's
// name: /etc/hostname and hostname say the sandbox's name, also after a
// rename.
func TestHostileHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	img := "hosty-" + randomHex(3)
	importBusyboxWith(t, img, map[string]string{"etc/hostname": host + "\n"})
	sb := newSandbox(t, api.CreateSandboxRequest{Image: img})
	check := func(name string) {
		t.Helper()
		for _, cmd := range []string{"cat /etc/hostname", "hostname"} {
			out := strings.TrimSpace(sh(t, sb, cmd).Stdout)
			if out != name {
				t.Errorf("%s in sandbox %s: %q, want %q (the host is %q)", cmd, name, out, name, host)
			}
		}
	}
	check(sb.Name)
	renamed := sb.Name + "-b"
	if err := sb.Update(ctxT(t), api.UpdateSandboxRequest{Name: &renamed}); err != nil {
		t.Fatal(err)
	}
	check(renamed)
	// The file is sbx's: the guest cannot make it say something else.
	if res := sh(t, sb, "echo other > /etc/hostname"); res.ExitCode == 0 {
		t.Errorf("writing /etc/hostname succeeded")
	}
	check(renamed)
}

// TestHostileDeleteDuringCheckpoint: a checkpoint answers at once (a
// snapshot) and is stored in the background; a delete cancels that store
// and answers promptly, and a caller waiting for the store (a verify)
// learns that the sandbox was deleted (409 conflict), not that the
// checkpoint failed. On plain-directory layers the checkpoint call itself
// captures: the delete cancels it and it answers that 409.
func TestHostileDeleteDuringCheckpoint(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	// The store of sb's checkpoints waits at its fault point until it is
	// cancelled.
	h.restartWith(t, "SBX_FAULTS=capture:"+sb.ID+"=10m")
	t.Cleanup(func() { h.restartWith(t) })
	if !snapshotCheckpoints(t, h) {
		deleteDuringCapture(t, sb)
		return
	}
	off := h.logSize()
	cp, err := sb.Checkpoint(ctx, "cancelled")
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if cp.StoreTime != nil {
		t.Fatalf("checkpoint stored at once (%v): the store's fault point did not hold it", cp.StoreTime)
	}
	h.waitLog(t, off, "fault point reached", 90*time.Second)
	off = h.logSize()
	done := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_, err := sb.GetCheckpoint(c, cp.ID, true)
		done <- err
	}()
	h.waitLog(t, off, "waiting for the store of the sandbox's checkpoint in progress", 90*time.Second)
	dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
	defer dcancel()
	if err := sb.Delete(dctx); err != nil {
		t.Fatalf("delete during the store of a checkpoint: %v", err)
	}
	select {
	case err := <-done:
		ae := wantCode(t, err, api.CodeConflict)
		if want := "was deleted while the checkpoint was being stored"; !strings.Contains(ae.Message, want) {
			t.Fatalf("message %q, want it to say %q", ae.Message, want)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the verify waiting for the cancelled store did not answer within 90 s")
	}
	h.waitLog(t, off, "checkpoint store cancelled: the sandbox is being deleted", 10*time.Second)
}

// deleteDuringCapture is TestHostileDeleteDuringCheckpoint on layers whose
// checkpoint call captures (held at its fault point): a delete cancels the
// call, which answers 409 saying the sandbox was deleted.
func deleteDuringCapture(t *testing.T, sb *client.Sandbox) {
	ctx := ctxT(t)
	off := h.logSize()
	done := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_, err := sb.Checkpoint(c, "cancelled")
		done <- err
	}()
	h.waitLog(t, off, "fault point reached", 90*time.Second)
	dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
	defer dcancel()
	if err := sb.Delete(dctx); err != nil {
		t.Fatalf("delete during the checkpoint: %v", err)
	}
	select {
	case err := <-done:
		ae := wantCode(t, err, api.CodeConflict)
		if want := "sandbox " + sb.Name + " was deleted while the checkpoint ran"; !strings.Contains(ae.Message, want) {
			t.Fatalf("message %q, want it to say %q", ae.Message, want)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the cancelled checkpoint did not answer within 90 s")
	}
}

// TestHostileAgentSocketGone: root in a sandbox puts a dead socket (one
// nobody listens on) in the place of the agent's, in one rename: the
// agent's watch sees a file there and does not listen again. The
// sandbox's requests then answer 503 unavailable naming the unreachable
// agent, not a 409 that blames another operation and asks for a retry.
// (A plain rm is healed by the agent within a second; a rename leaves no
// moment in which the path is free, so the test does not race the watch.)
func TestHostileAgentSocketGone(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{})
	mustSh(t, sb, `cd /.sbx/run && python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('dead.sock')" && mv dead.sock agent.sock`)
	// Connections dialed ahead serve a few more requests.
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		_, err = sb.Exec(ctxT(t), "true")
	}
	ae := wantCode(t, err, api.CodeUnavailable)
	if !strings.Contains(ae.Message, "agent is unreachable") || !strings.Contains(ae.Message, "/.sbx/run/agent.sock") {
		t.Fatalf("message %q does not name the unreachable agent", ae.Message)
	}
	// A stop and the next exec give a working sandbox again.
	if err := sb.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "echo back"); strings.TrimSpace(got) != "back" {
		t.Fatalf("after a stop: %q", got)
	}
}

// TestHostileTooDeepTree: a tree nested deeper than a capture walks (8192
// directories) makes a diff of the live disk answer 507 capture_limit
// naming the limit, not checkpoint_failed or a 500. A checkpoint of it is
// taken (a snapshot) but can never be stored in the blob store: it is
// listed as damaged, a verify answers capture_limit naming the limit and
// the path, and once the guest removed the tree the sandbox still
// suspends (the checkpoint is lost, not every suspend). On plain-directory
// layers the checkpoint call captures: it answers that 507 itself and
// nothing is recorded.
func TestHostileTooDeepTree(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	// 12 chains of 700 levels, each moved to the bottom of the one above
	// it (gVisor makes no path longer than PATH_MAX, but moves a tree to
	// where its paths are): 8400 levels below /workspace/c1. Each chain
	// is one `mkdir -p` of a 2100-byte path, not 700 mkdirs: the tree is
	// built in seconds even on a loaded machine.
	mustSh(t, sb, `set -e; p=; i=0; while [ $i -lt 700 ]; do p=${p}dd/; i=$((i+1)); done
		cd /workspace; mkdir c12; cd c12; mkdir -p $p; cd $p; echo leaf > leaf
		k=11; while [ $k -ge 1 ]; do
			cd /workspace; mkdir c$k; cd c$k; mkdir -p $p; cd $p; mv /workspace/c$((k+1)) ./
			k=$((k-1))
		done`)
	if out := mustSh(t, sb, "ls /workspace"); strings.TrimSpace(out) != "c1" {
		t.Fatalf("/workspace lists %q, want only c1", out)
	}
	background := snapshotCheckpoints(t, h)
	cp, err := sb.Checkpoint(ctx, "too deep")
	if background {
		if err != nil {
			t.Fatalf("checkpoint (a snapshot) of a too deep tree: %v", err)
		}
		_, err = sb.GetCheckpoint(ctx, cp.ID, true)
	}
	noHostPath(t, "checkpoint (or its verify) of a too deep tree", err)
	ae := wantCode(t, err, api.CodeCaptureLimit)
	if !strings.Contains(ae.Message, "8192") || !strings.Contains(ae.Message, "/workspace/c1/dd") {
		t.Fatalf("checkpoint (or its verify): message %q does not name the limit and the path", ae.Message)
	}
	if background {
		if got, err := sb.GetCheckpoint(ctx, cp.ID, false); err != nil || got.Health != api.HealthDamaged || got.StoreTime != nil {
			t.Fatalf("the checkpoint that cannot be stored: %+v %v, want damaged, not stored", got, err)
		}
	} else if cps, err := sb.ListCheckpoints(ctx); err != nil || len(cps) != 1 {
		t.Fatalf("checkpoints after a refused capture: %+v %v, want v0 only", cps, err)
	}
	_, err = sb.Diff(ctx, "", "live")
	noHostPath(t, "diff of a too deep tree", err)
	ae = wantCode(t, err, api.CodeCaptureLimit)
	if !strings.Contains(ae.Message, "8192") {
		t.Fatalf("diff: message %q does not name the limit", ae.Message)
	}
	// The guest removes the tree: the sandbox suspends and resumes, the
	// checkpoint stays listed as damaged.
	// (rm -rf would pass PATH_MAX: the chains are taken apart as built.)
	mustSh(t, sb, `set -e; p=; i=0; while [ $i -lt 700 ]; do p=${p}dd/; i=$((i+1)); done
		k=1; while [ $k -le 12 ]; do
			cd /workspace/c$k/$p; if [ -d c$((k+1)) ]; then mv c$((k+1)) /workspace/; fi
			cd /; rm -rf /workspace/c$k; k=$((k+1))
		done; ls -A /workspace`)
	if err := sb.Suspend(ctx, ""); err != nil {
		t.Fatalf("suspend after a checkpoint that cannot be stored: %v", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if background {
		if got, err := sb.GetCheckpoint(ctx, cp.ID, true); err != nil || got.Health != api.HealthDamaged {
			t.Fatalf("the lost checkpoint after the suspend: %+v %v, want damaged", got, err)
		}
	}
	// The sandbox itself goes on.
	if out := mustSh(t, sb, "echo alive"); strings.TrimSpace(out) != "alive" {
		t.Fatalf("after the refused checkpoint: %q", out)
	}
}
