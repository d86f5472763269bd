package postgres_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/postgres"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
	"github.com/sbxhq/sbx/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, pgtest.URL(t)) })
}

// TestReopenKeepsRecords: a second Open of a migrated database (a restarted
// sbxd) migrates nothing and finds the records.
func TestReopenKeepsRecords(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	s := open(t, url)
	if err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_1", Name: "keep", State: "running", Image: "default", CPUs: 1, MemoryMB: 256}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, url)
	if _, err := s.GetSandbox(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentOpens: sbxd nodes starting at once on an empty database
// migrate it once (goose's advisory lock), and all of them open it.
func TestConcurrentOpens(t *testing.T) {
	url := pgtest.URL(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := postgres.Open(context.Background(), url)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenUnreachable: a server that does not answer is a clear error that
// names the database and not the password.
func TestOpenUnreachable(t *testing.T) {
	dir := t.TempDir()
	_, err := postgres.Open(context.Background(), "postgres://sbx:hunter2@/sbxdb?host="+dir+"&connect_timeout=2")
	if err == nil || !strings.Contains(err.Error(), "sbx@"+dir+"/sbxdb") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("open of a missing server: %v", err)
	}
	if _, err := postgres.Open(context.Background(), "postgres://sbx:hunter2@%zz/db"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("open of a malformed URL: %v", err)
	}
}

// TestOutage: while the server is down, store calls fail, Outage says so
// with an unavailable error that names neither the server nor its user,
// and a record lookup is not mistaken for a missing record; once the
// server is back, the pool reconnects, Outage clears and every record
// written before is there.
func TestOutage(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.NewServer(t)
	s := open(t, srv.URL())
	if err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_1", Name: "kept", State: "running", Image: "default", CPUs: 1, MemoryMB: 256}); err != nil {
		t.Fatal(err)
	}
	if err := s.Outage(); err != nil {
		t.Fatalf("outage while the server answers: %v", err)
	}

	srv.Down(t)
	_, err := s.GetSandbox(ctx, "kept")
	if err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("lookup while the server is down: %v, want a connection error", err)
	}
	o := s.Outage()
	if errdefs.Code(o) != api.CodeUnavailable || !errdefs.Public(o) {
		t.Fatalf("Outage() = %v (%s), want a public unavailable error", o, errdefs.Code(o))
	}
	if strings.Contains(o.Error(), "sbx@") || strings.Contains(o.Error(), "/tmp") {
		t.Fatalf("the outage's text names the server: %q", o)
	}
	// A caller's own cancellation during the outage is not a success.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = s.GetSandbox(cctx, "kept")
	if s.Outage() == nil {
		t.Fatal("a cancelled call ended the outage")
	}

	srv.Up(t)
	sb, err := s.GetSandbox(ctx, "kept")
	if err != nil || sb.ID != "sbx_1" {
		t.Fatalf("after the server is back: %+v %v", sb, err)
	}
	if err := s.Outage(); err != nil {
		t.Fatalf("outage after a statement succeeded: %v", err)
	}
	// A statement's own error (a taken name) is not an outage.
	err = s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_2", Name: "kept", State: "running", Image: "default", CPUs: 1, MemoryMB: 256})
	if !errors.Is(err, errdefs.ErrNameTaken) || s.Outage() != nil {
		t.Fatalf("a taken name: %v, outage %v", err, s.Outage())
	}
}

// TestNodes: the nodes table is a set of leases. A name held by a live
// node is refused to another data dir, taken over at once by the same data
// dir (a restarted sbxd) and by anyone once the lease expired; each join
// takes a new epoch and fences the last one's heartbeats; a node that left
// is stopped, one whose lease ran out is lost; a node of another cluster
// protocol is refused while a live node speaks another.
func TestNodes(t *testing.T) {
	ctx := context.Background()
	s := open(t, pgtest.URL(t))
	ttl := 2 * time.Second
	a := &store.Node{Name: "a", URL: "http://127.0.0.1:1", HostID: "host-a", Version: "v1", Protocol: 1}
	if err := s.JoinNode(ctx, a, ttl); err != nil {
		t.Fatal(err)
	}
	if a.Epoch != 1 || a.State != api.NodeActive || !a.Live {
		t.Fatalf("joined: %+v", a)
	}
	thief := &store.Node{Name: "a", URL: "http://127.0.0.1:2", HostID: "host-b", Version: "v1", Protocol: 1}
	err := s.JoinNode(ctx, thief, ttl)
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("a second data dir took a live node's name: %v", err)
	}
	restarted := &store.Node{Name: "a", URL: "http://127.0.0.1:1", HostID: "host-a", Version: "v2", Protocol: 1}
	if err := s.JoinNode(ctx, restarted, ttl); err != nil || restarted.Epoch != 2 {
		t.Fatalf("the same data dir rejoining: %+v %v", restarted, err)
	}
	if err := s.HeartbeatNode(ctx, "a", 1, api.NodeCapacity{}, ttl); !errdefs.IsConflict(err) {
		t.Fatalf("a heartbeat at a taken-over epoch: %v, want fenced", err)
	}
	cap := api.NodeCapacity{CPUs: 2, Sandboxes: 3, Images: []string{"img1"}}
	if err := s.HeartbeatNode(ctx, "a", 2, cap, ttl); err != nil {
		t.Fatal(err)
	}
	other := &store.Node{Name: "b", HostID: "host-b", Version: "v9", Protocol: 2}
	if err := s.JoinNode(ctx, other, ttl); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "protocol") {
		t.Fatalf("a node of another protocol joined: %v", err)
	}
	b := &store.Node{Name: "b", HostID: "host-b", Version: "v1", Protocol: 1}
	if err := s.JoinNode(ctx, b, ttl); err != nil {
		t.Fatal(err)
	}
	if err := s.LeaveNode(ctx, "b", b.Epoch); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 200*time.Millisecond)
	nodes, err := s.ListNodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("list: %v %v", nodes, err)
	}
	if n := nodes[0]; n.Name != "a" || n.State != api.NodeLost || n.Live || n.Capacity.Sandboxes != 3 || n.Version != "v2" {
		t.Fatalf("a, its lease run out: %+v", n)
	}
	if n := nodes[1]; n.Name != "b" || n.State != api.NodeStopped {
		t.Fatalf("b, left: %+v", n)
	}
	// Once a's lease ran out, another data dir may take the name.
	if err := s.JoinNode(ctx, thief, ttl); err != nil || thief.Epoch != 3 {
		t.Fatalf("taking over an expired name: %+v %v", thief, err)
	}
}

