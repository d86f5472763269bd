package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// hourFmt formats a usage row's hour: fixed width, so hours compare as text.
const hourFmt = "2006-01-02T15:04:05Z"

// AddUsage implements store.Store in one transaction.
func (s *Store) AddUsage(ctx context.Context, rows []*store.UsageRow, meters []*store.UsageMeter, dropMeters []string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage (sandbox_id, hour, sandbox_name, key_id, first_time, last_time,
			cpu_seconds, memory_gib_seconds, stored_byte_seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (sandbox_id, hour) DO UPDATE SET
				sandbox_name = CASE WHEN excluded.sandbox_name = '' THEN sandbox_name ELSE excluded.sandbox_name END,
				key_id = CASE WHEN excluded.key_id = '' THEN key_id ELSE excluded.key_id END,
				first_time = MIN(first_time, excluded.first_time),
				last_time = MAX(last_time, excluded.last_time),
				cpu_seconds = cpu_seconds + excluded.cpu_seconds,
				memory_gib_seconds = memory_gib_seconds + excluded.memory_gib_seconds,
				stored_byte_seconds = stored_byte_seconds + excluded.stored_byte_seconds`,
			r.SandboxID, r.Hour.UTC().Format(hourFmt), r.SandboxName, r.KeyID, fmtUsageTime(r.First), fmtUsageTime(r.Last),
			r.CPUSeconds, r.MemoryGiBSeconds, r.StoredByteSeconds); err != nil {
			return fmt.Errorf("add usage of %s: %w", r.SandboxID, err)
		}
	}
	for _, m := range meters {
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage_meters (sandbox_id, running, cpu_nanos, time) VALUES (?, ?, ?, ?)
			ON CONFLICT (sandbox_id) DO UPDATE SET running = excluded.running, cpu_nanos = excluded.cpu_nanos, time = excluded.time`,
			m.SandboxID, m.Running, int64(m.CPUNanos), fmtTime(m.Time)); err != nil {
			return fmt.Errorf("usage meter of %s: %w", m.SandboxID, err)
		}
	}
	for _, id := range dropMeters {
		if _, err := tx.ExecContext(ctx, `DELETE FROM usage_meters WHERE sandbox_id = ?`, id); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// fmtUsageTime formats First and Last with fixed-width nanoseconds, so
// MIN and MAX over text order them as times.
func fmtUsageTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }

// ListUsage implements store.Store.
func (s *Store) ListUsage(ctx context.Context, since, until time.Time) ([]*store.UsageRow, error) {
	from := since.UTC().Truncate(time.Hour).Format(hourFmt)
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, hour, sandbox_name, key_id, first_time, last_time,
		cpu_seconds, memory_gib_seconds, stored_byte_seconds FROM usage WHERE hour >= ? AND hour < ?
		ORDER BY hour, sandbox_id`, from, until.UTC().Format(hourFmt))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.UsageRow
	for rows.Next() {
		var r store.UsageRow
		var hour, first, last string
		if err := rows.Scan(&r.SandboxID, &hour, &r.SandboxName, &r.KeyID, &first, &last,
			&r.CPUSeconds, &r.MemoryGiBSeconds, &r.StoredByteSeconds); err != nil {
			return nil, err
		}
		r.Hour, r.First, r.Last = parseTime(hour), parseTime(first), parseTime(last)
		out = append(out, &r)
	}
	return out, rows.Err()
}

// UsageByKey implements store.Store with one SUM ... GROUP BY over the
// hours from since's (index usage_hour).
func (s *Store) UsageByKey(ctx context.Context, since time.Time) (map[string]store.UsageTotals, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT key_id, SUM(cpu_seconds), SUM(memory_gib_seconds), SUM(stored_byte_seconds)
		FROM usage WHERE hour >= ? GROUP BY key_id`, since.UTC().Truncate(time.Hour).Format(hourFmt))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]store.UsageTotals{}
	for rows.Next() {
		var key string
		var t store.UsageTotals
		if err := rows.Scan(&key, &t.CPUSeconds, &t.MemoryGiBSeconds, &t.StoredByteSeconds); err != nil {
			return nil, err
		}
		out[key] = t
	}
	return out, rows.Err()
}

