package agent

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"
)

// Sparse files in archives.
//
// Go's archive/tar reads GNU sparse entries but cannot write them, so the
// agent writes them by hand in the PAX 1.0 sparse format of GNU tar: a PAX
// extended header carrying GNU.sparse.major=1, GNU.sparse.minor=0,
// GNU.sparse.name (the real name) and GNU.sparse.realsize (the file's
// size), then a plain ustar entry named GNUSparseFile.0/<name> whose data is
// the sparse map (the number of extents, then each extent's offset and
// length, one decimal number a line, padded to 512 bytes) followed by the
// extents' bytes. GNU tar, bsdtar (libarchive), Python's tarfile and Go's
// archive/tar read it; a reader that does not know the format extracts a
// file named GNUSparseFile.0/<name> holding the map and the data.

// extent is a range of a file that holds data; what lies between extents
// reads as zeros (a hole).
type extent struct{ off, len int64 }

func (e extent) end() int64 { return e.off + e.len }

// sparseBlock is the granularity at which runs of zeros become holes.
const sparseBlock = 4096

// maxExtents bounds a sparse map so that its text stays under the 1 MiB
// that readers accept (Go's archive/tar refuses more); a file with more
// extents is described coarser (small holes are sent as zeros).
const maxExtents = 30000

// addExtent appends [off, off+n) to ext, merging it with the last extent
// when they touch.
func addExtent(ext []extent, off, n int64) []extent {
	if n <= 0 {
		return ext
	}
	if k := len(ext); k > 0 && ext[k-1].end() == off {
		ext[k-1].len += n
		return ext
	}
	return append(ext, extent{off, n})
}

var zeroBlock [sparseBlock]byte

// scanZeros reads [off, off+n) of r and returns its data extents: the
// sparseBlock-aligned blocks that are not all zeros. tick is called after
// every chunk read (a FrameBusy, which also notices a host that went away).
func scanZeros(r io.ReaderAt, off, n int64, ext []extent, buf []byte, tick func() error) ([]extent, error) {
	end := off + n
	for pos := off; pos < end; {
		k := int64(len(buf))
		if k > end-pos {
			k = end - pos
		}
		got, err := r.ReadAt(buf[:k], pos)
		if int64(got) < k {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF // the file shrank while read
			}
			return nil, err
		}
		for i := int64(0); i < k; {
			// Blocks are aligned on the file's offsets, not the chunk's.
			bl := sparseBlock - (pos+i)%sparseBlock
			if bl > k-i {
				bl = k - i
			}
			if !bytes.Equal(buf[i:i+bl], zeroBlock[:bl]) {
				ext = addExtent(ext, pos+i, bl)
			}
			i += bl
		}
		pos += k
		if tick != nil {
			if err := tick(); err != nil {
				return nil, err
			}
		}
	}
	return ext, nil
}

// coarsen merges extents separated by holes shorter than a growing gap
// until at most maxExtents remain.
func coarsen(ext []extent) []extent {
	for gap := int64(64 << 10); len(ext) > maxExtents; gap *= 2 {
		out := ext[:0:0]
		for _, e := range ext {
			if k := len(out); k > 0 && e.off-out[k-1].end() < gap {
				out[k-1].len = e.end() - out[k-1].off
				continue
			}
			out = append(out, e)
		}
		ext = out
	}
	return ext
}

func dataLen(ext []extent) int64 {
	var n int64
	for _, e := range ext {
		n += e.len
	}
	return n
}

// paxRecord formats one PAX record: "<len> <key>=<value>\n", where len
// counts the whole record, its own digits included.
func paxRecord(k, v string) string {
	const padding = 3 // ' ', '=' and '\n'
	size := len(k) + len(v) + padding
	size += len(strconv.Itoa(size))
	rec := strconv.Itoa(size) + " " + k + "=" + v + "\n"
	if len(rec) != size { // the length gained a digit
		size = len(rec)
		rec = strconv.Itoa(size) + " " + k + "=" + v + "\n"
	}
	return rec
}

// asciiName keeps a name's ASCII printable bytes (others become '_') and
// its last max bytes: the placeholder names of a sparse entry's headers.
func asciiName(s string, max int) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '_'
		}
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// octal writes n as a NUL-terminated octal number filling field.
func octal(field []byte, n int64) {
	s := strconv.FormatInt(n, 8)
	w := len(field) - 1
	if len(s) < w {
		s = strings.Repeat("0", w-len(s)) + s
	}
	copy(field, s)
	field[len(field)-1] = 0
}

