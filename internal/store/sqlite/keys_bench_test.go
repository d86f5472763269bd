package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/store"
)

// BenchmarkKeyByHash is what authenticating a request with a key record
// costs the store (sbxd adds one SHA-256 of the secret): a lookup by hash
// among 1000 keys.
func BenchmarkKeyByHash(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "sbx.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hashes := make([]string, 1000)
	for i := range hashes {
		sum := sha256.Sum256([]byte(fmt.Sprintf("sbxk_secret-%d", i)))
		hashes[i] = hex.EncodeToString(sum[:])
		if err := s.CreateKey(ctx, &store.Key{ID: fmt.Sprintf("key_%016x", i), Name: fmt.Sprintf("k%d", i), Hash: hashes[i],
			CreateTime: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.KeyByHash(ctx, hashes[i%len(hashes)]); err != nil {
			b.Fatal(err)
		}
	}
}
