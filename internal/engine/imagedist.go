package engine

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// Images travel between the nodes of a cluster through the shared blob
// store: a node publishes the root filesystem of each image it unpacked
// (a manifest of chunks, as a checkpoint's), and a node that starts a
// sandbox on an image it has not unpacked installs it from there.

// published remembers the image ids this process published (or found
// published).
type published struct {
	mu  sync.Mutex
	ids map[string]bool
}

// distributesImages reports whether images travel through the blob store:
// on a cluster's node whose blob store the nodes share.
func (e *Engine) distributesImages() (store.Cluster, bool) {
	cl, ok := e.st.(store.Cluster)
	return cl, ok && e.cfg.Node != "" && e.cfg.SharedBlobs
}

// publishImages publishes every image unpacked on this node that is not
// in the blob store yet. Errors of one image are logged; the others go on.
func (e *Engine) publishImages(ctx context.Context) {
	cl, ok := e.distributesImages()
	if !ok {
		return
	}
	imgs, err := e.images.List(ctx)
	if err != nil {
		return
	}
	for _, img := range imgs {
		if !e.images.HasRootFS(img.ID) {
			continue
		}
		if err := e.publishImage(ctx, cl, img.ID); err != nil && ctx.Err() == nil {
			e.log.Warn("publish an image's root filesystem to the blob store", "image", img.Name, "id", img.ID, "err", err)
		}
	}
}

// publishImage stores the root filesystem of image id, unpacked here, in
// the blob store and records its manifest, unless that was done.
func (e *Engine) publishImage(ctx context.Context, cl store.Cluster, id string) error {
	e.pub.mu.Lock()
	done := e.pub.ids[id]
	e.pub.mu.Unlock()
	if done {
		return nil
	}
	if _, err := cl.GetImageRootFS(ctx, id); err == nil {
		e.markPublished(id)
		return nil
	} else if !errdefs.IsNotFound(err) {
		return err
	}
	ctx, release := e.withLease(ctx)
	defer release()
	bs := e.blobsFor(ctx)
	m, stats, err := disk.Capture(ctx, disk.CaptureOptions{Upper: e.images.RootFS(id), Store: bs, Still: true})
	if err != nil {
		return err
	}
	ref, _, err := disk.PutManifest(ctx, bs, m)
	if err != nil {
		return err
	}
	if err := bs.Flush(ctx, append(append([]blob.Digest{}, stats.Chunks...), ref...)); err != nil {
		return err
	}
	digests := make([]string, len(ref))
	for i, d := range ref {
		digests[i] = string(d)
	}
	if err := cl.PutImageRootFS(ctx, id, digests, stats.Bytes); err != nil {
		return err
	}
	e.markPublished(id)
	e.log.Info("image published to the blob store", "id", id, "files", stats.Files, "bytes", stats.Bytes, "added_bytes", stats.AddedBytes)
	return nil
}

func (e *Engine) markPublished(id string) {
	e.pub.mu.Lock()
	if e.pub.ids == nil {
		e.pub.ids = map[string]bool{}
	}
	e.pub.ids[id] = true
	e.pub.mu.Unlock()
}

// ensureImage makes sure that image id is unpacked on this node, installing
// it from the blob store on a cluster's node. Errors: ErrUnavailable when
// it is neither here nor in the blob store (another node unpacked it and
// has not published it yet); the blob store's.
func (e *Engine) ensureImage(ctx context.Context, id string) error {
	if e.images.HasRootFS(id) {
		return nil
	}
	cl, ok := e.distributesImages()
	if !ok {
		return errdefs.New(errdefs.ErrUnavailable,
			"image %s is not unpacked on this node, and the nodes do not share a blob store to install it from", id)
	}
	digests, err := cl.GetImageRootFS(ctx, id)
	if errdefs.IsNotFound(err) {
		return errdefs.New(errdefs.ErrUnavailable,
			"image %s is not unpacked on this node and not yet in the blob store (the node that unpacked it publishes it within a minute); retry", id)
	}
	if err != nil {
		return err
	}
	ref := make(disk.ManifestRef, len(digests))
	for i, d := range digests {
		ref[i] = blob.Digest(d)
	}
	ctx, release := e.withLease(ctx)
	defer release()
	bs := e.blobsFor(ctx)
	m, err := disk.GetManifest(ctx, bs, ref)
	if err != nil {
		return fmt.Errorf("image %s: %w", id, err)
	}
	return e.images.Install(ctx, id, func(rootfs string) error {
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			return err
		}
		_, err := disk.Materialize(ctx, disk.MaterializeOptions{Target: m, Dst: rootfs, Store: bs})
		return err
	})
}

// kickPublish asks publishLoop to publish the images soon (an image was
// built, imported or pulled).
func (e *Engine) kickPublish() {
	select {
	case e.publishKick <- struct{}{}:
	default:
	}
}

// publishLoop publishes the images unpacked here at start, on a kick and
// every gcInterval, until the engine closes.
func (e *Engine) publishLoop() {
	defer e.bg.Done()
	tick := time.NewTicker(gcInterval)
	defer tick.Stop()
	for {
		e.publishImages(e.ctx)
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		case <-e.publishKick:
		}
	}
}
