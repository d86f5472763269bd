package engine

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/runtime/fake"
	"github.com/sbxhq/sbx/internal/runtime/runtimetest"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/sqlite"
)

// The engine's fake-runtime tier: a real Engine on the real sqlite store,
// the real local blob store and real sbx-agent processes (the fake
// runtime), without root and without runsc. What it cannot reach is
// replaced by the narrowest seam and nothing else:
//   - the network: fakeNetwork (no namespace, no firewall; the fake
//     runtime ignores Spec.NetNS);
//   - the writable layers: disk.NewUnmountedLayers (no overlayfs: the root
//     filesystem is the upper dir, the image is not part of it);
//   - the agent's socket dir: a plain directory instead of a tmpfs mount.
//
// Commands the fake's agents run are host binaries with the test user's
// rights (only their cwd is in the sandbox's root filesystem): tests run
// echo, true, sleep, cat and sh writing relative paths, nothing else.

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

// fakeNetwork is an Engine Network that makes nothing: it records which
// sandboxes have a network, so tests can check that the engine releases
// them.
type fakeNetwork struct {
	mu      sync.Mutex
	started bool
	nets    map[string]string         // id → name
	rules   map[string]*network.Rules // id → the rules last given
}

func newFakeNetwork() *fakeNetwork {
	return &fakeNetwork{nets: map[string]string{}, rules: map[string]*network.Rules{}}
}

// rulesOf returns the rules last given for sandbox id (nil if none).
func (n *fakeNetwork) rulesOf(id string) *network.Rules {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rules[id]
}

func (n *fakeNetwork) ResolvConf() string { return "nameserver 127.0.0.1\n" }

func (n *fakeNetwork) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.started = true
	return nil
}

func (n *fakeNetwork) Create(id, name string, r *network.Rules) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nets[id] = name
	n.rules[id] = r
	return "", nil
}

func (n *fakeNetwork) Attach(id, name string, r *network.Rules) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nets[id] = name
	n.rules[id] = r
	return nil
}

func (n *fakeNetwork) Update(id string, r *network.Rules) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.nets[id]; ok {
		n.rules[id] = r
	}
	return nil
}

func (n *fakeNetwork) Rename(id, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.nets[id]; ok {
		n.nets[id] = name
	}
}

func (n *fakeNetwork) Delete(id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.nets, id)
	return nil
}

func (n *fakeNetwork) Check(*network.Rules) error { return nil }

func (n *fakeNetwork) Log(string) (api.NetworkLog, error) {
	return api.NetworkLog{Refused: []api.NetworkRefusal{}}, nil
}

func (n *fakeNetwork) has(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.nets[id]
	return ok
}

// fakeEnv is one engine of the tier and what it runs on.
type fakeEnv struct {
	e    *Engine
	st   *sqlite.Store
	rt   *fake.Runtime
	net  *fakeNetwork
	logs *syncBuffer
	dir  string
}

// testImageID is the id of the image every sandbox of the tier uses (an
// empty root filesystem: the unmounted layers do not show it anyway).
const testImageID = "img_fake"

