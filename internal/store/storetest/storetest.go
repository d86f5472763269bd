// Package storetest is the conformance suite that every store.Store
// implementation runs from its own tests.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// Run runs the suite; open returns a fresh, empty store for each subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("SandboxLifecycle", func(t *testing.T) { testSandboxLifecycle(t, open(t)) })
	t.Run("NameUniqueness", func(t *testing.T) { testNameUniqueness(t, open(t)) })
	t.Run("ListFilters", func(t *testing.T) { testListFilters(t, open(t)) })
	t.Run("Images", func(t *testing.T) { testImages(t, open(t)) })
	t.Run("Checkpoints", func(t *testing.T) { testCheckpoints(t, open(t)) })
	t.Run("Ops", func(t *testing.T) { testOps(t, open(t)) })
	t.Run("Snapshots", func(t *testing.T) { testSnapshots(t, open(t)) })
	t.Run("SnapshotStored", func(t *testing.T) { testSnapshotStored(t, open(t)) })
	t.Run("Suspend", func(t *testing.T) { testSuspend(t, open(t)) })
	t.Run("Events", func(t *testing.T) { testEvents(t, open(t)) })
	t.Run("TakePendingRace", func(t *testing.T) { testTakePendingRace(t, open(t)) })
	t.Run("SandboxUsage", func(t *testing.T) { testSandboxUsage(t, open(t)) })
	t.Run("Deliveries", func(t *testing.T) { testDeliveries(t, open(t)) })
	t.Run("Usage", func(t *testing.T) { testUsage(t, open(t)) })
	t.Run("StoredBytes", func(t *testing.T) { testStoredBytes(t, open(t)) })
	t.Run("LimitSuspensions", func(t *testing.T) { testLimitSuspensions(t, open(t)) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, open(t)) })
	t.Run("Owners", func(t *testing.T) { testOwners(t, open(t)) })
	t.Run("Nodes", func(t *testing.T) { testSandboxNodes(t, open(t)) })
	t.Run("Secrets", func(t *testing.T) { testSecrets(t, open(t)) })
	t.Run("Pages", func(t *testing.T) { testPages(t, open(t)) })
}

// testPages: a list read in pages (Limit, After) gives every sandbox once,
// in order of creation then id, times without a fraction of a second
// included; labels select before the limit.
func testPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	times := []time.Time{t0.Add(1500 * time.Millisecond), t0, t0.Add(time.Second), t0.Add(100 * time.Millisecond), t0, t0.Add(2 * time.Second)}
	for i, ct := range times {
		labels := map[string]string{}
		if i%2 == 0 {
			labels["even"] = "yes"
		}
		if err := s.CreateSandbox(ctx, &store.Sandbox{ID: fmt.Sprintf("sbx_%d", i), Name: fmt.Sprintf("s%d", i), State: api.StateRunning,
			Image: "default", CreateTime: ct, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"sbx_1", "sbx_4", "sbx_3", "sbx_2", "sbx_0", "sbx_5"}
	page := func(f store.SandboxFilter) []string {
		var got []string
		for {
			l, err := s.ListSandboxes(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, sb := range l {
				got = append(got, sb.ID)
			}
			if len(l) < f.Limit {
				return got
			}
			last := l[len(l)-1]
			f.After = &store.PageKey{CreateTime: last.CreateTime, ID: last.ID}
		}
	}
	if got := page(store.SandboxFilter{Limit: 2}); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("in pages of 2: %v, want %v", got, want)
	}
	if got := page(store.SandboxFilter{Limit: 4}); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("in pages of 4: %v, want %v", got, want)
	}
	if got := page(store.SandboxFilter{Limit: 1, Labels: map[string]string{"even": "yes"}}); strings.Join(got, " ") != "sbx_4 sbx_2 sbx_0" {
		t.Fatalf("even ones in pages of 1: %v", got)
	}
}

func testKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	limit := 1.5
	k := &store.Key{ID: "key_1", Name: "ci", Hash: "h1", Labels: map[string]string{"team": "a"}, DailyLimitUSD: &limit}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_2", Name: "ci", Hash: "h2"}); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("a second live key named ci: %v, want ErrNameTaken", err)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "key_2", Name: "ops", Hash: "h2", Admin: true}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"key_1", "ci"} {
		got, err := s.GetKey(ctx, q)
		if err != nil || got.ID != "key_1" || got.Labels["team"] != "a" || got.DailyLimitUSD == nil ||
			*got.DailyLimitUSD != 1.5 || got.Admin || !got.RevokeTime.IsZero() || got.CreateTime.IsZero() {
			t.Fatalf("GetKey(%q) = %+v, %v", q, got, err)
		}
	}
	if got, err := s.KeyByHash(ctx, "h2"); err != nil || got.ID != "key_2" || !got.Admin || got.DailyLimitUSD != nil {
		t.Fatalf("KeyByHash(h2) = %+v, %v", got, err)
	}
	if _, err := s.KeyByHash(ctx, "nope"); !errors.Is(err, errdefs.ErrKeyNotFound) {
		t.Fatalf("KeyByHash(nope): %v", err)
	}
	at := time.Now().UTC()
	if err := s.RevokeKey(ctx, "key_1", at); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "key_1", at); !errors.Is(err, errdefs.ErrKeyNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
	if got, err := s.KeyByHash(ctx, "h1"); err != nil || got.RevokeTime.IsZero() {
		t.Fatalf("a revoked key is found by hash, revoked: %+v %v", got, err)
	}
	if _, err := s.GetKey(ctx, "ci"); !errors.Is(err, errdefs.ErrKeyNotFound) {
		t.Fatalf("a revoked key by name: %v", err)
	}
	if got, err := s.GetKey(ctx, "key_1"); err != nil || got.RevokeTime.IsZero() {
		t.Fatalf("a revoked key by id: %+v %v", got, err)
	}
	// The name of a revoked key is free again.
	if err := s.CreateKey(ctx, &store.Key{ID: "key_3", Name: "ci", Hash: "h3"}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.ListKeys(ctx, false); err != nil || len(l) != 2 || l[0].ID != "key_2" || l[1].ID != "key_3" {
		t.Fatalf("live keys: %v %v", l, err)
	}
	if l, err := s.ListKeys(ctx, true); err != nil || len(l) != 3 {
		t.Fatalf("all keys: %v %v", l, err)
	}
}

// testSandboxNodes: a sandbox's node is kept, is not changed by an update
// (only a claim moves a sandbox: an update naming another node is a node
// writing a sandbox it does not own, refused), and selects; the recovery
// fields are kept.
func testSandboxNodes(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, node := range []string{"a", "b", "a", ""} {
		sb := &store.Sandbox{ID: fmt.Sprintf("sbx_%d", i), Name: fmt.Sprintf("s%d", i), State: api.StateRunning,
			Image: "default", CPUs: 1, MemoryMB: 256, Node: node}
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := s.GetSandbox(ctx, "s1")
	if err != nil || sb.Node != "b" {
		t.Fatalf("%+v %v", sb, err)
	}
	sb.Node = ""
	if err := s.UpdateSandbox(ctx, sb); !errdefs.IsConflict(err) {
		t.Fatalf("an update by a node that does not own the sandbox: %v, want a conflict", err)
	}
	sb.Node = "b"
	rt := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	sb.RecoveryIntervalMS, sb.RecoverySnapshot, sb.RecoveryTime = 30000, "snap_r", rt
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSandbox(ctx, sb.ID); err != nil || got.Node != "b" || got.RecoveryIntervalMS != 30000 ||
		got.RecoverySnapshot != "snap_r" || !got.RecoveryTime.Equal(rt) {
		t.Fatalf("after updates: %+v %v", got, err)
	}
	for node, want := range map[string]int{"a": 2, "b": 1, "": 4} {
		l, err := s.ListSandboxes(ctx, store.SandboxFilter{Node: node})
		if err != nil || len(l) != want {
			t.Fatalf("on node %q: %d %v, want %d", node, len(l), err, want)
		}
		if u, err := s.SandboxUsage(ctx, node); err != nil || u.Count != want || u.MemoryMB != 256*want {
			t.Fatalf("usage of node %q: %+v %v, want %d sandboxes", node, u, err, want)
		}
	}
	// An event's post reads only the suspended sandboxes waiting on its key.
	for _, id := range []string{"sbx_2", "sbx_3"} {
		sb, _ := s.GetSandbox(ctx, id)
		sb.State, sb.WakeOn = api.StateSuspended, "approval"
		if err := s.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	sb0, _ := s.GetSandbox(ctx, "sbx_0")
	sb0.WakeOn = "approval" // running: it waits on nothing
	if err := s.UpdateSandbox(ctx, sb0); err != nil {
		t.Fatal(err)
	}
	if l, err := s.ListSandboxes(ctx, store.SandboxFilter{WakeOn: "approval"}); err != nil || len(l) != 2 || l[0].ID != "sbx_2" || l[1].ID != "sbx_3" {
		t.Fatalf("waiting on approval: %v %v", l, err)
	}
	if l, err := s.ListSandboxes(ctx, store.SandboxFilter{WakeOn: "approval", Node: "a"}); err != nil || len(l) != 1 {
		t.Fatalf("waiting on approval on node a: %v %v", l, err)
	}
	// Each node recovers its own journal entries.
	for i, node := range []string{"a", "b", "a"} {
		if err := s.PutOp(ctx, &store.Op{ID: fmt.Sprintf("op_%d", i), SandboxID: "sbx_0", Node: node, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	for node, want := range map[string]int{"a": 2, "b": 1, "c": 0, "": 3} {
		ops, err := s.ListOps(ctx, node)
		if err != nil || len(ops) != want || (want > 0 && node != "" && ops[0].Node != node) {
			t.Fatalf("journal of node %q: %d %v, want %d", node, len(ops), err, want)
		}
	}
}

func testOwners(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, owner := range []string{"", "key_a", "key_b", "key_a"} {
		sb := &store.Sandbox{ID: fmt.Sprintf("sbx_%d", i), Name: fmt.Sprintf("s%d", i), State: api.StateRunning,
			Image: "default", CPUs: 1, MemoryMB: 256, Owner: owner}
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.GetSandbox(ctx, "s1"); err != nil || got.Owner != "key_a" {
		t.Fatalf("%+v %v", got, err)
	}
	ids := func(sbs []*store.Sandbox) string {
		var out []string
		for _, sb := range sbs {
			out = append(out, sb.ID)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		owners []string
		want   string
	}{{nil, "sbx_0,sbx_1,sbx_2,sbx_3"}, {[]string{"key_a"}, "sbx_1,sbx_3"}, {[]string{"", "key_b"}, "sbx_0,sbx_2"}, {[]string{}, ""}} {
		l, err := s.ListSandboxes(ctx, store.SandboxFilter{Owners: c.owners})
		if err != nil || ids(l) != c.want {
			t.Fatalf("owners %q: %s %v, want %s", c.owners, ids(l), err, c.want)
		}
	}
	sn := &store.Snapshot{ID: "snap_1", SandboxID: "sbx_1", SandboxName: "s1", Image: "default", ImageID: "x", Owner: "key_a"}
	if err := s.AddSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSnapshot(ctx, "snap_1"); err != nil || got.Owner != "key_a" {
		t.Fatalf("snapshot owner: %+v %v", got, err)
	}
	if err := s.PutImage(ctx, &store.Image{Name: "mine", ID: "i1", Digest: "d", Source: "s", Owner: "key_b"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetImage(ctx, "mine"); err != nil || got.Owner != "key_b" {
		t.Fatalf("image owner: %+v %v", got, err)
	}
	now := time.Now().UTC()
	for i, owner := range []string{"key_a", "key_b", ""} {
		if err := s.AddEvent(ctx, &store.Event{ID: fmt.Sprintf("ev_%d", i), Key: "k", Data: []byte("x"), Owner: owner}); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := s.ListEvents(ctx, store.EventQuery{Pending: true, Owners: []string{"key_b"}}); err != nil || len(l) != 1 || l[0].ID != "ev_1" {
		t.Fatalf("pending events of key_b: %v %v", l, err)
	}
	got, err := s.TakePending(ctx, "k", "sbx_1", []string{"key_a", ""}, now)
	if err != nil || len(got) != 2 || got[0].ID != "ev_0" || got[1].ID != "ev_2" || got[0].Owner != "key_a" {
		t.Fatalf("take for key_a: %v %v", got, err)
	}
	if n, _, err := s.CountEvents(ctx, store.EventQuery{Pending: true}); err != nil || n != 1 {
		t.Fatalf("key_b's event is left pending: %d %v", n, err)
	}
	if err := s.DeletePendingEvent(ctx, "ev_1", []string{"key_a"}); !errors.Is(err, errdefs.ErrEventNotFound) {
		t.Fatalf("key_a cancels key_b's event: %v", err)
	}
	if n, err := s.DeletePendingEvents(ctx, "k", []string{"key_a"}); err != nil || n != 0 {
		t.Fatalf("key_a cancels key k: %d %v", n, err)
	}
	if n, err := s.DeletePendingEvents(ctx, "k", []string{"key_b"}); err != nil || n != 1 {
		t.Fatalf("key_b cancels key k: %d %v", n, err)
	}
	d := &store.Delivery{ID: "dlv_1", SandboxID: "sbx_1", SandboxName: "s1", ArchiveDigest: "sha256:x", Chunks: []string{},
		Envelope: []byte("{}"), Digest: "sha256:e", Owner: "key_a"}
	if err := s.AddDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetDelivery(ctx, "dlv_1"); err != nil || got.Owner != "key_a" {
		t.Fatalf("delivery owner: %+v %v", got, err)
	}
}

func testSnapshots(t *testing.T, s store.Store) {
	ctx := context.Background()
	exp := time.Now().Add(time.Hour).UTC()
	sn := &store.Snapshot{ID: "snap_1", Name: "step-3", SandboxID: "sbx_1", SandboxName: "dev", Image: "default",
		ImageID: "abc", Memory: []byte(`[{"name":"pages.img"}]`), Disk: []string{"sha256:a"}, MemoryBytes: 10,
		Metadata: []byte(`{"step":3}`), ExpireTime: exp}
	if err := s.AddSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	f := &store.Snapshot{ID: "snap_2", SandboxID: "sbx_2", SandboxName: "x", Image: "default", ImageID: "abc", Fork: true}
	if err := s.AddSnapshot(ctx, f); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSnapshot(ctx, "snap_1")
	if err != nil || got.Name != "step-3" || string(got.Metadata) != `{"step":3}` || got.ExpireTime.Sub(exp).Abs() > time.Millisecond ||
		got.Disk[0] != "sha256:a" || got.State != "ready" || got.Fork {
		t.Fatalf("%+v %v", got, err)
	}
	if got, _ := s.GetSnapshot(ctx, "snap_2"); !got.Fork || got.Metadata != nil || !got.ExpireTime.IsZero() {
		t.Fatalf("fork snapshot: %+v", got)
	}
	got.State = "expired"
	if err := s.UpdateSnapshot(ctx, got); err != nil {
		t.Fatal(err)
	}
	if l, err := s.ListSnapshots(ctx, "sbx_1"); err != nil || len(l) != 1 {
		t.Fatalf("list by sandbox: %v %v", l, err)
	}
	if l, _ := s.ListSnapshots(ctx, ""); len(l) != 2 {
		t.Fatalf("list all: %v", l)
	}
	if err := s.DeleteSnapshot(ctx, "snap_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSnapshot(ctx, "snap_1"); !errors.Is(err, errdefs.ErrSnapshotNotFound) {
		t.Fatalf("%v", err)
	}
	sb := sandbox("sbx_from", "from-snap")
	sb.SourceSnapshot = "snap_2"
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListSandboxes(ctx, store.SandboxFilter{SourceSnapshot: "snap_2"}); len(l) != 1 {
		t.Fatalf("sandboxes from a snapshot: %v", l)
	}
}

func testCheckpoints(t *testing.T, s store.Store) {
	ctx := context.Background()
	sb := sandbox("sbx_cp", "cp")
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	for seq := 0; seq < 3; seq++ {
		cp := &store.Checkpoint{SandboxID: sb.ID, Seq: seq, Comment: "c", Manifest: []string{"sha256:a"}, SizeBytes: int64(seq)}
		if seq == 2 {
			cp.SourceID = "v0"
		}
		if err := s.AddCheckpoint(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddCheckpoint(ctx, &store.Checkpoint{SandboxID: sb.ID, Seq: 1, Manifest: []string{}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate seq: %v", err)
	}
	l, err := s.ListCheckpoints(ctx, sb.ID)
	if err != nil || len(l) != 3 || l[0].Seq != 2 || l[2].Seq != 0 || l[0].SourceID != "v0" || l[0].Health != "ok" {
		t.Fatalf("list (newest first): %+v %v", l, err)
	}
	if err := s.SetCheckpointHealth(ctx, sb.ID, 1, "damaged"); err != nil {
		t.Fatal(err)
	}
	cp, err := s.GetCheckpoint(ctx, sb.ID, 1)
	if err != nil || cp.Health != "damaged" || cp.Manifest[0] != "sha256:a" {
		t.Fatalf("%+v %v", cp, err)
	}
	if _, err := s.GetCheckpoint(ctx, sb.ID, 9); !errors.Is(err, errdefs.ErrCheckpointNotFound) {
		t.Fatalf("missing checkpoint: %v", err)
	}
	if cp.StoreTime.IsZero() {
		t.Fatal("a checkpoint recorded with its manifest has no store time")
	}
	// A snapshot checkpoint: recorded without a manifest, stored later.
	if err := s.AddCheckpoint(ctx, &store.Checkpoint{SandboxID: sb.ID, Seq: 3, Comment: "snap"}); err != nil {
		t.Fatal(err)
	}
	if cp, err := s.GetCheckpoint(ctx, sb.ID, 3); err != nil || !cp.StoreTime.IsZero() || len(cp.Manifest) != 0 {
		t.Fatalf("pending checkpoint: %+v %v", cp, err)
	}
	stored := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.SetCheckpointStored(ctx, &store.Checkpoint{SandboxID: sb.ID, Seq: 3, Manifest: []string{"sha256:b"},
		SizeBytes: 10, AddedBytes: 5, Files: 2, StoreTime: stored}); err != nil {
		t.Fatal(err)
	}
	cp, err = s.GetCheckpoint(ctx, sb.ID, 3)
	if err != nil || !cp.StoreTime.Equal(stored) || cp.Manifest[0] != "sha256:b" || cp.SizeBytes != 10 || cp.AddedBytes != 5 || cp.Files != 2 || cp.Comment != "snap" {
		t.Fatalf("stored checkpoint: %+v %v (want store time %v)", cp, err, stored)
	}
	if err := s.SetCheckpointStored(ctx, &store.Checkpoint{SandboxID: sb.ID, Seq: 9}); !errors.Is(err, errdefs.ErrCheckpointNotFound) {
		t.Fatalf("store of a missing checkpoint: %v", err)
	}
	if err := s.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListCheckpoints(ctx, ""); len(l) != 0 {
		t.Fatalf("checkpoints outlived their sandbox: %v", l)
	}
}

func testOps(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.PutOp(ctx, &store.Op{ID: "op1", SandboxID: "sbx_1", Kind: "restore", Data: []byte(`{"seq":1}`)}); err != nil {
		t.Fatal(err)
	}
	ops, err := s.ListOps(ctx, "")
	if err != nil || len(ops) != 1 || string(ops[0].Data) != `{"seq":1}` || ops[0].Kind != "restore" {
		t.Fatalf("%+v %v", ops, err)
	}
	if err := s.DeleteOp(ctx, "op1"); err != nil {
		t.Fatal(err)
	}
	if ops, _ := s.ListOps(ctx, ""); len(ops) != 0 {
		t.Fatalf("op not deleted: %v", ops)
	}
}

func sandbox(id, name string) *store.Sandbox {
	return &store.Sandbox{
		ID: id, Name: name, State: api.StateRunning, Image: "default", CPUs: 1.5, MemoryMB: 512,
		Env: map[string]string{"A": "1"}, Labels: map[string]string{"team": "x"},
		Network: api.NetworkRules{Internet: true, Allow: []string{"example.org"}},
	}
}

func testSandboxLifecycle(t *testing.T, s store.Store) {
	ctx := context.Background()
	sb := sandbox("sbx_0000000000000001", "alpha")
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"alpha", "sbx_0000000000000001"} {
		got, err := s.GetSandbox(ctx, key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if got.Name != "alpha" || got.CPUs != 1.5 || got.Env["A"] != "1" || got.Network.Allow[0] != "example.org" {
			t.Fatalf("get %s: record not kept: %+v", key, got)
		}
		if got.CreateTime.Sub(sb.CreateTime).Abs() > time.Millisecond {
			t.Fatalf("create time %v, want %v", got.CreateTime, sb.CreateTime)
		}
	}
	sb.State = api.StateStopped
	sb.StateReason = "oom_killed"
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetSandbox(ctx, "alpha")
	if got.State != api.StateStopped || got.StateReason != "oom_killed" {
		t.Fatalf("update not kept: %+v", got)
	}
	if err := s.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSandbox(ctx, "alpha"); !errors.Is(err, errdefs.ErrSandboxNotFound) {
		t.Fatalf("get after delete: %v, want ErrSandboxNotFound", err)
	}
	if err := s.UpdateSandbox(ctx, sb); !errors.Is(err, errdefs.ErrSandboxNotFound) {
		t.Fatalf("update after delete: %v, want ErrSandboxNotFound", err)
	}
	if err := s.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

func testNameUniqueness(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateSandbox(ctx, sandbox("sbx_a", "same")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, sandbox("sbx_b", "same")); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("second create: %v, want ErrNameTaken", err)
	}
	other := sandbox("sbx_c", "other")
	if err := s.CreateSandbox(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.Name = "same"
	if err := s.UpdateSandbox(ctx, other); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("rename onto a taken name: %v, want ErrNameTaken", err)
	}
}

func testListFilters(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := sandbox("sbx_1", "a")
	b := sandbox("sbx_2", "b")
	b.Labels = map[string]string{"team": "y", "env": "ci"}
	p := sandbox("sbx_3", "sbx_3")
	p.Pooled = true
	for _, sb := range []*store.Sandbox{a, b, p} {
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	names := func(f store.SandboxFilter) []string {
		l, err := s.ListSandboxes(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sb := range l {
			out = append(out, sb.Name)
		}
		return out
	}
	if got := names(store.SandboxFilter{}); len(got) != 2 {
		t.Fatalf("default list %v, want the 2 non-pooled", got)
	}
	if got := names(store.SandboxFilter{Labels: map[string]string{"team": "y"}}); len(got) != 1 || got[0] != "b" {
		t.Fatalf("label filter %v, want [b]", got)
	}
	if got := names(store.SandboxFilter{Labels: map[string]string{"team": "y", "env": "prod"}}); len(got) != 0 {
		t.Fatalf("two-label filter %v, want none", got)
	}
	if got := names(store.SandboxFilter{Pooled: true}); len(got) != 1 || got[0] != "sbx_3" {
		t.Fatalf("pooled list %v", got)
	}
	if got := names(store.SandboxFilter{All: true}); len(got) != 3 {
		t.Fatalf("all %v", got)
	}
	if _, err := s.GetSandbox(ctx, "sbx_3"); err != nil {
		t.Fatalf("pooled sandbox by id: %v", err)
	}
}

func testImages(t *testing.T, s store.Store) {
	ctx := context.Background()
	img := &store.Image{Name: "default", Digest: "sha256:ab", Source: "build:x", SizeBytes: 42, Env: []string{"PATH=/bin"}}
	if err := s.PutImage(ctx, img); err != nil {
		t.Fatal(err)
	}
	img.SizeBytes = 43
	if err := s.PutImage(ctx, img); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetImage(ctx, "default")
	if err != nil || got.SizeBytes != 43 || got.Env[0] != "PATH=/bin" {
		t.Fatalf("get image: %+v %v", got, err)
	}
	l, err := s.ListImages(ctx)
	if err != nil || len(l) != 1 {
		t.Fatalf("list images: %v %v", l, err)
	}
	if err := s.DeleteImage(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetImage(ctx, "default"); !errors.Is(err, errdefs.ErrImageNotFound) {
		t.Fatalf("get deleted image: %v", err)
	}
	if err := s.DeleteImage(ctx, "default"); !errors.Is(err, errdefs.ErrImageNotFound) {
		t.Fatalf("delete missing image: %v", err)
	}
}

func testSuspend(t *testing.T, s store.Store) {
	ctx := context.Background()
	sb := sandbox("sbx_0000000000000009", "sleeper")
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.State, sb.SuspendSnapshot, sb.WakeOn, sb.KeepAlive = api.StateSuspended, "snap_1", "approval-42", true
	sb.SuspendTime = time.Now().Truncate(time.Millisecond)
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SuspendSnapshot != "snap_1" || got.WakeOn != "approval-42" || !got.KeepAlive || !got.SuspendTime.Equal(sb.SuspendTime) {
		t.Fatalf("suspend fields not kept: %+v", got)
	}
	sn := &store.Snapshot{ID: "snap_1", SandboxID: sb.ID, SandboxName: sb.Name, Image: "default", ImageID: "i", Suspend: true}
	if err := s.AddSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	if g, err := s.GetSnapshot(ctx, "snap_1"); err != nil || !g.Suspend {
		t.Fatalf("snapshot suspend flag: %+v, %v", g, err)
	}
}

func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	for i, ev := range []*store.Event{
		{ID: "ev1", Key: "k", Data: []byte(`{"ok":true}`), ContentType: "application/json", ExpireTime: now.Add(time.Hour)},
		{ID: "ev2", Key: "k", Data: []byte("second"), ExpireTime: now.Add(time.Hour)},
		{ID: "ev3", Key: "k", Data: []byte("expired"), ExpireTime: now.Add(-time.Second)},
		{ID: "ev4", Key: "other", Data: []byte("x"), ExpireTime: now.Add(time.Hour)},
		{ID: "ev5", Key: "k", SandboxID: "sbx_b", Data: []byte("delivered"), DeliverTime: now},
	} {
		ev.CreateTime = now.Add(time.Duration(i) * time.Millisecond)
		if err := s.AddEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.TakePending(ctx, "k", "sbx_a", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "ev1" || got[1].ID != "ev2" || string(got[0].Data) != `{"ok":true}` || got[0].SandboxID != "sbx_a" {
		t.Fatalf("pending of k: %+v", got)
	}
	if again, _ := s.TakePending(ctx, "k", "sbx_c", nil, now); len(again) != 0 {
		t.Fatalf("events delivered twice: %+v", again)
	}
	list, err := s.ListEvents(ctx, store.EventQuery{SandboxID: "sbx_a"})
	if err != nil || len(list) != 2 || list[1].ContentType != "" || list[0].ContentType != "application/json" || list[0].DeliverTime.IsZero() {
		t.Fatalf("events of sbx_a: %+v, %v", list, err)
	}
	if n, err := s.DeleteExpiredEvents(ctx, now); err != nil || n != 1 {
		t.Fatalf("expired: %d, %v", n, err)
	}
	if err := s.DeleteEvents(ctx, "sbx_a"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListEvents(ctx, store.EventQuery{SandboxID: "sbx_a"}); len(list) != 0 {
		t.Fatalf("events after delete: %+v", list)
	}
	if list, _ := s.ListEvents(ctx, store.EventQuery{SandboxID: "sbx_b"}); len(list) != 1 {
		t.Fatalf("another sandbox's events went: %+v", list)
	}
	if left, _ := s.TakePending(ctx, "other", "sbx_a", nil, now); len(left) != 1 {
		t.Fatalf("pending of other: %+v", left)
	}

	// Pages, counts and cancelling pending events.
	for i := range 5 {
		ev := &store.Event{ID: fmt.Sprintf("p%d", i), Key: "page", Data: make([]byte, 100), CreateTime: now, ExpireTime: now.Add(time.Hour)}
		if err := s.AddEvent(ctx, ev); err != nil || ev.Seq == 0 {
			t.Fatalf("add: seq %d, %v", ev.Seq, err)
		}
	}
	if n, b, err := s.CountEvents(ctx, store.EventQuery{Pending: true, Key: "page"}); err != nil || n != 5 || b != 500 {
		t.Fatalf("count of page: %d events, %d bytes, %v", n, b, err)
	}
	if n, _, _ := s.CountEvents(ctx, store.EventQuery{}); n != 7 {
		t.Fatalf("count of all: %d", n)
	}
	var ids []string
	var after int64
	for range 10 {
		page, err := s.ListEvents(ctx, store.EventQuery{Pending: true, Key: "page", After: after, Limit: 2, MaxBytes: 150})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("page over its bounds: %d events", len(page))
		}
		for _, ev := range page {
			ids = append(ids, ev.ID)
		}
		after = page[len(page)-1].Seq
	}
	if strings.Join(ids, ",") != "p0,p1,p2,p3,p4" {
		t.Fatalf("pages: %v", ids)
	}
	if page, _ := s.ListEvents(ctx, store.EventQuery{Pending: true, Key: "page", MaxBytes: 1}); len(page) != 1 {
		t.Fatalf("a page holds at least one event: %d", len(page))
	}
	if err := s.DeletePendingEvent(ctx, "p1", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePendingEvent(ctx, "p1", nil); !errors.Is(err, errdefs.ErrEventNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if err := s.DeletePendingEvent(ctx, "ev5", nil); !errors.Is(err, errdefs.ErrEventNotFound) {
		t.Fatalf("a delivered event is not pending: %v", err)
	}
	if n, err := s.DeletePendingEvents(ctx, "page", nil); err != nil || n != 4 {
		t.Fatalf("delete the key's: %d, %v", n, err)
	}
}

// testSandboxUsage: Count is the sandboxes that are not warm; CPUs and
// MemoryMB sum those not suspended, warm ones included.
func testSandboxUsage(t *testing.T, s store.Store) {
	ctx := context.Background()
	if u, err := s.SandboxUsage(ctx, ""); err != nil || u != (store.Usage{}) {
		t.Fatalf("empty store: %+v %v", u, err)
	}
	running, suspended, warm := sandbox("sbx_1000000000000001", "a"), sandbox("sbx_1000000000000002", "b"), sandbox("sbx_1000000000000003", "sbx_1000000000000003")
	running.CPUs, running.MemoryMB = 1.5, 1000
	suspended.CPUs, suspended.MemoryMB, suspended.State = 2, 2000, api.StateSuspended
	warm.CPUs, warm.MemoryMB, warm.Pooled = 1, 100, true
	for _, sb := range []*store.Sandbox{running, suspended, warm} {
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.SandboxUsage(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Usage{Count: 2, CPUs: 2.5, MemoryMB: 1100}); u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
}

func testDeliveries(t *testing.T, s store.Store) {
	ctx := context.Background()
	if last, err := s.LastDelivery(ctx); err != nil || last != nil {
		t.Fatalf("empty chain: last %+v, %v", last, err)
	}
	d1 := &store.Delivery{ID: "dlv_1", Name: "r1", SandboxID: "sbx_1", SandboxName: "dev",
		ArchiveDigest: "sha256:aa", ArchiveBytes: 10, Chunks: []string{"sha256:c1", "sha256:c2"}, Files: 2,
		Envelope: []byte(`{"payloadType":"x"}`), Digest: "sha256:e1", Metadata: []byte(`{"k":"v"}`)}
	if err := s.AddDelivery(ctx, d1); err != nil || d1.Seq != 1 {
		t.Fatalf("add first: seq %d, %v", d1.Seq, err)
	}
	// A record that does not follow the chain's end is refused: two
	// deliveries racing cannot both follow the same record.
	for _, prev := range []string{"", "sha256:other"} {
		bad := &store.Delivery{ID: "dlv_bad", SandboxID: "sbx_1", SandboxName: "dev", Digest: "sha256:x", Previous: prev, Envelope: []byte("{}")}
		if err := s.AddDelivery(ctx, bad); !errors.Is(err, errdefs.ErrConflict) {
			t.Fatalf("previous %q: want ErrConflict, got %v", prev, err)
		}
	}
	if _, err := s.GetDelivery(ctx, "dlv_bad"); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused record was written: %v", err)
	}
	d2 := &store.Delivery{ID: "dlv_2", SandboxID: "sbx_2", SandboxName: "other", ArchiveDigest: "sha256:bb",
		Envelope: []byte(`{}`), Digest: "sha256:e2", Previous: "sha256:e1"}
	if err := s.AddDelivery(ctx, d2); err != nil || d2.Seq != 2 {
		t.Fatalf("add second: seq %d, %v", d2.Seq, err)
	}
	got, err := s.GetDelivery(ctx, "dlv_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 1 || got.Name != "r1" || got.SandboxName != "dev" || got.ArchiveBytes != 10 || got.Files != 2 ||
		strings.Join(got.Chunks, ",") != "sha256:c1,sha256:c2" || string(got.Envelope) != `{"payloadType":"x"}` ||
		got.Digest != "sha256:e1" || got.Previous != "" || string(got.Metadata) != `{"k":"v"}` || got.CreateTime.IsZero() {
		t.Fatalf("round trip: %+v", got)
	}
	if _, err := s.GetDelivery(ctx, "dlv_none"); !errdefs.IsNotFound(err) {
		t.Fatalf("missing delivery: %v", err)
	}
	all, err := s.ListDeliveries(ctx, "")
	if err != nil || len(all) != 2 || all[0].ID != "dlv_1" || all[1].ID != "dlv_2" {
		t.Fatalf("list all: %v %v", all, err)
	}
	for _, key := range []string{"sbx_2", "other"} {
		l, err := s.ListDeliveries(ctx, key)
		if err != nil || len(l) != 1 || l[0].ID != "dlv_2" {
			t.Fatalf("list %s: %v %v", key, l, err)
		}
	}
	// Deliveries outlive their sandbox.
	_ = s.CreateSandbox(ctx, sandbox("sbx_1", "dev"))
	if err := s.DeleteSandbox(ctx, "sbx_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDelivery(ctx, "dlv_1"); err != nil {
		t.Fatalf("delivery gone with its sandbox: %v", err)
	}
	if last, err := s.LastDelivery(ctx); err != nil || last == nil || last.ID != "dlv_2" {
		t.Fatalf("last: %+v %v", last, err)
	}
}

// testUsage: rows of one (sandbox, hour) add up and keep the widest
// bounds; a list selects by overlapping hour; meters are replaced and
// dropped with the rows, in one step; usage outlives its sandbox.
func testUsage(t *testing.T, s store.Store) {
	ctx := context.Background()
	h9 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	row := func(id string, hour time.Time, first, last time.Duration, cpu float64) *store.UsageRow {
		return &store.UsageRow{SandboxID: id, SandboxName: "n-" + id, KeyID: "key_" + id, Hour: hour,
			First: hour.Add(first), Last: hour.Add(last), CPUSeconds: cpu, MemoryGiBSeconds: 2 * cpu, StoredByteSeconds: 1e9 * cpu}
	}
	_ = s.CreateSandbox(ctx, sandbox("sbx_a", "a"))
	if err := s.AddUsage(ctx, []*store.UsageRow{row("sbx_a", h9, 10*time.Minute, 20*time.Minute, 1.5), row("sbx_b", h9.Add(time.Hour), 0, time.Minute, 4)},
		[]*store.UsageMeter{{SandboxID: "sbx_a", Running: true, CPUNanos: 1 << 40, Time: h9.Add(20 * time.Minute)}, {SandboxID: "", Time: h9}}, nil); err != nil {
		t.Fatal(err)
	}
	later := row("sbx_a", h9, 5*time.Minute, 30*time.Minute, 0.5)
	later.SandboxName, later.KeyID = "", ""
	if err := s.AddUsage(ctx, []*store.UsageRow{later}, []*store.UsageMeter{{SandboxID: "sbx_a", Running: false, CPUNanos: 7, Time: h9.Add(30 * time.Minute)}}, []string{""}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, "sbx_a"); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListUsage(ctx, h9.Add(59*time.Minute), h9.Add(90*time.Minute))
	if err != nil || len(got) != 2 || got[0].SandboxID != "sbx_a" || got[1].SandboxID != "sbx_b" {
		t.Fatalf("list: %+v %v", got, err)
	}
	a := got[0]
	if a.CPUSeconds != 2 || a.MemoryGiBSeconds != 4 || a.StoredByteSeconds != 2e9 || a.SandboxName != "n-sbx_a" || a.KeyID != "key_sbx_a" ||
		!a.Hour.Equal(h9) || !a.First.Equal(h9.Add(5*time.Minute)) || !a.Last.Equal(h9.Add(30*time.Minute)) {
		t.Fatalf("added row: %+v", a)
	}
	if got, _ := s.ListUsage(ctx, h9.Add(-time.Hour), h9); len(got) != 0 {
		t.Fatalf("an hour before: %+v", got)
	}
	if got, _ := s.ListUsage(ctx, h9.Add(90*time.Minute), h9.Add(3*time.Hour)); len(got) != 1 || got[0].SandboxID != "sbx_b" {
		t.Fatalf("the next hour: %+v", got)
	}
	byKey, err := s.UsageByKey(ctx, h9.Add(30*time.Minute))
	if err != nil || len(byKey) != 2 || byKey["key_sbx_a"] != (store.UsageTotals{CPUSeconds: 2, MemoryGiBSeconds: 4, StoredByteSeconds: 2e9}) ||
		byKey["key_sbx_b"].CPUSeconds != 4 {
		t.Fatalf("usage by key from the hour of 09:30: %+v %v", byKey, err)
	}
	if byKey, err := s.UsageByKey(ctx, h9.Add(90*time.Minute)); err != nil || len(byKey) != 1 || byKey["key_sbx_b"].CPUSeconds != 4 {
		t.Fatalf("usage by key from the next hour: %+v %v", byKey, err)
	}
	ms, err := s.UsageMeters(ctx)
	if err != nil || len(ms) != 1 || ms[0].SandboxID != "sbx_a" || ms[0].Running || ms[0].CPUNanos != 7 || !ms[0].Time.Equal(h9.Add(30*time.Minute)) {
		t.Fatalf("meters: %+v %v", ms, err)
	}
	// A failed transaction writes nothing: a canceled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.AddUsage(cctx, []*store.UsageRow{row("sbx_c", h9, 0, time.Minute, 1)}, nil, nil); err == nil {
		t.Fatal("add on a canceled context succeeded")
	}
	if got, _ := s.ListUsage(ctx, h9, h9.Add(time.Hour)); len(got) != 1 {
		t.Fatalf("a failed add left rows: %+v", got)
	}
}

// testStoredBytes: checkpoints' added bytes and billable snapshots'
// stored bytes add up per sandbox; a fork's own snapshot and an expired
// one do not count; snapshots count after their sandbox is deleted.
func testStoredBytes(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := sandbox("sbx_a", "a")
	a.Owner = "key_a"
	_ = s.CreateSandbox(ctx, a)
	for seq, b := range []int64{0, 100, 20} {
		if err := s.AddCheckpoint(ctx, &store.Checkpoint{SandboxID: "sbx_a", Seq: seq, Manifest: []string{"sha256:a"}, AddedBytes: b}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sn := range []*store.Snapshot{
		{ID: "snap_1", SandboxID: "sbx_a", SandboxName: "a", StoredBytes: 1000, State: "ready"},
		{ID: "snap_2", SandboxID: "sbx_a", SandboxName: "a", StoredBytes: 5000, Fork: true, State: "ready"},
		{ID: "snap_3", SandboxID: "sbx_gone", SandboxName: "gone", StoredBytes: 7, State: "ready", Owner: "key_g"},
		{ID: "snap_4", SandboxID: "sbx_gone", SandboxName: "gone", StoredBytes: 9, State: "expired"},
		{ID: "snap_5", SandboxID: "sbx_s", SandboxName: "s", StoredBytes: 3, Suspend: true, State: "ready"},
	} {
		if err := s.AddSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ListStoredBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, b := range got {
		parts = append(parts, fmt.Sprintf("%s:%s:%s:%d", b.SandboxID, b.SandboxName, b.KeyID, b.Bytes))
	}
	if s := strings.Join(parts, " "); s != "sbx_a:a:key_a:1120 sbx_gone:gone:key_g:7 sbx_s:s::3" {
		t.Fatalf("stored bytes: %s", s)
	}
}

// testLimitSuspensions: records of sandboxes a spending limit suspended
// are put, listed oldest first, marked for resume per key and deleted; a
// key's daily limit is set and cleared, and a revoked key's is not.
func testLimitSuspensions(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"sbx_b", "sbx_a", "sbx_c"} {
		key := "key_1"
		if id == "sbx_c" {
			key = "key_2"
		}
		if err := s.PutLimitSuspension(ctx, &store.LimitSuspension{SandboxID: id, KeyID: key, Time: t0.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetLimitResume(ctx, "key_1", true); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLimitSuspension(ctx, "sbx_b"); err != nil {
		t.Fatal(err)
	}
	_ = s.DeleteLimitSuspension(ctx, "sbx_none")
	got, err := s.ListLimitSuspensions(ctx)
	if err != nil || len(got) != 2 || got[0].SandboxID != "sbx_a" || !got[0].Resume || got[0].KeyID != "key_1" ||
		!got[0].Time.Equal(t0.Add(time.Minute)) || got[1].SandboxID != "sbx_c" || got[1].Resume {
		t.Fatalf("suspensions: %+v %v", got, err)
	}

	limit := 0.5
	if err := s.CreateKey(ctx, &store.Key{ID: "key_1", Name: "one", Hash: "h1", DailyLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	two := 2.0
	if err := s.SetKeyDailyLimit(ctx, "key_1", &two); err != nil {
		t.Fatal(err)
	}
	if k, err := s.GetKey(ctx, "key_1"); err != nil || k.DailyLimitUSD == nil || *k.DailyLimitUSD != 2 {
		t.Fatalf("raised limit: %+v %v", k, err)
	}
	if err := s.SetKeyDailyLimit(ctx, "key_1", nil); err != nil {
		t.Fatal(err)
	}
	if k, err := s.GetKey(ctx, "key_1"); err != nil || k.DailyLimitUSD != nil {
		t.Fatalf("cleared limit: %+v %v", k, err)
	}
	if err := s.RevokeKey(ctx, "key_1", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKeyDailyLimit(ctx, "key_1", &two); !errdefs.IsNotFound(err) {
		t.Fatalf("limit of a revoked key: %v", err)
	}
}

// testSecrets: a sandbox's secrets round-trip (create and update), and a
// sandbox without them reads back nil.
func testSecrets(t *testing.T, s store.Store) {
	ctx := context.Background()
	sb := sandbox("sbx_sec", "sec")
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSandbox(ctx, "sec"); err != nil || got.Secrets != nil {
		t.Fatalf("no secrets: %+v %v", got, err)
	}
	sb.Secrets = &store.SecretSet{CACert: []byte("PEM"), CAKey: []byte{1, 2, 3}, List: []store.StoredSecret{{
		Name: "API_TOKEN", Placeholder: "sbx-secret-00", Sealed: []byte{9, 8},
		Rules: []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}, PathPrefix: "/"}}, ValueBytes: 5,
	}}}
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "sec")
	if err != nil || got.Secrets == nil || len(got.Secrets.List) != 1 || string(got.Secrets.CACert) != "PEM" ||
		got.Secrets.List[0].Placeholder != "sbx-secret-00" || got.Secrets.List[0].Rules[0].Host != "api.test" ||
		string(got.Secrets.List[0].Sealed) != "\x09\x08" {
		t.Fatalf("%+v %v", got.Secrets, err)
	}
	sb.Secrets = nil
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "sec"); got.Secrets != nil {
		t.Fatalf("removed secrets read back: %+v", got.Secrets)
	}
}

// testTakePendingRace: sandboxes taking the pending events of one key at
// once (on several sbxd nodes) get each event exactly once.
func testTakePendingRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	const events, takers = 60, 4
	now := time.Now().UTC()
	for i := range events {
		if err := s.AddEvent(ctx, &store.Event{ID: fmt.Sprintf("ev_%03d", i), Key: "race", Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		evs []*store.Event
		err error
	}
	results := make(chan result, takers)
	for i := range takers {
		go func() {
			var all []*store.Event
			for range events / takers {
				evs, err := s.TakePending(ctx, "race", fmt.Sprintf("sbx_%d", i), nil, now)
				if err != nil {
					results <- result{err: err}
					return
				}
				all = append(all, evs...)
			}
			results <- result{evs: all}
		}()
	}
	seen := map[string]string{}
	for range takers {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, ev := range r.evs {
			if prev, ok := seen[ev.ID]; ok {
				t.Fatalf("event %s delivered to both %s and %s", ev.ID, prev, ev.SandboxID)
			}
			seen[ev.ID] = ev.SandboxID
		}
	}
	if n, _, err := s.CountEvents(ctx, store.EventQuery{Pending: true, Key: "race"}); err != nil || n+len(seen) != events {
		t.Fatalf("%d delivered and %d pending (%v), want %d in all", len(seen), n, err, events)
	}
}

// testSnapshotStored: a snapshot recorded before its memory image is in the
// blob store has no StoreTime; SetSnapshotStored records the image and the
// time, only on a ready record; one added with its image is stored.
func testSnapshotStored(t *testing.T, s store.Store) {
	ctx := context.Background()
	created := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	pending := &store.Snapshot{ID: "snap_p", SandboxID: "sbx_1", SandboxName: "s1", Image: "default", ImageID: "x",
		Disk: []string{"d1"}, MemoryBytes: 10, StoredBytes: 3, CreateTime: created}
	if err := s.AddSnapshot(ctx, pending); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSnapshot(ctx, "snap_p")
	if err != nil || !got.StoreTime.IsZero() || got.HasMemory() || got.State != "ready" {
		t.Fatalf("pending snapshot: %+v %v", got, err)
	}
	at := created.Add(30 * time.Second)
	if err := s.SetSnapshotStored(ctx, &store.Snapshot{ID: "snap_p", Memory: []byte(`[{"name":"pages.img"}]`),
		MemoryBytes: 100, StoredBytes: 40, StoreTime: at}); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetSnapshot(ctx, "snap_p")
	if err != nil || !got.StoreTime.Equal(at) || !got.HasMemory() || got.MemoryBytes != 100 || got.StoredBytes != 40 ||
		len(got.Disk) != 1 || got.SandboxName != "s1" {
		t.Fatalf("stored snapshot: %+v %v", got, err)
	}
	if err := s.SetSnapshotStored(ctx, &store.Snapshot{ID: "snap_none", Memory: []byte(`[]`)}); !errors.Is(err, errdefs.ErrSnapshotNotFound) {
		t.Fatalf("SetSnapshotStored of a missing snapshot: %v", err)
	}
	got.State = "expired"
	if err := s.UpdateSnapshot(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSnapshotStored(ctx, &store.Snapshot{ID: "snap_p", Memory: []byte(`[{"name":"x"}]`)}); !errors.Is(err, errdefs.ErrSnapshotNotFound) {
		t.Fatalf("SetSnapshotStored of an expired snapshot: %v", err)
	}
	whole := &store.Snapshot{ID: "snap_w", SandboxID: "sbx_1", SandboxName: "s1", Image: "default", ImageID: "x",
		Memory: []byte(`[{"name":"pages.img"}]`), CreateTime: created}
	if err := s.AddSnapshot(ctx, whole); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSnapshot(ctx, "snap_w"); err != nil || !got.StoreTime.Equal(created) {
		t.Fatalf("a snapshot added with its image: %+v %v", got, err)
	}
}
