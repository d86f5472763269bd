package disk

import (
	"context"
	"path/filepath"
	"time"

	"github.com/sbxhq/sbx/internal/blob"
)

// Fault points of Store, for StoreOptions.Fault.
const (
	// StoreCapturing: the layer is read, still within the capture's
	// bound (the context given is the capture's: a fault should end when
	// it does).
	StoreCapturing = "capturing"
	// StoreCaptured: the capture ended; its chunks are put, not flushed,
	// and the manifest is not stored.
	StoreCaptured = "captured"
)

// StoreOptions are the inputs of Store.
type StoreOptions struct {
	// Blobs receives the chunks and the manifest.
	Blobs blob.Store
	// Freeze and Thaw stop and let go on every writer of the layer (the
	// sandbox's processes), for the end of the capture; nil when the
	// sandbox is stopped (see CaptureOptions).
	Freeze, Thaw func(ctx context.Context) error
	// MaxBytes bounds the bytes of file data the capture reads; 0: no
	// bound. More is ErrTooLarge.
	MaxBytes int64
	// Progress gets human-readable lines; nil for none.
	Progress func(string)
	// Pin, when set, is given the chunks that the layer's capture cache
	// lets the capture reuse without reading them, before it starts: the
	// caller's lease keeps them from a collection (the chunks it puts,
	// Blobs pins itself if it is leased).
	Pin func(chunks ...blob.Digest)
	// Bound, when set, bounds the capture (the reading of the layer, not
	// the storing of its manifest): it returns the context the capture
	// runs in and an end function, called once when the capture ends with
	// its error (nil when it succeeded), that returns the error Store
	// fails with in its place (nil: the capture's own). A capture whose
	// context ended fails even if it read everything.
	Bound func(ctx context.Context) (context.Context, func(err error) error)
	// Fault, when set, is called at StoreCapturing and StoreCaptured, with
	// the context of that point (crash tests stop there). It may block; it
	// cannot fail the store, but ending the capture's context does.
	Fault func(ctx context.Context, point string)
}

// Stored is what Store stored, and how long its steps took.
type Stored struct {
	// Manifest describes the layer as captured; Ref is where it is in
	// the blob store (what a record keeps).
	Manifest *Manifest
	Ref      ManifestRef
	// Stats are the capture's; AddedBytes counts the manifest's blobs
	// too.
	Stats *CaptureStats
	// The steps' durations: loading the capture cache, the capture, the
	// manifest's put, the flush of everything, saving the new cache.
	LoadCache, Capture, PutManifest, Flush, SaveCache time.Duration
}

// Store captures layer id and stores it in o.Blobs: the chunks of its new
// and changed files, then its manifest, all flushed, so that a record of
// Ref made after Store returns survives a crash. The layer's capture cache
// spares reading unchanged files, and the new manifest becomes the cache.
//
// Errors: the capture's (ErrTooLarge, ErrTooDeep, ctx's end, as
// o.Bound's end function maps them), the blob store's. On an error nothing
// is recorded; chunks already put stay for the caller's collector.
func (l *Layers) Store(ctx context.Context, id string, o StoreOptions) (*Stored, error) {
	return l.store(ctx, id, CaptureOptions{Upper: l.Paths(id).Upper, Freeze: o.Freeze, Thaw: o.Thaw}, o)
}

// store captures the layer at co.Upper (id's, or a snapshot of it) with
// id's capture cache and stores it as Store does; co's Cache, Store,
// Progress and MaxBytes come from o.
func (l *Layers) store(ctx context.Context, id string, co CaptureOptions, o StoreOptions) (*Stored, error) {
	t0 := time.Now()
	var cache *Manifest
	lineage := lineageOf(l.base(id))
	if co.Still {
		// A snapshot: its own lineage, and only an older cache.
		lineage = lineageOf(filepath.Dir(co.Upper))
		cache = l.cacheFor(id, co.Upper, lineage, co.AsOfNS)
	} else {
		cache = l.LoadCache(id)
	}
	if o.Pin != nil && cache != nil {
		o.Pin(cache.Chunks()...)
	}
	t1 := time.Now()
	cctx, end := ctx, func(err error) error { return err }
	if o.Bound != nil {
		cctx, end = o.Bound(ctx)
	}
	co.Cache, co.Store, co.Progress, co.MaxBytes = cache, o.Blobs, o.Progress, o.MaxBytes
	m, stats, err := Capture(cctx, co)
	if err == nil {
		if o.Fault != nil {
			o.Fault(cctx, StoreCapturing)
		}
		err = context.Cause(cctx)
	}
	if eerr := end(err); eerr != nil {
		return nil, eerr
	} else if err != nil {
		return nil, err
	}
	t2 := time.Now()
	if o.Fault != nil {
		o.Fault(ctx, StoreCaptured)
	}
	ref, added, err := PutManifest(ctx, o.Blobs, m)
	if err != nil {
		return nil, err
	}
	stats.AddedBytes += added
	t3 := time.Now()
	if err := o.Blobs.Flush(ctx, append(append([]blob.Digest(nil), stats.Chunks...), ref...)); err != nil {
		return nil, err
	}
	t4 := time.Now()
	// A snapshot's manifest is a cache for the live layer too (snapshots
	// keep inode numbers and ctimes), when the layer is still there and
	// of the snapshot's lineage.
	if err := l.saveCache(id, lineage, m); err != nil && !co.Still {
		return nil, err
	}
	return &Stored{
		Manifest: m, Ref: ref, Stats: stats,
		LoadCache: t1.Sub(t0), Capture: t2.Sub(t1), PutManifest: t3.Sub(t2), Flush: t4.Sub(t3), SaveCache: time.Since(t4),
	}, nil
}
