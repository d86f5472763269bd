// Package runtime is the contract between the engine and the OCI runtime
// that isolates sandboxes. gvisor/ implements it with runsc; nothing else in
// sbx runs runsc.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ErrUnsupported is returned, wrapped, by a runtime for an operation it
// cannot do at all (the host-process fake's Checkpoint and Restore):
// errors.Is(err, ErrUnsupported) and errors.Is(err, errors.ErrUnsupported)
// both hold. It is never returned for a failure of an operation the
// runtime has.
var ErrUnsupported = fmt.Errorf("not supported by this runtime: %w", errors.ErrUnsupported)

// ErrUnresponsive is returned, wrapped, by a runtime whose call on a
// container did not finish within its deadline: the container's sandbox is
// stopped (SIGSTOP), frozen or overloaded. errors.Is(err, ErrUnresponsive)
// holds; a deadline of the caller's own context does not make it.
var ErrUnresponsive = errors.New("the sandbox does not answer")

// Status is a container's state as the runtime reports it.
type Status string

// Container statuses, as in the OCI runtime spec's state (plus paused).
const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped"
	// StatusMissing: the runtime has no container of that id.
	StatusMissing Status = "missing"
	// StatusUnresponsive: the container exists but did not say its state
	// in time (its sandbox is stopped, frozen or overloaded).
	StatusUnresponsive Status = "unresponsive"
)

// Mount is a bind mount of a host path into the sandbox.
type Mount struct {
	Source      string
	Destination string
	ReadOnly    bool
}

// Spec is what a sandbox is booted from.
type Spec struct {
	// ID is the container id (the sandbox id).
	ID string
	// RootFS is the host path of the root filesystem (the overlay mount).
	RootFS string
	// Hostname is the sandbox's UTS hostname.
	Hostname string
	// Args is the init process: sbx's agent.
	Args []string
	Env  []string
	// Mounts are bind mounts: the agent binary, its socket dir, /tmp, volumes.
	Mounts []Mount
	// NetNS is the path of a network namespace to join ("" = loopback only).
	NetNS string
	// CPUs is the CPU limit in cores (cgroup CPU quota over a 100 ms period).
	CPUs float64
	// MemoryBytes is the memory limit (cgroup memory.limit_in_bytes).
	MemoryBytes int64
	// PidsLimit caps the number of tasks (cgroup pids.max); 0 = no limit.
	PidsLimit int64
}

// State is a container's state.
type State struct {
	ID      string
	Status  Status
	PID     int // the sandbox process on the host
	Created time.Time
}

// Stats are a running sandbox's resource counters.
type Stats struct {
	CPUNanos    uint64
	MemoryBytes uint64
	Pids        uint64
}

// Runtime boots and stops sandboxes. Methods are safe for concurrent use on
// different ids; callers serialise calls on one id.
type Runtime interface {
	// Name is the runtime's name and platform, e.g. "runsc/systrap".
	Name() string
	// Start boots a container from spec and returns once its init runs.
	// Bundle is a directory the runtime may use for the container's files.
	Start(ctx context.Context, spec *Spec, bundle string) error
	// Attach takes over the host side of a running container that an
	// earlier process started in bundle (Start's or Restore's): for runsc,
	// draining its init's output. Attaching twice is fine.
	Attach(id, bundle string) error
	// State reports a container's status (StatusMissing if unknown).
	State(ctx context.Context, id string) (State, error)
	// List returns every container the runtime knows; one whose state
	// cannot be had in time is listed with StatusUnresponsive, and does not
	// hold up the others.
	List(ctx context.Context) ([]State, error)
	// Delete kills a container and removes it; a missing one is fine.
	Delete(ctx context.Context, id string) error
	// Pause stops every process of a container (runsc pause: gVisor stops
	// its tasks; the host cgroup freezer must not be used on systrap
	// sandboxes, which die after a few freezes); Resume lets them go on.
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Checkpoint saves a container's memory and processes into imageDir
	// (gVisor's checkpoint: files checkpoint.img, pages.img,
	// pages_meta.img), leaving it as it was (running or paused).
	Checkpoint(ctx context.Context, id, imageDir string) error
	// Restore starts a container from spec with the memory and processes
	// saved in imageDir; spec must match the saved container's (args,
	// mount destinations). With background, memory pages keep loading
	// after Restore returns (the container runs meanwhile; imageDir's files
	// are held open until they are loaded).
	Restore(ctx context.Context, spec *Spec, bundle, imageDir string, background bool) error
	// Signal sends a signal to a container's init.
	Signal(ctx context.Context, id string, sig syscall.Signal) error
	// OOMKilled reports whether the container's memory cgroup killed a
	// process for passing its limit. Call it before Delete.
	OOMKilled(id string) bool
	// Stats returns a container's resource counters.
	Stats(ctx context.Context, id string) (Stats, error)
	// LimitAll caps what all containers together may use: cpus cores
	// (CPU quota) and memoryBytes of memory, on the cgroup that holds
	// them. A single container's limit may not exceed cpus.
	LimitAll(cpus float64, memoryBytes int64) error
}
