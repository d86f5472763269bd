package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// SpecFile is the file that a memory image made by sbxd carries beside
// runsc's files (checkpoint.img, pages.img, pages_meta.img): the version
// of the container layout (init's arguments and the mounts that sbxd adds)
// that the image was checkpointed with. Store and Fetch carry it with the
// image's other files.
const SpecFile = "sbx-spec"

// ErrLayout: a memory image was checkpointed in a container laid out
// otherwise than the ones the caller makes (runsc restores an image only
// into a container with the same arguments and mounts).
var ErrLayout = errors.New("memory image from an sbxd with another container layout")

// WriteSpec records layout version in the memory image in dir (created
// by runsc checkpoint).
func WriteSpec(dir string, version int) error {
	if err := os.WriteFile(filepath.Join(dir, SpecFile), []byte(strconv.Itoa(version)+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the memory image's layout: %w", err)
	}
	return nil
}

// CheckSpec checks that the memory image in dir was checkpointed in a
// container of layout version, before anything is changed for a restore.
// A missing, unreadable or other version wraps ErrLayout and says what
// still can be done (the image's disk is intact: a disk checkpoint
// restores it, without the processes); an I/O error reading the record is
// returned as is.
func CheckSpec(dir string, version int) error {
	b, err := os.ReadFile(filepath.Join(dir, SpecFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: it was made before layout %d (runsc cannot restore it into this sbxd's containers); its disk is intact: restore a disk checkpoint instead", ErrLayout, version)
	}
	if err != nil {
		return fmt.Errorf("the memory image's layout: %w", err)
	}
	v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return fmt.Errorf("%w: unreadable layout record %q", ErrLayout, bytes.TrimSpace(b))
	}
	if v != version {
		return fmt.Errorf("%w: layout %d, this sbxd makes %d (runsc cannot restore it); its disk is intact: restore a disk checkpoint instead", ErrLayout, v, version)
	}
	return nil
}
