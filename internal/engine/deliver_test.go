package engine

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/delivery"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/errdefs"
)

func (f *fakeEnv) deliver(ctx context.Context, name string, req api.DeliveryRequest) (*DeliveryResult, error) {
	op, err := f.e.BeginDeliver(ctx, name, req)
	if err != nil {
		return nil, err
	}
	res, err := op.Run(ctx, nil)
	if err != nil {
		return nil, err
	}
	return res.(*DeliveryResult), nil
}

func (f *fakeEnv) pub() ed25519.PublicKey {
	return f.e.deliveryKey.Public().(ed25519.PublicKey)
}

// archiveEntries reads a delivery's archive from the blob store and
// returns its entries: name → symlink target or file content.
func (f *fakeEnv) archiveEntries(t *testing.T, id string) map[string]string {
	t.Helper()
	_, rc, err := f.e.DeliveryArchive(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := zstd.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeSymlink {
			out[h.Name] = "-> " + h.Linkname
		} else {
			out[h.Name] = string(b)
		}
	}
}

// TestFakeDeliver: files of a running sandbox are delivered: the record is
// signed, chained and verifies, the archive holds the files (a symlink to
// a host path as a link, never its target's bytes), and the archive
// outlives the sandbox and a blob collection.
func TestFakeDeliver(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/work/out/a.txt", "built")
	f.writeFile(t, "a", "/work/out/sub/b.txt", "bee")
	f.writeFile(t, "a", "/work/patch.diff", "+x\n")
	if _, code := f.run(t, "a", "ln", "-s", "/etc/passwd", "work/out/hostlink"); code != 0 {
		t.Fatal("ln failed")
	}
	res, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: []string{"/work/out", "/work/patch.diff"}, Name: "release-1",
		Metadata: []byte(`{"ticket":"T-1"}`)})
	if err != nil {
		t.Fatalf("deliver: %v\nlog:\n%s", err, f.logs.String())
	}
	d := res.Delivery
	if d.Seq != 1 || d.Previous != "" || d.Files != 3 || d.SandboxID != sb.ID || res.Teardown != nil {
		t.Fatalf("record: %+v", d)
	}
	ents := f.archiveEntries(t, d.ID)
	if ents["work/out/a.txt"] != "built" || ents["work/out/sub/b.txt"] != "bee" || ents["work/patch.diff"] != "+x\n" ||
		ents["work/out/hostlink"] != "-> /etc/passwd" {
		t.Fatalf("archive entries: %q", ents)
	}
	// A second delivery follows the first.
	res2, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: []string{"/work/patch.diff"}})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Delivery.Seq != 2 || res2.Delivery.Previous != d.Digest {
		t.Fatalf("second record: seq %d previous %q, want 2 %q", res2.Delivery.Seq, res2.Delivery.Previous, d.Digest)
	}
	// A stopped sandbox boots for its delivery.
	if _, err := f.e.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: []string{"/work/patch.diff"}}); err != nil {
		t.Fatalf("delivery of a stopped sandbox: %v", err)
	}
	// The same files, read again after their times changed, make the same
	// archive, byte for byte.
	if _, code := f.run(t, "a", "touch", "-d", "2001-01-01", "work/out/a.txt", "work/patch.diff"); code != 0 {
		t.Fatal("touch failed")
	}
	res3, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: []string{"/work/patch.diff", "/work/out"}, Name: "release-1"})
	if err != nil {
		t.Fatal(err)
	}
	if res3.Delivery.ArchiveDigest != d.ArchiveDigest {
		t.Fatalf("same files, different archives: %s and %s", d.ArchiveDigest, res3.Delivery.ArchiveDigest)
	}
	ds, err := f.e.ListDeliveries(ctx, "a")
	if err != nil || len(ds) != 4 {
		t.Fatalf("list: %v %v", ds, err)
	}
	recs, err := delivery.VerifyChain([][]byte{ds[0].Envelope, ds[1].Envelope, ds[2].Envelope, ds[3].Envelope}, f.pub())
	if err != nil {
		t.Fatalf("verify chain: %v", err)
	}
	p := recs[0].Predicate
	if p.Sandbox.Name != "a" || p.Sandbox.ImageID != testImageID || string(p.Metadata) != `{"ticket":"T-1"}` || p.Name != "release-1" {
		t.Fatalf("predicate: %+v", p)
	}
	// The archive outlives its sandbox and a collection.
	if err := f.e.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.GC(ctx); err != nil {
		t.Fatal(err)
	}
	_, rc, err := f.e.DeliveryArchive(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	err = delivery.VerifyArchive(rc, recs[0])
	rc.Close()
	if err != nil {
		t.Fatalf("archive after its sandbox was deleted and a collection: %v", err)
	}
	if ops, _ := f.st.ListOps(ctx, ""); len(ops) != 0 {
		t.Fatalf("journal left: %v", ops)
	}
}