// UsageMeters implements store.Store.
func (s *Store) UsageMeters(ctx context.Context) ([]*store.UsageMeter, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, running, cpu_nanos, time FROM usage_meters ORDER BY sandbox_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.UsageMeter
	for rows.Next() {
		var m store.UsageMeter
		var cpu int64
		var t string
		if err := rows.Scan(&m.SandboxID, &m.Running, &cpu, &t); err != nil {
			return nil, err
		}
		m.CPUNanos, m.Time = uint64(cpu), parseTime(t)
		out = append(out, &m)
	}
	return out, rows.Err()
}

// ListStoredBytes implements store.Store with one aggregate query.
func (s *Store) ListStoredBytes(ctx context.Context) ([]*store.StoredBytes, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, MAX(sandbox_name), MAX(owner), SUM(b) FROM (
			SELECT c.sandbox_id, '' AS sandbox_name, COALESCE(sb.owner, '') AS owner, c.added_bytes AS b
				FROM checkpoints c LEFT JOIN sandboxes sb ON sb.id = c.sandbox_id
			UNION ALL
			SELECT sandbox_id, sandbox_name, owner, stored_bytes FROM snapshots WHERE fork = 0 AND state = 'ready'
		) GROUP BY sandbox_id HAVING SUM(b) > 0 ORDER BY sandbox_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.StoredBytes
	for rows.Next() {
		var b store.StoredBytes
		if err := rows.Scan(&b.SandboxID, &b.SandboxName, &b.KeyID, &b.Bytes); err != nil {
			return nil, err
		}
		out = append(out, &b)
	}
	return out, rows.Err()
}

// SetKeyDailyLimit implements store.Store.
func (s *Store) SetKeyDailyLimit(ctx context.Context, id string, limit *float64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET daily_limit_usd = ? WHERE id = ? AND revoke_time = ''`, limit, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrKeyNotFound, "no live API key %q", id)
	}
	return nil
}

// PutLimitSuspension implements store.Store.
func (s *Store) PutLimitSuspension(ctx context.Context, ls *store.LimitSuspension) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO limit_suspensions (sandbox_id, key_id, resume, time) VALUES (?, ?, ?, ?)
		ON CONFLICT (sandbox_id) DO UPDATE SET key_id = excluded.key_id, resume = excluded.resume, time = excluded.time`,
		ls.SandboxID, ls.KeyID, ls.Resume, fmtUsageTime(ls.Time))
	return err
}

// ListLimitSuspensions implements store.Store.
func (s *Store) ListLimitSuspensions(ctx context.Context) ([]*store.LimitSuspension, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, key_id, resume, time FROM limit_suspensions ORDER BY time, sandbox_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.LimitSuspension
	for rows.Next() {
		var ls store.LimitSuspension
		var t string
		if err := rows.Scan(&ls.SandboxID, &ls.KeyID, &ls.Resume, &t); err != nil {
			return nil, err
		}
		ls.Time = parseTime(t)
		out = append(out, &ls)
	}
	return out, rows.Err()
}

// DeleteLimitSuspension implements store.Store.
func (s *Store) DeleteLimitSuspension(ctx context.Context, sandboxID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM limit_suspensions WHERE sandbox_id = ?`, sandboxID)
	return err
}

// SetLimitResume implements store.Store.
func (s *Store) SetLimitResume(ctx context.Context, keyID string, resume bool) error {
	_, err := s.db.ExecContext(ctx, `UPDATE limit_suspensions SET resume = ? WHERE key_id = ?`, resume, keyID)
	return err
}
