package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
)

// TestPostgresStore: sbxd keeps its records in PostgreSQL (a real server
// the test starts), as a cluster's node: a sandbox and its checkpoint
// survive a SIGKILL of sbxd, and restore; a second sbxd that takes the
// node's name is refused with a clear error, and so is a database that
// cannot be reached.
func TestPostgresStore(t *testing.T) {
	url := pgtest.URL(t)
	d := secondEnv(t, []string{"SBX_CLUSTER_KEY=" + clusterKey}, "--pool", "0", "--store", url, "--node", "e2e-a", "--advertise", "http://127.0.0.1:1")
	ctx := ctxT(t)
	sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "pg", Labels: map[string]string{"store": "pg"}})
	if err != nil {
		t.Fatal(err)
	}
	// sbxd on PostgreSQL is a cluster's node: it lists itself, with the
	// sandbox and its image, and the sandbox names it.
	if sb.Node != "e2e-a" {
		t.Fatalf("the sandbox's node: %q, want e2e-a", sb.Node)
	}
	nodes, err := d.c.Nodes(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %+v %v", nodes, err)
	}
	if n := nodes[0]; n.Name != "e2e-a" || !n.Self || n.State != api.NodeActive || n.URL != "http://127.0.0.1:1" ||
		n.Epoch != 1 || n.LeaseExpireTime == nil || n.Capacity.CPUs < 1 || n.Capacity.MemoryBytes <= 0 ||
		n.Capacity.Sandboxes != 1 || len(n.Capacity.Images) != 1 {
		t.Fatalf("the node: %+v", n)
	}
	mustSh(t, sb, "mkdir -p /workspace && echo one > /workspace/f")
	if _, err := sb.Checkpoint(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "echo two > /workspace/f")

	d.restart(t, true)
	sb, err = d.c.Sandboxes.Get(ctx, "pg")
	if err != nil || sb.State != api.StateRunning || sb.Node != "e2e-a" {
		t.Fatalf("after a SIGKILL of sbxd: %+v %v", sb, err)
	}
	// The restart on the same data dir took the node over at once, at a
	// new epoch.
	if nodes, err := d.c.Nodes(ctx); err != nil || nodes[0].Epoch != 2 || nodes[0].State != api.NodeActive {
		t.Fatalf("nodes after the restart: %+v %v", nodes, err)
	}
	if got := mustSh(t, sb, "cat /workspace/f"); got != "two\n" {
		t.Fatalf("after the restart: %q", got)
	}
	if l, err := d.c.Sandboxes.List(ctx, map[string]string{"store": "pg"}); err != nil || len(l) != 1 {
		t.Fatalf("list by label: %d %v", len(l), err)
	}
	if err := sb.Restore(ctx, "v1", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "cat /workspace/f"); got != "one\n" {
		t.Fatalf("restored v1: %q", got)
	}

	refused := func(store, want string, args ...string) {
		t.Helper()
		tmp := t.TempDir()
		ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(h.binDir, "sbxd"), "--data-dir", filepath.Join(tmp, "data"),
			"--socket", filepath.Join(tmp, "s.sock"), "--netns-dir", filepath.Join(tmp, "netns"), "--pool", "0",
			"--store", store)
		cmd.Args = append(cmd.Args, args...)
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "hunter2") {
			t.Fatalf("sbxd --store %s: %v (ctx %v)\n%s\nwant an exit that says %q", store, err, ctx.Err(), out, want)
		}
	}
	// Another data dir cannot take the name of a live node.
	refused(url, "node name e2e-a is held by another sbxd", "--node", "e2e-a")
	// A node that advertises a URL needs the cluster key.
	refused(url, "needs a cluster key", "--node", "e2e-b", "--advertise", "http://127.0.0.1:2")
	refused("postgres://sbx:hunter2@/sbx?host=/nonexistent&connect_timeout=2", "cannot connect")
}

