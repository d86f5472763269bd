package engine

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
func TestImageSpec(t *testing.T) {
	dir := t.TempDir()
	err := checkImageSpec(dir)
	if !errors.Is(err, errImageLayout) || !strings.Contains(err.Error(), "disk checkpoint") {
		t.Fatalf("image without a layout record: %v", err)
	}
	if err := writeImageSpec(dir); err != nil {
		t.Fatal(err)
	}
	if err := checkImageSpec(dir); err != nil {
		t.Fatalf("image made now: %v", err)
	}
	for _, bad := range []string{"1\n", "3", "x"} {
		if err := os.WriteFile(filepath.Join(dir, imageSpecFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := checkImageSpec(dir); !errors.Is(err, errImageLayout) {
			t.Errorf("layout record %q: %v", bad, err)
		}
	}
}
