package disk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/internal/blob"
)

// storedLayer makes an unmounted layer "sb" with a few files, stores it
// and then changes it: it returns the layers, the store, what was stored,
// the tree as stored and the tree as changed.
func storedLayer(t *testing.T) (*Layers, *blob.Local, *Stored, string, string) {
	t.Helper()
	l := newTestLayers(t)
	if err := l.Create("sb"); err != nil {
		t.Fatal(err)
	}
	st := newStore(t)
	upper := l.Paths("sb").Upper
	write(t, upper, "keep", randBytes(1<<20), 0o644)
	write(t, upper, "etc/conf", []byte("v1"), 0o600)
	write(t, upper, "gone-later", randBytes(300<<10), 0o644)
	s, err := l.Store(context.Background(), "sb", StoreOptions{Blobs: st})
	if err != nil {
		t.Fatal(err)
	}
	ageCache(s.Manifest)
	stored := treeOf(t, upper)
	write(t, upper, "etc/conf", []byte("v2, longer"), 0o600)
	write(t, upper, "new", []byte("added after the store"), 0o644)
	if err := os.Remove(filepath.Join(upper, "gone-later")); err != nil {
		t.Fatal(err)
	}
	changed := treeOf(t, upper)
	if changed == stored {
		t.Fatal("the change changed nothing")
	}
	return l, st, s, stored, changed
}

// newTestLayers makes unmounted layers in a t.TempDir whose background
// cache writes are over before the directory is removed.
func newTestLayers(t *testing.T) *Layers {
	l := NewUnmountedLayers(t.TempDir())
	t.Cleanup(func() {
		l.mu.Lock()
		l.caches = map[string]cacheFile{} // a write not begun does nothing
		l.mu.Unlock()
		l.writeMu.Lock() // one begun is over
		_ = l.caches     // (the lock is what waits; nothing to do inside)
		l.writeMu.Unlock()
	})
	return l
}

