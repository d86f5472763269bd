package disk

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Layers manages sandboxes' writable layers. A sandbox's layer lives in
// dir/<id>/: upper (the writable layer, plain host files), work (overlayfs's
// work dir) and rootfs, where a host overlayfs (lowerdir = the image,
// upperdir = upper) is mounted and handed to runsc as the bundle root.
type Layers struct {
	dir string

	// btrfs: each layer dir is a subvolume with a quota. image and mnt are
	// the loop image and its mount point ("" when the data dir is btrfs).
	btrfs      bool
	image, mnt string
	// legacyDir holds layers made before btrfs was turned on (plain
	// directories on the data dir's filesystem); legacy lists their ids.
	legacyDir string
	legacy    map[string]bool
	// fallback is why auto mode did not use btrfs.
	fallback string
	// unmounted: no overlayfs, the root filesystem is the upper dir
	// (NewUnmountedLayers, for tests without root).
	unmounted bool
	// growMu serialises growths of the loop image; growErr is the last
	// growth's failure.
	growMu  sync.Mutex
	growErr error

	mu      sync.Mutex
	caches  map[string]cacheFile // id → the capture cache, as last saved
	writeMu sync.Mutex           // one cache file write at a time
}

// NewLayers returns a layer manager rooted at dir (the sandboxes dir).
// Layers made this way are plain directories without a quota
// (OpenLayers makes btrfs ones).
func NewLayers(dir string) *Layers {
	return &Layers{dir: dir, caches: map[string]cacheFile{}, legacy: map[string]bool{}}
}

// NewUnmountedLayers returns plain-directory layers rooted at dir that
// make no mount, for tests that run without root (the engine's fake-runtime
// tier); sbxd never uses them. A layer's root filesystem is its upper dir
// itself: what the sandbox writes lands in the upper dir as it would
// through overlayfs, but the image (the lowerdir) is not part of the root
// filesystem, and nothing overlayfs does (whiteouts, copy-up) happens.
// Mount and Unmount do nothing; Mounted reports whether the layer exists;
// the mark of a swapped restore is the xattr user.sbx.restore (trusted.*
// needs CAP_SYS_ADMIN), so the filesystem must support user xattrs.
func NewUnmountedLayers(dir string) *Layers {
	l := NewLayers(dir)
	l.unmounted = true
	return l
}

// Dir is the directory that holds every new layer.
func (l *Layers) Dir() string { return l.dir }

// base is the directory of id's layer: a subvolume on btrfs.
func (l *Layers) base(id string) string {
	l.mu.Lock()
	old := l.legacy[id]
	l.mu.Unlock()
	if old {
		return filepath.Join(l.legacyDir, id)
	}
	return filepath.Join(l.dir, id)
}

// LayerPaths are the host paths of one sandbox's layer.
type LayerPaths struct {
	Upper, Work, RootFS string
}

// Paths returns the paths of the layer of sandbox id.
func (l *Layers) Paths(id string) LayerPaths {
	d := l.base(id)
	if l.unmounted {
		return LayerPaths{Upper: filepath.Join(d, "upper"), Work: filepath.Join(d, "work"), RootFS: filepath.Join(d, "upper")}
	}
	return LayerPaths{Upper: filepath.Join(d, "upper"), Work: filepath.Join(d, "work"), RootFS: filepath.Join(d, "rootfs")}
}

// Create makes an empty writable layer for id (on btrfs, in a subvolume of
// its own, without a limit until SetQuota). A layer that exists is kept.
func (l *Layers) Create(id string) error {
	if l.btrfs {
		if err := l.ensureRoom(); err != nil {
			l.growMu.Lock()
			l.growErr = err
			l.growMu.Unlock()
		}
		d := l.base(id)
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			if err := createSubvolume(d); err != nil {
				return err
			}
			if err := newLineage(d); err != nil {
				return err
			}
		}
	}
	p := l.Paths(id)
	for _, d := range []string{p.Upper, p.Work, p.RootFS} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

const overlayfsMagic = 0x794c7630

