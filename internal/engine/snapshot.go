package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/secret"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// Snapshot limits and defaults.
const (
	DefaultRetentionDays = 7
	MaxRetentionDays     = 3650
	// tombstoneAge is how long an expired snapshot's record is kept, so a
	// lookup can say it expired.
	tombstoneAge = 30 * 24 * time.Hour
)

// shape is the part of a sandbox a snapshot restores with it.
type sandboxShape struct {
	CPUs     float64           `json:"cpus"`
	MemoryMB int               `json:"memory_mb"`
	DiskMB   int               `json:"disk_mb,omitempty"`
	Env      map[string]string `json:"env"`
	Network  api.NetworkRules  `json:"network"`
	// Secrets are the source's, values sealed (the memory image holds
	// only their placeholders); sandboxes started from the snapshot get
	// them.
	Secrets *store.SecretSet `json:"secrets,omitempty"`
	// DiskOnly marks a snapshot with no memory image: a lost node's
	// sandbox recovered from a checkpoint's disk (recovery.go), which
	// boots cold on it.
	DiskOnly bool `json:"disk_only,omitempty"`
}

func newSnapshotID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "snap_" + hex.EncodeToString(b[:])
}

func (e *Engine) snapshotsDir() string { return filepath.Join(e.cfg.DataDir, "snapshots") }

// --- quiesce epochs: execs that outlive a capture attach again ---

// quiesce is the capture count of a sandbox (guarded by its instance's
// mu).
type quiesce struct {
	epoch int
	done  chan struct{} // closed when the current capture ends
}

// beginQuiesce marks sandbox id as being captured (its agent drops its
// host connections); the returned func ends it.
func (e *Engine) beginQuiesce(id string) func() {
	in := e.instance(id)
	in.mu.Lock()
	in.quiesce.epoch++
	done := make(chan struct{})
	in.quiesce.done = done
	in.mu.Unlock()
	return func() { close(done) }
}

