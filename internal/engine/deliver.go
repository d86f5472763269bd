package engine

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/delivery"
	"github.com/sbxhq/sbx/internal/agent"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/store"
)

// DefaultDeliveryMaxBytes bounds a delivery's archive when
// Config.DeliveryMaxBytes is 0: 1 GiB of file data (plus 1536 bytes an
// entry).
const DefaultDeliveryMaxBytes int64 = 1 << 30

// opDeliver journals a delivery in progress: a crash leaves either no
// record (the stored chunks, recorded nowhere, go with the next
// collection) or the complete record, written in one transaction after
// the chunks are durable.
const opDeliver = "deliver"

func (e *Engine) deliveriesDir() string { return filepath.Join(e.cfg.DataDir, "deliveries") }

// deliveryKeyPath is the node's signing key: made on first start, 0600.
func (e *Engine) deliveryKeyPath() string { return filepath.Join(e.cfg.DataDir, "delivery.key") }

func newDeliveryID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "dlv_" + hex.EncodeToString(b[:])
}

// initDeliveries makes the deliveries' spool dir and loads (or makes) the
// node's signing key.
func (e *Engine) initDeliveries() error {
	if err := os.MkdirAll(e.deliveriesDir(), 0o700); err != nil {
		return err
	}
	k, err := delivery.LoadOrCreateKey(e.deliveryKeyPath())
	if err != nil {
		return err
	}
	e.deliveryKey = k
	return nil
}

// DeliveryPublicKey is the node's public key (PEM, PKIX) that verifies
// delivery records, and its DSSE key id.
func (e *Engine) DeliveryPublicKey() (pemBytes []byte, keyID string) {
	pub := e.deliveryKey.Public().(ed25519.PublicKey)
	return delivery.PublicKeyPEM(pub), delivery.KeyID(pub)
}

func (e *Engine) deliveryMaxBytes() int64 {
	if e.cfg.DeliveryMaxBytes > 0 {
		return e.cfg.DeliveryMaxBytes
	}
	return DefaultDeliveryMaxBytes
}

// validateDeliveryRequest checks a delivery's body and returns its paths,
// cleaned: ErrInvalidArgument naming the field (and the path).
func validateDeliveryRequest(req *api.DeliveryRequest) ([]string, error) {
	if len(req.Name) > api.NameMaxLen || !utf8.ValidString(req.Name) || strings.ContainsAny(req.Name, "\x00\n") {
		return nil, errdefs.Invalid("name", "at most %d bytes of text on one line", api.NameMaxLen)
	}
	if len(req.Metadata) > 0 {
		if len(req.Metadata) > api.MaxMetadataBytes {
			return nil, errdefs.Invalid("metadata", "%d bytes, at most %d", len(req.Metadata), api.MaxMetadataBytes)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(req.Metadata, &obj); err != nil {
			return nil, errdefs.Invalid("metadata", "must be a JSON object")
		}
	}
	if len(req.Paths) == 0 || len(req.Paths) > api.MaxDeliveryPaths {
		return nil, errdefs.Invalid("paths", "give 1 to %d paths", api.MaxDeliveryPaths)
	}
	paths := make([]string, 0, len(req.Paths))
	for _, p := range req.Paths {
		c, err := filePath(p)
		if err != nil {
			return nil, errdefs.Invalid("paths", "%q: %s", p, strings.TrimPrefix(err.Error(), "path: "))
		}
		paths = append(paths, c)
	}
	sorted := slices.Clone(paths)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		a, b := sorted[i-1], sorted[i]
		if a == b || a == "/" || strings.HasPrefix(b, a+"/") {
			return nil, errdefs.Invalid("paths", "%q is inside %q: give each file once", b, a)
		}
	}
	return paths, nil
}

