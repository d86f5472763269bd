package blob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Local is a Store in a directory: dir/sha256/<first 2 hex>/<hex>. A Put
// writes a temp file under dir/tmp; Flush makes the batch durable (fsync,
// or one syncfs for a large batch), verifies each temp file against its
// digest, renames it into place and fsyncs the directories, as containerd's
// content store does for one blob. A crash before Flush leaves only temp
// files, which the next Open removes.
type Local struct {
	dir string

	flushMu sync.Mutex
	mu      sync.Mutex
	pending map[Digest]pendingBlob
}

// pendingBlob is a blob written to a temp file and not yet committed.
type pendingBlob struct {
	tmp string
	crc uint32 // CRC-32C of the bytes written, to verify the read-back
	n   int
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var _ Store = (*Local)(nil)

// OpenLocal opens (creating) a local store in dir and removes temp files
// left by a crash.
func OpenLocal(dir string) (*Local, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sha256"), 0o700); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	return &Local{dir: dir, pending: map[Digest]pendingBlob{}}, nil
}

// Name implements Store.
func (l *Local) Name() string { return "local:" + l.dir }

func (l *Local) path(d Digest) string {
	h := d.Hex()
	return filepath.Join(l.dir, "sha256", h[:2], h)
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, d Digest, encoded []byte) error {
	if err := d.Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	_, busy := l.pending[d]
	l.mu.Unlock()
	if busy {
		return nil
	}
	if _, err := os.Stat(l.path(d)); err == nil {
		return nil
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(l.dir, "tmp", d.Hex()[:16]+"-"+hex.EncodeToString(rnd[:]))
	if err := os.WriteFile(tmp, encoded, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write blob %s: %w", d, err)
	}
	l.mu.Lock()
	if _, busy := l.pending[d]; busy {
		l.mu.Unlock()
		os.Remove(tmp)
		return nil
	}
	l.pending[d] = pendingBlob{tmp: tmp, crc: crc32.Checksum(encoded, castagnoli), n: len(encoded)}
	l.mu.Unlock()
	return nil
}

// Flush implements Store. Flushes are serialised, so a blob pending in
// another caller's flush is committed (or has failed) before this one looks
// at it. Each temp file is read back after the sync and checked against
// the CRC-32C of what Put wrote (the content was checked against its digest
// when it was encoded).
func (l *Local) Flush(ctx context.Context, ds []Digest) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	batch := map[Digest]pendingBlob{}
	l.mu.Lock()
	for _, d := range ds {
		if tmp, ok := l.pending[d]; ok {
			batch[d] = tmp
		}
	}
	l.mu.Unlock()
	for _, d := range ds {
		if _, ok := batch[d]; ok {
			continue
		}
		if _, err := os.Stat(l.path(d)); err != nil {
			return fmt.Errorf("flush %s: %w", d, ErrNotFound)
		}
	}
	if len(batch) == 0 {
		return nil
	}
	// fsync each temp file, in parallel so that ext4 groups the journal
	// commits (syncfs would also flush every other dirty page of the
	// filesystem: the sandboxes' own writes).
	tmps := map[string]bool{}
	for _, pb := range batch {
		tmps[pb.tmp] = true
	}
	if err := fsyncAll(tmps); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for d, pb := range batch {
		if err := ctx.Err(); err != nil {
			return err
		}
		tmp := pb.tmp
		b, err := os.ReadFile(tmp)
		if err != nil {
			return err
		}
		if len(b) != pb.n || crc32.Checksum(b, castagnoli) != pb.crc {
			l.drop(d, tmp)
			return fmt.Errorf("verify before commit: %s reads back different from what was written: %w", d, ErrCorrupt)
		}
		final := l.path(d)
		if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
			return err
		}
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
		l.mu.Lock()
		delete(l.pending, d)
		l.mu.Unlock()
		dirs[filepath.Dir(final)] = true
	}
	dirs[filepath.Join(l.dir, "sha256")] = true
	return fsyncAll(dirs)
}

// drop forgets a pending blob and removes its temp file.
func (l *Local) drop(d Digest, tmp string) {
	l.mu.Lock()
	delete(l.pending, d)
	l.mu.Unlock()
	os.Remove(tmp)
}

// fsyncAll fsyncs the files or directories of paths, up to 16 at a time.
func fsyncAll(set map[string]bool) error {
	paths := make(chan string)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for w := 0; w < min(16, len(set)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for p := range paths {
				if err := fsyncPath(p); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for p := range set {
		paths <- p
	}
	close(paths)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Get implements Store.
func (l *Local) Get(ctx context.Context, d Digest) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	pb, busy := l.pending[d]
	l.mu.Unlock()
	p := l.path(d)
	if busy {
		p = pb.tmp
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	return b, err
}

// Has implements Store.
func (l *Local) Has(ctx context.Context, d Digest) (bool, error) {
	if err := d.Validate(); err != nil {
		return false, err
	}
	l.mu.Lock()
	_, busy := l.pending[d]
	l.mu.Unlock()
	if busy {
		return true, nil
	}
	_, err := os.Stat(l.path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, d Digest) error {
	if err := d.Validate(); err != nil {
		return err
	}
	// A blob put and never flushed (its capture failed) is a temp file:
	// drop it, after any flush in progress (which would commit it).
	l.mu.Lock()
	_, busy := l.pending[d]
	l.mu.Unlock()
	if busy {
		l.flushMu.Lock()
		l.mu.Lock()
		pb, still := l.pending[d]
		l.mu.Unlock()
		if still {
			l.drop(d, pb.tmp)
		}
		l.flushMu.Unlock()
	}
	err := os.Remove(l.path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Walk implements Store. It reports blobs put and not yet flushed too
// (with the size of their temp file), so that a collector can delete what
// a failed capture put and never committed.
func (l *Local) Walk(ctx context.Context, fn func(Digest, int64) error) error {
	l.mu.Lock()
	pending := make(map[Digest]int64, len(l.pending))
	for d, pb := range l.pending {
		pending[d] = int64(pb.n)
	}
	l.mu.Unlock()
	for d, n := range pending {
		if err := fn(d, n); err != nil {
			return err
		}
	}
	if err := l.walkCommitted(ctx, func(d Digest, size int64) error {
		if _, ok := pending[d]; ok {
			return nil // committed by a flush since: reported once
		}
		return fn(d, size)
	}); err != nil {
		return err
	}
	return nil
}

func (l *Local) walkCommitted(ctx context.Context, fn func(Digest, int64) error) error {
	root := filepath.Join(l.dir, "sha256")
	subs, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		ents, err := os.ReadDir(filepath.Join(root, sub.Name()))
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return err
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			d := Digest("sha256:" + e.Name())
			if d.Validate() != nil {
				continue
			}
			if err := fn(d, info.Size()); err != nil {
				return err
			}
		}
	}
	return nil
}
