package disk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkIncrementalCapture: a layer of 16384 files of 4 KiB, 160 of them
// changed between captures; reports the phases.
func BenchmarkIncrementalCapture(b *testing.B) {
	st, _ := newStoreB(b)
	upper := b.TempDir()
	for i := 0; i < 16384; i++ {
		p := filepath.Join(upper, "data", fmt.Sprintf("d%02d", i%64), fmt.Sprintf("f%05d", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, randBytes(4096), 0o644)
	}
	ctx := context.Background()
	m, stats, err := Capture(ctx, CaptureOptions{Upper: upper, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	st.Flush(ctx, stats.Chunks)
	time.Sleep(50 * time.Millisecond)
	m.CaptureNS = time.Now().UnixNano()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < 160; j++ {
			p := filepath.Join(upper, "data", fmt.Sprintf("d%02d", (j*7)%64), fmt.Sprintf("f%05d", j*7))
			os.WriteFile(p, randBytes(4096), 0o644)
		}
		time.Sleep(30 * time.Millisecond)
		t0 := time.Now()
		m2, stats, err := Capture(ctx, CaptureOptions{Upper: upper, Store: st, Cache: m})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		ref, _, err := PutManifest(ctx, st, m2)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		st.Flush(ctx, append(stats.Chunks, ref...))
		t3 := time.Now()
		b.ReportMetric(float64(t1.Sub(t0).Milliseconds()), "capture_ms")
		b.ReportMetric(float64(t2.Sub(t1).Milliseconds()), "manifest_ms")
		b.ReportMetric(float64(t3.Sub(t2).Milliseconds()), "flush_ms")
		b.ReportMetric(float64(stats.ReadFiles), "read_files")
		m = m2
		m.CaptureNS = time.Now().UnixNano() + int64(time.Second)
	}
}