// BeginDeliver checks a delivery request, boots a stopped sandbox (wakes a
// suspended one) and takes its lock: ErrInvalidArgument,
// ErrSandboxNotFound, ErrConflict (another operation runs, or it stopped
// again meanwhile). Run packs the paths, stores the archive, signs
// and appends the record, deletes the sandbox if req.Teardown, and returns
// the *DeliveryResult. A path that does not exist, or paths over the size
// limit, are ErrInvalidArgument naming the path, here, before any work.
func (e *Engine) BeginDeliver(ctx context.Context, idOrName string, req api.DeliveryRequest) (*Op, error) {
	paths, err := validateDeliveryRequest(&req)
	if err != nil {
		return nil, err
	}
	// A stopped sandbox boots and a suspended one wakes, as for the files
	// API: the delivery reads through the agent.
	if _, err := e.ensureRunning(ctx, idOrName); err != nil {
		return nil, err
	}
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "deliver", lockOrConflict)
	if err != nil {
		return nil, err
	}
	if sb.State != api.StateRunning {
		unlock()
		return nil, errdefs.Conflictf("sandbox %q is %s: a delivery reads its files through its agent, so it must run", sb.Name, sb.State)
	}
	if err := e.preflight(ctx, sb, paths); err != nil {
		unlock()
		return nil, err
	}
	return &Op{unlock: unlock, run: func(ctx context.Context, progress func(string)) (any, error) {
		return e.deliver(ctx, sb, req, paths, progress)
	}}, nil
}

// DeliveryResult is a delivery's record and, with teardown, what deleting
// the sandbox freed.
type DeliveryResult struct {
	Delivery *store.Delivery
	Teardown *api.Teardown
}

type deliverOp struct {
	Delivery string `json:"delivery"`
	Teardown bool   `json:"teardown"`
}

// deliver does a delivery; the caller holds sb's lock.
func (e *Engine) deliver(ctx context.Context, sb *store.Sandbox, req api.DeliveryRequest, paths []string, progress func(string)) (*DeliveryResult, error) {
	start := time.Now().UTC()
	id := newDeliveryID()
	opID := newOpID()
	data, _ := json.Marshal(deliverOp{Delivery: id, Teardown: req.Teardown})
	if err := e.st.PutOp(ctx, &store.Op{ID: opID, Node: e.cfg.Node, SandboxID: sb.ID, Kind: opDeliver, Data: data}); err != nil {
		return nil, err
	}
	d, err := e.packAndRecord(ctx, sb, id, req, paths, start, progress)
	if err == nil {
		e.fault("deliver:recorded")
	}
	e.deleteOp(ctx, sb.ID, opID)
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("delivery %s recorded: %d files, %d archive bytes, seq %d", d.ID, d.Files, d.ArchiveBytes, d.Seq))
	res := &DeliveryResult{Delivery: d}
	if req.Teardown {
		progress("tearing down the sandbox")
		res.Teardown = e.tearDownDelivered(ctx, sb)
	}
	return res, nil
}

