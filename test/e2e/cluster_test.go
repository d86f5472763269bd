package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
	"github.com/sbxhq/sbx/internal/blob/blobtest"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
)

// clusterKey is the cluster key of the test's nodes.
const clusterKey = "e2e-cluster-key-0123456789"

// node is one sbxd of a test cluster: its harness (socket client) and a
// client of its TCP API with the operator's key.
type node struct {
	*harness
	name string
	// addr is its TCP API's address; key the operator's key there.
	addr, key string
}

// startNode starts sbxd as node name of the cluster on store url,
// listening on a TCP port of loopback that it advertises.
func startNode(t *testing.T, url, name string, args ...string) *node {
	t.Helper()
	return startNodeEnv(t, url, name, nil, args...)
}

// TestClusterForwarding: two sbxd nodes share one PostgreSQL store. Each
// lists both; a sandbox created through one node runs there, and every
// request on it through the other node is forwarded to it (get, exec with
// stdin, files, a checkpoint, a port preview), as its caller: a tenant's
// key reaches its own sandbox through either node and no other. A suspend
// through one node keeps the sandbox on its node, and an event posted to
// the other wakes it there, with its processes. A stopped node is shown
// stopped, and requests on its sandboxes answer 503 until it is back.
func TestClusterForwarding(t *testing.T) {
	url := pgtest.URL(t)
	a := startNode(t, url, "node-a")
	b := startNode(t, url, "node-b")
	ctx := ctxT(t)

	nodes, err := a.c.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes through a: %+v %v", nodes, err)
	}
	for i, want := range []string{"node-a", "node-b"} {
		if n := nodes[i]; n.Name != want || n.State != api.NodeActive || n.Self != (i == 0) || !strings.HasPrefix(n.URL, "http://127.0.0.1:") {
			t.Fatalf("node %d through a: %+v", i, n)
		}
	}

	onB, err := b.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "on-b"})
	if err != nil {
		t.Fatal(err)
	}
	if onB.Node != "node-b" {
		t.Fatalf("created through b: node %q", onB.Node)
	}
	viaA, err := a.c.Sandboxes.Get(ctx, "on-b")
	if err != nil || viaA.Node != "node-b" || viaA.State != api.StateRunning {
		t.Fatalf("on-b through a: %+v %v", viaA, err)
	}
	// Exec with stdin, through a, runs on b.
	res, err := viaA.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "cat > /tmp/in && cat /tmp/in && hostname"}, Stdin: "through a\n"})
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "through a\n") {
		t.Fatalf("exec through a: %+v %v", res, err)
	}
	if err := viaA.WriteFile(ctx, "/workspace/f", strings.NewReader("written through a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := onB.ReadFile(ctx, "/workspace/f"); err != nil || string(got) != "written through a" {
		t.Fatalf("read on b: %q %v", got, err)
	}
	if _, err := viaA.Checkpoint(ctx, "through a"); err != nil {
		t.Fatal(err)
	}
	if cps, err := onB.ListCheckpoints(ctx); err != nil || len(cps) != 2 {
		t.Fatalf("checkpoints on b: %d %v", len(cps), err)
	}
	// A port of the sandbox, through a's TCP API.
	mustSh(t, onB, "mkdir -p /workspace/site && echo served-by-b > /workspace/site/index.html && "+
		"(cd /workspace/site && nohup python3 -m http.server --bind 127.0.0.1 3000 >/dev/null 2>&1 &); "+
		"for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 3000), 1)' 2>/dev/null && break; sleep 0.2; done")
	if code, page := httpCall(t, http.MethodGet, "http://"+a.addr+"/v1/sandboxes/on-b/ports/3000/", a.key, ""); code != http.StatusOK || !strings.Contains(page, "served-by-b") {
		t.Fatalf("preview through a: %d %q", code, page)
	}

	// A fork through a runs on b, beside its source; it answers through a,
	// and a delete through a removes it from b.
	fork, err := viaA.ForkOne(ctx, api.ForkRequest{Name: "copy-of-b"})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Node != "node-b" {
		t.Fatalf("a fork through a: node %q, want node-b", fork.Node)
	}
	if got := mustSh(t, fork, "cat /workspace/f"); got != "written through a" {
		t.Fatalf("the fork through a: %q", got)
	}
	if err := a.c.Sandboxes.Delete(ctx, fork.Name); err != nil {
		t.Fatal(err)
	}
	if runscHas(t, b.harness, fork.ID) {
		t.Fatal("a fork deleted through a still runs on b")
	}

	// A tenant's key, made through a, works through b, on its own
	// sandboxes only.
	key, err := a.c.Keys.Create(ctx, api.CreateKeyRequest{Name: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	tenantA, _ := client.New(client.WithURL("http://"+a.addr), client.WithAPIKey(key.Secret))
	tenantB, _ := client.New(client.WithURL("http://"+b.addr), client.WithAPIKey(key.Secret))
	mine, err := tenantB.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "tenant-on-b"})
	if err != nil {
		t.Fatal(err)
	}
	viaTenantA, err := tenantA.Sandboxes.Get(ctx, mine.Name)
	if err != nil || viaTenantA.Node != "node-b" {
		t.Fatalf("the tenant's sandbox through a: %+v %v", viaTenantA, err)
	}
	if got := mustSh(t, viaTenantA, "echo mine"); got != "mine\n" {
		t.Fatalf("tenant exec through a: %q", got)
	}
	_, err = tenantA.Sandboxes.Get(ctx, "on-b")
	wantCode(t, err, api.CodeSandboxNotFound)
	if code, body := httpCall(t, http.MethodPost, "http://"+a.addr+"/v1/sandboxes/on-b/exec", key.Secret, `{"cmd":["true"]}`); code != http.StatusNotFound {
		t.Fatalf("a tenant's exec on another's sandbox through a: %d %s", code, body)
	}
	_, err = tenantA.Nodes(ctx)
	wantCode(t, err, api.CodeForbidden)

	// Suspend through a; an event posted to a wakes it on b, processes
	// and all.
	mustSh(t, onB, "(nohup sleep 3000 >/dev/null 2>&1 &); true")
	if err := viaA.Suspend(ctx, "approved"); err != nil {
		t.Fatal(err)
	}
	if sb, err := a.c.Sandboxes.Get(ctx, "on-b"); err != nil || sb.State != api.StateSuspended || sb.Node != "" {
		t.Fatalf("suspended: %+v %v", sb, err)
	}
	posted := time.Now()
	if _, err := a.c.Events.Post(ctx, "approved", []byte("go"), "text/plain"); err != nil {
		t.Fatal(err)
	}
	woke := runningOn(ctx, a.c, "on-b", "")
	if woke == nil || woke.Node != "node-b" {
		t.Fatalf("after an event posted to a: %+v", woke)
	}
	t.Logf("woken on b %v after the event was posted to a", time.Since(posted).Round(time.Millisecond))
	if got := mustSh(t, woke, "pgrep -x sleep >/dev/null && echo kept; cat /workspace/f"); got != "kept\nwritten through a" {
		t.Fatalf("after the wake: %q", got)
	}

	// b stops: a shows it stopped and answers 503 for its sandboxes.
	b.stop()
	nodes, err = a.c.Nodes(ctx)
	if err != nil || nodes[1].State != api.NodeStopped {
		t.Fatalf("nodes after b stopped: %+v %v", nodes, err)
	}
	time.Sleep(1100 * time.Millisecond) // a's cache of the nodes table
	_, err = viaA.Exec(ctx, "true")
	if ae := wantCode(t, err, api.CodeUnavailable); !strings.Contains(ae.Message, "node-b") {
		t.Fatalf("exec on a stopped node's sandbox: %q", ae.Message)
	}
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if got := mustSh(t, viaA, "cat /workspace/f"); got != "written through a" {
		t.Fatalf("after b is back: %q", got)
	}
}

