package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/delivery"
)

func (a *app) deliverCmd() *cobra.Command {
	var name, metadata string
	var teardown bool
	cmd := &cobra.Command{
		Use:   "deliver NAME PATH... [--name LABEL] [--teardown]",
		Short: "Deliver files of a sandbox: a reproducible archive and a signed, chained record",
		Long: "Pack PATHs of the sandbox into one reproducible archive (tar, zstd) kept in the blob store,\n" +
			"and append a delivery record to this node's chain: an in-toto statement of the archive's and\n" +
			"each file's sha256, the sandbox, its image and lineage, signed (DSSE, ed25519) with the node's key.\n" +
			"With --teardown, the sandbox is deleted once the delivery is recorded.\n" +
			"Check it with sbx delivery verify ID, or offline from sbx delivery export ID > bundle.",
		Example: "  sbx deliver dev /workspace/out /workspace/patch.diff --name release-1 --teardown",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			req := api.DeliveryRequest{Paths: args[1:], Name: name, Teardown: teardown}
			if metadata != "" {
				if !json.Valid([]byte(metadata)) {
					return fmt.Errorf("--metadata: not valid JSON")
				}
				req.Metadata = json.RawMessage(metadata)
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p := newProgress(a.stderr, "delivery of "+sb.Name)
			d, err := sb.DeliverStream(cmd.Context(), req, func(msg string, _ time.Time) { p.update(msg) })
			p.done(err == nil)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(d)
			}
			fmt.Fprintln(a.stdout, d.ID)
			fmt.Fprintf(a.stderr, "delivered %d files (%s archive, %s), record %d of the chain\n", d.Files, humanBytes(d.ArchiveBytes), d.ArchiveDigest, d.Seq)
			if t := d.Teardown; t != nil {
				if !t.Deleted {
					return fmt.Errorf("delivered as %s, but the teardown failed: %s", d.ID, t.Error)
				}
				fmt.Fprintf(a.stderr, "tore down %s: layer %s, %d checkpoints (%s stored), %d processes ended; removed %s\n",
					sb.Name, humanBytes(t.LayerBytes), t.Checkpoints, humanBytes(t.CheckpointBytes), t.Processes, strings.Join(t.Removed, ", "))
				if len(t.Left) > 0 {
					return fmt.Errorf("the teardown left %s (see sbxd's log)", strings.Join(t.Left, ", "))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a label for the delivery")
	cmd.Flags().StringVar(&metadata, "metadata", "", "a JSON object signed with the record (at most 64 KiB)")
	cmd.Flags().BoolVar(&teardown, "teardown", false, "delete the sandbox once the delivery is recorded")
	a.addOutput(cmd)
	return cmd
}

func (a *app) deliveriesCmd() *cobra.Command {
	var sandbox string
	cmd := &cobra.Command{
		Use:   "deliveries",
		Short: "List deliveries, in chain order (oldest first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			ds, err := a.c.Deliveries.List(cmd.Context(), sandbox)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(ds)
			}
			var rows [][]string
			for _, d := range ds {
				rows = append(rows, []string{strconv.FormatInt(d.Seq, 10), d.ID, d.Name, d.Sandbox, age(d.CreateTime),
					strconv.Itoa(d.Files), humanBytes(d.ArchiveBytes), d.ArchiveDigest[:min(len(d.ArchiveDigest), 19)]})
			}
			a.table("SEQ\tID\tNAME\tSANDBOX\tAGE\tFILES\tARCHIVE\tDIGEST", rows)
			return nil
		},
	}
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "only the deliveries of this sandbox (name or id)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) deliveryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delivery",
		Short: "Read, download, export and verify deliveries",
	}
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Print a delivery record (JSON); --statement prints its signed in-toto statement",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.c.Deliveries.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if st, _ := cmd.Flags().GetBool("statement"); st {
				rec, err := delivery.ParseRecord(d.Envelope)
				if err != nil {
					return err
				}
				return a.printJSON(json.RawMessage(rec))
			}
			return a.printJSON(d)
		},
	}
	get.Flags().Bool("statement", false, "print the statement inside the envelope (not verified; use verify)")
	var file string
	download := &cobra.Command{
		Use:   "download ID [--file FILE]",
		Short: "Write a delivery's archive (tar, zstd) to FILE or stdout, checked against its record's digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.c.Deliveries.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			rc, _, err := a.c.Deliveries.Archive(cmd.Context(), d.ID)
			if err != nil {
				return err
			}
			defer rc.Close()
			return a.writeOut(file, func(w io.Writer) error {
				h := newDigestWriter(w)
				if _, err := io.Copy(h, rc); err != nil {
					return err
				}
				if got := h.digest(); got != d.ArchiveDigest {
					return fmt.Errorf("the archive's sha256 is %s, its record says %s: do not trust it (sbx delivery verify %s)", got, d.ArchiveDigest, d.ID)
				}
				return nil
			})
		},
	}
	download.Flags().StringVar(&file, "file", "", "write to this file instead of stdout")
	var exportFile string
	export := &cobra.Command{
		Use:   "export ID [--file FILE]",
		Short: "Write a bundle (the chain of records up to the delivery, and its archive) to check offline",
		Long: "Write a bundle that a third party can verify without sbxd:\n" +
			"  sbx delivery export ID > bundle && sbx delivery key > node.pub\n" +
			"  sbx delivery verify --bundle bundle --key node.pub\n" +
			"The bundle holds every record of the chain up to ID's (other sandboxes' too: the chain is the node's).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			chain, last, err := a.chainTo(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			rc, _, err := a.c.Deliveries.Archive(cmd.Context(), last.ID)
			if err != nil {
				return err
			}
			defer rc.Close()
			return a.writeOut(exportFile, func(w io.Writer) error {
				return delivery.WriteBundle(w, last.ID, chain, rc, last.ArchiveBytes)
			})
		},
	}
	export.Flags().StringVar(&exportFile, "file", "", "write to this file instead of stdout")
	key := &cobra.Command{
		Use:   "key",
		Short: "Print the node's public key (PEM) that verifies its delivery records",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := a.c.Deliveries.PublicKey(cmd.Context())
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(b)
			return err
		},
	}
	var bundle, keyFile string
	var all bool
	verify := &cobra.Command{
		Use:   "verify [ID | --all | --bundle FILE] [--key PUBKEY]",
		Short: "Verify deliveries: signatures, the chain, and every archive byte against the signed digests",
		Long: "Verify a delivery: every record of the chain up to it is signed by the key, each names the one\n" +
			"before it, and its archive's bytes and files match the digests it signed. --all checks the whole\n" +
			"chain and every archive. --bundle checks an exported bundle offline (then --key is required).\n" +
			"Without --key, the key is fetched from sbxd (trusting sbxd for it). The first failure is named:\n" +
			"a record altered, a record missing from the chain, another key, an archive altered.",
		Example: "  sbx delivery verify --bundle bundle --key node.pub",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var pub ed25519.PublicKey
			if keyFile != "" {
				b, err := os.ReadFile(keyFile)
				if err != nil {
					return err
				}
				if pub, err = delivery.ParsePublicKey(b); err != nil {
					return fmt.Errorf("--key %s: %w", keyFile, err)
				}
			}
			if bundle != "" {
				if len(args) > 0 || all {
					return errors.New("give either --bundle, an ID or --all")
				}
				if pub == nil {
					return errors.New("--bundle needs --key PUBKEY: offline, the key cannot come from sbxd")
				}
				f, err := os.Open(bundle)
				if err != nil {
					return err
				}
				defer f.Close()
				rec, err := delivery.VerifyBundle(f, pub)
				if err != nil {
					return &exitError{code: 1, err: fmt.Errorf("verify failed: %w", err)}
				}
				a.verified(rec)
				return nil
			}
			if (len(args) == 0) == !all {
				return errors.New("give an ID, --all or --bundle FILE")
			}
			if pub == nil {
				b, err := a.c.Deliveries.PublicKey(cmd.Context())
				if err != nil {
					return err
				}
				if pub, err = delivery.ParsePublicKey(b); err != nil {
					return fmt.Errorf("sbxd's delivery key: %w", err)
				}
				fmt.Fprintln(a.stderr, "note: the key is sbxd's own (give --key to check against a key you hold)")
			}
			id := ""
			if len(args) > 0 {
				id = args[0]
			}
			return a.verifyOnline(cmd.Context(), id, pub)
		},
	}
	verify.Flags().StringVar(&bundle, "bundle", "", "an exported bundle to verify offline")
	verify.Flags().StringVar(&keyFile, "key", "", "the node's public key (PEM) from sbx delivery key")
	verify.Flags().BoolVar(&all, "all", false, "verify the whole chain and every archive")
	cmd.AddCommand(get, download, export, key, verify)
	return cmd
}

