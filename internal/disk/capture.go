package disk

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/internal/blob"
)

// racyWindow: file times come from a coarse clock (a jiffy, 1–10 ms), so a
// write within this long of a capture can leave the times a capture saw
// unchanged. A file whose mtime or ctime is that close to the moment it was
// read is read again, like git's "racily clean" entries.
const racyWindow = 20 * time.Millisecond

// CaptureOptions are the inputs of Capture.
type CaptureOptions struct {
	// Upper is the writable layer's directory (the overlayfs upperdir).
	Upper string
	// Cache describes the layer as it was at its last capture or restore
	// (nil: read every file). A file whose inode, size, mtime and ctime
	// are unchanged reuses its extents without being read.
	Cache *Manifest
	// Freeze stops every writer of Upper and Thaw lets them go on (the
	// sandbox's processes); both nil when the sandbox is stopped.
	Freeze, Thaw func(ctx context.Context) error
	// Store receives the chunks; nil hashes without storing (a dry run,
	// for diffs against the live disk).
	Store blob.Store
	// Progress gets human-readable lines.
	Progress func(string)
	// MaxBytes bounds the bytes of file data a capture reads, both passes
	// together (holes are not read and do not count); more is ErrTooLarge.
	// 0: no bound. The time a capture may take is ctx's.
	MaxBytes int64
	// Still says that nothing writes Upper (a read-only btrfs snapshot):
	// one walk is enough, without Freeze and Thaw. AsOfNS (Unix ns) is
	// then the moment the layer became still, no later than its snapshot
	// was taken; the manifest's CaptureNS is that moment, so that a later
	// capture of the live layer with it as cache reads again every file
	// written too close to it to tell (see racyWindow).
	Still  bool
	AsOfNS int64
}

// CaptureStats reports what a capture did.
type CaptureStats struct {
	Files, Dirs   int
	Bytes         int64 // logical bytes of all files
	ReadFiles     int   // distinct files read (the rest reused their extents)
	ReadBytes     int64 // bytes read, a file read twice counting twice
	AddedBytes    int64 // encoded bytes newly written to the store
	Chunks        []blob.Digest
	FrozenFor     time.Duration
	TotalDuration time.Duration
}

