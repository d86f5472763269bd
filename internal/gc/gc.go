// Package gc is sbx's blob garbage collector: it deletes the blobs of a
// blob.Store that nothing uses any more.
//
// It is a mark and sweep. A round first asks every root provider (Roots)
// to mark the digests it uses: the engine's providers read the records
// (checkpoints and their manifests, snapshots) and the layers' capture
// caches. Then it walks the store and deletes every blob that no provider
// marked. A provider that fails aborts the round before anything is
// deleted: a sweep never runs on a partial view of what is live.
//
// Operations that store blobs before they record them (a capture writes
// chunks, then a checkpoint record names them) hold a blob.Lease: every
// digest they put, check or read is pinned, and a round keeps every blob
// pinned when it began or at any time before it ends (see blob.Leases).
// So the collector never waits for a capture, and a capture never waits
// for the collector: a pin waits at most for the deletion of that one
// blob. Rounds run one at a time (the lease table keeps the pins of one
// round); a caller waits for its turn no longer than its context allows.
//
// The rules of what is live stay with the providers; this package holds
// the mechanism: the rounds, the schedule (Run, Kick) and the collection
// after a failed capture (FreeFailedCapture).
package gc

import (
	"context"
	"log/slog"
	"time"

	"github.com/sbxhq/sbx/internal/blob"
)

// Roots is a root provider: one source of the digests in use.
type Roots interface {
	// Mark calls mark for every digest the provider uses. It is called
	// after the round began, so anything recorded before then is seen.
	// An error aborts the round: nothing is swept.
	Mark(ctx context.Context, mark func(blob.Digest)) error
}

// RootsFunc adapts a function to Roots.
type RootsFunc func(ctx context.Context, mark func(blob.Digest)) error

// Mark implements Roots.
func (f RootsFunc) Mark(ctx context.Context, mark func(blob.Digest)) error { return f(ctx, mark) }

// FreeFailedCaptureWait bounds the collection FreeFailedCapture runs
// before it returns.
const FreeFailedCaptureWait = 30 * time.Second

// Collector runs collection rounds over one store. Its methods are safe
// for concurrent use.
type Collector struct {
	store  blob.Store
	leases *blob.Leases
	log    *slog.Logger
	roots  []Roots
	rounds roundLock
	kick   chan struct{}
}

// New returns a collector of store's blobs that keeps what roots mark and
// what leases pin. log receives a line for every round that deletes
// something and for failures of the background rounds.
func New(store blob.Store, leases *blob.Leases, log *slog.Logger, roots ...Roots) *Collector {
	return &Collector{
		store:  store,
		leases: leases,
		log:    log,
		roots:  roots,
		rounds: newRoundLock(),
		kick:   make(chan struct{}, 1),
	}
}

// Collect runs one round now: it waits for a round in progress to end
// (no longer than ctx allows: then ctx's error), marks what the roots use,
// and deletes every other blob that no lease pinned during the round. It
// returns how many blobs it deleted and their encoded bytes. A provider's
// error is returned as is and nothing is deleted; a store error may come
// after some deletions (counted).
func (c *Collector) Collect(ctx context.Context) (deleted int, freed int64, err error) {
	if err := c.rounds.lock(ctx); err != nil {
		return 0, 0, err
	}
	defer c.rounds.unlock()
	round := c.leases.BeginRound()
	defer round.End()
	live := map[blob.Digest]bool{}
	mark := func(d blob.Digest) { live[d] = true }
	for _, r := range c.roots {
		if err := r.Mark(ctx, mark); err != nil {
			return 0, 0, err
		}
	}
	deleted, freed, err = round.Sweep(ctx, c.store, func(d blob.Digest) bool { return live[d] })
	if deleted > 0 {
		c.log.Info("blob gc", "deleted", deleted, "freed_bytes", freed)
	}
	return deleted, freed, err
}

// Kick asks Run for a round soon; it never waits. Kicks while a round is
// pending are one round.
func (c *Collector) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run collects every interval (which must be positive) and after each
// Kick until ctx is done.
// Each time, it calls before (if not nil), runs a round, then calls after
// (if not nil): the engine expires snapshots before, so that their blobs
// go in the same round, and collects images after. A failed round is
// logged; the next one retries.
func (c *Collector) Run(ctx context.Context, interval time.Duration, before, after func(context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-tick.C:
		}
		if before != nil {
			before(ctx)
		}
		if _, _, err := c.Collect(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("blob gc", "err", err)
		}
		if after != nil {
			after(ctx)
		}
	}
}

// FreeFailedCapture deletes the blobs that a failed capture stored and
// nothing records, before the failure is answered: a capture that failed
// because the blob store is full must not leave it full (the next one
// would fail too). le is the capture's lease (nil if none). While le is
// still held (by an enclosing operation) its blobs stay pinned, so this
// only kicks the background round, which frees them after the release.
// Otherwise it collects now, waiting at most FreeFailedCaptureWait, even
// if ctx is cancelled, then leaves what is left to the background round.
func (c *Collector) FreeFailedCapture(ctx context.Context, le *blob.Lease) {
	if le != nil && !le.Released() {
		c.Kick()
		return
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FreeFailedCaptureWait)
	defer cancel()
	if _, _, err := c.Collect(gctx); err != nil {
		c.log.Warn("blob gc after a failed capture", "err", err)
		c.Kick()
	}
}

// roundLock admits one round at a time; a waiter gives up with its
// context. (A lock of several sbxd nodes sharing a store would take its
// place.)
type roundLock struct{ ch chan struct{} }

func newRoundLock() roundLock { return roundLock{ch: make(chan struct{}, 1)} }

func (l roundLock) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case l.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l roundLock) unlock() { <-l.ch }
