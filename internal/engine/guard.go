package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/undo"
)

// undoRetentionDays is how long the snapshot of a guarded exec is kept.
const undoRetentionDays = 1.0

// opGuard journals a guarded exec with rollback_on_failure while its
// command runs: a restart of sbxd cuts the command (its process group is
// killed with the agent's connection), so the next Start rolls the undo
// back (recoverGuards). Its Data is guardOp.
const opGuard = "guard"

type guardOp struct {
	Undo api.UndoResult `json:"undo"`
}

// guardOpID is the journal entry of sandbox id's guarded exec with undo u.
// A git undo is named by its record: two guarded execs with the same
// record share the entry, and either one's rollback puts back the same.
func guardOpID(id string, u *api.UndoResult) string {
	if g := u.Git; g != nil {
		sum := sha256.Sum256([]byte(g.Repo + "\x00" + g.Head + "\x00" + g.Ref + "\x00" + g.IndexTree + "\x00" + g.WorkTree))
		return "op_guard_" + id + "_git_" + hex.EncodeToString(sum[:8])
	}
	return "op_guard_" + id + "_" + u.Checkpoint + u.Snapshot
}

// gitUndoTimeout bounds each run of the git undo's scripts in the
// sandbox (a huge work tree takes long to hash; a guest's git may hang).
const gitUndoTimeout = 2 * time.Minute

// gitOutputMax bounds what sbxd keeps of the git scripts' output, in
// bytes: the record is five short lines.
const gitOutputMax = 64 << 10

// errNotWorkTree is gitSnapshot's error when cwd is in no git work tree.
var errNotWorkTree = errors.New("not in a git work tree")