// Capture records the writable layer at Upper as a manifest, storing the
// content of new and changed files as chunks. The view is crash-consistent
// for a running sandbox: a first pass reads what changed while the sandbox
// runs; then the sandbox is frozen, the tree is walked again, and only the
// files that changed meanwhile (or too recently to tell) are read before it
// is thawed. So the sandbox is frozen for a walk of the tree's metadata plus
// the writes it made during the first pass — not for the whole capture.
// A still layer (CaptureOptions.Still: a read-only snapshot) is walked
// once.
//
// The returned chunks (Stats.Chunks) are put but not flushed: the caller
// flushes them with the manifest before recording it.
func Capture(ctx context.Context, o CaptureOptions) (*Manifest, *CaptureStats, error) {
	start := time.Now()
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	cache := map[string]*Entry{}
	var cacheNS int64
	if o.Cache != nil {
		cacheNS = o.Cache.CaptureNS
		for i := range o.Cache.Entries {
			e := &o.Cache.Entries[i]
			cache[e.Path] = e
		}
	}
	known := func(rel string, ino uint64, ctimeNS int64) (map[string][]byte, bool) {
		c := cache[rel]
		if c == nil || c.Type == TypeHardlink || c.Ino != ino || c.CtimeNS != ctimeNS || racy(c, cacheNS) {
			return nil, false
		}
		return c.Xattrs, true
	}
	stats := &CaptureStats{}
	dry := o.Store == nil
	chunkSet := map[blob.Digest]bool{}
	addChunks := func(cs []blob.Chunk) {
		for _, c := range cs {
			stats.AddedBytes += c.Added
			if !chunkSet[c.Digest] {
				chunkSet[c.Digest] = true
				stats.Chunks = append(stats.Chunks, c.Digest)
			}
		}
	}

	// Pass 1, live: read what changed since the cache.
	pass1Start := time.Now().UnixNano()
	scan1, err := scan(ctx, o.Upper, known)
	if err != nil {
		return nil, nil, err
	}
	extents := map[string][]Extent{} // path → extents valid for scan1's stat
	sums := map[string]string{}
	var toRead []*scanned
	for _, s := range scan1 {
		if s.e.Type != TypeFile {
			continue
		}
		if c := cache[s.e.Path]; c != nil && c.Type == TypeFile && sameStat(c, &s.e) && !racy(c, cacheNS) {
			extents[s.e.Path] = c.Extents
			sums[s.e.Path] = c.Sum
			continue
		}
		toRead = append(toRead, s)
	}
	if len(toRead) > 0 {
		progress(fmt.Sprintf("reading %d changed files", len(toRead)))
		res, err := readFiles(ctx, o.Upper, toRead, o.Store, dry, o.MaxBytes, stats.ReadBytes)
		if err != nil {
			return nil, nil, err
		}
		addChunks(res.chunks)
		for p, ext := range res.extents {
			extents[p] = ext
			sums[p] = res.sums[p]
		}
		stats.ReadBytes += res.bytes
	}
	pass1 := map[string]*scanned{}
	for _, s := range scan1 {
		pass1[s.e.Path] = s
	}

	if o.Still {
		return finish(o.AsOfNS, scan1, toRead, nil, extents, sums, stats, start)
	}

	// Pass 2, frozen: walk again; read what changed during pass 1.
	frozenAt := time.Now()
	if o.Freeze != nil {
		if err := o.Freeze(ctx); err != nil {
			return nil, nil, fmt.Errorf("freeze: %w", err)
		}
	}
	thawed := false
	thaw := func() error {
		if thawed || o.Thaw == nil {
			return nil
		}
		thawed = true
		err := o.Thaw(context.WithoutCancel(ctx))
		stats.FrozenFor = time.Since(frozenAt)
		return err
	}
	defer thaw()
	captureNS := time.Now().UnixNano()
	scan2, err := scan(ctx, o.Upper, known)
	if err != nil {
		return nil, nil, err
	}
	var reread []*scanned
	for _, s := range scan2 {
		if s.e.Type != TypeFile {
			continue
		}
		p1 := pass1[s.e.Path]
		if _, ok := extents[s.e.Path]; ok && p1 != nil && sameStat(&p1.e, &s.e) && !racy(&s.e, pass1Start) {
			continue
		}
		if c := cache[s.e.Path]; c != nil && c.Type == TypeFile && sameStat(c, &s.e) && !racy(c, cacheNS) {
			extents[s.e.Path] = c.Extents
			sums[s.e.Path] = c.Sum
			continue
		}
		delete(extents, s.e.Path)
		reread = append(reread, s)
	}
	if len(reread) > 0 {
		res, err := readFiles(ctx, o.Upper, reread, o.Store, dry, o.MaxBytes, stats.ReadBytes)
		if err != nil {
			return nil, nil, err
		}
		addChunks(res.chunks)
		for p, ext := range res.extents {
			extents[p] = ext
			sums[p] = res.sums[p]
		}
		stats.ReadBytes += res.bytes
	}
	if err := thaw(); err != nil {
		return nil, nil, fmt.Errorf("thaw: %w", err)
	}
	return finish(captureNS, scan2, toRead, reread, extents, sums, stats, start)
}

// finish builds a capture's manifest from its last walk (scan) and the
// extents and sums of its files.
func finish(captureNS int64, scan []*scanned, toRead, reread []*scanned, extents map[string][]Extent, sums map[string]string, stats *CaptureStats, start time.Time) (*Manifest, *CaptureStats, error) {
	read := map[string]bool{}
	for _, s := range toRead {
		read[s.e.Path] = true
	}
	for _, s := range reread {
		read[s.e.Path] = true
	}
	stats.ReadFiles = len(read)
	m := &Manifest{Version: ManifestVersion, CaptureNS: captureNS, Entries: make([]Entry, 0, len(scan))}
	for _, s := range scan {
		e := s.e
		switch e.Type {
		case TypeFile:
			e.Extents = extents[e.Path]
			e.Sum = sums[e.Path]
			stats.Files++
			stats.Bytes += e.Size
		case TypeDir:
			stats.Dirs++
		}
		m.Entries = append(m.Entries, e)
	}
	stats.TotalDuration = time.Since(start)
	return m, stats, nil
}

