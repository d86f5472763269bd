package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// sbxCLI runs the sbx binary against the sbxd under test.
func sbxCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(h.binDir, "sbx"), append([]string{"--socket", h.sock}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	name := "cli-" + randomHex(3)
	out, errs, code := sbxCLI(t, "", "create", "--name", name, "--image", "busybox", "--label", "via=cli", "--env", "GREETING=hi")
	if code != 0 || strings.TrimSpace(out) != name {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	t.Cleanup(func() { sbxCLI(t, "", "rm", name) })

	out, _, code = sbxCLI(t, "", "exec", name, "--", "sh", "-c", "echo $GREETING; echo oops >&2; exit 42")
	if code != 42 || out != "hi\n" {
		t.Fatalf("exec: exit %d, stdout %q", code, out)
	}
	out, _, code = sbxCLI(t, "from stdin", "exec", "-i", name, "--", "cat")
	if code != 0 || out != "from stdin" {
		t.Fatalf("exec -i: %d %q", code, out)
	}
	_, errs, code = sbxCLI(t, "", "exec", name, "--", "no-such-binary")
	if code != 127 || !strings.Contains(errs, "invalid_argument") || !strings.Contains(errs, "no-such-binary") {
		t.Fatalf("missing binary: %d %q", code, errs)
	}

	out, _, code = sbxCLI(t, "", "ls", "--label", "via=cli", "-o", "json")
	var list []api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Name != name {
		t.Fatalf("ls -o json: %d %q", code, out)
	}
	out, _, code = sbxCLI(t, "", "get", name)
	if code != 0 || !strings.Contains(out, "running") {
		t.Fatalf("get: %d %q", code, out)
	}

	// cp: a directory up, a file and a directory back down.
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "pkg"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg", "mod.py"), []byte("x = 1\n"), 0o644)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	if _, errs, code := sbxCLI(t, "", "cp", src, name+":/workspace/up"); code != 0 {
		t.Fatalf("cp up: %s", errs)
	}
	if out, _, _ := sbxCLI(t, "", "exec", name, "--", "/workspace/up/run.sh"); out != "ran\n" {
		t.Fatalf("uploaded script: %q", out)
	}
	dst := t.TempDir()
	if _, errs, code := sbxCLI(t, "", "cp", name+":/workspace/up/pkg/mod.py", dst); code != 0 {
		t.Fatalf("cp file down: %s", errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "mod.py")); string(b) != "x = 1\n" {
		t.Fatalf("downloaded file: %q", b)
	}
	if _, errs, code := sbxCLI(t, "", "cp", name+":/workspace/up", filepath.Join(dst, "tree")); code != 0 {
		t.Fatalf("cp dir down: %s", errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "tree", "pkg", "mod.py")); string(b) != "x = 1\n" {
		t.Fatalf("downloaded tree: %q", b)
	}
	if _, errs, code := sbxCLI(t, "", "cp", "a", "b"); code == 0 || !strings.Contains(errs, "NAME:/path") {
		t.Fatalf("cp without a sandbox side: %d %q", code, errs)
	}

	out, _, code = sbxCLI(t, "", "image", "ls")
	if code != 0 || !strings.Contains(out, "busybox") || !strings.Contains(out, "default") {
		t.Fatalf("image ls: %d %q", code, out)
	}
	_, errs, code = sbxCLI(t, "", "get", "no-such-sandbox")
	if code != 1 || !strings.Contains(errs, "sandbox_not_found") {
		t.Fatalf("get missing: %d %q", code, errs)
	}
}

// TestCLICopyCannotEscape: a sandbox that turns a downloaded path into a
// symlink to a host directory cannot make a later `sbx cp` write there.
func TestCLICopyCannotEscape(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	escape := t.TempDir()
	dst := t.TempDir()
	mustSh(t, sb, "mkdir /workspace/exp; ln -s "+escape+" /workspace/exp/lnk")
	if _, errs, code := sbxCLI(t, "", "cp", sb.Name+":/workspace/exp", dst); code != 0 {
		t.Fatalf("first cp: %s", errs)
	}
	mustSh(t, sb, "rm /workspace/exp/lnk; mkdir /workspace/exp/lnk; echo x > /workspace/exp/lnk/PWNED")
	sbxCLI(t, "", "cp", sb.Name+":/workspace/exp", dst)
	if _, err := os.Stat(filepath.Join(escape, "PWNED")); err == nil {
		t.Fatal("sbx cp wrote through a symlink the sandbox planted, outside its destination")
	}
}

