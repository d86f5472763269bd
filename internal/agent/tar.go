//go:build linux

package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// entryOverhead is what an archive entry is counted for beyond its data in
// a tar_out's estimate: a header block and a PAX header of two blocks.
const entryOverhead = 1536

// errArchiveTooLarge cuts an archive that grew past its max_bytes while
// streaming.
var errArchiveTooLarge = errors.New("archive grew past max_bytes while streaming")

// limitWriter fails a write that would take the bytes written past max
// (0: no bound).
type limitWriter struct {
	w      io.Writer
	n, max int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.max > 0 && l.n+int64(len(p)) > l.max {
		return 0, errArchiveTooLarge
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	return n, err
}

// busy sends FrameBusy at most once a second while an operation works
// without sending; a failed send means the host went away.
type busy struct {
	c    *conn
	last time.Time
}

func (b *busy) tick() error {
	if b == nil || time.Since(b.last) < time.Second {
		return nil
	}
	b.last = time.Now()
	return b.c.send(FrameBusy, nil)
}

// sparseMin is the size from which a file is scanned for holes; smaller
// files are sent whole.
const sparseMin = 64 << 10

// errOverEstimate stops the sizing walk once the estimate passes max.
var errOverEstimate = errors.New("over max_bytes")

// fileKey identifies a file across the two walks of a tar_out.
type fileKey struct{ dev, ino uint64 }

// scanned is a file's data extents as the sizing walk found them, valid
// while its size and mtime stay.
type scanned struct {
	size  int64
	mtime unix.Timespec
	ext   []extent
}

// archiver walks a tree beneath directory fds, never following a symlink,
// and either sizes its archive (estimate) or writes it.
//
// Holes: inside gVisor, st_blocks is made up from the size and SEEK_DATA
// reports one extent for the whole file, so holes can only be found by
// reading (~200 MB/s of file there: 10 s for 2 GiB). Files of sparseMin
// bytes or more are scanned once, in the sizing walk when there is one,
// and their extents kept for the writing walk.
type archiver struct {
	estimate bool
	est, max int64
	tw       *tar.Writer
	raw      io.Writer
	busy     *busy
	buf      []byte
	scans    map[fileKey]scanned
}

// count adds n to the estimate; past max the sizing walk stops.
func (a *archiver) count(n int64) error {
	a.est += n
	if a.max > 0 && a.est > a.max {
		return errOverEstimate
	}
	return nil
}

func headerOf(rel string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec), Format: tar.FormatPAX}
}

// entry archives name, in the directory dirfd (resolved path dir), as rel.
func (a *archiver) entry(dirfd int, dir, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil // removed meanwhile
		}
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	if err := a.busy.tick(); err != nil {
		return err
	}
	hdr := headerOf(rel, &st)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := openDirAt(dirfd, name)
		if err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR {
			return nil // replaced meanwhile
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", rel, err)
		}
		defer unix.Close(fd)
		if err := a.header(hdr, tar.TypeDir); err != nil {
			return err
		}
		return a.dir(fd, filepath.Join(dir, name), rel)
	case unix.S_IFREG:
		return a.file(dirfd, name, hdr)
	case unix.S_IFLNK:
		hdr.Linkname = readlinkat(dirfd, name)
		return a.header(hdr, tar.TypeSymlink)
	case unix.S_IFIFO:
		return a.header(hdr, tar.TypeFifo)
	case unix.S_IFCHR, unix.S_IFBLK:
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		typ := byte(tar.TypeChar)
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			typ = tar.TypeBlock
		}
		return a.header(hdr, typ)
	}
	return nil // sockets are left out
}

// header writes (or counts) an entry without data.
func (a *archiver) header(hdr *tar.Header, typ byte) error {
	if a.estimate {
		return a.count(entryOverhead)
	}
	hdr.Typeflag = typ
	if typ == tar.TypeDir {
		hdr.Name += "/"
	}
	return a.tw.WriteHeader(hdr)
}

// dir archives the entries of the directory fd (resolved path dir) under
// the archive name rel ("" for the top).
func (a *archiver) dir(fd int, dir, rel string) error {
	names, err := sortedNames(fd, dir)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", rel, err)
	}
	for _, name := range names {
		if skipUnder(dir, name) {
			continue // kernel and sbx mounts, not the disk
		}
		child := name
		if rel != "" {
			child = rel + "/" + name
		}
		if err := a.entry(fd, dir, name, child); err != nil {
			return err
		}
	}
	return nil
}

