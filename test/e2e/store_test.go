package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
)

// TestPostgresStore: sbxd keeps its records in PostgreSQL (a real server
// the test starts): a sandbox and its checkpoint survive a SIGKILL of
// sbxd, and restore; a second sbxd on the same database is refused with a
// clear error, and so is a database that cannot be reached.
func TestPostgresStore(t *testing.T) {
	url := pgtest.URL(t)
	d := second(t, "--pool", "0", "--store", url)
	ctx := ctxT(t)
	sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "pg", Labels: map[string]string{"store": "pg"}})
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "mkdir -p /workspace && echo one > /workspace/f")
	if _, err := sb.Checkpoint(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "echo two > /workspace/f")

	d.restart(t, true)
	sb, err = d.c.Sandboxes.Get(ctx, "pg")
	if err != nil || sb.State != api.StateRunning {
		t.Fatalf("after a SIGKILL of sbxd: %+v %v", sb, err)
	}
	if got := mustSh(t, sb, "cat /workspace/f"); got != "two\n" {
		t.Fatalf("after the restart: %q", got)
	}
	if l, err := d.c.Sandboxes.List(ctx, map[string]string{"store": "pg"}); err != nil || len(l) != 1 {
		t.Fatalf("list by label: %d %v", len(l), err)
	}
	if err := sb.Restore(ctx, "v1", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "cat /workspace/f"); got != "one\n" {
		t.Fatalf("restored v1: %q", got)
	}

	refused := func(store, want string) {
		t.Helper()
		tmp := t.TempDir()
		ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(h.binDir, "sbxd"), "--data-dir", filepath.Join(tmp, "data"),
			"--socket", filepath.Join(tmp, "s.sock"), "--netns-dir", filepath.Join(tmp, "netns"), "--pool", "0",
			"--store", store)
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "hunter2") {
			t.Fatalf("sbxd --store %s: %v (ctx %v)\n%s\nwant an exit that says %q", store, err, ctx.Err(), out, want)
		}
	}
	refused(url, "another sbxd uses this database")
	refused("postgres://sbx:hunter2@/sbx?host=/nonexistent&connect_timeout=2", "cannot connect")
}