// gitSnapshot runs undo.GitSnapshotScript in the sandbox, in req's cwd
// and env, and reads its record.
//
// Errors: errNotWorkTree (wrapped in ErrConflict); ErrCheckpointFailed
// when the script fails or prints something else than a record; those of
// Exec.
func (e *Engine) gitSnapshot(ctx context.Context, idOrName string, req api.ExecRequest) (*api.GitUndo, error) {
	code, stdout, stderr, err := e.runScript(ctx, idOrName, api.ExecRequest{
		Cmd: []string{"sh", "-c", undo.GitSnapshotScript}, Cwd: req.Cwd, Env: req.Env,
	})
	if err != nil {
		return nil, err
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	switch code {
	case 0:
	case undo.GitNotWorkTree:
		return nil, fmt.Errorf("undo git: %s is %w (or git is not installed in the sandbox): %w", cwd, errNotWorkTree, errdefs.ErrConflict)
	default:
		return nil, fmt.Errorf("undo git: the repository snapshot in %s exited %d: %s: %w", cwd, code, strings.TrimSpace(stderr), errdefs.ErrCheckpointFailed)
	}
	g, err := undo.ParseGitSnapshot(stdout)
	if err != nil {
		return nil, fmt.Errorf("undo git: %v: %w", err, errdefs.ErrCheckpointFailed)
	}
	return &g, nil
}

// runScript runs req in the sandbox to its end, bounded by
// gitUndoTimeout, and answers its exit code and the first gitOutputMax
// bytes of its output.
//
// Errors: those of Exec and Wait; ErrFailed when it timed out.
func (e *Engine) runScript(ctx context.Context, idOrName string, req api.ExecRequest) (code int, stdout, stderr string, err error) {
	req.TimeoutMS = gitUndoTimeout.Milliseconds()
	p, err := e.Exec(ctx, idOrName, req, nil)
	if err != nil {
		return 0, "", "", err
	}
	var o, eb capped
	o.max, eb.max = gitOutputMax, gitOutputMax
	ex, err := p.Wait(&o, &eb)
	if err != nil {
		return 0, "", "", err
	}
	if ex.TimedOut {
		return 0, "", "", fmt.Errorf("undo git: the script did not end in %s: %w", gitUndoTimeout, errdefs.ErrFailed)
	}
	return ex.ExitCode, o.b.String(), eb.b.String(), nil
}

// capped is a writer that keeps the first max bytes and drops the rest.
type capped struct {
	b   strings.Builder
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// ValidateUndo checks the undo fields of an exec request (docs/undo.md,
// "Server-side guarded exec").
//
// Errors: ErrInvalidArgument naming the field.
func ValidateUndo(req api.ExecRequest) error {
	switch req.Undo {
	case "", api.UndoNone:
		if req.RollbackOnFailure {
			return errdefs.Invalid("rollback_on_failure", "needs undo (auto, git, checkpoint or snapshot)")
		}
		return nil
	case api.UndoAuto, api.UndoGit, api.UndoCheckpoint, api.UndoSnapshot:
	default:
		return errdefs.Invalid("undo", "%q: want none, auto, git, checkpoint or snapshot", req.Undo)
	}
	if req.Detach {
		return errdefs.Invalid("undo", "a detached exec cannot be guarded (nothing waits for its exit)")
	}
	return nil
}

// guardCommentPrefix starts the comment of a guarded exec's checkpoint,
// followed by the command line.
const guardCommentPrefix = "before: "

// commandLine shows the command an exec runs, for a checkpoint's comment:
// S for ["sh","-c",S] (also bash), else the argv joined by spaces.
func commandLine(cmd []string) string {
	if len(cmd) >= 3 && (cmd[0] == "sh" || cmd[0] == "bash" || cmd[0] == "/bin/sh" || cmd[0] == "/bin/bash") && cmd[1] == "-c" {
		return cmd[2]
	}
	return strings.Join(cmd, " ")
}

// TakeUndo takes the undo an exec request asks for, before its command
// runs: a repository snapshot of the git work tree that holds req.Cwd
// (undo.GitSnapshotScript), a disk checkpoint (comment "before:
// <command>") or a memory snapshot (name "undo", kept 1 day); with
// "auto", by the class of the command (package undo): nothing for none, a
// repository snapshot for git (a checkpoint when cwd is in no work tree or
// the snapshot fails), a checkpoint for checkpoint, a snapshot for fork.
// It answers nil when req asks for no undo.
//
// Errors: those of ValidateUndo; ErrSandboxNotFound; for "git",
// ErrConflict outside a work tree and ErrCheckpointFailed when the
// repository snapshot fails; ErrCheckpointFailed, ErrSnapshotFailed and
// the checks of Checkpoint and Snapshot (a snapshot needs a running
// sandbox without volumes: ErrConflict, ErrHasVolume).
func (e *Engine) TakeUndo(ctx context.Context, idOrName string, req api.ExecRequest) (*api.UndoResult, error) {
	if err := ValidateUndo(req); err != nil {
		return nil, err
	}
	if req.Undo == "" || req.Undo == api.UndoNone {
		return nil, nil
	}
	u := &api.UndoResult{Kind: req.Undo}
	if req.Undo == api.UndoAuto {
		class := undo.ForArgv(req.Cmd)
		u.Class = class.String()
		switch class {
		case undo.None:
			u.Kind = api.UndoNone
			return u, nil
		case undo.Fork:
			u.Kind = api.UndoSnapshot
		case undo.Git:
			u.Kind = api.UndoGit
		default:
			u.Kind = api.UndoCheckpoint
		}
	}
	if u.Kind == api.UndoGit {
		g, err := e.gitSnapshot(ctx, idOrName, req)
		switch {
		case err == nil:
			u.Git = g
		case req.Undo == api.UndoGit || !(errors.Is(err, errNotWorkTree) || errors.Is(err, errdefs.ErrCheckpointFailed)):
			return nil, err
		default:
			// auto: a disk checkpoint covers what git cannot.
			e.log.Debug("guarded exec: no git undo, a checkpoint instead", "sandbox", idOrName, "err", err)
			u.Kind = api.UndoCheckpoint
		}
	}
	var sandboxID string
	switch u.Kind {
	case api.UndoGit:
		sb, err := e.Get(ctx, idOrName)
		if err != nil {
			return nil, err
		}
		sandboxID = sb.ID
	case api.UndoSnapshot:
		// A stopped sandbox has no processes to keep: boot it so the
		// snapshot holds what the command will run on.
		if _, err := e.ensureRunning(ctx, idOrName); err != nil {
			return nil, err
		}
		days := undoRetentionDays
		sn, err := e.Snapshot(ctx, idOrName, api.SnapshotRequest{Name: "undo", RetentionDays: &days}, nil)
		if err != nil {
			return nil, err
		}
		u.Snapshot, sandboxID = sn.ID, sn.SandboxID
	default:
		comment := guardCommentPrefix + commandLine(req.Cmd)
		if len(comment) > api.MaxCommentBytes {
			comment = truncateUTF8(comment, api.MaxCommentBytes)
		}
		cp, err := e.Checkpoint(ctx, idOrName, comment, nil)
		if err != nil {
			return nil, err
		}
		u.Checkpoint, sandboxID = CheckpointID(cp.Seq), cp.SandboxID
	}
	if req.RollbackOnFailure {
		data, err := json.Marshal(guardOp{Undo: *u})
		if err != nil {
			return nil, err
		}
		if err := e.st.PutOp(context.WithoutCancel(ctx), &store.Op{ID: guardOpID(sandboxID, u), Node: e.cfg.Node, SandboxID: sandboxID, Kind: opGuard, Data: data}); err != nil {
			return nil, fmt.Errorf("journal the guarded exec: %w", err)
		}
	}
	return u, nil
}

// FinishUndo ends a guarded exec whose command exited with exitCode (-1:
// it did not finish: the client went, the sandbox died): with rollback,
// a failure puts the undo back (RollbackUndo); either way the journal
// entry that would roll it back after a restart goes. u may be nil (no
// undo was asked for).
//
// Errors: those of RollbackUndo.
func (e *Engine) FinishUndo(ctx context.Context, idOrName string, u *api.UndoResult, rollback bool, exitCode int) error {
	if u == nil {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	var err error
	if rollback && exitCode != 0 {
		err = e.RollbackUndo(ctx, idOrName, u)
	}
	if rollback {
		if sb, gerr := e.Get(ctx, idOrName); gerr == nil {
			if derr := e.st.DeleteOp(ctx, guardOpID(sb.ID, u)); derr != nil && !errdefs.IsNotFound(derr) {
				e.log.Warn("guarded exec: drop its journal entry", "sandbox", sb.Name, "err", derr)
			}
		}
	}
	return err
}

// recoverGuards rolls back the guarded execs that a restart of sbxd cut
// (their commands were killed with the agent's connection, and nobody got
// their exit): the docs promise the rollback when the command does not
// finish. It runs after reconcile, before the API serves.
func (e *Engine) recoverGuards(ctx context.Context) {
	ops, err := e.st.ListOps(ctx, e.cfg.Node)
	if err != nil {
		e.log.Error("recover guarded execs", "err", err)
		return
	}
	for _, op := range ops {
		if op.Kind != opGuard {
			continue
		}
		var g guardOp
		if err := json.Unmarshal(op.Data, &g); err != nil {
			e.log.Error("recover: unreadable guarded-exec journal entry; not rolled back", "sandbox", op.SandboxID, "op", op.ID, "err", err)
		} else if _, err := e.st.GetSandbox(ctx, op.SandboxID); err == nil {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			err := e.RollbackUndo(rctx, op.SandboxID, &g.Undo)
			cancel()
			if err != nil {
				e.log.Error("recover: roll back a guarded exec cut by the restart", "sandbox", op.SandboxID, "undo", g.Undo.Checkpoint+g.Undo.Snapshot, "err", err)
			} else {
				e.log.Warn("recover: rolled back a guarded exec cut by the restart", "sandbox", op.SandboxID, "undo", g.Undo.Checkpoint+g.Undo.Snapshot)
			}
		}
		_ = e.st.DeleteOp(ctx, op.ID)
	}
}

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8
// sequence.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// RollbackUndo puts back the undo u of a guarded exec whose command
// failed, and records the outcome in u (RolledBack, RollbackError): a git
// work tree is put back to its record by undo.GitRollbackScript, run in
// the sandbox (its processes go on); a checkpoint is restored (the sandbox stops; the next request boots it on
// the restored disk); a snapshot is restored in place (the sandbox keeps
// its id and name and runs with the snapshot's memory and processes).
//
// Errors: those of Restore, or of the in-place restore (ErrRestoreFailed).
func (e *Engine) RollbackUndo(ctx context.Context, idOrName string, u *api.UndoResult) error {
	var err error
	switch u.Kind {
	case api.UndoCheckpoint:
		_, err = e.Restore(ctx, idOrName, u.Checkpoint, nil)
	case api.UndoSnapshot:
		err = e.RestoreSnapshotInPlace(ctx, idOrName, u.Snapshot)
	case api.UndoGit:
		err = e.gitRollback(ctx, idOrName, u.Git)
	default:
		return nil
	}
	if err != nil {
		u.RollbackError = err.Error()
		return err
	}
	u.RolledBack = true
	return nil
}

// gitRollback runs undo.GitRollbackScript on record g in the sandbox.
//
// Errors: those of Exec; ErrRestoreFailed when the script fails.
func (e *Engine) gitRollback(ctx context.Context, idOrName string, g *api.GitUndo) error {
	if g == nil {
		return fmt.Errorf("undo git: no record to roll back to: %w", errdefs.ErrRestoreFailed)
	}
	code, _, stderr, err := e.runScript(ctx, idOrName, api.ExecRequest{Cmd: undo.GitRollbackArgv(*g), Cwd: "/"})
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("undo git: the rollback of %s exited %d: %s: %w", g.Repo, code, strings.TrimSpace(stderr), errdefs.ErrRestoreFailed)
	}
	return nil
}

// RestoreSnapshotInPlace puts sandbox idOrName back to memory snapshot
// snapID (taken of it): its processes end, its writable layer becomes the
// snapshot's disk, and it runs again with the snapshot's memory and
// processes, keeping its id, name, network rules and checkpoints.
//
// Errors: ErrSandboxNotFound, ErrSnapshotNotFound, ErrInvalidArgument (a
// snapshot of another sandbox), ErrConflict (another operation runs, or
// the sandbox is suspended), ErrRestoreFailed. When the restore fails
// after the old processes ended, the sandbox is left stopped on the
// snapshot's disk (when it could be built) and the error says so.
func (e *Engine) RestoreSnapshotInPlace(ctx context.Context, idOrName, snapID string) error {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return err
	}
	sn, err := e.st.GetSnapshot(ctx, snapID)
	if err != nil {
		return err
	}
	if !CallerOf(ctx).Sees(sn.Owner) {
		return errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", snapID)
	}
	if sn.SandboxID != sb.ID {
		return errdefs.Invalid("snapshot", "%s was taken of another sandbox", snapID)
	}
	sb, unlock, err := e.lockFound(ctx, sb, "restore a snapshot", lockOrWait)
	if err != nil {
		return err
	}
	defer unlock()
	ctx = context.WithoutCancel(ctx)
	if sb.State == api.StateSuspended {
		return stateForbids(sb, "restore a snapshot in place")
	}
	failed := func(err error) error {
		return fmt.Errorf("restore %s to snapshot %s: %v: %w", sb.Name, snapID, err, errdefs.ErrRestoreFailed)
	}
	start := time.Now()
	ctx, endLease := e.withLease(ctx)
	defer endLease()
	imageDir, diskM, release, err := e.snapshotInputs(ctx, sb, sn)
	if err != nil {
		return failed(err)
	}
	defer release()
	// Nothing is changed above this line; from here the old processes end
	// and the disk is rebuilt. The journal entry makes a crash of sbxd from
	// here on finish the disk's rebuild at the next start
	// (recoverSnapRestore): the sandbox is then on the snapshot's whole
	// disk, never on half of it.
	opID := newOpID()
	data, err := json.Marshal(snapRestoreOp{Snapshot: snapID})
	if err != nil {
		return failed(err)
	}
	if err := e.st.PutOp(ctx, &store.Op{ID: opID, Node: e.cfg.Node, SandboxID: sb.ID, Kind: opSnapRestore, Data: data}); err != nil {
		return failed(err)
	}
	defer func() { _ = e.st.DeleteOp(ctx, opID) }()
	if err := e.stopLocked(ctx, sb, "restoring a snapshot"); err != nil {
		return failed(err)
	}
	e.fault("snaprestore:stopped")
	keepCaptureMounts(sb, sn)
	if err := e.start(ctx, sb, startFrom{image: imageDir, disk: diskM, background: e.cfg.BackgroundRestore, what: "resumed"}); err != nil {
		sb.State, sb.StateReason = api.StateStopped, "restoring snapshot "+snapID+" failed: "+err.Error()
		_ = e.st.UpdateSandbox(ctx, sb)
		return failed(err)
	}
	sb.State, sb.StateReason = api.StateRunning, ""
	if err := e.st.UpdateSandbox(ctx, sb); err != nil {
		return failed(err)
	}
	e.touch(sb.ID)
	e.log.Info("restored snapshot in place", "sandbox", sb.Name, "snapshot", snapID, "ms", time.Since(start).Milliseconds())
	return nil
}

// opSnapRestore is the journal kind of an in-place snapshot restore.
const opSnapRestore = "snaprestore"

// snapRestoreOp is the journal data of an in-place snapshot restore.
type snapRestoreOp struct {
	Snapshot string `json:"snapshot"`
}

// recoverSnapRestore finishes an in-place snapshot restore that a crash of
// sbxd cut short: the old processes are gone (or going), and the disk may
// be half rebuilt. The disk is rebuilt from the snapshot and the sandbox
// left stopped on it (its processes cannot be brought back without the
// memory restore the crash interrupted; the next exec boots it). When the
// snapshot is gone, the sandbox is left stopped as it is, and says so.
func (e *Engine) recoverSnapRestore(ctx context.Context, op *store.Op) error {
	defer func() { _ = e.st.DeleteOp(ctx, op.ID) }()
	var so snapRestoreOp
	jerr := json.Unmarshal(op.Data, &so)
	sb, err := e.st.GetSandbox(ctx, op.SandboxID)
	if err != nil {
		return nil // deleted meanwhile
	}
	_ = e.rt.Delete(ctx, sb.ID)
	_ = e.net.Delete(sb.ID)
	_ = e.layers.Unmount(sb.ID)
	sb.State = api.StateStopped
	if jerr != nil {
		// Which snapshot it was is lost: the sandbox stays stopped on the
		// disk it has, which the restore may have partly rebuilt.
		e.log.Error("recover: unreadable snapshot restore journal entry; stopping the sandbox as it is", "sandbox", sb.Name, "op", op.ID, "err", jerr)
		sb.StateReason = "restoring a snapshot in place was interrupted by a crash of sbxd and could not be finished: its journal entry was unreadable; the disk may be partly restored"
		return e.st.UpdateSandbox(ctx, sb)
	}
	e.log.Info("recover: finishing an interrupted snapshot restore", "sandbox", sb.Name, "snapshot", so.Snapshot)
	sn, err := e.st.GetSnapshot(ctx, so.Snapshot)
	var diskM *disk.Manifest
	if err == nil {
		diskM, err = e.snapshotDisk(ctx, sn)
	}
	if err == nil {
		err = e.rebuildDisk(ctx, sb, diskM)
	}
	if err != nil {
		sb.StateReason = "restoring snapshot " + so.Snapshot + " was interrupted by a crash of sbxd and could not be finished: " + err.Error()
	} else {
		sb.StateReason = "restoring snapshot " + so.Snapshot + " was interrupted by a crash of sbxd; the disk is the snapshot's, its processes did not survive"
	}
	return e.st.UpdateSandbox(ctx, sb)
}
