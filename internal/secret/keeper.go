package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// KeyFile is the name of the key file in sbxd's data dir.
const KeyFile = "secrets.key"

// keyBytes is the key's size: AES-256.
const keyBytes = 32

// sealVersion starts every sealed value: the format below, so that a later
// one can be told apart.
const sealVersion = 1

// Keeper seals and opens secret values with AES-256-GCM (crypto/aes,
// crypto/cipher) under a key of its own, kept in a file of sbxd's data dir
// that only root can read. Sealed form: one version byte (1), a 12-byte
// random nonce, the ciphertext and its 16-byte tag. The additional data
// binds a value to what it is for (a secret's name), so that a sealed
// value moved to another name does not open. Safe for concurrent use.
type Keeper struct {
	aead cipher.AEAD
}

// OpenKeeper opens the key file at path, creating it (32 random bytes,
// mode 0600, O_EXCL) when it does not exist. The file must be a regular
// file (a symlink is refused: it is never followed), of 32 bytes, readable
// by its owner only.
//
// Errors: the file is a symlink, of another size, readable by group or
// others, or unreadable; the directory is not writable.
func OpenKeeper(path string) (*Keeper, error) {
	key, err := readKey(path)
	if errors.Is(err, os.ErrNotExist) {
		key, err = createKey(path)
		if errors.Is(err, os.ErrExist) {
			key, err = readKey(path) // another sbxd made it meanwhile
		}
	}
	if err != nil {
		return nil, err
	}
	return newKeeper(key)
}

// DeriveKeeper is a Keeper whose key is derived from secret (a cluster's
// key, shared by its nodes) with HKDF-SHA256 (crypto/hkdf; info
// "sbx secrets keeper v1"), so that every holder of secret opens what any
// other sealed. secret must be at least 16 bytes.
func DeriveKeeper(secret []byte) (*Keeper, error) {
	if len(secret) < 16 {
		return nil, errors.New("a derived secrets key needs a secret of at least 16 bytes")
	}
	key, err := hkdf.Key(sha256.New, secret, []byte("sbx"), "sbx secrets keeper v1", keyBytes)
	if err != nil {
		return nil, err
	}
	return newKeeper(key)
}

// newKeeper is the Keeper of a 32-byte key.
func newKeeper(key []byte) (*Keeper, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Keeper{aead: aead}, nil
}

func readKey(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, os.ErrNotExist
		}
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("secrets key %s is a symlink: refusing to follow it", path)
		}
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key %s has mode %v: it must be readable by its owner only (chmod 600)", path, st.Mode().Perm())
	}
	key := make([]byte, keyBytes+1)
	n, err := io.ReadFull(f, key)
	if n != keyBytes || !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("secrets key %s: want exactly %d bytes", path, keyBytes)
	}
	return key[:keyBytes], nil
}

func createKey(path string) ([]byte, error) {
	key := make([]byte, keyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp := path + ".new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create the secrets key: %w", err)
	}
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// link, not rename: an existing key is never replaced.
		err = os.Link(tmp, path)
	}
	_ = os.Remove(tmp)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, os.ErrExist
		}
		return nil, fmt.Errorf("create the secrets key: %w", err)
	}
	if d, err := os.Open(dirOf(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return key, nil
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == 0 {
				return "/"
			}
			return p[:i]
		}
	}
	return "."
}

// Seal encrypts plain for purpose (the additional data; e.g. "secret:NAME")
// and returns the sealed form.
func (k *Keeper) Seal(plain []byte, purpose string) []byte {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic("secret: crypto/rand: " + err.Error())
	}
	out := append([]byte{sealVersion}, nonce...)
	return k.aead.Seal(out, nonce, plain, []byte(purpose))
}

// ErrUnsealable: a sealed value does not open (another key, another
// purpose, or damaged).
var ErrUnsealable = errors.New("sealed secret does not open with this sbxd's key")

// Open decrypts what Seal returned for the same purpose.
//
// Errors: ErrUnsealable.
func (k *Keeper) Open(sealed []byte, purpose string) ([]byte, error) {
	ns := k.aead.NonceSize()
	if len(sealed) < 1+ns+k.aead.Overhead() || sealed[0] != sealVersion {
		return nil, ErrUnsealable
	}
	plain, err := k.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], []byte(purpose))
	if err != nil {
		return nil, ErrUnsealable
	}
	return plain, nil
}