func (e *Engine) quiesceEpoch(id string) int {
	in := e.peekInstance(id)
	if in == nil {
		return 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.quiesce.epoch
}

// waitQuiesce reports whether a capture of id began since epoch, after
// waiting for it to end.
func (e *Engine) waitQuiesce(ctx context.Context, id string, epoch int) bool {
	q := e.quiesceOf(id)
	if q.epoch == epoch {
		return false
	}
	select {
	case <-q.done:
	case <-ctx.Done():
		return false
	}
	return true
}

// captured is what a live capture took.
type captured struct {
	dir      string // the memory image, local
	disk     *disk.Manifest
	diskRef  disk.ManifestRef
	diskAdd  int64
	pausedMS int64
}

// captureLive takes sb's memory and disk at one paused instant
// (snapshot.Capture): the agent drops its host sockets (gVisor cannot save
// them), the sandbox is paused, its writable layer captured and stored
// (storeLayer) and its memory checkpointed into dir. Then it is resumed and
// the agent told to listen again (runOn), error or not; with hold (a
// suspend: nothing the sandbox does afterwards could be kept) a capture
// that succeeded leaves it paused. The caller holds sb's lock and a blob
// lease (withLease).
func (e *Engine) captureLive(ctx context.Context, sb *store.Sandbox, dir string, progress func(string), hold bool) (*captured, error) {
	ctx = context.WithoutCancel(ctx)
	end := e.beginQuiesce(sb.ID)
	defer end()
	faults := "snapshot:"
	if hold {
		faults = "suspend:"
	}
	c := &captured{dir: dir}
	got, err := snapshot.Capture(ctx, snapshot.CaptureOptions{
		Runtime: e.rt, ID: sb.ID, Dir: dir, SpecVersion: imageSpecVersion,
		Quiesce: e.agentFor(sb).Quiesce,
		Wake:    func(ctx context.Context) { e.runOn(ctx, sb, false, "a capture") },
		Disk: func(ctx context.Context) error {
			m, ref, stats, err := e.storeLayer(ctx, sb.ID, nil, nil, nil)
			if err != nil {
				return err
			}
			c.disk, c.diskRef, c.diskAdd = m, ref, stats.AddedBytes
			return nil
		},
		Hold:     hold,
		Fault:    func(p snapshot.Point) { e.fault(faults + string(p)) },
		Progress: progress,
	})
	if err != nil {
		return nil, err
	}
	c.pausedMS = got.Paused.Milliseconds()
	st := got.Steps
	e.log.Debug("capture", "sandbox", sb.Name, "paused_ms", c.pausedMS, "quiesce_ms", st.Quiesce.Milliseconds(),
		"pause_ms", st.Pause.Milliseconds(), "disk_ms", st.Disk.Milliseconds(), "checkpoint_ms", st.Checkpoint.Milliseconds(),
		"resume_ms", st.Resume.Milliseconds(), "wake_ms", st.Wake.Milliseconds())
	if progress != nil {
		progress(fmt.Sprintf("%s quiesce %d, runsc pause %d, disk %d, runsc checkpoint %d, runsc resume %d, agent wake %d",
			api.CaptureStepsPrefix, st.Quiesce.Milliseconds(), st.Pause.Milliseconds(), st.Disk.Milliseconds(),
			st.Checkpoint.Milliseconds(), st.Resume.Milliseconds(), st.Wake.Milliseconds()))
	}
	return c, nil
}

// validateSnapshotRequest checks and fills a snapshot request.
func validateSnapshotRequest(req *api.SnapshotRequest) (time.Duration, error) {
	if len(req.Name) > api.NameMaxLen || !utf8.ValidString(req.Name) || strings.ContainsAny(req.Name, "\x00\n") {
		return 0, errdefs.Invalid("name", "at most %d bytes of text on one line", api.NameMaxLen)
	}
	days := float64(DefaultRetentionDays)
	if req.RetentionDays != nil {
		days = *req.RetentionDays
	}
	if !(days > 0) || days > MaxRetentionDays || math.IsInf(days, 0) {
		return 0, errdefs.Invalid("retention_days", "%g is out of range (0, %d]", days, MaxRetentionDays)
	}
	if len(req.Metadata) > 0 {
		if len(req.Metadata) > api.MaxMetadataBytes {
			return 0, errdefs.Invalid("metadata", "%d bytes, at most %d", len(req.Metadata), api.MaxMetadataBytes)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(req.Metadata, &obj); err != nil {
			return 0, errdefs.Invalid("metadata", "must be a JSON object")
		}
	}
	return time.Duration(days * float64(24*time.Hour)), nil
}

// snapshotable checks that sb can be snapshotted or forked.
func snapshotable(sb *store.Sandbox, what string) error {
	if len(sb.Volumes) > 0 {
		return errdefs.New(errdefs.ErrHasVolume, "sandbox %q has a volume: its %s could not be restored consistently (volumes are shared, not captured)", sb.Name, what)
	}
	if sb.State == api.StateSuspended {
		return stateForbids(sb, what)
	}
	if sb.State != api.StateRunning {
		return errdefs.Conflictf("sandbox %q is %s: a %s keeps running processes, so the sandbox must run (a disk checkpoint works on a stopped one)", sb.Name, sb.State, what)
	}
	return nil
}

// BeginSnapshot checks a snapshot request and takes the sandbox's lock:
// ErrInvalidArgument, ErrSandboxNotFound, ErrHasVolume, ErrConflict (not
// running, or another operation runs). Run returns the *store.Snapshot.
func (e *Engine) BeginSnapshot(ctx context.Context, idOrName string, req api.SnapshotRequest) (*Op, error) {
	retention, err := validateSnapshotRequest(&req)
	if err != nil {
		return nil, err
	}
	if err := e.admitSnapshot(ctx); err != nil {
		return nil, err
	}
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "snapshot", lockOrConflict)
	if err != nil {
		return nil, err
	}
	if err := snapshotable(sb, "memory snapshot"); err != nil {
		unlock()
		return nil, err
	}
	return &Op{unlock: unlock, run: func(ctx context.Context, progress func(string)) (any, error) {
		return e.snapshotLocked(ctx, sb, req, retention, false, progress)
	}}, nil
}

// snapshotLocked captures sb and records the snapshot with its hot memory
// image (takeSnapshot). The caller holds sb's lock.
func (e *Engine) snapshotLocked(ctx context.Context, sb *store.Sandbox, req api.SnapshotRequest, retention time.Duration, fork bool, progress func(string)) (*store.Snapshot, error) {
	start := time.Now()
	sn, release, err := e.takeSnapshot(ctx, sb, req, retention, fork, progress)
	if err != nil {
		return nil, err
	}
	release()
	progress(fmt.Sprintf("done in %d ms", time.Since(start).Milliseconds()))
	return sn, nil
}

// takeSnapshot captures sb, keeps the memory image as the snapshot's hot
// image and records the snapshot, pending: the ingester stores the image
// in the blob store in the background (hot.go). The disk is stored by the
// capture. It returns the record and the hold on its hot image, which the
// caller releases (holdHot).
func (e *Engine) takeSnapshot(ctx context.Context, sb *store.Sandbox, req api.SnapshotRequest, retention time.Duration, fork bool, progress func(string)) (*store.Snapshot, func(), error) {
	ctx, release := e.withLease(ctx)
	defer release()
	sn, c, err := e.captureSnapshot(ctx, sb, req, retention, fork, progress)
	if err != nil {
		return nil, nil, err
	}
	hold := e.holdHot(sn.ID)
	if err := e.recordHot(ctx, sn, c); err != nil {
		hold()
		return nil, nil, snapshotFailed(sb, fork, err)
	}
	progress(fmt.Sprintf("captured (paused %d ms); its memory image is stored in the background", c.pausedMS))
	return sn, hold, nil
}

// recordHot makes capture c's memory image the hot image of snapshot sn
// (newSnapshotRecord), records sn, pending, and kicks the ingester. On
// failure nothing is left (the capture's dir and the hot image go). The
// caller holds sn's hot image (holdHot) and a blob lease.
func (e *Engine) recordHot(ctx context.Context, sn *store.Snapshot, c *captured) error {
	ctx = context.WithoutCancel(ctx)
	hot, err := e.keepHot(c.dir, sn.ID)
	if err != nil {
		os.RemoveAll(c.dir)
		return err
	}
	c.dir = hot
	sn.Memory, sn.StoreTime = []byte("[]"), time.Time{}
	sn.MemoryBytes = dirBytes(hot)
	e.fault("snapshot:before-record")
	if err := e.st.AddSnapshot(ctx, sn); err != nil {
		os.RemoveAll(hot)
		return fmt.Errorf("record the snapshot of %s: %w", sn.SandboxName, err)
	}
	e.kickIngest()
	e.log.Info("snapshot", "sandbox", sn.SandboxName, "id", sn.ID, "fork", sn.Fork, "paused_ms", c.pausedMS,
		"memory_bytes", sn.MemoryBytes, "stored_bytes", sn.StoredBytes, "memory", "hot")
	return nil
}

func snapshotFailed(sb *store.Sandbox, fork bool, err error) error {
	class, op := errdefs.ErrSnapshotFailed, "snapshot"
	if fork {
		class, op = errdefs.ErrForkFailed, "fork"
	}
	if derr := deletedDuring(sb, op, err); derr != nil {
		return derr
	}
	class = failClass(err, class)
	return fmt.Errorf("snapshot of %s: %v: %w", sb.Name, err, class)
}

// captureSnapshot captures sb (captureLive) and returns the snapshot
// record to be, not yet stored. The caller holds a blob lease (withLease).
func (e *Engine) captureSnapshot(ctx context.Context, sb *store.Sandbox, req api.SnapshotRequest, retention time.Duration, fork bool, progress func(string)) (*store.Snapshot, *captured, error) {
	id := newSnapshotID()
	c, err := e.captureLive(ctx, sb, filepath.Join(e.snapshotsDir(), "tmp-"+id), progress, false)
	if err != nil {
		return nil, nil, snapshotFailed(sb, fork, err)
	}
	kind := snapshotKind{name: req.Name, metadata: req.Metadata, retention: retention, fork: fork}
	return newSnapshotRecord(sb, id, c, kind), c, nil
}

// snapshotKind is what a snapshot record is for: a kept snapshot (named,
// expires after retention), a fork's own (deleted with its last copy,
// releaseForkSnapshot) or a suspended sandbox's (deleted when it resumes;
// not listed).
type snapshotKind struct {
	name      string
	metadata  json.RawMessage
	retention time.Duration // of a kept snapshot
	fork      bool
	suspend   bool
}

// newSnapshotRecord is the record, not yet stored (recordHot), of
// capture c of sb as snapshot id: its shape, its disk and what it stored.
func newSnapshotRecord(sb *store.Sandbox, id string, c *captured, kind snapshotKind) *store.Snapshot {
	// A snapshot belongs to its sandbox's owner, whoever took it.
	shape, _ := json.Marshal(sandboxShape{CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB, Env: sb.Env, Network: sb.Network, Secrets: sb.Secrets})
	_, diskBytes := c.disk.Stats()
	sn := &store.Snapshot{
		ID: id, Name: kind.name, SandboxID: sb.ID, SandboxName: sb.Name, Image: sb.Image, ImageID: sb.ImageID,
		Shape: shape, Disk: refStrings(c.diskRef), DiskBytes: diskBytes, StoredBytes: c.diskAdd,
		Metadata: kind.metadata, Fork: kind.fork, Suspend: kind.suspend, State: "ready", CreateTime: time.Now().UTC(),
		Owner: sb.Owner,
	}
	if !kind.fork && !kind.suspend {
		sn.ExpireTime = sn.CreateTime.Add(kind.retention)
	}
	return sn
}

// removeSnapshot deletes snapshot id's record; its hot image goes now
// unless in use (else with the ingester's next trim, kicked), its blobs
// with the next collection (kicked). A missing record is
// ErrSnapshotNotFound.
func (e *Engine) removeSnapshot(ctx context.Context, id string) error {
	if err := e.st.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	if !e.dropHot(id) {
		e.kickIngest()
	}
	e.kickGC()
	return nil
}

// Snapshot takes a memory snapshot (BeginSnapshot, then Run).
func (e *Engine) Snapshot(ctx context.Context, idOrName string, req api.SnapshotRequest, progress func(string)) (*store.Snapshot, error) {
	op, err := e.BeginSnapshot(ctx, idOrName, req)
	if err != nil {
		return nil, err
	}
	res, err := op.Run(ctx, progress)
	if err != nil {
		return nil, err
	}
	return res.(*store.Snapshot), nil
}

// GetSnapshot returns a snapshot by id; an expired one is
// ErrSnapshotNotFound saying so, and so is one that ctx's caller may not
// see, as if missing.
func (e *Engine) GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error) {
	sn, err := e.st.GetSnapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	if sn.Suspend || !CallerOf(ctx).Sees(sn.Owner) {
		return nil, errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", id)
	}
	if sn.State == "expired" || (!sn.ExpireTime.IsZero() && time.Now().After(sn.ExpireTime)) {
		return nil, errdefs.New(errdefs.ErrSnapshotNotFound, "snapshot %q expired at %s", id, sn.ExpireTime.UTC().Format(time.RFC3339))
	}
	return sn, nil
}

