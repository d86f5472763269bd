// Package store persists sbx's records: sandboxes and images (and, in later
// layers, checkpoints, snapshots and events). Bytes live in the blob store;
// records reference them by digest.
//
// Store is the contract; sqlite/ is the embedded default. Every
// implementation passes the suite in storetest/.
package store

import (
	"context"
	"time"

	"github.com/sbxhq/sbx/api"
)

// Sandbox is the durable record of a sandbox.
type Sandbox struct {
	ID          string
	Name        string
	State       api.State
	StateReason string
	Image       string
	// ImageID is the id of the exact root filesystem the writable layer
	// sits on; an image rebuilt under the same name gets a new id.
	ImageID  string
	CPUs     float64
	MemoryMB int
	DiskMB   int
	Env      map[string]string
	Labels   map[string]string
	Network  api.NetworkRules
	// Volumes are named host directories mounted into the sandbox.
	Volumes   []api.Volume
	TimeoutMS int64
	// Source* name what the sandbox was forked or started from.
	SourceSandbox  string
	SourceSnapshot string
	// DiskSource is the checkpoint id ("v3") the disk was last restored
	// from, "" if none since v0; for a fork's disk, "<sandbox>/<id>".
	DiskSource string
	// Pooled marks a warm sandbox booted ahead of requests and not yet
	// given to a caller; it is hidden from lists and lookups by name.
	Pooled bool
	// SuspendSnapshot is the snapshot (memory and disk in the blob store)
	// a suspended sandbox wakes from; "" when it is not suspended.
	SuspendSnapshot string
	// WakeOn is the event key a suspended sandbox waits on ("" none).
	WakeOn string
	// SuspendTime is when it was suspended (zero when not suspended).
	SuspendTime time.Time
	// KeepAlive: a process running in the sandbox counts as activity for
	// the idle timeout (TimeoutMS).
	KeepAlive  bool
	CreateTime time.Time
	UpdateTime time.Time
}

// Image is the record of an unpacked image.
type Image struct {
	Name string
	// ID names the unpacked root filesystem's directory; it changes when the
	// image is rebuilt, and the old one is kept while sandboxes use it.
	ID         string
	Digest     string
	Source     string
	SizeBytes  int64
	Env        []string
	CreateTime time.Time
}

// Checkpoint is the record of a disk checkpoint of a sandbox.
type Checkpoint struct {
	SandboxID string
	// Seq is the number in the id: v0, v1, ...
	Seq     int
	Comment string
	// SourceID is the sandbox's DiskSource when the checkpoint was taken.
	SourceID string
	// Health is "ok" or "damaged".
	Health string
	// Manifest is the digests of the stored manifest's chunks, in order.
	Manifest []string
	// SizeBytes is the logical size of the layer's files; AddedBytes the
	// encoded bytes this checkpoint added to the blob store.
	SizeBytes, AddedBytes int64
	Files                 int
	CreateTime            time.Time
	// StoreTime is when the checkpoint's manifest and chunks were flushed
	// to the blob store; zero while they are not (a btrfs snapshot
	// checkpoint, stored in the background: its Manifest is empty and its
	// sizes are 0 until then). AddCheckpoint of a record with a manifest
	// and no StoreTime sets it to CreateTime.
	StoreTime time.Time
}

// Snapshot is the record of a memory snapshot: a gVisor memory image and a
// disk checkpoint of the writable layer, taken at one paused instant.
type Snapshot struct {
	ID   string
	Name string
	// SandboxID and SandboxName are the source's.
	SandboxID, SandboxName string
	// Image and ImageID are the source's image: a restore needs the same
	// lower layer under the captured writable layer.
	Image, ImageID string
	// Shape is the source's sandbox shape (JSON), restored with it.
	Shape []byte
	// Memory is the stored memory image (JSON of snapshot.Image); Disk the
	// digests of the disk manifest's chunks.
	Memory []byte
	Disk   []string
	// MemoryBytes and DiskBytes are the logical sizes; StoredBytes what the
	// snapshot added to the blob store.
	MemoryBytes, DiskBytes, StoredBytes int64
	// Metadata is the caller's JSON object, or nil.
	Metadata []byte
	// Fork marks the snapshot a fork takes for itself: not billable, and
	// deleted with the last sandbox made from it.
	Fork bool
	// Suspend marks the snapshot of a suspended sandbox: hidden from
	// lists, not billable as a snapshot, deleted when the sandbox resumes.
	Suspend bool
	// State is "ready", or "expired" (its bytes are gone; kept as a
	// tombstone so a lookup can say so).
	State      string
	CreateTime time.Time
	// ExpireTime is when it is collected; zero for never.
	ExpireTime time.Time
}