// TestCLIExactBytes: exec -i and exec's output carry arbitrary bytes.
func TestCLIExactBytes(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	out, _, code := sbxCLI(t, "\xff\xfe\x00\x01abc", "exec", "-i", sb.Name, "--", "od", "-An", "-tx1")
	if code != 0 || strings.Join(strings.Fields(out), " ") != "ff fe 00 01 61 62 63" {
		t.Fatalf("binary stdin: %d %q", code, out)
	}
	mustSh(t, sb, "head -c 100000 /dev/urandom > /workspace/r")
	want := strings.Fields(mustSh(t, sb, "sha256sum /workspace/r"))[0]
	raw, _, code := sbxCLI(t, "", "exec", sb.Name, "--", "cat", "/workspace/r")
	if code != 0 || len(raw) != 100000 || sha256Hex(raw) != want {
		t.Fatalf("binary stdout: %d bytes, exit %d", len(raw), code)
	}
	// Exit codes: 127 for a missing command, the command's own otherwise.
	if _, _, code := sbxCLI(t, "", "exec", sb.Name, "--", "no-such-command"); code != 127 {
		t.Fatalf("missing command exits %d, want 127", code)
	}
	if _, errs, code := sbxCLI(t, "", "exec", sb.Name, "--timeout", "300ms", "--", "sleep", "5"); code != 124 || !strings.Contains(errs, "timed out") {
		t.Fatalf("timeout: %d %q", code, errs)
	}
}

// TestCLICopyFileSemantics: a file goes into an existing directory, and
// comes back with its mode.
func TestCLICopyFileSemantics(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	src := filepath.Join(t.TempDir(), "tool.sh")
	os.WriteFile(src, []byte("#!/bin/sh\necho tool\n"), 0o750)
	mustSh(t, sb, "mkdir -p /workspace/bin")
	if _, errs, code := sbxCLI(t, "", "cp", src, sb.Name+":/workspace/bin"); code != 0 {
		t.Fatalf("cp into a directory: %s", errs)
	}
	if out := mustSh(t, sb, "/workspace/bin/tool.sh; stat -c %a /workspace/bin/tool.sh"); out != "tool\n750\n" {
		t.Fatalf("%q", out)
	}
	back := filepath.Join(t.TempDir(), "back.sh")
	if _, errs, code := sbxCLI(t, "", "cp", sb.Name+":/workspace/bin/tool.sh", back); code != 0 {
		t.Fatalf("cp out: %s", errs)
	}
	if fi, err := os.Stat(back); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("mode after cp out: %v %v", fi.Mode(), err)
	}
}