// httpCall sends a request with the bearer key and a JSON body ("" none) and
// returns the answer's status and body.
func httpCall(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestClusterNodeLoss: three nodes share one PostgreSQL store and one S3
// bucket (a real versitygw). A sandbox suspended on a is woken on another
// node, with its memory and processes, after a is SIGKILLed and an event is
// posted to c; a second node's resume of it at the same time loses to the
// first (one copy runs). A node that starts a sandbox on an image it never
// unpacked installs it from the bucket.
func TestClusterNodeLoss(t *testing.T) {
	url, _, env, args := sharedStores(t)
	a := startNodeEnv(t, url, "node-a", env, args...)
	b := startNodeEnv(t, url, "node-b", env, args...)
	c := startNodeEnv(t, url, "node-c", env, args...)
	ctx := ctxT(t)

	sb, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "task"})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "echo step-1 > /workspace/progress && (nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 &); sleep 1")
	if err := sb.Suspend(ctx, "approval-42"); err != nil {
		t.Fatal(err)
	}
	second, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Suspend(ctx, ""); err != nil {
		t.Fatal(err)
	}
	a.kill()
	killed := time.Now()
	if _, err := c.c.Events.Post(ctx, "approval-42", []byte("approved"), "text/plain"); err != nil {
		t.Fatal(err)
	}
	woke := runningOn(ctx, c.c, "task", "")
	if woke == nil || (woke.Node != "node-b" && woke.Node != "node-c") {
		t.Fatalf("after a was killed and an event posted to c: %+v\nb's log:\n%s\nc's log:\n%s", woke, notDebug(b.logPath), notDebug(c.logPath))
	}
	t.Logf("woken on %s %v after a was SIGKILLed (lease 3 s)", woke.Node, time.Since(killed).Round(time.Millisecond))
	n1 := strings.TrimSpace(mustSh(t, woke, "cat /workspace/progress; cat /tmp/count"))
	time.Sleep(time.Second)
	n2 := strings.TrimSpace(mustSh(t, woke, "cat /tmp/count"))
	if !strings.HasPrefix(n1, "step-1\n") || n2 == strings.TrimPrefix(n1, "step-1\n") {
		t.Fatalf("the woken sandbox: %q then %q, want its file and a counter that runs on", n1, n2)
	}

	// An exec through c on the other sandbox of lost a resumes it on c.
	secondOnC, err := c.c.Sandboxes.Get(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, secondOnC, "(nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.2; done' >/dev/null 2>&1 &); sleep 0.5")

	// a comes back; its recovery leaves alone the sandboxes that moved (on
	// this host, another node's runsc runs them under the same ids).
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n3 := strings.TrimSpace(mustSh(t, woke, "cat /tmp/count")); n3 == n2 {
		t.Fatalf("the woken sandbox stopped when its old node came back: count %s then %s", n2, n3)
	}
	for _, name := range []string{"task", "second"} {
		if got, err := c.c.Sandboxes.Get(ctx, name); err != nil || got.State != api.StateRunning {
			t.Fatalf("%s after its old node came back: %+v %v\n%s", name, got, err, notDebug(c.logPath))
		}
	}

	// Suspended again on its new node, which is then lost; two nodes race
	// to resume it: one copy runs.
	home := map[string]*node{"node-b": b, "node-c": c}[woke.Node]
	racers := []*node{a, map[string]*node{"node-b": c, "node-c": b}[woke.Node]}
	if err := woke.Suspend(ctx, ""); err != nil {
		t.Fatal(err)
	}
	home.kill()
	time.Sleep(4 * time.Second) // the lost node's lease (3 s) runs out
	errs := make(chan error, 2)
	for _, n := range racers {
		go func(n *node) {
			sb, err := n.c.Sandboxes.Get(ctx, "task")
			if err == nil {
				err = sb.Resume(ctx)
			}
			errs <- err
		}(n)
	}
	for range racers {
		if err := <-errs; err != nil {
			var ae *client.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeConflict {
				t.Fatalf("a racing resume: %v, want success or a conflict", err)
			}
		}
	}
	got, err := a.c.Sandboxes.Get(ctx, "task")
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("after the race: %+v %v", got, err)
	}
	running := 0
	for _, n := range racers {
		if runscHas(t, n.harness, got.ID) {
			running++
			if n.name != got.Node {
				t.Fatalf("the sandbox runs on %s, and its record says %s", n.name, got.Node)
			}
		}
	}
	if running != 1 {
		t.Fatalf("after two racing resumes, %d nodes run the sandbox, want 1", running)
	}
	if got := mustSh(t, got, "cat /workspace/progress"); got != "step-1\n" {
		t.Fatalf("after the race: %q", got)
	}

	// A drain moves it to the other live node, its processes running on;
	// a create through the draining node is placed on the other.
	from := map[string]*node{a.name: a, racers[1].name: racers[1]}[got.Node]
	to := map[string]*node{a.name: racers[1], racers[1].name: a}[got.Node]
	mustSh(t, got, "(nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/drain; sleep 0.2; done' >/dev/null 2>&1 &); sleep 0.5")
	drained := time.Now()
	if n, err := from.c.DrainNode(ctx, from.name, true); err != nil || n.State != api.NodeDraining {
		t.Fatalf("drain %s: %+v %v", from.name, n, err)
	}
	moved := runningOn(ctx, from.c, "task", to.name)
	if moved == nil {
		t.Fatalf("task did not move off draining %s to %s\n%s's log:\n%s", from.name, to.name, from.name, notDebug(from.logPath))
	}
	t.Logf("drain: task moved from %s to %s in %v", from.name, to.name, time.Since(drained).Round(time.Millisecond))
	d1 := strings.TrimSpace(mustSh(t, moved, "cat /tmp/drain"))
	time.Sleep(600 * time.Millisecond)
	if d2 := strings.TrimSpace(mustSh(t, moved, "cat /tmp/drain")); d1 == d2 || runscHas(t, from.harness, moved.ID) {
		t.Fatalf("after the drain: counter %s then %s, still on %s: %v", d1, d2, from.name, runscHas(t, from.harness, moved.ID))
	}
	placed, err := from.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "placed"})
	if err != nil || placed.Node != to.name {
		t.Fatalf("a create through draining %s: %+v %v", from.name, placed, err)
	}
	// An exec through the node the create went to reaches it on its node.
	if got := mustSh(t, placed, "hostname"); got != "placed\n" || runscHas(t, from.harness, placed.ID) || !runscHas(t, to.harness, placed.ID) {
		t.Fatalf("exec through %s on the sandbox placed on %s: %q", from.name, to.name, got)
	}
	if n, err := from.c.DrainNode(ctx, from.name, false); err != nil || n.State != api.NodeActive {
		t.Fatalf("end the drain: %+v %v", n, err)
	}
}

