package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// TestSoakShort runs the short form of sbx bench soak: two agents for 90 s
// against their own sbxd, killed with SIGKILL about every 20 s; after each
// restart and at the end the invariants hold (no violation).
func TestSoakShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.binDir, "sbx"), "bench", "soak",
		"--sbxd", filepath.Join(h.binDir, "sbxd"), "--agents", "2", "--duration", "90s", "--kill-every", "20s",
		"--deadline", "2m", "--cache-dir", h.cacheDir, "--dns-upstream", h.dnsUpstream)
	out, err := cmd.CombinedOutput()
	t.Logf("sbx bench soak:\n%s", out)
	if err != nil {
		t.Fatalf("sbx bench soak: %v", err)
	}
	if !strings.Contains(string(out), "\nviolations: 0\n") {
		t.Fatal("the soak's report has no \"violations: 0\" line")
	}
	m := regexp.MustCompile(`kills survived: (\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatal("the soak's report does not say how many kills it survived")
	}
	if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Fatalf("the soak survived %d kills, want at least 2 in 90 s with kills every ~20 s", n)
	}
	all := regexp.MustCompile(`(?m)^all\s+(\d+)`).FindStringSubmatch(string(out))
	if all == nil {
		t.Fatal("the soak's report has no total of operations done")
	}
	if n, _ := strconv.Atoi(all[1]); n < 20 {
		t.Fatalf("the soak's agents did %d operations in 90 s, want at least 20", n)
	}
}

// mixedOutcome is how one of the concurrent requests answered.
type mixedOutcome struct {
	kind string
	code string // "done", an API error code, or "" when it did not answer
	err  error
}

// mixedRequests sends requests of kinds on sb, all started within spread
// of a common start (a delete only in the last quarter of it, so that
// other operations get their turn first), and returns how each answered;
// each has deadline to answer. Copies made by forks are returned too.
func mixedRequests(t *testing.T, sb *client.Sandbox, kinds []string, spread, deadline time.Duration) ([]mixedOutcome, []*client.Sandbox) {
	t.Helper()
	var (
		mu     sync.Mutex
		res    []mixedOutcome
		copies []*client.Sandbox
		wg     sync.WaitGroup
	)
	start := make(chan struct{})
	for i, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			delay := time.Duration(rand.Int64N(int64(spread)))
			if kind == "delete" {
				delay = spread*3/4 + delay/4
			}
			time.Sleep(delay)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			var err error
			switch kind {
			case "exec":
				var r *client.ExecResult
				r, err = sb.Exec(ctx, fmt.Sprintf("mkdir -p /soak && echo %d > /soak/x%d", i, i))
				if err == nil && r.ExitCode != 0 {
					err = fmt.Errorf("exit %d: %s", r.ExitCode, r.Stderr)
				}
			case "checkpoint":
				_, err = sb.Checkpoint(ctx, fmt.Sprint("mixed ", i))
			case "restore":
				err = sb.Restore(ctx, "v1", nil)
			case "fork":
				var fr *client.ForkResult
				fr, err = sb.Fork(ctx, api.ForkRequest{Name: fmt.Sprintf("%s-f%d", sb.Name, i), Network: &api.NetworkRules{Internet: false}})
				if err == nil {
					if fr.Errors[0] != nil {
						err = fr.Errors[0]
					} else {
						mu.Lock()
						copies = append(copies, fr.Copies[0])
						mu.Unlock()
					}
				}
			case "suspend":
				err = sb.Suspend(ctx, "")
			case "delete":
				err = sb.Delete(ctx)
			}
			o := mixedOutcome{kind: kind, code: "done", err: err}
			var ae *client.Error
			switch {
			case err == nil:
			case errors.As(err, &ae):
				o.code = string(ae.Code)
			default:
				o.code = ""
			}
			mu.Lock()
			res = append(res, o)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return res, copies
}

// TestConcurrentMixedOnOneSandbox sends 50 requests on one sandbox, all
// started within 4 s (exec, checkpoint, restore, fork, suspend and, in the
// second round, delete): each answers — done, 409 conflict, or another
// error code — within its deadline, none hangs, and no delete answers
// conflict (it waits for the operation in progress); afterwards the
// sandbox is whole (exec works, its files are there, every checkpoint
// verifies, v1 restores) or, after a delete, cleanly gone, and every copy
// a fork made is whole.
func TestConcurrentMixedOnOneSandbox(t *testing.T) {
	ctx := ctxT(t)
	for round, deletes := range []int{0, 3} {
		t.Run(fmt.Sprintf("deletes=%d", deletes), func(t *testing.T) {
			sb := newSandbox(t, api.CreateSandboxRequest{Name: fmt.Sprintf("mix%d-%s", round, randomHex(3))})
			mustSh(t, sb, "mkdir -p /soak && echo base > /soak/base")
			if _, err := sb.Checkpoint(ctx, "base"); err != nil {
				t.Fatal(err)
			}
			var kinds []string
			base := []string{"exec", "checkpoint", "restore", "fork", "suspend"}
			for i := 0; i < 50-deletes; i++ {
				kinds = append(kinds, base[i%len(base)])
			}
			for i := 0; i < deletes; i++ {
				kinds = append(kinds, "delete")
			}
			rand.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
			start := time.Now()
			res, copies := mixedRequests(t, sb, kinds, 4*time.Second, 3*time.Minute)
			t.Cleanup(func() {
				for _, c := range copies {
					_ = c.Delete(context.Background())
				}
			})
			tally, msgs := map[string]int{}, map[string]int{}
			for _, o := range res {
				tally[o.kind+" "+o.code]++
				switch o.code {
				case "":
					t.Errorf("%s: no answer within its deadline: %v", o.kind, o.err)
				case "done":
				case string(api.CodeConflict):
					// A delete waits for the operation in progress (2 min
					// at most; each here ends in seconds).
					if o.kind == "delete" {
						t.Errorf("delete answered conflict: %v", o.err)
					}
					msgs[o.kind+": "+o.err.Error()]++
				case string(api.CodeInternal):
					// Say what sbxd logged for it.
					var ae *client.Error
					errors.As(o.err, &ae)
					for _, line := range strings.Split(tail(h.logPath, 1<<22), "\n") {
						if ae.RequestID != "" && strings.Contains(line, ae.RequestID) {
							t.Logf("%s answered internal; sbxd logged: %s", o.kind, line)
						}
					}
					// A request that met another's stop or restart is a
					// conflict, never an internal error.
					t.Errorf("%s answered internal: %v", o.kind, o.err)
					msgs[o.kind+": "+o.err.Error()]++
				default:
					msgs[o.kind+": "+o.err.Error()]++
				}
			}
			for m, n := range msgs {
				t.Logf("%d× %s", n, m)
			}
			t.Logf("%d requests answered in %.1fs: %v", len(res), time.Since(start).Seconds(), tally)
			if len(res) != len(kinds) {
				t.Fatalf("%d of %d requests answered", len(res), len(kinds))
			}
			got, err := h.c.Sandboxes.Get(ctx, sb.ID)
			if errors.Is(err, client.ErrSandboxNotFound) {
				if deletes == 0 {
					t.Fatal("the sandbox is gone, but no delete was sent")
				}
				if left := hostLeftovers(t, sb.ID); len(left) > 0 {
					t.Errorf("deleted sandbox %s left on the host: %v", sb.ID, left)
				}
			} else if err != nil {
				t.Fatal(err)
			} else {
				wholeSandbox(t, got, true)
			}
			for _, c := range copies {
				wholeSandbox(t, c, false)
			}
		})
	}
}

// wholeSandbox checks that sb is in a settled state, runs commands, holds
// the file written before v1, and that every checkpoint verifies (and,
// with restore, that v1 restores and holds that file).
func wholeSandbox(t *testing.T, sb *client.Sandbox, restore bool) {
	t.Helper()
	ctx := ctxT(t)
	if err := sb.Refresh(ctx); err != nil {
		t.Fatalf("%s: %v", sb.Name, err)
	}
	switch sb.State {
	case api.StateRunning, api.StateStopped, api.StateSuspended:
	default:
		t.Fatalf("%s is %s after every request answered", sb.Name, sb.State)
	}
	if got := strings.TrimSpace(mustSh(t, sb, "cat /soak/base")); got != "base" {
		t.Fatalf("%s: /soak/base holds %q", sb.Name, got)
	}
	cps, err := sb.ListCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		v, err := sb.GetCheckpoint(ctx, cp.ID, true)
		if err != nil {
			t.Fatalf("%s: verify %s: %v", sb.Name, cp.ID, err)
		}
		if v.Health != api.HealthOK {
			t.Errorf("%s: checkpoint %s verifies %q", sb.Name, cp.ID, v.Health)
		}
	}
	if restore {
		if err := sb.Restore(ctx, "v1", nil); err != nil {
			t.Fatalf("%s: restore v1: %v", sb.Name, err)
		}
		if got := strings.TrimSpace(mustSh(t, sb, "cat /soak/base; ls /soak | wc -l")); got != "base\n1" {
			t.Fatalf("%s after restoring v1: %q, want only /soak/base", sb.Name, got)
		}
	}
}
