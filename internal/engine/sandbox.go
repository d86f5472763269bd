package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/agent"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/secret"
	"github.com/sbxhq/sbx/internal/store"
)

// CreateOptions are a validated create request.
type CreateOptions struct {
	api.CreateSandboxRequest
	// Progress receives lines about slow steps (an image build).
	Progress disk.Progress
}

// shape is what makes warm sandboxes interchangeable.
type shape struct {
	imageID  string
	cpus     float64
	memoryMB int
	diskMB   int
}

// Create validates req, then creates and boots a sandbox, taking a warm one
// from the pool when one of the same image and shape is ready.
//
// Errors: ErrInvalidArgument (the message names the field), ErrNameTaken,
// ErrImageNotFound, or a boot failure; a failed create leaves nothing behind.
func (e *Engine) Create(ctx context.Context, opts CreateOptions) (*store.Sandbox, error) {
	req := opts.CreateSandboxRequest
	if opts.Progress == nil {
		opts.Progress = func(string) {}
	}
	if req.Name == "" {
		req.Name = generateName()
	} else if err := ValidateName("name", req.Name); err != nil {
		return nil, err
	}
	if req.Snapshot != "" {
		if err := validateEnv("env", req.Env); err != nil {
			return nil, err
		}
		if err := validateLabels(req.Labels); err != nil {
			return nil, err
		}
		if err := e.validateNetwork(ctx, req.Network, req.Name); err != nil {
			return nil, err
		}
		if len(req.Volumes) > 0 || req.DiskMB != 0 {
			return nil, errdefs.Invalid("snapshot", "volumes and disk_mb cannot be given with a snapshot")
		}
		if err := validateTimeout(req.TimeoutMS); err != nil {
			return nil, err
		}
		if err := e.validateRecoveryInterval(req.RecoveryIntervalMS, nil, len(req.Secrets) > 0 && e.clusterKeeper == nil); err != nil {
			return nil, err
		}
		if _, err := secret.Validate("secrets", req.Secrets); err != nil {
			return nil, err
		}
		if _, err := e.st.GetSandbox(ctx, req.Name); err == nil {
			return nil, errdefs.New(errdefs.ErrNameTaken, "a sandbox named %q exists", req.Name)
		}
		return e.createFromSnapshot(ctx, req, opts.Progress)
	}
	var err error
	if req.Image == "" {
		req.Image = disk.DefaultImage
	} else if err := disk.ValidateImageName(req.Image); err != nil {
		return nil, errdefs.Invalid("image", "%q is not an image name", req.Image)
	}
	if req.CPUs == 0 {
		req.CPUs = e.cfg.DefaultCPUs
	}
	if req.CPUs < 0.1 || req.CPUs > e.cfg.MaxCPUs || math.IsNaN(req.CPUs) {
		return nil, errdefs.Invalid("cpus", "%g is out of range [0.1, %g]", req.CPUs, e.cfg.MaxCPUs)
	}
	if req.MemoryMB == 0 {
		req.MemoryMB = e.cfg.DefaultMemoryMB
	}
	if req.MemoryMB < 64 || req.MemoryMB > e.cfg.MaxMemoryMB {
		return nil, errdefs.Invalid("memory_mb", "%d is out of range [64, %d]", req.MemoryMB, e.cfg.MaxMemoryMB)
	}
	if err := e.checkSpend(ctx, CallerOf(ctx).KeyID, req.CPUs, req.MemoryMB); err != nil {
		return nil, err
	}
	if err := e.checkShape(req.CPUs, req.MemoryMB); err != nil {
		return nil, err
	}
	if req.DiskMB, err = e.diskMB(req.DiskMB); err != nil {
		return nil, err
	}
	if err := validateTimeout(req.TimeoutMS); err != nil {
		return nil, err
	}
	if err := e.validateRecoveryInterval(req.RecoveryIntervalMS, req.Volumes, len(req.Secrets) > 0 && e.clusterKeeper == nil); err != nil {
		return nil, err
	}
	if err := validateEnv("env", req.Env); err != nil {
		return nil, err
	}
	if err := validateLabels(req.Labels); err != nil {
		return nil, err
	}
	if err := e.validateNetwork(ctx, req.Network, req.Name); err != nil {
		return nil, err
	}
	if err := e.validateVolumes(req.Volumes); err != nil {
		return nil, err
	}
	secretRules, err := secret.Validate("secrets", req.Secrets)
	if err != nil {
		return nil, err
	}
	if _, err := e.st.GetSandbox(ctx, req.Name); err == nil {
		return nil, errdefs.New(errdefs.ErrNameTaken, "a sandbox named %q exists", req.Name)
	}
	release, err := e.admit(ctx, demand{what: "create", count: 1, n: 1, names: []string{req.Name}, cpus: req.CPUs, memMB: req.MemoryMB})
	if err != nil {
		return nil, err
	}
	defer release()
	img, err := e.images.Ensure(ctx, req.Image, opts.Progress)
	if err != nil {
		return nil, err
	}
	if !CallerOf(ctx).seesImage(img) {
		return nil, errdefs.New(errdefs.ErrImageNotFound, "no image named %q", req.Image)
	}
	rules := defaultNetwork()
	if req.Network != nil {
		rules = normalizeNetwork(*req.Network)
	}
	sb := &store.Sandbox{
		ID: newID(), Node: e.cfg.Node, Name: req.Name, State: api.StateCreating, Image: img.Name, ImageID: img.ID,
		CPUs: req.CPUs, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Env: req.Env, Labels: req.Labels,
		Network: rules,
		Volumes: req.Volumes, TimeoutMS: req.TimeoutMS, KeepAlive: req.KeepAliveWhileRunning,
		RecoveryIntervalMS: req.RecoveryIntervalMS, Owner: CallerOf(ctx).KeyID,
	}
	if len(req.Secrets) > 0 {
		if sb.Secrets, err = e.sealSecrets(sb.ID, nil, req.Secrets, secretRules, true); err != nil {
			return nil, err
		}
	}
	// A warm sandbox booted without a trust store of its own: one with
	// secrets boots cold.
	if len(req.Volumes) == 0 && len(req.Secrets) == 0 {
		if warm, err := e.pool.claim(ctx, shape{img.ID, req.CPUs, req.MemoryMB, req.DiskMB}, sb); err != nil || warm != nil {
			return warm, err
		}
	}
	if err := e.createCold(ctx, sb); err != nil {
		return nil, err
	}
	return sb, nil
}

