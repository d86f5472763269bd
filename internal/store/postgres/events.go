package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

const eventCols = `id, key, sandbox_id, data, content_type, create_time, deliver_time, expire_time, owner, seq`

func scanEvent(r row) (*store.Event, error) {
	var ev store.Event
	var dt, et *time.Time
	if err := r.Scan(&ev.ID, &ev.Key, &ev.SandboxID, &ev.Data, &ev.ContentType, &ev.CreateTime, &dt, &et, &ev.Owner,
		&ev.Seq); err != nil {
		return nil, err
	}
	if ev.Data == nil {
		ev.Data = []byte{}
	}
	ev.CreateTime, ev.DeliverTime, ev.ExpireTime = ev.CreateTime.UTC(), utc(dt), utc(et)
	return &ev, nil
}

// AddEvent implements store.Store; Seq comes from the table's identity.
func (s *Store) AddEvent(ctx context.Context, ev *store.Event) error {
	if ev.CreateTime.IsZero() {
		ev.CreateTime = time.Now()
	}
	data := ev.Data
	if data == nil {
		data = []byte{}
	}
	err := s.pool.QueryRow(ctx, `INSERT INTO events (id, key, sandbox_id, data, content_type, create_time, deliver_time,
		expire_time, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq`,
		ev.ID, ev.Key, ev.SandboxID, data, ev.ContentType, ev.CreateTime.UTC(), optTime(ev.DeliverTime),
		optTime(ev.ExpireTime), ev.Owner).Scan(&ev.Seq)
	if _, ok := uniqueViolation(err); ok {
		return errdefs.Conflictf("event %s exists", ev.ID)
	}
	return err
}

// eventWhere is the WHERE clause of q (its After aside when withAfter is
// false) and its arguments.
func eventWhere(q store.EventQuery, withAfter bool) (string, []any) {
	var conds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	switch {
	case q.SandboxID != "":
		conds = append(conds, "sandbox_id = "+arg(q.SandboxID))
	case q.Pending:
		conds = append(conds, "sandbox_id = ''")
	}
	if q.Key != "" {
		conds = append(conds, "key = "+arg(q.Key))
	}
	if withAfter && q.After > 0 {
		conds = append(conds, "seq > "+arg(q.After))
	}
	if q.Owners != nil {
		conds = append(conds, "owner = ANY("+arg(q.Owners)+")")
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// ListEvents implements store.Store: rows are read one at a time, and no
// more than the page holds.
func (s *Store) ListEvents(ctx context.Context, q store.EventQuery) ([]*store.Event, error) {
	where, args := eventWhere(q, true)
	query := `SELECT ` + eventCols + ` FROM events` + where + ` ORDER BY seq`
	if q.Limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Event
	var bytes int64
	for rows.Next() {
		if q.MaxBytes > 0 && bytes >= q.MaxBytes {
			break
		}
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		bytes += int64(len(ev.Data))
		out = append(out, ev)
	}
	return out, rows.Err()
}

// CountEvents implements store.Store.
func (s *Store) CountEvents(ctx context.Context, q store.EventQuery) (int, int64, error) {
	where, args := eventWhere(q, false)
	var n, bytes int64
	err := s.pool.QueryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(octet_length(data)), 0) FROM events`+where, args...).Scan(&n, &bytes)
	return int(n), bytes, err
}

// DeletePendingEvent implements store.Store.
func (s *Store) DeletePendingEvent(ctx context.Context, id string, owners []string) error {
	q, args := `DELETE FROM events WHERE id = $1 AND sandbox_id = ''`, []any{id}
	if owners != nil {
		q, args = q+` AND owner = ANY($2)`, append(args, owners)
	}
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrEventNotFound, "no pending event %q", id)
	}
	return nil
}

// DeletePendingEvents implements store.Store.
func (s *Store) DeletePendingEvents(ctx context.Context, key string, owners []string) (int, error) {
	q, args := `DELETE FROM events WHERE key = $1 AND sandbox_id = ''`, []any{key}
	if owners != nil {
		q, args = q+` AND owner = ANY($2)`, append(args, owners)
	}
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// TakePending implements store.Store in one UPDATE: two callers taking the
// same key at once (two nodes) never both get an event.
func (s *Store) TakePending(ctx context.Context, key, sandboxID string, owners []string, now time.Time) ([]*store.Event, error) {
	q, args := `UPDATE events SET sandbox_id = $1, deliver_time = $2
		WHERE key = $3 AND sandbox_id = '' AND (expire_time IS NULL OR expire_time > $2)`, []any{sandboxID, now.UTC(), key}
	if owners != nil {
		q, args = q+` AND owner = ANY($4)`, append(args, owners)
	}
	rows, err := s.pool.Query(ctx, `WITH taken AS (`+q+` RETURNING `+eventCols+`) SELECT * FROM taken ORDER BY seq`, args...)
	return collect(rows, err, scanEvent)
}

// DeleteEvents implements store.Store.
func (s *Store) DeleteEvents(ctx context.Context, sandboxID string) error {
	if sandboxID == "" {
		return nil
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM events WHERE sandbox_id = $1`, sandboxID)
	return err
}

// DeleteExpiredEvents implements store.Store; it reads no bodies.
func (s *Store) DeleteExpiredEvents(ctx context.Context, now time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM events WHERE sandbox_id = '' AND expire_time IS NOT NULL AND expire_time <= $1`, now.UTC())
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
