package disk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/sbxhq/sbx/internal/blob"
)

// EntryType is the kind of a manifest entry.
type EntryType string

// Entry types. A whiteout is overlayfs's mark of a path deleted from the
// image (a 0/0 character device in the upperdir); an opaque directory
// (xattr trusted.overlay.opaque=y) hides the image's directory below it.
const (
	TypeDir      EntryType = "dir"
	TypeFile     EntryType = "file"
	TypeSymlink  EntryType = "symlink"
	TypeHardlink EntryType = "hardlink"
	TypeWhiteout EntryType = "whiteout"
	TypeChar     EntryType = "char"
	TypeBlock    EntryType = "block"
	TypeFifo     EntryType = "fifo"
	TypeSocket   EntryType = "socket"
)

// Extent is a byte range of a chunk: a file's content is its extents in
// order. Small files share chunks (capture chunks the concatenation of the
// files it reads). An extent without a chunk (Chunk "") is a hole of Len
// zero bytes, kept unallocated on restore (manifest version 2).
type Extent struct {
	Chunk blob.Digest `json:"c"`
	Off   int64       `json:"o"`
	Len   int64       `json:"l"`
}

// Entry is one path of a writable layer.
type Entry struct {
	// Path is relative to the layer's root, "" for the root itself.
	Path string    `json:"p"`
	Type EntryType `json:"t"`
	// Mode is the permission bits with setuid (04000), setgid (02000) and
	// sticky (01000), as in stat(2).
	Mode uint32 `json:"m"`
	UID  int    `json:"u,omitempty"`
	GID  int    `json:"g,omitempty"`
	// Size in bytes of a file.
	Size    int64 `json:"s,omitempty"`
	MtimeNS int64 `json:"mt"`
	// CtimeNS and Ino identify an unchanged file for the next capture; they
	// are not restored (the kernel sets them).
	CtimeNS int64  `json:"ct,omitempty"`
	Ino     uint64 `json:"i,omitempty"`
	// Rdev of a char or block device.
	Rdev uint64 `json:"r,omitempty"`
	// Target of a symlink, or the path a hard link shares its inode with.
	Target string `json:"tg,omitempty"`
	// Xattrs are extended attributes (security.capability,
	// trusted.overlay.opaque, user.*), values as bytes.
	Xattrs  map[string][]byte `json:"x,omitempty"`
	Extents []Extent          `json:"e,omitempty"`
	// Sum is the CRC-32C of a file's content, in hex: chunk boundaries
	// depend on what was read with the file, so two captures of the same
	// content can have different extents; Sum tells them equal. A hole
	// enters the sum as 'h' and its offset and length (little-endian
	// int64s) instead of its zeros.
	Sum string `json:"k,omitempty"`
}

// ManifestVersion is the format version of Manifest that captures write:
// 2 adds hole extents. Version 1 manifests (no holes) are read as they are.
const ManifestVersion = 2

// Manifest describes a whole writable layer: its entries in walk order
// (parents before children, then by name).
type Manifest struct {
	Version int `json:"version"`
	// CaptureNS is when the capture saw the layer still (Unix ns).
	CaptureNS int64   `json:"capture_ns"`
	Entries   []Entry `json:"entries"`
}

// Stats sums a manifest.
func (m *Manifest) Stats() (files int, bytes int64) {
	for _, e := range m.Entries {
		if e.Type == TypeFile {
			files++
			bytes += e.Size
		}
	}
	return
}

// Chunks returns every chunk the manifest's files use, once each.
func (m *Manifest) Chunks() []blob.Digest {
	seen := map[blob.Digest]bool{}
	var out []blob.Digest
	for _, e := range m.Entries {
		for _, x := range e.Extents {
			if x.Chunk != "" && !seen[x.Chunk] {
				seen[x.Chunk] = true
				out = append(out, x.Chunk)
			}
		}
	}
	return out
}

// extentsOf maps the stream range [start, start+n) onto chunks.
func extentsOf(chunks []blob.Chunk, start, n int64) []Extent {
	var out []Extent
	end := start + n
	// chunks are in stream order: find the first that ends after start.
	lo, hi := 0, len(chunks)
	for lo < hi {
		mid := (lo + hi) / 2
		if chunks[mid].Start+chunks[mid].Len <= start {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	for i := lo; i < len(chunks) && chunks[i].Start < end; i++ {
		c := chunks[i]
		s := max(start, c.Start)
		e := min(end, c.Start+c.Len)
		if e > s {
			out = append(out, Extent{Chunk: c.Digest, Off: s - c.Start, Len: e - s})
		}
	}
	return out
}

// ManifestRef is how a stored manifest is found: the chunks of its
// encoding, in order.
type ManifestRef []blob.Digest

// PutManifest stores m as chunks and returns its ref and the encoded bytes
// it added to the store. The caller flushes the ref's chunks.
func PutManifest(ctx context.Context, st blob.Store, m *Manifest) (ManifestRef, int64, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, 0, err
	}
	chunks, err := blob.PutStream(ctx, st, bytes.NewReader(b))
	if err != nil {
		return nil, 0, err
	}
	ref := make(ManifestRef, len(chunks))
	var added int64
	for i, c := range chunks {
		ref[i] = c.Digest
		added += c.Added
	}
	return ref, added, nil
}

// GetManifest loads a stored manifest.
func GetManifest(ctx context.Context, st blob.Store, ref ManifestRef) (*Manifest, error) {
	var buf bytes.Buffer
	for _, d := range ref {
		raw, err := blob.GetRaw(ctx, st, d)
		if err != nil {
			return nil, fmt.Errorf("manifest chunk: %w", err)
		}
		buf.Write(raw)
	}
	var m Manifest
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Version < 1 || m.Version > ManifestVersion {
		return nil, fmt.Errorf("manifest version %d, want 1 to %d", m.Version, ManifestVersion)
	}
	return &m, nil
}
