package engine

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// startFrom is what a sandbox's guest starts from (Engine.start): its
// layer as it is, booted cold (the zero startFrom), or a memory image
// restored on a disk built from a manifest.
type startFrom struct {
	// image is the dir of a memory image that runsc restores; it is
	// checked (snapshot.CheckSpec) before anything is changed. "" boots the
	// guest cold.
	image string
	// disk, when set, is the manifest the writable layer is built from
	// first, replacing the layer the sandbox has (buildDisk); nil starts
	// on the layer it has.
	disk *disk.Manifest
	// background restores the image's memory pages in the background
	// (runtime.Runtime.Restore); only with image.
	background bool
	// report, when set, is told the start's steps once it ran (a progress
	// line starting with api.StartStepsPrefix).
	report func(string)
	// what names the guest in errors and the log: "boot" (cold),
	// "restored" (a copy from a snapshot), "resumed" (a suspended
	// sandbox, or a snapshot restored in place).
	what string
}

// start starts sb's guest, the one start path of a cold boot, a copy from
// a snapshot and a resume: it deletes a stale container of sb's id,
// builds the disk (from.disk), mounts the layer and sets its quota, attaches
// the network, mounts the agent's socket dir, writes the spec, boots or
// restores with runsc, waits for the agent (woken with SIGUSR1 after a
// restore, which also renames the guest to sb's name) and watches the
// container. The caller holds sb's lock and records the new state.
//
// A cold boot runs within Config.BootTimeout; a restore only waits that
// long for its agent (a large image takes longer to load). On failure
// start undoes what it started (watch, agent, container, network); the
// layer, the socket dir and the records are the caller's to keep or
// remove. Errors are the failing step's, wrapped with "boot sandbox
// <name>" for a cold boot's runsc and agent, "restore" for runsc restore,
// "agent of the <what> sandbox" for a restored agent.
func (e *Engine) start(ctx context.Context, sb *store.Sandbox, from startFrom) (err error) {
	cold := from.image == ""
	t0 := time.Now()
	var tDisk, tNet, tRun time.Time
	if cold {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.BootTimeout)
		defer cancel()
	} else if err := snapshot.CheckSpec(from.image, imageSpecVersion); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			e.teardown(context.WithoutCancel(ctx), sb.ID)
		}
	}()
	// A stale container of this id (a sandbox that died) must go first.
	if err := e.rt.Delete(ctx, sb.ID); err != nil {
		return err
	}
	if from.disk != nil {
		if err := e.buildDisk(ctx, sb, from.disk); err != nil {
			return err
		}
	}
	// The quota goes on after the mount (MountLimited): overlayfs makes
	// its work dir when it mounts, and on a layer at its quota it would
	// mount read-only.
	if err := e.ensureImage(ctx, sb.ImageID); err != nil {
		return err
	}
	if err := e.layers.MountLimited(sb.ID, e.images.RootFS(sb.ImageID), e.quotaMB(sb)); err != nil {
		return err
	}
	if cold {
		// /tmp stays on the writable layer without a bind mount (see
		// spec); a memory image's disk has it as its capture left it.
		if err := e.layers.KeepTmp(sb.ID); err != nil {
			return err
		}
		if err := e.makeVolumes(sb.Volumes); err != nil {
			return err
		}
	}
	tDisk = time.Now()
	netns, err := e.net.Create(sb.ID, sb.Name, e.rulesOf(sb))
	if err != nil {
		return err
	}
	if err := e.mountRunDir(e.runDir(sb.ID)); err != nil {
		return err
	}
	_ = os.Remove(e.socketPath(sb.ID))
	tNet = time.Now()
	spec, err := e.spec(sb, netns, cold)
	if err != nil {
		return err
	}
	if cold {
		if err := e.rt.Start(ctx, spec, e.bundleDir(sb.ID)); err != nil {
			return fmt.Errorf("boot sandbox %s: %w", sb.Name, err)
		}
	} else {
		if err := e.rt.Restore(ctx, spec, e.bundleDir(sb.ID), from.image, from.background); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	tRun = time.Now()
	e.dropAgent(sb.ID)
	wctx, cancel := context.WithTimeout(ctx, e.cfg.BootTimeout)
	defer cancel()
	wait := e.agentFor(sb).WaitReady
	if !cold {
		// The restored agent closed its host socket before the save; it
		// listens again by itself when the restore ends (or is signalled).
		wait = func(ctx context.Context) error { return e.awaitAgent(ctx, sb) }
	}
	if err := wait(wctx); err != nil {
		if cold {
			return fmt.Errorf("boot sandbox %s: %w", sb.Name, err)
		}
		return fmt.Errorf("agent of the %s sandbox: %w", from.what, err)
	}
	if !cold {
		// The memory image holds the hostname of its capture: the
		// sandbox may have been renamed since, or be a copy.
		if err := e.setHostname(wctx, sb, sb.Name); err != nil {
			return fmt.Errorf("set the hostname of the %s sandbox: %w", from.what, err)
		}
	}
	e.watch(sb.ID)
	if from.report != nil {
		verb := "restore"
		if cold {
			verb = "run"
		}
		from.report(fmt.Sprintf("%s disk %d, netns %d, runsc %s %d, agent %d", api.StartStepsPrefix,
			tDisk.Sub(t0).Milliseconds(), tNet.Sub(tDisk).Milliseconds(), verb, tRun.Sub(tNet).Milliseconds(), time.Since(tRun).Milliseconds()))
	}
	e.log.Debug("started", "sandbox", sb.Name, "id", sb.ID, "from", from.what, "ms", time.Since(t0).Milliseconds(),
		"disk_ms", tDisk.Sub(t0).Milliseconds(), "netns_ms", tNet.Sub(tDisk).Milliseconds(),
		"run_ms", tRun.Sub(tNet).Milliseconds(), "agent_ms", time.Since(tRun).Milliseconds())
	return nil
}