// runscHas reports whether runsc of d's data dir runs container id.
func runscHas(t *testing.T, d *harness, id string) bool {
	t.Helper()
	out, err := exec.Command("runsc", "--root", filepath.Join(d.dataDir, "runsc"), "list", "-quiet").Output()
	if err != nil {
		t.Fatalf("runsc list: %v", err)
	}
	return slices.Contains(strings.Fields(string(out)), id)
}

// startNodeEnv is startNode with more environment for sbxd.
func startNodeEnv(t *testing.T, url, name string, env []string, args ...string) *node {
	t.Helper()
	addr, err := listenAddr()
	if err != nil {
		t.Fatal(err)
	}
	key := "e2e-operator-key-" + name + "-0123456789"
	d := secondEnv(t, append([]string{"SBX_CLUSTER_KEY=" + clusterKey}, env...),
		append([]string{"--pool", "0", "--store", url, "--node", name, "--listen", addr, "--api-key", key}, args...)...)
	return &node{harness: d, name: name, addr: addr, key: key}
}

// notDebug is the last 40 lines of sbxd's log at path that are not at
// debug level.
func notDebug(path string) string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "level=DEBUG") {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-40):], "\n")
}

// TestClusterResumeInterrupted: a node dies in the middle of resuming a
// sandbox of another lost node (its runsc sandbox outlives it and runs).
// Once its lease runs out, a third node takes its journal entry over and
// resumes the sandbox; when the dead node is back, it is fenced: it stops
// its copy (the record names the third node) and cannot write the
// record. Exactly one copy runs, the third node's.
func TestClusterResumeInterrupted(t *testing.T) {
	url, _, env, args := sharedStores(t)
	a := startNodeEnv(t, url, "node-a", env, args...)
	b := startNodeEnv(t, url, "node-b", append(env, "SBX_FAULTS=resume:restored=60s"), args...)
	c := startNodeEnv(t, url, "node-c", env, args...)
	ctx := ctxT(t)
	sb, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "mid"})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "(nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.2; done' >/dev/null 2>&1 &); sleep 0.5")
	if err := sb.Suspend(ctx, ""); err != nil {
		t.Fatal(err)
	}
	a.kill()
	time.Sleep(4 * time.Second) // a's lease runs out
	// b resumes it and stops, restored, at its fault point; then b dies.
	onB, err := b.c.Sandboxes.Get(ctx, "mid")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = onB.Resume(context.Background()) }()
	b.waitLog(t, 0, "fault point reached", time.Minute)
	if !runscHas(t, b.harness, sb.ID) {
		t.Fatal("b's restored copy is not running at its fault point")
	}
	b.kill()
	time.Sleep(4 * time.Second) // b's lease runs out
	onC, err := c.c.Sandboxes.Get(ctx, "mid")
	if err != nil {
		t.Fatal(err)
	}
	if err := onC.Resume(ctx); err != nil {
		t.Fatalf("resume on c after b was lost mid-resume: %v\n%s", err, notDebug(c.logPath))
	}
	c.waitLog(t, 0, "taking over an operation of a lost node", 10*time.Second)
	cur := runningOn(ctx, c.c, "mid", "node-c")
	if cur == nil || !runscHas(t, c.harness, sb.ID) {
		t.Fatalf("mid is not running on c: %+v", cur)
	}
	// b comes back (without its fault): its copy is no longer its own.
	b.env = append([]string{"SBX_CLUSTER_KEY=" + clusterKey}, env...)
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); runscHas(t, b.harness, sb.ID); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b, back, still runs its copy of mid\n%s", notDebug(b.logPath))
		}
	}
	cur, err = b.c.Sandboxes.Get(ctx, "mid")
	if err != nil || cur.State != api.StateRunning || cur.Node != "node-c" || !runscHas(t, c.harness, sb.ID) {
		t.Fatalf("mid after b is back: %+v %v (runs on c: %v)", cur, err, runscHas(t, c.harness, sb.ID))
	}
	n1 := strings.TrimSpace(mustSh(t, cur, "cat /tmp/n"))
	time.Sleep(500 * time.Millisecond)
	if n2 := strings.TrimSpace(mustSh(t, cur, "cat /tmp/n")); n1 == "" || n1 == n2 {
		t.Fatalf("its counter: %q then %q, want it running on", n1, n2)
	}
}

