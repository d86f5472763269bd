package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// counterServer is a Python HTTP server whose state (a counter) lives only
// in memory.
const counterServer = `
import http.server, threading
count = 0
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global count
        with lock:
            count += 1
            c = count
        self.send_response(200); self.end_headers(); self.wfile.write(str(c).encode())
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
`

// startCounter starts the counter server detached and waits for it.
func startCounter(t *testing.T, sb *client.Sandbox) int {
	t.Helper()
	ctx := ctxT(t)
	if err := sb.WriteFile(ctx, "/workspace/server.py", strings.NewReader(counterServer), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"python3", "/workspace/server.py"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if res, _ := sb.Exec(ctx, "curl -s -o /dev/null -w %{http_code} localhost:8000/ping"); res != nil && res.Stdout == "200" {
			return pid
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the counter server did not start")
	return 0
}

// hit asks the counter server and returns its answer.
func hit(t *testing.T, sb *client.Sandbox) int {
	t.Helper()
	out := mustSh(t, sb, "curl -s localhost:8000")
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter answered %q", out)
	}
	return n
}

// TestForkCounter is issue 4's "done when", fork half: a fork answers with
// the counter as it was, diverges on its own, and the original's counter
// never moves because of the fork.
func TestForkCounter(t *testing.T) {
	ctx := ctxT(t)
	orig := newSandbox(t, api.CreateSandboxRequest{})
	startCounter(t, orig) // the readiness probe counted 1
	for i := 0; i < 3; i++ {
		hit(t, orig)
	}
	before := hit(t, orig)
	res, err := orig.Fork(ctx, api.ForkRequest{Name: "fork-" + randomHex(3), Labels: map[string]string{"role": "trial"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Copies) != 1 || res.Copies[0] == nil {
		t.Fatalf("fork: %+v", res)
	}
	cp := res.Copies[0]
	t.Cleanup(func() { cp.Delete(context.Background()) })
	if cp.Source == nil || cp.Source.Sandbox != orig.Name || cp.Labels["role"] != "trial" || cp.State != api.StateRunning {
		t.Fatalf("copy: %+v", cp.Sandbox)
	}
	t.Logf("fork: original paused %d ms", res.PausedMS)
	// The copy starts where the original was, and diverges.
	if got := hit(t, cp); got != before+1 {
		t.Fatalf("copy's first answer %d, want %d", got, before+1)
	}
	for i := 0; i < 5; i++ {
		hit(t, cp)
	}
	if got := hit(t, orig); got != before+1 {
		t.Fatalf("the original answered %d after the copy counted on: the fork moved it", got)
	}
	if out := mustSh(t, cp, "hostname"); out != cp.Name+"\n" {
		t.Fatalf("copy's hostname %q", out)
	}
	// The copy's disk is its own.
	mustSh(t, cp, "echo copy-only > /workspace/mark")
	if res := sh(t, orig, "cat /workspace/mark"); res.ExitCode == 0 {
		t.Fatal("a file written in the copy appeared in the original")
	}
	// Its v0 names the original's disk.
	cps, err := cp.ListCheckpoints(ctx)
	if err != nil || len(cps) != 1 || cps[0].SourceID == nil || !strings.HasPrefix(*cps[0].SourceID, orig.Name+"/snap_") {
		t.Fatalf("copy's checkpoints: %+v %v", cps, err)
	}

	// The snapshot the fork took (stored while and after its copies
	// start) is not billable and goes with its last copy.
	var sn *api.Snapshot
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if sn, err = h.c.Snapshots.Get(ctx, res.Snapshot); err == nil {
			break
		}
	}
	if err != nil || sn.Billable {
		t.Fatalf("fork's snapshot: %+v %v", sn, err)
	}
	if err := cp.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = h.c.Snapshots.Get(ctx, res.Snapshot)
	wantCode(t, err, api.CodeSnapshotNotFound)
}

// TestSnapshotOutlivesItsSandbox is the snapshot half: a snapshot taken,
// the source deleted, a sandbox started from the snapshot serves the same
// counter.
func TestSnapshotOutlivesItsSandbox(t *testing.T) {
	ctx := ctxT(t)
	src, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Env: map[string]string{"FROM": "src"}})
	if err != nil {
		t.Fatal(err)
	}
	startCounter(t, src)
	hit(t, src)
	at := hit(t, src)
	days := 0.5
	sn, err := src.Snapshot(ctx, api.SnapshotRequest{Name: "step-3", RetentionDays: &days, Metadata: json.RawMessage(`{"step":3,"summary":"server up"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Sandbox != src.Name || sn.MemoryBytes == 0 || sn.ExpireTime == nil || !sn.Billable ||
		time.Until(*sn.ExpireTime) > 13*time.Hour || !strings.Contains(string(sn.Metadata), `"summary":"server up"`) {
		t.Fatalf("snapshot: %+v", sn)
	}
	if err := src.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	restored := newSandbox(t, api.CreateSandboxRequest{Snapshot: sn.ID})
	if restored.State != api.StateRunning || restored.Source == nil || restored.Source.Snapshot != sn.ID {
		t.Fatalf("restored: %+v", restored.Sandbox)
	}
	if got := hit(t, restored); got != at+1 {
		t.Fatalf("the restored server answered %d, want %d", got, at+1)
	}
	if out := mustSh(t, restored, "echo $FROM; hostname"); out != "src\n"+restored.Name+"\n" {
		t.Fatalf("restored env and hostname: %q", out)
	}
	got, err := h.c.Snapshots.Get(ctx, sn.ID)
	if err != nil || string(got.Metadata) != `{"step":3,"summary":"server up"}` {
		t.Fatalf("metadata: %+v %v", got, err)
	}
	// Two snapshots in a row: the second stores little.
	// Memory that must be stored once: big enough that what every snapshot
	// stores again (~2 MB of kernel state, and the pages the running
	// server touched meanwhile: 4.5 MB seen) stays under a tenth of it.
	mustSh(t, restored, "head -c 80000000 /dev/urandom > /dev/shm/noise")
	first, err := restored.Snapshot(ctx, api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first = waitSnapshotStored(t, first.ID)
	second, err := restored.Snapshot(ctx, api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	second = waitSnapshotStored(t, second.ID)
	t.Logf("snapshot of %d bytes of memory stored %d bytes; the next one %d", first.MemoryBytes, first.StoredBytes, second.StoredBytes)
	if first.StoredBytes < 75_000_000 || second.StoredBytes > first.MemoryBytes/10 {
		t.Fatalf("a second snapshot with little change stored %d bytes (first: %d)", second.StoredBytes, first.StoredBytes)
	}
}

// waitSnapshotStored waits until snapshot id's memory image is in the blob
// store (store_time set) and returns the snapshot then.
func waitSnapshotStored(t *testing.T, id string) *api.Snapshot {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sn, err := h.c.Snapshots.Get(ctxT(t), id)
		if err != nil {
			t.Fatalf("snapshot %s while waiting for its store: %v", id, err)
		}
		if sn.StoreTime != nil {
			if sn.StoreTime.Before(sn.CreateTime) {
				t.Fatalf("snapshot %s stored at %s, before it was taken (%s)", id, sn.StoreTime, sn.CreateTime)
			}
			return sn
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %s not in the blob store after 2 minutes", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSnapshotStoredInBackground: a snapshot answers before its memory
// image is in the blob store and can be started from at once; the image is
// stored in the background; a SIGKILL of sbxd in the middle of that store
// is recovered (the snapshot is stored after the restart and restores);
// with no hot images kept (hot_image_bytes 0) the stored snapshot's local
// image goes and a start from it fetches the image from the blob store.
func TestSnapshotStoredInBackground(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	startCounter(t, sb)
	at := hit(t, sb)
	sn, err := sb.Snapshot(ctx, api.SnapshotRequest{Name: "hot"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Snapshots.Delete(context.Background(), sn.ID) })
	t.Logf("snapshot answered with store_time %v, stored_bytes %d, memory_bytes %d", sn.StoreTime, sn.StoredBytes, sn.MemoryBytes)
	if sn.MemoryBytes == 0 || sn.Health != api.HealthOK {
		t.Fatalf("snapshot: %+v", sn)
	}
	// Started from at once, stored or not.
	cp := newSandbox(t, api.CreateSandboxRequest{Snapshot: sn.ID})
	if got := hit(t, cp); got != at+1 {
		t.Fatalf("the copy's counter answered %d, want %d", got, at+1)
	}
	stored := waitSnapshotStored(t, sn.ID)
	if stored.StoredBytes <= sn.StoredBytes && sn.StoreTime == nil {
		t.Fatalf("stored bytes did not grow with the memory image: %d then %d", sn.StoredBytes, stored.StoredBytes)
	}

	// SIGKILL in the middle of the store: chunks written, no record.
	off := h.logSize()
	h.restartWith(t, "SBX_FAULTS=snapshot:stored=60s")
	cut, err := sb.Snapshot(ctx, api.SnapshotRequest{Name: "cut-store"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Snapshots.Delete(context.Background(), cut.ID) })
	h.waitLog(t, off, "fault point reached", 60*time.Second)
	if got, err := h.c.Snapshots.Get(ctx, cut.ID); err != nil || got.StoreTime != nil {
		t.Fatalf("the snapshot whose store is held: %+v %v, want listed, not stored", got, err)
	}
	h.restartWith(t)
	waitSnapshotStored(t, cut.ID)
	cp2 := newSandbox(t, api.CreateSandboxRequest{Snapshot: cut.ID})
	if got := hit(t, cp2); got != at+1 {
		t.Fatalf("the copy of the recovered snapshot answered %d, want %d", got, at+1)
	}

	// No hot images kept: the image goes once stored; a start fetches it.
	h.restartWith(t, "SBX_HOT_IMAGE_BYTES=0")
	defer h.restartWith(t)
	cold, err := sb.Snapshot(ctx, api.SnapshotRequest{Name: "cold"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Snapshots.Delete(context.Background(), cold.ID) })
	waitSnapshotStored(t, cold.ID)
	hotDir := filepath.Join(h.dataDir, "snapshots", "hot", cold.ID)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(hotDir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hot image of a stored snapshot is kept with hot_image_bytes 0: %s", hotDir)
		}
	}
	cp3 := newSandbox(t, api.CreateSandboxRequest{Snapshot: cold.ID})
	if got := hit(t, cp3); got != at+1 {
		t.Fatalf("the copy started from the blob store answered %d, want %d", got, at+1)
	}
}

// TestExecAcrossSnapshot: a process started by exec that runs when a
// snapshot is taken keeps running in the source, whose stream goes on
// without a gap, and in the copy, where its output is attached by pid.
func TestExecAcrossSnapshot(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	st, err := sb.Stream(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "i=0; while [ $i -lt 30 ]; do i=$((i+1)); echo line $i; sleep 0.1; done"}})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	done := make(chan error, 1)
	go func() {
		var out strings.Builder
		code, err := st.Wait(&out, nil)
		lines = strings.Fields(strings.ReplaceAll(out.String(), "line ", "line_"))
		if err == nil && code != 0 {
			err = errors.New("exit " + strconv.Itoa(code))
		}
		done <- err
	}()
	time.Sleep(800 * time.Millisecond)
	res, err := sb.Fork(ctx, api.ForkRequest{})
	if err != nil || res.Copies[0] == nil {
		t.Fatalf("fork: %+v %v", res, err)
	}
	cp := res.Copies[0]
	t.Cleanup(func() { cp.Delete(context.Background()) })
	if err := <-done; err != nil {
		t.Fatalf("the source's stream across the fork: %v", err)
	}
	if len(lines) != 30 || lines[0] != "line_1" || lines[29] != "line_30" {
		t.Fatalf("the source's stream lost or repeated output: %v", lines)
	}
	for i, l := range lines {
		if l != "line_"+strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q", i+1, l)
		}
	}
	// In the copy the same process runs on; attach by pid from the start.
	ps, err := cp.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, p := range ps {
		if len(p.Cmd) == 3 && strings.Contains(p.Cmd[2], "line") {
			pid = p.PID
		}
	}
	if pid == 0 || st.PID != pid {
		t.Fatalf("the copy does not list the exec'd process %d: %+v", st.PID, ps)
	}
	at, err := cp.Attach(ctx, pid, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code, err := at.Wait(&out, nil)
	if err != nil || code != 0 {
		t.Fatalf("attach in the copy: %d %v", code, err)
	}
	if n := strings.Count(out.String(), "line "); n != 30 {
		t.Fatalf("the copy's process gave %d lines, want 30:\n%s", n, out.String())
	}
	_, err = cp.Attach(ctx, 99999, 0, "")
	wantCode(t, err, api.CodeProcessNotFound)
}

// TestLoopbackConnectionAcrossFork: a TCP connection open inside the
// sandbox at capture time goes on in the source and in the copy.
func TestLoopbackConnectionAcrossFork(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{})
	script := `
import socket, threading, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 9000)); srv.listen(1)
cli = socket.create_connection(("127.0.0.1", 9000)); conn, _ = srv.accept()
for i in range(40):
    cli.sendall(b"x"); assert conn.recv(1) == b"x"
    print("ok", i, flush=True); time.sleep(0.1)
`
	if err := sb.WriteFile(ctx, "/workspace/conn.py", strings.NewReader(script), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"python3", "/workspace/conn.py"}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	res, err := sb.Fork(ctx, api.ForkRequest{})
	if err != nil || res.Copies[0] == nil {
		t.Fatalf("fork: %+v %v", res, err)
	}
	cp := res.Copies[0]
	t.Cleanup(func() { cp.Delete(context.Background()) })
	for _, s := range []*client.Sandbox{sb, cp} {
		at, err := s.Attach(ctx, pid, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		code, err := at.Wait(&out, nil)
		if err != nil || code != 0 || !strings.Contains(out.String(), "ok 39") {
			t.Fatalf("%s: the connection did not survive: exit %d %v\n%s", s.Name, code, err, out.String())
		}
	}
}

func TestSnapshotBadInput(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	_, err := sb.Fork(ctx, api.ForkRequest{Count: 17})
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = sb.Fork(ctx, api.ForkRequest{Count: -1})
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = sb.Fork(ctx, api.ForkRequest{Name: "Bad_Name"})
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = sb.Fork(ctx, api.ForkRequest{Name: sb.Name})
	wantCode(t, err, api.CodeNameTaken)
	neg := -1.0
	_, err = sb.Snapshot(ctx, api.SnapshotRequest{RetentionDays: &neg})
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = sb.Snapshot(ctx, api.SnapshotRequest{Metadata: json.RawMessage(`[1,2]`)})
	wantCode(t, err, api.CodeInvalidArgument)
	big := `{"x":"` + strings.Repeat("a", 70000) + `"}`
	_, err = sb.Snapshot(ctx, api.SnapshotRequest{Metadata: json.RawMessage(big)})
	wantCode(t, err, api.CodeInvalidArgument)

	_, err = h.c.Snapshots.Get(ctx, "snap_0000000000000000")
	wantCode(t, err, api.CodeSnapshotNotFound)
	_, err = h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Snapshot: "snap_0000000000000000"})
	wantCode(t, err, api.CodeSnapshotNotFound)

	// Expired: a very short retention.
	short := 1.0 / 86400 // one second
	sn, err := sb.Snapshot(ctx, api.SnapshotRequest{RetentionDays: &short})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	_, err = h.c.Snapshots.Get(ctx, sn.ID)
	if ae := wantCode(t, err, api.CodeSnapshotNotFound); !strings.Contains(ae.Message, "expired") {
		t.Fatalf("message %q does not say it expired", ae.Message)
	}
	_, err = h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Snapshot: sn.ID})
	wantCode(t, err, api.CodeSnapshotNotFound)

	// Stopped: no processes to keep.
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = sb.Snapshot(ctx, api.SnapshotRequest{})
	if ae := wantCode(t, err, api.CodeConflict); !strings.Contains(ae.Message, "stopped") {
		t.Fatalf("message %q", ae.Message)
	}
	_, err = sb.Fork(ctx, api.ForkRequest{})
	wantCode(t, err, api.CodeConflict)

	// A volume: cannot be captured.
	vol := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Volumes: []api.Volume{{Name: "cache-" + randomHex(3), Path: "/cache"}}})
	_, err = vol.Snapshot(ctx, api.SnapshotRequest{})
	wantCode(t, err, api.CodeSandboxHasVolume)
	_, err = vol.Fork(ctx, api.ForkRequest{})
	wantCode(t, err, api.CodeSandboxHasVolume)
}

// TestVolumes: a volume is a host directory that outlives its sandbox and
// is shared by the sandboxes that mount it.
func TestVolumes(t *testing.T) {
	name := "cache-" + randomHex(3)
	a := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Volumes: []api.Volume{{Name: name, Path: "/cache"}}})
	mustSh(t, a, "echo kept > /cache/data")
	if err := a.Delete(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	b := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Volumes: []api.Volume{{Name: name, Path: "/var/cache/x"}}})
	if out := mustSh(t, b, "cat /var/cache/x/data"); out != "kept\n" {
		t.Fatalf("volume content: %q", out)
	}
}

// TestSnapshotCrashes kills sbxd while the source is paused for a snapshot
// and while a fork starts its copies; after the restart the source runs
// (not paused, its agent answering), no half snapshot is listed, and no
// copy or container is left.
func TestSnapshotCrashes(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "echo before > /workspace/f")
	before := runscIDs(t)
	for _, point := range []string{"snapshot:paused", "fork:captured"} {
		off := h.logSize()
		h.restartWith(t, "SBX_FAULTS="+point+"=60s")
		c, err := h.c.Sandboxes.Get(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		if point == "snapshot:paused" {
			go c.Snapshot(context.Background(), api.SnapshotRequest{Name: "cut"})
		} else {
			go c.Fork(context.Background(), api.ForkRequest{Name: "cut-copy-" + randomHex(2), Count: 2})
		}
		h.waitLog(t, off, "fault point reached", 60*time.Second)
		h.restartWith(t)
		if out := mustSh(t, sb, "cat /workspace/f"); out != "before\n" {
			t.Fatalf("%s: source after the crash: %q", point, out)
		}
		got, _ := h.c.Sandboxes.Get(ctx, sb.Name)
		if got.State != api.StateRunning {
			t.Fatalf("%s: source is %s", point, got.State)
		}
		sns, _ := h.c.Snapshots.List(ctx, sb.Name)
		for _, sn := range sns {
			if sn.Name == "cut" {
				t.Fatalf("%s: a half snapshot is listed: %+v", point, sn)
			}
		}
		sbs, _ := h.c.Sandboxes.List(ctx, nil)
		for _, s := range sbs {
			if strings.HasPrefix(s.Name, "cut-copy") {
				t.Fatalf("%s: a half-made copy is listed: %+v", point, s.Sandbox)
			}
		}
		for id := range runscIDs(t) {
			if !before[id] && !isWarm(t, id) {
				if _, err := h.c.Sandboxes.Get(ctx, id); err != nil {
					t.Fatalf("%s: orphan container %s", point, id)
				}
			}
		}
	}
	if _, err := os.Stat("/proc"); err != nil {
		t.Fatal(err)
	}
}

// TestForkAfterCheckpoints: disk checkpoints of a running sandbox, then a
// fork; the original keeps running with its processes. (Checkpoints that
// froze the sandbox with the host cgroup freezer made the fifth or so
// capture kill it.)
func TestForkAfterCheckpoints(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	startCounter(t, sb)
	for i := 0; i < 8; i++ {
		if _, err := sb.Checkpoint(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if got := mustSh(t, sb, "echo ok"); got != "ok\n" {
			t.Fatalf("exec after checkpoint %d: %q", i+1, got)
		}
	}
	at := hit(t, sb)
	fr, err := sb.Fork(ctx, api.ForkRequest{})
	if err != nil || len(fr.Copies) != 1 || fr.Copies[0] == nil {
		t.Fatalf("fork: %v %+v", err, fr)
	}
	t.Cleanup(func() { _ = fr.Copies[0].Delete(ctxT(t)) })
	if err := sb.Refresh(ctx); err != nil || sb.State != api.StateRunning {
		t.Fatalf("the original after the fork: %s %q, %v", sb.State, sb.StateReason, err)
	}
	if got := hit(t, sb); got != at+1 {
		t.Fatalf("the original's counter answered %d, want %d", got, at+1)
	}
}
