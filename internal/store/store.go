// Package store persists sbx's records: sandboxes and images (and, in later
// layers, checkpoints, snapshots and events). Bytes live in the blob store;
// records reference them by digest.
//
// Store is the contract; sqlite/ is the embedded default. Every
// implementation passes the suite in storetest/.
package store

import (
	"context"
	"strings"
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
	KeepAlive bool
	// Secrets are the sandbox's secrets, values sealed; nil when it has
	// none.
	Secrets    *SecretSet
	CreateTime time.Time
	UpdateTime time.Time
	// Owner is the id of the API key that made the sandbox ("" the
	// operator: the Unix socket or a key given with --api-key). A fork
	// belongs to its source's owner.
	Owner string
	// Node is the name of the sbxd node the sandbox runs on (its writable
	// layer, its runsc sandbox) or, while it is suspended, the node that
	// suspended it (which holds its memory image and wakes it while it is
	// live); "" on a single sbxd that is not a cluster's node.
	Node string
	// RecoveryIntervalMS is how often, in ms, its node takes a recovery
	// snapshot of it while it runs (memory and disk, stored whole in the
	// blob store before it counts), from which another node recovers it
	// when its node is lost; 0 never.
	RecoveryIntervalMS int64
	// RecoverySnapshot is the id of its latest recovery snapshot (a
	// snapshot record with Suspend set, not listed); "" none.
	RecoverySnapshot string
	// RecoveryTime is when RecoverySnapshot was captured; zero for none.
	RecoveryTime time.Time
}

// SecretSet is a sandbox's secrets as stored (in the sandbox's record and
// in the shape of its snapshots): values sealed by internal/secret's
// Keeper, never in the clear, and the sandbox's CA, with which the egress
// proxy terminates TLS for the hosts of the secrets' rules.
type SecretSet struct {
	// CACert is the CA's certificate (PEM), put in the sandbox's trust
	// store; CAKey its private key (PKCS #8), sealed.
	CACert []byte `json:"ca_cert"`
	CAKey  []byte `json:"ca_key"`
	// List holds the secrets, by name.
	List []StoredSecret `json:"list"`
	// Keyring says which key sealed the values and the CA's key: "" this
	// node's own (secrets.key in its data dir), KeyringCluster the key
	// derived from the cluster key, which every node of the cluster has
	// (so the sandbox can move between nodes).
	Keyring string `json:"keyring,omitempty"`
	// Mounted: the sandbox's container has the CA in its trust store
	// (mounts made at its last cold boot, kept by memory images). See
	// internal/engine/secrets.go.
	Mounted bool `json:"mounted,omitempty"`
}

// KeyringCluster is SecretSet.Keyring for secrets sealed with the key
// derived from the cluster key (secret.DeriveKeeper).
const KeyringCluster = "cluster"

// StoredSecret is one secret as stored.
type StoredSecret struct {
	Name string `json:"name"`
	// Placeholder is what the sandbox sees in $Name.
	Placeholder string `json:"placeholder"`
	// Rules are canonical (secret.API of the parsed rules).
	Rules []api.SecretRule `json:"rules"`
	// Sealed is the value, sealed for "secret:"+Name.
	Sealed []byte `json:"sealed"`
	// ValueBytes is the value's length in bytes.
	ValueBytes int       `json:"value_bytes"`
	UpdateTime time.Time `json:"update_time"`
}

// Clone returns a deep copy of s (nil for nil).
func (s *SecretSet) Clone() *SecretSet {
	if s == nil {
		return nil
	}
	out := &SecretSet{CACert: append([]byte(nil), s.CACert...), CAKey: append([]byte(nil), s.CAKey...), Mounted: s.Mounted, Keyring: s.Keyring}
	for _, x := range s.List {
		x.Rules = append([]api.SecretRule(nil), x.Rules...)
		x.Sealed = append([]byte(nil), x.Sealed...)
		out.List = append(out.List, x)
	}
	return out
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
	// Owner is the id of the API key that pulled, built or imported it;
	// "" for the operator's images, which every key may use.
	Owner string
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
	// Owner is the id of the API key that owns the source sandbox.
	Owner string
	// StoreTime is when the memory image's chunks were flushed to the blob
	// store and Memory recorded; zero while the image is only on the node
	// that captured it (a hot image, stored in the background). AddSnapshot
	// with a memory image (Memory neither empty nor "[]") and no StoreTime
	// sets it to CreateTime.
	StoreTime time.Time
}