// file archives the regular file name in dirfd, holes kept as holes.
func (a *archiver) file(dirfd int, name string, hdr *tar.Header) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT || err == unix.ELOOP {
		return nil // replaced meanwhile
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", hdr.Name, err)
	}
	f := os.NewFile(uintptr(fd), hdr.Name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // replaced by a FIFO or the like meanwhile
	}
	// Size, mode and times come from the file read, not the name's stat.
	hdr = headerOf(hdr.Name, &st)
	hdr.Size = st.Size
	var ext []extent
	sparse := false
	if st.Size >= sparseMin {
		key := fileKey{uint64(st.Dev), st.Ino}
		sc, ok := a.scans[key]
		if !ok || sc.size != st.Size || sc.mtime != st.Mtim {
			if ext, err = a.extents(f, st.Size); err != nil {
				return fmt.Errorf("read %s: %w", hdr.Name, err)
			}
			sc = scanned{size: st.Size, mtime: st.Mtim, ext: ext}
			if a.estimate {
				a.scans[key] = sc
			}
		}
		ext = sc.ext
		sparse = dataLen(ext) < st.Size
	}
	if a.estimate {
		if !sparse {
			return a.count(entryOverhead + st.Size + pad512(st.Size))
		}
		n := dataLen(ext)
		return a.count(entryOverhead + n + pad512(n) + 24*int64(len(ext)+2) + 512)
	}
	if sparse {
		return writeSparse(a.tw, a.raw, hdr, ext, f)
	}
	hdr.Typeflag = tar.TypeReg
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(a.tw, io.LimitReader(f, st.Size), a.buf)
	if err == nil && n < st.Size {
		err = fmt.Errorf("%s shrank while read: %w", hdr.Name, io.ErrUnexpectedEOF)
	}
	return err
}

// extents finds a file's data: SEEK_DATA and SEEK_HOLE give the holes the
// filesystem knows (gVisor's gofer reports none: the whole file is one
// extent), then runs of zeros within the data become holes too.
func (a *archiver) extents(f *os.File, size int64) ([]extent, error) {
	fd := int(rawFd(f))
	var coarse []extent
	for off := int64(0); off < size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // a hole to the end
		}
		if err != nil {
			coarse = []extent{{0, size}} // not supported: scan it all
			break
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil || h > size {
			h = size
		}
		if h <= d {
			break
		}
		coarse = append(coarse, extent{d, h - d})
		off = h
	}
	var ext []extent
	for _, c := range coarse {
		var err error
		if ext, err = scanZeros(f, c.off, c.len, ext, a.buf, a.busy.tick); err != nil {
			return nil, err
		}
	}
	return coarsen(ext), nil
}

// rawFd returns f's descriptor without switching it to blocking mode (as
// f.Fd would).
func rawFd(f *os.File) uintptr {
	var fd uintptr
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(x uintptr) { fd = x })
	}
	return fd
}

// tarOut streams root (a directory's contents, or one entry) as a tar,
// sparse files as sparse entries. With maxBytes > 0 it first sizes the
// archive and fails with kind too_large if the estimate is over; an
// archive that grows past it while streaming is cut.
func tarOut(c *conn, root string, maxBytes int64) error {
	b := &busy{c: c, last: time.Now()}
	var (
		dirfd    = -1
		name     string
		where    string
		st       unix.Stat_t
		err      error
		rootOnly bool // root is "/": its own fd is the directory walked
	)
	if filepath.Clean(root) == "/" {
		rootOnly = true
		dirfd, err = openInRoot("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
		where = "/"
		if err == nil {
			err = unix.Fstat(dirfd, &st)
		}
	} else {
		dirfd, name, err = openParent(root, false)
		if err == nil {
			defer unix.Close(dirfd)
			if where, err = resolved(dirfd); err == nil {
				if isReserved(filepath.Join(where, name)) {
					err = reservedErr(root, filepath.Join(where, name))
				} else if err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					err = fmt.Errorf("stat %s: %w", root, err)
				}
			}
		}
	}
	if rootOnly && err == nil {
		defer unix.Close(dirfd)
	}
	if err != nil {
		return c.fail(err)
	}
	typ := fileType(st.Mode)
	if typ != "dir" && typ != "file" && typ != "symlink" {
		typ = "other"
	}
	walk := func(a *archiver) error {
		if typ != "dir" {
			return a.entry(dirfd, where, name, name)
		}
		if rootOnly {
			return a.dir(dirfd, "/", "")
		}
		fd, err := openDirAt(dirfd, name)
		if err != nil {
			return fmt.Errorf("open %s: %w", root, err)
		}
		defer unix.Close(fd)
		return a.dir(fd, filepath.Join(where, name), "")
	}
	res := TarOutResult{Type: typ}
	buf := make([]byte, 1<<20)
	scans := map[fileKey]scanned{}
	if maxBytes > 0 {
		a := &archiver{estimate: true, est: 1024, max: maxBytes, busy: b, buf: buf, scans: scans}
		err := walk(a)
		if err == errOverEstimate {
			return c.fail(&Error{Failure{Kind: FailTooLarge, Message: fmt.Sprintf(
				"the archive of %s is over max_bytes %d (file data without holes, plus %d bytes an entry)",
				root, maxBytes, entryOverhead)}})
		}
		if err != nil {
			return c.fail(err)
		}
		res.Estimate = a.est
	}
	if err := c.sendJSON(FrameResult, res); err != nil {
		return err
	}
	raw := &limitWriter{w: dataWriter{c}, max: maxBytes}
	a := &archiver{tw: tar.NewWriter(raw), raw: raw, busy: b, buf: buf, scans: scans}
	err = walk(a)
	if err == nil {
		err = a.tw.Close()
	}
	if err != nil {
		return err // the host sees no EOF frame: a truncated archive
	}
	return c.send(FrameData, nil)
}

