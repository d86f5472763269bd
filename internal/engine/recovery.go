package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// Recovery of a lost node's running sandboxes (docs/cluster.md, "Node
// loss"). A sandbox's durable points are in the shared store and blob
// store: its recovery snapshot (memory and disk, taken every
// recovery_interval_ms by its node) and its checkpoints' disks. When its
// node's lease expires, the duty holder takes over its node's journal
// entries on it (takeOverOps), picks the most recent point
// (pickRecoveryPoint), records the sandbox suspended on it (a recovery
// snapshot as is; a checkpoint's disk as a snapshot with no memory image,
// which boots cold), and wakes it on a placed node: the one resume path
// does the rest, with its claim, journal and rollback.

const (
	// MinRecoveryIntervalMS and MaxRecoveryIntervalMS bound
	// recovery_interval_ms (0 is off): 5 s to 24 h. Each recovery snapshot
	// pauses the sandbox for a capture and stores its memory image.
	MinRecoveryIntervalMS = 5_000
	MaxRecoveryIntervalMS = 24 * 3600 * 1000
	// opRecovery is the journal kind of a recovery snapshot being taken
	// (data: suspendOp, its snapshot id).
	opRecovery = "recovery"
	// recoveredPrefix starts the state_reason of a sandbox recovered from
	// a lost node: suspended until it wakes on its new node, then running
	// (resumeLocked keeps it, so its user sees what was lost).
	recoveredPrefix = "recovered: "
	// recoveryTick is how often a node looks for recovery snapshots due.
	recoveryTick = time.Second
)

// validateRecoveryInterval checks recovery_interval_ms for a sandbox with
// volumes vols and secrets that cannot leave this node (when secrets;
// secretsStay): 0, or
// [MinRecoveryIntervalMS, MaxRecoveryIntervalMS] on a cluster's node whose
// nodes share a blob store (elsewhere no other node could recover it), for
// a sandbox that can move (no volume, no secret). ErrInvalidArgument.
func (e *Engine) validateRecoveryInterval(ms int64, vols []api.Volume, secrets bool) error {
	const field = "recovery_interval_ms"
	if ms == 0 {
		return nil
	}
	if ms < MinRecoveryIntervalMS || ms > MaxRecoveryIntervalMS {
		return errdefs.Invalid(field, "%d is out of range: 0 (none) or [%d, %d]", ms, MinRecoveryIntervalMS, MaxRecoveryIntervalMS)
	}
	if _, shared := e.distributesImages(); !shared {
		return errdefs.Invalid(field, "recovery snapshots are for a cluster's nodes that share a blob store (sbxd --store postgres://… --node NAME --blob-store DIR or s3://…, the same for every node): on this sbxd no other node could recover the sandbox from one")
	}
	if len(vols) > 0 {
		return errdefs.Invalid(field, "a sandbox with volumes is not captured (volumes are this host's directories) and cannot be recovered on another node")
	}
	if secrets {
		return errdefs.Invalid(field, "the sandbox's secrets are sealed with its node's own key, which no other node holds (a node with a cluster key, $SBX_CLUSTER_KEY, seals them with the cluster's): it cannot be recovered on another node")
	}
	return nil
}

// recoveryClock times each running sandbox's recovery snapshots on this
// node: the next is due an interval after the later of the last capture
// (its RecoveryTime) and the end of the last attempt (so that a store
// slower than the interval does not make them back to back), and a
// sandbox's first an interval after this node first saw it with recovery
// on.
type recoveryClock struct {
	mu    sync.Mutex
	since map[string]time.Time
	// unrecoverable are the lost nodes' sandboxes already logged as
	// having no durable point (noteUnrecoverable).
	unrecoverable map[string]bool
	// woken is when this node last asked for each sandbox's wake by a
	// sweep (wakeDue).
	woken map[string]time.Time
}

