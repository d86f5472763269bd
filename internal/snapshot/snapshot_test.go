package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/blob"
)

func TestStoreFetchRoundTrip(t *testing.T) {
	st, err := blob.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pages := make([]byte, 5<<20)
	rand.Read(pages)
	os.WriteFile(filepath.Join(dir, "pages.img"), pages, 0o600)
	os.WriteFile(filepath.Join(dir, "checkpoint.img"), bytes.Repeat([]byte("state"), 1000), 0o600)
	os.WriteFile(filepath.Join(dir, "empty.img"), nil, 0o600)
	ctx := context.Background()
	im, stats, err := Store(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Bytes != int64(len(pages))+5000 || len(im) != 3 {
		t.Fatalf("%+v %+v", stats, im)
	}
	// A second store of the same image adds nothing.
	if _, stats2, err := Store(ctx, st, dir); err != nil || stats2.AddedBytes != 0 {
		t.Fatalf("second store added %d bytes, %v", stats2.AddedBytes, err)
	}
	out := t.TempDir()
	if err := Fetch(ctx, st, im, out); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"pages.img", "checkpoint.img", "empty.img"} {
		a, _ := os.ReadFile(filepath.Join(dir, n))
		b, _ := os.ReadFile(filepath.Join(out, n))
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs after a round trip", n)
		}
	}
	if err := Verify(ctx, st, im); err != nil {
		t.Fatal(err)
	}
	st.Delete(ctx, im[2].Chunks[0])
	if err := Fetch(ctx, st, Image{{Name: "../x", Size: 1}}, out); err == nil {
		t.Fatal("a file name with a path was accepted")
	}
}

// BenchmarkStore stores a 256 MiB image of random bytes.
func BenchmarkStore(b *testing.B) {
	dir := b.TempDir()
	pages := make([]byte, 256<<20)
	rand.Read(pages)
	os.WriteFile(filepath.Join(dir, "pages.img"), pages, 0o600)
	for i := 0; i < b.N; i++ {
		st, _ := blob.OpenLocal(b.TempDir())
		start := time.Now()
		if _, _, err := Store(context.Background(), st, dir); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(256/time.Since(start).Seconds(), "MB/s")
	}
}