// createCold records sb as creating, makes its layer and boots it. On
// failure everything made is undone, the record included; a crash of sbxd
// meanwhile leaves a creating record, which reconcile rolls back.
func (e *Engine) createCold(ctx context.Context, sb *store.Sandbox) error {
	unlock, err := e.lockID(ctx, sb.ID, sb.Name, "create", lockOrConflict)
	if err != nil {
		return err
	}
	defer unlock()
	sb.CreateTime = time.Now().UTC()
	if err := e.st.CreateSandbox(ctx, sb); err != nil {
		return err
	}
	fail := func(err error) error {
		e.discard(context.WithoutCancel(ctx), sb.ID)
		return err
	}
	if err := e.layers.Create(sb.ID); err != nil {
		return fail(err)
	}
	if !sb.Pooled {
		if err := e.recordV0(ctx, sb, true); err != nil {
			return fail(err)
		}
	}
	if err := e.start(ctx, sb, startFrom{what: "boot"}); err != nil {
		return fail(err)
	}
	if !sb.Pooled {
		e.fault("create:booted")
	}
	sb.State = api.StateRunning
	if err := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		return fail(err)
	}
	return nil
}

// spec is the runtime spec of sb; it writes sb's /etc/hostname file and
// the files of its trust store (secretMounts). cold: sb boots cold (not
// restored from a memory image).
func (e *Engine) spec(sb *store.Sandbox, netns string, cold bool) (*runtime.Spec, error) {
	if err := e.writeHostname(sb.ID, sb.Name); err != nil {
		return nil, err
	}
	trust, err := e.secretMounts(sb, cold)
	if err != nil {
		return nil, err
	}
	rootfs := e.layers.Paths(sb.ID).RootFS
	mounts := []runtime.Mount{
		{Source: e.agentDir, Destination: "/.sbx/bin", ReadOnly: true},
		{Source: e.runDir(sb.ID), Destination: "/.sbx/run"},
		// No mount at /tmp: it is on the writable layer, as on a disk. A
		// bind mount's source in the layer would be a path the guest can
		// swap for a link to a host directory, which runsc follows at the
		// next boot. runsc puts a tmpfs (memory) only on an empty /tmp,
		// and boot keeps it non-empty (disk.Layers.KeepTmp).
		// Names are answered by sbxd's DNS server, by the sandbox's rules.
		{Source: e.resolvConf(), Destination: "/etc/resolv.conf", ReadOnly: true},
		// The image's /etc/hostname may hold the name of the host that
		// built it: the sandbox reads its own name, from a host file.
		{Source: e.hostnameFile(sb.ID), Destination: "/etc/hostname", ReadOnly: true},
	}
	mounts = append(mounts, trust...)
	for _, v := range sb.Volumes {
		mounts = append(mounts, runtime.Mount{Source: e.volumeDir(v.Name), Destination: v.Path})
	}
	return &runtime.Spec{
		ID:          sb.ID,
		RootFS:      rootfs,
		Hostname:    sb.Name,
		Args:        []string{"/.sbx/bin/sbx-agent"},
		Env:         []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=1"},
		Mounts:      mounts,
		NetNS:       netns,
		CPUs:        sb.CPUs,
		MemoryBytes: int64(sb.MemoryMB) << 20,
		PidsLimit:   4096,
	}, nil
}