// rewakeAfter is how long a sweep waits before it asks again for the wake
// of a sandbox it asked for (a resume that takes long, or fails: no
// capacity, a spending limit, a lost chunk), so that it neither piles up
// resumes nor logs every round.
const rewakeAfter = 30 * time.Second

// wakeDue reports whether a sweep should ask for sandbox id's wake now:
// not when it asked less than rewakeAfter ago. It records the ask.
func (e *Engine) wakeDue(id string) bool {
	c := &e.recoveryClock
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.woken == nil {
		c.woken = map[string]time.Time{}
	}
	if at, ok := c.woken[id]; ok && now.Sub(at) < rewakeAfter {
		return false
	}
	for k, at := range c.woken {
		if now.Sub(at) > 10*rewakeAfter {
			delete(c.woken, k)
		}
	}
	c.woken[id] = now
	return true
}

// recoveryLoop takes the recovery snapshots due on this node, one at a
// time, until the engine closes; the duty holder's rounds (wakeLoop)
// recover the sandboxes of lost nodes.
func (e *Engine) recoveryLoop() {
	defer e.bg.Done()
	e.every(recoveryTick, e.captureRoundBound(), func(ctx context.Context) {
		sbs, err := e.localSandboxes(ctx, store.SandboxFilter{})
		if err != nil {
			return
		}
		now := time.Now()
		c := &e.recoveryClock
		c.mu.Lock()
		seen := map[string]time.Time{}
		var due []*store.Sandbox
		for _, sb := range sbs {
			if sb.State != api.StateRunning || sb.RecoveryIntervalMS <= 0 || sb.Pooled {
				continue
			}
			since, ok := c.since[sb.ID]
			if !ok {
				since = now
			}
			seen[sb.ID] = since
			last := since
			if sb.RecoverySnapshot != "" && sb.RecoveryTime.After(last) {
				last = sb.RecoveryTime
			}
			if now.Sub(last) >= time.Duration(sb.RecoveryIntervalMS)*time.Millisecond {
				due = append(due, sb)
			}
		}
		c.since = seen
		c.mu.Unlock()
		for _, sb := range due {
			if ctx.Err() != nil {
				return
			}
			if err := e.takeRecoverySnapshot(ctx, sb); err != nil {
				e.log.Warn("recovery snapshot failed; the next is tried an interval later", "sandbox", sb.Name, "err", err)
			}
			c.mu.Lock()
			c.since[sb.ID] = time.Now()
			c.mu.Unlock()
		}
	})
}

// takeRecoverySnapshot captures running sandbox sb (paused for the
// capture, as a memory snapshot is), stores its memory image and its
// image's root filesystem in the blob store, and only then records it as
// sb's recovery snapshot, dropping the one before. A sandbox another
// operation holds is skipped (the next round tries again). A failure
// leaves the one before. The journal entry (opRecovery) lets a crash
// drop a snapshot that was never recorded.
func (e *Engine) takeRecoverySnapshot(ctx context.Context, sb *store.Sandbox) error {
	unlock, err := e.lockID(ctx, sb.ID, sb.Name, "recovery snapshot", lockOrConflict)
	if err != nil {
		return nil
	}
	defer unlock()
	sb, err = e.st.GetSandbox(ctx, sb.ID)
	if err != nil || sb.State != api.StateRunning || sb.Node != e.cfg.Node || sb.RecoveryIntervalMS <= 0 {
		return nil
	}
	cl, ok := e.distributesImages()
	if !ok {
		return nil
	}
	start := time.Now()
	ctx, release := e.withLease(ctx)
	defer release()
	id := newSnapshotID()
	opID := "recovery-" + sb.ID
	data, _ := json.Marshal(suspendOp{Snapshot: id})
	if err := e.st.PutOp(ctx, &store.Op{ID: opID, Node: e.cfg.Node, SandboxID: sb.ID, Kind: opRecovery, Data: data}); err != nil {
		return err
	}
	c, err := e.captureLive(ctx, sb, filepath.Join(e.snapshotsDir(), "tmp-"+id), nil, false)
	if err != nil {
		_ = e.st.DeleteOp(ctx, opID)
		return err
	}
	hold := e.holdHot(id)
	defer hold()
	sn := newSnapshotRecord(sb, id, c, snapshotKind{name: "recovery", suspend: true})
	failed := func(err error) error {
		_ = e.removeSnapshot(ctx, id)
		_ = e.st.DeleteOp(ctx, opID)
		return err
	}
	if err := e.recordHot(ctx, sn, c); err != nil {
		_ = e.st.DeleteOp(ctx, opID)
		return err
	}
	tStore := time.Now()
	if err := e.storeHot(ctx, sn); err != nil {
		return failed(err)
	}
	if err := e.publishImage(ctx, cl, sb.ImageID); err != nil {
		return failed(err)
	}
	prev := sb.RecoverySnapshot
	sb.RecoverySnapshot, sb.RecoveryTime = sn.ID, sn.CreateTime
	if err := e.st.UpdateSandbox(ctx, sb); err != nil {
		return failed(err)
	}
	if prev != "" {
		_ = e.removeSnapshot(ctx, prev)
	}
	_ = e.st.DeleteOp(ctx, opID)
	e.log.Info("recovery snapshot", "sandbox", sb.Name, "id", sn.ID, "ms", time.Since(start).Milliseconds(),
		"paused_ms", c.pausedMS, "store_ms", time.Since(tStore).Milliseconds(), "memory_bytes", sn.MemoryBytes,
		"disk_added_bytes", sn.StoredBytes)
	return nil
}