// TestFakeDeliverBadPaths: a missing path, one with "..", overlapping
// paths, and paths over the limit are ErrInvalidArgument naming the path,
// before anything is stored or recorded.
func TestFakeDeliverBadPaths(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{DeliveryMaxBytes: 64 << 10})
	ctx := context.Background()
	f.create(t, "a")
	f.writeFile(t, "a", "/work/big", strings.Repeat("x", 100<<10))
	f.writeFile(t, "a", "/work/small", "s")
	countBlobs := func() int {
		n := 0
		_ = f.e.blobs.Walk(ctx, func(blob.Digest, int64) error { n++; return nil })
		return n
	}
	before := countBlobs()
	cases := []struct {
		paths []string
		msg   string
	}{
		{[]string{"/work/small", "/work/missing"}, "/work/missing: no such file"},
		{[]string{"/work/../etc/passwd"}, `"/work/../etc/passwd"`},
		{[]string{"work/small"}, `"work/small"`},
		{[]string{"/work", "/work/small"}, `"/work/small" is inside "/work"`},
		{[]string{"/work/big"}, "/work/big: the delivery is over its limit of 65536 bytes"},
		{[]string{"/proc/self"}, "/proc/self"},
	}
	for _, c := range cases {
		_, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: c.paths})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: want invalid argument naming %q, got %v", c.paths, c.msg, err)
		}
	}
	if ds, _ := f.e.ListDeliveries(ctx, ""); len(ds) != 0 {
		t.Fatalf("records written: %v", ds)
	}
	if n := countBlobs(); n != before {
		t.Fatalf("refused deliveries stored %d blobs", n-before)
	}
}

// failingBlobs fails every Put: a blob store that cannot be written.
type failingBlobs struct{ blob.Store }

func (failingBlobs) Put(context.Context, blob.Digest, []byte) error {
	return errors.New("injected: blob store unwritable")
}

// TestFakeDeliverBlobFailure: when the archive cannot be stored, no record
// is written and the journal is empty.
func TestFakeDeliverBlobFailure(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	f.writeFile(t, "a", "/work/out.txt", "result")
	real := f.e.blobs
	f.e.blobs = failingBlobs{real}
	_, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: []string{"/work/out.txt"}, Teardown: true})
	f.e.blobs = real
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("want the store's error, got %v", err)
	}
	if ds, _ := f.e.ListDeliveries(ctx, ""); len(ds) != 0 {
		t.Fatalf("a record was written: %v", ds)
	}
	if ops, _ := f.st.ListOps(ctx, ""); len(ops) != 0 {
		t.Fatalf("journal left: %v", ops)
	}
	if _, err := f.e.Get(ctx, "a"); err != nil {
		t.Fatalf("a failed delivery tore the sandbox down: %v", err)
	}
	// The next delivery starts the chain.
	res, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: []string{"/work/out.txt"}})
	if err != nil || res.Delivery.Seq != 1 {
		t.Fatalf("after the failure: %+v %v", res, err)
	}
}

