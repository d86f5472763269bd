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

const keyCols = `id, name, hash, labels, admin, daily_limit_usd, create_time, revoke_time`

func scanKey(row interface{ Scan(...any) error }) (*store.Key, error) {
	var k store.Key
	var labels, ct, rt string
	var limit sql.NullFloat64
	if err := row.Scan(&k.ID, &k.Name, &k.Hash, &labels, &k.Admin, &limit, &ct, &rt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(labels), &k.Labels); err != nil {
		return nil, fmt.Errorf("key %s: corrupt record: %w", k.ID, err)
	}
	if limit.Valid {
		v := limit.Float64
		k.DailyLimitUSD = &v
	}
	k.CreateTime = parseTime(ct)
	if rt != "" {
		k.RevokeTime = parseTime(rt)
	}
	return &k, nil
}

// CreateKey implements store.Store.
func (s *Store) CreateKey(ctx context.Context, k *store.Key) error {
	if k.CreateTime.IsZero() {
		k.CreateTime = time.Now()
	}
	var limit sql.NullFloat64
	if k.DailyLimitUSD != nil {
		limit = sql.NullFloat64{Float64: *k.DailyLimitUSD, Valid: true}
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Hash, toJSON(nonNil(k.Labels)), k.Admin, limit, fmtTime(k.CreateTime), optTime(k.RevokeTime))
	if isUnique(err) {
		return errdefs.New(errdefs.ErrNameTaken, "an API key named %q exists", k.Name)
	}
	return err
}

// GetKey implements store.Store.
func (s *Store) GetKey(ctx context.Context, idOrName string) (*store.Key, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys
		WHERE id = ? OR (name = ? AND revoke_time = '') ORDER BY id = ? DESC LIMIT 1`, idOrName, idOrName, idOrName))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrKeyNotFound, "no API key %q", idOrName)
	}
	return k, err
}

// KeyByHash implements store.Store.
func (s *Store) KeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrKeyNotFound, "no such API key")
	}
	return k, err
}

// ListKeys implements store.Store.
func (s *Store) ListKeys(ctx context.Context, revoked bool) ([]*store.Key, error) {
	q := `SELECT ` + keyCols + ` FROM api_keys`
	if !revoked {
		q += ` WHERE revoke_time = ''`
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY create_time, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey implements store.Store.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoke_time = ? WHERE id = ? AND revoke_time = ''`, fmtTime(at), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrKeyNotFound, "no live API key %q", id)
	}
	return nil
}
