package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sbxhq/sbx/api"
)

// Snapshots is the snapshot collection of one client.
type Snapshots struct{ c *Client }

// Snapshot takes a memory snapshot of the running sandbox: its disk,
// memory and processes at one paused instant (the sandbox runs again when
// it returns). Errors: ErrConflict (not running, or busy),
// ErrSandboxHasVolume, ErrSnapshotFailed.
func (sb *Sandbox) Snapshot(ctx context.Context, req api.SnapshotRequest) (*api.Snapshot, error) {
	return sb.SnapshotStream(ctx, req, nil)
}

// SnapshotStream is Snapshot with progress lines.
func (sb *Sandbox) SnapshotStream(ctx context.Context, req api.SnapshotRequest, progress Progress) (*api.Snapshot, error) {
	var out api.Snapshot
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "snapshot"), nil, req, "", progress, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns the snapshots that have not expired, newest first; sandbox
// ("" for all) selects those of one sandbox, by name or id.
func (s *Snapshots) List(ctx context.Context, sandbox string) ([]api.Snapshot, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	var out []api.Snapshot
	err := s.c.doJSON(ctx, http.MethodGet, "/v1/snapshots", q, nil, &out)
	return out, err
}

// Get returns a snapshot; ErrSnapshotNotFound if there is none or it
// expired (the message says which).
func (s *Snapshots) Get(ctx context.Context, id string) (*api.Snapshot, error) {
	var out api.Snapshot
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/snapshots/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete deletes a snapshot. Sandboxes started from it keep running.
func (s *Snapshots) Delete(ctx context.Context, id string) error {
	return s.c.doJSON(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil, nil)
}

// ForkResult is what Fork made: one copy or error per requested copy.
type ForkResult struct {
	// Snapshot is the id of the snapshot the fork took for itself.
	Snapshot string
	// Copies holds the sandboxes made, nil where a copy failed.
	Copies []*Sandbox
	// Errors holds why a copy failed, nil where it was made.
	Errors []error
	// PausedMS is how long the original was paused.
	PausedMS int64
}

// Fork makes req.Count (default 1) live copies of the running sandbox: each
// a new sandbox with the original's disk, memory and processes, its own id,
// name and network namespace. The original runs on, untouched. Errors for
// the whole fork: ErrInvalidArgument, ErrConflict, ErrSandboxHasVolume,
// ErrForkFailed.
func (sb *Sandbox) Fork(ctx context.Context, req api.ForkRequest) (*ForkResult, error) {
	return sb.ForkStream(ctx, req, nil)
}

// ForkOne makes one live copy of the running sandbox (req.Count must be 0
// or 1) and returns it: the shape of the TypeScript and Python SDKs'
// fork(). Errors: those of Fork, and the copy's own error.
func (sb *Sandbox) ForkOne(ctx context.Context, req api.ForkRequest) (*Sandbox, error) {
	if req.Count > 1 {
		return nil, &Error{Code: api.CodeInvalidArgument, Message: "count: ForkOne makes one copy; use Fork for more"}
	}
	res, err := sb.Fork(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(res.Copies) != 1 {
		return nil, fmt.Errorf("fork: %d copies in the answer, want 1", len(res.Copies))
	}
	if res.Errors[0] != nil {
		return nil, res.Errors[0]
	}
	return res.Copies[0], nil
}

// ForkStream is Fork with progress lines.
func (sb *Sandbox) ForkStream(ctx context.Context, req api.ForkRequest, progress Progress) (*ForkResult, error) {
	var out api.ForkResult
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "fork"), nil, req, "", progress, &out); err != nil {
		return nil, err
	}
	res := &ForkResult{Snapshot: out.Snapshot, PausedMS: out.PausedMS}
	for _, cp := range out.Copies {
		if cp.Sandbox != nil {
			res.Copies = append(res.Copies, sb.c.Sandboxes.wrap(*cp.Sandbox))
			res.Errors = append(res.Errors, nil)
		} else {
			res.Copies = append(res.Copies, nil)
			res.Errors = append(res.Errors, &Error{Code: cp.Error.Code, Message: cp.Error.Message})
		}
	}
	return res, nil
}

// Processes lists the processes started by exec in the sandbox.
func (sb *Sandbox) Processes(ctx context.Context) ([]api.Process, error) {
	var out []api.Process
	err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID, "processes"), nil, nil, &out)
	return out, err
}

// Start starts req detached and returns its pid; attach to its output with
// Attach.
func (sb *Sandbox) Start(ctx context.Context, req api.ExecRequest) (int, error) {
	req.Detach = true
	var out struct {
		PID int `json:"pid"`
	}
	if err := sb.c.doJSON(ctx, http.MethodPost, sbPath(sb.ID, "exec"), nil, req, &out); err != nil {
		return 0, err
	}
	return out.PID, nil
}

// Attach streams the output of a process started by exec, from byte
// offset (of stdout and stderr together), until it exits: in the sandbox it
// started in, or in a copy made from a snapshot of it. Closing the stream
// only detaches. ErrNotFound-class process_not_found for an unknown pid.
func (sb *Sandbox) Attach(ctx context.Context, pid int, offset int64, encoding string) (*ExecStream, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if encoding != "" {
		q.Set("encoding", encoding)
	}
	resp, err := sb.c.request(ctx, http.MethodGet, sbPath(sb.ID, "processes", strconv.Itoa(pid), "output"), q, nil, "", "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	return newExecStream(resp, encoding == api.EncodingBase64), nil
}

// Signal sends a signal to the process group of a running process started
// by exec.
func (sb *Sandbox) Signal(ctx context.Context, pid, signal int) error {
	return sb.c.doJSON(ctx, http.MethodPost, sbPath(sb.ID, "processes", strconv.Itoa(pid), "signal"), nil, api.SignalRequest{Signal: signal}, nil)
}
