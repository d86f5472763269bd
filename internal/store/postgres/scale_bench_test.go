package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/postgres"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
)

// The scale of the benchmarks below (docs/scale.md): a cluster of
// scaleNodes nodes and scaleSandboxes sandbox records, scaleWaiting of
// them suspended on one event key.
const (
	scaleNodes     = 50
	scaleSandboxes = 10000
	scaleWaiting   = 100
)

// scaleStore is a store with the benchmarks' records, made once per run.
func scaleStore(b *testing.B) *postgres.Store {
	b.Helper()
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for i := range scaleNodes {
		n := &store.Node{Name: fmt.Sprintf("n%02d", i), URL: fmt.Sprintf("http://10.0.0.%d:7070", i+1), HostID: fmt.Sprint(i),
			Version: "bench", Protocol: api.ClusterProtocol,
			Capacity: api.NodeCapacity{CPUs: 32, MemoryBytes: 128 << 30, FreeMemoryBytes: int64(64+i) << 30, Sandboxes: 200,
				Images: []string{"img-base", fmt.Sprintf("img-%d", i%5)}}}
		if err := s.JoinNode(ctx, n, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	for i := range scaleSandboxes {
		sb := &store.Sandbox{ID: fmt.Sprintf("sbx_%016x", i), Name: fmt.Sprintf("s%d", i), State: api.StateRunning,
			Image: "default", ImageID: "img-base", CPUs: 1, MemoryMB: 1024, Node: fmt.Sprintf("n%02d", i%scaleNodes),
			Labels: map[string]string{"team": fmt.Sprint(i % 7)}, Owner: fmt.Sprintf("key_%d", i%20)}
		if i < scaleWaiting {
			sb.State, sb.WakeOn, sb.SuspendSnapshot = api.StateSuspended, "approval", "snap_x"
		}
		if err := s.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkScale measures, over 10,000 sandbox records and 50 nodes, the
// store's part of the cluster's decisions: reading the nodes table (what
// placement decides on: one query), listing one node's sandboxes (a
// reconcile, the idle loop each second), listing every sandbox (what an
// event's post read before the wake_on index), the sandboxes waiting on
// one key (what it reads now), and the fan-out of 100 wakes to the 50
// listening nodes.
func BenchmarkScale(b *testing.B) {
	ctx := context.Background()
	s := scaleStore(b)
	b.Run("nodes-read", func(b *testing.B) {
		for b.Loop() {
			if nodes, err := s.ListNodes(ctx); err != nil || len(nodes) != scaleNodes {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-node-sandboxes", func(b *testing.B) {
		for b.Loop() {
			if l, err := s.ListSandboxes(ctx, store.SandboxFilter{Node: "n07"}); err != nil || len(l) != scaleSandboxes/scaleNodes {
				b.Fatal(len(l), err)
			}
		}
	})
	b.Run("all-sandboxes", func(b *testing.B) {
		for b.Loop() {
			if l, err := s.ListSandboxes(ctx, store.SandboxFilter{}); err != nil || len(l) != scaleSandboxes {
				b.Fatal(len(l), err)
			}
		}
	})
	b.Run("page-100-in-the-middle", func(b *testing.B) {
		mid, err := s.ListSandboxes(ctx, store.SandboxFilter{Limit: scaleSandboxes / 2})
		if err != nil {
			b.Fatal(err)
		}
		last := mid[len(mid)-1]
		after := &store.PageKey{CreateTime: last.CreateTime, ID: last.ID}
		for b.Loop() {
			if l, err := s.ListSandboxes(ctx, store.SandboxFilter{Limit: 100, After: after}); err != nil || len(l) != 100 {
				b.Fatal(len(l), err)
			}
		}
	})
	b.Run("event-waiting", func(b *testing.B) {
		for b.Loop() {
			if l, err := s.ListSandboxes(ctx, store.SandboxFilter{WakeOn: "approval"}); err != nil || len(l) != scaleWaiting {
				b.Fatal(len(l), err)
			}
		}
	})
	b.Run("wake-fanout-50-nodes", func(b *testing.B) {
		// 50 nodes listen; each of the 100 waiting sandboxes' nodes is
		// told to wake it. One op: every wake heard by its node.
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		heard := make(chan string, scaleWaiting*2)
		var ready sync.WaitGroup
		for i := range scaleNodes {
			ready.Add(1)
			var once sync.Once
			go s.ListenWakes(lctx, fmt.Sprintf("n%02d", i), func() { once.Do(ready.Done) }, func(id string) { heard <- id })
		}
		ready.Wait()
		for b.Loop() {
			for i := range scaleWaiting {
				if err := s.NotifyWake(ctx, fmt.Sprintf("n%02d", i%scaleNodes), fmt.Sprintf("sbx_%016x", i)); err != nil {
					b.Fatal(err)
				}
			}
			for range scaleWaiting {
				<-heard
			}
		}
	})
}