// sameStat reports whether a file looks unchanged: same inode, size, mtime
// and ctime (any write or metadata change moves ctime).
func sameStat(a, b *Entry) bool {
	return a.Ino == b.Ino && a.Size == b.Size && a.MtimeNS == b.MtimeNS && a.CtimeNS == b.CtimeNS
}

// racy reports whether e's times are too close to moment (Unix ns) to
// prove that a later write would have moved them.
func racy(e *Entry, moment int64) bool {
	limit := moment - int64(racyWindow)
	return e.MtimeNS >= limit || e.CtimeNS >= limit
}

// scanned is an entry seen by a walk.
type scanned struct {
	e     Entry
	nlink uint64
}

// knownXattrs returns the xattrs a cache recorded for path when the entry
// is unchanged since (same inode and ctime: setting an xattr moves ctime),
// so that a walk need not list them again.
type knownXattrs func(rel string, ino uint64, ctimeNS int64) (map[string][]byte, bool)

// scan walks the layer and returns its entries in walk order (parents
// before children, then by name). Hard links (files with more than one
// link) become TypeHardlink entries pointing at the first path of their
// inode. The walk holds a directory fd per level and looks every name up
// in its directory's fd without following it (see beneath.go), so a
// directory the sandbox swaps for a symlink meanwhile is never entered.
func scan(ctx context.Context, root string, known knownXattrs) ([]*scanned, error) {
	rfd, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	var st unix.Stat_t
	if err := unix.Fstat(rfd, &st); err != nil {
		return nil, fmt.Errorf("stat /: %w", err)
	}
	rootEntry := entryOf("", &st)
	if err := fillXattrs(&rootEntry, known, fdXattrs(rfd)); err != nil {
		return nil, err
	}
	out := []*scanned{{e: rootEntry, nlink: uint64(st.Nlink)}}
	if err := walkDir(ctx, rfd, "", 1, known, &out); err != nil {
		return nil, err
	}
	res := out[:0]
	inodes := map[uint64]string{}
	for _, s := range out {
		if s.e.Type == TypeFile && s.nlink > 1 {
			if first, ok := inodes[s.e.Ino]; ok {
				s.e = Entry{Path: s.e.Path, Type: TypeHardlink, Target: first}
			} else {
				inodes[s.e.Ino] = s.e.Path
			}
		}
		res = append(res, s)
	}
	return res, nil
}

// walkDir appends the entries below the directory open as dfd (layer path
// rel, depth levels below the root) to out.
func walkDir(ctx context.Context, dfd int, rel string, depth int, known knownXattrs, out *[]*scanned) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := readNames(dfd)
	if err != nil {
		return fmt.Errorf("list %s: %w", shown(rel), err)
	}
	for _, name := range names {
		crel := name
		if rel != "" {
			crel = rel + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed while we walked
			}
			return fmt.Errorf("stat %s: %w", shown(crel), err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			e := entryOf(crel, &st)
			if e.Type == "" {
				continue
			}
			if e.Type == TypeSymlink {
				t, err := readlinkat(dfd, name)
				if err != nil {
					if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
						continue // removed or replaced meanwhile
					}
					return fmt.Errorf("readlink %s: %w", shown(crel), err)
				}
				e.Target = t
			}
			if err := fillXattrs(&e, known, pathXattrs(procPath(dfd, name))); err != nil {
				return err
			}
			*out = append(*out, &scanned{e: e, nlink: uint64(st.Nlink)})
			continue
		}
		if depth >= maxDepth {
			return fmt.Errorf("%s: %w (more than %d levels)", shown(crel), ErrTooDeep, maxDepth)
		}
		cfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|openFlags, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				continue // removed or replaced while we walked; the frozen walk sees it still
			}
			return fmt.Errorf("open %s: %w", shown(crel), err)
		}
		err = func() error {
			defer unix.Close(cfd)
			if err := unix.Fstat(cfd, &st); err != nil {
				return fmt.Errorf("stat %s: %w", shown(crel), err)
			}
			e := entryOf(crel, &st)
			if err := fillXattrs(&e, known, fdXattrs(cfd)); err != nil {
				return err
			}
			*out = append(*out, &scanned{e: e, nlink: uint64(st.Nlink)})
			return walkDir(ctx, cfd, crel, depth+1, known, out)
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// readNames lists the directory open as fd, sorted, each name once,
// without . and ..
func readNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	buf := make([]byte, 32<<10)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	// A listing taken while entries are renamed can name one twice.
	sort.Strings(names)
	return slices.Compact(names), nil
}