// TarResult is the result of tar_in.
type TarResult struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// extractor writes archive entries beneath the directory fd root (resolved
// path where), opening every directory on the way with O_NOFOLLOW: a
// symlink, whether the archive made it or the sandbox had it, is never
// followed, and a reserved place is never reached.
type extractor struct {
	root  int
	where string
	// The parent directory of the last entry, kept open for the next.
	lastDir string
	lastFd  int
	buf     []byte
}

func (x *extractor) close() {
	if x.lastFd >= 0 {
		unix.Close(x.lastFd)
		x.lastFd = -1
	}
}

func symlinkErr(entry, dir string) error {
	return &Error{Failure{Kind: FailSymlink, Message: fmt.Sprintf(
		"tar entry %q: %s is a symlink, and symlinks beneath the target directory are not followed", entry, dir)}}
}

// open opens the directory rel ("" = root) beneath root; with create,
// missing directories are made (0755). The caller closes the fd.
func (x *extractor) open(rel, entry string, create bool) (int, error) {
	fd, err := unix.Dup(x.root)
	if err != nil {
		return -1, err
	}
	sofar := ""
	for _, comp := range strings.Split(rel, "/") {
		if comp == "" {
			continue
		}
		sofar = path.Join(sofar, comp)
		nfd, err := openDirAt(fd, comp)
		if err == unix.ENOENT && create {
			if err = unix.Mkdirat(fd, comp, 0o755); err == nil || err == unix.EEXIST {
				nfd, err = openDirAt(fd, comp)
			}
		}
		if err == unix.ELOOP || err == unix.ENOTDIR {
			var st unix.Stat_t
			if unix.Fstatat(fd, comp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = symlinkErr(entry, sofar)
			}
		}
		unix.Close(fd)
		if err != nil {
			var ae *Error
			if errors.As(err, &ae) {
				return -1, err
			}
			return -1, &fs.PathError{Op: "tar entry " + entry, Path: sofar, Err: err}
		}
		fd = nfd
	}
	return fd, nil
}

// parent returns the (cached) fd of the directory rel.
func (x *extractor) parent(rel, entry string) (int, error) {
	if x.lastFd >= 0 && x.lastDir == rel {
		return x.lastFd, nil
	}
	x.close()
	fd, err := x.open(rel, entry, true)
	if err != nil {
		return -1, err
	}
	x.lastDir, x.lastFd = rel, fd
	return fd, nil
}

// replaceable removes what stands at base in dirfd for a new entry (a
// directory is refused).
func replaceable(dirfd int, base, entry string) error {
	err := unix.Unlinkat(dirfd, base, 0)
	switch err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR:
		return &Error{Failure{Kind: FailIsDir, Message: fmt.Sprintf("tar entry %q: a directory is in the way", entry)}}
	}
	return &fs.PathError{Op: "tar entry " + entry, Path: entry, Err: err}
}

