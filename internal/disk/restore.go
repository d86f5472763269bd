package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"time"

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
// xattrs and times. On error Dst is left for the caller to remove.
func Materialize(ctx context.Context, o MaterializeOptions) (*MaterializeStats, error) {
	start := time.Now()
	stats := &MaterializeStats{}
	cur := map[string]*Entry{}
	if o.CurrentCache != nil && o.Current != "" {
		for i := range o.CurrentCache.Entries {
			e := &o.CurrentCache.Entries[i]
			if e.Type == TypeFile {
				cur[e.Path] = e
			}
		}
	}
	cc := newChunkCache(o.Store, 64<<20)
	var dirs []*Entry
	for i := range o.Target.Entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e := &o.Target.Entries[i]
		p := filepath.Join(o.Dst, e.Path)
		if e.Path == "" {
			if err := applyMeta(p, e, false); err != nil {
				return nil, err
			}
			dirs = append(dirs, e)
			continue
		}
		var err error
		switch e.Type {
		case TypeDir:
			err = os.Mkdir(p, 0o700)
			if err == nil {
				dirs = append(dirs, e)
				err = applyMeta(p, e, false)
			}
		case TypeFile:
			stats.Files++
			if c := cur[e.Path]; c != nil && reusable(o.Current, c, e) {
				if err = os.Link(filepath.Join(o.Current, e.Path), p); err == nil {
					stats.LinkedFiles++
					continue
				}
			}
			if c := cur[e.Path]; c != nil && e.Size >= patchMin && unchanged(o.Current, c) {
				var n int64
				if n, err = patchFile(ctx, cc, filepath.Join(o.Current, e.Path), p, c, e); err == nil {
					stats.PatchedFiles++
					stats.WrittenBytes += n
					err = applyMeta(p, e, true)
				}
				break
			}
			err = writeFile(ctx, cc, p, e)
			if err == nil {
				stats.WrittenFiles++
				stats.WrittenBytes += e.Size
				err = applyMeta(p, e, true)
			}
		case TypeSymlink:
			err = os.Symlink(e.Target, p)
			if err == nil {
				err = applyMeta(p, e, true)
			}
		case TypeHardlink:
			err = os.Link(filepath.Join(o.Dst, e.Target), p)
		case TypeWhiteout, TypeChar, TypeBlock, TypeFifo:
			mode := uint32(unix.S_IFCHR)
			switch e.Type {
			case TypeBlock:
				mode = unix.S_IFBLK
			case TypeFifo:
				mode = unix.S_IFIFO
			}
			err = unix.Mknod(p, mode|e.Mode&0o7777, int(e.Rdev))
			if err == nil {
				err = applyMeta(p, e, true)
			}
		case TypeSocket:
			// A socket is a rendezvous of running processes; a restored disk
			// has none.
		default:
			err = fmt.Errorf("unknown entry type %q", e.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w", e.Path, err)
		}
	}
	// Directory times last, deepest first: creating entries moves them.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := setTimes(filepath.Join(o.Dst, d.Path), d.MtimeNS); err != nil {
			return nil, err
		}
	}
	stats.Duration = time.Since(start)
	return stats, nil
}

// Rescan describes the layer at upper, built from target by Materialize,
// as a capture cache: target's extents with the inodes and ctimes the files
// have now. Call it once nothing else links to the layer's inodes (a link
// count change moves ctime).
func Rescan(upper string, target *Manifest) (*Manifest, error) {
	built, err := scan(upper, noKnownXattrs)
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

// unchanged reports whether the current layer's file still matches its
// cache entry c.
func unchanged(current string, c *Entry) bool {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(current, c.Path), &st); err != nil {
		return false
	}
	now := Entry{Ino: st.Ino, Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && sameStat(c, &now)
}

// patchFile builds dst as target t from the current file src (whose
// extents are c's): a kernel copy of src, then only the extents of t that
// src does not have at the same offset are written from chunks. It returns
// the bytes written from chunks.
func patchFile(ctx context.Context, cc *chunkCache, src, dst string, c, t *Entry) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
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
	return written, out.Close()
}

// reusable reports whether the current layer's file c (per its cache
// entry) can be linked as target t: same content and metadata, and the
// file has not changed since the cache saw it.
func reusable(current string, c, t *Entry) bool {
	if c.Size != t.Size || c.Mode != t.Mode || c.UID != t.UID || c.GID != t.GID || c.MtimeNS != t.MtimeNS ||
		len(c.Extents) != len(t.Extents) || !maps.EqualFunc(c.Xattrs, t.Xattrs, bytes.Equal) {
		return false
	}
	for i := range c.Extents {
		if c.Extents[i] != t.Extents[i] {
			return false
		}
	}
	return unchanged(current, c)
}

// writeFile creates p with e's content; all-zero chunks become holes.
func writeFile(ctx context.Context, cc *chunkCache, p string, e *Entry) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	var off int64
	for _, x := range e.Extents {
		raw, err := cc.get(ctx, x.Chunk)
		if err != nil {
			f.Close()
			return err
		}
		if x.Off+x.Len > int64(len(raw)) {
			f.Close()
			return fmt.Errorf("extent %s[%d:+%d] beyond the chunk's %d bytes: %w", x.Chunk, x.Off, x.Len, len(raw), blob.ErrCorrupt)
		}
		part := raw[x.Off : x.Off+x.Len]
		if !allZero(part) {
			if _, err := f.WriteAt(part, off); err != nil {
				f.Close()
				return err
			}
		}
		off += x.Len
	}
	if off != e.Size {
		f.Close()
		return fmt.Errorf("extents give %d bytes, want %d: %w", off, e.Size, blob.ErrCorrupt)
	}
	if err := f.Truncate(e.Size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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

// applyMeta sets owner, mode, xattrs and (unless dirTimesLater) times.
func applyMeta(p string, e *Entry, setTime bool) error {
	if err := os.Lchown(p, e.UID, e.GID); err != nil {
		return err
	}
	for k, v := range e.Xattrs {
		if err := unix.Lsetxattr(p, k, v, 0); err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("setxattr %s on %s: %w", k, e.Path, err)
		}
	}
	if e.Type != TypeSymlink {
		// After chown, which clears setuid and setgid.
		if err := unix.Chmod(p, e.Mode&0o7777); err != nil {
			return err
		}
	}
	if setTime {
		return setTimes(p, e.MtimeNS)
	}
	return nil
}

func setTimes(p string, mtimeNS int64) error {
	ts := []unix.Timespec{unix.NsecToTimespec(mtimeNS), unix.NsecToTimespec(mtimeNS)}
	err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
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