// TestFakeDeliverTeardown: with teardown, the sandbox is gone after the
// delivery (record, container, network, layer) and the answer says what
// was freed; the delivery stays.
func TestFakeDeliverTeardown(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	sb := f.create(t, "a")
	f.writeFile(t, "a", "/work/out.txt", strings.Repeat("r", 5000))
	if _, err := f.e.Checkpoint(ctx, "a", "before: make test", nil); err != nil {
		t.Fatal(err)
	}
	cps, _ := f.st.ListCheckpoints(ctx, sb.ID)
	res, err := f.deliver(ctx, "a", api.DeliveryRequest{Paths: []string{"/work/out.txt"}, Teardown: true})
	if err != nil {
		t.Fatalf("deliver: %v\nlog:\n%s", err, f.logs.String())
	}
	td := res.Teardown
	if td == nil || !td.Deleted || td.LayerBytes < 5000 || td.Checkpoints != len(cps) || td.CheckpointBytes <= 0 ||
		strings.Join(td.Removed, ",") != "container,network,mounts,layer,sandbox_dir" || len(td.Left) != 0 {
		t.Fatalf("teardown: %+v", td)
	}
	if _, err := f.e.Get(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("sandbox after teardown: %v", err)
	}
	if cs, _ := f.rt.List(ctx); len(cs) != 0 {
		t.Fatalf("containers after teardown: %v", cs)
	}
	if f.net.has(sb.ID) {
		t.Fatal("network left after teardown")
	}
	if _, err := os.Stat(f.e.layers.Paths(sb.ID).Upper); !os.IsNotExist(err) {
		t.Fatalf("layer left after teardown: %v", err)
	}
	if _, err := os.Stat(f.e.sandboxDir(sb.ID)); !os.IsNotExist(err) {
		t.Fatalf("sandbox dir left after teardown: %v", err)
	}
	if cps, _ := f.st.ListCheckpoints(ctx, sb.ID); len(cps) != 0 {
		t.Fatalf("checkpoints left after teardown: %v", cps)
	}
	got, err := f.e.GetDelivery(ctx, res.Delivery.ID)
	if err != nil || got.SandboxName != "a" {
		t.Fatalf("delivery after teardown: %+v %v", got, err)
	}
	recs, err := delivery.VerifyChain([][]byte{got.Envelope}, f.pub())
	if err != nil {
		t.Fatal(err)
	}
	lin := recs[0].Predicate.Lineage.Checkpoints
	if len(lin) != len(cps) || lin[len(lin)-1].Comment != "before: make test" {
		t.Fatalf("lineage: %+v", recs[0].Predicate.Lineage)
	}
	if g := recs[0].Predicate.Lineage.GuardedCommands; len(g) != 1 || g[0] != "make test" {
		t.Fatalf("guarded commands: %q", g)
	}
}

// TestFakeRecoverDeliverJournal: a delivery a crash interrupted before its
// record leaves nothing but its journal entry, which recovery removes; the
// key is the same after the restart.
func TestFakeRecoverDeliverJournal(t *testing.T) {
	dir := newFakeDataDir(t)
	f := startFakeEngine(t, dir, Config{})
	sb := f.create(t, "a")
	f.plantOp(t, sb.ID, opDeliver, deliverOp{Delivery: "dlv_lost", Teardown: true})
	key := f.pub()
	f.e.Close()
	f.st.Close()
	g := startFakeEngine(t, dir, Config{})
	ctx := context.Background()
	if ops, _ := g.st.ListOps(ctx, ""); len(ops) != 0 {
		t.Fatalf("journal after recovery: %v", ops)
	}
	if _, err := g.e.Get(ctx, "a"); err != nil {
		t.Fatalf("the interrupted delivery's sandbox: %v", err)
	}
	if !bytes.Equal(g.pub(), key) {
		t.Fatal("the node's key changed across a restart")
	}
}
