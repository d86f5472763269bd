package delivery

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	ita "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// PayloadType is the DSSE payload type of a delivery record: an in-toto
// statement in JSON.
const PayloadType = "application/vnd.in-toto+json"

// PredicateType names the predicate of a delivery statement.
const PredicateType = "https://github.com/sbxhq/sbx/delivery/v1"

// Predicate is what a delivery statement says beyond its subjects (the
// archive, then each regular file in it).
type Predicate struct {
	// Delivery is the delivery's id; Name the caller's name for it; Seq
	// its place in the node's chain of deliveries, from 1.
	Delivery string `json:"delivery"`
	Name     string `json:"name,omitempty"`
	Seq      int64  `json:"seq"`
	// Previous is "sha256:<hex>" of the envelope of delivery Seq-1, exactly
	// as stored ("" for the first).
	Previous string  `json:"previous"`
	Sandbox  Sandbox `json:"sandbox"`
	Lineage  Lineage `json:"lineage"`
	Archive  Archive `json:"archive"`
	// StartTime and FinishTime bound the packing of the archive.
	StartTime  time.Time `json:"start_time"`
	FinishTime time.Time `json:"finish_time"`
	// Metadata is the caller's JSON object (null when none).
	Metadata json.RawMessage `json:"metadata"`
}

// Sandbox names the delivered sandbox and the image it ran on.
type Sandbox struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Image string `json:"image"`
	// ImageID is the exact unpacked root filesystem; ImageDigest the
	// image's source digest as pulled or built ("" if unknown).
	ImageID     string `json:"image_id"`
	ImageDigest string `json:"image_digest,omitempty"`
}

// Lineage is where the sandbox's disk came from.
type Lineage struct {
	// Checkpoints are the sandbox's checkpoints when it was delivered,
	// oldest first.
	Checkpoints []Checkpoint `json:"checkpoints"`
	// DiskSource is the checkpoint the disk was last restored from ("v3",
	// or "<sandbox>/<id>" for a fork's), "" if none.
	DiskSource string `json:"disk_source,omitempty"`
	// SourceSnapshot is the snapshot the sandbox was started from, and
	// ForkParent the sandbox it was forked from ("" if none).
	SourceSnapshot string `json:"source_snapshot,omitempty"`
	ForkParent     string `json:"fork_parent,omitempty"`
	// GuardedCommands are the commands of the guarded execs that took a
	// checkpoint before they ran, oldest first (as shown in the
	// checkpoints' comments; a guarded exec undone by a memory snapshot
	// leaves none).
	GuardedCommands []string `json:"guarded_commands,omitempty"`
}

// Checkpoint is one checkpoint of the lineage.
type Checkpoint struct {
	ID         string    `json:"id"`
	Comment    string    `json:"comment,omitempty"`
	CreateTime time.Time `json:"create_time"`
}

// Archive describes the delivered archive.
type Archive struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type"`
	// SHA256 is 64 lowercase hex digits of the archive's bytes.
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	Files  int    `json:"files"`
}

// DigestOf is "sha256:<hex>" of b: what a record's successor names as
// Previous.
func DigestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// KeyID is the DSSE key id of pub, as dsse.SHA256KeyID makes it: the
// key's SSH SHA-256 fingerprint ("SHA256:<base64>").
func KeyID(pub ed25519.PublicKey) string {
	id, err := dsse.SHA256KeyID(pub)
	if err != nil {
		// An ed25519 key always encodes.
		panic(err)
	}
	return id
}

// LoadOrCreateKey reads the node's ed25519 signing key from path (PKCS#8,
// PEM), making it (mode 0600, never through a symlink) on first use. A
// key file others can read is made 0600.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := readNoFollow(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("delivery key: %w", err)
		}
		if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
			f.Close()
			return nil, fmt.Errorf("delivery key: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("delivery key: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("delivery key: %w", err)
		}
		return priv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("delivery key: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("delivery key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("delivery key %s: not a PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("delivery key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("delivery key %s: not an ed25519 key", path)
	}
	return priv, nil
}

func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b := make([]byte, 0, 512)
	buf := make([]byte, 512)
	for len(b) < 64<<10 {
		n, err := f.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return b, nil
}

// PublicKeyPEM encodes pub as a PEM "PUBLIC KEY" (PKIX).
func PublicKeyPEM(pub ed25519.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err) // an ed25519 key always encodes
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ParsePublicKey reads an ed25519 public key from PEM ("PUBLIC KEY").
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM public key")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("not an ed25519 public key")
	}
	return pub, nil
}

type signer struct{ k ed25519.PrivateKey }

func (s signer) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(s.k, data), nil
}

func (s signer) KeyID() (string, error) {
	return KeyID(s.k.Public().(ed25519.PublicKey)), nil
}

// Sign makes the record of a delivery: an in-toto Statement v1 whose
// subjects are the archive (first, named pred.Archive.Name) and each of
// files, with pred as its predicate, in a DSSE envelope signed with key. It
// returns the envelope's JSON, the bytes to store and serve.
func Sign(ctx context.Context, key ed25519.PrivateKey, pred *Predicate, files []File) ([]byte, error) {
	st := &ita.Statement{Type: ita.StatementTypeUri, PredicateType: PredicateType}
	st.Subject = append(st.Subject, &ita.ResourceDescriptor{Name: pred.Archive.Name, MediaType: pred.Archive.MediaType,
		Digest: map[string]string{"sha256": pred.Archive.SHA256}})
	for _, f := range files {
		st.Subject = append(st.Subject, &ita.ResourceDescriptor{Name: f.Name, Digest: map[string]string{"sha256": f.SHA256}})
	}
	pj, err := json.Marshal(pred)
	if err != nil {
		return nil, err
	}
	var pm map[string]any
	if err := json.Unmarshal(pj, &pm); err != nil {
		return nil, err
	}
	if st.Predicate, err = structpb.NewStruct(pm); err != nil {
		return nil, err
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	payload, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	es, err := dsse.NewEnvelopeSigner(signer{key})
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(ctx, PayloadType, payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(env)
}