// readlinkat reads the target of the symlink name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// entryOf builds the entry of layer path rel from its stat; Type is empty
// for a kind the layer cannot hold.
func entryOf(rel string, st *unix.Stat_t) Entry {
	e := Entry{
		Path: rel, Mode: st.Mode & 0o7777, UID: int(st.Uid), GID: int(st.Gid),
		MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano(), Ino: st.Ino,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Type = TypeDir
	case unix.S_IFREG:
		e.Type = TypeFile
		e.Size = st.Size
	case unix.S_IFLNK:
		e.Type = TypeSymlink
	case unix.S_IFCHR:
		e.Type = TypeChar
		e.Rdev = st.Rdev
		if st.Rdev == 0 {
			e.Type = TypeWhiteout
		}
	case unix.S_IFBLK:
		e.Type = TypeBlock
		e.Rdev = st.Rdev
	case unix.S_IFIFO:
		e.Type = TypeFifo
	case unix.S_IFSOCK:
		e.Type = TypeSocket
	}
	return e
}

// fillXattrs sets e's xattrs: the cache's when e is unchanged since it,
// else read with x.
func fillXattrs(e *Entry, known knownXattrs, x xattrReader) error {
	if v, ok := known(e.Path, e.Ino, e.CtimeNS); ok {
		e.Xattrs = v
		return nil
	}
	v, err := readXattrs(x)
	if err != nil {
		return fmt.Errorf("xattrs of %s: %w", shown(e.Path), err)
	}
	e.Xattrs = v
	return nil
}

// noKnownXattrs lists every entry's xattrs.
func noKnownXattrs(string, uint64, int64) (map[string][]byte, bool) { return nil, false }

// skipXattrs are overlayfs's bookkeeping that names the lower inode a file
// was copied up from; they do not survive a rebuild of the upperdir (which
// runs with index=off), so they are not captured.
var skipXattrs = map[string]bool{
	"trusted.overlay.origin": true, "trusted.overlay.impure": true, "trusted.overlay.nlink": true,
}

// xattrReader lists and gets the extended attributes of one entry.
type xattrReader struct {
	list func(buf []byte) (int, error)
	get  func(name string, buf []byte) (int, error)
}

// fdXattrs reads the xattrs of the file or directory open as fd.
func fdXattrs(fd int) xattrReader {
	return xattrReader{
		list: func(buf []byte) (int, error) { return unix.Flistxattr(fd, buf) },
		get:  func(name string, buf []byte) (int, error) { return unix.Fgetxattr(fd, name, buf) },
	}
}

// pathXattrs reads the xattrs of p without following it (p is a procPath:
// its directory is an fd, its last component one name).
func pathXattrs(p string) xattrReader {
	return xattrReader{
		list: func(buf []byte) (int, error) { return unix.Llistxattr(p, buf) },
		get:  func(name string, buf []byte) (int, error) { return unix.Lgetxattr(p, name, buf) },
	}
}

