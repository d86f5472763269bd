package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
	"github.com/sbxhq/sbx/internal/blob/blobtest"
)

// TestCheckpointAgentSession is issue 3's "done when": install something
// with the image's tools, write a project, checkpoint v1, rm -rf the
// project and apt-get remove a package, restore v1 (all back), v0 (fresh),
// v1 again (back again).
func TestCheckpointAgentSession(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	// "Install" a package offline: build a .deb with dpkg-deb, install it
	// with dpkg (the sandbox has no network).
	mustSh(t, sb, `set -e
		mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/local/bin
		printf 'Package: hello-sbx\nVersion: 1.0\nArchitecture: all\nMaintainer: sbx <sbx@example.org>\nDescription: test\n' > /tmp/pkg/DEBIAN/control
		printf '#!/bin/sh\necho hello from a package\n' > /tmp/pkg/usr/local/bin/hello-sbx
		chmod 755 /tmp/pkg/usr/local/bin/hello-sbx
		dpkg-deb --build /tmp/pkg /tmp/hello.deb >/dev/null
		dpkg -i /tmp/hello.deb >/dev/null
		mkdir -p /workspace/proj && cd /workspace/proj
		printf 'def add(a, b):\n    return a + b\n' > calc.py
		git init -q && git add -A && git -c user.name=a -c user.email=a@b commit -qm init`)
	state := func() string {
		return sh(t, sb, `hello-sbx 2>&1; cat /workspace/proj/calc.py 2>&1 | head -1; git -C /workspace/proj log --oneline 2>&1 | wc -l;
			dpkg -s curl 2>/dev/null | grep -c '^Status: install ok'; command -v curl || echo no-curl`).Stdout
	}
	before := state()
	if !strings.Contains(before, "hello from a package") || !strings.Contains(before, "def add") || !strings.Contains(before, "/usr/bin/curl") {
		t.Fatalf("set-up state: %q", before)
	}
	cp, err := sb.Checkpoint(ctx, "project written")
	if err != nil {
		t.Fatal(err)
	}
	if cp.ID != "v1" || cp.Comment != "project written" || cp.SourceID != nil || cp.Health != api.HealthOK {
		t.Fatalf("checkpoint: %+v", cp)
	}
	mustSh(t, sb, "rm -rf /workspace/proj && apt-get remove -y curl >/dev/null 2>&1 && dpkg -r hello-sbx >/dev/null")
	if got := state(); got == before || strings.Contains(got, "hello from a package") || strings.Contains(got, "/usr/bin/curl") {
		t.Fatalf("the damage did not happen: %q", got)
	}
	d, err := sb.Diff(ctx, "v1", "live")
	if err != nil {
		t.Fatal(err)
	}
	if !hasChange(d.Deleted, "/workspace/proj/calc.py") || !hasChange(d.Deleted, "/usr/bin/curl") {
		t.Fatalf("diff v1..live does not show the deletions: %+v", d)
	}

	if err := sb.Restore(ctx, "v1", nil); err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateStopped {
		t.Fatalf("after restore the sandbox is %s, want stopped", sb.State)
	}
	if got := state(); got != before {
		t.Fatalf("after restore v1:\n%s\nwant:\n%s", got, before)
	}

	if err := sb.Restore(ctx, "v0", nil); err != nil {
		t.Fatal(err)
	}
	fresh := state()
	if strings.Contains(fresh, "hello from a package") || strings.Contains(fresh, "def add") || !strings.Contains(fresh, "/usr/bin/curl") {
		t.Fatalf("after restore v0 (fresh disk): %q", fresh)
	}
	if out := mustSh(t, sb, "ls -A /workspace | wc -l; hostname"); out != "0\n"+sb.Name+"\n" {
		t.Fatalf("v0 is not the fresh disk, or the name was lost: %q", out)
	}

	if err := sb.Restore(ctx, "v1", nil); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != before {
		t.Fatalf("after restore v1 again:\n%s\nwant:\n%s", got, before)
	}
	// Checkpoints after a restore name their source.
	cp2, err := sb.Checkpoint(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if cp2.ID != "v2" || cp2.SourceID == nil || *cp2.SourceID != "v1" {
		t.Fatalf("checkpoint after restoring v1: %+v", cp2)
	}
	list, err := sb.ListCheckpoints(ctx)
	if err != nil || len(list) != 3 || list[0].ID != "v2" || list[2].ID != "v0" {
		t.Fatalf("list: %+v %v", list, err)
	}
}

func hasChange(cs []api.Change, path string) bool {
	for _, c := range cs {
		if c.Path == path {
			return true
		}
	}
	return false
}

// TestCheckpointWhileRunning: a checkpoint of a running sandbox holds what
// was on the disk when asked, keeps its processes running, and restoring it
// brings back exactly that.
func TestCheckpointWhileRunning(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	// A writer that appends a line every 10 ms, before, during and after.
	mustSh(t, sb, `(i=0; while true; do i=$((i+1)); echo "line $i" >> /workspace/log; sleep 0.01; done) >/dev/null 2>&1 &`)
	time.Sleep(300 * time.Millisecond)
	cp, err := sb.Checkpoint(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	n1 := strings.TrimSpace(mustSh(t, sb, "wc -l < /workspace/log"))
	if err := sb.Restore(ctx, cp.ID, nil); err != nil {
		t.Fatal(err)
	}
	out := mustSh(t, sb, "wc -l < /workspace/log; tail -1 /workspace/log; ps -o args | grep -c 'sleep 0.01' || true")
	lines := strings.Fields(out)
	if lines[0] == n1 || lines[0] == "0" {
		t.Fatalf("restore did not go back to the checkpoint: %s lines after, %s before", lines[0], n1)
	}
	// The restored log is whole: its last line is complete.
	if !strings.HasPrefix(strings.Split(out, "\n")[1], "line ") {
		t.Fatalf("torn last line: %q", out)
	}
}

func TestCheckpointBadInput(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	_, err := sb.Checkpoint(ctx, strings.Repeat("x", 1025))
	if ae := wantCode(t, err, api.CodeInvalidArgument); !strings.HasPrefix(ae.Message, "comment") {
		t.Fatalf("message %q", ae.Message)
	}
	if _, err := sb.Checkpoint(ctx, strings.Repeat("x", 1024)); err != nil {
		t.Fatalf("a 1024-byte comment: %v", err)
	}
	for _, id := range []string{"v9", "v-1", "1", "latest", "v01"} {
		_, err := sb.GetCheckpoint(ctx, id, false)
		wantCode(t, err, api.CodeCheckpointNotFound)
		err = sb.Restore(ctx, id, nil)
		wantCode(t, err, api.CodeCheckpointNotFound)
	}
	_, err = sb.Diff(ctx, "v7", "v1")
	wantCode(t, err, api.CodeCheckpointNotFound)
	ghost := &client.Sandbox{}
	*ghost = *sb
	ghost.ID = "no-such-sandbox"
	_, err = ghost.Checkpoint(ctx, "")
	wantCode(t, err, api.CodeSandboxNotFound)

	t.Run("ConcurrentNeverInterleave", func(t *testing.T) {
		mustSh(t, sb, "dd if=/dev/urandom of=/workspace/big bs=1M count=64 2>/dev/null")
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if i%2 == 0 {
					_, errs[i] = sb.Checkpoint(ctx, "")
				} else {
					errs[i] = sb.Restore(ctx, "v1", nil)
				}
			}(i)
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, client.ErrConflict):
			default:
				t.Errorf("concurrent operation: %v", err)
			}
		}
		if ok == 0 {
			t.Fatal("every concurrent operation was refused")
		}
		list, _ := sb.ListCheckpoints(ctx)
		for i, cp := range list {
			if want := "v" + strconv.Itoa(len(list)-1-i); cp.ID != want {
				t.Fatalf("checkpoint ids are not a sequence: %v", list)
			}
		}
	})
}