// hostnameFile is the host file mounted at a sandbox's /etc/hostname.
func (e *Engine) hostnameFile(id string) string { return filepath.Join(e.sandboxDir(id), "hostname") }

// writeHostname writes name to sandbox id's /etc/hostname file, in place
// (the mount holds the file's inode).
func (e *Engine) writeHostname(id, name string) error {
	if err := writeHostFile(e.hostnameFile(id), []byte(name+"\n")); err != nil {
		return fmt.Errorf("write the sandbox's /etc/hostname: %w", err)
	}
	return nil
}

// setHostname gives running sandbox sb the hostname name: its UTS
// hostname (through the agent) and its /etc/hostname.
func (e *Engine) setHostname(ctx context.Context, sb *store.Sandbox, name string) error {
	if err := e.writeHostname(sb.ID, name); err != nil {
		return err
	}
	return e.agentFor(sb).SetHostname(ctx, name)
}

// stopLocked stops sb's container and releases its netns; its disk stays.
// The caller holds sb's lock.
func (e *Engine) stopLocked(ctx context.Context, sb *store.Sandbox, reason string) error {
	e.unwatch(sb.ID)
	e.dropAgent(sb.ID)
	if err := e.rt.Delete(ctx, sb.ID); err != nil {
		return err
	}
	if err := e.net.Delete(sb.ID); err != nil {
		return err
	}
	sb.State = api.StateStopped
	sb.StateReason = reason
	return e.st.UpdateSandbox(ctx, sb)
}

// discard removes sandbox id whose create failed (the caller holds its
// lock): everything it owns on the host (removeAll), its record (its
// checkpoints go with it) and its instance. Errors are logged.
func (e *Engine) discard(ctx context.Context, id string) {
	e.removeAll(ctx, id)
	if err := e.st.DeleteSandbox(ctx, id); err != nil {
		e.log.Error("create: remove record", "sandbox", id, "err", err)
	}
	e.forgetInstance(id)
}