// newFakeDataDir makes a data dir short enough for agent socket paths
// (sun_path is 108 bytes; t.TempDir's names are long), removed at the end
// after every agent of the test is killed.
func newFakeDataDir(t *testing.T) string {
	t.Helper()
	// A long TMPDIR (a CI's, a nested test's) would push the sockets'
	// paths past sun_path: /tmp then.
	base := os.TempDir()
	if len(base) > 24 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "sbxe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Agents of sandboxes the test left running are killed first.
		if rt, err := fake.New(fake.Config{Root: filepath.Join(dir, "fakert")}); err == nil {
			ctx := context.Background()
			if cs, err := rt.List(ctx); err == nil {
				for _, c := range cs {
					_ = rt.Delete(ctx, c.ID)
				}
			}
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// startFakeEngine starts an engine on dir (a data dir from newFakeDataDir;
// the same dir again is a restarted sbxd) with the fake runtime. cfg's
// DataDir, AgentBin and Layers are set here; zero shape fields get a
// small sandbox shape.
func startFakeEngine(t *testing.T, dir string, cfg Config) *fakeEnv {
	t.Helper()
	return startFakeEngineOn(t, dir, cfg, disk.NewUnmountedLayers(filepath.Join(dir, "layers")))
}

// startFakeEngineOn is startFakeEngine with layers of the test's choice
// (btrfsLayers).
func startFakeEngineOn(t *testing.T, dir string, cfg Config, layers *disk.Layers) *fakeEnv {
	t.Helper()
	agentDir := runtimetest.AgentBinary(t)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rt, err := fake.New(fake.Config{Root: filepath.Join(dir, "fakert")})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := blob.OpenLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	images, err := disk.NewImages(filepath.Join(dir, "images"), "", st, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutImage(ctx, &store.Image{Name: disk.DefaultImage, ID: testImageID, CreateTime: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(images.RootFS(testImageID), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.AgentBin, cfg.Layers = dir, filepath.Join(agentDir, "sbx-agent"), disk.LayersDir
	if cfg.DefaultCPUs == 0 {
		cfg.DefaultCPUs = 0.1
	}
	if cfg.DefaultMemoryMB == 0 {
		cfg.DefaultMemoryMB = 64
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = hangDeadline
	}
	netw := newFakeNetwork()
	e, err := New(cfg, st, rt, images, netw, blobs, log)
	if err != nil {
		t.Fatal(err)
	}
	// The seams of the tier (see the comment at the top of this file).
	e.layers = layers
	e.mountRunDir = func(d string) error { return os.MkdirAll(d, 0o755) }
	if err := e.Start(ctx); err != nil {
		e.Close()
		t.Fatalf("start: %v\nlog:\n%s", err, logs.String())
	}
	t.Cleanup(e.Close)
	return &fakeEnv{e: e, st: st, rt: rt, net: netw, logs: logs, dir: dir}
}

// create makes a running sandbox named name.
func (f *fakeEnv) create(t *testing.T, name string) *store.Sandbox {
	t.Helper()
	sb, err := f.e.Create(context.Background(), CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: name}})
	if err != nil {
		t.Fatalf("create %s: %v\nlog:\n%s", name, err, f.logs.String())
	}
	return sb
}

// run execs cmd in the sandbox's root (cwd /) and returns its stdout and
// exit code.
func (f *fakeEnv) run(t *testing.T, name string, cmd ...string) (string, int) {
	t.Helper()
	out, code, err := f.tryRun(name, cmd...)
	if err != nil {
		t.Fatalf("exec %q in %s: %v", cmd, name, err)
	}
	return out, code
}

func (f *fakeEnv) tryRun(name string, cmd ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hangDeadline)
	defer cancel()
	p, err := f.e.Exec(ctx, name, api.ExecRequest{Cmd: cmd, Cwd: "/"}, nil)
	if err != nil {
		return "", 0, err
	}
	var out bytes.Buffer
	ex, err := p.Wait(&out, io.Discard)
	if err != nil {
		return "", 0, err
	}
	return out.String(), ex.ExitCode, nil
}

// writeFile writes a file in the sandbox through the agent.
func (f *fakeEnv) writeFile(t *testing.T, name, p, data string) {
	t.Helper()
	if _, err := f.e.WriteFile(context.Background(), name, p, 0o644, strings.NewReader(data)); err != nil {
		t.Fatalf("write %s in %s: %v", p, name, err)
	}
}

// readFile reads a file of the sandbox through the agent.
func (f *fakeEnv) readFile(t *testing.T, name, p string) string {
	t.Helper()
	_, _, r, err := f.e.OpenFile(context.Background(), name, p, 1<<20)
	if err != nil {
		t.Fatalf("read %s in %s: %v", p, name, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// state is the runtime's view of container id.
func (f *fakeEnv) state(t *testing.T, id string) runtime.Status {
	t.Helper()
	s, err := f.rt.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s.Status
}