// packAndRecord reads the paths through the agent into the archive, stores
// it under a lease, and appends the signed record.
func (e *Engine) packAndRecord(ctx context.Context, sb *store.Sandbox, id string, req api.DeliveryRequest, paths []string, start time.Time, progress func(string)) (*store.Delivery, error) {
	limit := e.deliveryMaxBytes()
	pk, err := delivery.NewPacker(e.deliveriesDir(), limit)
	if err != nil {
		return nil, err
	}
	defer pk.Close()
	ag := e.agentFor(sb)
	for _, p := range paths {
		progress("reading " + p)
		if err := e.addPath(ctx, sb, ag, pk, p, limit); err != nil {
			return nil, err
		}
	}
	ctx, release := e.withLease(ctx)
	defer release()
	progress("storing the archive")
	pr, pw := io.Pipe()
	h := sha256.New()
	var size int64
	var files []delivery.File
	written := make(chan struct{})
	go func() {
		defer close(written)
		fs, err := pk.Write(io.MultiWriter(pw, h, countWriter{&size}))
		files = fs
		pw.CloseWithError(err)
	}()
	chunks, err := blob.PutStream(ctx, e.blobsFor(ctx), pr)
	pr.CloseWithError(errors.New("archive not stored"))
	<-written
	if err == nil {
		ds := make([]blob.Digest, len(chunks))
		for i, c := range chunks {
			ds[i] = c.Digest
		}
		err = e.blobsFor(ctx).Flush(ctx, ds)
	}
	if err != nil {
		return nil, fmt.Errorf("delivery: store the archive: %w", err)
	}
	e.faultCtx(ctx, "deliver:stored")
	sum := hex.EncodeToString(h.Sum(nil))
	d := &store.Delivery{ID: id, Name: req.Name, SandboxID: sb.ID, SandboxName: sb.Name,
		ArchiveDigest: "sha256:" + sum, ArchiveBytes: size, Files: len(files), Metadata: req.Metadata, Owner: sb.Owner}
	for _, c := range chunks {
		d.Chunks = append(d.Chunks, string(c.Digest))
	}
	archiveName := id + ".tar.zst"
	if req.Name != "" {
		archiveName = req.Name + ".tar.zst"
	}
	pred := &delivery.Predicate{Delivery: id, Name: req.Name, Metadata: req.Metadata,
		Sandbox:   delivery.Sandbox{ID: sb.ID, Name: sb.Name, Image: sb.Image, ImageID: sb.ImageID},
		Lineage:   e.lineage(ctx, sb),
		Archive:   delivery.Archive{Name: archiveName, MediaType: delivery.MediaType, SHA256: sum, Bytes: size, Files: len(files)},
		StartTime: start, FinishTime: time.Now().UTC()}
	if img, err := e.st.GetImage(ctx, sb.Image); err == nil && img.ID == sb.ImageID {
		pred.Sandbox.ImageDigest = img.Digest
	}
	if len(pred.Metadata) == 0 {
		pred.Metadata = json.RawMessage("null")
	}
	// One record is signed and appended at a time: each names the one
	// before it.
	e.deliverMu.Lock()
	defer e.deliverMu.Unlock()
	last, err := e.st.LastDelivery(ctx)
	if err != nil {
		return nil, err
	}
	pred.Seq = 1
	if last != nil {
		pred.Seq, pred.Previous = last.Seq+1, last.Digest
	}
	env, err := delivery.Sign(ctx, e.deliveryKey, pred, files)
	if err != nil {
		return nil, err
	}
	d.Envelope, d.Digest, d.Previous, d.CreateTime = env, delivery.DigestOf(env), pred.Previous, pred.FinishTime
	if err := e.st.AddDelivery(ctx, d); err != nil {
		return nil, err
	}
	e.log.Info("delivered", "sandbox", sb.Name, "delivery", id, "files", d.Files, "bytes", d.ArchiveBytes, "seq", d.Seq)
	return d, nil
}

type countWriter struct{ n *int64 }

func (c countWriter) Write(p []byte) (int, error) { *c.n += int64(len(p)); return len(p), nil }

// addPath reads path p of the sandbox through its agent's tar_out (which
// resolves beneath the sandbox's root and never follows a symlink) into
// the packer.
func (e *Engine) addPath(ctx context.Context, sb *store.Sandbox, ag *agent.Client, pk *delivery.Packer, p string, limit int64) error {
	res, rc, err := ag.TarOut(ctx, p, max(1, limit-pk.Used()))
	if err != nil {
		return e.tarOutErr(ctx, sb, p, limit, err)
	}
	defer rc.Close()
	if res.Type == "other" {
		return errdefs.Invalid("paths", "%s: not a file, directory or symlink", p)
	}
	if err := pk.Add(p, res.Type, rc); err != nil {
		if errors.Is(err, delivery.ErrTooLarge) {
			return errdefs.Invalid("paths", "%s: the delivery is over its limit of %d bytes", p, limit)
		}
		return err
	}
	return nil
}