// removeAll deletes everything sandbox id owns on the host: its container,
// layer, netns and sandbox dir. Each step is idempotent; errors are logged.
func (e *Engine) removeAll(ctx context.Context, id string) {
	e.unwatch(id)
	e.dropAgent(id)
	if err := e.rt.Delete(ctx, id); err != nil {
		e.log.Error("remove container", "sandbox", id, "err", err)
	}
	if err := e.net.Delete(id); err != nil {
		e.log.Error("remove netns", "sandbox", id, "err", err)
	}
	if err := e.layers.Remove(id); err != nil {
		e.log.Error("remove layer", "sandbox", id, "err", err)
	}
	e.dropSnapshots(id)
	if err := disk.UnmountRunDir(e.runDir(id)); err != nil {
		e.log.Error("unmount the agent's socket dir", "sandbox", id, "err", err)
	}
	if err := os.RemoveAll(e.sandboxDir(id)); err != nil {
		e.log.Error("remove sandbox dir", "sandbox", id, "err", err)
	}
}

// Get returns the sandbox with that name or id, if ctx's caller may see
// it (Caller.Sees); else, as for a missing one, ErrSandboxNotFound.
func (e *Engine) Get(ctx context.Context, idOrName string) (*store.Sandbox, error) {
	sb, err := e.st.GetSandbox(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if sb, err = hideSandbox(ctx, sb, idOrName); err != nil {
		return nil, err
	}
	if sb.Pooled && sb.ID == idOrName {
		return nil, errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", idOrName)
	}
	return sb, nil
}

// List returns the sandboxes whose labels include all of labels, of
// those ctx's caller may see.
func (e *Engine) List(ctx context.Context, labels map[string]string) ([]*store.Sandbox, error) {
	return e.st.ListSandboxes(ctx, store.SandboxFilter{Labels: labels, Owners: CallerOf(ctx).owners()})
}

// MaxPageSize bounds a page of a list (limit).
const MaxPageSize = 1000

// ListPage is one page of List: at most limit sandboxes (1 to
// MaxPageSize), oldest first, after the page that token ended ("" the
// first page). next is the token of the page after it, "" when this one
// is the last. A token is opaque to callers: base64url of the last
// sandbox's create time and id, so a page is not thrown off by sandboxes
// made or deleted meanwhile.
//
// Errors: ErrInvalidArgument (limit, page_token); the store's.
func (e *Engine) ListPage(ctx context.Context, labels map[string]string, limit int, token string) (sbs []*store.Sandbox, next string, err error) {
	if limit < 1 || limit > MaxPageSize {
		return nil, "", errdefs.Invalid("limit", "%d is out of range [1, %d]", limit, MaxPageSize)
	}
	f := store.SandboxFilter{Labels: labels, Owners: CallerOf(ctx).owners(), Limit: limit + 1}
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		ts, id, ok := strings.Cut(string(raw), "|")
		t, terr := time.Parse(time.RFC3339Nano, ts)
		if err != nil || !ok || terr != nil || id == "" {
			return nil, "", errdefs.Invalid("page_token", "not a token this API gave (X-Next-Page-Token)")
		}
		f.After = &store.PageKey{CreateTime: t, ID: id}
	}
	if sbs, err = e.st.ListSandboxes(ctx, f); err != nil {
		return nil, "", err
	}
	if len(sbs) > limit {
		sbs = sbs[:limit]
		last := sbs[limit-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(last.CreateTime.UTC().Format(time.RFC3339Nano) + "|" + last.ID))
	}
	return sbs, next, nil
}

