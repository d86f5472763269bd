package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/internal/blob"
)

// MaterializeOptions are the inputs of Materialize.
type MaterializeOptions struct {
	// Target is the manifest to build.
	Target *Manifest
	// Dst is a new, empty directory to build it in.
	Dst string
	// Current, with CurrentCache, lets unchanged files be hard-linked from
	// the current upperdir instead of written: a file is linked when the
	// cache says it holds the target's extents with the target's metadata
	// and its stat still matches the cache. Linking changes nothing the
	// sandbox can see in the current upperdir.
	Current      string
	CurrentCache *Manifest
	Store        blob.Store
	Progress     func(string)
}

// MaterializeStats reports what a materialization did.
type MaterializeStats struct {
	Files       int
	LinkedFiles int
	// PatchedFiles were copied from the current layer in the kernel
	// (copy_file_range) and only their changed extents written.
	PatchedFiles int
	WrittenFiles int
	// WrittenBytes came from the blob store.
	WrittenBytes int64
	Duration     time.Duration
}

// Materialize builds the writable layer of Target in Dst: directories,
// files (from chunks, or hard-linked from the current layer when
// unchanged), symlinks, hard links, whiteouts, devices, owners, modes,
// xattrs and times. Holes stay holes. Every entry is made beneath Dst's
// directory fd (mkdirat, openat with O_EXCL|O_NOFOLLOW, symlinkat,
// linkat), and owners, modes, xattrs and times are set on fds or with
// AT_SYMLINK_NOFOLLOW, never through a path that could lead elsewhere;
// the current layer is read the same way. On error Dst is left for the
// caller to remove; errors name paths as the sandbox sees them.
func Materialize(ctx context.Context, o MaterializeOptions) (*MaterializeStats, error) {
	start := time.Now()
	stats := &MaterializeStats{}
	cur := map[string]*Entry{}
	dfd, err := openRoot(o.Dst)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	var curDirs *dirStack
	if o.CurrentCache != nil && o.Current != "" {
		if cfd, err := openRoot(o.Current); err == nil {
			defer unix.Close(cfd)
			curDirs = newDirStack(cfd)
			defer curDirs.close()
			for i := range o.CurrentCache.Entries {
				e := &o.CurrentCache.Entries[i]
				if e.Type == TypeFile {
					cur[e.Path] = e
				}
			}
		}
	}
	cc := newChunkCache(o.Store, 64<<20)
	dirMeta := map[string]*Entry{}
	made := map[string]bool{}
	dst := newDirStack(dfd)
	// Directory times when the walk leaves a directory: making entries in
	// it moved them.
	dst.onPop = func(rel string, fd int) error {
		if e := dirMeta[rel]; e != nil {
			return futimens(fd, e.MtimeNS)
		}
		return nil
	}
	defer dst.close()
	for i := range o.Target.Entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e := &o.Target.Entries[i]
		if e.Path == "" {
			if err := applyMeta(dfd, e, false); err != nil {
				return nil, fmt.Errorf("restore /: %w", err)
			}
			dirMeta[""] = e
			continue
		}
		if made[e.Path] {
			continue // a manifest may name a path twice (a listing raced a rename)
		}
		made[e.Path] = true
		if err := materializeOne(ctx, o, e, dst, curDirs, cur, cc, stats); err != nil {
			return nil, fmt.Errorf("restore %s: %w", shown(e.Path), err)
		}
		if e.Type == TypeDir {
			dirMeta[e.Path] = e
		}
	}
	if err := dst.close(); err != nil {
		return nil, fmt.Errorf("restore: directory times: %w", err)
	}
	if e := dirMeta[""]; e != nil {
		if err := futimens(dfd, e.MtimeNS); err != nil {
			return nil, fmt.Errorf("restore /: %w", err)
		}
	}
	stats.Duration = time.Since(start)
	return stats, nil
}

