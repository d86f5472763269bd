// Package blob is sbx's content-addressed store of bytes: disk checkpoints
// and memory images are cut into chunks, and each chunk is stored once under
// the SHA-256 of its content, so checkpoints that share data share chunks.
//
// Store is the contract; Local (a directory, the default) and S3 (any
// S3-compatible object store) implement it, and both pass the suite in
// blobtest/. Encoding (Encode/Decode) compresses a chunk with zstd when that
// saves at least 10%; the address is always the digest of the raw content.
//
// Nothing in a Store knows which blobs are in use: records in the store
// package reference blobs by digest, and Sweep deletes the blobs that no
// record references (mark and sweep).
package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Digest is a blob's address: "sha256:" and 64 lowercase hex digits of the
// SHA-256 of its raw (uncompressed) content.
type Digest string

// DigestOf returns the digest of b.
func DigestOf(b []byte) Digest {
	sum := sha256.Sum256(b)
	return Digest("sha256:" + hex.EncodeToString(sum[:]))
}

// Validate checks d's form.
func (d Digest) Validate() error {
	h, ok := strings.CutPrefix(string(d), "sha256:")
	if !ok || len(h) != 64 {
		return fmt.Errorf("blob digest %q: want sha256:<64 hex digits>", string(d))
	}
	if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
		return fmt.Errorf("blob digest %q: want lowercase hex", string(d))
	}
	return nil
}

// Hex is the digest's hex part.
func (d Digest) Hex() string { return strings.TrimPrefix(string(d), "sha256:") }

// Errors.
var (
	// ErrNotFound: no blob has that digest.
	ErrNotFound = errors.New("blob not found")
	// ErrCorrupt: a blob's bytes do not match its digest.
	ErrCorrupt = errors.New("blob corrupt")
)

// Store keeps encoded blobs by digest. Methods are safe for concurrent use.
type Store interface {
	// Put stores an encoded blob (from Encode) under d. Storing a digest
	// that exists, or is put and not yet flushed, is a no-op. A Put may be
	// buffered: the blob is durable once Flush of its digest returns.
	Put(ctx context.Context, d Digest, encoded []byte) error
	// Flush makes the blobs ds durable. Each must have been Put (by this
	// caller or another); one that is neither stored nor pending is
	// ErrNotFound, one whose bytes fail verification ErrCorrupt.
	Flush(ctx context.Context, ds []Digest) error
	// Get returns the encoded blob; ErrNotFound if missing.
	Get(ctx context.Context, d Digest) ([]byte, error)
	// Has reports whether a blob exists (flushed, or put and pending).
	Has(ctx context.Context, d Digest) (bool, error)
	// Delete removes a blob; a missing one is not an error.
	Delete(ctx context.Context, d Digest) error
	// Walk calls fn for every stored blob with its encoded size in bytes.
	Walk(ctx context.Context, fn func(d Digest, size int64) error) error
	// Name describes the store, e.g. "local:/var/lib/sbx/blobs".
	Name() string
}

// Encoding tags, the first byte of an encoded blob.
const (
	encRaw  byte = 0
	encZstd byte = 1
)

var (
	encOnce sync.Once
	enc     *zstd.Encoder
	dec     *zstd.Decoder
)

func codecs() {
	encOnce.Do(func() {
		enc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		dec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
	})
}

// Encode returns raw's digest and its stored form: a tag byte, then the
// zstd frame if compression saves at least 10%, else raw as is. Data that
// looks random (a byte histogram of a sample near 8 bits of entropy) is
// stored raw without trying: zstd spends ~4 ns a byte finding nothing.
func Encode(raw []byte) (Digest, []byte) {
	codecs()
	d := DigestOf(raw)
	if looksRandom(raw) {
		plain := make([]byte, 1+len(raw))
		plain[0] = encRaw
		copy(plain[1:], raw)
		return d, plain
	}
	out := make([]byte, 1, 1+len(raw)/2)
	out[0] = encZstd
	out = enc.EncodeAll(raw, out)
	if len(out)-1 < len(raw)*9/10 {
		return d, out
	}
	plain := make([]byte, 1+len(raw))
	plain[0] = encRaw
	copy(plain[1:], raw)
	return d, plain
}

// looksRandom estimates the Shannon entropy of up to 16 KiB from the
// middle of b; above 7.9 bits a byte, zstd cannot save 10%.
func looksRandom(b []byte) bool {
	const sample = 16 << 10
	if len(b) < 4096 {
		return false
	}
	s := b
	if len(s) > sample {
		s = s[(len(s)-sample)/2:][:sample]
	}
	var hist [256]int
	for _, c := range s {
		hist[c]++
	}
	n := float64(len(s))
	h := 0.0
	for _, k := range hist {
		if k > 0 {
			p := float64(k) / n
			h -= p * math.Log2(p)
		}
	}
	return h > 7.9
}

// Decode returns the raw content of an encoded blob and checks it against
// d; a mismatch is ErrCorrupt.
func Decode(d Digest, encoded []byte) ([]byte, error) {
	codecs()
	if len(encoded) == 0 {
		return nil, fmt.Errorf("%s: empty: %w", d, ErrCorrupt)
	}
	var raw []byte
	switch encoded[0] {
	case encRaw:
		raw = encoded[1:]
	case encZstd:
		var err error
		if raw, err = dec.DecodeAll(encoded[1:], nil); err != nil {
			return nil, fmt.Errorf("%s: %v: %w", d, err, ErrCorrupt)
		}
	default:
		return nil, fmt.Errorf("%s: unknown encoding %d: %w", d, encoded[0], ErrCorrupt)
	}
	if DigestOf(raw) != d {
		return nil, fmt.Errorf("%s: content does not match its digest: %w", d, ErrCorrupt)
	}
	return raw, nil
}

// PutRaw encodes raw and stores it unless the store has it; it returns the
// digest and the encoded bytes written (0 when it existed).
func PutRaw(ctx context.Context, s Store, raw []byte) (Digest, int64, error) {
	d := DigestOf(raw)
	if ok, err := s.Has(ctx, d); err != nil {
		return "", 0, err
	} else if ok {
		return d, 0, nil
	}
	_, encoded := Encode(raw)
	if err := s.Put(ctx, d, encoded); err != nil {
		return "", 0, err
	}
	return d, int64(len(encoded)), nil
}

// GetRaw fetches and decodes a blob. A blob whose bytes do not match its
// digest is deleted (it can never be right) and ErrCorrupt returned: the
// next PutRaw of that content stores it again.
func GetRaw(ctx context.Context, s Store, d Digest) ([]byte, error) {
	b, err := s.Get(ctx, d)
	if err != nil {
		return nil, err
	}
	raw, err := Decode(d, b)
	if errors.Is(err, ErrCorrupt) {
		_ = s.Delete(ctx, d)
	}
	return raw, err
}

// readAllLimit reads r up to limit bytes.
func readAllLimit(r io.Reader, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("blob larger than %d bytes", limit)
	}
	return buf.Bytes(), nil
}