// Delete stops sandbox idOrName and deletes everything it owns. Another
// operation in progress on it is waited for (DeleteWait at most; a capture
// is cancelled first), and so is another delete: the delete that finds the
// sandbox gone once that one ends answers ErrSandboxNotFound. A warm
// sandbox of the pool can be deleted by its id (the pool boots a
// replacement).
//
// Errors: ErrSandboxNotFound; ErrConflict when the operation in progress
// still runs after DeleteWait; ctx's error when ctx ends while it waits.
func (e *Engine) Delete(ctx context.Context, idOrName string) error {
	sb, err := e.st.GetSandbox(ctx, idOrName)
	if err != nil {
		return err
	}
	if sb, err = hideSandbox(ctx, sb, idOrName); err != nil {
		return err
	}
	if !sb.Pooled {
		return e.deleteSandbox(ctx, sb, DeleteWait)
	}
	e.pool.remove(sb.ID, true)
	err = e.deleteSandbox(ctx, sb, DeleteWait)
	// A warm sandbox whose boot the delete waited for was put in the pool
	// once booted.
	e.pool.remove(sb.ID, false)
	return err
}

// DeleteWait bounds how long a delete waits for another operation on the
// sandbox (a boot, restore, resume, suspend, or another delete) to end.
// Those are bounded themselves (runsc deadlines, capture limits); this
// only keeps a request from waiting without end behind a queue of them.
const DeleteWait = 2 * time.Minute

// deleteSandbox deletes sb (a warm one too), waiting up to wait for an
// operation in progress (0: none is waited for, it is ErrConflict).
//
// A capture of its disk in progress (a checkpoint, snapshot, fork or
// suspend) is cancelled, and the delete waits for that operation to give
// up its lock (up to a minute, or wait if longer).
func (e *Engine) deleteSandbox(ctx context.Context, sb *store.Sandbox, wait time.Duration) error {
	unlock, err := e.lockForDelete(ctx, sb.ID, sb.Name, wait)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := e.getLocked(ctx, sb.ID)
	if errdefs.IsNotFound(err) {
		// Another delete ended while this one waited.
		return errdefs.New(errdefs.ErrSandboxNotFound, "sandbox %q was deleted", sb.Name)
	}
	if err != nil {
		return err
	}
	if sb.Pooled && !cur.Pooled {
		// A claim that held the lock made it a named sandbox, which is
		// no longer the warm one this delete was for.
		return errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", sb.ID)
	}
	return e.deleteSandboxLocked(ctx, sb)
}

// lockForDelete takes sandbox id's lock for a delete. When another
// operation holds it, a capture is cancelled, and the delete waits (up to
// wait, a minute at least for a cancelled capture) for the lock; a waiting
// delete is served before later requests, as the lock is handed over in
// the order it was waited for.
func (e *Engine) lockForDelete(ctx context.Context, id, name string, wait time.Duration) (func(), error) {
	unlock, err := e.lockID(ctx, id, name, "delete", lockOrConflict)
	if err == nil || !errdefs.IsConflict(err) {
		return unlock, err
	}
	if e.cancelCapture(id) {
		e.log.Info("delete: cancelling the capture in progress", "sandbox", name)
		wait = max(wait, time.Minute)
	}
	if e.cancelStores(id) {
		// A suspend waiting for (or running) the store of a checkpoint.
		e.log.Info("delete: cancelling the store of the sandbox's checkpoints", "sandbox", name)
		wait = max(wait, time.Minute)
	}
	if wait <= 0 {
		return nil, err
	}
	e.log.Info("delete: waiting for the operation in progress", "sandbox", name, "op", e.lockHolder(id))
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	unlock, werr := e.lockID(wctx, id, name, "delete", lockOrWait)
	if werr != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errdefs.Conflictf("sandbox %q: %s is still in progress after the delete waited %s for it; try again", name, e.lockHolder(id), wait)
	}
	return unlock, nil
}

