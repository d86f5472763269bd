package disk

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Layer modes: where sandboxes' writable layers live.
const (
	// LayersAuto uses btrfs when it can, else a plain directory.
	LayersAuto = "auto"
	// LayersBtrfs keeps each layer in a btrfs subvolume with a quota: on
	// the data dir itself when it is btrfs, else on a loop-mounted image
	// file (DataDir/layers.img at DataDir/volume).
	LayersBtrfs = "btrfs"
	// LayersDir keeps layers as plain directories under DataDir/layers,
	// on the data dir's filesystem, without a disk quota.
	LayersDir = "dir"
)

// LayersConfig says where and how to keep writable layers.
type LayersConfig struct {
	// DataDir is sbxd's data dir.
	DataDir string
	// Mode is LayersAuto (default), LayersBtrfs or LayersDir.
	Mode string
	// ImageBytes is the size of a new loop image (sparse; default
	// DefaultVolumeBytes, at most 90% of the data dir's free space).
	ImageBytes int64
}

// DefaultVolumeBytes is the default size of the sparse loop image that
// holds the layers when the data dir is not on btrfs: 64 GiB, or 90% of the
// data dir's free space when that is less. The sandboxes together cannot
// write more than the image holds.
const DefaultVolumeBytes = 64 << 30

// minVolumeBytes is the smallest loop image worth making (btrfs needs
// ~120 MB for itself).
const minVolumeBytes = 1 << 30

// OpenLayers prepares the layer store of cfg and returns its manager:
// with btrfs it finds, mounts (after a reboot) or makes the volume and
// enables quotas on it. Layers made before btrfs was turned on stay where
// they are (DataDir/layers, plain directories, no quota) until the
// sandbox is deleted or its layer is made again (a resume); new layers go
// to the volume. In LayersAuto mode a failure of btrfs falls back to
// LayersDir; in LayersBtrfs mode it is an error.
func OpenLayers(cfg LayersConfig) (*Layers, error) {
	legacy := filepath.Join(cfg.DataDir, "layers")
	if err := os.MkdirAll(legacy, 0o700); err != nil {
		return nil, err
	}
	// Sandboxes whose layers are on the loop volume need it: a data dir
	// with an image never falls back to plain directories.
	_, err := os.Stat(filepath.Join(cfg.DataDir, "layers.img"))
	hasImage := err == nil
	switch cfg.Mode {
	case "", LayersAuto, LayersBtrfs:
	case LayersDir:
		if hasImage {
			return nil, fmt.Errorf("layers dir: %s holds sandboxes' layers on a btrfs volume (layers.img); use --layers auto or btrfs", cfg.DataDir)
		}
		return NewLayers(legacy), nil
	default:
		return nil, fmt.Errorf("layers %q: want auto, btrfs or dir", cfg.Mode)
	}
	l, err := openBtrfs(cfg, legacy)
	if err != nil {
		if cfg.Mode == LayersBtrfs || hasImage {
			return nil, err
		}
		dl := NewLayers(legacy)
		dl.fallback = err.Error()
		return dl, nil
	}
	return l, nil
}

func openBtrfs(cfg LayersConfig, legacy string) (*Layers, error) {
	if isBtrfs(cfg.DataDir) {
		// The data dir is btrfs: layers are subvolumes in DataDir/layers.
		if err := enableQuota(cfg.DataDir); err != nil {
			return nil, err
		}
		l := NewLayers(legacy)
		l.btrfs = true
		return l, nil
	}
	mnt := filepath.Join(cfg.DataDir, "volume")
	img := filepath.Join(cfg.DataDir, "layers.img")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, err
	}
	if !mountedAt(mnt) {
		if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
			if err := makeImage(cfg, img); err != nil {
				os.Remove(img)
				return nil, err
			}
		} else if err != nil {
			return nil, err
		}
		// mount(8) sets up the loop device with autoclear: it goes with
		// the last unmount.
		if out, err := exec.Command("mount", "-t", "btrfs", "-o", "loop,noatime,nosuid,nodev,discard=async", img, mnt).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("mount %s: %v: %s", img, err, strings.TrimSpace(string(out)))
		}
	}
	if !isBtrfs(mnt) {
		return nil, fmt.Errorf("%s is mounted but not btrfs", mnt)
	}
	if err := enableQuota(mnt); err != nil {
		return nil, err
	}
	dir := filepath.Join(mnt, "layers")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	l := NewLayers(dir)
	l.btrfs, l.image, l.mnt = true, img, mnt
	l.legacyDir = legacy
	des, err := os.ReadDir(legacy)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		if de.IsDir() {
			l.legacy[de.Name()] = true
		}
	}
	return l, nil
}