// ListSnapshots returns the snapshots that have not expired, newest
// first, of those ctx's caller may see.
func (e *Engine) ListSnapshots(ctx context.Context) ([]*store.Snapshot, error) {
	all, err := e.st.ListSnapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	out := all[:0]
	now := time.Now()
	c := CallerOf(ctx)
	for _, sn := range all {
		if sn.State == "ready" && !sn.Suspend && (sn.ExpireTime.IsZero() || now.Before(sn.ExpireTime)) && c.Sees(sn.Owner) {
			out = append(out, sn)
		}
	}
	return out, nil
}

// DeleteSnapshot deletes a snapshot; its blobs go with the next collection.
// Sandboxes started from it are not affected (they have their own disk and
// memory).
func (e *Engine) DeleteSnapshot(ctx context.Context, id string) error {
	if sn, err := e.st.GetSnapshot(ctx, id); err != nil {
		return err
	} else if sn.Suspend || !CallerOf(ctx).Sees(sn.Owner) {
		return errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", id)
	}
	return e.removeSnapshot(ctx, id)
}

// restoreInto boots sb (a record in state creating) from a memory image in
// imageDir and the disk of manifest diskM: it records v0 (the copied disk,
// source "<sandbox>/<snapshot>") and starts the sandbox (start: the disk
// is built, runsc restores, the agent listens again and the hostname
// becomes sb's name). On failure start has stopped what it started; the
// layer and the records are left for the caller's cleanup (discard).
func (e *Engine) restoreInto(ctx context.Context, sb *store.Sandbox, sn *store.Snapshot, diskM *disk.Manifest, imageDir string, progress func(string)) error {
	files, size := diskM.Stats()
	if err := e.st.AddCheckpoint(ctx, &store.Checkpoint{
		SandboxID: sb.ID, Seq: 0, SourceID: sn.SandboxName + "/" + sn.ID, Health: api.HealthOK, Manifest: sn.Disk,
		SizeBytes: size, Files: files, CreateTime: time.Now().UTC(),
	}); err != nil {
		return err
	}
	return e.start(ctx, sb, startFrom{image: imageDir, disk: diskM, what: "restored", report: progress})
}

