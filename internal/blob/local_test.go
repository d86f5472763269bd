package blob_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/blob/blobtest"
)

func TestLocalConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := blob.OpenLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// A crash between Put and Flush leaves a temp file and no blob; reopening
// removes the temp file.
func TestLocalCrashBeforeFlush(t *testing.T) {
	dir := t.TempDir()
	s, _ := blob.OpenLocal(dir)
	d, _, err := blob.PutRaw(context.Background(), s, []byte("unflushed"))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := blob.OpenLocal(dir) // as after a crash
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := s2.Has(context.Background(), d); ok {
		t.Fatal("an unflushed blob survived the crash")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Fatalf("temp files left: %v", ents)
	}
}
