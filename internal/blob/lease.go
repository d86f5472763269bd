package blob

import (
	"context"
	"sync"
)

// Leases let operations that store blobs before recording them (captures,
// snapshots) run while the collector sweeps, without either waiting for
// the other: an operation pins every digest it puts, checks or reuses
// under a Lease, and a sweep (a Round) deletes only blobs that are neither
// pinned nor were pinned at any time since the round began. So a slow
// capture of one sandbox never blocks the collector, and the collector
// never blocks another sandbox's capture: a pin waits at most for the
// deletion of that one blob to finish.
//
// Why this is enough: a sweep deletes a blob only if the records and
// caches it read after the round began do not use it. A blob that an
// operation uses was pinned before it was used; if the pin was released
// before the round began, the operation had recorded it by then (records
// are read after), and if not, the round saw the pin.
type Leases struct {
	mu       sync.Mutex
	cond     *sync.Cond
	pinned   map[Digest]int
	round    map[Digest]bool // digests pinned since the round began; nil between rounds
	deleting map[Digest]bool
}

// NewLeases returns an empty lease table.
func NewLeases() *Leases {
	l := &Leases{pinned: map[Digest]int{}, deleting: map[Digest]bool{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Lease is one operation's set of pinned digests.
type Lease struct {
	l    *Leases
	mu   sync.Mutex
	held map[Digest]bool
	done bool
}

// Begin starts a lease. Release it when the operation has recorded what
// it stored (or given up).
func (l *Leases) Begin() *Lease { return &Lease{l: l, held: map[Digest]bool{}} }

// Pin keeps ds from being swept until Release. A digest whose blob a
// sweep is deleting right now is pinned once the deletion is done (the
// caller then finds it missing and stores it again).
func (le *Lease) Pin(ds ...Digest) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.done {
		return
	}
	l := le.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range ds {
		if le.held[d] {
			continue
		}
		for l.deleting[d] {
			l.cond.Wait()
		}
		le.held[d] = true
		l.pinned[d]++
		if l.round != nil {
			l.round[d] = true
		}
	}
}

// Release unpins every digest of the lease; later Pins do nothing.
func (le *Lease) Release() {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.done {
		return
	}
	le.done = true
	l := le.l
	l.mu.Lock()
	for d := range le.held {
		if l.pinned[d]--; l.pinned[d] <= 0 {
			delete(l.pinned, d)
		}
	}
	l.mu.Unlock()
	le.held = nil
}

// Released reports whether Release has run.
func (le *Lease) Released() bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.done
}

// Store returns st seen through the lease: Put, Has and Get pin their
// digest first, so that a blob found present stays present, and a blob an
// operation reads (a snapshot it restores) is not swept under it.
func (le *Lease) Store(st Store) Store { return &leasedStore{Store: st, le: le} }

type leasedStore struct {
	Store
	le *Lease
}

func (s *leasedStore) Put(ctx context.Context, d Digest, encoded []byte) error {
	s.le.Pin(d)
	return s.Store.Put(ctx, d, encoded)
}

func (s *leasedStore) Get(ctx context.Context, d Digest) ([]byte, error) {
	s.le.Pin(d)
	return s.Store.Get(ctx, d)
}

func (s *leasedStore) Has(ctx context.Context, d Digest) (bool, error) {
	s.le.Pin(d)
	return s.Store.Has(ctx, d)
}

// Round is one sweep of the collector. Begin it before reading what is
// live; End it when the sweep is done.
type Round struct{ l *Leases }

// BeginRound starts a sweep round: what is pinned now, or gets pinned
// before End, is kept. One round at a time.
func (l *Leases) BeginRound() *Round {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.round = map[Digest]bool{}
	for d := range l.pinned {
		l.round[d] = true
	}
	return &Round{l: l}
}

// End ends the round.
func (r *Round) End() {
	r.l.mu.Lock()
	r.l.round = nil
	r.l.mu.Unlock()
}

// Sweep deletes every blob of s that live does not report in use and no
// lease pinned during the round, and returns how many blobs and encoded
// bytes it freed. It never waits for a lease.
func (r *Round) Sweep(ctx context.Context, s Store, live func(Digest) bool) (n int, freed int64, err error) {
	var dead []Digest
	var sizes []int64
	if err := s.Walk(ctx, func(d Digest, size int64) error {
		if !live(d) {
			dead = append(dead, d)
			sizes = append(sizes, size)
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	l := r.l
	for i, d := range dead {
		if err := ctx.Err(); err != nil {
			return n, freed, err
		}
		l.mu.Lock()
		if l.pinned[d] > 0 || l.round[d] {
			l.mu.Unlock()
			continue
		}
		l.deleting[d] = true
		l.mu.Unlock()
		err := s.Delete(ctx, d)
		l.mu.Lock()
		delete(l.deleting, d)
		l.cond.Broadcast()
		l.mu.Unlock()
		if err != nil {
			return n, freed, err
		}
		n++
		freed += sizes[i]
	}
	return n, freed, nil
}