// extract writes one entry (name cleaned, relative to root) and returns
// the bytes of its data.
func (x *extractor) extract(hdr *tar.Header, name string, r io.Reader) (int64, error) {
	dir, base := path.Split(name)
	dirfd, err := x.parent(strings.TrimSuffix(dir, "/"), hdr.Name)
	if err != nil {
		return 0, err
	}
	mode := uint32(hdr.Mode & 0o7777) // setuid, setgid and sticky bits kept: this is the sandbox's disk
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	var n int64
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(dirfd, base, mode|0o700); err != nil && err != unix.EEXIST {
			return 0, &fs.PathError{Op: "tar entry " + hdr.Name, Path: name, Err: err}
		}
		fd, err := openDirAt(dirfd, base)
		if err == unix.ELOOP || err == unix.ENOTDIR {
			var st unix.Stat_t
			if unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return 0, symlinkErr(hdr.Name, name)
			}
		}
		if err != nil {
			return 0, &fs.PathError{Op: "tar entry " + hdr.Name, Path: name, Err: err}
		}
		_ = unix.Fchmod(fd, mode)
		_ = unix.Fchown(fd, hdr.Uid, hdr.Gid)
		unix.Close(fd)
		_ = unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
	case tar.TypeReg:
		if err := replaceable(dirfd, base, hdr.Name); err != nil {
			return 0, err
		}
		fd, err := unix.Openat(dirfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, &fs.PathError{Op: "tar entry " + hdr.Name, Path: name, Err: err}
		}
		f := os.NewFile(uintptr(fd), name)
		n, err = copySparse(f, r, x.buf)
		if err == nil {
			_ = unix.Fchown(fd, hdr.Uid, hdr.Gid)
			err = unix.Fchmod(fd, mode)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			_ = unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			_ = unix.Unlinkat(dirfd, base, 0) // no partial file
			return 0, err
		}
	case tar.TypeSymlink:
		if err := replaceable(dirfd, base, hdr.Name); err != nil {
			return 0, err
		}
		if err := unix.Symlinkat(hdr.Linkname, dirfd, base); err != nil {
			return 0, &fs.PathError{Op: "tar entry " + hdr.Name, Path: name, Err: err}
		}
		_ = unix.Fchownat(dirfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW)
	case tar.TypeLink:
		src := strings.Trim(path.Clean("/"+hdr.Linkname), "/")
		if src == "" || isReserved(path.Join(x.where, src)) {
			return 0, &Error{Failure{Kind: FailInvalid, Message: fmt.Sprintf("tar entry %q links to %q, which is not a file in the archive's target", hdr.Name, hdr.Linkname)}}
		}
		sdir, sbase := path.Split(src)
		sfd, err := x.open(strings.TrimSuffix(sdir, "/"), hdr.Name, false)
		if err != nil {
			return 0, err
		}
		defer unix.Close(sfd)
		if err := replaceable(dirfd, base, hdr.Name); err != nil {
			return 0, err
		}
		if err := unix.Linkat(sfd, sbase, dirfd, base, 0); err != nil {
			return 0, &fs.PathError{Op: "tar entry " + hdr.Name, Path: name, Err: err}
		}
	default:
		return -1, nil // not extracted
	}
	return n, nil
}

// tarIn extracts a tar stream into the directory root, creating it. Entries
// with a ".." element are refused; every entry is written beneath the
// target's fd without following symlinks, and none may land in a
// reserved place.
func tarIn(c *conn, root string) error {
	body := &dataReader{r: c.c}
	fail := func(err error) error {
		_, _ = io.Copy(io.Discard, body)
		return c.fail(err)
	}
	rootfd, err := openDir(root, true)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(rootfd)
	where, err := resolved(rootfd)
	if err != nil {
		return fail(err)
	}
	x := &extractor{root: rootfd, where: where, lastFd: -1, buf: make([]byte, 1<<20)}
	defer x.close()
	tr := tar.NewReader(body)
	var res TarResult
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(&Error{Failure{Kind: FailInvalid, Message: "bad tar stream: " + err.Error()}})
		}
		if slices.Contains(strings.Split(hdr.Name, "/"), "..") {
			return fail(&Error{Failure{Kind: FailInvalid, Message: fmt.Sprintf("tar entry %q leaves the target directory", hdr.Name)}})
		}
		name := strings.Trim(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue // the target itself
		}
		if full := path.Join(where, name); isReserved(full) {
			return fail(&Error{Failure{Kind: FailReserved, Message: fmt.Sprintf(
				"tar entry %q would land in %s, which sbx reserves (%s)", hdr.Name, full, strings.Join(ReservedPaths, ", "))}})
		}
		n, err := x.extract(hdr, name, tr)
		if err != nil {
			return fail(err)
		}
		if n >= 0 {
			res.Files++
			res.Bytes += n
		}
	}
	// The archive ended; the body has not (what follows the end-of-archive
	// blocks, and the empty frame that ends the body). Read it all before
	// answering: closing with bytes unread would reset the connection under
	// a client still writing them, and its write would fail (EPIPE) instead
	// of reading this answer.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return err
	}
	return c.sendJSON(FrameResult, res)
}