// snapshotDisk loads a snapshot's disk manifest.
func (e *Engine) snapshotDisk(ctx context.Context, sn *store.Snapshot) (*disk.Manifest, error) {
	ref := make(disk.ManifestRef, len(sn.Disk))
	for i, d := range sn.Disk {
		ref[i] = blob.Digest(d)
	}
	return disk.GetManifest(ctx, e.blobsFor(ctx), ref)
}

// createFromSnapshot makes a sandbox from a snapshot, running, with the
// snapshot's disk, memory and processes (Create with req.Snapshot).
func (e *Engine) createFromSnapshot(ctx context.Context, req api.CreateSandboxRequest, progress func(string)) (*store.Sandbox, error) {
	sn, err := e.GetSnapshot(ctx, req.Snapshot)
	if err != nil {
		return nil, err
	}
	var sh sandboxShape
	if err := json.Unmarshal(sn.Shape, &sh); err != nil {
		return nil, fmt.Errorf("snapshot %s: its shape record is unreadable: %v: %w", sn.ID, err, errdefs.ErrRestoreFailed)
	}
	if req.Image != "" && req.Image != sn.Image {
		return nil, errdefs.Invalid("image", "a sandbox from a snapshot runs on the snapshot's image (%s)", sn.Image)
	}
	if req.CPUs != 0 || req.MemoryMB != 0 {
		return nil, errdefs.Invalid("cpus", "a sandbox from a snapshot has the snapshot's cpus and memory_mb (%g, %d)", sh.CPUs, sh.MemoryMB)
	}
	if sh.DiskOnly {
		return nil, errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", req.Snapshot)
	}
	if err := e.validateRecoveryInterval(req.RecoveryIntervalMS, nil, secretsStay(sh.Secrets) || (len(req.Secrets) > 0 && e.clusterKeeper == nil)); err != nil {
		return nil, err
	}
	// A fork's copies belong to its source's owner, and are billed to
	// it, wherever they start (a copy placed on another node starts there
	// from the fork's snapshot).
	owner := CallerOf(ctx).KeyID
	if sn.Fork {
		owner = sn.Owner
	}
	if err := e.checkSpend(ctx, owner, sh.CPUs, sh.MemoryMB); err != nil {
		return nil, err
	}
	if _, err := e.images.Get(ctx, sn.Image); err != nil && !e.imageDirExists(sn.ImageID) {
		return nil, errdefs.New(errdefs.ErrImageNotFound, "the snapshot's image %q is gone", sn.Image)
	}
	env := map[string]string{}
	for k, v := range sh.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	network := sh.Network
	if req.Network != nil {
		network = *req.Network
	}
	sb := &store.Sandbox{
		ID: newID(), Node: e.cfg.Node, Name: req.Name, State: api.StateCreating, Image: sn.Image, ImageID: sn.ImageID,
		CPUs: sh.CPUs, MemoryMB: sh.MemoryMB, DiskMB: sh.DiskMB, Env: env, Labels: req.Labels, Network: normalizeNetwork(network), TimeoutMS: req.TimeoutMS, KeepAlive: req.KeepAliveWhileRunning,
		RecoveryIntervalMS: req.RecoveryIntervalMS,
		SourceSandbox:      sn.SandboxName, SourceSnapshot: sn.ID, DiskSource: sn.SandboxName + "/" + sn.ID,
		CreateTime: time.Now().UTC(), Owner: owner,
		// The snapshot's secrets, CA and placeholders (its processes hold
		// them), and whether its capture had the CA mounted.
		Secrets: sh.Secrets.Clone(),
	}
	if len(req.Secrets) > 0 {
		parsed, err := secret.Validate("secrets", req.Secrets)
		if err != nil {
			return nil, err
		}
		if sb.Secrets, err = e.sealSecrets(sb.ID, sb.Secrets, req.Secrets, parsed, false); err != nil {
			return nil, err
		}
	}
	if !e.layers.Quota() {
		sb.DiskMB = 0
	}
	admitted, err := e.admit(ctx, demand{what: "create", count: 1, n: 1, names: []string{sb.Name}, cpus: sb.CPUs, memMB: sb.MemoryMB})
	if err != nil {
		return nil, err
	}
	defer admitted()
	ctx, release := e.withLease(ctx)
	defer release()
	dir, hot, done, err := e.memoryImage(ctx, sn)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %v: %w", sn.ID, err, errdefs.ErrSnapshotFailed)
	}
	defer done()
	if !hot {
		progress("fetched the memory image from the blob store")
	}
	diskM, err := e.snapshotDisk(ctx, sn)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %v: %w", sn.ID, err, errdefs.ErrSnapshotFailed)
	}
	progress("restoring")
	if err := e.startCopy(ctx, sb, sn, diskM, dir, progress); err != nil {
		return nil, err
	}
	return sb, nil
}