// Mounted reports whether id's overlayfs is mounted (for unmounted
// layers: whether id's upper dir, its root filesystem, exists).
func (l *Layers) Mounted(id string) bool {
	if l.unmounted {
		st, err := os.Stat(l.Paths(id).Upper)
		return err == nil && st.IsDir()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(l.Paths(id).RootFS, &st); err != nil {
		return false
	}
	return st.Type == overlayfsMagic
}

// Mount mounts id's overlayfs on its rootfs dir with lower (an image's
// root filesystem) as lowerdir; it does nothing when already mounted.
func (l *Layers) Mount(id, lower string) error {
	if l.unmounted || l.Mounted(id) {
		return nil
	}
	p := l.Paths(id)
	// index=off: the writable layer is swapped whole by restores, so
	// overlayfs must not keep inode index entries tied to one upperdir.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off", lower, p.Upper, p.Work)
	// nosuid, nodev: a setuid file or a device node in the layer means
	// nothing on the host (runsc alone gives them meaning in the sandbox).
	if err := unix.Mount("overlay", p.RootFS, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount overlay for %s: %w", id, err)
	}
	// overlayfs mounts read-only, with only a kernel log line, when it
	// cannot make its work dir: a layer at its quota (see MountLimited)
	// or a full volume. A sandbox on it would fail every write with EROFS.
	var st unix.Statfs_t
	if err := unix.Statfs(p.RootFS, &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
		_ = l.Unmount(id)
		return fmt.Errorf("mount overlay for %s: %w", id, ErrLayerFull)
	}
	return nil
}

// ErrLayerFull: the overlay of a layer came up read-only because overlayfs
// could not write its work dir (the layer's volume is full).
var ErrLayerFull = errors.New("overlayfs mounted it read-only: no room for its work dir (the layers volume is full)")

// MountLimited mounts id's overlayfs as Mount does, then limits the layer
// to quotaMB MiB (SetQuota; 0: no limit). The limit is lifted while it
// mounts: overlayfs makes its work dir at mount time, and on a layer that
// is at its quota (a guest that filled its disk, then stopped) it would
// mount read-only. Errors: Mount's, SetQuota's.
func (l *Layers) MountLimited(id, lower string, quotaMB int) error {
	if l.btrfs {
		if err := l.SetQuota(id, 0); err != nil {
			return err
		}
	}
	if err := l.Mount(id, lower); err != nil {
		return err
	}
	if !l.btrfs {
		return nil
	}
	return l.SetQuota(id, quotaMB)
}

// Unmount unmounts id's overlayfs (lazily if busy); not mounted is fine.
func (l *Layers) Unmount(id string) error {
	if l.unmounted {
		return nil
	}
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
	l.mu.Lock()
	delete(l.caches, id)
	l.mu.Unlock()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	d := l.base(id)
	l.mu.Lock()
	delete(l.legacy, id)
	l.mu.Unlock()
	if err := l.removeTrashSubvolumes(id); err != nil {
		return err
	}
	if l.btrfs && isSubvolume(d) {
		if err := deleteSubvolume(d); err == nil {
			return nil
		}
		// rmdir of an emptied subvolume works too.
	}
	return os.RemoveAll(d)
}

// cacheFile is what a layer's capture cache file holds: the manifest of
// the layer's last capture or restore, and the inode of the upperdir and
// the lineage of the layer it describes (a restore swaps the upperdir, or
// on btrfs the whole layer, which voids an older cache).
type cacheFile struct {
	UpperIno uint64    `json:"upper_ino"`
	Lineage  string    `json:"lineage,omitempty"`
	Manifest *Manifest `json:"manifest"`
}

// lineageXattr names the lineage of a btrfs layer, on its subvolume's
// root: a random id given when the layer is made and again when a restore
// swaps in a snapshot. Snapshots of the layer carry it. Two states of a
// layer with one lineage are one subvolume at two moments, so a capture
// cache of one may serve the other, later one (captures trust a file
// whose inode, size and times are unchanged: that holds along one
// subvolume's history, not across a restore that brought back an older
// state, nor backwards in time). The guest never sees the subvolume root.
const lineageXattr = "user.sbx.lineage"

// lineageOf is the lineage of the layer or snapshot rooted at dir ("" when
// it has none: plain directory layers, btrfs layers made before lineages).
func lineageOf(dir string) string {
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(dir, lineageXattr, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// newLineage gives the layer rooted at dir a new lineage.
func newLineage(dir string) error {
	var b [12]byte
	_, _ = rand.Read(b[:])
	if err := unix.Lsetxattr(dir, lineageXattr, []byte(hex.EncodeToString(b[:])), 0); err != nil {
		return fmt.Errorf("lineage of %s: %w", dir, err)
	}
	return nil
}

func (l *Layers) cachePath(id string) string { return filepath.Join(l.base(id), "cache.json.zst") }

// LoadCache returns the capture cache of id's layer, or nil if it has none
// that matches its current upperdir. The cache is kept in memory; the file
// is read after a restart of sbxd. A cache is an optimisation: a stale one
// only makes a capture read more (every entry is checked against stat).
func (l *Layers) LoadCache(id string) *Manifest {
	if cf, ok := l.loadCache(id, l.Paths(id).Upper); ok && cf.Lineage == lineageOf(l.base(id)) {
		return cf.Manifest
	}
	return nil
}

// loadCache returns id's cache if it describes the upperdir upper (id's,
// or a snapshot's) by its inode (of any lineage: the caller checks).
func (l *Layers) loadCache(id, upper string) (cacheFile, bool) {
	upperIno, err := statIno(upper)
	if err != nil {
		return cacheFile{}, false
	}
	l.mu.Lock()
	mem, ok := l.caches[id]
	l.mu.Unlock()
	if ok && mem.UpperIno == upperIno {
		return mem, true
	}
	b, err := os.ReadFile(l.cachePath(id))
	if err != nil {
		return cacheFile{}, false
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		return cacheFile{}, false
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(b, nil)
	if err != nil {
		return cacheFile{}, false
	}
	var cf cacheFile
	if json.Unmarshal(raw, &cf) != nil || cf.Manifest == nil {
		return cacheFile{}, false
	}
	if cf.UpperIno != upperIno {
		return cacheFile{}, false
	}
	l.mu.Lock()
	l.caches[id] = cf
	l.mu.Unlock()
	return cf, true
}

// cacheFor returns id's capture cache for a capture of a snapshot (upper
// dir upper, lineage lineage) taken at asOfNS (Unix ns): only a cache of
// the same upper dir and lineage made no later than the snapshot.
func (l *Layers) cacheFor(id, upper, lineage string, asOfNS int64) *Manifest {
	cf, ok := l.loadCache(id, upper)
	if !ok || cf.Lineage != lineage || cf.Manifest.CaptureNS > asOfNS {
		return nil
	}
	return cf.Manifest
}

// SaveCache replaces id's capture cache with m: at once in memory, and in
// its file (atomically) in the background.
func (l *Layers) SaveCache(id string, m *Manifest) error {
	return l.saveCache(id, lineageOf(l.base(id)), m)
}

// Lineage is the lineage of id's layer now ("" on plain directory
// layers): see lineageXattr. Give it back to SaveCacheOf.
func (l *Layers) Lineage(id string) string { return lineageOf(l.base(id)) }

// SaveCacheOf is SaveCache of a manifest that describes id's layer as it
// was when its lineage was lineage (Lineage): it does nothing when a
// restore gave the layer another one since.
func (l *Layers) SaveCacheOf(id, lineage string, m *Manifest) error {
	return l.saveCache(id, lineage, m)
}

// saveCache is SaveCache of a manifest of lineage lineage: nothing when
// id's layer is of another one now (a restore swapped it meanwhile).
func (l *Layers) saveCache(id, lineage string, m *Manifest) error {
	ino, err := statIno(l.Paths(id).Upper)
	if err != nil {
		return err
	}
	if lineageOf(l.base(id)) != lineage {
		return nil
	}
	cf := cacheFile{UpperIno: ino, Lineage: lineage, Manifest: m}
	l.mu.Lock()
	l.caches[id] = cf
	l.mu.Unlock()
	go l.writeCache(id, cf)
	return nil
}

// writeCache writes a cache file unless a newer cache replaced it.
func (l *Layers) writeCache(id string, cf cacheFile) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	cur, ok := l.caches[id]
	l.mu.Unlock()
	if !ok || cur.Manifest != cf.Manifest {
		return
	}
	raw, err := json.Marshal(cf)
	if err != nil {
		return
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return
	}
	b := enc.EncodeAll(raw, nil)
	enc.Close()
	tmp := l.cachePath(id) + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, l.cachePath(id))
	} else {
		os.Remove(tmp)
	}
}

// DropAllCaches forgets every layer's capture cache. After a chunk was
// found missing or corrupt, no cache may vouch for extents that use it: the
// next capture of every layer reads its files again and stores their
// chunks anew.
func (l *Layers) DropAllCaches() {
	l.mu.Lock()
	l.caches = map[string]cacheFile{}
	l.mu.Unlock()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	paths, _ := filepath.Glob(filepath.Join(l.dir, "*", "cache.json.zst"))
	if l.legacyDir != "" {
		old, _ := filepath.Glob(filepath.Join(l.legacyDir, "*", "cache.json.zst"))
		paths = append(paths, old...)
	}
	for _, p := range paths {
		os.Remove(p)
	}
}

// DropCache removes id's capture cache.
func (l *Layers) DropCache(id string) error {
	l.mu.Lock()
	delete(l.caches, id)
	l.mu.Unlock()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	err := os.Remove(l.cachePath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func fsyncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