// deleteSandboxLocked deletes sb; the caller holds its lock.
func (e *Engine) deleteSandboxLocked(ctx context.Context, sb *store.Sandbox) error {
	// The record may have changed (or gone) while the lock was taken.
	sb, err := e.st.GetSandbox(ctx, sb.ID)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	sb.State = api.StateDeleting
	if err := e.st.UpdateSandbox(ctx, sb); err != nil {
		return err
	}
	e.fault("delete:marked")
	// The stores of its checkpoints end before their snapshots go.
	letStores := e.endStores(sb.ID)
	if sb.Node == "" || sb.Node == e.cfg.Node {
		e.removeAll(ctx, sb.ID)
	} else {
		// A sandbox of a node that is not live (RouteDelete): its host
		// parts are that node's, removed with the orphans its reconcile
		// finds if it comes back.
		e.log.Info("delete: a sandbox of a node that is not live; its host keeps what it has until it is back", "sandbox", sb.Name, "node", sb.Node)
	}
	letStores()
	if err := e.st.DeleteSandbox(ctx, sb.ID); err != nil {
		return err
	}
	e.forgetInstance(sb.ID)
	e.releaseForkSnapshot(ctx, sb.SourceSnapshot)
	for _, id := range []string{sb.SuspendSnapshot, sb.RecoverySnapshot} {
		if id != "" {
			_ = e.removeSnapshot(ctx, id)
		}
	}
	_ = os.RemoveAll(e.suspendCache(sb.ID))
	_ = e.st.DeleteEvents(ctx, sb.ID)
	if !sb.Pooled {
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			e.dropConnectTo(e.ctx, sb.Name)
		}()
	}
	e.kickGC()
	e.log.Info("deleted", "sandbox", sb.Name, "id", sb.ID)
	return nil
}

// ensureRunning returns sb running: a stopped sandbox is booted (on the
// disk it has), a suspended one resumed, waiting for any lifecycle
// operation in progress. It is where work on a sandbox (exec, files,
// process list, deliveries, a guard's undo) meets its owner's daily
// spending limit: errdefs.ErrQuota when the key is over it, counting the
// sandbox's own minute when it would boot or resume (checkSpend).
func (e *Engine) ensureRunning(ctx context.Context, idOrName string) (*store.Sandbox, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if sb.State == api.StateRunning {
		// Its minute is in the key's spend already.
		if err := e.checkSpend(ctx, sb.Owner, 0, 0); err != nil {
			return nil, err
		}
		return sb, nil
	}
	sb, unlock, err := e.lockFound(ctx, sb, "boot", lockOrWait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	switch sb.State {
	case api.StateRunning:
		// It was paused (a capture) or booting when asked: its minute is
		// in the key's spend, as above.
		if err := e.checkSpend(ctx, sb.Owner, 0, 0); err != nil {
			return nil, err
		}
		return sb, nil
	case api.StateStopped:
		// Every boot obeys the limit, as every resume does (resumeLocked).
		if err := e.checkSpend(ctx, sb.Owner, sb.CPUs, sb.MemoryMB); err != nil {
			return nil, err
		}
		if err := e.start(ctx, sb, startFrom{what: "boot"}); err != nil {
			return nil, err
		}
		sb.State, sb.StateReason = api.StateRunning, ""
		if err := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
			return nil, err
		}
		return sb, nil
	case api.StateSuspended:
		// A request that needs it running wakes it: a slower first answer.
		if err := e.resumeLocked(context.WithoutCancel(ctx), sb, nil); err != nil {
			return nil, err
		}
		return sb, nil
	default:
		return nil, stateForbids(sb, "run commands")
	}
}

// Stop stops a running sandbox; its disk is kept and the next exec boots
// it again.
func (e *Engine) Stop(ctx context.Context, idOrName string) (*store.Sandbox, error) {
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "stop", lockOrConflict)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if sb.State == api.StateStopped {
		return sb, nil
	}
	if sb.State != api.StateRunning {
		return nil, stateForbids(sb, "stop")
	}
	if err := e.stopLocked(context.WithoutCancel(ctx), sb, ""); err != nil {
		return nil, err
	}
	return sb, nil
}