// materializeOne makes entry e beneath dst.
func materializeOne(ctx context.Context, o MaterializeOptions, e *Entry, dst, curDirs *dirStack, cur map[string]*Entry, cc *chunkCache, stats *MaterializeStats) error {
	parent, name := splitParent(e.Path)
	if _, err := splitRel(e.Path); err != nil {
		return err
	}
	pfd, err := dst.dir(parent)
	if err != nil {
		return err
	}
	switch e.Type {
	case TypeDir:
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			return err
		}
		fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|openFlags, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return applyMeta(fd, e, false)
	case TypeFile:
		stats.Files++
		c := cur[e.Path]
		cpfd := -1
		if c != nil && curDirs != nil {
			if fd, err := curDirs.dir(parent); err == nil {
				cpfd = fd
			}
		}
		if cpfd >= 0 && reusable(cpfd, name, c, e) {
			if err := unix.Linkat(cpfd, name, pfd, name, 0); err == nil {
				stats.LinkedFiles++
				return nil
			}
		}
		if cpfd >= 0 && e.Size >= patchMin && !hasHoles(c) && !hasHoles(e) && unchanged(cpfd, name, c) {
			n, err := patchFile(ctx, cc, cpfd, pfd, name, c, e)
			if err != nil {
				return err
			}
			stats.PatchedFiles++
			stats.WrittenBytes += n
			return nil
		}
		n, err := writeFile(ctx, cc, pfd, name, e)
		if err != nil {
			return err
		}
		stats.WrittenFiles++
		stats.WrittenBytes += n
		return nil
	case TypeSymlink:
		if err := unix.Symlinkat(e.Target, pfd, name); err != nil {
			return err
		}
		return applyMetaAt(pfd, name, e, false)
	case TypeHardlink:
		tparts, err := splitRel(e.Target)
		if err != nil || len(tparts) == 0 {
			return fmt.Errorf("hard link to %q: not a layer path", e.Target)
		}
		tpfd, err := openDirWalk(dst.root, tparts[:len(tparts)-1])
		if err != nil {
			return err
		}
		defer unix.Close(tpfd)
		return unix.Linkat(tpfd, tparts[len(tparts)-1], pfd, name, 0)
	case TypeWhiteout, TypeChar, TypeBlock, TypeFifo:
		mode := uint32(unix.S_IFCHR)
		switch e.Type {
		case TypeBlock:
			mode = unix.S_IFBLK
		case TypeFifo:
			mode = unix.S_IFIFO
		}
		if err := unix.Mknodat(pfd, name, mode|e.Mode&0o7777, int(e.Rdev)); err != nil {
			return err
		}
		return applyMetaAt(pfd, name, e, true)
	case TypeSocket:
		// A socket is a rendezvous of running processes; a restored disk
		// has none.
		return nil
	default:
		return fmt.Errorf("unknown entry type %q", e.Type)
	}
}

// hasHoles reports whether a file entry has hole extents.
func hasHoles(e *Entry) bool {
	for _, x := range e.Extents {
		if x.Chunk == "" {
			return true
		}
	}
	return false
}

// Rescan describes the layer at upper, built from target by Materialize,
// as a capture cache: target's extents with the inodes and ctimes the files
// have now. Call it once nothing else links to the layer's inodes (a link
// count change moves ctime).
func Rescan(upper string, target *Manifest) (*Manifest, error) {
	built, err := scan(context.Background(), upper, noKnownXattrs)
	if err != nil {
		return nil, err
	}
	byPath := map[string]*Entry{}
	for i := range target.Entries {
		if e := &target.Entries[i]; e.Type == TypeFile {
			byPath[e.Path] = e
		}
	}
	m := &Manifest{Version: ManifestVersion, CaptureNS: time.Now().UnixNano()}
	for _, s := range built {
		e := s.e
		if t := byPath[e.Path]; t != nil && e.Type == TypeFile {
			e.Extents, e.Sum = t.Extents, t.Sum
		}
		m.Entries = append(m.Entries, e)
	}
	return m, nil
}

// patchMin is the size from which a changed file is restored by patching
// a copy of its current version rather than writing it whole.
const patchMin = 4 << 20

// unchanged reports whether the current layer's file name in the
// directory open as dirfd still matches its cache entry c.
func unchanged(dirfd int, name string, c *Entry) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	now := Entry{Ino: st.Ino, Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && sameStat(c, &now)
}

// patchFile builds name in dstfd as target t from the current file name
// in srcfd (whose extents are c's): a kernel copy of it, then only the
// extents of t that it does not have at the same offset are written from
// chunks. It returns the bytes written from chunks.
func patchFile(ctx context.Context, cc *chunkCache, srcfd, dstfd int, name string, c, t *Entry) (int64, error) {
	ifd, err := unix.Openat(srcfd, name, unix.O_RDONLY|unix.O_NONBLOCK|openFlags, 0)
	if err != nil {
		return 0, err
	}
	in := os.NewFile(uintptr(ifd), name)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(ifd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("current file is not a regular file")
	}
	ofd, err := unix.Openat(dstfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|openFlags, 0o600)
	if err != nil {
		return 0, err
	}
	out := os.NewFile(uintptr(ofd), name)
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil { // copy_file_range on Linux
		return 0, err
	}
	type at struct {
		off int64
		x   Extent
	}
	have := map[at]bool{}
	var off int64
	for _, x := range c.Extents {
		have[at{off, x}] = true
		off += x.Len
	}
	var written int64
	off = 0
	for _, x := range t.Extents {
		if !have[at{off, x}] {
			raw, err := cc.get(ctx, x.Chunk)
			if err != nil {
				return 0, err
			}
			if x.Off+x.Len > int64(len(raw)) {
				return 0, fmt.Errorf("extent %s[%d:+%d] beyond the chunk's %d bytes: %w", x.Chunk, x.Off, x.Len, len(raw), blob.ErrCorrupt)
			}
			if _, err := out.WriteAt(raw[x.Off:x.Off+x.Len], off); err != nil {
				return 0, err
			}
			written += x.Len
		}
		off += x.Len
	}
	if off != t.Size {
		return 0, fmt.Errorf("extents give %d bytes, want %d: %w", off, t.Size, blob.ErrCorrupt)
	}
	if err := out.Truncate(t.Size); err != nil {
		return 0, err
	}
	if err := applyMeta(ofd, t, true); err != nil {
		return 0, err
	}
	return written, out.Close()
}

