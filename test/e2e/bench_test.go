package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// BenchmarkExecRoundTrip: one buffered exec of `true` on a running sandbox
// of the default image (target: p50 ≤ 20 ms; `sbx bench` prints p50/p95).
func BenchmarkExecRoundTrip(b *testing.B) {
	ctx := context.Background()
	sb, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Delete(ctx)
	for i := 0; i < 5; i++ {
		sb.Run(ctx, api.ExecRequest{Cmd: []string{"true"}})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateFirstExec: create from the warm pool, then the first
// exec (target: p50 ≤ 100 ms). The pool refills between iterations,
// outside the timer.
func BenchmarkCreateFirstExec(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if hl, err := h.c.Health(ctx); err == nil && hl.WarmSandboxes > 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.StartTimer()
		sb, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		sb.Delete(ctx)
		b.StartTimer()
	}
}

// BenchmarkColdBoot: create with a shape the pool does not keep, and the
// first exec: a full runsc boot.
func BenchmarkColdBoot(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		sb, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{MemoryMB: 1000})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		sb.Delete(ctx)
		b.StartTimer()
	}
}
