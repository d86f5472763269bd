package blob

import (
	"context"
	"testing"
	"time"
)

// TestLeasesKeepPinnedBlobs: a sweep deletes only blobs that no lease
// pinned since its round began, and never waits for a lease held by a
// slow operation.
func TestLeasesKeepPinnedBlobs(t *testing.T) {
	ctx := context.Background()
	st, err := OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(s Store, b string) Digest {
		d, _, err := PutRaw(ctx, s, []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx, []Digest{d}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	leases := NewLeases()
	dead := put(st, "dead")
	slow := leases.Begin() // a capture that runs for hours
	held := put(slow.Store(st), "held")
	early := leases.Begin()
	releasedInRound := put(early.Store(st), "released in the round")

	round := leases.BeginRound()
	early.Release() // its operation recorded nothing the round can see yet
	late := leases.Begin()
	pinnedInRound := put(late.Store(st), "pinned in the round")
	late.Release()
	done := make(chan struct{})
	var n int
	go func() {
		defer close(done)
		n, _, err = round.Sweep(ctx, st, func(Digest) bool { return false })
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep waited for a lease")
	}
	round.End()
	if err != nil || n != 1 {
		t.Fatalf("sweep deleted %d (%v), want only the dead blob", n, err)
	}
	for _, d := range []Digest{held, releasedInRound, pinnedInRound} {
		if ok, _ := st.Has(ctx, d); !ok {
			t.Fatalf("a pinned blob was swept")
		}
	}
	if ok, _ := st.Has(ctx, dead); ok {
		t.Fatal("the dead blob was kept")
	}
	// After the round, a released lease's blobs are the records' business.
	slow.Release()
	round = leases.BeginRound()
	n, _, _ = round.Sweep(ctx, st, func(Digest) bool { return false })
	round.End()
	if n != 3 {
		t.Fatalf("second sweep deleted %d, want 3", n)
	}
}
