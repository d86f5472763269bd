// Package delivery is the mechanism of deliveries: it packs files taken
// from a sandbox into one reproducible archive (tar, zstd), states what the
// archive holds in an in-toto Statement v1, signs the statement in a DSSE
// envelope with the node's ed25519 key, and verifies a chain of such
// records and an archive against them, online or from an exported bundle.
//
// It is public so that anyone can check a delivery in Go without sbxd
// (VerifyBundle with the node's public key). The rules (which sandbox,
// which paths, when a record is written) are sbxd's engine's; nothing here
// knows about sandboxes or stores.
package delivery

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// MediaType is the archive's media type.
const MediaType = "application/x-tar+zstd"

// entryOverhead is what an entry counts against the size limit beyond its
// data: a header block and a PAX header of two blocks.
const entryOverhead = 1536

// Epoch is the modification time of every archive entry, so that the same
// files make the same bytes whatever their times were.
var Epoch = time.Unix(0, 0).UTC()

// ErrTooLarge is returned by Add when the files are over the packer's
// limit.
var ErrTooLarge = errors.New("delivery archive over the size limit")

// File is a regular file of an archive: its name in the archive, its size
// in bytes and the SHA-256 of its content (64 lowercase hex digits).
type File struct {
	Name   string
	Size   int64
	SHA256 string
}

type entry struct {
	hdr *tar.Header
	// off is where the file's data starts in the spool.
	off int64
}

// Packer gathers the entries of tar streams (one for each delivered path)
// and writes them as one reproducible archive: entries sorted by name,
// times set to Epoch, owner ids and modes kept, user and group names,
// access and change times, and extended attributes dropped, sparse files
// written whole. File data waits in a spool file until Write.
type Packer struct {
	spool *os.File
	size  int64 // bytes in the spool
	used  int64 // counted against limit
	limit int64
	ents  []entry
	names map[string]bool
}

// NewPacker returns a packer that spools in dir (a temporary file, removed
// by Close) and refuses more than limit bytes (file data plus 1536 bytes an
// entry; 0: no bound).
func NewPacker(dir string, limit int64) (*Packer, error) {
	f, err := os.CreateTemp(dir, "delivery-spool-")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return &Packer{spool: f, limit: limit, names: map[string]bool{}}, nil
}

// Close removes the spool.
func (p *Packer) Close() error { return p.spool.Close() }

// Used is the bytes counted against the limit so far.
func (p *Packer) Used() int64 { return p.used }

// ArchiveName is the name in the archive of the delivered path p (absolute,
// clean): p without its leading slash ("" for "/").
func ArchiveName(p string) string { return strings.TrimPrefix(p, "/") }

// Add reads the tar stream r of the delivered path pth (as the sandbox's
// agent archives it: of a "dir", its contents with names relative to it; of
// a "file" or "symlink", that one entry) and adds its entries under
// ArchiveName(pth). Entry names must be relative and stay beneath it; a
// symlink is kept as a link, never followed. Over the limit is ErrTooLarge.
func (p *Packer) Add(pth, typ string, r io.Reader) error {
	prefix := ArchiveName(pth)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("archive of %s: %w", pth, err)
		}
		name, err := entryName(prefix, typ, h.Name)
		if err != nil {
			return fmt.Errorf("archive of %s: %w", pth, err)
		}
		if p.names[name] {
			return fmt.Errorf("archive of %s: %q appears twice", pth, name)
		}
		p.names[name] = true
		hdr := &tar.Header{Name: name, Mode: h.Mode & 0o7777, Uid: h.Uid, Gid: h.Gid, ModTime: Epoch, Format: tar.FormatPAX}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeGNUSparse:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = h.Size
		case tar.TypeDir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case tar.TypeSymlink:
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = h.Linkname
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			hdr.Typeflag = h.Typeflag
			hdr.Devmajor, hdr.Devminor = h.Devmajor, h.Devminor
		default:
			continue // hard links and others: the agent sends none
		}
		p.used += entryOverhead + hdr.Size
		if p.limit > 0 && p.used > p.limit {
			return fmt.Errorf("%w: %d bytes", ErrTooLarge, p.limit)
		}
		e := entry{hdr: hdr, off: p.size}
		if hdr.Typeflag == tar.TypeReg {
			n, err := io.Copy(p.spool, io.LimitReader(tr, hdr.Size))
			p.size += n
			if err != nil {
				return fmt.Errorf("archive of %s: %s: %w", pth, name, err)
			}
			if n != hdr.Size {
				return fmt.Errorf("archive of %s: %s: %d of %d bytes", pth, name, n, hdr.Size)
			}
		}
		p.ents = append(p.ents, e)
	}
}

// entryName maps an entry of a path's tar stream to its archive name.
func entryName(prefix, typ, name string) (string, error) {
	name = strings.TrimSuffix(name, "/")
	if typ != "dir" {
		// The stream of a file or symlink holds that one entry.
		return prefix, nil
	}
	clean := path.Clean(name)
	if name == "" || clean != name || path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("entry %q: not a clean relative name", name)
	}
	if prefix == "" {
		return clean, nil
	}
	return prefix + "/" + clean, nil
}

// Write writes the archive to w: a tar of the entries sorted by name,
// compressed with zstd (one frame, single-threaded, so the same entries
// always make the same bytes). It returns the regular files, by name.
func (p *Packer) Write(w io.Writer) ([]File, error) {
	ents := slices.Clone(p.ents)
	slices.SortFunc(ents, func(a, b entry) int { return strings.Compare(a.hdr.Name, b.hdr.Name) })
	// No entry may lie beneath a symlink of the archive: extracted, it
	// would be written wherever the link points. The agent never walks
	// through a link; a stream that does is refused.
	links := map[string]bool{}
	for _, e := range ents {
		if e.hdr.Typeflag == tar.TypeSymlink {
			links[e.hdr.Name] = true
		}
	}
	for _, e := range ents {
		for d := path.Dir(strings.TrimSuffix(e.hdr.Name, "/")); d != "." && d != "/" && d != ""; d = path.Dir(d) {
			if links[d] {
				return nil, fmt.Errorf("entry %q lies beneath the symlink %q", e.hdr.Name, d)
			}
		}
	}
	zw, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	var files []File
	for _, e := range ents {
		if err := tw.WriteHeader(e.hdr); err != nil {
			return nil, err
		}
		if e.hdr.Typeflag != tar.TypeReg {
			continue
		}
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(tw, h), io.NewSectionReader(p.spool, e.off, e.hdr.Size)); err != nil {
			return nil, err
		}
		files = append(files, File{Name: e.hdr.Name, Size: e.hdr.Size, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return files, nil
}

// ReadFiles reads an archive (tar, zstd) and returns its regular files
// with their digests, in archive order.
func ReadFiles(r io.Reader) ([]File, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var files []File
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		d := sha256.New()
		n, err := io.Copy(d, tr)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: h.Name, Size: n, SHA256: hex.EncodeToString(d.Sum(nil))})
	}
}
