package engine

import (
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "dev-1", "0abc", strings.Repeat("a", 63)} {
		if err := ValidateName("name", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "A", "-a", "a_b", "a.b", strings.Repeat("a", 64), "sbx_0123", "a b"} {
		if err := ValidateName("name", bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%q accepted", bad)
		}
	}
	for i := 0; i < 100; i++ {
		if n := generateName(); ValidateName("name", n) != nil {
			t.Fatalf("generated name %q is invalid", n)
		}
	}
	if ValidateName("name", newID()) == nil {
		t.Fatal("an id is a valid name: {name} paths would be ambiguous")
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{"/a/b/": "/a/b", "/": "/", "/a//b": "/a/b"} {
		got, err := CleanPath("path", in)
		if err != nil || got != want {
			t.Errorf("%q → %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a/b", "/a/../b", "/a/./b", "/..", "/a\x00b", "/" + strings.Repeat("a", 5000)} {
		if _, err := CleanPath("path", bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%q accepted", bad)
		}
	}
	if !underReserved("/.sbx/run") || !underReserved("/proc") || underReserved("/process") || underReserved("/workspace") {
		t.Fatal("underReserved")
	}
}

func TestCheckStatic(t *testing.T) {
	if err := checkStatic([]byte("not an elf")); err == nil {
		t.Fatal("accepted a non-ELF")
	}
}

// TestValidateVolumes: a volume over a file sbx mounts is an invalid
// argument (it was a boot failure, a 500).
func TestValidateVolumes(t *testing.T) {
	e := &Engine{}
	for _, bad := range []string{"/etc", "/etc/resolv.conf", "/.sbx", "/proc/x", "/"} {
		if err := e.validateVolumes([]api.Volume{{Name: "v", Path: bad}}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("volume at %s: %v, want invalid_argument", bad, err)
		}
	}
	for _, ok := range []string{"/data", "/etc2", "/tmp", "/etc/app"} {
		if err := e.validateVolumes([]api.Volume{{Name: "v", Path: ok}}); err != nil {
			t.Errorf("volume at %s: %v", ok, err)
		}
	}
}