// HasMemory reports whether Memory records a memory image (not empty, not
// "[]").
func (sn *Snapshot) HasMemory() bool {
	m := strings.TrimSpace(string(sn.Memory))
	return m != "" && m != "[]"
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
	// Owner is the id of the API key that owns the source sandbox.
	Owner string
}

// Op is an entry of the operation journal: an operation that must be
// finished or rolled back after a crash.
type Op struct {
	ID        string
	SandboxID string
	// Node is the node whose operation it is, which finishes or rolls it
	// back after a crash ("" on a single sbxd).
	Node       string
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
	// Owner is the id of the API key that posted it ("" an admin). A
	// pending event is delivered only to sandboxes of the same owner, or,
	// posted by an admin, to any.
	Owner string
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
	// Owners, when not nil, selects only events whose Owner is one of them.
	Owners []string
}

// Usage is what the recorded sandboxes hold: Count sandboxes that are not
// warm (any state), and the CPUs and MemoryMB limits of those not
// suspended (warm ones included).
type Usage struct {
	Count    int
	CPUs     float64
	MemoryMB int
}

// UsageRow is the usage one sandbox accrued within one UTC hour: CPU
// seconds used, GiB-seconds of memory allocated while running, and
// byte-seconds of checkpoint and snapshot bytes stored. Rows outlive their
// sandbox.
type UsageRow struct {
	SandboxID, SandboxName string
	// KeyID is the API key billed ("" the operator's).
	KeyID string
	// Hour is the start of the UTC hour; First and Last bound the accrual
	// within it (Hour <= First <= Last <= Hour+1h).
	Hour, First, Last time.Time

	CPUSeconds, MemoryGiBSeconds, StoredByteSeconds float64
}

// UsageTotals is usage summed over rows: CPU seconds, GiB-seconds of
// memory and byte-seconds stored, as in UsageRow.
type UsageTotals struct {
	CPUSeconds, MemoryGiBSeconds, StoredByteSeconds float64
}

// UsageMeter is the meter's last reading of one sandbox: whether its
// container ran, the container's CPU counter (ns) and when it was read.
// The storage meter (SandboxID "") keeps only Time, the last accrual of
// stored bytes.
type UsageMeter struct {
	SandboxID string
	Running   bool
	CPUNanos  uint64
	Time      time.Time
}

// StoredBytes is what one sandbox keeps in the blob store: the bytes its
// disk checkpoints added plus those of its ready snapshots that are
// billable (not a fork's own). SandboxName is from a snapshot's record
// ("" when only checkpoints count); KeyID is the owner of the sandbox or
// of its snapshots (the key billed).
type StoredBytes struct {
	SandboxID, SandboxName, KeyID string
	Bytes                         int64
}

// LimitSuspension records a sandbox that its key's daily spending limit
// suspended. Resume asks that it be resumed once the key is under its
// limit again.
type LimitSuspension struct {
	SandboxID, KeyID string
	Resume           bool
	Time             time.Time
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
	// Owners, when not nil, selects only sandboxes whose Owner is one of
	// them (a tenant's list).
	Owners []string
	// Node, when not "", selects the sandboxes on that node.
	Node string
	// WakeOn, when not "", selects the suspended sandboxes waiting on
	// that event key (an index serves it: an event's post reads only
	// them).
	WakeOn string
	// After, when not nil, selects the sandboxes after it in the list's
	// order (CreateTime, then ID): the next page of a list.
	After *PageKey
	// Limit, when above 0, returns at most that many.
	Limit int
}

// PageKey is where a page of a list ends: the CreateTime and ID of its
// last sandbox.
type PageKey struct {
	CreateTime time.Time
	ID         string
}