// TestCheckpointVerifyAndDamage: verify rereads every chunk; a missing
// chunk makes the checkpoint damaged, and restoring it fails and leaves the
// disk as it was.
func TestCheckpointVerifyAndDamage(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "head -c 3000000 /dev/urandom > /workspace/data; echo unique-$RANDOM$RANDOM > /workspace/tag")
	cp, err := sb.Checkpoint(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sb.GetCheckpoint(ctx, cp.ID, true); err != nil || got.Health != api.HealthOK {
		t.Fatalf("verify of a whole checkpoint: %+v %v", got, err)
	}
	// Delete the chunks this checkpoint added (the newest blobs).
	removed := removeNewestBlobs(t, filepath.Join(h.dataDir, "blobs"), 3)
	if removed == 0 {
		t.Fatal("no blob to remove")
	}
	// The current disk no longer has the data either, so a restore needs
	// the missing chunks (an unchanged file would be kept as it is).
	mustSh(t, sb, "echo after > /workspace/after; echo changed > /workspace/data")
	got, err := sb.GetCheckpoint(ctx, cp.ID, true)
	if err != nil || got.Health != api.HealthDamaged {
		t.Fatalf("verify with chunks missing: %+v %v", got, err)
	}
	// A restore from the checkpoint's btrfs snapshot would not need the
	// chunks: without it, the restore is from the blob store.
	dropCheckpointSnapshot(t, h, sb.ID, cp.ID)
	err = sb.Restore(ctx, cp.ID, nil)
	wantCode(t, err, api.CodeRestoreFailed)
	if out := mustSh(t, sb, "cat /workspace/after /workspace/data"); out != "after\nchanged\n" {
		t.Fatalf("a failed restore changed the disk: %q", out)
	}
	list, _ := sb.ListCheckpoints(ctx)
	if list[0].Health != api.HealthDamaged {
		t.Fatalf("health not kept: %+v", list[0])
	}
}