// dropRecovery clears sb's recovery snapshot fields and returns a func
// that deletes the snapshot, to call once the record is updated: a
// suspend (its suspend image is newer), a restore (the disk it had is
// undone) and a delete end its use.
func (e *Engine) dropRecovery(ctx context.Context, sb *store.Sandbox) func() {
	id := sb.RecoverySnapshot
	sb.RecoverySnapshot, sb.RecoveryTime = "", time.Time{}
	if id == "" {
		return func() {}
	}
	return func() { _ = e.removeSnapshot(context.WithoutCancel(ctx), id) }
}

// recoverRecoveryOp settles a recovery snapshot that a crash cut short
// (recoverOps): the snapshot it made goes unless the record names it.
func (e *Engine) recoverRecoveryOp(ctx context.Context, op *store.Op) {
	var so suspendOp
	_ = json.Unmarshal(op.Data, &so)
	if sb, err := e.st.GetSandbox(ctx, op.SandboxID); so.Snapshot != "" && (err != nil || sb.RecoverySnapshot != so.Snapshot) {
		_ = e.removeSnapshot(ctx, so.Snapshot)
	}
	_ = e.st.DeleteOp(ctx, op.ID)
}

// recoveryPoint is the durable point a lost node's sandbox is recovered
// from: its recovery snapshot (memory and disk), or a checkpoint's disk.
type recoveryPoint struct {
	snapshot string            // the recovery snapshot's id; "" for a checkpoint
	cp       *store.Checkpoint // the checkpoint, when not a snapshot
	at       time.Time         // when it was captured
}

// pickRecoveryPoint is the most recent durable point of sb, given
// whether its recovery snapshot is stored whole (haveSnapshot) and its
// checkpoints: a checkpoint counts once it is in the blob store and not
// damaged. A recovery snapshot wins a tie (it has the processes too). ok
// is false when sb has none.
func pickRecoveryPoint(sb *store.Sandbox, haveSnapshot bool, cps []*store.Checkpoint) (recoveryPoint, bool) {
	var best *store.Checkpoint
	for _, cp := range cps {
		if cp.StoreTime.IsZero() || len(cp.Manifest) == 0 || cp.Health == api.HealthDamaged {
			continue
		}
		if best == nil || cp.CreateTime.After(best.CreateTime) || (cp.CreateTime.Equal(best.CreateTime) && cp.Seq > best.Seq) {
			best = cp
		}
	}
	snap := haveSnapshot && sb.RecoverySnapshot != "" && !sb.RecoveryTime.IsZero()
	switch {
	case snap && (best == nil || !best.CreateTime.After(sb.RecoveryTime)):
		return recoveryPoint{snapshot: sb.RecoverySnapshot, at: sb.RecoveryTime}, true
	case best != nil:
		return recoveryPoint{cp: best, at: best.CreateTime}, true
	}
	return recoveryPoint{}, false
}

