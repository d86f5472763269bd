package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/sqlite"
	"github.com/sbxhq/sbx/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "sbx.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReopenKeepsRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sbx.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_1", Name: "keep", State: "running", Image: "default", CPUs: 1, MemoryMB: 256}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = sqlite.Open(ctx, path) // migrations run again: must be a no-op
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetSandbox(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseMode: the database file is root's alone (0600), also one
// made earlier with a wider mode.
func TestDatabaseMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sbx.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
}
