package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// TestSpendArithmetic: the spend is today's recorded cost plus what the
// running sandboxes add in the next minute (CPU at their limit); work
// that would start another sandbox counts its minute too. With $0.009
// spent, a 1 vCPU / 1 GiB sandbox running ($0.000542 a minute) and a
// limit of $0.0096, an exec passes and a create of the same shape does
// not; usage billed to another key or yesterday does not count.
func TestSpendArithmetic(t *testing.T) {
	now := time.Now().UTC()
	env := newMeterEnv(t, filepath.Join(t.TempDir(), "sbx.db"), now)
	ctx := context.Background()
	limit := 0.0096
	if err := env.st.CreateKey(ctx, &store.Key{ID: "key_a", Name: "a", Hash: "ha", DailyLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	day := now.Truncate(24 * time.Hour)
	hour := now.Truncate(time.Hour)
	// $0.009 today: 0.009 / (0.025/3600) CPU seconds.
	cpu := 0.009 / (0.025 / 3600)
	if err := env.st.AddUsage(ctx, []*store.UsageRow{
		{SandboxID: "sbx_old", KeyID: "key_a", Hour: hour, First: hour, Last: hour, CPUSeconds: cpu},
		{SandboxID: "sbx_other", KeyID: "key_b", Hour: hour, First: hour, Last: hour, CPUSeconds: 100 * cpu},
		{SandboxID: "sbx_old", KeyID: "key_a", Hour: day.Add(-time.Hour), First: day.Add(-time.Hour), Last: day.Add(-time.Hour), CPUSeconds: 100 * cpu},
	}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := env.st.CreateSandbox(ctx, &store.Sandbox{ID: "sbx_run", Name: "run", State: api.StateRunning, Image: "default",
		CPUs: 1, MemoryMB: 1024, Owner: "key_a"}); err != nil {
		t.Fatal(err)
	}
	env.rt.set("sbx_run", 0)
	env.m.started(ctx, "sbx_run")
	ks, err := env.e.keySpend(ctx, "key_a", time.Now())
	if err != nil || ks.Spent < 0.009 || ks.Spent > 0.00901 || !near(ks.Next, (0.025+0.0075)/60) || !ks.Reset.Equal(day.Add(24*time.Hour)) {
		t.Fatalf("spend: %+v %v", ks, err)
	}
	if err := env.e.checkSpend(ctx, "key_a", 0, 0); err != nil {
		t.Fatalf("exec under the limit: %v", err)
	}
	err = env.e.checkSpend(ctx, "key_a", 1, 1024)
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("create over the limit: %v", err)
	}
	for _, want := range []string{"daily spending limit of $0.0096", "spent $0.0090 today", "resets at " + day.Add(24*time.Hour).Format(time.RFC3339)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if err := env.e.checkSpend(ctx, "", 64, 1<<20); err != nil {
		t.Fatalf("the operator has no limit: %v", err)
	}
}

// TestFakeSpendingLimit: a tenant key at its limit is refused create and
// exec with quota_exceeded; the operator is not; enforcing the limit tries
// to suspend its sandbox (the fake runtime cannot, so it runs on, with
// nothing recorded as suspended by the limit); raising the limit lets the
// key work again.
func TestFakeSpendingLimit(t *testing.T) {
	f := startFakeEngine(t, newFakeDataDir(t), Config{UsageInterval: time.Hour})
	ctx := context.Background()
	one := 1.0
	k, _, err := f.e.CreateKey(ctx, api.CreateKeyRequest{Name: "tenant", DailyLimitUSD: &one})
	if err != nil {
		t.Fatal(err)
	}
	tctx := WithCaller(ctx, Caller{KeyID: k.ID})
	if _, err := f.e.Create(tctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "lim"}}); err != nil {
		t.Fatal(err)
	}
	zero := 0.0
	if _, err := f.e.SetKeyDailyLimit(tctx, k.ID, &zero, false); !errors.Is(err, errdefs.ErrForbidden) {
		t.Fatalf("a tenant set its own limit: %v", err)
	}
	if _, err := f.e.SetKeyDailyLimit(ctx, k.ID, &zero, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Exec(tctx, "lim", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/"}, nil); !errors.Is(err, errdefs.ErrQuota) ||
		!strings.Contains(err.Error(), "resets at") {
		t.Fatalf("exec at the limit: %v", err)
	}
	if _, err := f.e.Create(tctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "lim2"}}); !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("create at the limit: %v", err)
	}
	if _, err := f.e.Get(ctx, "lim2"); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused create left a sandbox: %v", err)
	}
	f.create(t, "ops") // the operator's own: no limit
	if err := f.e.enforceLimits(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.logs.String(), "spending limit: suspend") {
		t.Fatalf("no suspend was tried:\n%s", f.logs.String())
	}
	if sb, err := f.e.Get(ctx, "lim"); err != nil || sb.State != api.StateRunning {
		t.Fatalf("after a suspend the runtime cannot do: %+v %v", sb, err)
	}
	if ls, err := f.st.ListLimitSuspensions(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("a failed suspend is recorded: %+v %v", ls, err)
	}
	hundred := 100.0
	if _, err := f.e.SetKeyDailyLimit(ctx, k.Name, &hundred, true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Exec(tctx, "lim", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/"}, nil); err != nil {
		t.Fatalf("exec after the limit was raised: %v", err)
	}
	neg := -1.0
	if _, err := f.e.SetKeyDailyLimit(ctx, k.ID, &neg, false); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "daily_limit_usd") {
		t.Fatalf("a negative limit: %v", err)
	}
}