// TestClusterRecovery: node a is lost while it runs two sandboxes (its
// sbxd SIGKILLed and its runsc sandboxes gone, as with its host). Each is
// recovered on b or c from its most recent durable point:
//   - "rec" takes recovery snapshots (recovery_interval_ms): it runs on
//     with its processes (a counter goes on) and its files as of its
//     latest one; a file written after it is lost;
//   - "cp" takes none, and has checkpoint v1: it boots cold on v1's disk
//     (a file written after v1 is lost; its processes restarted).
//
// Their state_reason says what was lost. When a is back, it runs neither.
func TestClusterRecovery(t *testing.T) {
	url, _, env, args := sharedStores(t)
	a := startNodeEnv(t, url, "node-a", env, args...)
	b := startNodeEnv(t, url, "node-b", env, args...)
	c := startNodeEnv(t, url, "node-c", env, args...)
	ctx := ctxT(t)

	// Out of range: refused, naming the field.
	_, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "bad", RecoveryIntervalMS: 1000})
	wantCode(t, err, api.CodeInvalidArgument)

	rec, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "rec", RecoveryIntervalMS: 5000})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, rec, "echo before > /workspace/before && (nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 &); sleep 0.5")
	// cp holds a secret: a cluster's node seals it with the cluster's key,
	// so the node that recovers cp opens it.
	cp, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "cp", Secrets: []api.Secret{{
		Name: "API_TOKEN", Value: "tok-recovered-1234", Rules: []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, cp, "echo kept > /workspace/kept && (nohup sleep 1000 >/dev/null 2>&1 &)")
	if _, err := cp.Checkpoint(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	mustSh(t, cp, "echo after > /workspace/after")
	// st is stopped: it is not recovered (it runs nothing), and is deleted
	// through another node while a is lost.
	st, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "st"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var snapAt time.Time
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got, err := a.c.Sandboxes.Get(ctx, "rec")
		if err == nil && got.RecoveryTime != nil {
			snapAt = *got.RecoveryTime
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery snapshot of rec after a minute: %+v %v\n%s", got, err, notDebug(a.logPath))
		}
	}
	mustSh(t, rec, "echo late > /workspace/late")
	if log, err := os.ReadFile(a.logPath); err == nil {
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, `msg="recovery snapshot"`) {
				t.Logf("a's log: %s", l) // what a recovery snapshot cost
			}
		}
	}

	a.kill()
	for _, id := range []string{rec.ID, cp.ID} {
		_ = exec.Command("runsc", "--root", filepath.Join(a.dataDir, "runsc"), "delete", "-force", id).Run()
	}
	lost := time.Now()
	onRec := runningOff(ctx, b.c, "rec", "node-a")
	if onRec == nil || onRec.Node == "node-a" {
		t.Fatalf("rec after a was lost: %+v\nb:\n%s\nc:\n%s", onRec, notDebug(b.logPath), notDebug(c.logPath))
	}
	t.Logf("rec recovered on %s %v after a was lost (lease 3 s); its recovery snapshot was of %s",
		onRec.Node, time.Since(lost).Round(time.Millisecond), snapAt.Format(time.RFC3339Nano))
	if log, err := os.ReadFile(map[string]*node{"node-b": b, "node-c": c}[onRec.Node].logPath); err == nil {
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, `msg=resumed`) && strings.Contains(l, "sandbox=rec ") {
				t.Logf("%s's log: %s", onRec.Node, l) // the resume on another node
			}
		}
	}
	if !strings.HasPrefix(onRec.StateReason, "recovered: ") || !strings.Contains(onRec.StateReason, "recovery snapshot") {
		t.Fatalf("rec's state_reason: %q", onRec.StateReason)
	}
	out := mustSh(t, onRec, "cat /workspace/before; ls /workspace; cat /tmp/count")
	n1 := strings.Fields(out)
	time.Sleep(time.Second)
	n2 := strings.TrimSpace(mustSh(t, onRec, "cat /tmp/count"))
	if !strings.HasPrefix(out, "before\n") || strings.Contains(out, "late") || n1[len(n1)-1] == n2 {
		t.Fatalf("rec recovered: %q then count %q: want its file, not the later one, and a counter running on", out, n2)
	}

	onCp := runningOff(ctx, c.c, "cp", "node-a")
	if onCp == nil || onCp.Node == "node-a" {
		t.Fatalf("cp after a was lost: %+v", onCp)
	}
	if !strings.Contains(onCp.StateReason, "checkpoint v1") {
		t.Fatalf("cp's state_reason: %q", onCp.StateReason)
	}
	if got := mustSh(t, onCp, "cat /workspace/kept; ls /workspace; grep -l '^sleep' /proc/[0-9]*/cmdline 2>/dev/null | wc -l"); got != "kept\nkept\n0\n" {
		t.Fatalf("cp recovered: %q, want v1's disk (kept, not after) and no process of before", got)
	}
	if l, err := onCp.Secrets().List(ctx); err != nil || len(l) != 1 || l[0].Name != "API_TOKEN" {
		t.Fatalf("cp's secrets after its recovery: %+v %v", l, err)
	}
	recNode := map[string]*node{"node-b": b, "node-c": c}[onCp.Node]
	if log, _ := os.ReadFile(recNode.logPath); strings.Contains(string(log), "does not open") || strings.Contains(string(log), "secrets are not used") {
		t.Fatalf("the node that recovered cp could not use its secrets:\n%s", notDebug(recNode.logPath))
	}

	// A node that will not come back: its stopped sandbox is deleted
	// through b, then its record is removed (refused while st named it).
	sandboxesOn := func(name string) int {
		nodes, err := b.c.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.Name == name {
				return n.Capacity.Sandboxes
			}
		}
		return -1
	}
	if n := sandboxesOn("node-a"); n != 1 {
		t.Fatalf("lost node-a lists %d sandboxes, want 1 (st)", n)
	}
	wantCode(t, b.c.RemoveNode(ctx, "node-a"), api.CodeConflict)
	if err := b.c.Sandboxes.Delete(ctx, "st"); err != nil {
		t.Fatalf("delete a lost node's stopped sandbox through another node: %v", err)
	}
	if err := b.c.RemoveNode(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	if n := sandboxesOn("node-a"); n != -1 {
		t.Fatalf("node-a is still listed after its removal (%d)", n)
	}

	// a comes back (it joins again): the sandboxes stay where they were
	// recovered, and a
	// runs neither.
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*client.Sandbox{onRec, onCp} {
		got, err := a.c.Sandboxes.Get(ctx, sb.Name)
		if err != nil || got.State != api.StateRunning || got.Node != sb.Node || runscHas(t, a.harness, sb.ID) {
			t.Fatalf("%s after a is back: %+v %v", sb.Name, got, err)
		}
	}
	// It takes recovery snapshots on its new node.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got, err := a.c.Sandboxes.Get(ctx, "rec")
		if err == nil && got.RecoveryTime != nil && got.RecoveryTime.After(snapAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery snapshot of rec on its new node: %+v %v", got, err)
		}
	}

	// A fork is placed as creates are: of two copies, a (back, with no
	// sandbox) takes at least one, which starts there from the blob store
	// with the source's processes and files.
	src, err := a.c.Sandboxes.Get(ctx, "rec")
	if err != nil {
		t.Fatal(err)
	}
	copies, err := src.Fork(ctx, api.ForkRequest{Name: "fk", Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := 0
	for i, cp := range copies.Copies {
		if cp == nil {
			t.Fatalf("copy %d failed: %v", i, copies.Errors[i])
		}
		if cp.Node != src.Node {
			elsewhere++
		}
		if got := mustSh(t, cp, "cat /workspace/before; test -s /tmp/count && echo counting"); got != "before\ncounting\n" {
			t.Fatalf("copy %s on %s: %q", cp.Name, cp.Node, got)
		}
	}
	if elsewhere == 0 {
		t.Fatalf("both copies of a fork on %s stayed there, with node-a idle", src.Node)
	}
	t.Logf("fork of rec on %s: copies on %s and %s", src.Node, copies.Copies[0].Node, copies.Copies[1].Node)
}

// runningOn waits, up to 2 minutes, until sandbox name runs (on node, when
// not ""), as c sees it; nil if it does not by then.
func runningOn(ctx context.Context, c *client.Client, name, node string) *client.Sandbox {
	for start := time.Now(); time.Since(start) < 2*time.Minute; time.Sleep(100 * time.Millisecond) {
		if sb, err := c.Sandboxes.Get(ctx, name); err == nil && sb.State == api.StateRunning && (node == "" || sb.Node == node) {
			return sb
		}
	}
	return nil
}

// runningOff waits, up to 2 minutes, until sandbox name runs on a node
// other than node, as c sees it; nil if it does not by then.
func runningOff(ctx context.Context, c *client.Client, name, node string) *client.Sandbox {
	for start := time.Now(); time.Since(start) < 2*time.Minute; time.Sleep(100 * time.Millisecond) {
		if sb, err := c.Sandboxes.Get(ctx, name); err == nil && sb.State == api.StateRunning && sb.Node != node {
			return sb
		}
	}
	return nil
}

// TestClusterSuspendBlobStoreDown: in a cluster, a suspend answers only
// once the memory image is in the shared blob store (another node may have
// to wake the sandbox). The S3 server stops in the middle of a suspend,
// after the disk was stored and before the memory image: the suspend
// fails with suspend_failed, the sandbox runs on with its processes, and
// once S3 is back a suspend and a resume work.
func TestClusterSuspendBlobStoreDown(t *testing.T) {
	url, s3, env, args := sharedStores(t)
	env = append(env, "SBX_FAULTS=suspend:stored=3s")
	a := startNodeEnv(t, url, "node-a", env, args...)
	ctx := ctxT(t)
	sb, err := a.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "echo kept > /workspace/kept && (nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.2; done' >/dev/null 2>&1 &); sleep 0.5")
	done := make(chan error, 1)
	go func() { done <- sb.Suspend(ctx, "") }()
	a.waitLog(t, 0, "fault point reached", time.Minute)
	s3.Stop()
	err = <-done
	wantCode(t, err, api.CodeSuspendFailed)
	got, err := a.c.Sandboxes.Get(ctx, "s")
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("after the failed suspend: %+v %v", got, err)
	}
	n1 := strings.TrimSpace(mustSh(t, got, "cat /tmp/n"))
	time.Sleep(500 * time.Millisecond)
	if n2 := strings.TrimSpace(mustSh(t, got, "cat /workspace/kept /tmp/n")); !strings.HasPrefix(n2, "kept\n") || strings.TrimPrefix(n2, "kept\n") == n1 {
		t.Fatalf("after the failed suspend: count %q then %q, want its file and a counter running on", n1, n2)
	}
	s3.Start()
	if err := got.Suspend(ctx, ""); err != nil {
		t.Fatalf("a suspend once S3 is back: %v", err)
	}
	if err := got.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if out := mustSh(t, got, "cat /workspace/kept"); out != "kept\n" {
		t.Fatalf("after suspend and resume: %q", out)
	}
}

// sharedStores starts what the nodes of a test cluster share: a
// PostgreSQL database (its URL) and an S3 server with a bucket. env and
// args give an sbxd the bucket (its keys, --blob-store) and a 3 s node
// lease.
func sharedStores(t *testing.T) (url string, s3 *blobtest.S3Server, env, args []string) {
	t.Helper()
	url = pgtest.URL(t)
	s3 = blobtest.StartS3(t)
	bucket := s3.CreateBucket(t)
	args = []string{"--blob-store", "s3://" + bucket + "/sbx?endpoint=" + s3.Endpoint}
	env = []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey, "SBX_NODE_LEASE_TTL=3s"}
	return url, s3, env, args
}
