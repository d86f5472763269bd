package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sbxhq/sbx/api"
)

// Checkpoint takes a disk checkpoint of the sandbox (running or stopped)
// with an optional comment (≤ 1024 bytes) and returns it. Errors:
// ErrInvalidArgument, ErrConflict (another operation runs),
// ErrCheckpointFailed (nothing was recorded).
func (sb *Sandbox) Checkpoint(ctx context.Context, comment string) (*api.Checkpoint, error) {
	return sb.CheckpointStream(ctx, comment, nil)
}

// CheckpointStream is Checkpoint with its progress lines.
func (sb *Sandbox) CheckpointStream(ctx context.Context, comment string, progress Progress) (*api.Checkpoint, error) {
	var out api.Checkpoint
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "checkpoint"), nil, api.CheckpointRequest{Comment: comment}, "", progress, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListCheckpoints returns the sandbox's checkpoints, newest first, v0 last.
func (sb *Sandbox) ListCheckpoints(ctx context.Context) ([]api.Checkpoint, error) {
	var out []api.Checkpoint
	err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID, "checkpoints"), nil, nil, &out)
	return out, err
}

// GetCheckpoint returns one checkpoint ("v3"); with verify, sbxd rereads
// every chunk first and Health says "damaged" if one is missing or corrupt.
// ErrCheckpointNotFound if there is none.
func (sb *Sandbox) GetCheckpoint(ctx context.Context, id string, verify bool) (*api.Checkpoint, error) {
	if id == "" {
		return nil, &Error{Code: api.CodeInvalidArgument, Message: "id: give a checkpoint id such as v1"}
	}
	var q url.Values
	if verify {
		q = url.Values{"verify": {"1"}}
	}
	var out api.Checkpoint
	if err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID, "checkpoints", url.PathEscape(id)), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Restore stops the sandbox and puts its disk back as it was in checkpoint
// id; the next request boots it on that disk. Progress may be nil. Errors:
// ErrCheckpointNotFound, ErrConflict, ErrRestoreFailed (the disk is as it
// was).
func (sb *Sandbox) Restore(ctx context.Context, id string, progress Progress) error {
	if id == "" {
		return &Error{Code: api.CodeInvalidArgument, Message: "id: give a checkpoint id such as v1"}
	}
	var out api.Sandbox
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "checkpoints", url.PathEscape(id), "restore"), nil, nil, "", progress, &out); err != nil {
		return err
	}
	sb.Sandbox = out
	return nil
}

// Diff lists the paths added, modified and deleted from checkpoint from to
// checkpoint to ("live", or "": the disk now). An empty from means the
// checkpoint before to (the newest, for live).
func (sb *Sandbox) Diff(ctx context.Context, from, to string) (*api.Diff, error) {
	return sb.DiffN(ctx, from, to, 0)
}

// DiffN is Diff with each list cut at limit entries (0: sbxd's default,
// 10000); Truncated says when a list was cut.
func (sb *Sandbox) DiffN(ctx context.Context, from, to string, limit int) (*api.Diff, error) {
	if to == "" {
		to = "live"
	}
	q := url.Values{}
	if from != "" {
		q.Set("from", from)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.Diff
	if err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID, "checkpoints", url.PathEscape(to), "diff"), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
