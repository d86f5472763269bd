// Package blobtest is the conformance suite that every blob.Store runs.
package blobtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"

	"github.com/sbxhq/sbx/internal/blob"
)

// Run runs the suite; open returns a fresh, empty store for each subtest.
func Run(t *testing.T, open func(t *testing.T) blob.Store) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, open(t)) })
	t.Run("Missing", func(t *testing.T) { testMissing(t, open(t)) })
	t.Run("Corrupt", func(t *testing.T) { testCorrupt(t, open(t)) })
	t.Run("ConcurrentPuts", func(t *testing.T) { testConcurrent(t, open(t)) })
	t.Run("WalkAndSweep", func(t *testing.T) { testSweep(t, open(t)) })
	t.Run("SweepUnflushed", func(t *testing.T) { testSweepUnflushed(t, open(t)) })
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func put(t *testing.T, s blob.Store, raw []byte) blob.Digest {
	t.Helper()
	ctx := context.Background()
	d, _, err := blob.PutRaw(ctx, s, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, []blob.Digest{d}); err != nil {
		t.Fatal(err)
	}
	return d
}

func testRoundTrip(t *testing.T, s blob.Store) {
	ctx := context.Background()
	for _, raw := range [][]byte{random(1 << 20), bytes.Repeat([]byte("compressible "), 100000), {}, []byte("x")} {
		d := put(t, s, raw)
		if ok, err := s.Has(ctx, d); !ok || err != nil {
			t.Fatalf("Has after put: %v %v", ok, err)
		}
		got, err := blob.GetRaw(ctx, s, d)
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("round trip of %d bytes: %d bytes, %v", len(raw), len(got), err)
		}
		// A second put of the same content writes nothing.
		if _, n, err := blob.PutRaw(ctx, s, raw); err != nil || n != 0 {
			t.Fatalf("second put wrote %d bytes, %v", n, err)
		}
	}
	comp := bytes.Repeat([]byte("compressible "), 100000)
	enc, _ := s.Get(ctx, blob.DigestOf(comp))
	if len(enc) > len(comp)/10 {
		t.Fatalf("compressible blob stored in %d bytes of %d", len(enc), len(comp))
	}
	rnd := random(1 << 16)
	d := put(t, s, rnd)
	enc, _ = s.Get(ctx, d)
	if len(enc) > len(rnd)+16 {
		t.Fatalf("incompressible blob grew to %d bytes", len(enc))
	}
}

func testMissing(t *testing.T, s blob.Store) {
	ctx := context.Background()
	d := blob.DigestOf([]byte("never stored"))
	if _, err := s.Get(ctx, d); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if ok, err := s.Has(ctx, d); ok || err != nil {
		t.Fatalf("Has missing: %v %v", ok, err)
	}
	if err := s.Delete(ctx, d); err != nil {
		t.Fatalf("Delete missing: %v", err)
	}
	if err := s.Flush(ctx, []blob.Digest{d}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Flush of a blob never put: %v", err)
	}
	if _, err := s.Get(ctx, blob.Digest("sha256:../../etc/passwd")); err == nil {
		t.Fatal("a malformed digest was accepted")
	}
}

func testCorrupt(t *testing.T, s blob.Store) {
	ctx := context.Background()
	good := []byte("the content")
	d := blob.DigestOf(good)
	_, wrong := blob.Encode([]byte("other content"))
	err := s.Put(ctx, d, wrong)
	if err == nil {
		err = s.Flush(ctx, []blob.Digest{d})
	}
	if err == nil {
		_, err = blob.GetRaw(ctx, s, d)
	}
	if !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("a blob whose bytes do not match its digest: %v, want ErrCorrupt", err)
	}
	// The store still takes the right bytes afterwards.
	if got := put(t, s, good); got != d {
		t.Fatal("digest changed")
	}
	if raw, err := blob.GetRaw(ctx, s, d); err != nil || string(raw) != "the content" {
		t.Fatalf("%q %v", raw, err)
	}
}

func testConcurrent(t *testing.T, s blob.Store) {
	ctx := context.Background()
	raw := random(256 << 10)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, _, err := blob.PutRaw(ctx, s, raw)
			if err == nil {
				err = s.Flush(ctx, []blob.Digest{d})
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, err := blob.GetRaw(ctx, s, blob.DigestOf(raw)); err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("after concurrent puts: %v", err)
	}
}

func testSweep(t *testing.T, s blob.Store) {
	ctx := context.Background()
	keep := put(t, s, []byte("keep me"))
	drop := put(t, s, []byte("drop me"))
	seen := map[blob.Digest]int64{}
	if err := s.Walk(ctx, func(d blob.Digest, size int64) error { seen[d] = size; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[keep] == 0 {
		t.Fatalf("walk: %v", seen)
	}
	round := blob.NewLeases().BeginRound()
	n, freed, err := round.Sweep(ctx, s, func(d blob.Digest) bool { return d == keep })
	round.End()
	if err != nil || n != 1 || freed == 0 {
		t.Fatalf("sweep: %d %d %v", n, freed, err)
	}
	if ok, _ := s.Has(ctx, drop); ok {
		t.Fatal("swept blob still there")
	}
	if ok, _ := s.Has(ctx, keep); !ok {
		t.Fatal("live blob swept")
	}
}

// A blob put and never flushed (a capture that failed half-way) is seen by
// Walk and removed by a sweep: a failed capture must not keep its space.
func testSweepUnflushed(t *testing.T, s blob.Store) {
	ctx := context.Background()
	d, _, err := blob.PutRaw(ctx, s, random(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[blob.Digest]int64{}
	if err := s.Walk(ctx, func(d blob.Digest, size int64) error { seen[d] = size; return nil }); err != nil {
		t.Fatal(err)
	}
	if seen[d] == 0 || len(seen) != 1 {
		t.Fatalf("walk of a store with one unflushed blob: %v", seen)
	}
	round := blob.NewLeases().BeginRound()
	n, freed, err := round.Sweep(ctx, s, func(blob.Digest) bool { return false })
	round.End()
	if err != nil || n != 1 || freed == 0 {
		t.Fatalf("sweep: %d %d %v", n, freed, err)
	}
	if ok, _ := s.Has(ctx, d); ok {
		t.Fatal("swept unflushed blob still there")
	}
	if err := s.Flush(ctx, []blob.Digest{d}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("flush of a swept blob: %v, want ErrNotFound", err)
	}
}