// Delivery is the record of a delivery: an archive of files taken from a
// sandbox, stored in the blob store, and its signed statement. Deliveries
// form one chain (Seq 1, 2, ...): each envelope's statement names the
// digest of the envelope before it. A delivery outlives its sandbox and is
// never deleted.
type Delivery struct {
	ID string
	// Seq is its place in the chain, from 1; set by AddDelivery.
	Seq  int64
	Name string
	// SandboxID and SandboxName are the source's.
	SandboxID, SandboxName string
	// ArchiveDigest is "sha256:<hex>" of the archive's bytes (tar, zstd);
	// ArchiveBytes their count; Chunks the digests of the blobs that hold
	// them, in order.
	ArchiveDigest string
	ArchiveBytes  int64
	Chunks        []string
	// Files is how many regular files the archive holds.
	Files int
	// Envelope is the DSSE envelope (JSON) as signed and served; Digest is
	// "sha256:<hex>" of exactly those bytes, and Previous the Digest of the
	// delivery before it in the chain ("" for the first).
	Envelope []byte
	Digest   string
	Previous string
	// Metadata is the caller's JSON object, or nil.
	Metadata   []byte
	CreateTime time.Time
}

// Op is an entry of the operation journal: an operation that must be
// finished or rolled back after a crash.
type Op struct {
	ID         string
	SandboxID  string
	Kind       string
	Data       []byte // JSON, the operation's own
	CreateTime time.Time
}

// Event is a message posted to POST /v1/events/{key}: delivered to the
// sandboxes waiting on the key, or kept, undelivered (SandboxID ""), until
// one suspends on it or it expires.
type Event struct {
	ID  string
	Key string
	// Seq orders events by insertion (set by AddEvent); pages of
	// ListEvents resume after a Seq.
	Seq int64
	// SandboxID is the sandbox it was delivered to; "" while pending.
	SandboxID   string
	Data        []byte
	ContentType string
	CreateTime  time.Time
	// DeliverTime is when it was delivered (zero while pending).
	DeliverTime time.Time
	// ExpireTime is when a pending event is dropped.
	ExpireTime time.Time
}

// EventQuery selects events: a sandbox's delivered events (SandboxID), or
// the pending events (Pending) of Key ("" every key); the zero query
// selects every event. A page starts after the event whose Seq is After,
// holds at most Limit events (0: no bound) and stops after the event that
// brings its bodies to MaxBytes or more (0: no bound).
type EventQuery struct {
	SandboxID string
	Pending   bool
	Key       string
	After     int64
	Limit     int
	MaxBytes  int64
}

// Usage is what the recorded sandboxes hold: Count sandboxes that are not
// warm (any state), and the CPUs and MemoryMB limits of those not
// suspended (warm ones included).
type Usage struct {
	Count    int
	CPUs     float64
	MemoryMB int
}

// SandboxFilter selects sandboxes in ListSandboxes.
type SandboxFilter struct {
	// Labels must all match (key=value).
	Labels map[string]string
	// Pooled selects warm sandboxes instead of callers' ones.
	Pooled bool
	// All selects both.
	All bool
	// SourceSnapshot selects sandboxes started from that snapshot.
	SourceSnapshot string
}

