package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

const deliveryCols = `seq, id, name, sandbox_id, sandbox_name, archive_digest, archive_bytes, chunks, files,
	envelope, digest, previous, metadata, create_time, owner`

func scanDelivery(row interface{ Scan(...any) error }) (*store.Delivery, error) {
	var d store.Delivery
	var chunks, ct string
	if err := row.Scan(&d.Seq, &d.ID, &d.Name, &d.SandboxID, &d.SandboxName, &d.ArchiveDigest, &d.ArchiveBytes,
		&chunks, &d.Files, &d.Envelope, &d.Digest, &d.Previous, &d.Metadata, &ct, &d.Owner); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(chunks), &d.Chunks); err != nil {
		return nil, fmt.Errorf("delivery %s: corrupt record: %w", d.ID, err)
	}
	d.CreateTime = parseTime(ct)
	return &d, nil
}

// AddDelivery implements store.Store: in one transaction, it checks that
// d.Previous is the last delivery's digest and appends d after it.
func (s *Store) AddDelivery(ctx context.Context, d *store.Delivery) error {
	if d.CreateTime.IsZero() {
		d.CreateTime = time.Now()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var seq int64
	var last string
	err = tx.QueryRowContext(ctx, `SELECT seq, digest FROM deliveries ORDER BY seq DESC LIMIT 1`).Scan(&seq, &last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if d.Previous != last {
		return errdefs.Conflictf("delivery %s follows %q, but the chain ends at %q", d.ID, d.Previous, last)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO deliveries (`+deliveryCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		seq+1, d.ID, d.Name, d.SandboxID, d.SandboxName, d.ArchiveDigest, d.ArchiveBytes, toJSON(d.Chunks), d.Files,
		d.Envelope, d.Digest, d.Previous, d.Metadata, fmtTime(d.CreateTime), d.Owner)
	if isUnique(err) {
		return errdefs.Conflictf("delivery %s exists", d.ID)
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	d.Seq = seq + 1
	return nil
}

// GetDelivery implements store.Store.
func (s *Store) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.db.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "no delivery %q", id)
	}
	return d, err
}

// ListDeliveries implements store.Store.
func (s *Store) ListDeliveries(ctx context.Context, sandbox string) ([]*store.Delivery, error) {
	q := `SELECT ` + deliveryCols + ` FROM deliveries`
	var args []any
	if sandbox != "" {
		q += ` WHERE sandbox_id = ? OR sandbox_name = ?`
		args = append(args, sandbox, sandbox)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY seq`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// LastDelivery implements store.Store.
func (s *Store) LastDelivery(ctx context.Context) (*store.Delivery, error) {
	d, err := scanDelivery(s.db.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries ORDER BY seq DESC LIMIT 1`))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return d, err
}
