package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/cluster"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store/postgres"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestMembership: a node joins and heartbeats its capacity; another data
// dir cannot take its name while it lives; a restart on the same data dir
// takes it over at once, and the old process's next heartbeat finds itself
// fenced; a clean leave shows the node stopped.
func TestMembership(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	sandboxes := 4
	cfg := cluster.Config{Name: "n1", URL: "http://127.0.0.1:7070", DataDir: dir, Version: "test", LeaseTTL: 4 * time.Second,
		Capacity: func(context.Context) api.NodeCapacity { return api.NodeCapacity{CPUs: 2, Sandboxes: sandboxes} }}
	first, err := cluster.Join(ctx, st, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	sandboxes = 5
	if err := first.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	nodes, err := st.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Capacity.Sandboxes != 5 || nodes[0].State != api.NodeActive {
		t.Fatalf("after a heartbeat: %+v %v", nodes, err)
	}

	other := cfg
	other.DataDir = t.TempDir()
	if _, err := cluster.Join(ctx, st, other, log); !errdefs.IsConflict(err) {
		t.Fatalf("another data dir joined as a live node's name: %v", err)
	}

	second, err := cluster.Join(ctx, st, cfg, log)
	if err != nil || second.Epoch() != first.Epoch()+1 {
		t.Fatalf("a restart on the same data dir: %v", err)
	}
	if err := first.Heartbeat(ctx); !errdefs.IsConflict(err) {
		t.Fatalf("the old process's heartbeat: %v, want fenced", err)
	}
	select {
	case <-first.Fenced():
	default:
		t.Fatal("Fenced() is not closed after a fenced heartbeat")
	}
	select {
	case <-second.Fenced():
		t.Fatal("the new process was fenced")
	default:
	}
	// The old process leaving does not end the new one's lease.
	if err := first.Leave(); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := st.ListNodes(ctx); nodes[0].State != api.NodeActive {
		t.Fatalf("a fenced process's leave stopped the node: %+v", nodes[0])
	}
	if err := second.Leave(); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := st.ListNodes(ctx); nodes[0].State != api.NodeStopped {
		t.Fatalf("after a clean leave: %+v", nodes[0])
	}
	// A node given another cluster key than the first node's is refused.
	keyed := cfg
	keyed.Name, keyed.DataDir, keyed.Key = "n2", t.TempDir(), "the-cluster-key-0123456789"
	k2, err := cluster.Join(ctx, st, keyed, log)
	if err != nil {
		t.Fatal(err)
	}
	_ = k2.Leave()
	keyed.Name, keyed.DataDir, keyed.Key = "n3", t.TempDir(), "another-cluster-key-0123456789"
	if _, err := cluster.Join(ctx, st, keyed, log); !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "SBX_CLUSTER_KEY") {
		t.Fatalf("a node with another cluster key joined: %v", err)
	}
	if err := cluster.ValidName("Node_1"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("ValidName(Node_1) = %v", err)
	}
}