// Key is the record of an API key (docs/api.md "API keys and tenants").
// The secret itself is never stored: Hash is the lowercase hex SHA-256 of
// it.
type Key struct {
	// ID is "key_" and 16 hex digits; objects record it as their Owner.
	ID   string
	Name string
	Hash string
	// Labels are the caller's key=value pairs.
	Labels map[string]string
	// Admin keys see and act on every object and may manage keys; tenant
	// keys see only what they made.
	Admin bool
	// DailyLimitUSD is the spending limit per UTC day in US dollars; nil
	// for no limit.
	DailyLimitUSD *float64
	CreateTime    time.Time
	// RevokeTime is when the key was revoked; zero while it is live.
	RevokeTime time.Time
}

// Health is implemented by a store whose database can stop answering while
// sbxd runs (PostgreSQL): Outage returns an errdefs.ErrUnavailable error
// that names no server while the database does not answer, nil while it
// does. The SQLite store, a file of sbxd's own, does not implement it.
type Health interface {
	Outage() error
}

// Node is the record of one sbxd node of a cluster (the nodes table of a
// shared store).
type Node struct {
	Name string
	// URL is the node's advertised API address.
	URL string
	// HostID identifies the node's data dir (a random id kept in it): a
	// node that restarts on the same data dir takes its record over at
	// once; another one waits until its lease expires.
	HostID   string
	Version  string
	Protocol int
	// Epoch is set by JoinNode: one more than the record's last.
	Epoch int64
	// State is NodeStopped when the node left and its lease ended,
	// NodeLost when its lease ended without it leaving, NodeDraining or
	// NodeActive while it runs; Live says whether its lease runs (by the
	// database's clock).
	State           api.NodeState
	Live            bool
	JoinTime        time.Time
	HeartbeatTime   time.Time
	LeaseExpireTime time.Time
	Capacity        api.NodeCapacity
}

