package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
)

// blobStoreHolds reports whether any blob of the test sbxd's store holds
// needle (decoded: chunks are compressed). It only reads the store.
func blobStoreHolds(t *testing.T, needle []byte) bool {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(h.dataDir, "blobs", "sha256", "*", "*"))
	if len(paths) == 0 {
		t.Fatal("no blobs found in the test sbxd's store")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		raw, err := blob.Decode(blob.Digest("sha256:"+filepath.Base(p)), b)
		if err == nil && bytes.Contains(raw, needle) {
			return true
		}
	}
	return false
}

// noHostPath fails the test when an error message shows a host path.
func noHostPath(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && (strings.Contains(err.Error(), h.dataDir) || strings.Contains(err.Error(), "/upper")) {
		t.Fatalf("%s: the error shows a host path: %v", what, err)
	}
}

// TestHostileCaptureRace: the guest swaps a directory of its disk for a
// symlink to a host directory (a canary the test made), over and over,
// while checkpoints are taken. No checkpoint may hold the host file's
// bytes, and no disk restored from them.
func TestHostileCaptureRace(t *testing.T) {
	ctx := ctxT(t)
	canaryDir := t.TempDir()
	canary := "HOST-CANARY-" + randomHex(16)
	// 100 files in the guest's d, each with a namesake in the host's
	// canary dir: whatever file a capture reads while d is the symlink, a
	// capture that follows it reads host bytes.
	var names []string
	for i := 0; i < 100; i++ {
		names = append(names, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(filepath.Join(canaryDir, names[i]), []byte(canary+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	list := strings.Join(names, " ")
	mustSh(t, sb, "mkdir -p /workspace/d && cd /workspace/d && for f in "+list+"; do echo guest > $f; done")
	// d is a symlink to the host dir about half the time, a directory of
	// freshly written files (read by the next capture) the rest.
	loop := fmt.Sprintf(`cd /workspace; while true; do for f in %s; do echo guest$RANDOM > d/$f; done; mv d d.real; ln -s %s d; for f in %s; do [ -e d.real/$f ]; done; rm d; mv d.real d; done`, list, canaryDir, list)
	if _, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", loop}}); err != nil {
		t.Fatal(err)
	}
	// The loop runs: d flips between a directory and the symlink.
	seen := map[string]bool{}
	for i := 0; i < 60 && !(seen["link"] && seen["dir"]); i++ {
		seen[strings.TrimSpace(sh(t, sb, "if [ -L /workspace/d ]; then echo link; elif [ -d /workspace/d ]; then echo dir; fi").Stdout)] = true
	}
	if !seen["link"] || !seen["dir"] {
		t.Fatalf("the guest's swap loop does not run: saw %v", seen)
	}
	var ids []string
	for i := 0; i < 30; i++ {
		cp, err := sb.Checkpoint(ctx, "race")
		if err != nil {
			noHostPath(t, "checkpoint", err)
			t.Logf("checkpoint %d: %v", i, err)
			continue
		}
		ids = append(ids, cp.ID)
	}
	if len(ids) < 10 {
		t.Fatalf("only %d of 30 checkpoints succeeded under the race", len(ids))
	}
	if blobStoreHolds(t, []byte(canary)) {
		t.Fatal("a checkpoint holds the bytes of the host's canary file")
	}
	// Restored disks: none holds the canary.
	for _, id := range ids[len(ids)-3:] {
		if err := sb.Restore(ctx, id, nil); err != nil {
			t.Fatalf("restore %s: %v", id, err)
		}
		res := sh(t, sb, "grep -r "+canary+" /workspace; echo rc=$?")
		if strings.Contains(res.Stdout, canary) || !strings.Contains(res.Stdout, "rc=1") {
			t.Fatalf("restored %s: the disk holds the host canary: %q", id, res.Stdout)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(canaryDir, names[0])); string(b) != canary+"\n" {
		t.Fatalf("the host canary changed: %q", b)
	}
}

// TestHostileSparseCapture: a 1 TiB sparse file neither stalls sbxd nor
// its checkpoint: while the store of one sandbox's checkpoint runs long,
// another sandbox's checkpoint is stored and verified (with the blob
// collector waiting to run) and the hostile sandbox can be deleted, which
// cancels its store; a checkpoint of the sparse file is stored quickly,
// keeps its holes, and a restore gives it back sparse with its size. On
// plain-directory layers the checkpoint call itself captures: that call
// is what runs long, and what the delete cancels.
func TestHostileSparseCapture(t *testing.T) {
	ctx := ctxT(t)
	background := snapshotCheckpoints(t, h)
	const tib = int64(1) << 40
	sparse := "truncate -s 1099511627776 /workspace/huge && printf middle | dd of=/workspace/huge bs=1 seek=549755813888 conv=notrunc 2>/dev/null"

	// A store that runs long: a fault point holds it.
	slow := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, slow, sparse)
	other := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, other, "echo other > /workspace/f")
	h.restartWith(t, "SBX_FAULTS=capture:"+slow.ID+"=10m")
	t.Cleanup(func() { h.restartWith(t) })
	off := h.logSize()
	slowDone := make(chan error, 1)
	var scp *api.Checkpoint
	if background {
		var err error
		if scp, err = slow.Checkpoint(ctx, "slow"); err != nil {
			t.Fatalf("checkpoint of the slow sandbox: %v", err)
		}
	} else {
		go func() {
			c, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			_, err := slow.Checkpoint(c, "slow")
			slowDone <- err
		}()
	}
	h.waitLog(t, off, "fault point reached", 90*time.Second)
	// A delete kicks the blob collector, which used to wait for the slow
	// capture and block every capture behind it.
	gc := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	if err := gc.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	octx, ocancel := context.WithTimeout(ctx, 90*time.Second)
	ocp, err := other.Checkpoint(octx, "while another captures")
	if err == nil {
		ocp, err = other.GetCheckpoint(octx, ocp.ID, true) // stored first
	}
	ocancel()
	if err != nil || ocp.StoreTime == nil || ocp.Health != api.HealthOK {
		t.Fatalf("another sandbox's checkpoint, stored and verified while a store runs long: %+v %v", ocp, err)
	}
	if background {
		off = h.logSize()
		go func() {
			c, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			_, err := slow.GetCheckpoint(c, scp.ID, true)
			slowDone <- err
		}()
		h.waitLog(t, off, "waiting for the store of the sandbox's checkpoint in progress", 90*time.Second)
	}
	dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
	err = slow.Delete(dctx)
	dcancel()
	if err != nil {
		t.Fatalf("delete of the sandbox whose store runs long: %v", err)
	}
	select {
	case err := <-slowDone:
		if background {
			wantCode(t, err, api.CodeConflict) // its sandbox was deleted during the store
		} else if err == nil {
			t.Fatal("the checkpoint cancelled by the delete succeeded")
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the call waiting for the cancelled store did not answer")
	}
	h.restartWith(t)

	// The sparse file itself: a checkpoint answers quickly and keeps holes.
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, sparse)
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
	cp, err := sb.Checkpoint(cctx, "sparse")
	if err == nil {
		cp, err = sb.GetCheckpoint(cctx, cp.ID, true) // stored in the blob store first
	}
	ccancel()
	if err != nil {
		t.Fatalf("checkpoint of a 1 TiB sparse file, stored and verified: %v", err)
	}
	if cp.SizeBytes < tib {
		t.Fatalf("checkpoint size %d, want the file's 1 TiB counted", cp.SizeBytes)
	}
	mustSh(t, sb, "rm /workspace/huge")
	if err := sb.Restore(ctx, cp.ID, nil); err != nil {
		t.Fatalf("restore: %v", err)
	}
	out := strings.Fields(mustSh(t, sb, "stat -c '%s %b %B' /workspace/huge; dd if=/workspace/huge bs=1 skip=549755813888 count=6 2>/dev/null"))
	if len(out) < 4 {
		t.Fatalf("stat after restore: %q", out)
	}
	size, _ := strconv.ParseInt(out[0], 10, 64)
	blocks, _ := strconv.ParseInt(out[1], 10, 64)
	bsize, _ := strconv.ParseInt(out[2], 10, 64)
	if size != tib || out[3] != "middle" {
		t.Fatalf("restored file: size %d, data %q; want 1 TiB, \"middle\"", size, out[3])
	}
	// gVisor reports a file's blocks from its size; the host's layer says
	// whether it is sparse.
	t.Logf("restored file in the guest: %d blocks of %d bytes", blocks, bsize)
	// On the host too, the restored layer's file is sparse.
	var hosts []string
	for _, pat := range []string{"*", "*/*", "*/*/*"} {
		m, _ := filepath.Glob(filepath.Join(h.dataDir, pat, sb.ID, "upper", "workspace", "huge"))
		hosts = append(hosts, m...)
	}
	if len(hosts) == 0 {
		t.Fatalf("the restored layer's file is not under %s", h.dataDir)
	}
	for _, p := range hosts {
		var hst syscall.Stat_t
		if err := syscall.Stat(p, &hst); err != nil {
			t.Fatal(err)
		}
		if hst.Size != tib || hst.Blocks*512 > 64<<20 {
			t.Fatalf("restored layer on the host: size %d, %d bytes allocated; want 1 TiB, sparse", hst.Size, hst.Blocks*512)
		}
	}
}

// TestHostileDeepTree: a tree nested deeper than PATH_MAX on the host
// neither breaks the sandbox's checkpoints, restores and snapshots, nor
// shows host paths in errors.
func TestHostileDeepTree(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	// Two chains of 700 levels of "dd/", the second moved to the bottom of
	// the first: more than 4200 bytes of path below the layer (gVisor's
	// gofer cannot make a path longer than the host's PATH_MAX, but it can
	// move a tree to where its paths are).
	mustSh(t, sb, `set -e; mk() { i=0; while [ $i -lt 700 ]; do mkdir dd; cd dd; i=$((i+1)); done; }
		cd /workspace; mkdir c3; cd c3; mk; echo deep-leaf > leaf
		cd /workspace; mkdir c2; cd c2; mk; mv /workspace/c3 ./c3`)
	deep := []string{"c2"}
	for i := 0; i < 700; i++ {
		deep = append(deep, "dd")
	}
	deep = append(deep, "c3")
	for i := 0; i < 700; i++ {
		deep = append(deep, "dd")
	}
	// The leaf is read on the host, beneath the layer's directory fd (a
	// freshly booted gVisor cannot walk deeper than PATH_MAX itself).
	check := func(what string) {
		t.Helper()
		var uppers []string
		for _, pat := range []string{"*", "*/*", "*/*/*"} {
			m, _ := filepath.Glob(filepath.Join(h.dataDir, pat, sb.ID, "upper"))
			uppers = append(uppers, m...)
		}
		if len(uppers) != 1 {
			t.Fatalf("%s: layer of %s: %v", what, sb.ID, uppers)
		}
		fd, err := unix.Open(filepath.Join(uppers[0], "workspace"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range deep {
			next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
			unix.Close(fd)
			if err != nil {
				t.Fatalf("%s: level %d of the deep tree: %v", what, i, err)
			}
			fd = next
		}
		lf, err := unix.Openat(fd, "leaf", unix.O_RDONLY|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("%s: the deep leaf: %v", what, err)
		}
		buf := make([]byte, 64)
		n, _ := unix.Read(lf, buf)
		unix.Close(lf)
		if string(buf[:n]) != "deep-leaf\n" {
			t.Fatalf("%s: the deep leaf reads %q", what, buf[:n])
		}
		if out := mustSh(t, sb, "ls /workspace"); !strings.Contains(out, "c2") {
			t.Fatalf("%s: /workspace lists %q", what, out)
		}
	}
	if n := len(strings.Join(deep, "/")); n <= 4096 {
		t.Fatalf("the tree's path is only %d bytes", n)
	}
	check("as built")
	cp, err := sb.Checkpoint(ctx, "deep")
	noHostPath(t, "checkpoint of a deep tree", err)
	if err != nil {
		t.Fatalf("checkpoint of a deep tree: %v", err)
	}
	mustSh(t, sb, "echo later > /workspace/later")
	if _, err := sb.Checkpoint(ctx, "deep again"); err != nil {
		noHostPath(t, "second checkpoint", err)
		t.Fatalf("second checkpoint of a deep tree: %v", err)
	}
	mustSh(t, sb, "mv /workspace/c2 /workspace/gone") // rm -rf cannot: the path is too long in the guest too
	if err := sb.Restore(ctx, cp.ID, nil); err != nil {
		noHostPath(t, "restore", err)
		t.Fatalf("restore of a deep tree: %v", err)
	}
	check("after restore")
	sn, err := sb.Snapshot(ctx, api.SnapshotRequest{})
	if err != nil {
		noHostPath(t, "snapshot", err)
		t.Fatalf("snapshot of a deep tree: %v", err)
	}
	check("after snapshot")
	if err := h.c.Snapshots.Delete(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	diff, err := sb.Diff(ctx, cp.ID, "live")
	if err != nil {
		noHostPath(t, "diff", err)
		t.Fatalf("diff of a deep tree: %v", err)
	}
	_ = diff
}