// makeImage creates the sparse loop image and makes a btrfs in it.
func makeImage(cfg LayersConfig, img string) error {
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		return errors.New("mkfs.btrfs not found: install btrfs-progs (scripts/install.sh does)")
	}
	size := cfg.ImageBytes
	if size == 0 {
		size = DefaultVolumeBytes
		var st unix.Statfs_t
		if err := unix.Statfs(cfg.DataDir, &st); err == nil {
			if free := int64(st.Bavail) * st.Bsize / 10 * 9; free < size {
				size = free
			}
		}
	}
	if size < minVolumeBytes {
		return fmt.Errorf("layers image: %d bytes free on %s, need at least %d", size, cfg.DataDir, minVolumeBytes)
	}
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if out, err := exec.Command("mkfs.btrfs", "-q", "-L", "sbx-layers", img).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.btrfs %s: %v: %s", img, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountedAt reports whether something is mounted on dir (per
// /proc/self/mountinfo).
func mountedAt(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == dir {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + c - '0'
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Kind is "btrfs" when layers are btrfs subvolumes with quotas, else "dir".
func (l *Layers) Kind() string {
	if l.btrfs {
		return LayersBtrfs
	}
	return LayersDir
}

// Quota reports whether layers get a disk quota (SetQuota works).
func (l *Layers) Quota() bool { return l.btrfs }

// Fallback is why btrfs was not used in auto mode ("" when it is, or was
// not asked for).
func (l *Layers) Fallback() string { return l.fallback }

// Capacity is the size in bytes of the filesystem the layers live on
// (the loop image, or the data dir's filesystem).
func (l *Layers) Capacity() int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(l.dir, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * st.Bsize
}

// ErrNoQuota is returned by SetQuota with a limit when layers are plain
// directories.
var ErrNoQuota = errors.New("disk quotas need btrfs layers (sbxd --layers btrfs)")

// SetQuota limits what sandbox id's layer may hold to mb MiB (its upper and
// work dirs, and a restore's layer while it is built); 0 removes the limit.
// Past it, writes in the sandbox fail with EDQUOT. A layer made before
// btrfs was turned on has no quota: SetQuota does nothing to it.
func (l *Layers) SetQuota(id string, mb int) error {
	if !l.btrfs {
		if mb == 0 {
			return nil
		}
		return ErrNoQuota
	}
	p := l.base(id)
	if !isSubvolume(p) {
		return nil
	}
	return limitSubvolume(p, int64(mb)<<20)
}

// IDs lists the sandbox ids that have a layer.
func (l *Layers) IDs() ([]string, error) {
	var out []string
	for _, d := range []string{l.dir, l.legacyDir} {
		if d == "" {
			continue
		}
		des, err := os.ReadDir(d)
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			if !isRestoreSubvolume(de.Name()) {
				out = append(out, de.Name())
			}
		}
	}
	return out, nil
}

// Growth of the loop image: when a layer is made and the volume has less
// than growFreeBytes (or a tenth of its size) free, the image grows by
// growStepBytes (or half its size), while the data dir's filesystem keeps
// a tenth of its free space.
const (
	growFreeBytes = 2 << 30
	growStepBytes = 8 << 30
)

// ensureRoom grows the loop image when the volume runs low (see
// growFreeBytes). It does nothing on a btrfs data dir (the layers share
// its space) and is best-effort: a volume that cannot grow still works,
// and a guest past its free space gets ENOSPC inside its sandbox.
func (l *Layers) ensureRoom() error {
	if l.image == "" {
		return nil
	}
	l.growMu.Lock()
	defer l.growMu.Unlock()
	var vst unix.Statfs_t
	if err := unix.Statfs(l.mnt, &vst); err != nil {
		return err
	}
	fi, err := os.Stat(l.image)
	if err != nil {
		return err
	}
	size := fi.Size()
	free := int64(vst.Bavail) * vst.Bsize
	if free >= growFreeBytes && free >= size/10 {
		return nil
	}
	var hst unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(l.image), &hst); err != nil {
		return err
	}
	step := max(int64(growStepBytes), size/2)
	if room := int64(hst.Bavail) * hst.Bsize / 10 * 9; step > room {
		step = room
	}
	if step < 256<<20 {
		return fmt.Errorf("layers volume: %d bytes free and the data dir has no room to grow it", free)
	}
	return growImage(l.image, l.mnt, size+step)
}

// growImage makes the image file size bytes long (sparse), tells its loop
// device and lets btrfs use the new space.
func growImage(img, mnt string, size int64) error {
	if err := os.Truncate(img, size); err != nil {
		return err
	}
	dev, err := loopDevice(img)
	if err != nil {
		return err
	}
	if out, err := exec.Command("losetup", "-c", dev).CombinedOutput(); err != nil {
		return fmt.Errorf("losetup -c %s: %v: %s", dev, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("btrfs", "filesystem", "resize", "max", mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("btrfs filesystem resize max %s: %v: %s", mnt, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// loopDevice is the loop device backed by img.
func loopDevice(img string) (string, error) {
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == img {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(p))), nil
		}
	}
	return "", fmt.Errorf("no loop device backs %s", img)
}

// GrowError is the last failure to grow the loop image, nil if none.
func (l *Layers) GrowError() error {
	l.growMu.Lock()
	defer l.growMu.Unlock()
	return l.growErr
}

// VolumePath is the host directory of the named volume whose directory
// before btrfs layers was legacy: legacy itself when it exists or when the
// layers are plain directories, else a subvolume beside the layers
// (VOLUME/volumes/<name>).
func (l *Layers) VolumePath(name, legacy string) string {
	if !l.btrfs {
		return legacy
	}
	if fi, err := os.Lstat(legacy); err == nil && fi.IsDir() {
		return legacy
	}
	return filepath.Join(filepath.Dir(l.dir), "volumes", name)
}

// MakeVolume makes the named volume's directory (VolumePath) if it is
// missing. On btrfs it is a subvolume with a quota of quotaMB MiB (0: none),
// so that a guest cannot fill the host's disk through a volume; a legacy
// volume keeps no quota. Errors come from mkdir and the btrfs ioctls.
func (l *Layers) MakeVolume(name, legacy string, quotaMB int) error {
	p := l.VolumePath(name, legacy)
	if p == legacy {
		return os.MkdirAll(p, 0o755)
	}
	if isSubvolume(p) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	if err := createSubvolume(p); err != nil {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		return err
	}
	if quotaMB > 0 {
		if err := limitSubvolume(p, int64(quotaMB)<<20); err != nil {
			_ = deleteSubvolume(p)
			return fmt.Errorf("volume %s: quota: %w", name, err)
		}
	}
	return nil
}