// removeNewestBlobs deletes the n most recently written blob files.
func removeNewestBlobs(t *testing.T, dir string, n int) int {
	t.Helper()
	type f struct {
		p string
		m time.Time
	}
	var files []f
	filepath.Walk(filepath.Join(dir, "sha256"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > 100<<10 {
			files = append(files, f{p, fi.ModTime()})
		}
		return nil
	})
	for i := 0; i < len(files); i++ {
		for j := i + 1; j < len(files); j++ {
			if files[j].m.After(files[i].m) {
				files[i], files[j] = files[j], files[i]
			}
		}
	}
	k := 0
	for _, x := range files[:min(n, len(files))] {
		if os.Remove(x.p) == nil {
			k++
		}
	}
	return k
}

// TestCheckpointDiskFull: a checkpoint that cannot store its chunks fails
// with checkpoint_failed and lists nothing; the sandbox goes on, and a
// later checkpoint works once there is room.
func TestCheckpointDiskFull(t *testing.T) {
	tiny := t.TempDir()
	if err := syscall.Mount("tmpfs", tiny, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(tiny, syscall.MNT_DETACH) })
	d := second(t, "--pool", "0", "--blob-store", tiny)
	ctx := ctxT(t)
	sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "head -c 20000000 /dev/urandom > /workspace/big")
	off := d.logSize()
	cp, err := sb.Checkpoint(ctx, "too big")
	wantList := 1
	if snapshotCheckpoints(t, d) {
		// A btrfs snapshot: listed at once (it restores from this node),
		// its store in the blob store fails in the background.
		if err != nil || cp.ID != "v1" || cp.StoreTime != nil {
			t.Fatalf("snapshot checkpoint with a full blob store: %+v %v", cp, err)
		}
		d.waitLog(t, off, "store checkpoints in the blob store", 60*time.Second)
		if got, err := sb.GetCheckpoint(ctx, "v1", false); err != nil || got.StoreTime != nil {
			t.Fatalf("a checkpoint the blob store could not take is stored: %+v %v", got, err)
		}
		wantList = 2
	} else {
		ae := wantCode(t, err, api.CodeCheckpointFailed)
		if !strings.Contains(ae.Message, "no space left") {
			t.Logf("message: %s", ae.Message)
		}
	}
	list, err := sb.ListCheckpoints(ctx)
	if err != nil || len(list) != wantList || list[len(list)-1].ID != "v0" {
		t.Fatalf("after a failed checkpoint: %+v %v", list, err)
	}
	// What the failed checkpoint stored is gone once it has answered: it
	// must not leave the store full.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(tiny, &fs); err != nil {
		t.Fatal(err)
	}
	if free := int64(fs.Bavail) * fs.Bsize; free < 6<<20 {
		t.Fatalf("the failed checkpoint left its chunks: %d bytes free of 8 MiB", free)
	}
	mustSh(t, sb, "rm /workspace/big; echo small > /workspace/small")
	cp, err = sb.Checkpoint(ctx, "fits")
	if err != nil || cp.ID != "v"+strconv.Itoa(wantList) {
		t.Fatalf("checkpoint with room: %+v %v", cp, err)
	}
	if wantList == 2 {
		// v1 still holds 20 MB the store cannot take; v2 fits once v1's
		// snapshot is gone (a verify stores what waits before it).
		dropCheckpointSnapshot(t, d, sb.ID, "v1")
		if got, err := sb.GetCheckpoint(ctx, "v2", true); err != nil || got.StoreTime == nil || got.Health != api.HealthOK {
			t.Fatalf("v2 with room: %+v %v", got, err)
		}
	}
}

