package postgres_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/postgres"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
	"github.com/sbxhq/sbx/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, pgtest.URL(t)) })
}

// TestReopenKeepsRecords: a second Open of a migrated database (a restarted
// sbxd) migrates nothing and finds the records.
func TestReopenKeepsRecords(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	s := open(t, url)
	if err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_1", Name: "keep", State: "running", Image: "default", CPUs: 1, MemoryMB: 256}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, url)
	if _, err := s.GetSandbox(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentOpens: sbxd nodes starting at once on an empty database
// migrate it once (goose's advisory lock), and all of them open it.
func TestConcurrentOpens(t *testing.T) {
	url := pgtest.URL(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := postgres.Open(context.Background(), url)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestLockSingleNode: a second sbxd on a database another one holds is
// refused with a conflict, and may take it once the first closes.
func TestLockSingleNode(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	a, b := open(t, url), open(t, url)
	if err := a.LockSingleNode(ctx); err != nil {
		t.Fatal(err)
	}
	err := b.LockSingleNode(ctx)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "another sbxd uses this database") {
		t.Fatalf("second lock: %v, want a conflict naming the other sbxd", err)
	}
	a.Close()
	if err := b.LockSingleNode(ctx); err != nil {
		t.Fatalf("lock after the first closed: %v", err)
	}
}

// TestOpenUnreachable: a server that does not answer is a clear error that
// names the database and not the password.
func TestOpenUnreachable(t *testing.T) {
	dir := t.TempDir()
	_, err := postgres.Open(context.Background(), "postgres://sbx:hunter2@/sbxdb?host="+dir+"&connect_timeout=2")
	if err == nil || !strings.Contains(err.Error(), "sbx@"+dir+"/sbxdb") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("open of a missing server: %v", err)
	}
	if _, err := postgres.Open(context.Background(), "postgres://sbx:hunter2@%zz/db"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("open of a malformed URL: %v", err)
	}
}
