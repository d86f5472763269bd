package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// TestPickRecoveryPoint: the most recent durable point wins; a checkpoint
// counts once stored and not damaged; a recovery snapshot wins a tie, and
// counts only when stored whole.
func TestPickRecoveryPoint(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	cp := func(seq int, at time.Time, stored bool, health string) *store.Checkpoint {
		c := &store.Checkpoint{Seq: seq, CreateTime: at, Health: health}
		if stored {
			c.StoreTime, c.Manifest = at, []string{"ab"}
		}
		return c
	}
	snapAt := func(at time.Time) *store.Sandbox {
		return &store.Sandbox{RecoverySnapshot: "snap_r", RecoveryTime: at}
	}
	for _, tc := range []struct {
		name     string
		sb       *store.Sandbox
		haveSnap bool
		cps      []*store.Checkpoint
		want     string // "snap", "vN" or "none"
	}{
		{"nothing", &store.Sandbox{}, false, nil, "none"},
		{"v0 only", &store.Sandbox{}, false, []*store.Checkpoint{cp(0, t0, true, api.HealthOK)}, "v0"},
		{"the newest stored checkpoint", &store.Sandbox{}, false, []*store.Checkpoint{
			cp(0, t0, true, api.HealthOK), cp(1, t0.Add(time.Minute), true, api.HealthOK), cp(2, t0.Add(2*time.Minute), false, api.HealthOK)}, "v1"},
		{"a damaged checkpoint does not count", &store.Sandbox{}, false, []*store.Checkpoint{
			cp(0, t0, true, api.HealthOK), cp(1, t0.Add(time.Minute), true, api.HealthDamaged)}, "v0"},
		{"a snapshot newer than the checkpoints", snapAt(t0.Add(90 * time.Second)), true, []*store.Checkpoint{
			cp(0, t0, true, api.HealthOK), cp(1, t0.Add(time.Minute), true, api.HealthOK)}, "snap"},
		{"a checkpoint newer than the snapshot", snapAt(t0.Add(30 * time.Second)), true, []*store.Checkpoint{
			cp(0, t0, true, api.HealthOK), cp(1, t0.Add(time.Minute), true, api.HealthOK)}, "v1"},
		{"a tie goes to the snapshot", snapAt(t0.Add(time.Minute)), true, []*store.Checkpoint{
			cp(1, t0.Add(time.Minute), true, api.HealthOK)}, "snap"},
		{"a snapshot not stored whole does not count", snapAt(t0.Add(time.Hour)), false, []*store.Checkpoint{
			cp(0, t0, true, api.HealthOK)}, "v0"},
		{"a snapshot alone", snapAt(t0), true, nil, "snap"},
	} {
		p, ok := pickRecoveryPoint(tc.sb, tc.haveSnap, tc.cps)
		got := "none"
		switch {
		case ok && p.snapshot != "":
			got = "snap"
		case ok:
			got = CheckpointID(p.cp.Seq)
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestRecoveryIntervalRefused: a single sbxd takes no recovery snapshots
// (no other node could use one): the field is refused, whatever the
// value, with its name; 0 is accepted.
func TestRecoveryIntervalRefused(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	for _, ms := range []int64{1, 4999, MinRecoveryIntervalMS, MaxRecoveryIntervalMS + 1} {
		_, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "r", RecoveryIntervalMS: ms}})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "recovery_interval_ms") {
			t.Fatalf("recovery_interval_ms %d: %v, want invalid_argument naming the field", ms, err)
		}
	}
	sb := f.create(t, "r")
	zero := int64(0)
	if _, err := f.e.Update(ctx, sb.Name, api.UpdateSandboxRequest{RecoveryIntervalMS: &zero}); err != nil {
		t.Fatal(err)
	}
	ms := int64(MinRecoveryIntervalMS)
	if _, err := f.e.Update(ctx, sb.Name, api.UpdateSandboxRequest{RecoveryIntervalMS: &ms}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("update on a single sbxd: %v", err)
	}
}
