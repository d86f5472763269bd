package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A memory image records the container layout it was made in; one made
// in another layout (an older sbxd's) is refused before anything changes,
// with an error that says the disk is still there.
func TestSpec(t *testing.T) {
	dir := t.TempDir()
	err := CheckSpec(dir, 2)
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "disk checkpoint") {
		t.Fatalf("image without a layout record: %v", err)
	}
	if err := WriteSpec(dir, 2); err != nil {
		t.Fatal(err)
	}
	if err := CheckSpec(dir, 2); err != nil {
		t.Fatalf("image made now: %v", err)
	}
	if err := CheckSpec(dir, 3); !errors.Is(err, ErrLayout) {
		t.Errorf("image of layout 2 checked against 3: %v", err)
	}
	for _, bad := range []string{"1\n", "3", "x"} {
		if err := os.WriteFile(filepath.Join(dir, SpecFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckSpec(dir, 2); !errors.Is(err, ErrLayout) {
			t.Errorf("layout record %q: %v", bad, err)
		}
	}
}