func (e *Engine) imageDirExists(id string) bool {
	_, err := os.Stat(e.images.RootFS(id))
	return err == nil
}

// startCopy records sb (creating), restores it from the image dir and the
// disk, and marks it running; on failure it leaves nothing. progress, when
// not nil, is told the start's steps (start).
func (e *Engine) startCopy(ctx context.Context, sb *store.Sandbox, sn *store.Snapshot, diskM *disk.Manifest, dir string, progress func(string)) error {
	unlock, err := e.lockID(ctx, sb.ID, sb.Name, "create", lockOrConflict)
	if err != nil {
		return err
	}
	defer unlock()
	if err := e.st.CreateSandbox(ctx, sb); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if err := e.restoreInto(ctx, sb, sn, diskM, dir, progress); err != nil {
		e.discard(ctx, sb.ID)
		return fmt.Errorf("start %s from %s: %v: %w", sb.Name, sn.ID, err, errdefs.ErrSnapshotFailed)
	}
	sb.State = api.StateRunning
	return e.st.UpdateSandbox(ctx, sb)
}

// BeginFork checks a fork request and takes the original's lock (held for
// the capture only). Run returns an *api.ForkResult-ready *ForkResult.
func (e *Engine) BeginFork(ctx context.Context, idOrName string, req api.ForkRequest) (*Op, error) {
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > api.MaxForkCount {
		return nil, errdefs.Invalid("count", "%d is out of range [1, %d]", req.Count, api.MaxForkCount)
	}
	names, err := forkNames(req.Name, req.Count)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, err := e.st.GetSandbox(ctx, n); err == nil {
			return nil, errdefs.New(errdefs.ErrNameTaken, "a sandbox named %q exists", n)
		}
	}
	if err := validateLabels(req.Labels); err != nil {
		return nil, err
	}
	if err := e.validateNetwork(ctx, req.Network, ""); err != nil {
		return nil, err
	}
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "fork", lockOrConflict)
	if err != nil {
		return nil, err
	}
	if err := snapshotable(sb, "fork"); err != nil {
		unlock()
		return nil, err
	}
	// The copies are billed to the source's owner.
	if err := e.checkSpend(ctx, sb.Owner, sb.CPUs*float64(len(names)), sb.MemoryMB*len(names)); err != nil {
		unlock()
		return nil, err
	}
	admitted, err := e.admit(ctx, demand{what: "fork", count: len(names), n: len(names), names: names, cpus: sb.CPUs, memMB: sb.MemoryMB})
	if err != nil {
		unlock()
		return nil, err
	}
	return &Op{unlock: admitted, run: func(ctx context.Context, progress func(string)) (any, error) {
		return e.fork(ctx, sb, unlock, req, names, progress)
	}}, nil
}

