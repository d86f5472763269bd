package e2e

import (
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
	if code != 1 || !strings.Contains(errs, "invalid_argument") || !strings.Contains(errs, "no-such-binary") {
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
