package snapshot

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Runtime is what Capture needs of a container runtime (runtime.Runtime
// has it): pausing and resuming a container's processes, and saving its
// memory and processes into a directory, leaving it as it was.
type Runtime interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Checkpoint(ctx context.Context, id, imageDir string) error
}

// Point names a step of a capture at which CaptureOptions.Fault is called.
type Point string

// Paused: the container was just paused; nothing was captured yet.
const Paused Point = "paused"

// CaptureOptions says what Capture captures and how.
type CaptureOptions struct {
	// Runtime runs container ID.
	Runtime Runtime
	ID      string
	// Dir is where the memory image goes (made by Runtime.Checkpoint; it
	// should not exist). Capture removes it when it fails.
	Dir string
	// SpecVersion is the container layout recorded in the image
	// (WriteSpec).
	SpecVersion int
	// Quiesce, when set, is called first, before the pause: the
	// container's own processes drop what a checkpoint cannot save (host
	// sockets). Its error ends Capture with nothing else done.
	Quiesce func(ctx context.Context) error
	// Wake, when set, is called once the container runs again after a
	// Quiesce that succeeded: after a capture that is not held, and after
	// any failure. Its trouble is its own to report.
	Wake func(ctx context.Context)
	// Disk captures the container's disk while it is paused, before its
	// memory; its results are the caller's (the closure keeps them).
	Disk func(ctx context.Context) error
	// Hold leaves the container paused when the capture succeeds (a
	// suspend: nothing it does afterwards could be kept). A failed capture
	// resumes it all the same.
	Hold bool
	// Fault, when set, is called at each Point (fault injection).
	Fault func(Point)
	// Progress, when set, is told what is being done, as short text.
	Progress func(string)
}

// Captured is what Capture took.
type Captured struct {
	// Dir holds the memory image, with its layout record.
	Dir string
	// Paused is how long the container was paused: until it resumed, or,
	// held, until the image was written.
	Paused time.Duration
	// Steps is how long each step took.
	Steps Steps
}

// Steps are the durations of a capture's steps (zero for one not taken):
// the runtime's pause, checkpoint and resume are each one runsc call.
type Steps struct {
	Quiesce, Pause, Disk, Checkpoint, Resume, Wake time.Duration
}

// Capture takes a container's disk and memory at one paused instant:
// Quiesce, pause, Disk, checkpoint the memory into Dir and record the
// layout in it, then resume (unless Hold) and Wake. On any failure after
// the pause the container is resumed (a resume that fails too is added to
// the error), Woken, and Dir removed; nothing else is undone (what Disk
// stored is the caller's).
func Capture(ctx context.Context, o CaptureOptions) (c *Captured, err error) {
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	var steps Steps
	t := time.Now()
	// step records the time since the last step's end into d.
	step := func(d *time.Duration) {
		now := time.Now()
		*d, t = now.Sub(t), now
	}
	if o.Quiesce != nil {
		if err := o.Quiesce(ctx); err != nil {
			return nil, fmt.Errorf("quiesce the agent: %w", err)
		}
	}
	step(&steps.Quiesce)
	paused, held := false, false
	defer func() {
		if err != nil {
			os.RemoveAll(o.Dir)
			if paused {
				if rerr := o.Runtime.Resume(ctx, o.ID); rerr != nil {
					err = fmt.Errorf("%w (and resuming after it: %v)", err, rerr)
				}
			}
		}
		if !held && o.Wake != nil {
			t = time.Now()
			o.Wake(ctx)
			if c != nil {
				step(&c.Steps.Wake)
			}
		}
	}()
	progress("pausing the sandbox")
	start := time.Now()
	if err := o.Runtime.Pause(ctx, o.ID); err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	step(&steps.Pause)
	paused = true
	if o.Fault != nil {
		o.Fault(Paused)
	}
	if o.Disk != nil {
		if err := o.Disk(ctx); err != nil {
			return nil, fmt.Errorf("capture the disk: %w", err)
		}
	}
	step(&steps.Disk)
	progress("saving memory and processes")
	if err := o.Runtime.Checkpoint(ctx, o.ID, o.Dir); err != nil {
		return nil, fmt.Errorf("checkpoint the memory: %w", err)
	}
	if err := WriteSpec(o.Dir, o.SpecVersion); err != nil {
		return nil, err
	}
	step(&steps.Checkpoint)
	c = &Captured{Dir: o.Dir, Steps: steps}
	if o.Hold {
		held = true
		c.Paused = time.Since(start)
		return c, nil
	}
	if err := o.Runtime.Resume(ctx, o.ID); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	step(&c.Steps.Resume)
	paused = false
	c.Paused = time.Since(start)
	return c, nil
}
