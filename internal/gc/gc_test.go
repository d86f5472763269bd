package gc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/blob"
)

// hang bounds every wait of these tests: passing it means a hang.
const hang = 30 * time.Second

func newStore(t *testing.T) *blob.Local {
	t.Helper()
	st, err := blob.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// put stores content in s (a store or a lease's view of one) and flushes it.
func put(t *testing.T, s blob.Store, content string) blob.Digest {
	t.Helper()
	ctx := context.Background()
	d, _, err := blob.PutRaw(ctx, s, []byte(content))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, []blob.Digest{d}); err != nil {
		t.Fatal(err)
	}
	return d
}

func has(t *testing.T, st blob.Store, d blob.Digest) bool {
	t.Helper()
	ok, err := st.Has(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// marks is a root provider that marks a fixed set of digests.
func marks(ds ...blob.Digest) Roots {
	return RootsFunc(func(ctx context.Context, mark func(blob.Digest)) error {
		for _, d := range ds {
			mark(d)
		}
		return nil
	})
}

// TestCollectSweepsUnmarked: a round deletes the blobs no provider marks,
// keeps those any provider marks, and counts what it freed.
func TestCollectSweepsUnmarked(t *testing.T) {
	st := newStore(t)
	a := put(t, st, "a checkpoint's chunk")
	b := put(t, st, "a snapshot's chunk")
	dead1 := put(t, st, "a deleted sandbox's chunk")
	dead2 := put(t, st, "an expired snapshot's chunk")
	c := New(st, blob.NewLeases(), quiet(), marks(a), marks(b))
	n, freed, err := c.Collect(context.Background())
	if err != nil || n != 2 || freed <= 0 {
		t.Fatalf("Collect = %d blobs, %d bytes, %v; want 2 blobs freed", n, freed, err)
	}
	for _, d := range []blob.Digest{a, b} {
		if !has(t, st, d) {
			t.Fatalf("marked blob %s was swept", d)
		}
	}
	for _, d := range []blob.Digest{dead1, dead2} {
		if has(t, st, d) {
			t.Fatalf("unmarked blob %s was kept", d)
		}
	}
	if n, _, err := c.Collect(context.Background()); err != nil || n != 0 {
		t.Fatalf("second Collect = %d, %v; want nothing left to delete", n, err)
	}
}

// TestCollectKeepsLeased: blobs an operation in progress stored under its
// lease, and records nowhere yet, survive a round; once the lease is
// released (and still nothing records them) the next round frees them.
func TestCollectKeepsLeased(t *testing.T) {
	st := newStore(t)
	leases := blob.NewLeases()
	c := New(st, leases, quiet())
	le := leases.Begin()
	held := put(t, le.Store(st), "a capture in progress")
	dead := put(t, st, "garbage")
	if n, _, err := c.Collect(context.Background()); err != nil || n != 1 {
		t.Fatalf("Collect = %d, %v; want only the garbage deleted", n, err)
	}
	if !has(t, st, held) {
		t.Fatal("a blob pinned by a lease was swept")
	}
	if has(t, st, dead) {
		t.Fatal("garbage was kept")
	}
	le.Release()
	if n, _, err := c.Collect(context.Background()); err != nil || n != 1 || has(t, st, held) {
		t.Fatalf("after release: Collect = %d, %v; want the unrecorded blob deleted", n, err)
	}
}

// TestProviderErrorSweepsNothing: when one provider cannot say what it
// uses, the round deletes nothing (not even what no one marked) and
// returns the provider's error.
func TestProviderErrorSweepsNothing(t *testing.T) {
	st := newStore(t)
	kept := put(t, st, "marked")
	maybe := put(t, st, "used by what the broken provider could not read")
	boom := errors.New("manifest unreadable: I/O error")
	broken := RootsFunc(func(ctx context.Context, mark func(blob.Digest)) error { return boom })
	c := New(st, blob.NewLeases(), quiet(), marks(kept), broken)
	n, _, err := c.Collect(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("Collect error = %v, want the provider's", err)
	}
	if n != 0 || !has(t, st, maybe) || !has(t, st, kept) {
		t.Fatalf("a round whose provider failed deleted %d blobs", n)
	}
}

// blocking is a provider that holds its round until released, and counts
// the rounds marking at the same time.
type blocking struct {
	entered  chan struct{}
	release  chan struct{}
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	calls    atomic.Int32
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan struct{}, 10), release: make(chan struct{})}
}

func (b *blocking) Mark(ctx context.Context, mark func(blob.Digest)) error {
	n := b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	for {
		m := b.maxSeen.Load()
		if n <= m || b.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	b.calls.Add(1)
	b.entered <- struct{}{}
	<-b.release
	return nil
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hang):
		t.Fatalf("no %s within %s", what, hang)
	}
}

// TestCollectOneRoundAtATime: two concurrent Collect calls run their rounds
// one after the other (the lease table keeps the pins of one round), and
// both complete.
func TestCollectOneRoundAtATime(t *testing.T) {
	st := newStore(t)
	put(t, st, "garbage")
	b := newBlocking()
	c := New(st, blob.NewLeases(), quiet(), b)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = c.Collect(context.Background())
		}()
	}
	waitFor(t, b.entered, "first round")
	// Give a second round the chance to start marking while the first
	// holds: it must not (the check is the counter, not the time).
	time.Sleep(200 * time.Millisecond)
	close(b.release)
	waitFor(t, b.entered, "second round")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitFor(t, done, "end of both rounds")
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := b.maxSeen.Load(); got != 1 {
		t.Fatalf("%d rounds marked at the same time, want 1", got)
	}
	if got := b.calls.Load(); got != 2 {
		t.Fatalf("%d rounds ran, want 2", got)
	}
}