// TestCheckpointCrashes kills sbxd (SIGKILL) in the middle of a checkpoint
// and of a restore, and checks after the restart: only complete
// checkpoints are listed, the disk is the old one or the new one, whole,
// and the sandbox is not left frozen.
func TestCheckpointCrashes(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "echo one > /workspace/f; head -c 2000000 /dev/urandom > /workspace/blob")
	if _, err := sb.Checkpoint(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	// (A snapshot checkpoint stored before the crashes: the fault points
	// below are for the operations they name.)
	waitStored(t, sb, "v1")
	mustSh(t, sb, "echo two > /workspace/f")

	crash := func(point string, op func(c *client.Sandbox) error) {
		t.Helper()
		off := h.logSize()
		h.restartWith(t, "SBX_FAULTS="+point+"=60s")
		c, err := h.c.Sandboxes.Get(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		go op(c)
		h.waitLog(t, off, "fault point reached", 60*time.Second)
		h.restartWith(t) // SIGKILL, then a plain sbxd
	}

	snaps := snapshotCheckpoints(t, h)
	want := 2
	if snaps {
		// Killed while the snapshot is stored in the background: the
		// checkpoint is listed (it was recorded with its snapshot), and
		// the restarted sbxd stores it; it verifies.
		crash("ingest:captured", func(c *client.Sandbox) error { _, err := c.Checkpoint(context.Background(), "x"); return err })
		list, _ := sb.ListCheckpoints(ctx)
		if len(list) != 3 || list[0].ID != "v2" {
			t.Fatalf("a recorded snapshot checkpoint is not listed after the crash: %+v", list)
		}
		if got, err := sb.GetCheckpoint(ctx, "v2", true); err != nil || got.Health != api.HealthOK || got.StoreTime == nil {
			t.Fatalf("v2 after the crash in its store: %+v %v", got, err)
		}
		want = 3
	} else {
		// Killed while frozen... the capture is done: frozen or not, the
		// sandbox must answer after the restart.
		crash("checkpoint:captured", func(c *client.Sandbox) error { _, err := c.Checkpoint(context.Background(), "x"); return err })
		list, _ := sb.ListCheckpoints(ctx)
		if len(list) != 2 {
			t.Fatalf("an interrupted checkpoint is listed: %+v", list)
		}
	}
	if out := mustSh(t, sb, "cat /workspace/f"); out != "two\n" {
		t.Fatalf("after an interrupted checkpoint: %q", out)
	}
	crash("checkpoint:before-record", func(c *client.Sandbox) error { _, err := c.Checkpoint(context.Background(), "x"); return err })
	if list, _ := sb.ListCheckpoints(ctx); len(list) != want {
		t.Fatalf("an interrupted checkpoint is listed: %+v", list)
	}
	if snaps {
		// Its snapshot, never recorded, is gone (v0, v1, v2 keep theirs).
		if seqs := checkpointSnapshots(t, h, sb.ID); len(seqs) != want {
			t.Fatalf("snapshots after an unrecorded checkpoint: %v", seqs)
		}
	}

	// Killed after building the new layer, before the swap: the old disk.
	crash("restore:built", func(c *client.Sandbox) error { return c.Restore(context.Background(), "v1", nil) })
	if out := mustSh(t, sb, "cat /workspace/f; sha256sum /workspace/blob | cut -c1-8"); !strings.HasPrefix(out, "two\n") {
		t.Fatalf("a restore killed before its swap changed the disk: %q", out)
	}
	// Killed after the swap: the new disk, whole.
	crash("restore:swapped", func(c *client.Sandbox) error { return c.Restore(context.Background(), "v1", nil) })
	if out := mustSh(t, sb, "cat /workspace/f"); out != "one\n" {
		t.Fatalf("a restore killed after its swap: %q, want the restored disk", out)
	}
	// Nothing of the restores is left beside the layer.
	ents, _ := os.ReadDir(layerDir(h, sb.ID))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "restore-") {
			t.Fatalf("leftover %s", e.Name())
		}
	}
	ents, _ = os.ReadDir(filepath.Dir(layerDir(h, sb.ID)))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".restore-") {
			t.Fatalf("leftover subvolume %s", e.Name())
		}
	}
	if _, err := sb.Checkpoint(ctx, "after the crashes"); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointGC: deleting a sandbox frees the blobs that only its
