package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// tenantKey makes a tenant key record and returns its caller.
func tenantKey(t *testing.T, e *Engine, name string) Caller {
	t.Helper()
	k, secret, err := e.CreateKey(context.Background(), api.CreateKeyRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.Authenticate(context.Background(), secret)
	if err != nil || c.KeyID != k.ID || c.Admin {
		t.Fatalf("authenticate %s: %+v %v", name, c, err)
	}
	return c
}

// TestFakeTenants: a tenant key sees and acts only on what it made;
// another tenant's sandbox answers exactly as a missing one, everywhere
// the engine finds a sandbox by name; a name another tenant holds is
// name_taken; the operator sees everything.
func TestFakeTenants(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	e := f.e
	a, b := tenantKey(t, e, "alice"), tenantKey(t, e, "bob")
	ctxA, ctxB := WithCaller(context.Background(), a), WithCaller(context.Background(), b)
	sb, err := e.Create(ctxA, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "a-box", Labels: map[string]string{"team": "x"}}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, f.logs.String())
	}
	if sb.Owner != a.KeyID {
		t.Fatalf("owner %q, want %q", sb.Owner, a.KeyID)
	}
	if rec, _ := f.st.GetSandbox(context.Background(), sb.ID); rec.Owner != a.KeyID {
		t.Fatalf("stored owner %q", rec.Owner)
	}
	// The answers for bob on alice's sandbox are those for a name that
	// does not exist, word for word.
	_, missing := e.Get(ctxB, "no-such-box")
	for _, name := range []string{"a-box", sb.ID} {
		_, err := e.Get(ctxB, name)
		want := strings.ReplaceAll(missing.Error(), "no-such-box", name)
		if errdefs.Code(err) != api.CodeSandboxNotFound || err.Error() != want {
			t.Fatalf("bob gets %s: %v, want %q", name, err, want)
		}
	}
	notFound := func(what string, err error) {
		t.Helper()
		if errdefs.Code(err) != api.CodeSandboxNotFound {
			t.Errorf("bob %s alice's sandbox: %v, want sandbox_not_found", what, err)
		}
	}
	_, err = e.Exec(ctxB, "a-box", api.ExecRequest{Cmd: []string{"echo", "x"}, Cwd: "/"}, nil)
	notFound("execs in", err)
	_, err = e.WriteFile(ctxB, "a-box", "/x", 0o644, strings.NewReader("x"))
	notFound("writes a file in", err)
	_, _, _, err = e.OpenFile(ctxB, "a-box", "/x", 10)
	notFound("reads a file of", err)
	_, err = e.ListCheckpoints(ctxB, "a-box")
	notFound("lists checkpoints of", err)
	_, err = e.Checkpoint(ctxB, "a-box", "", nil)
	notFound("checkpoints", err)
	_, err = e.Stop(ctxB, "a-box")
	notFound("stops", err)
	_, err = e.Update(ctxB, "a-box", api.UpdateSandboxRequest{Labels: map[string]string{"x": "y"}})
	notFound("relabels", err)
	_, err = e.GetNetwork(ctxB, "a-box")
	notFound("reads the network of", err)
	_, err = e.SetNetwork(ctxB, "a-box", api.NetworkRules{Internet: false})
	notFound("sets the network of", err)
	_, err = e.ListPorts(ctxB, "a-box")
	notFound("lists ports of", err)
	_, err = e.DialPort(ctxB, "a-box", 80)
	notFound("dials a port of", err)
	_, err = e.ListProcesses(ctxB, "a-box")
	notFound("lists processes of", err)
	_, _, err = e.Events(ctxB, "a-box", EventPage{})
	notFound("reads events of", err)
	_, err = e.Suspend(ctxB, "a-box", api.SuspendRequest{}, nil)
	notFound("suspends", err)
	_, err = e.Snapshot(ctxB, "a-box", api.SnapshotRequest{}, nil)
	notFound("snapshots", err)
	_, err = e.Fork(ctxB, "a-box", api.ForkRequest{}, nil)
	notFound("forks", err)
	notFound("deletes", e.Delete(ctxB, "a-box"))
	// connect rules name only sandboxes the caller sees.
	_, err = e.Create(ctxB, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "b-box",
		Network: &api.NetworkRules{Internet: true, Connect: []string{"a-box"}}}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `no sandbox named "a-box"`) {
		t.Fatalf("bob connects to alice's sandbox: %v, want invalid_argument no sandbox named", err)
	}
	// Names are unique per sbxd: taken, and saying no more.
	_, err = e.Create(ctxB, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "a-box"}})
	if !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("bob creates a-box: %v, want name_taken", err)
	}
	if _, err := e.Create(ctxB, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "b-box"}}); err != nil {
		t.Fatal(err)
	}
	names := func(ctx context.Context) string {
		l, err := e.List(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sb := range l {
			out = append(out, sb.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(ctxA); got != "a-box" {
		t.Errorf("alice lists %q", got)
	}
	if got := names(ctxB); got != "b-box" {
		t.Errorf("bob lists %q", got)
	}
	if got := names(context.Background()); got != "a-box,b-box" {
		t.Errorf("the operator lists %q", got)
	}
	// Alice acts on hers.
	if out, code := f.run(t, "a-box", "echo", "hi"); out != "hi\n" || code != 0 {
		t.Fatalf("%q %d", out, code)
	}
	if _, err := e.Exec(ctxA, "a-box", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/"}, nil); err != nil {
		t.Fatalf("alice execs in hers: %v", err)
	}

	// Snapshots (planted: the fake cannot take one): bob's lists and
	// lookups do not show alice's.
	sn := &store.Snapshot{ID: "snap_alice", SandboxID: sb.ID, SandboxName: sb.Name, Image: "default", ImageID: testImageID,
		Owner: a.KeyID, CreateTime: time.Now().UTC()}
	if err := f.st.AddSnapshot(context.Background(), sn); err != nil {
		t.Fatal(err)
	}
	if _, err := e.GetSnapshot(ctxB, sn.ID); errdefs.Code(err) != api.CodeSnapshotNotFound {
		t.Errorf("bob gets alice's snapshot: %v", err)
	}
	if l, _ := e.ListSnapshots(ctxB); len(l) != 0 {
		t.Errorf("bob lists %d snapshots", len(l))
	}
	if err := e.DeleteSnapshot(ctxB, sn.ID); errdefs.Code(err) != api.CodeSnapshotNotFound {
		t.Errorf("bob deletes alice's snapshot: %v", err)
	}
	_, err = e.Create(ctxB, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "b-copy", Snapshot: sn.ID}})
	if errdefs.Code(err) != api.CodeSnapshotNotFound {
		t.Errorf("bob starts from alice's snapshot: %v", err)
	}
	if l, _ := e.ListSnapshots(ctxA); len(l) != 1 {
		t.Errorf("alice lists %d snapshots, want 1", len(l))
	}
	if err := e.RestoreSnapshotInPlace(ctxB, "b-box", sn.ID); errdefs.Code(err) != api.CodeSnapshotNotFound {
		t.Errorf("bob restores alice's snapshot into his sandbox: %v", err)
	}

	// Images: the operator's are shared; a tenant's are its own.
	if err := f.st.PutImage(context.Background(), &store.Image{Name: "alices", ID: testImageID, Owner: a.KeyID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.GetImage(ctxB, "alices"); errdefs.Code(err) != api.CodeImageNotFound {
		t.Errorf("bob gets alice's image: %v", err)
	}
	if _, err := e.GetImage(ctxB, "default"); err != nil {
		t.Errorf("bob gets the shared default image: %v", err)
	}
	if l, _ := e.ListImages(ctxB); len(l) != 1 || l[0].Name != "default" {
		t.Errorf("bob lists %d images", len(l))
	}
	if err := e.RemoveImage(ctxB, "alices"); errdefs.Code(err) != api.CodeImageNotFound {
		t.Errorf("bob removes alice's image: %v", err)
	}
	if err := e.RemoveImage(ctxB, "default"); !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("bob removes the shared image: %v, want forbidden", err)
	}
	_, err = e.Create(ctxB, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "b-on-a", Image: "alices"}})
	if errdefs.Code(err) != api.CodeImageNotFound {
		t.Errorf("bob creates on alice's image: %v", err)
	}
	_, err = e.PullImage(ctxB, api.PullImageRequest{Name: "alices", Ref: "127.0.0.1:1/x:1"}, nil)
	if !errors.Is(err, errdefs.ErrNameTaken) {
		t.Errorf("bob pulls over alice's image: %v, want name_taken", err)
	}
	_, err = e.PullImage(ctxB, api.PullImageRequest{Name: "default", Ref: "127.0.0.1:1/x:1"}, nil)
	if !errors.Is(err, errdefs.ErrNameTaken) {
		t.Errorf("bob pulls over the shared image: %v, want name_taken", err)
	}

	// Events: bob's pending events are his; alice's cancel does not reach them.
	if _, err := e.PostEvent(ctxB, "go", []byte("b"), ""); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := e.PendingEvents(ctxA, "", EventPage{}); len(evs) != 0 {
		t.Errorf("alice sees %d pending events of bob", len(evs))
	}
	if evs, _, _ := e.PendingEvents(ctxB, "", EventPage{}); len(evs) != 1 {
		t.Fatalf("bob sees %d pending events, want 1", len(evs))
	} else if err := e.CancelEvent(ctxA, evs[0].ID); !errors.Is(err, errdefs.ErrEventNotFound) {
		t.Errorf("alice cancels bob's event: %v", err)
	}
	if n, err := e.CancelEvents(ctxA, "go"); err != nil || n != 0 {
		t.Errorf("alice cancels key go: %d %v", n, err)
	}

	// Deliveries (planted).
	d := &store.Delivery{ID: "dlv_a", SandboxID: sb.ID, SandboxName: sb.Name, ArchiveDigest: "sha256:x", Chunks: []string{},
		Envelope: []byte("{}"), Digest: "sha256:e", Owner: a.KeyID}
	if err := f.st.AddDelivery(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if _, err := e.GetDelivery(ctxB, "dlv_a"); !errdefs.IsNotFound(err) {
		t.Errorf("bob gets alice's delivery: %v", err)
	}
	if _, _, err := e.DeliveryArchive(ctxB, "dlv_a"); !errdefs.IsNotFound(err) {
		t.Errorf("bob downloads alice's delivery: %v", err)
	}
	if l, _ := e.ListDeliveries(ctxB, ""); len(l) != 0 {
		t.Errorf("bob lists %d deliveries", len(l))
	}
	if l, _ := e.ListDeliveries(ctxA, "a-box"); len(l) != 1 {
		t.Errorf("alice lists %d deliveries, want 1", len(l))
	}

	// Alice deletes hers; the operator deletes bob's.
	if err := e.Delete(ctxA, "a-box"); err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(context.Background(), "b-box"); err != nil {
		t.Fatal(err)
	}
}

// TestFakeKeys: only an admin makes and revokes keys; a revoked key
// authenticates nothing; bad requests name the field.
func TestFakeKeys(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	e := f.e
	ctx := context.Background()
	limit := 2.5
	k, secret, err := e.CreateKey(ctx, api.CreateKeyRequest{Name: "ci", DailyLimitUSD: &limit, Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, api.KeySecretPrefix) || len(secret) != len(api.KeySecretPrefix)+43 || k.Hash != HashKey(secret) {
		t.Fatalf("secret %q, hash %q", secret, k.Hash)
	}
	if rec, _ := f.st.GetKey(ctx, k.ID); rec.Hash == secret || strings.Contains(rec.Hash, secret[len(api.KeySecretPrefix):]) {
		t.Fatal("the store holds the secret")
	}
	c, err := e.Authenticate(ctx, secret)
	if err != nil || c.KeyID != k.ID || c.Admin {
		t.Fatalf("%+v %v", c, err)
	}
	ctxT := WithCaller(ctx, c)
	if _, _, err := e.CreateKey(ctxT, api.CreateKeyRequest{Name: "mine"}); !errors.Is(err, errdefs.ErrForbidden) {
		t.Fatalf("a tenant makes a key: %v, want forbidden", err)
	}
	if _, err := e.RevokeKey(ctxT, k.ID); !errors.Is(err, errdefs.ErrForbidden) {
		t.Fatalf("a tenant revokes a key: %v, want forbidden", err)
	}
	adm, _, err := e.CreateKey(ctx, api.CreateKeyRequest{Name: "ops", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := e.ListKeys(ctxT, false); err != nil || len(l) != 1 || l[0].ID != k.ID {
		t.Fatalf("a tenant lists keys: %v %v, want its own", l, err)
	}
	if _, err := e.GetKey(ctxT, adm.ID); !errors.Is(err, errdefs.ErrKeyNotFound) {
		t.Fatalf("a tenant reads another key: %v", err)
	}
	if l, err := e.ListKeys(ctx, false); err != nil || len(l) != 2 {
		t.Fatalf("the operator lists %v %v", l, err)
	}
	if _, _, err := e.CreateKey(ctx, api.CreateKeyRequest{Name: "ci"}); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("a second live key named ci: %v", err)
	}
	neg, nan := -0.01, 0.0
	nan = nan / nan
	for _, c := range []struct {
		req   api.CreateKeyRequest
		field string
	}{
		{api.CreateKeyRequest{}, "name"},
		{api.CreateKeyRequest{Name: strings.Repeat("k", 64)}, "name"},
		{api.CreateKeyRequest{Name: "has space"}, "name"},
		{api.CreateKeyRequest{Name: "key_0123"}, "name"},
		{api.CreateKeyRequest{Name: "x", DailyLimitUSD: &neg}, "daily_limit_usd"},
		{api.CreateKeyRequest{Name: "x", DailyLimitUSD: &nan}, "daily_limit_usd"},
		{api.CreateKeyRequest{Name: "x", Labels: map[string]string{"bad key": "v"}}, "labels"},
	} {
		_, _, err := e.CreateKey(ctx, c.req)
		if !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), c.field+":") {
			t.Errorf("%+v: %v, want invalid_argument naming %s", c.req, err, c.field)
		}
	}
	if _, err := e.RevokeKey(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Authenticate(ctx, secret); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("a revoked key authenticates: %v", err)
	}
	if _, err := e.RevokeKey(ctx, k.ID); !errors.Is(err, errdefs.ErrKeyNotFound) {
		t.Fatalf("a second revoke: %v", err)
	}
	if _, err := e.Authenticate(ctx, "sbxk_nothing"); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("an unknown key: %v", err)
	}
}

// TestZeroCallerSeesNothing: a Caller with neither a key nor admin (what a
// failed authentication returns) fails closed: it sees neither the
// operator's objects (Owner "") nor any key's, and only shared images.
func TestZeroCallerSeesNothing(t *testing.T) {
	for _, owner := range []string{"", "key_0123456789abcdef"} {
		if (Caller{}).Sees(owner) {
			t.Errorf("Caller{} sees an object of owner %q", owner)
		}
	}
	tenant := Caller{KeyID: "key_0123456789abcdef"}
	if !tenant.Sees(tenant.KeyID) || tenant.Sees("") || tenant.Sees("key_fedcba9876543210") {
		t.Error("a tenant sees other than its own")
	}
	if !Operator.Sees("") || !Operator.Sees(tenant.KeyID) {
		t.Error("the operator does not see everything")
	}
	if !(Caller{}).seesImage(&store.Image{}) || (Caller{}).seesImage(&store.Image{Owner: tenant.KeyID}) {
		t.Error("Caller{} and images: want the shared ones only")
	}
}
