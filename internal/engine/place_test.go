package engine

import (
	"fmt"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/store"
)

// TestPlaceOn: a sandbox is placed on a live, active node; one that has
// its image unpacked first, then the least loaded, then the one with the
// most free memory; never on a lost or draining node; on this node when no
// other is better.
func TestPlaceOn(t *testing.T) {
	n := func(name string, live bool, state api.NodeState, freeGB int64, images ...string) *store.Node {
		// In the one case where they differ, more free memory comes with
		// more sandboxes.
		sandboxes := 0
		if len(images) > 0 {
			sandboxes = int(freeGB)
		}
		return &store.Node{Name: name, Live: live, State: state,
			Capacity: api.NodeCapacity{FreeMemoryBytes: freeGB << 30, Images: images, Sandboxes: sandboxes}}
	}
	for _, c := range []struct {
		name  string
		nodes []*store.Node
		want  string
	}{
		{"most free memory", []*store.Node{n("a", true, api.NodeActive, 4), n("b", true, api.NodeActive, 8), n("c", true, api.NodeActive, 2)}, "b"},
		{"the image before memory", []*store.Node{n("a", true, api.NodeActive, 4), n("b", true, api.NodeActive, 8), n("c", true, api.NodeActive, 2, "img")}, "c"},
		{"not a lost node", []*store.Node{n("a", true, api.NodeActive, 4), n("b", false, api.NodeLost, 8, "img")}, "a"},
		{"not a draining node", []*store.Node{n("a", true, api.NodeActive, 4), n("b", true, api.NodeDraining, 8, "img")}, "a"},
		{"the fewest sandboxes before memory", []*store.Node{n("a", true, api.NodeActive, 4, "img"), n("b", true, api.NodeActive, 8, "img"), n("c", true, api.NodeActive, 1, "img")}, "c"},
		{"self on a tie", []*store.Node{n("a", true, api.NodeActive, 4), n("b", true, api.NodeActive, 4)}, "a"},
		{"away from a draining self", []*store.Node{n("a", true, api.NodeDraining, 9, "img"), n("b", true, api.NodeActive, 1)}, "b"},
		{"self when no node is usable", []*store.Node{n("a", true, api.NodeDraining, 9), n("b", false, api.NodeLost, 9)}, "a"},
	} {
		if got := placeOn(c.nodes, "img", "a", false); got != c.want {
			t.Errorf("%s: placed on %s, want %s", c.name, got, c.want)
		}
	}
}

// TestPlaceOnNeedsImage: where images do not travel between nodes, a
// sandbox goes only to a node that has its image, however loaded; to this
// node when none has it (its create builds or fails there).
func TestPlaceOnNeedsImage(t *testing.T) {
	n := func(name string, sandboxes int, images ...string) *store.Node {
		return &store.Node{Name: name, Live: true, State: api.NodeActive,
			Capacity: api.NodeCapacity{Sandboxes: sandboxes, Images: images}}
	}
	if got := placeOn([]*store.Node{n("a", 9), n("b", 5, "img"), n("c", 0)}, "img", "a", true); got != "b" {
		t.Errorf("placed on %s, want b, the only node with the image", got)
	}
	if got := placeOn([]*store.Node{n("a", 9), n("b", 5), n("c", 0)}, "img", "a", true); got != "a" {
		t.Errorf("no node has the image: placed on %s, want a (self)", got)
	}
	if got := placeOn([]*store.Node{n("a", 9), n("b", 5), n("c", 0)}, "img", "a", false); got != "c" {
		t.Errorf("images travel: placed on %s, want c (the least loaded)", got)
	}
}

// BenchmarkPlaceOn is placement's rule over 50 nodes' records (its query,
// the nodes table, is BenchmarkScale/nodes-read in the postgres store).
func BenchmarkPlaceOn(b *testing.B) {
	var nodes []*store.Node
	for i := range 50 {
		nodes = append(nodes, &store.Node{Name: fmt.Sprintf("n%02d", i), Live: true, State: api.NodeActive,
			Capacity: api.NodeCapacity{Sandboxes: 200 - i%9, FreeMemoryBytes: int64(i) << 30,
				Images: []string{"img-base", fmt.Sprintf("img-%d", i%5), "a", "b", "c", "d"}}})
	}
	for b.Loop() {
		if placeOn(nodes, "img-3", "n00", false) == "" {
			b.Fatal("no node")
		}
	}
}