// checkpoints used, and keeps those that others use.
func TestCheckpointGC(t *testing.T) {
	ctx := ctxT(t)
	blobs := filepath.Join(h.dataDir, "blobs")
	a := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	b, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, a, "head -c 4000000 /dev/urandom > /workspace/a")
	if _, err := a.Checkpoint(ctx, ""); err != nil {
		t.Fatal(err)
	}
	waitStored(t, a, "v1")
	before := dirSize(blobs)
	mustSh(t, b, "head -c 6000000 /dev/urandom > /workspace/b")
	if _, err := b.Checkpoint(ctx, ""); err != nil {
		t.Fatal(err)
	}
	waitStored(t, b, "v1")
	if grown := dirSize(blobs) - before; grown < 5_900_000 {
		t.Fatalf("b's checkpoint stored %d bytes", grown)
	}
	if err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for dirSize(blobs) > before+200_000 {
		if time.Now().After(deadline) {
			t.Fatalf("b's blobs were not freed: %d bytes now, %d before", dirSize(blobs), before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, err := a.GetCheckpoint(ctx, "v1", true); err != nil || got.Health != api.HealthOK {
		t.Fatalf("a's checkpoint after b's delete: %+v %v", got, err)
	}
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// TestCheckpointsOnS3: sbxd with an S3-compatible blob store (a real
// versitygw) takes and restores checkpoints.
func TestCheckpointsOnS3(t *testing.T) {
	srv := blobtest.StartS3(t)
	bucket := srv.CreateBucket(t)
	d := secondEnv(t, []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey},
		"--pool", "0", "--blob-store", "s3://"+bucket+"/sbx?endpoint="+srv.Endpoint)
	ctx := ctxT(t)
	sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "mkdir -p /workspace/p && head -c 1500000 /dev/urandom > /workspace/p/r && echo kept > /workspace/p/t")
	sum := mustSh(t, sb, "sha256sum /workspace/p/r")
	if _, err := sb.Checkpoint(ctx, "on s3"); err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "rm -rf /workspace/p")
	if err := sb.Restore(ctx, "v1", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "sha256sum /workspace/p/r"); got != sum {
		t.Fatalf("restored from S3: %q, want %q", got, sum)
	}
	if got, err := sb.GetCheckpoint(ctx, "v1", true); err != nil || got.Health != api.HealthOK {
		t.Fatalf("verify on S3: %+v %v", got, err)
	}
	// Without its local snapshot, the restore reads S3.
	dropCheckpointSnapshot(t, d, sb.ID, "v1")
	mustSh(t, sb, "rm -rf /workspace/p")
	if err := sb.Restore(ctx, "v1", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "sha256sum /workspace/p/r"); got != sum {
		t.Fatalf("restored from S3: %q, want %q", got, sum)
	}
}
