package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/undo"
)

// The undo helpers of docs/undo.md: TryInCopy, CheckpointFor, Guarded, and
// the snapshot chain (Remember, Chain, GoBackTo). The TypeScript and Python
// SDKs implement the same behaviour. They are a convenience, not a security
// boundary: the sandbox is the boundary.

// UndoKind is a class of command by the lightest undo that covers it:
// undo.None < undo.Git < undo.Checkpoint < undo.Fork.
type UndoKind = undo.Kind

// CheckpointFor classifies a shell command line by what it can break
// (docs/undo.md, "checkpointFor"): "none" for reads, "git" for edits of
// the working tree, "checkpoint" for system changes, package managers,
// builds and unknown programs, "fork" for database steps and changes to
// running processes. It is sbxd's own classifier (package undo), run
// here; Client.Classify asks sbxd, with the reason.
func CheckpointFor(command string) UndoKind { return undo.For(command) }

// Classify asks sbxd (POST /v1/classify) for the lightest undo that covers
// a shell command line, and why: what a guarded exec with undo "auto"
// takes for it.
//
// Errors: *Error (invalid_argument, unauthorized).
func (c *Client) Classify(ctx context.Context, command string) (*api.ClassifyResult, error) {
	var out api.ClassifyResult
	if err := c.doJSON(ctx, http.MethodPost, "/v1/classify", nil, map[string]string{"cmd": command}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// suffixed is base, cut so that the whole is at most 63 bytes, then "-",
// tag, "-" and 6 random [a-z0-9]: a valid sandbox name.
func suffixed(base, tag string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	if max := 63 - len(tag) - 8; len(base) > max {
		base = base[:max]
	}
	return base + "-" + tag + "-" + string(b)
}

func shell(command, cwd string) api.ExecRequest {
	return api.ExecRequest{Cmd: []string{"sh", "-c", command}, Cwd: cwd}
}

// TryOptions tune TryInCopy.
type TryOptions struct {
	// Online keeps the copy on the original's network rules while the
	// step runs; by default the copy is offline ({"internet": false}).
	Online bool
	// Cwd is the working directory of both commands (default /workspace).
	Cwd string
}

// TryResult is what TryInCopy did.
type TryResult struct {
	// Kept is true when the copy passed and replaced the original.
	Kept bool
	// Sandbox is the agent's sandbox from now on: the promoted copy when
	// Kept, else the original.
	Sandbox *Sandbox
	// Step is the step's result; Verify the check's (nil when it did not
	// run: the step failed, or verify was "").
	Step, Verify *ExecResult
	// Leftover names the old original when it could not be deleted after
	// the promotion ("" normally).
	Leftover string
}

// TryInCopy runs step in a live copy of sb (offline unless opts.Online)
// and, when step exits 0, verify. When either fails, the copy is deleted
// and sb is untouched. When both pass, the copy gets sb's network rules,
// labels and name, sb is deleted, and the copy is returned as the agent's
// sandbox (docs/undo.md, "tryInCopy").
//
// When the copy is kept, the handle sb is updated to the copy (the
// original's id is gone), and the result's Sandbox is sb.
//
// Errors: those of the fork (ErrConflict for a stopped sandbox,
// ErrSandboxHasVolume, ErrForkFailed) before anything changed, with a nil
// result. A failure while promoting the copy returns the result (Kept
// false, Sandbox the original, intact under its name) and the error.
func TryInCopy(ctx context.Context, sb *Sandbox, step, verify string, opts TryOptions) (*TryResult, error) {
	rules, err := sb.Network().Get(ctx)
	if err != nil {
		return nil, err
	}
	req := api.ForkRequest{Name: suffixed(sb.Name, "try"), Labels: sb.Labels}
	if !opts.Online {
		req.Network = &api.NetworkRules{Internet: false}
	}
	fr, err := sb.Fork(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(fr.Copies) != 1 || fr.Copies[0] == nil {
		if len(fr.Errors) == 1 && fr.Errors[0] != nil {
			return nil, fr.Errors[0]
		}
		return nil, fmt.Errorf("fork of %s made no copy", sb.Name)
	}
	cp := fr.Copies[0]
	res := &TryResult{Sandbox: sb}
	discard := func() { _ = cp.Delete(context.WithoutCancel(ctx)) }
	if res.Step, err = cp.Run(ctx, shell(step, opts.Cwd)); err != nil {
		discard()
		return res, err
	}
	if res.Step.ExitCode == 0 && verify != "" {
		if res.Verify, err = cp.Run(ctx, shell(verify, opts.Cwd)); err != nil {
			discard()
			return res, err
		}
	}
	if res.Step.ExitCode != 0 || res.Verify != nil && res.Verify.ExitCode != 0 {
		discard()
		return res, nil
	}
	leftover, err := promote(ctx, sb, cp, rules)
	if err != nil {
		return res, err
	}
	*sb = *cp // the caller's handle follows, as in the other SDKs
	res.Kept, res.Sandbox, res.Leftover = true, sb, leftover
	return res, nil
}

// promote gives cand old's network rules and name and deletes old. When a
// step before the delete fails, it puts old's name back, deletes cand and
// returns the error: old is as it was. leftover names old when it could
// not be deleted after cand took its place.
func promote(ctx context.Context, old, cand *Sandbox, rules api.NetworkRules) (leftover string, err error) {
	ctx = context.WithoutCancel(ctx) // half a promotion is worse than a late one
	name := old.Name
	discard := func() { _ = cand.Delete(ctx) }
	if _, err := cand.Network().Set(ctx, rules); err != nil {
		discard()
		return "", fmt.Errorf("give the copy the network rules of %s: %w", name, err)
	}
	away := suffixed(name, "old")
	if err := old.Update(ctx, api.UpdateSandboxRequest{Name: &away}); err != nil {
		discard()
		return "", fmt.Errorf("rename %s away: %w", name, err)
	}
	if err := cand.Update(ctx, api.UpdateSandboxRequest{Name: &name}); err != nil {
		if err2 := old.Update(ctx, api.UpdateSandboxRequest{Name: &name}); err2 != nil {
			// The original keeps its temporary name: say so.
			discard()
			return "", fmt.Errorf("rename the copy to %s: %w; and renaming the original back from %s: %v", name, err, away, err2)
		}
		discard()
		return "", fmt.Errorf("rename the copy to %s: %w", name, err)
	}
	for try := 0; try < 3; try++ {
		if err = old.Delete(ctx); err == nil || errors.Is(err, ErrSandboxNotFound) {
			return "", nil
		}
	}
	return away, nil
}

// GuardOptions tune Guarded.
type GuardOptions struct {
	// Cwd is the command's working directory (default /workspace).
	Cwd string
}

// GuardResult is what Guarded did.
type GuardResult struct {
	// Sandbox is the agent's sandbox (the same: every undo is put back in
	// place).
	Sandbox *Sandbox
	// Undo is the undo taken: "none", "git", "checkpoint" or "fork".
	Undo string
	// Result is the command's result.
	Result *ExecResult
	// RolledBack is true when the command failed and its undo was put
	// back.
	RolledBack bool
}

// Guarded runs command with the lightest undo that covers it, taken by
// sbxd, and rolls back when it exits non-zero (docs/undo.md, "guarded"):
// one guarded exec with undo "auto" and rollback_on_failure. By the
// command's class (POST /v1/classify): nothing for "none"; a repository
// snapshot for "git" (a disk checkpoint when cwd is in no git work tree);
// a disk checkpoint for "checkpoint" (a rollback restores the disk, which
// ends the sandbox's processes); a memory snapshot for "fork" (a rollback
// restores it in place: same id and name, the processes and memory of
// before the command).
//
// Errors: those of Run (the undo could not be taken: nothing ran); a
// failed rollback is an error returned with the result.
func Guarded(ctx context.Context, sb *Sandbox, command string, opts GuardOptions) (*GuardResult, error) {
	req := shell(command, opts.Cwd)
	req.Undo, req.RollbackOnFailure = api.UndoAuto, true
	res := &GuardResult{Sandbox: sb, Undo: undo.None.String()}
	var err error
	if res.Result, err = sb.Run(ctx, req); err != nil {
		return res, err
	}
	u := res.Result.Undo
	if u == nil {
		return res, fmt.Errorf("guarded exec: the answer has no undo (is sbxd older than this client?)")
	}
	res.Undo, res.RolledBack = u.Class, u.RolledBack
	if u.RollbackError != "" {
		return res, fmt.Errorf("roll back the %s undo: %s", u.Kind, u.RollbackError)
	}
	return res, nil
}

// ChainMetadataKey is the snapshot metadata member that marks a snapshot
// of the chain: {"sbx_chain": {"sandbox": NAME, "step": STEP}}.
const ChainMetadataKey = "sbx_chain"

type chainMark struct {
	Sandbox string `json:"sandbox"`
	Step    string `json:"step"`
}

// RememberOptions tune Remember.
type RememberOptions struct {
	// RetentionDays is how long the step's snapshot is kept (default 1).
	RetentionDays float64
}

// Remember takes a memory snapshot of sb after a step that passed and
// marks it as that step of sb's chain (docs/undo.md, "The snapshot
// chain"). step is 1 to 63 bytes.
//
// Errors: ErrInvalidArgument (step), and those of Snapshot (ErrConflict
// for a stopped sandbox, ErrSandboxHasVolume, ErrSnapshotFailed).
func Remember(ctx context.Context, sb *Sandbox, step string, opts RememberOptions) (*api.Snapshot, error) {
	if step == "" || len(step) > 63 {
		return nil, &Error{Code: api.CodeInvalidArgument, Message: fmt.Sprintf("step: %q must be 1 to 63 bytes", step)}
	}
	days := opts.RetentionDays
	if days == 0 {
		days = 1
	}
	meta, _ := json.Marshal(map[string]chainMark{ChainMetadataKey: {Sandbox: sb.Name, Step: step}})
	return sb.Snapshot(ctx, api.SnapshotRequest{Name: step, RetentionDays: &days, Metadata: meta})
}

// Chain lists the snapshots Remember took of sb (by its name), oldest
// first; expired ones are gone.
func Chain(ctx context.Context, sb *Sandbox) ([]api.Snapshot, error) {
	all, err := sb.c.Snapshots.List(ctx, sb.Name)
	if err != nil {
		return nil, err
	}
	var out []api.Snapshot
	for _, sn := range all {
		var m map[string]json.RawMessage
		if json.Unmarshal(sn.Metadata, &m) != nil {
			continue
		}
		var mark chainMark
		if json.Unmarshal(m[ChainMetadataKey], &mark) == nil && mark.Sandbox == sb.Name {
			out = append(out, sn)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreateTime.Before(out[j].CreateTime) })
	return out, nil
}

// GoBackTo starts a sandbox from the newest snapshot of sb's chain for
// step, with sb's labels and network rules, gives it sb's name and deletes
// sb; it returns the new sandbox, running with the memory and processes of
// that step, and updates the handle sb to it. Snapshots of later steps stay until they expire.
//
// Errors: ErrSnapshotNotFound when the chain has no such step (nothing
// changed); those of the create; a failure while promoting the new
// sandbox deletes it and leaves sb as it was.
func GoBackTo(ctx context.Context, sb *Sandbox, step string) (*Sandbox, error) {
	chain, err := Chain(ctx, sb)
	if err != nil {
		return nil, err
	}
	var target *api.Snapshot
	for i := range chain {
		if chain[i].Name == step {
			target = &chain[i]
		}
	}
	if target == nil {
		return nil, &Error{Code: api.CodeSnapshotNotFound, Message: fmt.Sprintf("the chain of %s has no step %q", sb.Name, step)}
	}
	rules, err := sb.Network().Get(ctx)
	if err != nil {
		return nil, err
	}
	nb, err := sb.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{
		Snapshot: target.ID, Name: suffixed(sb.Name, "back"), Labels: sb.Labels, Network: &rules,
	})
	if err != nil {
		return nil, err
	}
	if _, err := promote(ctx, sb, nb, rules); err != nil {
		return nil, err
	}
	*sb = *nb // the caller's handle follows, as in the other SDKs
	return sb, nil
}
