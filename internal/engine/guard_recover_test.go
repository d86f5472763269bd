package engine

import (
	"context"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestFakeGuardCutByRestart: a guarded exec with rollback_on_failure whose
// command a restart of sbxd cut (nobody got its exit) is rolled back by
// the next start; one that finished is not, and leaves no journal entry.
func TestFakeGuardCutByRestart(t *testing.T) {
	ctx := context.Background()
	req := api.ExecRequest{Cmd: []string{"sh", "-c", "echo after > f"}, Undo: api.UndoCheckpoint, RollbackOnFailure: true}
	for _, tc := range []struct {
		name     string
		finished bool
		want     string
	}{
		{"cut by the restart", false, "before"},
		{"finished", true, "after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFakeEngine(t, newFakeDataDir(t), Config{})
			f.create(t, "a")
			f.writeFile(t, "a", "/f", "before")
			u, err := f.e.TakeUndo(ctx, "a", req)
			if err != nil {
				t.Fatal(err)
			}
			f.writeFile(t, "a", "/f", "after") // what the command did
			if tc.finished {
				if err := f.e.FinishUndo(ctx, "a", u, true, 0); err != nil {
					t.Fatal(err)
				}
				if ops, _ := f.st.ListOps(ctx, ""); len(ops) != 0 {
					t.Fatalf("a finished guarded exec left %d journal entries", len(ops))
				}
			}
			f.e.Close() // sbxd goes away with the command running
			g := startFakeEngine(t, f.dir, Config{})
			if got := g.readFile(t, "a", "/f"); got != tc.want {
				t.Fatalf("f after the restart: %q, want %q", got, tc.want)
			}
			if ops, _ := g.st.ListOps(ctx, ""); len(ops) != 0 {
				t.Fatalf("journal after recovery: %d entries", len(ops))
			}
		})
	}
}
