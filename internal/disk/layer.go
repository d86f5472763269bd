package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Layers manages sandboxes' writable layers. A sandbox's layer lives in
// dir/<id>/: upper (the writable layer, plain host files), work (overlayfs's
// work dir) and rootfs, where a host overlayfs (lowerdir = the image,
// upperdir = upper) is mounted and handed to runsc as the bundle root.
type Layers struct {
	dir string
}

// NewLayers returns a layer manager rooted at dir (the sandboxes dir).
func NewLayers(dir string) *Layers { return &Layers{dir: dir} }

// Dir is the directory that holds every layer.
func (l *Layers) Dir() string { return l.dir }

// LayerPaths are the host paths of one sandbox's layer.
type LayerPaths struct {
	Upper, Work, RootFS string
}

// Paths returns the paths of the layer of sandbox id.
func (l *Layers) Paths(id string) LayerPaths {
	d := filepath.Join(l.dir, id)
	return LayerPaths{Upper: filepath.Join(d, "upper"), Work: filepath.Join(d, "work"), RootFS: filepath.Join(d, "rootfs")}
}

// Create makes an empty writable layer for id.
func (l *Layers) Create(id string) error {
	p := l.Paths(id)
	for _, d := range []string{p.Upper, p.Work, p.RootFS} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

const overlayfsMagic = 0x794c7630

// Mounted reports whether id's overlayfs is mounted.
func (l *Layers) Mounted(id string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(l.Paths(id).RootFS, &st); err != nil {
		return false
	}
	return st.Type == overlayfsMagic
}

// Mount mounts id's overlayfs on its rootfs dir with lower (an image's
// root filesystem) as lowerdir; it does nothing when already mounted.
func (l *Layers) Mount(id, lower string) error {
	if l.Mounted(id) {
		return nil
	}
	p := l.Paths(id)
	// index=off: the writable layer is swapped whole by restores, so
	// overlayfs must not keep inode index entries tied to one upperdir.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off", lower, p.Upper, p.Work)
	if err := unix.Mount("overlay", p.RootFS, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay for %s: %w", id, err)
	}
	return nil
}

// Unmount unmounts id's overlayfs (lazily if busy); not mounted is fine.
func (l *Layers) Unmount(id string) error {
	rootfs := l.Paths(id).RootFS
	for l.Mounted(id) {
		err := unix.Unmount(rootfs, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(rootfs, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", rootfs, err)
		}
		if err != nil {
			break
		}
	}
	return nil
}

// Remove unmounts and deletes id's layer directory and everything in it.
func (l *Layers) Remove(id string) error {
	if err := l.Unmount(id); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(l.dir, id))
}