// forkNames are the copies' names: name, or name-1..name-N, or generated.
func forkNames(name string, n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		switch {
		case name == "":
			out[i] = generateName()
		case n == 1:
			out[i] = name
		default:
			out[i] = fmt.Sprintf("%s-%d", name, i+1)
		}
		if err := ValidateName("name", out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ForkResult is what a fork made.
type ForkResult struct {
	Snapshot *store.Snapshot
	Copies   []*store.Sandbox // nil where a copy failed
	Errors   []error
	PausedMS int64
}

// fork captures the original (its lock released once it runs again),
// records the snapshot the fork takes for itself, and starts the copies,
// several at once: those placed on this node from the local image, those
// placed on others (placeCopies) there, from the blob store (Peers).
func (e *Engine) fork(ctx context.Context, sb *store.Sandbox, unlock func(), req api.ForkRequest, names []string, progress func(string)) (*ForkResult, error) {
	ctx = context.WithoutCancel(ctx)
	ctx, release := e.withLease(ctx)
	defer release()
	sn, c, err := e.captureSnapshot(ctx, sb, api.SnapshotRequest{Name: "fork of " + sb.Name}, 0, true, progress)
	unlock()
	if err != nil {
		return nil, err
	}
	// The fork's own snapshot is recorded at once with its hot image
	// (stored in the background, hot.go); the copies restore from that
	// image, held until they run.
	hold := e.holdHot(sn.ID)
	defer hold()
	if err := e.recordHot(ctx, sn, c); err != nil {
		return nil, snapshotFailed(sb, true, err)
	}
	res := &ForkResult{Snapshot: sn, Copies: make([]*store.Sandbox, len(names)), Errors: make([]error, len(names)), PausedMS: c.pausedMS}
	network := sb.Network
	if req.Network != nil {
		network = *req.Network
	}
	progress(fmt.Sprintf("captured (paused %d ms); starting %d copies", c.pausedMS, len(names)))
	e.fault("fork:captured")
	// Copies that failed, or were deleted meanwhile, do not hold the
	// fork's snapshot.
	defer e.releaseForkSnapshot(ctx, sn.ID)
	// In a cluster, copies are placed as creates are; those placed on
	// other nodes start there from the snapshot, whose memory image and
	// image go to the shared blob store first (if that fails, they start
	// here).
	where := e.placeCopies(ctx, sb, len(names))
	remote := 0
	for _, to := range where {
		if to != e.cfg.Node {
			remote++
		}
	}
	if remote > 0 {
		progress(fmt.Sprintf("storing the memory image for %d copies on other nodes", remote))
		cl, _ := e.distributesImages()
		err := e.storeHot(ctx, sn)
		if err == nil {
			err = e.publishImage(ctx, cl, sb.ImageID)
		}
		if err != nil {
			e.log.Warn("fork: the copies placed on other nodes start here", "sandbox", sb.Name, "err", err)
			for i := range where {
				where[i] = e.cfg.Node
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, goruntime.NumCPU()))
	for i, name := range names {
		wg.Add(1)
		go func(i int, name string) {
			defer wg.Done()
			if where[i] != e.cfg.Node {
				cp, err := e.startRemoteCopy(ctx, where[i], sn, name, req.Labels, network)
				if err != nil {
					res.Errors[i] = fmt.Errorf("copy %s on node %s: %v: %w", name, where[i], err, errdefs.ErrForkFailed)
					return
				}
				res.Copies[i] = cp
				return
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			cp := &store.Sandbox{
				ID: newID(), Node: e.cfg.Node, Name: name, State: api.StateCreating, Image: sb.Image, ImageID: sb.ImageID,
				CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB, Env: sb.Env, Labels: req.Labels, Network: normalizeNetwork(network),
				SourceSandbox: sb.Name, SourceSnapshot: sn.ID, DiskSource: sb.Name + "/" + sn.ID, CreateTime: time.Now().UTC(),
				Owner:   sb.Owner, // a fork belongs to its source's owner
				Secrets: sb.Secrets.Clone(),
			}
			if err := e.startCopy(ctx, cp, sn, c.disk, c.dir, nil); err != nil {
				res.Errors[i] = fmt.Errorf("%v: %w", err, errdefs.ErrForkFailed)
				return
			}
			res.Copies[i] = cp
		}(i, name)
	}
	wg.Wait()
	ok := 0
	for _, cp := range res.Copies {
		if cp != nil {
			ok++
		}
	}
	e.log.Info("fork", "sandbox", sb.Name, "copies", ok, "of", len(names), "paused_ms", c.pausedMS)
	return res, nil
}

// startRemoteCopy starts fork copy name of snapshot sn on node to, from
// the blob store (a start from the snapshot there, as the fork's caller),
// and returns its record.
func (e *Engine) startRemoteCopy(ctx context.Context, to string, sn *store.Snapshot, name string, labels map[string]string, network api.NetworkRules) (*store.Sandbox, error) {
	n, err := e.node(ctx, to)
	if err != nil {
		return nil, err
	}
	if n == nil || n.URL == "" {
		return nil, fmt.Errorf("node %s advertises no URL", to)
	}
	id, err := e.peers.CreateSandbox(ctx, n.URL, api.CreateSandboxRequest{Name: name, Snapshot: sn.ID, Labels: labels, Network: &network})
	if err != nil {
		return nil, err
	}
	return e.st.GetSandbox(ctx, id)
}

// Fork forks a sandbox (BeginFork, then Run).
func (e *Engine) Fork(ctx context.Context, idOrName string, req api.ForkRequest, progress func(string)) (*ForkResult, error) {
	op, err := e.BeginFork(ctx, idOrName, req)
	if err != nil {
		return nil, err
	}
	res, err := op.Run(ctx, progress)
	if err != nil {
		return nil, err
	}
	return res.(*ForkResult), nil
}

// releaseForkSnapshot deletes the snapshot a fork took for itself once no
// sandbox made from it is left.
func (e *Engine) releaseForkSnapshot(ctx context.Context, snapID string) {
	if snapID == "" {
		return
	}
	sn, err := e.st.GetSnapshot(ctx, snapID)
	if err != nil || !sn.Fork {
		return
	}
	users, err := e.st.ListSandboxes(ctx, store.SandboxFilter{All: true, SourceSnapshot: snapID})
	if err != nil || len(users) > 0 {
		return
	}
	if err := e.removeSnapshot(ctx, snapID); err == nil {
		e.log.Info("deleted the snapshot of a fork whose copies are gone", "snapshot", snapID)
	}
}

// expireSnapshots turns expired snapshots into tombstones (their bytes go
// with the blob collection) and forgets old tombstones and fork snapshots
// that no sandbox uses.
func (e *Engine) expireSnapshots(ctx context.Context) error {
	all, err := e.st.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	now := time.Now()
	for _, sn := range all {
		switch {
		case sn.State == "ready" && !sn.ExpireTime.IsZero() && now.After(sn.ExpireTime):
			sn.State, sn.Memory, sn.Disk = "expired", []byte("[]"), nil
			if err := e.st.UpdateSnapshot(ctx, sn); err != nil {
				return err
			}
			e.dropHot(sn.ID)
			e.log.Info("snapshot expired", "snapshot", sn.ID, "sandbox", sn.SandboxName)
		case sn.State == "expired" && now.Sub(sn.ExpireTime) > tombstoneAge:
			if err := e.st.DeleteSnapshot(ctx, sn.ID); err != nil {
				return err
			}
		case sn.Fork:
			e.releaseForkSnapshot(ctx, sn.ID)
		}
	}
	return nil
}

func normalizeNetwork(n api.NetworkRules) api.NetworkRules {
	for _, l := range []*[]string{&n.Allow, &n.Deny, &n.Connect} {
		if *l == nil {
			*l = []string{}
		}
	}
	return n
}
