package delivery

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	ita "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
)

// Verification failures, each wrapped with the record or file it is about.
var (
	// ErrWrongKey: no signature of the record is by the given key.
	ErrWrongKey = errors.New("not signed by the given key")
	// ErrTamperedRecord: the record is not what was signed (its
	// signature, payload or encoding was altered), or not a record.
	ErrTamperedRecord = errors.New("record altered")
	// ErrBrokenChain: a record does not follow the one before it (one was
	// removed, reordered or replaced).
	ErrBrokenChain = errors.New("chain broken")
	// ErrTamperedArchive: the archive's bytes do not match its record.
	ErrTamperedArchive = errors.New("archive altered")
)

// Record is a verified delivery record.
type Record struct {
	// Envelope is the DSSE envelope's JSON as stored; Digest its
	// "sha256:<hex>".
	Envelope []byte
	Digest   string
	// Predicate is the statement's predicate; Files its file subjects
	// (the archive's regular files; Size unknown, 0).
	Predicate Predicate
	Files     []File
}

type statementJSON struct {
	Type    string `json:"_type"`
	Subject []struct {
		Name      string            `json:"name"`
		Digest    map[string]string `json:"digest"`
		MediaType string            `json:"mediaType"`
	} `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     Predicate `json:"predicate"`
}

// VerifyRecord checks one record's envelope: that one of its signatures is
// by pub over its payload (DSSE PAE), and that the payload is an in-toto
// Statement v1 of a delivery whose first subject is its archive. Errors
// wrap ErrWrongKey or ErrTamperedRecord.
func VerifyRecord(envelope []byte, pub ed25519.PublicKey) (*Record, error) {
	var env dsse.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, fmt.Errorf("%w: not a DSSE envelope: %v", ErrTamperedRecord, err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: payload is not base64: %v", ErrTamperedRecord, err)
	}
	want := KeyID(pub)
	var seen []string
	signed := false
	for _, s := range env.Signatures {
		seen = append(seen, s.KeyID)
		if s.KeyID != want {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil {
			return nil, fmt.Errorf("%w: signature is not base64", ErrTamperedRecord)
		}
		if !ed25519.Verify(pub, dsse.PAE(env.PayloadType, payload), sig) {
			return nil, fmt.Errorf("%w: the signature by key %s does not match the record's content", ErrTamperedRecord, short(want))
		}
		signed = true
		break
	}
	if !signed {
		return nil, fmt.Errorf("%w: signed by key %s, the given key is %s", ErrWrongKey, strings.Join(shortAll(seen), ", "), short(want))
	}
	if env.PayloadType != PayloadType {
		return nil, fmt.Errorf("%w: payload type %q, want %q", ErrTamperedRecord, env.PayloadType, PayloadType)
	}
	var st ita.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("%w: not an in-toto statement: %v", ErrTamperedRecord, err)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("%w: invalid in-toto statement: %v", ErrTamperedRecord, err)
	}
	var sj statementJSON
	if err := json.Unmarshal(payload, &sj); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTamperedRecord, err)
	}
	if sj.PredicateType != PredicateType {
		return nil, fmt.Errorf("%w: predicate type %q, want %q", ErrTamperedRecord, sj.PredicateType, PredicateType)
	}
	p := sj.Predicate
	if len(sj.Subject) == 0 || sj.Subject[0].Name != p.Archive.Name || sj.Subject[0].Digest["sha256"] != p.Archive.SHA256 {
		return nil, fmt.Errorf("%w: the first subject is not the archive", ErrTamperedRecord)
	}
	r := &Record{Envelope: envelope, Digest: DigestOf(envelope), Predicate: p}
	for _, s := range sj.Subject[1:] {
		r.Files = append(r.Files, File{Name: s.Name, SHA256: s.Digest["sha256"]})
	}
	return r, nil
}

// short is how a key id is shown in a message: whole.
func short(keyID string) string { return keyID }

func shortAll(ids []string) []string {
	if len(ids) == 0 {
		return []string{"(none)"}
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = short(id)
	}
	return out
}

// VerifyChain verifies each record (VerifyRecord) and that they form the
// chain from its start: the first has Seq 1 and no Previous, and each next
// one has the next Seq and names the one before it as Previous. Errors say
// which record failed (its place and delivery id) and wrap ErrWrongKey,
// ErrTamperedRecord or ErrBrokenChain.
func VerifyChain(envelopes [][]byte, pub ed25519.PublicKey) ([]*Record, error) {
	out := make([]*Record, 0, len(envelopes))
	for i, env := range envelopes {
		r, err := VerifyRecord(env, pub)
		if err != nil {
			return nil, fmt.Errorf("record %d of the chain: %w", i+1, err)
		}
		p := r.Predicate
		if i == 0 {
			if p.Seq != 1 || p.Previous != "" {
				return nil, fmt.Errorf("record 1 (delivery %s): %w: it is record %d of the chain, following %s: the records before it are missing",
					p.Delivery, ErrBrokenChain, p.Seq, p.Previous)
			}
		} else {
			prev := out[i-1]
			if p.Seq != prev.Predicate.Seq+1 {
				return nil, fmt.Errorf("record %d (delivery %s): %w: its sequence number is %d but the record before it (delivery %s) is %d: a record was removed or reordered",
					i+1, p.Delivery, ErrBrokenChain, p.Seq, prev.Predicate.Delivery, prev.Predicate.Seq)
			}
			if p.Previous != prev.Digest {
				return nil, fmt.Errorf("record %d (delivery %s): %w: it follows %s, but the record before it (delivery %s) is %s: a record was replaced or altered",
					i+1, p.Delivery, ErrBrokenChain, p.Previous, prev.Predicate.Delivery, prev.Digest)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// VerifyArchive reads the archive r to its end and checks it against the
// record: its SHA-256 and length, and that its regular files are exactly
// the record's file subjects with their digests. Errors wrap
// ErrTamperedArchive and name what differs.
func VerifyArchive(r io.Reader, rec *Record) error {
	a := rec.Predicate.Archive
	h := sha256.New()
	pr, pw := io.Pipe()
	type res struct {
		files []File
		err   error
	}
	done := make(chan res, 1)
	go func() {
		fs, err := ReadFiles(pr)
		_, _ = io.Copy(io.Discard, pr) // drain: the digest covers every byte
		done <- res{fs, err}
	}()
	n, err := io.Copy(io.MultiWriter(h, pw), r)
	pw.CloseWithError(err)
	got := <-done
	pr.Close()
	if err != nil {
		return fmt.Errorf("delivery %s: read archive: %w", rec.Predicate.Delivery, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if sum != a.SHA256 || n != a.Bytes {
		return fmt.Errorf("delivery %s: %w: its sha256 is %s (%d bytes), the record says %s (%d bytes)",
			rec.Predicate.Delivery, ErrTamperedArchive, sum, n, a.SHA256, a.Bytes)
	}
	if got.err != nil {
		return fmt.Errorf("delivery %s: %w: unreadable: %v", rec.Predicate.Delivery, ErrTamperedArchive, got.err)
	}
	want := map[string]string{}
	for _, f := range rec.Files {
		want[f.Name] = f.SHA256
	}
	for _, f := range got.files {
		d, ok := want[f.Name]
		if !ok {
			return fmt.Errorf("delivery %s: %w: file %q is not in the record", rec.Predicate.Delivery, ErrTamperedArchive, f.Name)
		}
		if d != f.SHA256 {
			return fmt.Errorf("delivery %s: %w: file %q has sha256 %s, the record says %s", rec.Predicate.Delivery, ErrTamperedArchive, f.Name, f.SHA256, d)
		}
		delete(want, f.Name)
	}
	for name := range want {
		return fmt.Errorf("delivery %s: %w: file %q of the record is missing", rec.Predicate.Delivery, ErrTamperedArchive, name)
	}
	return nil
}

// ParseRecord returns the statement (JSON) inside a record's envelope,
// without verifying anything: for display only.
func ParseRecord(envelope []byte) ([]byte, error) {
	var env dsse.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, fmt.Errorf("not a DSSE envelope: %w", err)
	}
	return base64.StdEncoding.DecodeString(env.Payload)
}
