package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRootConfinesFiles runs an agent with a root (SetRoot, the fake
// runtime's --root) and checks that its file operations and an exec's cwd
// stay beneath that root: paths resolve in it, and symlinks made to reach
// a host canary outside it (absolute, relative with "..") resolve inside
// it instead. set_hostname leaves the host's name alone.
func TestRootConfinesFiles(t *testing.T) {
	base := t.TempDir()
	root, canary := filepath.Join(base, "root"), filepath.Join(base, "canary")
	for _, d := range []string{root, canary} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(canary, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, filepath.Join(root, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../canary", filepath.Join(root, "up")); err != nil {
		t.Fatal(err)
	}
	if err := SetRoot(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsRoot = "" })
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	cl := startAgent(t, 0)
	ctx := context.Background()

	name := "sbx-root-test-" + filepath.Base(base)
	if _, err := cl.WriteFile(ctx, "/"+name, 0o644, strings.NewReader("inside")); err != nil {
		t.Fatalf("write /%s: %v", name, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != "inside" {
		t.Fatalf("the write of /%s is not in the root: %q, %v", name, b, err)
	}
	if _, err := os.Lstat("/" + name); err == nil {
		os.Remove("/" + name)
		t.Fatalf("the write of /%s landed in the host's /", name)
	}
	_, rc, err := cl.Open(ctx, "/"+name, 0)
	if err != nil {
		t.Fatalf("read /%s: %v", name, err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "inside" {
		t.Fatalf("read /%s: %q", name, b)
	}

	for _, link := range []string{"abs", "up"} {
		if _, err := cl.WriteFile(ctx, "/"+link+"/pwn", 0o644, strings.NewReader("x")); err == nil {
			t.Logf("write through /%s succeeded (inside the root)", link)
		}
		if _, err := os.Lstat(filepath.Join(canary, "pwn")); err == nil {
			t.Fatalf("a write through the symlink /%s landed in the host canary", link)
		}
		if _, rc, err := cl.Open(ctx, "/"+link+"/secret", 0); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			t.Fatalf("a read through the symlink /%s reached the host canary: %q", link, b)
		}
		if ents, err := cl.List(ctx, "/"+link); err == nil {
			t.Fatalf("a list through the symlink /%s reached the host canary: %+v", link, ents)
		}
	}
	ents, err := cl.List(ctx, "/")
	if err != nil {
		t.Fatalf("list /: %v", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if want := []string{"abs", name, "up"}; !slices.Equal(names, want) {
		t.Fatalf("list / = %v, want the root's %v", names, want)
	}

	out, _, ex := run(t, cl, &Request{Cmd: []string{"pwd"}, Cwd: "/", Env: env}, nil)
	if ex.ExitCode != 0 || strings.TrimSpace(out) != root {
		t.Fatalf("pwd in cwd / = %q (exit %d), want the root %s", out, ex.ExitCode, root)
	}

	if err := cl.SetHostname(ctx, "sbx-root-test"); err != nil {
		t.Fatalf("set_hostname: %v", err)
	}
	if now, _ := os.Hostname(); now != hostname {
		t.Fatalf("set_hostname changed the host's name to %q", now)
	}
}