// errAgent maps an agent failure to an error class; field names the
// request field it concerns.
func errAgent(err error, field string) error {
	if errors.Is(err, agent.ErrNotSocket) {
		// Code in the sandbox replaced the agent's socket: sbxd does not
		// follow it, so the sandbox is unreachable until it boots again.
		return errdefs.New(errdefs.ErrUnavailable, "the sandbox's agent socket was replaced from inside the sandbox; stop the sandbox (the next exec boots it) or restore a checkpoint")
	}
	var ae *agent.Error
	if errors.Is(err, agent.ErrStalled) {
		return errdefs.New(errdefs.ErrUnavailable, "%v (it may be stopped, or the sandbox frozen or overloaded)", err)
	}
	if !errors.As(err, &ae) {
		return err
	}
	if ae.Field != "" {
		field = ae.Field
	}
	switch ae.Kind {
	case agent.FailTooLarge:
		return errdefs.New(errdefs.ErrTooLarge, "%s", ae.Message)
	case agent.FailNotFound:
		if field == "path" {
			return errdefs.New(errdefs.ErrFileNotFound, "%s", ae.Message)
		}
		return errdefs.Invalid(field, "%s", ae.Message)
	case agent.FailNoSpace:
		return errdefs.New(errdefs.ErrTooLarge, "%s: the sandbox's disk is full (its quota is disk_mb)", ae.Message)
	case agent.FailInternal:
		return fmt.Errorf("agent: %s", ae.Message)
	default:
		return errdefs.Invalid(field, "%s", ae.Message)
	}
}

// MaxIdleTimeoutMS bounds timeout_ms: 30 days.
const MaxIdleTimeoutMS = 30 * 24 * 3600 * 1000

// validateTimeout checks an idle timeout: 0 (never) or 1 s to 30 days.
func validateTimeout(ms int64) error {
	if ms != 0 && (ms < 1000 || ms > MaxIdleTimeoutMS) {
		return errdefs.Invalid("timeout_ms", "%d is out of range: 0 (never) or [1000, %d]", ms, MaxIdleTimeoutMS)
	}
	return nil
}

// Update renames a sandbox, replaces its labels, changes its idle timeout,
// keep-alive and recovery interval (0 drops its recovery snapshot); the
// fields not given stay. The idle clock restarts. A rename moves the
// sandbox's DNS name and connect rules (network.Manager Rename) and, when
// it runs, its hostname.
//
// Errors: ErrSandboxNotFound; ErrInvalidArgument (name, labels,
// timeout_ms, recovery_interval_ms); ErrNameTaken; ErrConflict (another
// operation runs, or another node owns the sandbox now).
func (e *Engine) Update(ctx context.Context, idOrName string, req api.UpdateSandboxRequest) (*store.Sandbox, error) {
	if req.TimeoutMS != nil {
		if err := validateTimeout(*req.TimeoutMS); err != nil {
			return nil, err
		}
	}
	if req.Name != nil {
		if err := ValidateName("name", *req.Name); err != nil {
			return nil, err
		}
	}
	if req.Labels != nil {
		if err := validateLabels(req.Labels); err != nil {
			return nil, err
		}
	}
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "update", lockOrWait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	dropRecovery := func() {}
	if req.RecoveryIntervalMS != nil {
		if err := e.validateRecoveryInterval(*req.RecoveryIntervalMS, sb.Volumes, secretsStay(sb.Secrets)); err != nil {
			return nil, err
		}
		sb.RecoveryIntervalMS = *req.RecoveryIntervalMS
		if sb.RecoveryIntervalMS == 0 {
			dropRecovery = e.dropRecovery(ctx, sb)
		}
	}
	if req.TimeoutMS != nil {
		sb.TimeoutMS = *req.TimeoutMS
	}
	if req.KeepAliveWhileRunning != nil {
		sb.KeepAlive = *req.KeepAliveWhileRunning
	}
	if req.Labels != nil {
		sb.Labels = req.Labels
	}
	oldName := sb.Name
	if req.Name != nil && *req.Name != sb.Name {
		if other, err := e.st.GetSandbox(ctx, *req.Name); err == nil && other.ID != sb.ID {
			return nil, errdefs.New(errdefs.ErrNameTaken, "a sandbox named %q exists", *req.Name)
		}
		sb.Name = *req.Name
	}
	if err := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		return nil, err
	}
	dropRecovery()
	if sb.Name != oldName {
		e.net.Rename(sb.ID, sb.Name)
		if sb.State == api.StateRunning {
			// The hostname follows; a failure here is not worth failing
			// the rename for (the next boot sets it).
			if err := e.setHostname(context.WithoutCancel(ctx), sb, sb.Name); err != nil {
				e.log.Warn("rename: set hostname", "sandbox", sb.ID, "err", err)
			}
		}
	}
	e.touch(sb.ID)
	return sb, nil
}