// chainTo returns the envelopes of the chain from its first record to
// delivery id's, and id's record.
func (a *app) chainTo(ctx context.Context, id string) ([][]byte, *api.Delivery, error) {
	all, err := a.c.Deliveries.List(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	var chain [][]byte
	for i := range all {
		chain = append(chain, []byte(all[i].Envelope))
		if all[i].ID == id {
			return chain, &all[i], nil
		}
	}
	return nil, nil, fmt.Errorf("no delivery %q", id)
}

// verifyOnline verifies, with records and archives from sbxd, the chain up
// to id (or all of it, id "") and the archive of id (or of every record).
func (a *app) verifyOnline(ctx context.Context, id string, pub ed25519.PublicKey) error {
	var chain [][]byte
	var ids []string
	if id != "" {
		c, last, err := a.chainTo(ctx, id)
		if err != nil {
			return err
		}
		chain, ids = c, []string{last.ID}
	} else {
		all, err := a.c.Deliveries.List(ctx, "")
		if err != nil {
			return err
		}
		for _, d := range all {
			chain = append(chain, []byte(d.Envelope))
			ids = append(ids, d.ID)
		}
		if len(chain) == 0 {
			fmt.Fprintln(a.stdout, "no deliveries")
			return nil
		}
	}
	recs, err := delivery.VerifyChain(chain, pub)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("verify failed: %w", err)}
	}
	byID := map[string]*delivery.Record{}
	for _, r := range recs {
		byID[r.Predicate.Delivery] = r
	}
	for _, did := range ids {
		rec := byID[did]
		if rec == nil {
			return &exitError{code: 1, err: fmt.Errorf("verify failed: the record of %s does not name it", did)}
		}
		rc, _, err := a.c.Deliveries.Archive(ctx, did)
		if err != nil {
			return err
		}
		err = delivery.VerifyArchive(rc, rec)
		rc.Close()
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("verify failed: %w", err)}
		}
		a.verified(rec)
	}
	fmt.Fprintf(a.stdout, "chain of %d records verified\n", len(recs))
	return nil
}

func (a *app) verified(rec *delivery.Record) {
	p := rec.Predicate
	fmt.Fprintf(a.stdout, "ok: delivery %s (record %d of the chain, sandbox %s): signature, chain and archive (%d bytes, %d files, sha256:%s) verified\n",
		p.Delivery, p.Seq, p.Sandbox.Name, p.Archive.Bytes, p.Archive.Files, p.Archive.SHA256)
}

// writeOut runs fn on file (made 0644, removed if fn fails) or stdout.
func (a *app) writeOut(file string, fn func(io.Writer) error) error {
	if file == "" {
		return fn(a.stdout)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		os.Remove(file)
		return err
	}
	return f.Close()
}

// digestWriter passes writes on and hashes them.
type digestWriter struct {
	w io.Writer
	h hash.Hash
}

func newDigestWriter(w io.Writer) *digestWriter { return &digestWriter{w: w, h: sha256.New()} }

func (d *digestWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.h.Write(p[:n])
	return n, err
}

func (d *digestWriter) digest() string { return "sha256:" + hex.EncodeToString(d.h.Sum(nil)) }
