// Package snapshot stores memory images: the files that gVisor's
// checkpoint writes (runsc checkpoint: checkpoint.img, the kernel's state;
// pages.img and pages_meta.img, the touched memory) as content-defined
// chunks in the blob store. Successive snapshots of one sandbox, and
// snapshots of its forks, share the chunks of the memory that did not
// change. A memory snapshot pairs such an image with a disk checkpoint of
// the writable layer taken at the same paused instant; the engine takes
// both and restores from them.
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/sbxhq/sbx/internal/blob"
)

// File is one file of a memory image, as chunks.
type File struct {
	Name   string        `json:"name"`
	Size   int64         `json:"size"`
	Chunks []blob.Digest `json:"chunks"`
}

// Image is a stored memory image: its files.
type Image []File

// Size is the bytes of the image's files.
func (im Image) Size() int64 {
	var n int64
	for _, f := range im {
		n += f.Size
	}
	return n
}

// Digests returns every chunk the image uses.
func (im Image) Digests() []blob.Digest {
	var out []blob.Digest
	for _, f := range im {
		out = append(out, f.Chunks...)
	}
	return out
}

// Stats reports what storing an image did.
type Stats struct {
	Bytes      int64 // the image's size
	AddedBytes int64 // encoded bytes newly written to the store
}

// Store puts the files of the image directory dir into st as chunks and
// flushes them. Only regular files directly in dir are stored.
func Store(ctx context.Context, st blob.Store, dir string) (Image, Stats, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, Stats{}, err
	}
	var im Image
	var stats Stats
	var all []blob.Digest
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, stats, err
		}
		chunks, err := blob.PutStreamSizes(ctx, st, f, blob.MemoryChunks)
		f.Close()
		if err != nil {
			return nil, stats, fmt.Errorf("store %s: %w", e.Name(), err)
		}
		file := File{Name: e.Name()}
		for _, c := range chunks {
			file.Size += c.Len
			file.Chunks = append(file.Chunks, c.Digest)
			stats.AddedBytes += c.Added
		}
		stats.Bytes += file.Size
		all = append(all, file.Chunks...)
		im = append(im, file)
	}
	if len(im) == 0 {
		return nil, stats, errors.New("the image directory is empty")
	}
	sort.Slice(im, func(i, j int) bool { return im[i].Name < im[j].Name })
	if err := st.Flush(ctx, all); err != nil {
		return nil, stats, err
	}
	return im, stats, nil
}

// Fetch writes the image's files into dir (created). A missing or corrupt
// chunk fails it (blob.ErrNotFound, blob.ErrCorrupt).
func Fetch(ctx context.Context, st blob.Store, im Image, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, file := range im {
		if filepath.Base(file.Name) != file.Name || file.Name == "." || file.Name == ".." {
			return fmt.Errorf("image file name %q: %w", file.Name, fs.ErrInvalid)
		}
		f, err := os.OpenFile(filepath.Join(dir, file.Name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		var n int64
		for _, d := range file.Chunks {
			raw, err := blob.GetRaw(ctx, st, d)
			if err != nil {
				f.Close()
				return fmt.Errorf("fetch %s: %w", file.Name, err)
			}
			if _, err := f.Write(raw); err != nil {
				f.Close()
				return err
			}
			n += int64(len(raw))
		}
		if n != file.Size {
			f.Close()
			return fmt.Errorf("fetch %s: %d bytes, want %d: %w", file.Name, n, file.Size, blob.ErrCorrupt)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// Verify rereads and checks every chunk of the image.
func Verify(ctx context.Context, st blob.Store, im Image) error {
	for _, d := range im.Digests() {
		if _, err := blob.GetRaw(ctx, st, d); err != nil {
			return err
		}
	}
	return nil
}