// tarOutErr is the error of a delivery's tar_out of path p: a path that
// does not exist, is not beneath the sandbox's root, or is over the limit
// is ErrInvalidArgument naming it.
func (e *Engine) tarOutErr(ctx context.Context, sb *store.Sandbox, p string, limit int64, err error) error {
	var ae *agent.Error
	if errors.As(err, &ae) {
		switch ae.Kind {
		case agent.FailNotFound:
			return errdefs.Invalid("paths", "%s: no such file or directory in the sandbox", p)
		case agent.FailTooLarge:
			return errdefs.Invalid("paths", "%s: the delivery is over its limit of %d bytes (%s)", p, limit, ae.Message)
		}
		return errdefs.Invalid("paths", "%s: %s", p, ae.Message)
	}
	return e.sandboxErr(ctx, sb, errAgent(err, "paths"))
}

// preflight sizes the delivery before any work: each path must exist
// beneath the sandbox's root, and the agent's estimates of their archives
// must add up to at most the limit (the agent stops each sizing walk once
// over what is left). Nothing is read or stored.
func (e *Engine) preflight(ctx context.Context, sb *store.Sandbox, paths []string) error {
	limit := e.deliveryMaxBytes()
	ag := e.agentFor(sb)
	var sum int64
	for _, p := range paths {
		left := limit - sum
		if left <= 0 {
			return errdefs.Invalid("paths", "%s: the delivery is over its limit of %d bytes", p, limit)
		}
		res, rc, err := ag.TarOut(ctx, p, left)
		if err != nil {
			return e.tarOutErr(ctx, sb, p, limit, err)
		}
		rc.Close()
		if res.Type == "other" {
			return errdefs.Invalid("paths", "%s: not a file, directory or symlink", p)
		}
		sum += res.Estimate
	}
	return nil
}

// lineage is where sb's disk came from: its checkpoints, the checkpoint
// and snapshot it was restored or started from, its fork parent.
func (e *Engine) lineage(ctx context.Context, sb *store.Sandbox) delivery.Lineage {
	l := delivery.Lineage{DiskSource: sb.DiskSource, SourceSnapshot: sb.SourceSnapshot, ForkParent: sb.SourceSandbox,
		Checkpoints: []delivery.Checkpoint{}}
	cps, err := e.st.ListCheckpoints(ctx, sb.ID)
	if err != nil {
		e.log.Error("delivery: list checkpoints", "sandbox", sb.Name, "err", err)
	}
	for i := len(cps) - 1; i >= 0; i-- {
		cp := cps[i]
		l.Checkpoints = append(l.Checkpoints, delivery.Checkpoint{ID: CheckpointID(cp.Seq), Comment: cp.Comment, CreateTime: cp.CreateTime.UTC()})
		if cmd, ok := strings.CutPrefix(cp.Comment, guardCommentPrefix); ok {
			l.GuardedCommands = append(l.GuardedCommands, cmd)
		}
	}
	return l
}