// takeOverOps settles what the journal of lost node sb.Node holds on sb,
// which this node takes over: the record is the truth, the host work of
// each entry is the lost node's (its reconcile removes it if it comes
// back: the sandbox is no longer its own), and the snapshots an entry
// made that the record does not name go. One exception finishes: a
// suspend whose memory image and disk were stored whole before the node
// was lost completes, and is returned with its entry (the caller records
// sb suspended on it, with the entry's wake key and reason).
func (e *Engine) takeOverOps(ctx context.Context, sb *store.Sandbox) (complete *store.Snapshot, entry suspendOp, err error) {
	ops, err := e.st.ListOps(ctx, sb.Node)
	if err != nil {
		return nil, entry, err
	}
	for _, op := range ops {
		if op.SandboxID != sb.ID {
			continue
		}
		var so suspendOp
		_ = json.Unmarshal(op.Data, &so)
		settled := "dropped: the record stands"
		switch op.Kind {
		case "suspend", "resume", opRecovery:
			if so.Snapshot == "" || so.Snapshot == sb.SuspendSnapshot || so.Snapshot == sb.RecoverySnapshot {
				break
			}
			sn, err := e.st.GetSnapshot(ctx, so.Snapshot)
			if op.Kind == "suspend" && sb.State != api.StateSuspended && err == nil && sn.Suspend && !sn.StoreTime.IsZero() {
				complete, entry, settled = sn, so, "finished: its memory and disk were stored"
				break
			}
			if err == nil {
				_ = e.removeSnapshot(ctx, so.Snapshot)
			}
			settled = "rolled back: the snapshot it made is dropped"
		}
		e.log.Info("taking over an operation of a lost node", "node", sb.Node, "sandbox", sb.Name, "kind", op.Kind, "settled", settled)
		if err := e.st.DeleteOp(ctx, op.ID); err != nil {
			return nil, entry, err
		}
	}
	return complete, entry, nil
}

// recoverLost recovers each running sandbox of lost node lost on a
// placed node (see the top of this file). A sandbox with no durable
// point stays as it is, unavailable until its node is back (said once in
// the log). Called by the duty holder.
func (e *Engine) recoverLost(ctx context.Context, cl store.Cluster, lost string, sbs []*store.Sandbox) {
	for _, sb := range sbs {
		if sb.Pooled || (sb.State != api.StateRunning && sb.State != api.StatePaused) {
			continue
		}
		if !movable(sb) {
			e.noteUnrecoverable(sb, lost, "it has a volume, or secrets sealed with that node's own key")
			continue
		}
		if err := e.recoverSandbox(ctx, cl, sb); err != nil && !errdefs.IsConflict(err) {
			e.log.Warn("recover a sandbox of a lost node", "sandbox", sb.Name, "node", lost, "err", err)
		}
	}
}

