package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/snapshot"
	"github.com/sbxhq/sbx/internal/store"
)

// The start path (Engine.start) on the fake runtime: a cold boot whose
// agent never answers, or whose network cannot be attached, leaves
// nothing of a create and leaves a stopped sandbox stopped, with nothing
// running for it. (A restore, from a snapshot or a suspend, needs runsc:
// the fake cannot restore memory; test/e2e covers it.)

// silentAgent makes the engine's sandboxes run, as their agent, a process
// that never serves (sleep), until the returned func puts the real agent
// back.
func (f *fakeEnv) silentAgent(t *testing.T) (restore func()) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sbx-agent"), []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	real := f.e.agentDir
	f.e.agentDir = dir
	return func() { f.e.agentDir = real }
}

// errAttach is the failure of failingNetwork's Create.
var errAttach = errors.New("test: the network cannot be attached")

// failingNetwork is the tier's fakeNetwork whose Create fails.
type failingNetwork struct{ *fakeNetwork }

func (n failingNetwork) Create(string, string, *network.Rules) (string, error) {
	return "", errAttach
}

// lockEntries is how many sandbox ids the engine keeps an instance (and
// so a lock) of.
func (f *fakeEnv) lockEntries() int { return f.e.instanceCount() }

// leftNothing fails the test if the engine holds anything for a sandbox
// other than those in keep (ids): a record, a container, a network, a
// sandbox dir, a layer, a lock entry, a journal entry.
func (f *fakeEnv) leftNothing(t *testing.T, keep ...string) {
	t.Helper()
	ctx := context.Background()
	kept := map[string]bool{}
	for _, id := range keep {
		kept[id] = true
	}
	sbs, err := f.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if !kept[sb.ID] {
			t.Errorf("a record is left: %s %s (%s)", sb.Name, sb.ID, sb.State)
		}
	}
	cs, err := f.rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if !kept[c.ID] {
			t.Errorf("a container is left: %s (%s)", c.ID, c.Status)
		}
	}
	f.net.mu.Lock()
	for id := range f.net.nets {
		if !kept[id] {
			t.Errorf("a network attachment is left: %s", id)
		}
	}
	f.net.mu.Unlock()
	for _, dir := range []string{f.e.sandboxesDir, filepath.Join(f.dir, "layers")} {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, ent := range ents {
			if strings.HasPrefix(ent.Name(), "sbx_") && !kept[ent.Name()] {
				t.Errorf("%s is left in %s", ent.Name(), dir)
			}
		}
	}
	if n := f.lockEntries(); n > len(keep) {
		t.Errorf("the lock table holds %d entries, want at most %d", n, len(keep))
	}
	if ops, err := f.st.ListOps(ctx, ""); err != nil || len(ops) != 0 {
		t.Errorf("journal: %v %v, want empty", ops, err)
	}
}

// TestFakeStartAgentNeverAnswers: a create whose agent never answers
// fails within the boot deadline saying the boot failed, and leaves
// nothing: no record, container, network, run dir, layer or lock entry;
// the name is free again. A stopped sandbox whose boot (an exec) fails
// so stays stopped, with no container or network left running for it,
// and boots on the next exec once the agent answers.
func TestFakeStartAgentNeverAnswers(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{BootTimeout: 3 * time.Second})
	ctx := context.Background()
	restore := f.silentAgent(t)
	done := make(chan error, 1)
	go func() {
		_, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "a"}})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(hangDeadline):
		t.Fatal("a create whose agent never answers hangs past the boot deadline")
	}
	if err == nil || !strings.Contains(err.Error(), `boot sandbox a`) {
		t.Fatalf("create with an agent that never answers: %v, want a boot failure", err)
	}
	f.leftNothing(t)
	restore()
	b := f.create(t, "a")
	if out, _ := f.run(t, "a", "echo", "up"); out != "up\n" {
		t.Fatalf("exec in the re-created sandbox: %q", out)
	}
	if _, err := f.e.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	restore = f.silentAgent(t)
	if _, _, err := f.tryRun("a", "true"); err == nil || !strings.Contains(err.Error(), "boot sandbox a") {
		t.Fatalf("exec on a stopped sandbox whose agent never answers: %v, want a boot failure", err)
	}
	if sb, err := f.e.Get(ctx, "a"); err != nil || sb.State != api.StateStopped {
		t.Fatalf("after the failed boot: %v %v, want stopped", sb, err)
	}
	if f.net.has(b.ID) {
		t.Error("the failed boot left the stopped sandbox's network attached")
	}
	if cs, err := f.rt.List(ctx); err != nil || len(cs) != 0 {
		t.Errorf("containers after the failed boot: %v %v, want none", cs, err)
	}
	restore()
	if out, _ := f.run(t, "a", "echo", "again"); out != "again\n" {
		t.Fatalf("exec once the agent answers: %q", out)
	}
	if err := f.e.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	f.leftNothing(t)
}

