package api

import (
	"encoding/json"
	"time"
)

// DeliveryRequest is the body of POST /v1/sandboxes/{name}/deliveries.
type DeliveryRequest struct {
	// Paths are absolute paths in the sandbox (1 to MaxDeliveryPaths, no
	// "." or ".." elements, none inside another) whose files are packed
	// into the archive, each under its own path without the leading "/".
	// A symlink is archived as a link, never followed.
	Paths []string `json:"paths"`
	// Name is a label for the caller (≤ 63 bytes); it need not be unique.
	Name string `json:"name,omitempty"`
	// Metadata is the caller's JSON object (≤ 64 KiB), signed with the
	// record.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Teardown deletes the sandbox once the delivery is recorded.
	Teardown bool `json:"teardown,omitempty"`
}

// MaxDeliveryPaths bounds a delivery's paths.
const MaxDeliveryPaths = 256

// Delivery is a delivery record: an archive of a sandbox's files in the
// blob store and its signed statement, one link of the node's chain.
type Delivery struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Seq is its place in the chain, from 1.
	Seq int64 `json:"seq"`
	// Sandbox and SandboxID are the delivered sandbox's name and id (it
	// may be gone).
	Sandbox   string `json:"sandbox"`
	SandboxID string `json:"sandbox_id"`
	// ArchiveDigest is "sha256:<hex>" of the archive (tar, zstd);
	// ArchiveBytes its size; Files how many regular files it holds.
	ArchiveDigest string `json:"archive_digest"`
	ArchiveBytes  int64  `json:"archive_bytes"`
	Files         int    `json:"files"`
	// Digest is "sha256:<hex>" of the envelope; Previous the Digest of the
	// record before it ("" for the first).
	Digest   string `json:"digest"`
	Previous string `json:"previous"`
	// Envelope is the DSSE envelope (payload type
	// application/vnd.in-toto+json) exactly as signed: its bytes hash to
	// Digest.
	Envelope   json.RawMessage `json:"envelope"`
	Metadata   json.RawMessage `json:"metadata"`
	CreateTime time.Time       `json:"create_time"`
	// Teardown is what the delivery's teardown freed (only in the answer
	// of a delivery with teardown).
	Teardown *Teardown `json:"teardown,omitempty"`
}

// Teardown is what deleting a delivered sandbox freed.
type Teardown struct {
	// Deleted is true when the sandbox was deleted; Error says why not.
	Deleted bool   `json:"deleted"`
	Error   string `json:"error,omitempty"`
	// LayerBytes is the size of the writable layer's files; Checkpoints
	// how many checkpoints were deleted and CheckpointBytes what they had
	// added to the blob store (freed by the next collection, unless a
	// snapshot or another checkpoint shares the chunks).
	LayerBytes      int64 `json:"layer_bytes"`
	Checkpoints     int   `json:"checkpoints"`
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	// Processes is how many processes the agent still ran, ended with it.
	Processes int `json:"processes"`
	// Removed lists what the delete removed from the host: "container"
	// (runsc state and processes; checked gone), "network" (netns, veth,
	// nftables chain), "mounts", "layer" and "sandbox_dir" (checked gone).
	Removed []string `json:"removed"`
	// Left lists what a check found still there (sbxd's log says why).
	Left []string `json:"left,omitempty"`
}
