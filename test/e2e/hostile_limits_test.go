package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
)

// withArgs restarts the shared sbxd with extra flags for the rest of the
// test, and without them afterwards.
func withArgs(t *testing.T, args ...string) {
	t.Helper()
	old := h.args
	h.args = append(append([]string{}, old...), args...)
	h.restart(t, false)
	t.Cleanup(func() {
		h.args = old
		h.stop()
		if err := h.start(); err != nil {
			t.Error(err)
		}
	})
}

// hostFree is the free space of the filesystem that holds the data dir.
func hostFree(t *testing.T) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(h.dataDir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// needQuota fails unless this sbxd gives sandboxes disk quotas (btrfs
// layers): the CI machine can. On the suite's pass over plain-directory
// layers (SBX_TEST_LAYERS=dir), which have no quota by design, it skips.
func needQuota(t *testing.T) *api.Health {
	t.Helper()
	if testLayers() == "dir" {
		t.Skip("disk quotas come with btrfs layers; this pass runs on plain-directory layers")
	}
	hl, err := h.c.Health(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if hl.Layers != "btrfs" || !hl.DiskQuota {
		t.Fatalf("health: layers %q disk_quota %v (%s); want btrfs layers with quotas", hl.Layers, hl.DiskQuota, hl.LayersNote)
	}
	return hl
}

// quotaError reports whether a command's output shows a quota or
// no-space error.
func quotaError(out string) bool {
	return strings.Contains(out, "Disk quota exceeded") || strings.Contains(out, "No space left")
}

// fillDisk writes up to mb MiB into path in the sandbox and returns the
// exit code and output of dd.
func fillDisk(t *testing.T, sb *client.Sandbox, path string, mb int) (int, string) {
	t.Helper()
	res := sh(t, sb, fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=%d 2>&1; r=$?; sync; exit $r", path, mb))
	return res.ExitCode, res.Stdout + res.Stderr
}

func fileSize(t *testing.T, sb *client.Sandbox, path string) int64 {
	t.Helper()
	out := strings.TrimSpace(mustSh(t, sb, "wc -c < "+path))
	n, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		t.Fatalf("size of %s: %q", path, out)
	}
	return n
}

// TestHostileDiskQuota: a guest that writes without end hits its quota
// (disk_mb, or the default) inside the sandbox; the host's disk loses no
// more than the quota; other sandboxes still write; a checkpoint and a
// restore of the full sandbox work.
func TestHostileDiskQuota(t *testing.T) {
	needQuota(t)
	withArgs(t, "--default-disk-mb", "200")
	hl := needQuota(t)
	if hl.DefaultDiskMB != 200 {
		t.Fatalf("default_disk_mb = %d, want 200", hl.DefaultDiskMB)
	}

	full := newSandbox(t, api.CreateSandboxRequest{DiskMB: 128, Network: &api.NetworkRules{}})
	if full.DiskMB != 128 {
		t.Fatalf("disk_mb = %d, want 128", full.DiskMB)
	}
	before := hostFree(t)
	code, out := fillDisk(t, full, "/root/big", 1000)
	if code == 0 || !quotaError(out) {
		t.Fatalf("dd of 1000 MiB with disk_mb 128: exit %d, want a quota or no-space error:\n%s", code, out)
	}
	size := fileSize(t, full, "/root/big")
	if size > 128<<20 || size < 64<<20 {
		t.Fatalf("the guest wrote %d bytes with a quota of 128 MiB", size)
	}
	// /tmp is on the same quota.
	if code, out := fillDisk(t, full, "/tmp/more", 100); code == 0 || !quotaError(out) {
		t.Fatalf("dd into /tmp of a full sandbox: exit %d:\n%s", code, out)
	}
	// The host lost at most the quota (and btrfs metadata), not 1000 MiB.
	if lost := before - hostFree(t); lost > 600<<20 {
		t.Fatalf("the host's free space fell by %d MiB while the guest was held to 128 MiB", lost>>20)
	}

	// The default quota holds a sandbox created without disk_mb.
	def := newSandbox(t, api.CreateSandboxRequest{Network: &api.NetworkRules{}})
	if def.DiskMB != 200 {
		t.Fatalf("disk_mb of a sandbox created without it = %d, want the default 200", def.DiskMB)
	}
	if code, out := fillDisk(t, def, "/root/big", 1000); code == 0 || !quotaError(out) {
		t.Fatalf("dd of 1000 MiB with the default quota of 200 MiB: exit %d:\n%s", code, out)
	}
	if size := fileSize(t, def, "/root/big"); size > 200<<20 {
		t.Fatalf("the guest wrote %d bytes with a default quota of 200 MiB", size)
	}

	// Another sandbox still writes.
	other := newSandbox(t, api.CreateSandboxRequest{DiskMB: 256, Network: &api.NetworkRules{}})
	if code, out := fillDisk(t, other, "/root/f", 50); code != 0 {
		t.Fatalf("another sandbox cannot write 50 MiB: exit %d:\n%s", code, out)
	}

	// A checkpoint of the full sandbox, then a restore over a changed disk.
	ctx := ctxT(t)
	cp, err := full.Checkpoint(ctx, "full")
	if err != nil {
		t.Fatalf("checkpoint of a full sandbox: %v", err)
	}
	mustSh(t, full, "rm /root/big; echo x > /root/after")
	if err := full.Restore(ctx, cp.ID, nil); err != nil {
		t.Fatalf("restore of a full sandbox: %v", err)
	}
	if got := fileSize(t, full, "/root/big"); got != size {
		t.Fatalf("after the restore /root/big has %d bytes, want %d", got, size)
	}
	if res := sh(t, full, "test -e /root/after"); res.ExitCode == 0 {
		t.Fatal("a file written after the checkpoint survived the restore")
	}
	// The quota holds again after the restore.
	if code, out := fillDisk(t, full, "/root/again", 200); code == 0 || !quotaError(out) {
		t.Fatalf("dd after the restore: exit %d (the quota must hold again):\n%s", code, out)
	}
	// A sandbox stopped with a full disk boots on a writable one: it can
	// make room (overlayfs mounts read-only when it cannot make its work
	// dir, so the quota goes on after the mount).
	if err := full.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if out := mustSh(t, full, "rm /root/big && echo room > /root/room && cat /root/room"); out != "room\n" {
		t.Fatalf("a full sandbox after a stop: %q", out)
	}
	if code, out := fillDisk(t, full, "/root/again", 200); code == 0 || !quotaError(out) {
		t.Fatalf("dd after the reboot: exit %d (the quota must hold):\n%s", code, out)
	}

	// Delete removes the sandbox's subvolume.
	id := full.ID
	if err := full.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(h.dataDir, "volume", "layers", id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the layer of a deleted sandbox: %v", err)
	}
}

// unsized hides a reader's length, so the client streams it chunked.
type unsized struct{ r io.Reader }

func (u unsized) Read(p []byte) (int, error) { return u.r.Read(p) }

// noLeftovers checks that dir in the sandbox holds nothing but want
// (names, sorted), allowing the agent a moment to remove a temp file after
// a cut upload.
func noLeftovers(t *testing.T, sb *client.Sandbox, dir string, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := strings.Join(strings.Fields(mustSh(t, sb, "ls -A "+dir+" | sort")), " ")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q after refused uploads, want %q", dir, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHostileUploadSize: file and archive uploads larger than what the
// sandbox may hold are refused with 413 too_large and leave no file.
func TestHostileUploadSize(t *testing.T) {
	needQuota(t)
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{DiskMB: 128, Network: &api.NetworkRules{}})
	mustSh(t, sb, "mkdir -p /up")
	big := bytes.Repeat([]byte("0123456789abcdef"), 200<<20/16) // 200 MiB

	// With a length: refused before a byte is written.
	err := sb.WriteFile(ctx, "/up/sized", bytes.NewReader(big), 0)
	wantCode(t, err, api.CodeTooLarge)
	// Streamed: cut at the bound.
	err = sb.WriteFile(ctx, "/up/streamed", unsized{bytes.NewReader(big)}, 0)
	wantCode(t, err, api.CodeTooLarge)
	// An archive with a length over the bound: nothing extracted.
	var tb bytes.Buffer
	writeTar(t, &tb, map[string]string{"a.txt": "small", "b.bin": string(big)})
	err = sb.Upload(ctx, "/up/tree", bytes.NewReader(tb.Bytes()))
	wantCode(t, err, api.CodeTooLarge)
	noLeftovers(t, sb, "/up", "")

	// Under the bound but past the free quota: 100 MiB are used, 60 more
	// do not fit in 128.
	if code, out := fillDisk(t, sb, "/root/used", 100); code != 0 {
		t.Fatalf("dd 100 MiB: exit %d: %s", code, out)
	}
	err = sb.WriteFile(ctx, "/up/over-free", unsized{bytes.NewReader(big[:60<<20])}, 0)
	wantCode(t, err, api.CodeTooLarge)
	noLeftovers(t, sb, "/up", "")
	// A small upload still works.
	if err := sb.WriteFile(ctx, "/up/ok", strings.NewReader("fine"), 0); err != nil {
		t.Fatalf("small upload: %v", err)
	}
	noLeftovers(t, sb, "/up", "ok")
}

// TestHostileAdmission: shapes larger than the host are refused; a burst
// of creates past max_sandboxes is refused cleanly with 429 capacity and
// leaves nothing; snapshots are capped; the sandboxes' parent cgroup is
// limited to the host less its reserve.
func TestHostileAdmission(t *testing.T) {
	ctx := ctxT(t)
	for _, req := range []api.CreateSandboxRequest{{CPUs: 64}, {MemoryMB: 64 << 10}} {
		req.Name = "t-huge-" + randomHex(3)
		_, err := h.c.Sandboxes.Create(ctx, req)
		ae := wantCode(t, err, api.CodeInvalidArgument)
		if !strings.Contains(ae.Message, "more than this host") {
			t.Errorf("refusal of %+v does not say why: %s", req, ae.Message)
		}
		if _, err := h.c.Sandboxes.Get(ctx, req.Name); !errors.Is(err, client.ErrSandboxNotFound) {
			t.Errorf("a refused create left a sandbox: %v", err)
		}
	}

	// The parent cgroup of all sandboxes keeps the host's reserve.
	hl, err := h.c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hl.Capacity == nil {
		t.Fatal("health has no capacity")
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory" + cgroupParentOf(h) + "/memory.limit_in_bytes"); err == nil {
		if got := strings.TrimSpace(string(b)); got != strconv.FormatInt(int64(hl.Capacity.MaxSandboxMemoryMB)<<20, 10) {
			t.Errorf("parent memory limit %s, want %d MiB", got, hl.Capacity.MaxSandboxMemoryMB)
		}
		q, _ := os.ReadFile("/sys/fs/cgroup/cpu" + cgroupParentOf(h) + "/cpu.cfs_quota_us")
		if got := strings.TrimSpace(string(q)); got != strconv.Itoa(int(hl.Capacity.MaxSandboxCPUs*100000)) {
			t.Errorf("parent CPU quota %s, want %g CPUs", got, hl.Capacity.MaxSandboxCPUs)
		}
	} else {
		t.Errorf("no parent memory cgroup: %v", err)
	}

	// A burst past max_sandboxes.
	existing, err := h.c.Sandboxes.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := h.c.Snapshots.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	userSnaps := 0 // forks' own snapshots do not count
	for _, sn := range snaps {
		if sn.Billable {
			userSnaps++
		}
	}
	withArgs(t, "--max-sandboxes", strconv.Itoa(len(existing)+2), "--max-snapshots", strconv.Itoa(userSnaps+1))
	hostIDs := func() map[string]bool {
		ids := runscIDs(t)
		for _, d := range []string{filepath.Join(h.dataDir, "sandboxes"), filepath.Join(h.dataDir, "volume", "layers"), filepath.Join(h.dataDir, "layers")} {
			des, _ := os.ReadDir(d)
			for _, de := range des {
				ids[de.Name()] = true
			}
		}
		return ids
	}
	before := hostIDs()
	const burst = 5
	var wg sync.WaitGroup
	errs := make([]error, burst)
	made := make([]*client.Sandbox, burst)
	for i := 0; i < burst; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			made[i], errs[i] = h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("t-burst-%d-%s", i, randomHex(2)), Image: "busybox", Network: &api.NetworkRules{}})
		}(i)
	}
	wg.Wait()
	var ok []*client.Sandbox
	refused := 0
	var why []string
	for i, err := range errs {
		if err == nil {
			ok = append(ok, made[i])
			continue
		}
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeCapacity {
			t.Fatalf("burst create %d: %v, want 429 capacity", i, err)
		}
		why = append(why, ae.Message)
		refused++
	}
	t.Cleanup(func() {
		for _, sb := range ok {
			_ = sb.Delete(context.Background())
		}
	})
	if len(ok) != 2 || refused != burst-2 {
		t.Fatalf("burst of %d creates with room for 2 (%d sandboxes before): %d made, %d refused: %q", burst, len(existing), len(ok), refused, why)
	}
	// Nothing of the refused ones is left: records, containers, dirs.
	all, err := h.c.Sandboxes.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(existing)+2 {
		t.Fatalf("%d sandboxes after the burst, want %d", len(all), len(existing)+2)
	}
	madeIDs := map[string]bool{ok[0].ID: true, ok[1].ID: true}
	for id := range hostIDs() {
		if !before[id] && !madeIDs[id] {
			t.Errorf("after the burst the host has %s, which no sandbox made by it owns", id)
		}
	}

	// One snapshot allowed, the second refused.
	if _, err := ok[0].Snapshot(ctx, api.SnapshotRequest{Name: "one"}); err != nil {
		t.Fatal(err)
	}
	_, err = ok[0].Snapshot(ctx, api.SnapshotRequest{Name: "two"})
	wantCode(t, err, api.CodeCapacity)
	after, err := h.c.Snapshots.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range after {
		if sn.Sandbox == ok[0].Name {
			_ = h.c.Snapshots.Delete(ctx, sn.ID)
		}
	}
}
