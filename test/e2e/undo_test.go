package e2e

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// TestRename renames a running sandbox: it answers to the new name only,
// its hostname follows, labels are replaced, and a taken or bad name is
// refused with nothing changed.
func TestRename(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Labels: map[string]string{"a": "1"}})
	other := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	oldName, newName := sb.Name, "r-"+randomHex(4)
	if err := sb.Update(ctx, api.UpdateSandboxRequest{Name: &newName, Labels: map[string]string{"b": "2"}}); err != nil {
		t.Fatal(err)
	}
	if sb.Name != newName || !reflect.DeepEqual(sb.Labels, map[string]string{"b": "2"}) {
		t.Fatalf("after update: name %s labels %v", sb.Name, sb.Labels)
	}
	if _, err := h.c.Sandboxes.Get(ctx, oldName); !errors.Is(err, client.ErrSandboxNotFound) {
		t.Fatalf("old name still answers: %v", err)
	}
	got, err := h.c.Sandboxes.Get(ctx, newName)
	if err != nil || got.ID != sb.ID {
		t.Fatalf("get %s: %v", newName, err)
	}
	if hn := strings.TrimSpace(mustSh(t, sb, "hostname")); hn != newName {
		t.Fatalf("hostname %q, want %q", hn, newName)
	}
	taken := other.Name
	wantCode(t, sb.Update(ctx, api.UpdateSandboxRequest{Name: &taken}), api.CodeNameTaken)
	bad := "Bad_Name"
	wantCode(t, sb.Update(ctx, api.UpdateSandboxRequest{Name: &bad}), api.CodeInvalidArgument)
	if err := sb.Refresh(ctx); err != nil || sb.Name != newName {
		t.Fatalf("after refused renames: %v, name %s", err, sb.Name)
	}
}

// TestGuardedExec is the server-side guard: undo auto takes a checkpoint
// for a file edit and restores it when the command fails; a command that
// passes keeps its change; undo snapshot restores a failed command's
// sandbox in place, processes included; bad fields are refused.
func TestGuardedExec(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "echo before > /workspace/f")
	run := func(cmd, undoKind string) *client.ExecResult {
		t.Helper()
		res, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", cmd}, Undo: undoKind, RollbackOnFailure: true})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if res.Undo == nil {
			t.Fatalf("%s: no undo in the answer", cmd)
		}
		return res
	}
	res := run("echo after > f && exit 3", api.UndoAuto)
	if u := res.Undo; res.ExitCode != 3 || u.Kind != api.UndoCheckpoint || u.Class != "git" || u.Checkpoint == "" || !u.RolledBack {
		t.Fatalf("failed edit: exit %d undo %+v", res.ExitCode, u)
	}
	if got := mustSh(t, sb, "cat /workspace/f"); got != "before\n" {
		t.Fatalf("after the rollback f = %q", got)
	}
	res = run("echo after > f", api.UndoAuto)
	if res.Undo.RolledBack || mustSh(t, sb, "cat /workspace/f") != "after\n" {
		t.Fatalf("passing edit: undo %+v, f %q", res.Undo, mustSh(t, sb, "cat /workspace/f"))
	}
	if res = run("ls /", api.UndoAuto); res.Undo.Kind != api.UndoNone || res.Undo.Class != "none" {
		t.Fatalf("read: undo %+v", res.Undo)
	}

	// A snapshot rollback brings back the process the command killed.
	if _, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	res = run("pkill sleep; echo broken > f; exit 1", api.UndoSnapshot)
	if u := res.Undo; u.Kind != api.UndoSnapshot || u.Snapshot == "" || !u.RolledBack {
		t.Fatalf("snapshot undo: %+v", u)
	}
	if got := mustSh(t, sb, "cat /workspace/f; ps | grep -c '[s]leep 1000'"); got != "after\n1\n" {
		t.Fatalf("after the snapshot rollback: %q", got)
	}
	if err := sb.Refresh(ctx); err != nil || sb.State != api.StateRunning {
		t.Fatalf("state %s, %v", sb.State, err)
	}

	// A guarded command that does not finish (the client goes) is rolled
	// back too.
	sctx, cancel := context.WithCancel(ctx)
	st, err := sb.Stream(sctx, api.ExecRequest{Cmd: []string{"sh", "-c", "echo gone > /workspace/f; echo started; sleep 60"},
		Undo: api.UndoCheckpoint, RollbackOnFailure: true})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range st.Events() {
		if err != nil || ev.Type == api.ExecStdout {
			break
		}
	}
	cancel()
	st.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// While the rollback runs, an exec may be refused (conflict).
		res, err := sb.Exec(ctx, "cat /workspace/f")
		if err == nil && res.Stdout == "after\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after the client went, f: %+v, %v", res, err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	for _, bad := range []api.ExecRequest{
		{Cmd: []string{"true"}, Undo: "later"},
		{Cmd: []string{"true"}, RollbackOnFailure: true},
		{Cmd: []string{"true"}, Undo: api.UndoCheckpoint, Detach: true},
	} {
		_, err := sb.Run(ctx, bad)
		wantCode(t, err, api.CodeInvalidArgument)
	}
}