// TestFakeStartNetworkAttachFails: a create whose network cannot be
// attached fails with that error and leaves nothing; a stopped sandbox
// whose boot fails so stays stopped with nothing running, and boots once
// the network attaches.
func TestFakeStartNetworkAttachFails(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	b := f.create(t, "b")
	if _, err := f.e.Stop(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	f.e.net = failingNetwork{f.net}
	if _, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "a"}}); !errors.Is(err, errAttach) {
		t.Fatalf("create without a network: %v, want the attach error", err)
	}
	if _, err := f.e.Get(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("the failed create's sandbox: %v, want not found", err)
	}
	f.leftNothing(t, b.ID)
	if _, _, err := f.tryRun("b", "true"); !errors.Is(err, errAttach) {
		t.Fatalf("exec on a stopped sandbox without a network: %v, want the attach error", err)
	}
	if sb, err := f.e.Get(ctx, "b"); err != nil || sb.State != api.StateStopped {
		t.Fatalf("after the failed boot: %v %v, want stopped", sb, err)
	}
	if cs, err := f.rt.List(ctx); err != nil || len(cs) != 0 {
		t.Errorf("containers after the failed boot: %v %v, want none", cs, err)
	}
	f.e.net = f.net
	if out, _ := f.run(t, "b", "echo", "up"); out != "up\n" {
		t.Fatalf("exec once the network attaches: %q", out)
	}
	if _, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "a"}}); err != nil {
		t.Fatalf("create once the network attaches: %v", err)
	}
}

// TestFakeStartRestoreChecksAndCleansUp: the restore branch of start, as
// far as the fake goes (it cannot restore memory). A memory image of
// another container layout is refused (snapshot.ErrLayout) before anything is
// changed: the disk is not rebuilt, no network is attached. An image of
// this layout that the runtime fails to restore leaves nothing started
// (no container, no network), and the sandbox boots on its disk after.
func TestFakeStartRestoreChecksAndCleansUp(t *testing.T) {
	t.Parallel()
	f := startFakeEngine(t, newFakeDataDir(t), Config{})
	ctx := context.Background()
	f.create(t, "a")
	f.writeFile(t, "a", "/kept", "disk")
	if _, err := f.e.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	sb, err := f.e.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	old := t.TempDir() // an image without the layout record
	err = f.e.start(ctx, sb, startFrom{image: old, disk: &disk.Manifest{}, what: "resumed"})
	if !errors.Is(err, snapshot.ErrLayout) {
		t.Fatalf("start from an image of another layout: %v, want snapshot.ErrLayout", err)
	}
	if f.net.has(sb.ID) {
		t.Error("a refused image attached the network")
	}
	if b, err := os.ReadFile(filepath.Join(f.e.layers.Paths(sb.ID).Upper, "kept")); err != nil || string(b) != "disk" {
		t.Errorf("the disk after a refused image: %q %v, want it untouched", b, err)
	}
	img := t.TempDir()
	if err := snapshot.WriteSpec(img, imageSpecVersion); err != nil {
		t.Fatal(err)
	}
	err = f.e.start(ctx, sb, startFrom{image: img, what: "resumed"})
	if !errors.Is(err, runtime.ErrUnsupported) || !strings.HasPrefix(err.Error(), "restore: ") {
		t.Fatalf("start from an image the fake cannot restore: %v, want restore: ... unsupported", err)
	}
	if f.net.has(sb.ID) {
		t.Error("a failed restore left the network attached")
	}
	if cs, err := f.rt.List(ctx); err != nil || len(cs) != 0 {
		t.Errorf("containers after the failed restore: %v %v, want none", cs, err)
	}
	if got := f.readFile(t, "a", "/kept"); got != "disk" {
		t.Fatalf("/kept after booting again: %q", got)
	}
}
