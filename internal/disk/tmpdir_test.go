package disk

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKeepTmp(t *testing.T) {
	l := NewLayers(t.TempDir())
	const id = "sbx_keeptmp"
	if err := l.Create(id); err != nil {
		t.Fatal(err)
	}
	rootfs := l.Paths(id).RootFS
	tmp := filepath.Join(rootfs, "tmp")

	// Missing: made, sticky and world-writable, and not empty.
	if err := l.KeepTmp(id); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(tmp)
	if err != nil || !fi.IsDir() || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Fatalf("/tmp after KeepTmp: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(tmp, TmpKeepName)); err != nil {
		t.Fatal(err)
	}

	// Not empty: left as it is.
	_ = os.Remove(filepath.Join(tmp, TmpKeepName))
	if err := os.WriteFile(filepath.Join(tmp, "mine"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.KeepTmp(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(tmp, TmpKeepName)); !os.IsNotExist(err) {
		t.Fatalf("a non-empty /tmp got %s: %v", TmpKeepName, err)
	}

	// A link the guest planted to a host dir is not followed on the host:
	// the host dir stays empty; the link, which leads nowhere inside the
	// sandbox, becomes a plain /tmp.
	canary := t.TempDir()
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, tmp); err != nil {
		t.Fatal(err)
	}
	if err := l.KeepTmp(id); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(canary); len(ents) != 0 {
		t.Fatalf("KeepTmp wrote through a link into the host dir: %v", ents)
	}
	if fi, err := os.Lstat(tmp); err != nil || !fi.IsDir() {
		t.Fatalf("/tmp after a dangling link: %v %v", fi, err)
	}

	// A link inside the sandbox (/tmp -> /var/tmp) is kept and its
	// target kept non-empty.
	if err := os.MkdirAll(filepath.Join(rootfs, "var", "tmp"), 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(tmp)
	if err := os.Symlink("/var/tmp", tmp); err != nil {
		t.Fatal(err)
	}
	if err := l.KeepTmp(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "var", "tmp", TmpKeepName)); err != nil {
		t.Fatalf("/var/tmp behind the /tmp link: %v", err)
	}
}