// TestDuty: one process of the cluster holds the duty at a time; it keeps
// it while its connection lasts, and another takes it once it is gone.
func TestDuty(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	a, b := open(t, url), open(t, url)
	if ok, err := a.HoldDuty(ctx); !ok || err != nil {
		t.Fatalf("a takes the free duty: %v %v", ok, err)
	}
	if ok, err := b.HoldDuty(ctx); ok || err != nil {
		t.Fatalf("b while a holds it: %v %v", ok, err)
	}
	if ok, _ := a.HoldDuty(ctx); !ok {
		t.Fatal("a lost the duty it holds")
	}
	a.Close()
	if ok, err := b.HoldDuty(ctx); !ok || err != nil {
		t.Fatalf("b once a is gone: %v %v", ok, err)
	}
}

// TestClaimSandbox: of two nodes that read a suspended sandbox and race
// to resume it, one claims it; the other's claim fails, even when the
// winner is the sandbox's own node (which changes no node).
func TestClaimSandbox(t *testing.T) {
	ctx := context.Background()
	s := open(t, pgtest.URL(t))
	if err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_1", Name: "s", State: api.StateSuspended, Image: "default", CPUs: 1, MemoryMB: 256, Node: "a"}); err != nil {
		t.Fatal(err)
	}
	home, _ := s.GetSandbox(ctx, "s")
	other, _ := s.GetSandbox(ctx, "s")
	if err := s.ClaimSandbox(ctx, home, "a"); err != nil || home.Node != "a" {
		t.Fatalf("the home node's claim: %v", err)
	}
	if err := s.ClaimSandbox(ctx, other, "c"); !errdefs.IsConflict(err) {
		t.Fatalf("a second claim on what it read before: %v, want a conflict", err)
	}
	fresh, _ := s.GetSandbox(ctx, "s")
	if err := s.ClaimSandbox(ctx, fresh, "c"); err != nil || fresh.Node != "c" {
		t.Fatalf("a claim on a fresh read: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, "s"); got.Node != "c" {
		t.Fatalf("after the claim: node %q", got.Node)
	}
	fresh.State = api.StateRunning
	if err := s.UpdateSandbox(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	again, _ := s.GetSandbox(ctx, "s")
	if err := s.ClaimSandbox(ctx, again, "a"); !errdefs.IsConflict(err) {
		t.Fatalf("a claim on a running sandbox: %v", err)
	}
}

// TestTakeOverSandbox: of two nodes taking over a lost node's sandbox on
// the same read, one does; and the lost node, back, writes it no more.
func TestTakeOverSandbox(t *testing.T) {
	ctx := context.Background()
	s := open(t, pgtest.URL(t))
	if err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_1", Name: "s", State: api.StateRunning, Image: "default", CPUs: 1, MemoryMB: 256, Node: "a"}); err != nil {
		t.Fatal(err)
	}
	stale, _ := s.GetSandbox(ctx, "s") // node a's copy, before it was lost
	b, _ := s.GetSandbox(ctx, "s")
	c, _ := s.GetSandbox(ctx, "s")
	seenB, seenC := b.UpdateTime, c.UpdateTime
	b.State, b.SuspendSnapshot = api.StateSuspended, "snap_b"
	if err := s.TakeOverSandbox(ctx, b, seenB); err != nil {
		t.Fatal(err)
	}
	c.State, c.SuspendSnapshot = api.StateSuspended, "snap_c"
	if err := s.TakeOverSandbox(ctx, c, seenC); !errdefs.IsConflict(err) {
		t.Fatalf("a second take-over on the same read: %v, want a conflict", err)
	}
	if got, _ := s.GetSandbox(ctx, "s"); got.SuspendSnapshot != "snap_b" {
		t.Fatalf("after the take-overs: %+v", got)
	}
	// The claim that resumes it elsewhere moves it; node a's write is refused.
	fresh, _ := s.GetSandbox(ctx, "s")
	if err := s.ClaimSandbox(ctx, fresh, "b"); err != nil {
		t.Fatal(err)
	}
	stale.StateReason = "node a writes on"
	if err := s.UpdateSandbox(ctx, stale); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "belongs to node b") {
		t.Fatalf("the lost node's update: %v, want a conflict naming node b", err)
	}
	if got, _ := s.GetSandbox(ctx, "s"); got.StateReason != "" || got.Node != "b" {
		t.Fatalf("after the lost node's write: %+v", got)
	}
	if err := s.TakeOverSandbox(ctx, &store.Sandbox{ID: "sbx_9", Name: "gone", Node: "a"}, time.Now()); !errdefs.IsNotFound(err) {
		t.Fatalf("a take-over of a deleted sandbox: %v", err)
	}
}