// TestCLICopySetuid: sbx cp of a setuid file (and a directory holding
// one) into a sandbox keeps the bit there; copying it back out drops it on
// the host, on purpose (docs/api.md).
func TestCLICopySetuid(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	dir := t.TempDir()
	src := filepath.Join(dir, "d", "suid")
	os.MkdirAll(filepath.Dir(src), 0o755)
	os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755)
	if err := os.Chmod(src, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := sbxCLI(t, "", "cp", src, sb.Name+":/workspace/suid"); code != 0 {
		t.Fatalf("cp a file in: %s", errs)
	}
	if _, errs, code := sbxCLI(t, "", "cp", filepath.Dir(src), sb.Name+":/workspace/d"); code != 0 {
		t.Fatalf("cp a directory in: %s", errs)
	}
	if out := mustSh(t, sb, "stat -c %a /workspace/suid /workspace/d/suid"); out != "4755\n4755\n" {
		t.Fatalf("modes inside the sandbox: %q, want 4755 for both", out)
	}
	back := filepath.Join(t.TempDir(), "back")
	if _, errs, code := sbxCLI(t, "", "cp", sb.Name+":/workspace/suid", back); code != 0 {
		t.Fatalf("cp out: %s", errs)
	}
	if fi, err := os.Stat(back); err != nil || fi.Mode() != 0o755 {
		t.Fatalf("mode on the host after cp out: %v %v; want 0755, setuid dropped", fi.Mode(), err)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestCLISnapshotsAndForks drives snapshot, snapshots, create
// --from-snapshot, fork, ps, attach and kill through the sbx binary.
func TestCLISnapshotsAndForks(t *testing.T) {
	name := "clisnap-" + randomHex(3)
	if _, errs, code := sbxCLI(t, "", "create", "--name", name, "--image", "busybox"); code != 0 {
		t.Fatalf("create: %s", errs)
	}
	t.Cleanup(func() { sbxCLI(t, "", "rm", name) })
	out, errs, code := sbxCLI(t, "", "exec", "-d", name, "--", "sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done")
	if code != 0 {
		t.Fatalf("exec -d: %s", errs)
	}
	pid := strings.TrimSpace(out)
	out, errs, code = sbxCLI(t, "", "snapshot", name, "--name", "s1", "--retention", "2h", "--metadata", `{"step":1}`)
	if code != 0 || !strings.HasPrefix(out, "snap_") {
		t.Fatalf("snapshot: %d %q %s", code, out, errs)
	}
	snapID := strings.TrimSpace(out)
	out, _, code = sbxCLI(t, "", "snapshots", "--sandbox", name, "-o", "json")
	var sns []api.Snapshot
	var meta bytes.Buffer
	if code != 0 || json.Unmarshal([]byte(out), &sns) != nil || len(sns) != 1 || sns[0].ID != snapID ||
		json.Compact(&meta, sns[0].Metadata) != nil || meta.String() != `{"step":1}` {
		t.Fatalf("snapshots: %d %s", code, out)
	}
	copyName := name + "-c"
	if _, errs, code := sbxCLI(t, "", "fork", name, "--name", copyName, "--offline"); code != 0 {
		t.Fatalf("fork: %s", errs)
	}
	t.Cleanup(func() { sbxCLI(t, "", "rm", copyName) })
	out, _, code = sbxCLI(t, "", "ps", copyName)
	if code != 0 || !strings.Contains(out, pid) || !strings.Contains(out, "running") {
		t.Fatalf("ps in the copy: %q", out)
	}
	if _, errs, code := sbxCLI(t, "", "kill", copyName, pid, "-s", "9"); code != 0 {
		t.Fatalf("kill: %s", errs)
	}
	out, _, code = sbxCLI(t, "", "attach", copyName, pid)
	if code != 137 || !strings.Contains(out, "tick 1\n") {
		t.Fatalf("attach to a killed process: exit %d, %q", code, out)
	}
	// The original's process was not touched by the kill in the copy.
	out, _, _ = sbxCLI(t, "", "ps", name, "-o", "json")
	if !strings.Contains(out, `"state": "running"`) {
		t.Fatalf("the original's process: %s", out)
	}
	restored := name + "-r"
	if _, errs, code := sbxCLI(t, "", "create", "--name", restored, "--from-snapshot", snapID); code != 0 {
		t.Fatalf("create --from-snapshot: %s", errs)
	}
	t.Cleanup(func() { sbxCLI(t, "", "rm", restored) })
	if out, _, _ := sbxCLI(t, "", "ps", restored); !strings.Contains(out, pid) {
		t.Fatalf("ps in the restored sandbox: %q", out)
	}
	if _, _, code := sbxCLI(t, "", "snapshots", "rm", snapID); code != 0 {
		t.Fatal("snapshots rm")
	}
	if _, errs, code := sbxCLI(t, "", "fork", name, "--count", "99"); code == 0 || !strings.Contains(errs, "count") {
		t.Fatalf("fork --count 99: %d %s", code, errs)
	}
}

// TestBenchSecretsCLI: `sbx bench secrets` runs the proxy measure in the
// sbxd binary beside it (sbxd bench-secrets) and prints its six rows, the
// two "added" ones with issue 14's target.
func TestBenchSecretsCLI(t *testing.T) {
	out, errs, code := sbxCLI(t, "", "bench", "secrets", "--n", "3", "-o", "json")
	var rows []struct {
		Metric string  `json:"metric"`
		N      int     `json:"n"`
		P50    float64 `json:"p50"`
		Target string  `json:"target"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("sbx bench secrets: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6: %+v", len(rows), rows)
	}
	targets := 0
	for _, r := range rows {
		if r.N != 3 {
			t.Errorf("%s: n %d, want 3", r.Metric, r.N)
		}
		if strings.HasPrefix(r.Metric, "GET") && r.P50 <= 0 {
			t.Errorf("%s: p50 %v ms", r.Metric, r.P50)
		}
		if r.Target != "" {
			targets++
		}
	}
	if targets != 2 {
		t.Errorf("%d rows with a target, want 2 (the added latencies)", targets)
	}
}