// reusable reports whether the current layer's file name in dirfd (c, per
// its cache entry) can be linked as target t: same content and metadata,
// and the file has not changed since the cache saw it.
func reusable(dirfd int, name string, c, t *Entry) bool {
	if c.Size != t.Size || c.Mode != t.Mode || c.UID != t.UID || c.GID != t.GID || c.MtimeNS != t.MtimeNS ||
		len(c.Extents) != len(t.Extents) || !maps.EqualFunc(c.Xattrs, t.Xattrs, bytes.Equal) {
		return false
	}
	for i := range c.Extents {
		if c.Extents[i] != t.Extents[i] {
			return false
		}
	}
	return unchanged(dirfd, name, c)
}

// writeFile creates name in dirfd with e's content and metadata; hole
// extents and all-zero chunks become holes. It returns the bytes written.
func writeFile(ctx context.Context, cc *chunkCache, dirfd int, name string, e *Entry) (int64, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|openFlags, 0o600)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var off, written int64
	for _, x := range e.Extents {
		if x.Chunk == "" {
			off += x.Len // a hole
			continue
		}
		raw, err := cc.get(ctx, x.Chunk)
		if err != nil {
			return 0, err
		}
		if x.Off < 0 || x.Len < 0 || x.Off+x.Len > int64(len(raw)) {
			return 0, fmt.Errorf("extent %s[%d:+%d] beyond the chunk's %d bytes: %w", x.Chunk, x.Off, x.Len, len(raw), blob.ErrCorrupt)
		}
		part := raw[x.Off : x.Off+x.Len]
		if !allZero(part) {
			if _, err := f.WriteAt(part, off); err != nil {
				return 0, err
			}
			written += x.Len
		}
		off += x.Len
	}
	if off != e.Size {
		return 0, fmt.Errorf("extents give %d bytes, want %d: %w", off, e.Size, blob.ErrCorrupt)
	}
	if err := f.Truncate(e.Size); err != nil {
		return 0, err
	}
	if err := applyMeta(fd, e, true); err != nil {
		return 0, err
	}
	return written, f.Close()
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// applyMeta sets owner, xattrs, mode and (with setTime) times on the file
// or directory open as fd.
func applyMeta(fd int, e *Entry, setTime bool) error {
	if err := unix.Fchown(fd, e.UID, e.GID); err != nil {
		return err
	}
	for k, v := range e.Xattrs {
		if err := unix.Fsetxattr(fd, k, v, 0); err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("setxattr %s: %w", k, err)
		}
	}
	// After chown, which clears setuid and setgid.
	if err := unix.Fchmod(fd, e.Mode&0o7777); err != nil {
		return err
	}
	if setTime {
		return futimens(fd, e.MtimeNS)
	}
	return nil
}

// applyMetaAt sets owner, xattrs, mode (with chmod; not for symlinks) and
// times on name in dirfd, a symlink or a node that must not be opened,
// without following it.
func applyMetaAt(dirfd int, name string, e *Entry, chmod bool) error {
	if err := unix.Fchownat(dirfd, name, e.UID, e.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	p := procPath(dirfd, name)
	for k, v := range e.Xattrs {
		if err := unix.Lsetxattr(p, k, v, 0); err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("setxattr %s: %w", k, err)
		}
	}
	if chmod {
		// An O_PATH fd pins the node without opening it; chmod through its
		// /proc link changes exactly that inode.
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|openFlags, 0)
		if err != nil {
			return err
		}
		err = unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), e.Mode&0o7777, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNS), unix.NsecToTimespec(e.MtimeNS)}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// futimens sets the access and modification times of the file open as fd.
func futimens(fd int, mtimeNS int64) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(mtimeNS), unix.NsecToTimespec(mtimeNS)}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// chunkCache keeps recently used decoded chunks (small files share them).
type chunkCache struct {
	st    blob.Store
	max   int64
	size  int64
	order []blob.Digest
	m     map[blob.Digest][]byte
}

func newChunkCache(st blob.Store, max int64) *chunkCache {
	return &chunkCache{st: st, max: max, m: map[blob.Digest][]byte{}}
}

func (c *chunkCache) get(ctx context.Context, d blob.Digest) ([]byte, error) {
	if b, ok := c.m[d]; ok {
		return b, nil
	}
	b, err := blob.GetRaw(ctx, c.st, d)
	if err != nil {
		return nil, err
	}
	for c.size+int64(len(b)) > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.size -= int64(len(c.m[old]))
		delete(c.m, old)
	}
	c.m[d] = b
	c.order = append(c.order, d)
	c.size += int64(len(b))
	return b, nil
}