// TestTryInCopy covers the three ends of TryInCopy: the check fails (copy
// gone, original untouched), the step fails (verify not run), both pass
// (the copy takes the original's name, labels and network rules; the
// original is gone).
func TestTryInCopy(t *testing.T) {
	ctx := ctxT(t)
	label := map[string]string{"try": randomHex(3)}
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox", Labels: label})
	rules := api.NetworkRules{Internet: true, Allow: []string{"registry.npmjs.org"}, Deny: []string{}, Connect: []string{}}
	rules, err := sb.Network().Set(ctx, rules)
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "echo v1 > /workspace/app")
	count := func() int {
		l, err := h.c.Sandboxes.List(ctx, label)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}

	res, err := client.TryInCopy(ctx, sb, "echo v2 > /workspace/app", "grep -q v3 /workspace/app", client.TryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kept || res.Sandbox.ID != sb.ID || res.Step.ExitCode != 0 || res.Verify == nil || res.Verify.ExitCode == 0 {
		t.Fatalf("verify fails: %+v", res)
	}
	if got := mustSh(t, sb, "cat /workspace/app"); got != "v1\n" || count() != 1 {
		t.Fatalf("original changed (%q) or the copy is left (%d sandboxes)", got, count())
	}

	res, err = client.TryInCopy(ctx, sb, "exit 4", "touch /workspace/verified", client.TryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kept || res.Step.ExitCode != 4 || res.Verify != nil || count() != 1 {
		t.Fatalf("step fails: %+v, %d sandboxes", res, count())
	}

	// The step runs offline by default: the copy cannot resolve a name
	// the original may reach.
	name, id := sb.Name, sb.ID
	res, err = client.TryInCopy(ctx, sb, "echo v2 > /workspace/app; nslookup registry.npmjs.org >/dev/null 2>&1 && echo online || echo offline", "grep -q v2 /workspace/app", client.TryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Kept || res.Sandbox.Name != name || res.Sandbox.ID == id || res.Leftover != "" {
		t.Fatalf("pass: %+v", res)
	}
	if strings.TrimSpace(res.Step.Stdout) != "offline" {
		t.Fatalf("the step ran %q", res.Step.Stdout)
	}
	if _, err := h.c.Sandboxes.Get(ctx, id); !errors.Is(err, client.ErrSandboxNotFound) {
		t.Fatalf("the original is still there: %v", err)
	}
	kept := res.Sandbox
	t.Cleanup(func() { _ = kept.Delete(ctxT(t)) })
	got, err := kept.Network().Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rules) {
		t.Fatalf("the kept copy's rules %+v, the original's %+v", got, rules)
	}
	if err := kept.Refresh(ctx); err != nil || !reflect.DeepEqual(kept.Labels, label) || count() != 1 {
		t.Fatalf("kept copy: %v, labels %v, %d sandboxes", err, kept.Labels, count())
	}
	if got := mustSh(t, kept, "cat /workspace/app; hostname"); got != "v2\n"+name+"\n" {
		t.Fatalf("kept copy: %q", got)
	}
}

// TestGuarded runs the client's guard on each class: a failed edit in a
// git repository rolls back through git (HEAD, work tree and untracked
// files), a failed system change through a checkpoint, a read takes no
// undo.
func TestGuarded(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	mustSh(t, sb, `mkdir -p /workspace/repo && cd /workspace/repo && git init -q && echo one > a && echo keep > b &&
		git add -A && git -c user.name=a -c user.email=a@b commit -qm init && echo draft > notes`)
	opts := client.GuardOptions{Cwd: "/workspace/repo"}
	res, err := client.Guarded(ctx, sb, "git -c user.name=a -c user.email=a@b commit -qam x --allow-empty && rm b notes && echo two > a && echo junk > new && git reset -q --hard HEAD~1 && exit 1", opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Undo != "git" || !res.RolledBack || res.Result.ExitCode != 1 {
		t.Fatalf("git guard: undo %s rolled back %v exit %d: %s", res.Undo, res.RolledBack, res.Result.ExitCode, res.Result.Stderr)
	}
	if got := mustSh(t, sb, "cd /workspace/repo && cat a b notes && ls && git log --oneline | wc -l"); got != "one\nkeep\ndraft\na\nb\nnotes\n1\n" {
		t.Fatalf("after the git rollback: %q", got)
	}

	res, err = client.Guarded(ctx, sb, "echo x > /etc/sbx-guard && exit 2", opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Undo != "checkpoint" || !res.RolledBack {
		t.Fatalf("checkpoint guard: %+v", res)
	}
	if r := sh(t, sb, "test -e /etc/sbx-guard"); r.ExitCode == 0 {
		t.Fatal("/etc/sbx-guard survived the rollback")
	}

	res, err = client.Guarded(ctx, sb, "ls /workspace", opts)
	if err != nil || res.Undo != "none" || res.RolledBack || res.Result.ExitCode != 0 {
		t.Fatalf("read: %+v, %v", res, err)
	}
}

// TestGitUndo: sbxd's git undo. Classify answers git with the reason; an
// explicit git undo outside a work tree is 409 and runs nothing; in a
// repository a failed command is rolled back through git (HEAD, index,
// working tree, untracked files), the record is in the answer, and the
// sandbox's processes live on; a git that prints something else than a
// record (the guest's) makes an explicit git undo fail with nothing run,
// and auto take a disk checkpoint instead.
func TestGitUndo(t *testing.T) {
	ctx := ctxT(t)
	cl, err := h.c.Classify(ctx, "git checkout -- .")
	if err != nil || cl.Undo != "git" || !strings.Contains(cl.Reason, "`git checkout`") {
		t.Fatalf("classify: %+v, %v", cl, err)
	}
	if out, errOut, code := sbxCLI(t, "", "classify", "npm", "install", "&&", "rm", "-rf", "dist"); code != 0 || !strings.HasPrefix(out, "checkpoint: `npm install`") {
		t.Fatalf("sbx classify: %d %q %q", code, out, errOut)
	}
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	mustSh(t, sb, `mkdir -p /workspace/repo && cd /workspace/repo && git init -q -b main && echo one > a && echo keep > b &&
		git add -A && git -c user.name=a -c user.email=a@b commit -qm init && echo staged > s && git add s && echo draft > notes`)
	if _, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	guarded := func(cwd, cmd, kind string) (*client.ExecResult, error) {
		return sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", cmd}, Cwd: cwd, Undo: kind, RollbackOnFailure: true})
	}

	_, err = guarded("/workspace", "touch /workspace/ran", api.UndoGit)
	if ae := wantCode(t, err, api.CodeConflict); !strings.Contains(ae.Message, "not in a git work tree") {
		t.Fatalf("outside a work tree: %s", ae.Message)
	}
	if sh(t, sb, "test -e /workspace/ran").ExitCode == 0 {
		t.Fatal("the command ran although its undo could not be taken")
	}

	state := "cd /workspace/repo && cat a b s notes && git status --porcelain && git log --oneline | wc -l && git rev-parse --abbrev-ref HEAD"
	before := mustSh(t, sb, state)
	for _, kind := range []string{api.UndoGit, api.UndoAuto} {
		// A branch the command makes stays (the rollback puts back HEAD's
		// branch, not the other refs): each round makes its own.
		res, err := guarded("/workspace/repo", "git -c user.name=a -c user.email=a@b commit -qam x && git checkout -qb other-"+kind+" && rm b notes && echo two > a && echo junk > new && exit 1", kind)
		if err != nil {
			t.Fatal(err)
		}
		u := res.Undo
		if res.ExitCode != 1 || u == nil || u.Kind != api.UndoGit || u.Git == nil || u.Git.Repo != "/workspace/repo" ||
			len(u.Git.Head) != 40 || u.Git.Ref != "refs/heads/main" || !u.RolledBack || u.RollbackError != "" {
			t.Fatalf("undo %s: exit %d, %+v (git %+v)", kind, res.ExitCode, u, u.Git)
		}
		if kind == api.UndoAuto && u.Class != "git" {
			t.Fatalf("auto: class %q", u.Class)
		}
		if got := mustSh(t, sb, state); got != before {
			t.Fatalf("undo %s: after the rollback\n%s\nwant\n%s", kind, got, before)
		}
	}
	// procps' ps (this image) lists only the caller's session without -e.
	if got := mustSh(t, sb, "ps -e -o args | grep -c '^[s]leep 1000'"); got != "1\n" {
		t.Fatalf("the git rollback ended the sandbox's processes: %q", got)
	}

	// A git that lies: HEAD's "commit" is an option for the rollback.
	mustSh(t, sb, `printf '#!/bin/sh\nif [ "$1" = rev-parse ] && [ "$2" = -q ]; then echo --exec=/tmp/x; exit 0; fi\nexec /usr/bin/git "$@"\n' > /usr/local/bin/git && chmod +x /usr/local/bin/git`)
	_, err = guarded("/workspace/repo", "touch ran && exit 1", api.UndoGit)
	wantCode(t, err, api.CodeCheckpointFailed)
	if sh(t, sb, "test -e /workspace/repo/ran").ExitCode == 0 {
		t.Fatal("the command ran although its git undo failed")
	}
	res, err := guarded("/workspace/repo", "touch ran && exit 1", api.UndoAuto)
	if err != nil || res.Undo.Kind != api.UndoCheckpoint || res.Undo.Class != "git" || !res.Undo.RolledBack {
		t.Fatalf("auto with a lying git: %+v, %v", res, err)
	}
}

// TestSnapshotChain remembers three steps and goes back to the second: the
// sandbox keeps its name, runs with the second step's files and
// processes, and the chain outlives the client that made it.
func TestSnapshotChain(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	for i, step := range []string{"one", "two", "three"} {
		mustSh(t, sb, "echo "+step+" > /workspace/step")
		if i == 1 {
			if _, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"sleep", "777"}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := client.Remember(ctx, sb, step, client.RememberOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustSh(t, sb, "pkill sleep; rm /workspace/step")
	// Another client, as an agent process that restarted would be.
	c2, err := client.New(client.WithSocket(h.sock))
	if err != nil {
		t.Fatal(err)
	}
	same, err := c2.Sandboxes.Get(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := client.Chain(ctx, same)
	if err != nil || len(chain) != 3 || chain[0].Name != "one" || chain[2].Name != "three" {
		t.Fatalf("chain %v, %v", chain, err)
	}
	if _, err := client.GoBackTo(ctx, same, "four"); !errors.Is(err, client.ErrSnapshotNotFound) {
		t.Fatalf("go back to a missing step: %v", err)
	}
	name, id := sb.Name, sb.ID
	back, err := client.GoBackTo(ctx, same, "two")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = back.Delete(ctxT(t)) })
	if back.Name != name || back.ID == id {
		t.Fatalf("went back to %s (%s)", back.Name, back.ID)
	}
	if got := mustSh(t, back, "cat /workspace/step; ps | grep -c '[s]leep 777'"); got != "two\n1\n" {
		t.Fatalf("after going back: %q", got)
	}
	if _, err := h.c.Sandboxes.Get(ctx, id); !errors.Is(err, client.ErrSandboxNotFound) {
		t.Fatalf("the old sandbox is still there: %v", err)
	}
	if chain, err = client.Chain(ctx, back); err != nil || len(chain) != 3 {
		t.Fatalf("the chain after going back: %d, %v", len(chain), err)
	}
}
