package delivery

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// BundleFormat names the layout of an exported bundle.
const BundleFormat = "sbx-delivery-bundle/v1"

// A bundle is what a third party needs to check a delivery without sbxd:
// a tar of bundle.json ({"format", "delivery"}), the chain of records from
// the first to the delivery's (records/000001.json, ... each an envelope
// exactly as stored), and last the delivery's archive (archive.tar.zst).
type bundleHeader struct {
	Format   string `json:"format"`
	Delivery string `json:"delivery"`
}

// maxRecordBytes bounds one record read from a bundle.
const maxRecordBytes = 16 << 20

// WriteBundle writes the bundle of delivery id: chain is the envelopes of
// the chain from its first record to id's (the last), archive the
// archive's size bytes.
func WriteBundle(w io.Writer, id string, chain [][]byte, archive io.Reader, size int64) error {
	tw := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: Epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	hb, _ := json.Marshal(bundleHeader{Format: BundleFormat, Delivery: id})
	if err := put("bundle.json", hb); err != nil {
		return err
	}
	for i, env := range chain {
		if err := put(fmt.Sprintf("records/%06d.json", i+1), env); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "archive.tar.zst", Mode: 0o644, Size: size, ModTime: Epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if n, err := io.Copy(tw, archive); err != nil {
		return err
	} else if n != size {
		return fmt.Errorf("archive: %d of %d bytes", n, size)
	}
	return tw.Close()
}

// VerifyBundle reads a bundle and verifies it with pub: every record's
// signature, the chain, and every byte of the archive against the last
// record (see VerifyChain and VerifyArchive). It returns the delivery's
// record.
func VerifyBundle(r io.Reader, pub ed25519.PublicKey) (*Record, error) {
	tr := tar.NewReader(r)
	var hdr bundleHeader
	var chain [][]byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("bundle: no archive.tar.zst")
		}
		if err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		switch {
		case h.Name == "bundle.json":
			b, err := io.ReadAll(io.LimitReader(tr, maxRecordBytes))
			if err != nil {
				return nil, fmt.Errorf("bundle: %w", err)
			}
			if err := json.Unmarshal(b, &hdr); err != nil || hdr.Format != BundleFormat {
				return nil, fmt.Errorf("bundle: not a %s bundle", BundleFormat)
			}
		case strings.HasPrefix(h.Name, "records/"):
			if want := fmt.Sprintf("records/%06d.json", len(chain)+1); h.Name != want {
				return nil, fmt.Errorf("bundle: %s where %s was expected", h.Name, want)
			}
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, io.LimitReader(tr, maxRecordBytes)); err != nil {
				return nil, fmt.Errorf("bundle: %s: %w", h.Name, err)
			}
			chain = append(chain, buf.Bytes())
		case h.Name == "archive.tar.zst":
			if hdr.Format == "" {
				return nil, fmt.Errorf("bundle: no bundle.json")
			}
			if len(chain) == 0 {
				return nil, fmt.Errorf("bundle: no records")
			}
			recs, err := VerifyChain(chain, pub)
			if err != nil {
				return nil, err
			}
			last := recs[len(recs)-1]
			if last.Predicate.Delivery != hdr.Delivery {
				return nil, fmt.Errorf("bundle: %w: the last record is delivery %s, the bundle is of %s", ErrBrokenChain, last.Predicate.Delivery, hdr.Delivery)
			}
			if err := VerifyArchive(tr, last); err != nil {
				return nil, err
			}
			return last, nil
		default:
			return nil, fmt.Errorf("bundle: unexpected entry %q", h.Name)
		}
	}
}