// selfWakeWait is how long the host waits for a captured or restored
// agent to listen again by itself (agent.CheckpointFile) before it sends
// SIGUSR1: an agent older than that wait, or one whose capture failed
// before its checkpoint, needs the signal.
const selfWakeWait = 500 * time.Millisecond

// awaitAgent waits, within ctx, until sb's agent, quiesced for a capture
// that is over (or restored from one), answers again: first for it to
// wake by itself (selfWakeWait), then with SIGUSR1 (a runsc kill). Errors
// are the signal's or the last wait's.
func (e *Engine) awaitAgent(ctx context.Context, sb *store.Sandbox) error {
	ag := e.agentFor(sb)
	sctx, cancel := context.WithTimeout(ctx, selfWakeWait)
	err := ag.WaitReady(sctx)
	cancel()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	e.log.Debug("the agent did not wake by itself: signalling it", "sandbox", sb.Name)
	if err := e.rt.Signal(ctx, sb.ID, syscall.SIGUSR1); err != nil {
		return err
	}
	return ag.WaitReady(ctx)
}

// teardown stops what start started for sandbox id: the container's
// watch, the agent connection, the container and the network. Each step is
// idempotent; errors are ignored (the next start deletes a stale
// container first; delete and reconcile release the rest).
func (e *Engine) teardown(ctx context.Context, id string) {
	e.unwatch(id)
	e.dropAgent(id)
	_ = e.rt.Delete(ctx, id)
	_ = e.net.Delete(id)
}

// buildDisk replaces sb's writable layer with one built from diskM,
// without a quota (the caller sets it).
func (e *Engine) buildDisk(ctx context.Context, sb *store.Sandbox, diskM *disk.Manifest) error {
	_ = e.layers.Remove(sb.ID)
	return e.layers.Build(ctx, sb.ID, diskM, e.blobsFor(ctx))
}

// rebuildDisk replaces sb's writable layer with one built from diskM and
// sets its quota.
func (e *Engine) rebuildDisk(ctx context.Context, sb *store.Sandbox, diskM *disk.Manifest) error {
	if err := e.buildDisk(ctx, sb, diskM); err != nil {
		return err
	}
	return e.applyQuota(sb)
}