// recoverSandbox records running sandbox sb of a lost node suspended on
// its most recent durable point, if no node changed it since it was read,
// and wakes it on a placed node (wake). Errors: the store's; ErrConflict
// when another node got there first.
func (e *Engine) recoverSandbox(ctx context.Context, cl store.Cluster, sb *store.Sandbox) error {
	seen, lost := sb.UpdateTime, sb.Node
	complete, entry, err := e.takeOverOps(ctx, sb)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	var made, drop string
	switch {
	case complete != nil:
		// Node lost finished the capture and stored it: the sandbox is
		// suspended as was asked, and waits as it was to.
		sb.StateReason, sb.SuspendSnapshot, sb.WakeOn = entry.Reason, complete.ID, entry.WakeOn
		drop = sb.RecoverySnapshot
	default:
		haveSnap := false
		if sb.RecoverySnapshot != "" {
			sn, err := e.st.GetSnapshot(ctx, sb.RecoverySnapshot)
			haveSnap = err == nil && !sn.StoreTime.IsZero()
		}
		cps, err := e.st.ListCheckpoints(ctx, sb.ID)
		if err != nil {
			return err
		}
		p, ok := pickRecoveryPoint(sb, haveSnap, cps)
		if !ok {
			e.noteUnrecoverable(sb, lost, "it has no durable point (no recovery snapshot, no stored checkpoint)")
			return nil
		}
		at := p.at.UTC().Format(time.RFC3339)
		if p.snapshot != "" {
			sb.SuspendSnapshot = p.snapshot
			sb.StateReason = fmt.Sprintf("%snode %s was lost; resumed from its recovery snapshot of %s with its processes: what it did after that is lost", recoveredPrefix, lost, at)
		} else {
			made = newSnapshotID()
			shape, _ := json.Marshal(sandboxShape{CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB, Env: sb.Env,
				Network: sb.Network, Secrets: sb.Secrets, DiskOnly: true})
			if err := e.st.AddSnapshot(ctx, &store.Snapshot{
				ID: made, Name: "recovery", SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image, ImageID: sb.ImageID,
				Shape: shape, Disk: p.cp.Manifest, DiskBytes: p.cp.SizeBytes, Suspend: true, State: "ready",
				Memory: []byte("[]"), CreateTime: now, StoreTime: now, Owner: sb.Owner,
			}); err != nil {
				return err
			}
			sb.SuspendSnapshot, drop = made, sb.RecoverySnapshot
			sb.StateReason = fmt.Sprintf("%snode %s was lost; booted on the disk of checkpoint %s of %s (it had no later recovery snapshot): its processes restarted, and what it did after that is lost",
				recoveredPrefix, lost, CheckpointID(p.cp.Seq), at)
		}
		sb.WakeOn = ""
	}
	sb.State, sb.SuspendTime = api.StateSuspended, now
	sb.RecoverySnapshot, sb.RecoveryTime = "", time.Time{}
	if err := cl.TakeOverSandbox(ctx, sb, seen); err != nil {
		if made != "" {
			_ = e.removeSnapshot(ctx, made)
		}
		return err
	}
	if drop != "" {
		_ = e.removeSnapshot(ctx, drop)
	}
	if complete != nil {
		e.log.Warn("completed the suspend of a lost node", "sandbox", sb.Name, "id", sb.ID, "node", lost)
		return nil
	}
	e.log.Warn("recovering a sandbox of a lost node", "sandbox", sb.Name, "id", sb.ID, "node", lost, "reason", sb.StateReason)
	e.wakeDue(sb.ID) // the sweeps ask again only if it still sleeps a while later
	e.wake(ctx, sb, "recovery from lost node "+lost)
	return nil
}

// noteUnrecoverable logs, once per sandbox while this sbxd runs, that a
// lost node's running sandbox is not recovered elsewhere, and why.
func (e *Engine) noteUnrecoverable(sb *store.Sandbox, lost, why string) {
	c := &e.recoveryClock
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unrecoverable == nil {
		c.unrecoverable = map[string]bool{}
	}
	if c.unrecoverable[sb.ID] {
		return
	}
	c.unrecoverable[sb.ID] = true
	e.log.Warn("a running sandbox of a lost node is not recovered elsewhere: it is unavailable until its node is back",
		"sandbox", sb.Name, "node", lost, "why", why)
}

// recovered reports whether suspended sb waits to wake as a sandbox
// recovered from a lost node (rather than for an event or a request).
func recovered(sb *store.Sandbox) bool {
	return sb.State == api.StateSuspended && sb.WakeOn == "" && strings.HasPrefix(sb.StateReason, recoveredPrefix)
}