// paxHeaderBlock is the ustar header of a PAX extended header ('x') entry
// whose records are size bytes long.
func paxHeaderBlock(name string, size int64) []byte {
	blk := make([]byte, 512)
	copy(blk[0:100], name)
	octal(blk[100:108], 0o644)
	octal(blk[108:116], 0)
	octal(blk[116:124], 0)
	octal(blk[124:136], size)
	octal(blk[136:148], 0)
	blk[156] = tar.TypeXHeader
	copy(blk[257:263], "ustar\x00")
	copy(blk[263:265], "00")
	copy(blk[148:156], "        ")
	var sum int64
	for _, c := range blk {
		sum += int64(c)
	}
	s := strconv.FormatInt(sum, 8)
	s = strings.Repeat("0", 6-len(s)) + s
	copy(blk[148:156], s+"\x00 ")
	return blk
}

func pad512(n int64) int64 { return (512 - n%512) % 512 }

// writeSparse writes a file entry in the PAX 1.0 sparse format: hdr
// describes the file (Name, Size = its length, Mode, Uid, Gid, ModTime),
// ext its data extents, r its bytes. raw is the writer under tw; tw must be
// between entries.
func writeSparse(tw *tar.Writer, raw io.Writer, hdr *tar.Header, ext []extent, r io.ReaderAt) error {
	var m strings.Builder
	m.WriteString(strconv.Itoa(len(ext)) + "\n")
	for _, e := range ext {
		m.WriteString(strconv.FormatInt(e.off, 10) + "\n" + strconv.FormatInt(e.len, 10) + "\n")
	}
	// A file that ends in a hole gets a last empty extent at its end, as
	// GNU tar writes it, so that readers that size the file from the map
	// make it whole.
	if k := len(ext); k == 0 || ext[k-1].end() < hdr.Size {
		m.Reset()
		m.WriteString(strconv.Itoa(len(ext)+1) + "\n")
		for _, e := range ext {
			m.WriteString(strconv.FormatInt(e.off, 10) + "\n" + strconv.FormatInt(e.len, 10) + "\n")
		}
		m.WriteString(strconv.FormatInt(hdr.Size, 10) + "\n0\n")
	}
	spmap := []byte(m.String())
	spmap = append(spmap, make([]byte, pad512(int64(len(spmap))))...)

	uid, gid := hdr.Uid, hdr.Gid
	recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", hdr.Name) + paxRecord("GNU.sparse.realsize", strconv.FormatInt(hdr.Size, 10)) +
		paxRecord("mtime", fmt.Sprintf("%d.%09d", hdr.ModTime.Unix(), hdr.ModTime.Nanosecond()))
	if uid > 0o7777777 || uid < 0 {
		recs += paxRecord("uid", strconv.Itoa(uid))
		uid = 0
	}
	if gid > 0o7777777 || gid < 0 {
		recs += paxRecord("gid", strconv.Itoa(gid))
		gid = 0
	}
	dir, file := path.Split(hdr.Name)
	if err := tw.Flush(); err != nil {
		return err
	}
	xname := asciiName(path.Join(dir, "PaxHeaders.0", file), 99)
	if _, err := raw.Write(paxHeaderBlock(xname, int64(len(recs)))); err != nil {
		return err
	}
	body := append([]byte(recs), make([]byte, pad512(int64(len(recs))))...)
	if _, err := raw.Write(body); err != nil {
		return err
	}
	mt := hdr.ModTime.Unix()
	if mt < 0 || mt >= 0o77777777777 {
		mt = 0 // the mtime record holds it
	}
	main := &tar.Header{Typeflag: tar.TypeReg, Name: asciiName(path.Join(dir, "GNUSparseFile.0", file), 99),
		Mode: hdr.Mode & 0o7777, Uid: uid, Gid: gid, ModTime: time.Unix(mt, 0),
		Size: int64(len(spmap)) + dataLen(ext), Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(main); err != nil {
		return err
	}
	if _, err := tw.Write(spmap); err != nil {
		return err
	}
	for _, e := range ext {
		n, err := io.Copy(tw, io.NewSectionReader(r, e.off, e.len))
		if err == nil && n < e.len {
			err = fmt.Errorf("sparse file shrank while read: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copySparse copies r into f (empty, at offset 0) and returns the bytes
// copied; sparseBlock-aligned runs of zeros are skipped rather than
// written, so they stay holes, and f is sized to the whole length at the
// end. buf's length must be a multiple of sparseBlock.
func copySparse(f interface {
	io.WriterAt
	Truncate(int64) error
}, r io.Reader, buf []byte) (int64, error) {
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		b := buf[:n]
		for i := 0; i < n; {
			zero := bytes.Equal(b[i:min(i+sparseBlock, n)], zeroBlock[:min(sparseBlock, n-i)])
			j := i
			for j < n && bytes.Equal(b[j:min(j+sparseBlock, n)], zeroBlock[:min(sparseBlock, n-j)]) == zero {
				j = min(j+sparseBlock, n)
			}
			if !zero {
				if _, werr := f.WriteAt(b[i:j], off+int64(i)); werr != nil {
					return off + int64(i), werr
				}
			}
			i = j
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return off, err
		}
	}
	return off, f.Truncate(off)
}