// tearDownDelivered deletes sb after its delivery (the caller holds its lock) and
// says what that freed.
func (e *Engine) tearDownDelivered(ctx context.Context, sb *store.Sandbox) *api.Teardown {
	t := &api.Teardown{Removed: []string{}}
	if ps, err := e.agentFor(sb).Ps(ctx); err == nil {
		for _, p := range ps {
			if p.Exit == nil {
				t.Processes++
			}
		}
	}
	t.LayerBytes = e.layers.Usage(sb.ID)
	if cps, err := e.st.ListCheckpoints(ctx, sb.ID); err == nil {
		t.Checkpoints = len(cps)
		for _, cp := range cps {
			t.CheckpointBytes += cp.AddedBytes
		}
	}
	if err := e.deleteSandboxLocked(ctx, sb); err != nil {
		t.Error = err.Error()
		return t
	}
	t.Deleted = true
	// What the delete removed, checked: the container runsc knew, the
	// layer and the sandbox dir. The network (netns, veth, nftables
	// chain) and the mounts are removed by the same delete; their
	// failures are logged.
	if st, err := e.rt.State(ctx, sb.ID); err == nil && st.Status == runtime.StatusMissing {
		t.Removed = append(t.Removed, "container")
	} else {
		t.Left = append(t.Left, "container")
	}
	t.Removed = append(t.Removed, "network", "mounts")
	for _, c := range []struct{ name, path string }{{"layer", e.layers.Paths(sb.ID).Upper}, {"sandbox_dir", e.sandboxDir(sb.ID)}} {
		if _, err := os.Lstat(c.path); errors.Is(err, os.ErrNotExist) {
			t.Removed = append(t.Removed, c.name)
		} else {
			t.Left = append(t.Left, c.name)
		}
	}
	return t
}

// recoverDeliver ends a delivery a crash interrupted: its record was
// written whole or not at all, so only the journal entry goes (the chunks
// of an unrecorded archive go with the next collection). A teardown that
// did not run is not done: the caller had no answer.
func (e *Engine) recoverDeliver(ctx context.Context, op *store.Op) {
	var do deliverOp
	_ = json.Unmarshal(op.Data, &do)
	if _, err := e.st.GetDelivery(ctx, do.Delivery); err == nil {
		e.log.Warn("recover: delivery was recorded before the crash", "delivery", do.Delivery, "sandbox", op.SandboxID, "teardown_skipped", do.Teardown)
	} else {
		e.log.Warn("recover: delivery interrupted before its record; nothing was delivered", "delivery", do.Delivery, "sandbox", op.SandboxID)
	}
	e.deleteOp(ctx, op.SandboxID, op.ID)
}

// GetDelivery returns a delivery record, or ErrNotFound when there is
// none that ctx's caller may see.
func (e *Engine) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := e.st.GetDelivery(ctx, id)
	if err != nil {
		return nil, err
	}
	if !CallerOf(ctx).Sees(d.Owner) {
		return nil, errdefs.New(errdefs.ErrNotFound, "no delivery %q", id)
	}
	return d, nil
}

// ListDeliveries returns the deliveries of a sandbox (id or name; "" all),
// oldest first, of those ctx's caller may see.
func (e *Engine) ListDeliveries(ctx context.Context, sandbox string) ([]*store.Delivery, error) {
	all, err := e.st.ListDeliveries(ctx, sandbox)
	if err != nil {
		return nil, err
	}
	c := CallerOf(ctx)
	out := all[:0]
	for _, d := range all {
		if c.Sees(d.Owner) {
			out = append(out, d)
		}
	}
	return out, nil
}

// DeliveryArchive returns a reader of delivery id's archive bytes. Each
// chunk is checked against its digest as it is read: a lost or corrupt
// chunk ends the reader with blob.ErrNotFound or blob.ErrCorrupt.
func (e *Engine) DeliveryArchive(ctx context.Context, id string) (*store.Delivery, io.ReadCloser, error) {
	d, err := e.GetDelivery(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		for _, c := range d.Chunks {
			raw, err := blob.GetRaw(ctx, e.blobs, blob.Digest(c))
			if err != nil {
				pw.CloseWithError(fmt.Errorf("delivery %s: chunk %s: %w", id, c, err))
				return
			}
			if _, err := pw.Write(raw); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return d, pr, nil
}

// markDeliveries marks every chunk of every delivery's archive: deliveries
// are kept for good, whatever happens to their sandbox.
func (e *Engine) markDeliveries(ctx context.Context, mark func(blob.Digest)) error {
	ds, err := e.st.ListDeliveries(ctx, "")
	if err != nil {
		return err
	}
	for _, d := range ds {
		for _, c := range d.Chunks {
			mark(blob.Digest(c))
		}
	}
	return nil
}
