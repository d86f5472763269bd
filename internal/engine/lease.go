package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/store"
)

// Capture limits: a capture of a sandbox's disk (checkpoint, snapshot,
// fork, suspend, the undo checkpoint of a guarded exec) that reads more
// file data, or takes longer, fails with ErrCaptureLimit, so that one
// sandbox cannot hold its lock, and the blobs it pins, for hours.
const (
	// DefaultCaptureTimeout bounds the time of one capture.
	DefaultCaptureTimeout = 30 * time.Minute
	// DefaultCaptureMaxBytes bounds the file data one capture reads (holes
	// are not read). A sandbox with a disk quota is bounded by twice its
	// quota when that is less (a capture may read a file twice).
	DefaultCaptureMaxBytes = int64(64) << 30
)

type leaseKey struct{}

// withLease begins a blob lease for an operation that stores or reads
// blobs before (or while) recording them: the collector keeps every blob
// the operation touches through e.blobsFor(ctx) until release. It never
// waits for the collector, and the collector never waits for it.
func (e *Engine) withLease(ctx context.Context) (context.Context, func()) {
	if le, ok := ctx.Value(leaseKey{}).(*blob.Lease); ok && le != nil {
		return ctx, func() {}
	}
	le := e.leases.Begin()
	return context.WithValue(ctx, leaseKey{}, le), le.Release
}

// leaseOf is ctx's blob lease, nil if none.
func leaseOf(ctx context.Context) *blob.Lease {
	le, _ := ctx.Value(leaseKey{}).(*blob.Lease)
	return le
}

// blobsFor is the blob store as ctx's operation must use it: through its
// lease, which pins what it puts, checks and reads.
func (e *Engine) blobsFor(ctx context.Context) blob.Store {
	if le := leaseOf(ctx); le != nil {
		return le.Store(e.blobs)
	}
	return e.blobs
}

var errCaptureTimeout = errors.New("capture took longer than its limit")

// errCaptureCancelled is the cause of a capture stopped by a delete.
var errCaptureCancelled = errors.New("the sandbox is being deleted")

// captureContext bounds a capture of sandbox id by time and lets a delete
// of the sandbox cancel it; call done when the capture ends.
func (e *Engine) captureContext(ctx context.Context, id string) (context.Context, func()) {
	timeout := e.cfg.CaptureTimeout
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, timeout, errCaptureTimeout)
	ctx, cancel := context.WithCancelCause(ctx)
	in := e.instance(id)
	in.mu.Lock()
	in.capture = cancel
	in.mu.Unlock()
	return ctx, func() {
		in.mu.Lock()
		in.capture = nil
		in.mu.Unlock()
		cancel(nil)
		cancelTimeout()
	}
}

// cancelCapture stops the capture of sandbox id in progress, if any, and
// reports whether there was one.
func (e *Engine) cancelCapture(id string) bool {
	var cancel context.CancelCauseFunc
	if in := e.peekInstance(id); in != nil {
		in.mu.Lock()
		cancel = in.capture
		in.mu.Unlock()
	}
	if cancel != nil {
		cancel(errCaptureCancelled)
	}
	return cancel != nil
}

// captureMaxBytes is the byte limit of a capture of sandbox id.
func (e *Engine) captureMaxBytes(ctx context.Context, id string) int64 {
	limit := e.cfg.CaptureMaxBytes
	if sb, err := e.st.GetSandbox(ctx, id); err == nil && sb.DiskMB > 0 {
		limit = min(limit, 2*int64(sb.DiskMB)<<20)
	}
	return limit
}

// captureErr classifies a capture's failure: a limit passed is
// ErrCaptureLimit, with a message for the API.
func (e *Engine) captureErr(ctx context.Context, err error, limit int64) error {
	switch {
	case errors.Is(err, disk.ErrTooDeep):
		return errdefs.New(errdefs.ErrCaptureLimit, "the disk's tree nests deeper than a capture goes (the capture limit): %v", err)
	case errors.Is(err, disk.ErrTooLarge):
		return errdefs.New(errdefs.ErrCaptureLimit, "the disk holds more than %d bytes of file data to capture (the capture limit): %v", limit, err)
	case errors.Is(context.Cause(ctx), errCaptureTimeout):
		return errdefs.New(errdefs.ErrCaptureLimit, "capturing the disk took longer than %s (the capture limit)", e.cfg.CaptureTimeout)
	case errors.Is(context.Cause(ctx), errCaptureCancelled):
		return fmt.Errorf("capture stopped: %w", errCaptureCancelled)
	}
	return err
}

// deletedDuring is the error of operation op ("checkpoint", "snapshot",
// "fork", "suspend") on sb when err says a delete of sb stopped its
// capture: ErrConflict, "sandbox web was deleted while the checkpoint ran;
// nothing was recorded". It is nil for any other err.
func deletedDuring(sb *store.Sandbox, op string, err error) error {
	if !errors.Is(err, errCaptureCancelled) {
		return nil
	}
	return errdefs.Conflictf("sandbox %s was deleted while the %s ran; nothing was recorded", sb.Name, op)
}

// failClass is the error class an operation that captured a disk fails
// with: ErrCaptureLimit when the capture passed a limit; ErrUnavailable,
// saying the sandbox does not answer, when the runtime's own deadline cut
// a call (runtime.ErrUnresponsive: the sandbox is stopped with SIGSTOP,
// frozen or overloaded); else class.
func failClass(err, class error) error {
	if errors.Is(err, errdefs.ErrCaptureLimit) {
		return errdefs.ErrCaptureLimit
	}
	if errors.Is(err, runtime.ErrUnresponsive) {
		// The words are in the error itself: an unavailable error's text
		// is the API message (errdefs.Public), so a detail would not show.
		return errdefs.New(errdefs.ErrUnavailable, "the sandbox does not answer (it is stopped, frozen or overloaded; other sandboxes are not affected)")
	}
	return class
}
