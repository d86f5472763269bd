package api

import "time"

// ClusterProtocol is the version of what sbxd nodes of one cluster share:
// the records' meaning, the node-to-node calls, the layout in the blob
// store. A node joins a cluster only if every live node has the same
// ClusterProtocol (a different sbx version is allowed); it goes up when a
// release changes one of them, and such a release is rolled out by
// stopping every node first (docs/cluster.md, "Versions").
const ClusterProtocol = 2

// NodeState is a node's state in GET /v1/nodes.
type NodeState string

// Node states.
const (
	// NodeActive: the node heartbeats and takes new sandboxes.
	NodeActive NodeState = "active"
	// NodeDraining: the node heartbeats, takes no new sandboxes, and its
	// sandboxes are being moved away (sbx node drain).
	NodeDraining NodeState = "draining"
	// NodeStopped: the node left the cluster when its sbxd stopped.
	NodeStopped NodeState = "stopped"
	// NodeLost: the node's lease expired without it leaving (its sbxd or
	// its machine died, or it cannot reach the database).
	NodeLost NodeState = "lost"
)

// Node is one sbxd of a cluster: several sbxd sharing one PostgreSQL store
// and one blob store (GET /v1/nodes). A single sbxd on its own SQLite file
// lists itself alone, with no lease.
type Node struct {
	// Name is the node's name (sbxd --node; default the host name).
	Name string `json:"name"`
	// URL is where other nodes reach its API (sbxd --advertise); "" when
	// it serves no TCP address.
	URL   string    `json:"url"`
	State NodeState `json:"state"`
	// Version is the sbx version the node runs; Protocol its
	// ClusterProtocol.
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	// Epoch counts the node's joins: each start of its sbxd takes a new
	// one, and a node whose epoch was taken over stops (fencing).
	Epoch int64 `json:"epoch"`
	// Self marks the node that answered the request.
	Self bool `json:"self"`
	// JoinTime is when the node's sbxd joined; HeartbeatTime its last
	// heartbeat; LeaseExpireTime when the node counts as lost unless it
	// heartbeats again (null on a single sbxd).
	JoinTime        time.Time  `json:"join_time"`
	HeartbeatTime   *time.Time `json:"heartbeat_time"`
	LeaseExpireTime *time.Time `json:"lease_expire_time"`
	// Capacity is what the node published in its last heartbeat.
	Capacity NodeCapacity `json:"capacity"`
}

// NodeCapacity is what a node publishes for placement.
type NodeCapacity struct {
	// CPUs is the number of CPUs of the node's machine.
	CPUs int `json:"cpus"`
	// MemoryBytes is the machine's memory; FreeMemoryBytes what the kernel
	// says is available (MemAvailable), in bytes.
	MemoryBytes     int64 `json:"memory_bytes"`
	FreeMemoryBytes int64 `json:"free_memory_bytes"`
	// Sandboxes is how many sandboxes run (or are paused or stopped) on the
	// node, warm pool left out.
	Sandboxes int `json:"sandboxes"`
	// Images are the ids of the images unpacked on the node; SnapshotImages
	// the ids of the snapshots whose memory image it holds (hot), so that a
	// start or resume from them needs no download.
	Images         []string `json:"images"`
	SnapshotImages []string `json:"snapshot_images"`
}
