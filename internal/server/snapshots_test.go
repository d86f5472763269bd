package server

import (
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/store"
)

// TestSnapshotHealthShown: a snapshot whose memory record cannot be read
// is shown damaged (the user can tell why it will not restore and delete
// it); a readable one is shown ok.
func TestSnapshotHealthShown(t *testing.T) {
	for _, c := range []struct {
		memory string
		want   string
	}{
		{`[{"name":"pages","size":1,"chunks":["sha256:0000000000000000000000000000000000000000000000000000000000000000"]}]`, api.HealthOK},
		{`[{"name":"pages","size":1,"chunks":["sha256:00000`, api.HealthDamaged},
		{`not json`, api.HealthDamaged},
	} {
		got := snapshotToAPI(&store.Snapshot{ID: "snap_x", State: "ready", Memory: []byte(c.memory)}).Health
		if got != c.want {
			t.Errorf("health of a snapshot with memory record %q: %q, want %q", c.memory, got, c.want)
		}
	}
}
