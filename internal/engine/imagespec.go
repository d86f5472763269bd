package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// imageSpecFile is the file that a memory image made by sbxd carries
// beside runsc's files (checkpoint.img, pages.img, pages_meta.img): the
// version of the container layout (init's arguments and the mounts that
// sbxd adds, see Engine.spec) that the image was checkpointed with. It is
// stored and fetched with the image's other files (internal/snapshot).
const imageSpecFile = "sbx-spec"

// imageSpecVersion is the container layout that Engine.spec makes. runsc
// restores an image only into a container with the same arguments and
// mounts, so every change of them bumps it:
//
//	(none) before: /tmp was bind-mounted from the writable layer
//	2      no /tmp mount; /etc/hostname from a host file
const imageSpecVersion = 2

// writeImageSpec records imageSpecVersion in the memory image in dir.
func writeImageSpec(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, imageSpecFile), []byte(strconv.Itoa(imageSpecVersion)+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the memory image's layout: %w", err)
	}
	return nil
}

// errImageLayout: a memory image was checkpointed in a container laid out
// otherwise than the ones this sbxd makes.
var errImageLayout = errors.New("memory image from an sbxd with another container layout")

// checkImageSpec checks that the memory image in dir can be restored into
// a container that Engine.spec makes, before anything is changed for the
// restore. Errors wrap errImageLayout and say what still can be done: the
// image's disk is intact (a disk checkpoint restores it, without the
// processes).
func checkImageSpec(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, imageSpecFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: it was made before layout %d (runsc cannot restore it into this sbxd's containers); its disk is intact: restore a disk checkpoint instead", errImageLayout, imageSpecVersion)
	}
	if err != nil {
		return fmt.Errorf("the memory image's layout: %w", err)
	}
	v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return fmt.Errorf("%w: unreadable layout record %q", errImageLayout, bytes.TrimSpace(b))
	}
	if v != imageSpecVersion {
		return fmt.Errorf("%w: layout %d, this sbxd makes %d (runsc cannot restore it); its disk is intact: restore a disk checkpoint instead", errImageLayout, v, imageSpecVersion)
	}
	return nil
}