// DefaultDiskMB is the disk quota of a sandbox created without disk_mb, on
// btrfs layers: 10 GiB.
const DefaultDiskMB = 10240

// MinDiskMB is the smallest disk_mb accepted.
const MinDiskMB = 64

// diskMB validates a create's disk_mb and returns the quota the sandbox
// gets: the default for 0, and 0 (none) when layers have no quotas, where
// any disk_mb is refused.
func (e *Engine) diskMB(req int) (int, error) {
	if !e.layers.Quota() {
		if req != 0 {
			return 0, errdefs.Invalid("disk_mb", "this sbxd keeps writable layers on plain directories (--layers dir, or btrfs is not available: GET /v1/health says why), which have no disk quota")
		}
		return 0, nil
	}
	if req == 0 {
		return e.cfg.DefaultDiskMB, nil
	}
	max := int(e.layers.Capacity() >> 20)
	if req < MinDiskMB || req > max {
		return 0, errdefs.Invalid("disk_mb", "%d is out of range [%d, %d] (the size of the volume that holds the writable layers)", req, MinDiskMB, max)
	}
	return req, nil
}

// poolDiskMB is the disk quota of warm sandboxes.
func (e *Engine) poolDiskMB() int {
	if !e.layers.Quota() {
		return 0
	}
	return e.cfg.DefaultDiskMB
}

// applyQuota sets sb's disk quota on its layer (before it boots or is
// restored: a build of its layer meanwhile may have lifted it).
func (e *Engine) applyQuota(sb *store.Sandbox) error {
	if !e.layers.Quota() {
		return nil
	}
	return e.layers.SetQuota(sb.ID, e.quotaMB(sb))
}

// quotaMB is sb's disk quota in MiB: its disk_mb or the default; 0 (none)
// when layers have no quotas.
func (e *Engine) quotaMB(sb *store.Sandbox) int {
	if !e.layers.Quota() {
		return 0
	}
	if sb.DiskMB == 0 {
		return e.cfg.DefaultDiskMB
	}
	return sb.DiskMB
}

// DiskLayers says where writable layers live and whether they have
// quotas, for GET /v1/health: the layers kind ("btrfs" or "dir"), the
// default quota in MiB (0 without quotas) and why btrfs is not used ("" if
// it is or was not asked for).
func (e *Engine) DiskLayers() (kind string, quota bool, defaultMB int, note string) {
	return e.layers.Kind(), e.layers.Quota(), e.poolDiskMB(), e.layers.Fallback()
}

// CheckpointMechanism is how disk checkpoints of new sandboxes are taken,
// for GET /v1/health: disk.MechanismSnapshot ("btrfs-snapshot": a
// read-only snapshot, stored in the blob store in the background) or
// disk.MechanismCapture ("capture": the layer is read into the blob store
// while the request waits, the sandbox paused for the end of the read).
func (e *Engine) CheckpointMechanism() string { return e.layers.Mechanism() }

// DiskQuotaBytes is the disk quota of sandbox idOrName in bytes, 0 when it
// has none. Errors: ErrSandboxNotFound.
func (e *Engine) DiskQuotaBytes(ctx context.Context, idOrName string) (int64, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return 0, err
	}
	if !e.layers.Quota() {
		return 0, nil
	}
	mb := sb.DiskMB
	if mb == 0 {
		mb = e.cfg.DefaultDiskMB
	}
	return int64(mb) << 20, nil
}