// Store persists records. Methods are safe for concurrent use.
//
// Errors: lookups of missing records return errdefs.ErrSandboxNotFound or
// errdefs.ErrImageNotFound; CreateSandbox, and UpdateSandbox when it renames,
// return errdefs.ErrNameTaken when the name is in use.
type Store interface {
	// CreateSandbox inserts a record; its ID and Name must be unique.
	CreateSandbox(ctx context.Context, sb *Sandbox) error
	// GetSandbox finds a sandbox by id or, among non-pooled sandboxes, name.
	GetSandbox(ctx context.Context, idOrName string) (*Sandbox, error)
	// ListSandboxes returns matching sandboxes, oldest first.
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]*Sandbox, error)
	// SandboxUsage sums what the sandboxes hold, for admission.
	SandboxUsage(ctx context.Context) (Usage, error)
	// UpdateSandbox replaces the record with the same ID and sets UpdateTime.
	UpdateSandbox(ctx context.Context, sb *Sandbox) error
	// DeleteSandbox removes the record; a missing one is not an error.
	DeleteSandbox(ctx context.Context, id string) error

	// AddCheckpoint inserts a checkpoint; its (SandboxID, Seq) must be new.
	AddCheckpoint(ctx context.Context, cp *Checkpoint) error
	// GetCheckpoint returns one checkpoint or ErrCheckpointNotFound.
	GetCheckpoint(ctx context.Context, sandboxID string, seq int) (*Checkpoint, error)
	// ListCheckpoints returns a sandbox's checkpoints, newest first; with
	// sandboxID "" every sandbox's.
	ListCheckpoints(ctx context.Context, sandboxID string) ([]*Checkpoint, error)
	// SetCheckpointStored records that checkpoint seq of a sandbox is in the
	// blob store: its manifest, sizes and StoreTime. ErrCheckpointNotFound
	// when there is no such record (the sandbox was deleted meanwhile).
	SetCheckpointStored(ctx context.Context, cp *Checkpoint) error
	// SetCheckpointHealth records a verification's result.
	SetCheckpointHealth(ctx context.Context, sandboxID string, seq int, health string) error
	// DeleteCheckpoints removes every checkpoint of a sandbox.
	DeleteCheckpoints(ctx context.Context, sandboxID string) error

	// AddSnapshot inserts a snapshot; UpdateSnapshot replaces it.
	AddSnapshot(ctx context.Context, sn *Snapshot) error
	UpdateSnapshot(ctx context.Context, sn *Snapshot) error
	// GetSnapshot returns one snapshot or ErrSnapshotNotFound.
	GetSnapshot(ctx context.Context, id string) (*Snapshot, error)
	// ListSnapshots returns snapshots, newest first; with sandboxID "" all.
	ListSnapshots(ctx context.Context, sandboxID string) ([]*Snapshot, error)
	// DeleteSnapshot removes a snapshot record; a missing one is fine.
	DeleteSnapshot(ctx context.Context, id string) error

	// PutOp writes a journal entry; DeleteOp removes it; ListOps returns
	// all, oldest first.
	PutOp(ctx context.Context, op *Op) error
	DeleteOp(ctx context.Context, id string) error
	ListOps(ctx context.Context) ([]*Op, error)

	// AddEvent inserts an event (and sets its Seq).
	AddEvent(ctx context.Context, ev *Event) error
	// ListEvents returns one page of events, oldest first, as q selects
	// and bounds it; it reads no more rows than the page holds.
	ListEvents(ctx context.Context, q EventQuery) ([]*Event, error)
	// CountEvents counts the events q selects (its After, Limit and
	// MaxBytes aside) and the bytes of their bodies.
	CountEvents(ctx context.Context, q EventQuery) (n int, bytes int64, err error)
	// DeletePendingEvent removes a pending event; errdefs.ErrEventNotFound
	// when no pending event has that id.
	DeletePendingEvent(ctx context.Context, id string) error
	// DeletePendingEvents removes the pending events of key and returns
	// how many there were.
	DeletePendingEvents(ctx context.Context, key string) (int, error)
	// TakePending delivers to sandboxID the pending, unexpired events of
	// key (all of them) and returns them, oldest first.
	TakePending(ctx context.Context, key, sandboxID string, now time.Time) ([]*Event, error)
	// DeleteEvents removes a sandbox's events; DeleteExpiredEvents the
	// pending events that expired before now.
	DeleteEvents(ctx context.Context, sandboxID string) error
	DeleteExpiredEvents(ctx context.Context, now time.Time) (int, error)

	// AddDelivery appends d to the chain and sets its Seq: its Previous
	// must be the Digest of the last delivery ("" when there is none), or
	// it is errdefs.ErrConflict and nothing is written.
	AddDelivery(ctx context.Context, d *Delivery) error
	// GetDelivery returns one delivery by id or errdefs.ErrNotFound.
	GetDelivery(ctx context.Context, id string) (*Delivery, error)
	// ListDeliveries returns the deliveries of sandboxIDOrName (its id or
	// name; "" all), oldest (lowest Seq) first.
	ListDeliveries(ctx context.Context, sandboxIDOrName string) ([]*Delivery, error)
	// LastDelivery returns the last delivery of the chain, nil if none.
	LastDelivery(ctx context.Context) (*Delivery, error)

	// PutImage inserts or replaces an image record.
	PutImage(ctx context.Context, img *Image) error
	GetImage(ctx context.Context, name string) (*Image, error)
	// ListImages returns all images by name.
	ListImages(ctx context.Context) ([]*Image, error)
	// DeleteImage removes the record; a missing one is ErrImageNotFound.
	DeleteImage(ctx context.Context, name string) error

	Close() error
}