// readXattrs returns an entry's extended attributes (nil when none).
func readXattrs(x xattrReader) (map[string][]byte, error) {
	buf := make([]byte, 1024)
	var n int
	var err error
	for {
		n, err = x.list(buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, len(buf)*4)
			continue
		}
		break
	}
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("listxattr: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" || skipXattrs[name] || strings.HasPrefix(name, "trusted.sbx.") {
			continue
		}
		val := make([]byte, 256)
		for {
			vn, err := x.get(name, val)
			if errors.Is(err, unix.ERANGE) {
				val = make([]byte, len(val)*4)
				continue
			}
			if errors.Is(err, unix.ENODATA) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("getxattr %s: %w", name, err)
			}
			out[name] = append([]byte(nil), val[:vn]...)
			break
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// holeMin is the smallest hole a capture keeps as a hole: a shorter run
// of unallocated bytes is read (as zeros) with the data around it, and
// counts toward the capture's byte limit.
const holeMin = 256 << 10

// ErrTooLarge: a capture would read more bytes than its limit
// (CaptureOptions.MaxBytes).
var ErrTooLarge = errors.New("layer too large to capture")

// readResult is what reading a batch of files gave.
type readResult struct {
	chunks  []blob.Chunk
	extents map[string][]Extent
	sums    map[string]string
	bytes   int64
}

// readFiles reads the files' data as one concatenated stream through the
// chunker and maps each file's byte ranges back to extents; holes of
// holeMin bytes or more are not read but recorded as hole extents. Each
// file is opened beneath root without following links and its size and
// times are taken from fstat of the fd read. A file that vanished (or
// stopped being a regular file) meanwhile reads as empty; the caller's
// next walk sees it gone. Reading more than maxBytes (> 0) in all is
// ErrTooLarge.
func readFiles(ctx context.Context, root string, files []*scanned, st blob.Store, dry bool, maxBytes, already int64) (*readResult, error) {
	rfd, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	cr := &concatReader{dirs: newDirStack(rfd), files: files, max: maxBytes, total: already, fd: -1}
	defer cr.close()
	if dry {
		st = nil
	}
	chunks, err := blob.PutStream(ctx, st, cr)
	if cr.err != nil {
		return nil, cr.err
	}
	if err != nil {
		return nil, err
	}
	res := &readResult{chunks: chunks, extents: map[string][]Extent{}, sums: map[string]string{}}
	for i, f := range files {
		var size int64
		var ext []Extent
		for _, p := range cr.pieces[i] {
			if p.hole {
				ext = append(ext, Extent{Len: p.n})
			} else {
				ext = append(ext, extentsOf(chunks, p.start, p.n)...)
				res.bytes += p.n
			}
			size += p.n
		}
		// The size read is the truth for this stream; record it.
		f.e.Size = size
		res.extents[f.e.Path] = ext
		res.sums[f.e.Path] = fmt.Sprintf("%08x", cr.sums[i])
	}
	return res, nil
}

// piece is a range of one file: data at start in the stream, or a hole.
type piece struct {
	hole     bool
	off      int64 // offset in the file
	start, n int64 // start in the stream (data only), length
}

// concatReader reads the data of files one after the other, recording
// where each range starts in the stream.
type concatReader struct {
	dirs   *dirStack
	files  []*scanned
	max    int64 // limit of bytes read in all (0: none)
	total  int64 // bytes read so far, with earlier batches
	i      int   // current file
	fd     int   // its fd, -1 when none is open
	todo   []piece
	pos    int64 // next offset to read in todo[0]
	off    int64 // stream offset
	pieces [][]piece
	sums   []uint32 // CRC-32C of each file's data and holes
	err    error
}

func (c *concatReader) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	c.dirs.close()
}

