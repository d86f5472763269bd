package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

const deliveryCols = `seq, id, name, sandbox_id, sandbox_name, archive_digest, archive_bytes, chunks, files,
	envelope, digest, previous, metadata, create_time, owner`

func scanDelivery(r row) (*store.Delivery, error) {
	var d store.Delivery
	var chunks []byte
	var files int64
	if err := r.Scan(&d.Seq, &d.ID, &d.Name, &d.SandboxID, &d.SandboxName, &d.ArchiveDigest, &d.ArchiveBytes,
		&chunks, &files, &d.Envelope, &d.Digest, &d.Previous, &d.Metadata, &d.CreateTime, &d.Owner); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(chunks, &d.Chunks); err != nil {
		return nil, fmt.Errorf("delivery %s: corrupt record: %w", d.ID, err)
	}
	d.Files, d.CreateTime = int(files), d.CreateTime.UTC()
	return &d, nil
}

// deliveryLockID is the transaction advisory lock that serialises appends
// to the delivery chain (the chain may be empty: there is no row to lock).
const deliveryLockID = 0x736278_00000002

// AddDelivery implements store.Store: in one transaction that holds the
// chain's lock, it checks that d.Previous is the last delivery's digest and
// appends d after it.
func (s *Store) AddDelivery(ctx context.Context, d *store.Delivery) error {
	if d.CreateTime.IsZero() {
		d.CreateTime = time.Now()
	}
	chunks, err := jsonOf(d.Chunks)
	if err != nil {
		return err
	}
	var seq int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(deliveryLockID)); err != nil {
			return err
		}
		var last string
		err := tx.QueryRow(ctx, `SELECT seq, digest FROM deliveries ORDER BY seq DESC LIMIT 1`).Scan(&seq, &last)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if d.Previous != last {
			return errdefs.Conflictf("delivery %s follows %q, but the chain ends at %q", d.ID, d.Previous, last)
		}
		_, err = tx.Exec(ctx, `INSERT INTO deliveries (`+deliveryCols+`) VALUES (`+placeholders(1, 15)+`)`,
			seq+1, d.ID, d.Name, d.SandboxID, d.SandboxName, d.ArchiveDigest, d.ArchiveBytes, chunks, d.Files,
			d.Envelope, d.Digest, d.Previous, d.Metadata, d.CreateTime.UTC(), d.Owner)
		if _, ok := uniqueViolation(err); ok {
			return errdefs.Conflictf("delivery %s exists", d.ID)
		}
		return err
	})
	if err != nil {
		return err
	}
	d.Seq = seq + 1
	return nil
}

// GetDelivery implements store.Store.
func (s *Store) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "no delivery %q", id)
	}
	return d, err
}

// ListDeliveries implements store.Store.
func (s *Store) ListDeliveries(ctx context.Context, sandbox string) ([]*store.Delivery, error) {
	q := `SELECT ` + deliveryCols + ` FROM deliveries`
	var args []any
	if sandbox != "" {
		q += ` WHERE sandbox_id = $1 OR sandbox_name = $1`
		args = append(args, sandbox)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY seq`, args...)
	return collect(rows, err, scanDelivery)
}

// LastDelivery implements store.Store.
func (s *Store) LastDelivery(ctx context.Context) (*store.Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries ORDER BY seq DESC LIMIT 1`))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return d, err
}