// TestPostgresOutage: PostgreSQL stops while sbxd runs on it. Requests
// that need it answer 503 unavailable with a message that names neither
// the server nor its user, and no call hangs; the sandbox's processes go on
// running; once PostgreSQL is back, sbxd answers again without a restart,
// and nothing written before the outage is lost.
func TestPostgresOutage(t *testing.T) {
	pg := pgtest.NewServer(t)
	d := second(t, "--pool", "0", "--store", pg.URL())
	ctx := ctxT(t)
	sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "pgdown"})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "mkdir -p /workspace && echo kept > /workspace/f")
	if _, err := sb.Checkpoint(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	// A process that ticks every 100 ms: its count says whether it ran
	// through the outage.
	mustSh(t, sb, "(nohup sh -c 'while :; do echo t >> /tmp/ticks; sleep 0.1; done' >/dev/null 2>&1 &); true")

	pg.Down(t)
	down := time.Now()
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"get", func(ctx context.Context) error { _, err := d.c.Sandboxes.Get(ctx, "pgdown"); return err }},
		{"list", func(ctx context.Context) error { _, err := d.c.Sandboxes.List(ctx, nil); return err }},
		{"exec", func(ctx context.Context) error { _, err := sb.Exec(ctx, "true"); return err }},
		{"checkpoint", func(ctx context.Context) error { _, err := sb.Checkpoint(ctx, "during"); return err }},
		{"create", func(ctx context.Context) error {
			_, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "during"})
			return err
		}},
	} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := call.do(cctx)
		late := cctx.Err() != nil
		cancel()
		if late {
			t.Fatalf("%s while PostgreSQL is down: no answer within 30 s", call.name)
		}
		ae := wantCode(t, err, api.CodeUnavailable)
		if !strings.Contains(ae.Message, "record store") || strings.Contains(ae.Message, "sbx@") || strings.Contains(ae.Message, "/tmp/") {
			t.Fatalf("%s while PostgreSQL is down: %q, want the store's message without its address", call.name, ae.Message)
		}
	}
	time.Sleep(2*time.Second - time.Since(down))

	pg.Up(t)
	got, err := d.c.Sandboxes.Get(ctx, "pgdown")
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("after PostgreSQL is back: %+v %v", got, err)
	}
	// The ticker ran on: at least 2 s of ticks since the outage began
	// (the count before it was a second at most).
	n := strings.TrimSpace(mustSh(t, sb, "wc -l < /tmp/ticks"))
	if k, _ := strconv.Atoi(n); k < 15 {
		t.Fatalf("the sandbox's process ticked %s times across a 2 s outage", n)
	}
	if got := mustSh(t, sb, "cat /workspace/f"); got != "kept\n" {
		t.Fatalf("file after the outage: %q", got)
	}
	cps, err := sb.ListCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cp := range cps {
		names = append(names, cp.Comment)
	}
	if len(cps) != 2 || !strings.Contains(strings.Join(names, ","), "before") {
		t.Fatalf("checkpoints after the outage: %v, want v0 and the one taken before (and none from during it)", names)
	}
	_, err = d.c.Sandboxes.Get(ctx, "during")
	wantCode(t, err, api.CodeSandboxNotFound)
	two, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "after"})
	if err != nil {
		t.Fatalf("create after the outage: %v", err)
	}
	mustSh(t, two, "true")
}

// TestFencedNodeComingBack: a node loses the database long enough for its
// lease to run out, and meanwhile another node took one of its sandboxes
// over (its record names that node), and the duty holder recorded another
// suspended, to be recovered elsewhere. When the node reaches the database
// again, it stops those two, and keeps running its own.
func TestFencedNodeComingBack(t *testing.T) {
	pg := pgtest.NewServer(t)
	d := secondEnv(t, []string{"SBX_NODE_LEASE_TTL=2s"}, "--pool", "0", "--store", pg.URL(), "--node", "fenced")
	ctx := ctxT(t)
	moved, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "moved"})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	parked, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "parked"})
	if err != nil {
		t.Fatal(err)
	}
	// Another node took "moved" over (as a takeover of a lost node's
	// sandbox records it).
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE sandboxes SET node = 'other-node' WHERE id = $1`, moved.ID); err != nil {
		t.Fatal(err)
	}
	// And "parked" was recorded suspended on its recovery point, to be
	// recovered elsewhere (as the duty holder does for a lost node's
	// running sandbox), before any node claimed it.
	if _, err := conn.Exec(ctx, `UPDATE sandboxes SET state = 'suspended', suspend_snapshot = 'snap_0', state_reason = 'recovered: node fenced was lost' WHERE id = $1`, parked.ID); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if !runscHas(t, d, moved.ID) {
		t.Fatal("the sandbox stopped before the node lost the database")
	}
	pg.Down(t)
	time.Sleep(3 * time.Second) // heartbeats fail; the 2 s lease runs out
	pg.Up(t)
	deadline := time.Now().Add(time.Minute)
	for runscHas(t, d, moved.ID) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if runscHas(t, d, moved.ID) {
		t.Fatalf("the node still runs the sandbox another node took over\n%s", notDebug(d.logPath))
	}
	for runscHas(t, d, parked.ID) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if runscHas(t, d, parked.ID) {
		t.Fatalf("the node still runs the sandbox recorded suspended for its recovery elsewhere\n%s", notDebug(d.logPath))
	}
	if got := mustSh(t, kept, "echo still"); got != "still\n" {
		t.Fatalf("its own sandbox: %q", got)
	}
}
