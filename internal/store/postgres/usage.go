package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxhq/sbx/internal/store"
)

// AddUsage implements store.Store in one transaction.
func (s *Store) AddUsage(ctx context.Context, rows []*store.UsageRow, meters []*store.UsageMeter, dropMeters []string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, r := range rows {
			if _, err := tx.Exec(ctx, `INSERT INTO usage_hours (sandbox_id, hour, sandbox_name, key_id, first_time, last_time,
				cpu_seconds, memory_gib_seconds, stored_byte_seconds) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
				ON CONFLICT (sandbox_id, hour) DO UPDATE SET
					sandbox_name = CASE WHEN excluded.sandbox_name = '' THEN usage_hours.sandbox_name ELSE excluded.sandbox_name END,
					key_id = CASE WHEN excluded.key_id = '' THEN usage_hours.key_id ELSE excluded.key_id END,
					first_time = LEAST(usage_hours.first_time, excluded.first_time),
					last_time = GREATEST(usage_hours.last_time, excluded.last_time),
					cpu_seconds = usage_hours.cpu_seconds + excluded.cpu_seconds,
					memory_gib_seconds = usage_hours.memory_gib_seconds + excluded.memory_gib_seconds,
					stored_byte_seconds = usage_hours.stored_byte_seconds + excluded.stored_byte_seconds`,
				r.SandboxID, r.Hour.UTC().Truncate(time.Hour), r.SandboxName, r.KeyID, r.First.UTC(), r.Last.UTC(),
				r.CPUSeconds, r.MemoryGiBSeconds, r.StoredByteSeconds); err != nil {
				return fmt.Errorf("add usage of %s: %w", r.SandboxID, err)
			}
		}
		for _, m := range meters {
			if _, err := tx.Exec(ctx, `INSERT INTO usage_meters (sandbox_id, running, cpu_nanos, read_time) VALUES ($1, $2, $3, $4)
				ON CONFLICT (sandbox_id) DO UPDATE SET running = excluded.running, cpu_nanos = excluded.cpu_nanos,
				read_time = excluded.read_time`, m.SandboxID, m.Running, int64(m.CPUNanos), m.Time.UTC()); err != nil {
				return fmt.Errorf("usage meter of %s: %w", m.SandboxID, err)
			}
		}
		if len(dropMeters) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM usage_meters WHERE sandbox_id = ANY($1)`, dropMeters); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListUsage implements store.Store.
func (s *Store) ListUsage(ctx context.Context, since, until time.Time) ([]*store.UsageRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT sandbox_id, hour, sandbox_name, key_id, first_time, last_time,
		cpu_seconds, memory_gib_seconds, stored_byte_seconds FROM usage_hours WHERE hour >= $1 AND hour < $2
		ORDER BY hour, sandbox_id`, since.UTC().Truncate(time.Hour), until.UTC())
	return collect(rows, err, func(r row) (*store.UsageRow, error) {
		var u store.UsageRow
		if err := r.Scan(&u.SandboxID, &u.Hour, &u.SandboxName, &u.KeyID, &u.First, &u.Last,
			&u.CPUSeconds, &u.MemoryGiBSeconds, &u.StoredByteSeconds); err != nil {
			return nil, err
		}
		u.Hour, u.First, u.Last = u.Hour.UTC(), u.First.UTC(), u.Last.UTC()
		return &u, nil
	})
}

// UsageByKey implements store.Store with one SUM ... GROUP BY over the
// hours from since's (index usage_hours_hour).
func (s *Store) UsageByKey(ctx context.Context, since time.Time) (map[string]store.UsageTotals, error) {
	rows, err := s.pool.Query(ctx, `SELECT key_id, SUM(cpu_seconds), SUM(memory_gib_seconds), SUM(stored_byte_seconds)
		FROM usage_hours WHERE hour >= $1 GROUP BY key_id`, since.UTC().Truncate(time.Hour))
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
	rows, err := s.pool.Query(ctx, `SELECT sandbox_id, running, cpu_nanos, read_time FROM usage_meters ORDER BY sandbox_id`)
	return collect(rows, err, func(r row) (*store.UsageMeter, error) {
		var m store.UsageMeter
		var cpu int64
		if err := r.Scan(&m.SandboxID, &m.Running, &cpu, &m.Time); err != nil {
			return nil, err
		}
		m.CPUNanos, m.Time = uint64(cpu), m.Time.UTC()
		return &m, nil
	})
}

// ListStoredBytes implements store.Store with one aggregate query.
func (s *Store) ListStoredBytes(ctx context.Context) ([]*store.StoredBytes, error) {
	rows, err := s.pool.Query(ctx, `SELECT sandbox_id, MAX(sandbox_name), MAX(owner), SUM(b)::bigint FROM (
			SELECT c.sandbox_id, '' AS sandbox_name, COALESCE(sb.owner, '') AS owner, c.added_bytes AS b
				FROM checkpoints c LEFT JOIN sandboxes sb ON sb.id = c.sandbox_id
			UNION ALL
			SELECT sandbox_id, sandbox_name, owner, stored_bytes FROM snapshots WHERE NOT fork AND state = 'ready'
		) AS kept GROUP BY sandbox_id HAVING SUM(b) > 0 ORDER BY sandbox_id`)
	return collect(rows, err, func(r row) (*store.StoredBytes, error) {
		var b store.StoredBytes
		if err := r.Scan(&b.SandboxID, &b.SandboxName, &b.KeyID, &b.Bytes); err != nil {
			return nil, err
		}
		return &b, nil
	})
}

// PutLimitSuspension implements store.Store.
func (s *Store) PutLimitSuspension(ctx context.Context, ls *store.LimitSuspension) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO limit_suspensions (sandbox_id, key_id, resume, suspend_time) VALUES ($1, $2, $3, $4)
		ON CONFLICT (sandbox_id) DO UPDATE SET key_id = excluded.key_id, resume = excluded.resume,
		suspend_time = excluded.suspend_time`, ls.SandboxID, ls.KeyID, ls.Resume, ls.Time.UTC())
	return err
}

// ListLimitSuspensions implements store.Store.
func (s *Store) ListLimitSuspensions(ctx context.Context) ([]*store.LimitSuspension, error) {
	rows, err := s.pool.Query(ctx, `SELECT sandbox_id, key_id, resume, suspend_time FROM limit_suspensions
		ORDER BY suspend_time, sandbox_id`)
	return collect(rows, err, func(r row) (*store.LimitSuspension, error) {
		var ls store.LimitSuspension
		if err := r.Scan(&ls.SandboxID, &ls.KeyID, &ls.Resume, &ls.Time); err != nil {
			return nil, err
		}
		ls.Time = ls.Time.UTC()
		return &ls, nil
	})
}

// DeleteLimitSuspension implements store.Store.
func (s *Store) DeleteLimitSuspension(ctx context.Context, sandboxID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM limit_suspensions WHERE sandbox_id = $1`, sandboxID)
	return err
}

// SetLimitResume implements store.Store.
func (s *Store) SetLimitResume(ctx context.Context, keyID string, resume bool) error {
	_, err := s.pool.Exec(ctx, `UPDATE limit_suspensions SET resume = $1 WHERE key_id = $2`, resume, keyID)
	return err
}