// open opens file i and plans its pieces; a vanished file has none.
func (c *concatReader) open() error {
	f := c.files[c.i]
	parent, name := splitParent(f.e.Path)
	pfd, err := c.dirs.dir(parent)
	if err != nil {
		if gone(err) {
			return nil
		}
		return fmt.Errorf("open %s: %w", shown(parent), err)
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_NONBLOCK|openFlags, 0)
	if err != nil {
		if gone(err) || errors.Is(err, unix.ENXIO) {
			return nil
		}
		return fmt.Errorf("open %s: %w", shown(f.e.Path), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil // not a regular file any more: read as empty
	}
	// What is read is described by the fd's own stat.
	f.e.Ino, f.e.MtimeNS, f.e.CtimeNS = st.Ino, st.Mtim.Nano(), st.Ctim.Nano()
	f.e.Mode, f.e.UID, f.e.GID = st.Mode&0o7777, int(st.Uid), int(st.Gid)
	c.fd = fd
	c.todo = planPieces(fd, st.Size)
	var data int64
	for _, p := range c.todo {
		if !p.hole {
			data += p.n
		}
	}
	if c.max > 0 && c.total+data > c.max {
		return fmt.Errorf("%s: %w: more than %d bytes of data to read", shown(f.e.Path), ErrTooLarge, c.max)
	}
	c.total += data
	return nil
}

// planPieces splits a file of size bytes into data ranges and holes of at
// least holeMin bytes, with SEEK_DATA/SEEK_HOLE.
func planPieces(fd int, size int64) []piece {
	if size <= holeMin {
		if size == 0 {
			return nil
		}
		return []piece{{off: 0, n: size}}
	}
	var out []piece
	add := func(hole bool, from, to int64) {
		if to <= from {
			return
		}
		if n := len(out); n > 0 && out[n-1].hole == hole {
			out[n-1].n = to - out[n-1].off
			return
		}
		out = append(out, piece{hole: hole, off: from, n: to - from})
	}
	var pos int64
	for pos < size {
		data, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if err == nil && data >= size || errors.Is(err, unix.ENXIO) {
			// No data after pos: a hole to the end.
			add(size-pos >= holeMin, pos, size)
			break
		}
		if err != nil {
			add(false, pos, size) // no SEEK_DATA here: read it all
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil || hole > size {
			hole = size
		}
		if data-pos >= holeMin {
			add(true, pos, data)
		} else {
			add(false, pos, data)
		}
		add(false, data, hole)
		pos = hole
	}
	return out
}

// gone reports whether an open failed because a path is no longer there
// as a directory or file of the walk (removed, or replaced by a symlink or
// something else).
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)
}

func (c *concatReader) Read(p []byte) (int, error) {
	for {
		if c.err != nil {
			return 0, c.err
		}
		if c.fd < 0 {
			if c.i >= len(c.files) {
				return 0, io.EOF
			}
			c.pieces = append(c.pieces, nil)
			c.sums = append(c.sums, 0)
			if err := c.open(); err != nil {
				c.err = err
				return 0, err
			}
			if c.fd < 0 {
				c.i++
				continue
			}
		}
		if len(c.todo) == 0 {
			unix.Close(c.fd)
			c.fd = -1
			c.i++
			continue
		}
		cur := &c.todo[0]
		if cur.hole {
			// A hole's place in the sum: its offset and length.
			var desc [17]byte
			desc[0] = 'h'
			for k := 0; k < 8; k++ {
				desc[1+k] = byte(cur.off >> (8 * k))
				desc[9+k] = byte(cur.n >> (8 * k))
			}
			c.sums[c.i] = crc32.Update(c.sums[c.i], castagnoli, desc[:])
			c.pieces[c.i] = append(c.pieces[c.i], *cur)
			c.todo = c.todo[1:]
			c.pos = 0
			continue
		}
		want := min(int64(len(p)), cur.n-c.pos)
		n, err := unix.Pread(c.fd, p[:want], cur.off+c.pos)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			c.err = fmt.Errorf("read %s: %w", shown(c.files[c.i].e.Path), err)
			return 0, c.err
		}
		if n > 0 {
			ps := c.pieces[c.i]
			if k := len(ps); c.pos == 0 {
				c.pieces[c.i] = append(ps, piece{off: cur.off, start: c.off, n: int64(n)})
			} else {
				ps[k-1].n += int64(n)
			}
			c.sums[c.i] = crc32.Update(c.sums[c.i], castagnoli, p[:n])
			c.off += int64(n)
			c.pos += int64(n)
		}
		if n == 0 || c.pos >= cur.n {
			if n == 0 {
				// The file shrank while read: it ends here.
				c.todo = nil
			} else {
				c.todo = c.todo[1:]
			}
			c.pos = 0
			if n == 0 {
				continue
			}
		}
		return n, nil
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// statIno is a helper for tests and restores: the inode of path.
func statIno(path string) (uint64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}