// TestCollectHonoursContextWhileWaiting: a caller waiting for a round in
// progress gives up when its context ends, without marking or deleting.
func TestCollectHonoursContextWhileWaiting(t *testing.T) {
	st := newStore(t)
	dead := put(t, st, "garbage")
	b := newBlocking()
	c := New(st, blob.NewLeases(), quiet(), b)
	first := make(chan error, 1)
	go func() {
		_, _, err := c.Collect(context.Background())
		first <- err
	}()
	waitFor(t, b.entered, "first round")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		n, _, err := c.Collect(ctx)
		if n != 0 {
			err = errors.New("the waiting call deleted blobs")
		}
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting Collect = %v, want its context's deadline", err)
		}
	case <-time.After(hang):
		t.Fatal("Collect waited for the round in progress past its context")
	}
	if got := b.calls.Load(); got != 1 {
		t.Fatalf("%d rounds marked, want only the first", got)
	}
	if !has(t, st, dead) {
		t.Fatal("garbage deleted while the first round still marks")
	}
	close(b.release)
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hang):
		t.Fatal("the first round did not end")
	}
	if has(t, st, dead) {
		t.Fatal("the first round kept the garbage")
	}
}

// TestCollectSweepsPendingOfReleasedLease: blobs a failed capture put and
// never flushed (its lease released, nothing records them) are deleted,
// and their bytes counted: a capture that failed on a full store must not
// leave it full.
func TestCollectSweepsPendingOfReleasedLease(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	leases := blob.NewLeases()
	le := leases.Begin()
	d, _, err := blob.PutRaw(ctx, le.Store(st), make([]byte, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	le.Release()
	c := New(st, leases, quiet())
	n, freed, err := c.Collect(ctx)
	if err != nil || n != 1 || freed <= 0 {
		t.Fatalf("Collect = %d blobs, %d bytes, %v; want the pending blob freed", n, freed, err)
	}
	if has(t, st, d) {
		t.Fatal("the pending blob survived")
	}
	if err := st.Flush(ctx, []blob.Digest{d}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("flush of a swept pending blob = %v, want ErrNotFound", err)
	}
}

// TestFreeFailedCapture: after a failed capture whose lease is released,
// its blobs are gone before FreeFailedCapture returns; while an enclosing
// operation still holds the lease, they stay and a background round is
// asked for instead.
func TestFreeFailedCapture(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	leases := blob.NewLeases()
	c := New(st, leases, quiet())

	le := leases.Begin()
	held := put(t, le.Store(st), "written by a capture inside a fork")
	c.FreeFailedCapture(ctx, le)
	if !has(t, st, held) {
		t.Fatal("a blob of a lease still held was freed")
	}
	select {
	case <-c.kick:
	default:
		t.Fatal("no background round asked for while the lease is held")
	}

	le.Release()
	cancelled, cancel := context.WithCancel(ctx)
	cancel() // the request that failed is gone; the space must still be freed
	c.FreeFailedCapture(cancelled, le)
	if has(t, st, held) {
		t.Fatal("the failed capture's blob survived FreeFailedCapture")
	}
}

// TestRunKicked: a Kick makes Run call before, collect, then after.
func TestRunKicked(t *testing.T) {
	st := newStore(t)
	dead := put(t, st, "garbage")
	c := New(st, blob.NewLeases(), quiet())
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var order []string
	after := make(chan struct{}, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.Run(ctx, time.Hour, func(context.Context) {
			mu.Lock()
			order = append(order, "before")
			if ok, _ := st.Has(context.Background(), dead); !ok {
				order = append(order, "swept before before")
			}
			mu.Unlock()
		}, func(context.Context) {
			mu.Lock()
			order = append(order, "after")
			if ok, _ := st.Has(context.Background(), dead); ok {
				order = append(order, "not swept before after")
			}
			mu.Unlock()
			select {
			case after <- struct{}{}:
			default:
			}
		})
	}()
	c.Kick()
	waitFor(t, after, "round after a kick")
	cancel()
	waitFor(t, stopped, "stop of Run")
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 2 || order[0] != "before" || order[1] != "after" {
		t.Fatalf("Run called %v, want [before after] around one sweep", order)
	}
}

// TestCollectCancelledRunsNoRound: a Collect whose context is already done
// returns its error without marking, even when no round is in progress.
func TestCollectCancelledRunsNoRound(t *testing.T) {
	st := newStore(t)
	dead := put(t, st, "garbage")
	var calls atomic.Int32
	c := New(st, blob.NewLeases(), quiet(), RootsFunc(func(ctx context.Context, mark func(blob.Digest)) error {
		calls.Add(1)
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		if _, _, err := c.Collect(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Collect with a cancelled context = %v, want context.Canceled", err)
		}
	}
	if n := calls.Load(); n != 0 || !has(t, st, dead) {
		t.Fatalf("a cancelled Collect ran %d rounds", n)
	}
}