// TestRemoveNode: a live node, or one that sandbox records still name, is
// not removed; a gone one is, with its journal entries.
func TestRemoveNode(t *testing.T) {
	ctx := context.Background()
	s := open(t, pgtest.URL(t))
	n := &store.Node{Name: "gone", HostID: "host-g", Version: "v1", Protocol: api.ClusterProtocol}
	if err := s.JoinNode(ctx, n, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveNode(ctx, "gone"); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "live") {
		t.Fatalf("remove a live node: %v", err)
	}
	if err := s.LeaveNode(ctx, "gone", n.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_1", Name: "left", State: api.StateSuspended, Image: "default", Node: "gone"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutOp(ctx, &store.Op{ID: "op_1", Node: "gone", SandboxID: "sbx_1", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveNode(ctx, "gone"); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "1 sandboxes still name node gone (left)") {
		t.Fatalf("remove a node that a sandbox names: %v", err)
	}
	if err := s.DeleteSandbox(ctx, "sbx_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveNode(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := s.ListNodes(ctx); len(nodes) != 0 {
		t.Fatalf("after the removal: %+v", nodes)
	}
	if ops, _ := s.ListOps(ctx, "gone"); len(ops) != 0 {
		t.Fatalf("its journal after the removal: %+v", ops)
	}
	if err := s.RemoveNode(ctx, "gone"); !errdefs.IsNotFound(err) {
		t.Fatalf("remove it again: %v", err)
	}
}

// TestWakes: a wake reaches the node it is sent to, on its own channel,
// and no other; a node name that is no identifier works.
func TestWakes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := open(t, pgtest.URL(t))
	heard := map[string]chan string{}
	for _, n := range []string{"node-a", `b "quoted"; DROP TABLE nodes`} {
		ch := make(chan string, 4)
		heard[n] = ch
		ready := make(chan struct{})
		var once sync.Once
		go s.ListenWakes(ctx, n, func() { once.Do(func() { close(ready) }) }, func(id string) { ch <- id })
		<-ready
	}
	for n, id := range map[string]string{"node-a": "sbx_a", `b "quoted"; DROP TABLE nodes`: "sbx_b"} {
		if err := s.NotifyWake(ctx, n, id); err != nil {
			t.Fatal(err)
		}
	}
	for n, want := range map[string]string{"node-a": "sbx_a", `b "quoted"; DROP TABLE nodes`: "sbx_b"} {
		select {
		case got := <-heard[n]:
			if got != want {
				t.Fatalf("node %q heard %q, want %q", n, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("node %q heard nothing", n)
		}
	}
	time.Sleep(200 * time.Millisecond)
	for n, ch := range heard {
		if len(ch) != 0 {
			t.Fatalf("node %q heard another node's wake: %q", n, <-ch)
		}
	}
	if _, err := s.ListNodes(ctx); err != nil {
		t.Fatal(err)
	}
}
