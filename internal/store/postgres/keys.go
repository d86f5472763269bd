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

const keyCols = `id, name, hash, labels, admin, daily_limit_usd, create_time, revoke_time`

func scanKey(r row) (*store.Key, error) {
	var k store.Key
	var labels []byte
	var rt *time.Time
	if err := r.Scan(&k.ID, &k.Name, &k.Hash, &labels, &k.Admin, &k.DailyLimitUSD, &k.CreateTime, &rt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(labels, &k.Labels); err != nil {
		return nil, fmt.Errorf("key %s: corrupt record: %w", k.ID, err)
	}
	k.CreateTime, k.RevokeTime = k.CreateTime.UTC(), utc(rt)
	return &k, nil
}

// CreateKey implements store.Store.
func (s *Store) CreateKey(ctx context.Context, k *store.Key) error {
	if k.CreateTime.IsZero() {
		k.CreateTime = time.Now()
	}
	labels, err := jsonOf(nonNil(k.Labels))
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		k.ID, k.Name, k.Hash, labels, k.Admin, k.DailyLimitUSD, k.CreateTime.UTC(), optTime(k.RevokeTime))
	if c, ok := uniqueViolation(err); ok {
		if c == "api_keys_live_name" {
			return errdefs.New(errdefs.ErrNameTaken, "an API key named %q exists", k.Name)
		}
		return errdefs.Conflictf("API key %s exists", k.ID)
	}
	return err
}

// GetKey implements store.Store.
func (s *Store) GetKey(ctx context.Context, idOrName string) (*store.Key, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys
		WHERE id = $1 OR (name = $1 AND revoke_time IS NULL) ORDER BY id = $1 DESC LIMIT 1`, idOrName))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrKeyNotFound, "no API key %q", idOrName)
	}
	return k, err
}

// KeyByHash implements store.Store.
func (s *Store) KeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrKeyNotFound, "no such API key")
	}
	return k, err
}

// ListKeys implements store.Store.
func (s *Store) ListKeys(ctx context.Context, revoked bool) ([]*store.Key, error) {
	q := `SELECT ` + keyCols + ` FROM api_keys`
	if !revoked {
		q += ` WHERE revoke_time IS NULL`
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY create_time, id`)
	return collect(rows, err, scanKey)
}

// RevokeKey implements store.Store.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoke_time = $1 WHERE id = $2 AND revoke_time IS NULL`, at.UTC(), id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrKeyNotFound, "no live API key %q", id)
	}
	return nil
}

// SetKeyDailyLimit implements store.Store.
func (s *Store) SetKeyDailyLimit(ctx context.Context, id string, limit *float64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET daily_limit_usd = $1 WHERE id = $2 AND revoke_time IS NULL`, limit, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrKeyNotFound, "no live API key %q", id)
	}
	return nil
}