// Cluster is implemented by a store that several sbxd nodes can share
// (PostgreSQL): the nodes table, whose rows are leases that expire unless
// renewed. Times are the database's, so nodes' clocks may differ.
type Cluster interface {
	// JoinNode takes the record of n.Name for this process: it inserts
	// it, or takes it over when its lease expired or its HostID is
	// n.HostID (the same data dir), and sets n.Epoch (the last + 1),
	// n.State (a draining node stays draining) and the times. The lease
	// runs ttl. Errors: errdefs.ErrConflict when
	// another node holds the name with a live lease, or a live node has a
	// different Protocol.
	JoinNode(ctx context.Context, n *Node, ttl time.Duration) error
	// HeartbeatNode renews the lease of node name at epoch for ttl and
	// replaces its capacity. errdefs.ErrConflict (the node was fenced)
	// when the record's epoch is no longer epoch: another process took
	// the name over.
	HeartbeatNode(ctx context.Context, name string, epoch int64, c api.NodeCapacity, ttl time.Duration) error
	// LeaveNode ends the lease of node name at epoch now and records it
	// stopped; a record at another epoch is left alone.
	LeaveNode(ctx context.Context, name string, epoch int64) error
	// ListNodes returns every node record, by name.
	ListNodes(ctx context.Context) ([]*Node, error)
	// HoldDuty reports whether this process holds the cluster's duty (the
	// work done once for the whole cluster, such as metering stored
	// bytes), taking it when no process does. At most one process holds
	// it at a time, as long as its connection to the database lasts.
	HoldDuty(ctx context.Context) (bool, error)
	// NotifyWake asks node to wake sandbox sandboxID (an event was
	// delivered to it); every node's ListenWakes hears it within
	// milliseconds (PostgreSQL's NOTIFY), and the one named acts.
	NotifyWake(ctx context.Context, node, sandboxID string) error
	// ListenWakes calls wake for each NotifyWake sent to node until ctx
	// ends, and listening each time it starts listening (at first, and
	// again after its connection broke: wakes sent meanwhile are lost, so
	// listening looks for what they would have woken).
	ListenWakes(ctx context.Context, node string, listening func(), wake func(sandboxID string))
	// PutImageRootFS records where image imageID's root filesystem is in
	// the shared blob store: the chunks of its manifest (hex digests) and
	// its size. A second put keeps the first. GetImageRootFS returns it,
	// or errdefs.ErrImageNotFound.
	PutImageRootFS(ctx context.Context, imageID string, manifest []string, sizeBytes int64) error
	GetImageRootFS(ctx context.Context, imageID string) ([]string, error)
	// ClaimSandbox makes suspended sandbox sb's node to, if its record
	// is still as sb has it (its Node and UpdateTime), and sets sb's Node
	// and UpdateTime: of nodes racing to resume it, exactly one wins.
	// Errors: errdefs.ErrConflict (the record changed: another node took
	// it, or it is no longer suspended); ErrSandboxNotFound.
	ClaimSandbox(ctx context.Context, sb *Sandbox, to string) error
	// TakeOverSandbox writes sb whole, as UpdateSandbox does, if its
	// record is still as it was read (its Node and an UpdateTime of seen):
	// the node that recovers a lost node's sandbox changes it this way,
	// so that of nodes racing to, one does. It sets sb's UpdateTime.
	// Errors: errdefs.ErrConflict (the record changed); ErrSandboxNotFound.
	TakeOverSandbox(ctx context.Context, sb *Sandbox, seen time.Time) error
	// SetNodeDraining marks node name draining (it takes no new
	// sandboxes, and moves its own away) or not; errdefs.ErrNotFound when
	// there is no such node.
	SetNodeDraining(ctx context.Context, name string, draining bool) error
	// RemoveNode deletes node name's record and its journal entries: a
	// node that will not come back. Errors: errdefs.ErrNotFound (no such
	// node); errdefs.ErrConflict when it is live (its lease runs), or
	// when sandbox records still name it (the error says how many and
	// names some).
	RemoveNode(ctx context.Context, name string) error
	// CheckClusterKey records digest as the digest of the cluster's key if
	// none is recorded, and checks it against the recorded one:
	// errdefs.ErrConflict when they differ (a node given another key).
	CheckClusterKey(ctx context.Context, digest string) error
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
	// SandboxUsage sums what the sandboxes of node hold ("" every
	// sandbox's), for admission.
	SandboxUsage(ctx context.Context, node string) (Usage, error)
	// UpdateSandbox replaces the record with the same ID and sets
	// UpdateTime, if the record still names sb's Node: a node writes only
	// the sandboxes it owns, so one that lost its lease, and whose
	// sandboxes another node took over meanwhile, changes none of them
	// (fencing). Errors: ErrSandboxNotFound; errdefs.ErrConflict (another
	// node owns it now); ErrNameTaken.
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
	// SetSnapshotStored records that a ready snapshot's memory image is in
	// the blob store: its Memory, MemoryBytes, StoredBytes and StoreTime
	// (now when zero). ErrSnapshotNotFound when there is no such ready
	// record (deleted or expired meanwhile).
	SetSnapshotStored(ctx context.Context, sn *Snapshot) error
	// GetSnapshot returns one snapshot or ErrSnapshotNotFound.
	GetSnapshot(ctx context.Context, id string) (*Snapshot, error)
	// ListSnapshots returns snapshots, newest first; with sandboxID "" all.
	ListSnapshots(ctx context.Context, sandboxID string) ([]*Snapshot, error)
	// DeleteSnapshot removes a snapshot record; a missing one is fine.
	DeleteSnapshot(ctx context.Context, id string) error

	// PutOp writes a journal entry; DeleteOp removes it; ListOps returns
	// the entries of node ("" every entry), oldest first.
	PutOp(ctx context.Context, op *Op) error
	DeleteOp(ctx context.Context, id string) error
	ListOps(ctx context.Context, node string) ([]*Op, error)

	// AddEvent inserts an event (and sets its Seq).
	AddEvent(ctx context.Context, ev *Event) error
	// ListEvents returns one page of events, oldest first, as q selects
	// and bounds it; it reads no more rows than the page holds.
	ListEvents(ctx context.Context, q EventQuery) ([]*Event, error)
	// CountEvents counts the events q selects (its After, Limit and
	// MaxBytes aside) and the bytes of their bodies.
	CountEvents(ctx context.Context, q EventQuery) (n int, bytes int64, err error)
	// DeletePendingEvent removes a pending event (with owners not nil,
	// only one whose Owner is one of them); errdefs.ErrEventNotFound when
	// no such pending event has that id.
	DeletePendingEvent(ctx context.Context, id string, owners []string) error
	// DeletePendingEvents removes the pending events of key (with owners
	// not nil, those whose Owner is one of them) and returns how many
	// there were.
	DeletePendingEvents(ctx context.Context, key string, owners []string) (int, error)
	// TakePending delivers to sandboxID the pending, unexpired events of
	// key (all of them) and returns them, oldest first.
	// With owners not nil, only events whose Owner is one of them.
	TakePending(ctx context.Context, key, sandboxID string, owners []string, now time.Time) ([]*Event, error)
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

	// AddUsage adds rows to the usage of their (SandboxID, Hour), keeping
	// the earliest First and latest Last, replaces the meters given and
	// removes the meters of dropMeters, in one transaction.
	AddUsage(ctx context.Context, rows []*UsageRow, meters []*UsageMeter, dropMeters []string) error
	// ListUsage returns the usage rows whose hour overlaps [since, until),
	// by hour then sandbox id.
	ListUsage(ctx context.Context, since, until time.Time) ([]*UsageRow, error)
	// UsageByKey returns the usage recorded in the hours from since's hour
	// on, summed per key id ("" the operator's), in one query; keys with
	// no rows are left out. The spending limits read it (no row is parsed).
	UsageByKey(ctx context.Context, since time.Time) (map[string]UsageTotals, error)
	// UsageMeters returns every meter's last reading.
	UsageMeters(ctx context.Context) ([]*UsageMeter, error)
	// ListStoredBytes returns what each sandbox (deleted ones included,
	// through their snapshots) keeps in the blob store; sandboxes that
	// keep nothing are left out.
	ListStoredBytes(ctx context.Context) ([]*StoredBytes, error)

	// PutImage inserts or replaces an image record.
	PutImage(ctx context.Context, img *Image) error
	GetImage(ctx context.Context, name string) (*Image, error)
	// ListImages returns all images by name.
	ListImages(ctx context.Context) ([]*Image, error)
	// DeleteImage removes the record; a missing one is ErrImageNotFound.
	DeleteImage(ctx context.Context, name string) error

	// CreateKey inserts a key record; its ID and Hash must be new, and its
	// Name unused among live keys (errdefs.ErrNameTaken).
	CreateKey(ctx context.Context, k *Key) error
	// GetKey finds a key by id or, among live keys, by name (revoked keys
	// by id only); errdefs.ErrKeyNotFound when there is none.
	GetKey(ctx context.Context, idOrName string) (*Key, error)
	// KeyByHash finds the key whose Hash is hash, revoked or not;
	// errdefs.ErrKeyNotFound when there is none.
	KeyByHash(ctx context.Context, hash string) (*Key, error)
	// ListKeys returns keys, oldest first; revoked ones too when revoked.
	ListKeys(ctx context.Context, revoked bool) ([]*Key, error)
	// RevokeKey sets the RevokeTime of a live key id; errdefs.ErrKeyNotFound
	// when it does not exist or is already revoked.
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// SetKeyDailyLimit replaces the DailyLimitUSD of live key id (nil: no
	// limit); errdefs.ErrKeyNotFound when it is not a live key.
	SetKeyDailyLimit(ctx context.Context, id string, limit *float64) error

	// PutLimitSuspension inserts or replaces the record of a sandbox its
	// key's limit suspended; ListLimitSuspensions returns them, oldest
	// first; DeleteLimitSuspension removes one (a missing one is fine);
	// SetLimitResume sets Resume on every record of a key.
	PutLimitSuspension(ctx context.Context, ls *LimitSuspension) error
	ListLimitSuspensions(ctx context.Context) ([]*LimitSuspension, error)
	DeleteLimitSuspension(ctx context.Context, sandboxID string) error
	SetLimitResume(ctx context.Context, keyID string, resume bool) error

	Close() error
}
