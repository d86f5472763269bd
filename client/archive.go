package client

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// ExtractArchive extracts a tar archive (one from Download) into dir,
// created if missing, through an os.Root: no entry, and no symlink an
// earlier entry made, can write outside dir. What an entry replaces (a
// symlink) is removed, never written through. It keeps permission bits and
// modification times, not owners, setuid/setgid/sticky bits or hard links,
// and skips FIFOs and devices. Regular files are written sparse: blocks of
// 4 KiB that are all zeros (a sparse entry's holes among them) are left as
// holes, so a sparse file in the sandbox takes no more room here.
func ExtractArchive(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	buf := make([]byte, 1<<20)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		if name == "." {
			continue
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("archive entry %q leaves %s", hdr.Name, dir)
		}
		mode := fs.FileMode(hdr.Mode) & fs.ModePerm
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			_ = root.Chmod(name, mode)
		case tar.TypeReg:
			// Replace, never write through, what is there (a symlink).
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			if _, err := WriteSparse(f, tr, buf); err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			if err := f.Close(); err != nil {
				return err
			}
			_ = root.Chmod(name, mode)
			_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		case tar.TypeSymlink:
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
	}
}

// sparseBlock is the granularity at which WriteSparse leaves zeros as
// holes.
const sparseBlock = 4096

var zeroBlock [sparseBlock]byte

// WriteSparse copies r into f, an empty file at offset 0, and returns the
// bytes copied. Runs of 4 KiB blocks (aligned on the file's offsets) that
// are all zeros are skipped rather than written, so they stay holes; f is
// sized to the whole length at the end. buf (nil: 1 MiB) must be a
// multiple of 4 KiB long.
func WriteSparse(f *os.File, r io.Reader, buf []byte) (int64, error) {
	if len(buf) == 0 || len(buf)%sparseBlock != 0 {
		buf = make([]byte, 1<<20)
	}
	isZero := func(b []byte, i int) bool {
		j := min(i+sparseBlock, len(b))
		return bytes.Equal(b[i:j], zeroBlock[:j-i])
	}
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		b := buf[:n]
		for i := 0; i < n; {
			zero := isZero(b, i)
			j := i
			for j < n && isZero(b, j) == zero {
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