// leftovers lists the restore-* and trash-* entries of layer id.
func leftovers(t *testing.T, l *Layers, id string) []string {
	t.Helper()
	ents, err := os.ReadDir(l.base(id))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "restore-") || strings.HasPrefix(e.Name(), "trash-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestStoreThenRestorePutsTheFilesBack(t *testing.T) {
	l, st, s, stored, _ := storedLayer(t)
	ctx := context.Background()
	// What Store recorded is in the store, flushed: a fresh reader gets
	// the manifest back.
	st2, err := blob.OpenLocal(st.Name()[len("local:"):])
	if err != nil {
		t.Fatal(err)
	}
	m, err := GetManifest(ctx, st2, s.Ref)
	if err != nil {
		t.Fatalf("the stored manifest: %v", err)
	}
	if files, _ := m.Stats(); files != 3 {
		t.Fatalf("stored %d files, want 3", files)
	}
	upper := l.Paths("sb").Upper
	var points []string
	var atBuilt, atSwapped string
	stats, err := l.Restore(ctx, "sb", "op_1", m, RestoreOptions{Blobs: st, Fault: func(p string) {
		points = append(points, p)
		switch p {
		case RestoreBuilt:
			atBuilt = treeOf(t, upper)
		case RestoreSwapped:
			// The new layer carries the swap's mark until the finish.
			atSwapped = strings.Replace(treeOf(t, upper), unmountedRestoreXattr+"=op_1", "", 1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(points, ",") != RestoreBuilt+","+RestoreSwapped {
		t.Fatalf("fault points %v", points)
	}
	if atBuilt == stored || atSwapped != stored {
		t.Fatalf("the swap is not between the two fault points:\n%s\n%s\n%s", atBuilt, atSwapped, stored)
	}
	if stats.LinkedFiles != 1 {
		t.Fatalf("linked %d files, want 1 (keep)", stats.LinkedFiles)
	}
	later, err := l.FinishRestore("sb", "op_1", m, stats.LinkedFiles > 0)
	if err != nil || later {
		t.Fatalf("finish: later %v, %v", later, err)
	}
	if got := treeOf(t, upper); got != stored {
		t.Fatalf("after the restore:\n%s\nwant as stored:\n%s", got, stored)
	}
	if lo := leftovers(t, l, "sb"); len(lo) != 0 {
		t.Fatalf("left %v", lo)
	}
	if l.swapped("sb", "op_1") {
		t.Fatal("the swap mark stayed")
	}
	if c := l.LoadCache("sb"); c == nil || len(c.Entries) != len(m.Entries) {
		t.Fatal("the cache does not describe the restored layer")
	}
}

func TestRestoreWithoutLinksEmptiesLater(t *testing.T) {
	l, st, s, stored, _ := storedLayer(t)
	ctx := context.Background()
	// Without a cache nothing can be linked: the old layer is moved aside.
	if err := l.DropCache("sb"); err != nil {
		t.Fatal(err)
	}
	stats, err := l.Restore(ctx, "sb", "op_2", s.Manifest, RestoreOptions{Blobs: st})
	if err != nil {
		t.Fatal(err)
	}
	later, err := l.FinishRestore("sb", "op_2", s.Manifest, stats.LinkedFiles > 0)
	if err != nil || !later {
		t.Fatalf("finish: later %v, %v; want later", later, err)
	}
	if lo := leftovers(t, l, "sb"); len(lo) != 1 || lo[0] != "trash-op_2" {
		t.Fatalf("left %v, want the trash", lo)
	}
	if err := l.EmptyTrash("sb"); err != nil {
		t.Fatal(err)
	}
	if lo := leftovers(t, l, "sb"); len(lo) != 0 {
		t.Fatalf("left %v", lo)
	}
	if got := treeOf(t, l.Paths("sb").Upper); got != stored {
		t.Fatalf("after the restore:\n%s\nwant:\n%s", got, stored)
	}
}

func TestRestoreMissingChunkLeavesTheOldLayer(t *testing.T) {
	l, st, s, _, changed := storedLayer(t)
	ctx := context.Background()
	// etc/conf changed: its v1 must come from the store, and is gone.
	var conf *Entry
	for i, e := range s.Manifest.Entries {
		if e.Path == "etc/conf" {
			conf = &s.Manifest.Entries[i]
		}
	}
	if conf == nil || len(conf.Extents) == 0 {
		t.Fatal("no chunk for etc/conf")
	}
	for _, x := range conf.Extents {
		if err := st.Delete(ctx, x.Chunk); err != nil {
			t.Fatal(err)
		}
	}
	_, err := l.Restore(ctx, "sb", "op_3", s.Manifest, RestoreOptions{Blobs: st, Fault: func(p string) {
		t.Errorf("fault point %s reached", p)
	}})
	if !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("restore without a chunk: %v, want blob.ErrNotFound", err)
	}
	if got := treeOf(t, l.Paths("sb").Upper); got != changed {
		t.Fatalf("the old layer changed:\n%s\nwant:\n%s", got, changed)
	}
	if lo := leftovers(t, l, "sb"); len(lo) != 0 {
		t.Fatalf("a failed restore left %v", lo)
	}
}

// buildBeside does what Restore does up to its swap (crash tests stop
// there).
func buildBeside(t *testing.T, l *Layers, st blob.Store, id, opID string, m *Manifest) {
	t.Helper()
	dst, err := l.newRestoreDir(id, opID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Materialize(context.Background(), MaterializeOptions{Target: m, Dst: dst, Store: st,
		Current: l.Paths(id).Upper, CurrentCache: l.LoadCache(id)}); err != nil {
		t.Fatal(err)
	}
}

func TestRecoverRestoreBeforeTheSwapRollsBack(t *testing.T) {
	l, st, s, _, changed := storedLayer(t)
	buildBeside(t, l, st, "sb", "op_4", s.Manifest)
	var calls []bool
	swapped, err := l.RecoverRestore("sb", "op_4", func(swapped bool) error {
		calls = append(calls, swapped)
		if lo := leftovers(t, l, "sb"); len(lo) != 0 {
			t.Errorf("recorded the rollback while %v is still there", lo)
		}
		return nil
	})
	if err != nil || swapped {
		t.Fatalf("recover: swapped %v, %v; want a rollback", swapped, err)
	}
	if len(calls) != 1 || calls[0] {
		t.Fatalf("record calls %v, want [false]", calls)
	}
	if got := treeOf(t, l.Paths("sb").Upper); got != changed {
		t.Fatalf("the layer is not as it was:\n%s\nwant:\n%s", got, changed)
	}
	if lo := leftovers(t, l, "sb"); len(lo) != 0 {
		t.Fatalf("left %v", lo)
	}
}

func TestRecoverRestoreAfterTheSwapFinishes(t *testing.T) {
	l, st, s, stored, _ := storedLayer(t)
	buildBeside(t, l, st, "sb", "op_5", s.Manifest)
	if err := l.swap("sb", "op_5"); err != nil {
		t.Fatal(err)
	}
	// The caller's record fails first: nothing is finished, and the
	// next recovery still sees the swap.
	swapped, err := l.RecoverRestore("sb", "op_5", func(bool) error { return errors.New("store down") })
	if err == nil || !swapped || !l.swapped("sb", "op_5") {
		t.Fatalf("with a failing record: swapped %v, %v, mark kept %v", swapped, err, l.swapped("sb", "op_5"))
	}
	var calls []bool
	swapped, err = l.RecoverRestore("sb", "op_5", func(swapped bool) error {
		calls = append(calls, swapped)
		if !l.swapped("sb", "op_5") {
			t.Error("the swap mark went before the record")
		}
		return nil
	})
	if err != nil || !swapped {
		t.Fatalf("recover: swapped %v, %v; want a finish", swapped, err)
	}
	if len(calls) != 1 || !calls[0] {
		t.Fatalf("record calls %v, want [true]", calls)
	}
	if got := treeOf(t, l.Paths("sb").Upper); got != stored {
		t.Fatalf("the layer is not the restored one:\n%s\nwant:\n%s", got, stored)
	}
	if lo := leftovers(t, l, "sb"); len(lo) != 0 {
		t.Fatalf("left %v", lo)
	}
	if l.swapped("sb", "op_5") {
		t.Fatal("the swap mark stayed")
	}
	if _, err := os.Stat(l.cachePath("sb")); l.LoadCache("sb") != nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a cache of the old layer stayed (%v)", err)
	}
}

func TestStoreBoundAndFaults(t *testing.T) {
	l := newTestLayers(t)
	if err := l.Create("sb"); err != nil {
		t.Fatal(err)
	}
	write(t, l.Paths("sb").Upper, "f", []byte("data"), 0o644)
	st := newStore(t)
	ctx := context.Background()
	// A capture whose context ends at the capturing point fails, with the
	// error the bound's end maps it to, and stores no manifest.
	errMapped := errors.New("deleted meanwhile")
	var ended []error
	var points []string
	_, err := l.Store(ctx, "sb", StoreOptions{Blobs: st,
		Bound: func(ctx context.Context) (context.Context, func(error) error) {
			cctx, cancel := context.WithCancel(ctx)
			return cctx, func(err error) error {
				ended = append(ended, err)
				cancel()
				if err != nil {
					return errMapped
				}
				return nil
			}
		},
		Fault: func(ctx context.Context, p string) {
			points = append(points, p)
		},
	})
	if err != nil || len(ended) != 1 || ended[0] != nil || strings.Join(points, ",") != StoreCapturing+","+StoreCaptured {
		t.Fatalf("a plain store: %v, ended %v, points %v", err, ended, points)
	}
	ended, points = nil, nil
	var cancelCapture context.CancelFunc
	_, err = l.Store(ctx, "sb", StoreOptions{Blobs: st,
		Bound: func(ctx context.Context) (context.Context, func(error) error) {
			cctx, cancel := context.WithCancel(ctx)
			cancelCapture = cancel
			return cctx, func(err error) error {
				ended = append(ended, err)
				if err != nil {
					return errMapped
				}
				return nil
			}
		},
		Fault: func(ctx context.Context, p string) {
			points = append(points, p)
			if p == StoreCapturing {
				cancelCapture() // a delete, while the capture is held here
			}
		},
	})
	if err != errMapped {
		t.Fatalf("a capture cancelled at its end: %v, want the mapped error", err)
	}
	if len(ended) != 1 || !errors.Is(ended[0], context.Canceled) || strings.Join(points, ",") != StoreCapturing {
		t.Fatalf("ended %v, points %v", ended, points)
	}
}

func TestBuildMakesTheLayerFromAManifest(t *testing.T) {
	l, st, s, stored, _ := storedLayer(t)
	ctx := context.Background()
	if err := l.Build(ctx, "copy", s.Manifest, st); err != nil {
		t.Fatal(err)
	}
	if got := treeOf(t, l.Paths("copy").Upper); got != stored {
		t.Fatalf("the built layer:\n%s\nwant:\n%s", got, stored)
	}
	if c := l.LoadCache("copy"); c == nil || len(c.Entries) != len(s.Manifest.Entries) {
		t.Fatal("the built layer has no cache")
	}
	for _, d := range s.Manifest.Chunks() {
		if err := st.Delete(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Build(ctx, "copy2", s.Manifest, st); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a build without its chunks: %v, want blob.ErrNotFound", err)
	}
}
