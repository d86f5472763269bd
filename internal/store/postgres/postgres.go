// Package postgres is the [store.Store] on PostgreSQL (13 or later), through
// pgx's connection pool. Its schema is versioned by goose migrations embedded
// from migrations/ and applied under a PostgreSQL advisory lock, so that
// several sbxd starting at once migrate it once.
//
// It holds the same records as the SQLite store and passes the same
// conformance suite (internal/store/storetest). Several sbxd nodes share
// one database: it is also a [store.Cluster] (nodes.go).
package postgres

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultMaxConns is the size of the connection pool when the URL does not
// give one (pool_max_conns=N).
const DefaultMaxConns = 16

// ConnectTimeout bounds Open's first connection and its migration.
const ConnectTimeout = 30 * time.Second

// Store is a store.Store on one PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	// where names the database in errors: user@host/db, never the
	// password.
	where string
	// dutyMu guards duty, the connection that holds the cluster's duty
	// lock (HoldDuty), nil when this process does not hold it.
	dutyMu sync.Mutex
	duty   *pgx.Conn
	// health tracks outages of the server (health.go).
	health *health
}

var _ store.Store = (*Store)(nil)

// IsURL reports whether s names a PostgreSQL database: a postgres:// or
// postgresql:// URL (libpq's connection URI, as pgx parses it).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Open connects to the database that url names (a postgres:// URL; query
// parameters as libpq's, e.g. sslmode, host=/run/postgresql for a Unix
// socket, search_path=schema; pool_max_conns, default DefaultMaxConns)
// and migrates its schema to the newest
// version. It fails, within ConnectTimeout, with an error that names the
// database (not the password) when the URL is malformed, the server cannot
// be reached or the migration fails.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors redact the password.
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default, max(4, CPUs), queues a busy sbxd's requests.
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultDialTimeout
	}
	where := fmt.Sprintf("%s@%s/%s", cfg.ConnConfig.User, hostOf(cfg.ConnConfig), cfg.ConnConfig.Database)
	h := &health{where: where}
	cfg.ConnConfig.Tracer = h
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: cannot connect: %w", where, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: migrate: %w", where, err)
	}
	return &Store{pool: pool, where: where, health: h}, nil
}

func hostOf(c *pgx.ConnConfig) string {
	if c.Port != 0 && !strings.HasPrefix(c.Host, "/") {
		return fmt.Sprintf("%s:%d", c.Host, c.Port)
	}
	return c.Host
}

// migrate applies the embedded migrations, holding goose's advisory lock.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	// Retried each second while another sbxd migrates, within Open's
	// ConnectTimeout.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, uint64(ConnectTimeout/time.Second)))
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return err
	}
	_, err = p.Up(ctx)
	return err
}

// Name is user@host/db of the database (never the password).
func (s *Store) Name() string { return s.where }

// Close closes the pool and releases the duty lock (HoldDuty).
func (s *Store) Close() error {
	s.dutyMu.Lock()
	if s.duty != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.duty.Close(ctx)
		cancel()
		s.duty = nil
	}
	s.dutyMu.Unlock()
	s.pool.Close()
	return nil
}

// row is what pgx.Row and pgx.Rows share.
type row interface{ Scan(...any) error }

// uniqueViolation returns the name of the unique constraint err violated.
func uniqueViolation(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return pe.ConstraintName, true
	}
	return "", false
}

// jsonOf is v as JSON bytes for a JSONB parameter.
func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

// optTime is t for a nullable TIMESTAMPTZ: nil for the zero time.
func optTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

// utc is *t in UTC, the zero time for nil.
func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// bytesOr is b, or def when b is empty.
func bytesOr(b []byte, def string) []byte {
	if len(b) == 0 {
		return []byte(def)
	}
	return b
}

// collect reads every row of rows with scan.
func collect[T any](rows pgx.Rows, err error, scan func(row) (*T, error)) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

const sandboxCols = `id, name, state, state_reason, image, image_id, cpus, memory_mb, disk_mb, env, labels,
	network, volumes, timeout_ms, source_sandbox, source_snapshot, disk_source, pooled, create_time, update_time,
	suspend_snapshot, wake_on, keep_alive, suspend_time, owner, secrets, node,
	recovery_interval_ms, recovery_snapshot, recovery_time`

// nodeParam is the parameter ("$N") of the node column in sandboxArgs,
// sandboxCols' order.
var nodeParam = func() string {
	for i, c := range strings.Split(sandboxCols, ",") {
		if strings.TrimSpace(c) == "node" {
			return fmt.Sprintf("$%d", i+1)
		}
	}
	panic("postgres: sandboxCols has no node column")
}()

func scanSandbox(r row) (*store.Sandbox, error) {
	var sb store.Sandbox
	var env, labels, network, volumes, secrets []byte
	var state string
	var st, rt *time.Time
	if err := r.Scan(&sb.ID, &sb.Name, &state, &sb.StateReason, &sb.Image, &sb.ImageID, &sb.CPUs, &sb.MemoryMB,
		&sb.DiskMB, &env, &labels, &network, &volumes, &sb.TimeoutMS, &sb.SourceSandbox, &sb.SourceSnapshot,
		&sb.DiskSource, &sb.Pooled, &sb.CreateTime, &sb.UpdateTime, &sb.SuspendSnapshot, &sb.WakeOn, &sb.KeepAlive,
		&st, &sb.Owner, &secrets, &sb.Node, &sb.RecoveryIntervalMS, &sb.RecoverySnapshot, &rt); err != nil {
		return nil, err
	}
	if secrets != nil {
		if err := json.Unmarshal(secrets, &sb.Secrets); err != nil {
			return nil, fmt.Errorf("sandbox %s: corrupt secrets record: %w", sb.ID, err)
		}
	}
	sb.State = api.State(state)
	if err := errors.Join(json.Unmarshal(env, &sb.Env), json.Unmarshal(labels, &sb.Labels),
		json.Unmarshal(network, &sb.Network), json.Unmarshal(volumes, &sb.Volumes)); err != nil {
		return nil, fmt.Errorf("sandbox %s: corrupt record: %w", sb.ID, err)
	}
	sb.CreateTime, sb.UpdateTime, sb.SuspendTime = sb.CreateTime.UTC(), sb.UpdateTime.UTC(), utc(st)
	sb.RecoveryTime = utc(rt)
	return &sb, nil
}

// sandboxArgs are sb's columns in sandboxCols order.
func sandboxArgs(sb *store.Sandbox) ([]any, error) {
	env, err1 := jsonOf(nonNil(sb.Env))
	labels, err2 := jsonOf(nonNil(sb.Labels))
	network, err3 := jsonOf(sb.Network)
	volumes := sb.Volumes
	if volumes == nil {
		volumes = []api.Volume{}
	}
	vols, err4 := jsonOf(volumes)
	var secrets []byte
	var err5 error
	if s := sb.Secrets; s != nil && (len(s.List) > 0 || len(s.CACert) > 0) {
		secrets, err5 = jsonOf(s)
	}
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	return []any{sb.ID, sb.Name, string(sb.State), sb.StateReason, sb.Image, sb.ImageID, sb.CPUs, sb.MemoryMB,
		sb.DiskMB, env, labels, network, vols, sb.TimeoutMS, sb.SourceSandbox, sb.SourceSnapshot, sb.DiskSource,
		sb.Pooled, sb.CreateTime.UTC(), sb.UpdateTime.UTC(), sb.SuspendSnapshot, sb.WakeOn, sb.KeepAlive,
		optTime(sb.SuspendTime), sb.Owner, secrets, sb.Node, sb.RecoveryIntervalMS, sb.RecoverySnapshot,
		optTime(sb.RecoveryTime)}, nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// placeholders is "$from, ..., $(from+n-1)".
func placeholders(from, n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("$%d", from+i)
	}
	return strings.Join(p, ", ")
}

// setList is "col2 = $2, col3 = $3, ..." for the columns of cols (a
// comma-separated list) after the first, the key, which is $1.
func setList(cols string) string {
	names := strings.Split(cols, ",")[1:]
	sets := make([]string, len(names))
	for i, c := range names {
		sets[i] = fmt.Sprintf("%s = $%d", strings.TrimSpace(c), i+2)
	}
	return strings.Join(sets, ", ")
}

// sandboxNameTaken maps a violation of the unique name to ErrNameTaken.
func sandboxNameTaken(err error, sb *store.Sandbox) error {
	if c, ok := uniqueViolation(err); ok {
		if c == "sandboxes_name_key" {
			return errdefs.New(errdefs.ErrNameTaken, "a sandbox named %q exists", sb.Name)
		}
		return errdefs.Conflictf("a sandbox with id %s exists", sb.ID)
	}
	return err
}

// CreateSandbox implements store.Store.
func (s *Store) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	now := time.Now()
	if sb.CreateTime.IsZero() {
		sb.CreateTime = now
	}
	sb.UpdateTime = now
	args, err := sandboxArgs(sb)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO sandboxes (`+sandboxCols+`) VALUES (`+placeholders(1, len(args))+`)`, args...)
	return sandboxNameTaken(err, sb)
}

// GetSandbox implements store.Store.
func (s *Store) GetSandbox(ctx context.Context, idOrName string) (*store.Sandbox, error) {
	sb, err := scanSandbox(s.pool.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes
		WHERE id = $1 OR (name = $1 AND NOT pooled) ORDER BY id = $1 DESC LIMIT 1`, idOrName))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", idOrName)
	}
	return sb, err
}

// ListSandboxes implements store.Store; labels match by JSONB containment.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	q := `SELECT ` + sandboxCols + ` FROM sandboxes WHERE true`
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if !f.All {
		q += ` AND pooled = ` + arg(f.Pooled)
	}
	if f.SourceSnapshot != "" {
		q += ` AND source_snapshot = ` + arg(f.SourceSnapshot)
	}
	if f.Owners != nil {
		q += ` AND owner = ANY(` + arg(f.Owners) + `)`
	}
	if f.Node != "" {
		q += ` AND node = ` + arg(f.Node)
	}
	if f.WakeOn != "" {
		q += ` AND wake_on = ` + arg(f.WakeOn) + ` AND state = ` + arg(string(api.StateSuspended))
	}
	if len(f.Labels) > 0 {
		want, err := jsonOf(f.Labels)
		if err != nil {
			return nil, err
		}
		q += ` AND labels @> ` + arg(want) + `::jsonb`
	}
	if f.After != nil {
		q += ` AND (create_time, id) > (` + arg(f.After.CreateTime.UTC()) + `, ` + arg(f.After.ID) + `)`
	}
	q += ` ORDER BY create_time, id`
	if f.Limit > 0 {
		q += ` LIMIT ` + arg(f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	return collect(rows, err, scanSandbox)
}

// SandboxUsage implements store.Store with one aggregate query.
func (s *Store) SandboxUsage(ctx context.Context, node string) (store.Usage, error) {
	var u store.Usage
	var count, mem int64
	err := s.pool.QueryRow(ctx, `SELECT
		COALESCE(SUM(CASE WHEN pooled THEN 0 ELSE 1 END), 0),
		COALESCE(SUM(CASE WHEN state = $1 THEN 0 ELSE cpus END), 0),
		COALESCE(SUM(CASE WHEN state = $1 THEN 0 ELSE memory_mb END), 0)
		FROM sandboxes WHERE $2 = '' OR node = $2`, string(api.StateSuspended), node).Scan(&count, &u.CPUs, &mem)
	u.Count, u.MemoryMB = int(count), int(mem)
	return u, err
}

// UpdateSandbox implements store.Store.
func (s *Store) UpdateSandbox(ctx context.Context, sb *store.Sandbox) error {
	sb.UpdateTime = time.Now()
	args, err := sandboxArgs(sb)
	if err != nil {
		return err
	}
	// The update keeps the node column (nodeParam), and happens only
	// while the record names it (fencing, see store.Store).
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET `+setList(sandboxCols)+` WHERE id = $1 AND node = `+nodeParam, args...)
	if err != nil {
		return sandboxNameTaken(err, sb)
	}
	if tag.RowsAffected() == 0 {
		return s.notUpdated(ctx, sb)
	}
	return nil
}

// notUpdated is the error of an update of sb that changed no row:
// ErrSandboxNotFound, or ErrConflict when another node owns it now.
func (s *Store) notUpdated(ctx context.Context, sb *store.Sandbox) error {
	var node string
	if err := s.pool.QueryRow(ctx, `SELECT node FROM sandboxes WHERE id = $1`, sb.ID).Scan(&node); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox with id %q", sb.ID)
		}
		return err
	}
	if node != sb.Node {
		return errdefs.Conflictf("sandbox %s belongs to node %s now (taken over while node %s could not reach the database): node %s changes it no more", sb.Name, node, sb.Node, sb.Node)
	}
	return errdefs.Conflictf("sandbox %s changed meanwhile", sb.Name)
}

// TakeOverSandbox implements store.Cluster.
func (s *Store) TakeOverSandbox(ctx context.Context, sb *store.Sandbox, seen time.Time) error {
	prev := sb.UpdateTime
	sb.UpdateTime = time.Now().UTC().Truncate(time.Microsecond)
	args, err := sandboxArgs(sb)
	if err != nil {
		return err
	}
	args = append(args, seen.UTC())
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET `+setList(sandboxCols)+` WHERE id = $1 AND node = `+nodeParam+` AND update_time = $`+fmt.Sprint(len(args)), args...)
	if err == nil && tag.RowsAffected() == 0 {
		err = s.notUpdated(ctx, sb)
		if errdefs.IsNotFound(err) {
			return err
		}
		err = errdefs.Conflictf("sandbox %s changed before this node could take it over", sb.Name)
	}
	if err != nil {
		sb.UpdateTime = prev
		return err
	}
	return nil
}

// DeleteSandbox implements store.Store; the sandbox's checkpoints go with
// it (ON DELETE CASCADE).
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM sandboxes WHERE id = $1`, id)
	return err
}

const checkpointCols = `sandbox_id, seq, comment, source_id, health, manifest, size_bytes, added_bytes, files, create_time, store_time`

func scanCheckpoint(r row) (*store.Checkpoint, error) {
	var cp store.Checkpoint
	var manifest []byte
	var storeT *time.Time
	var files int64
	if err := r.Scan(&cp.SandboxID, &cp.Seq, &cp.Comment, &cp.SourceID, &cp.Health, &manifest,
		&cp.SizeBytes, &cp.AddedBytes, &files, &cp.CreateTime, &storeT); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(manifest, &cp.Manifest); err != nil {
		return nil, fmt.Errorf("checkpoint %s/v%d: corrupt record: %w", cp.SandboxID, cp.Seq, err)
	}
	cp.Files, cp.CreateTime, cp.StoreTime = int(files), cp.CreateTime.UTC(), utc(storeT)
	return &cp, nil
}

// AddCheckpoint implements store.Store.
func (s *Store) AddCheckpoint(ctx context.Context, cp *store.Checkpoint) error {
	if cp.CreateTime.IsZero() {
		cp.CreateTime = time.Now()
	}
	if cp.Health == "" {
		cp.Health = "ok"
	}
	if cp.StoreTime.IsZero() && len(cp.Manifest) > 0 {
		cp.StoreTime = cp.CreateTime
	}
	manifest := cp.Manifest
	if manifest == nil {
		manifest = []string{}
	}
	m, err := jsonOf(manifest)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO checkpoints (`+checkpointCols+`) VALUES (`+placeholders(1, 11)+`)`,
		cp.SandboxID, cp.Seq, cp.Comment, cp.SourceID, cp.Health, m, cp.SizeBytes, cp.AddedBytes,
		cp.Files, cp.CreateTime.UTC(), optTime(cp.StoreTime))
	if _, ok := uniqueViolation(err); ok {
		return errdefs.Conflictf("checkpoint v%d of sandbox %s exists", cp.Seq, cp.SandboxID)
	}
	return err
}

// GetCheckpoint implements store.Store.
func (s *Store) GetCheckpoint(ctx context.Context, sandboxID string, seq int) (*store.Checkpoint, error) {
	cp, err := scanCheckpoint(s.pool.QueryRow(ctx, `SELECT `+checkpointCols+` FROM checkpoints
		WHERE sandbox_id = $1 AND seq = $2`, sandboxID, seq))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrCheckpointNotFound, "no checkpoint v%d", seq)
	}
	return cp, err
}

// ListCheckpoints implements store.Store.
func (s *Store) ListCheckpoints(ctx context.Context, sandboxID string) ([]*store.Checkpoint, error) {
	q := `SELECT ` + checkpointCols + ` FROM checkpoints`
	var args []any
	if sandboxID != "" {
		q += ` WHERE sandbox_id = $1`
		args = append(args, sandboxID)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY sandbox_id, seq DESC`, args...)
	return collect(rows, err, scanCheckpoint)
}

// SetCheckpointStored implements store.Store.
func (s *Store) SetCheckpointStored(ctx context.Context, cp *store.Checkpoint) error {
	if cp.StoreTime.IsZero() {
		cp.StoreTime = time.Now()
	}
	manifest := cp.Manifest
	if manifest == nil {
		manifest = []string{}
	}
	m, err := jsonOf(manifest)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE checkpoints SET manifest = $1, size_bytes = $2, added_bytes = $3, files = $4,
		store_time = $5 WHERE sandbox_id = $6 AND seq = $7`, m, cp.SizeBytes, cp.AddedBytes, cp.Files,
		cp.StoreTime.UTC(), cp.SandboxID, cp.Seq)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrCheckpointNotFound, "no checkpoint v%d of sandbox %s", cp.Seq, cp.SandboxID)
	}
	return nil
}

// SetCheckpointHealth implements store.Store.
func (s *Store) SetCheckpointHealth(ctx context.Context, sandboxID string, seq int, health string) error {
	_, err := s.pool.Exec(ctx, `UPDATE checkpoints SET health = $1 WHERE sandbox_id = $2 AND seq = $3`, health, sandboxID, seq)
	return err
}

// DeleteCheckpoints implements store.Store.
func (s *Store) DeleteCheckpoints(ctx context.Context, sandboxID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM checkpoints WHERE sandbox_id = $1`, sandboxID)
	return err
}

const snapshotCols = `id, name, sandbox_id, sandbox_name, image, image_id, shape, memory, disk, memory_bytes,
	disk_bytes, stored_bytes, metadata, fork, state, create_time, expire_time, suspend, owner, store_time`

func scanSnapshot(r row) (*store.Snapshot, error) {
	var sn store.Snapshot
	var disk []byte
	var et, st *time.Time
	if err := r.Scan(&sn.ID, &sn.Name, &sn.SandboxID, &sn.SandboxName, &sn.Image, &sn.ImageID, &sn.Shape, &sn.Memory,
		&disk, &sn.MemoryBytes, &sn.DiskBytes, &sn.StoredBytes, &sn.Metadata, &sn.Fork, &sn.State, &sn.CreateTime, &et,
		&sn.Suspend, &sn.Owner, &st); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(disk, &sn.Disk); err != nil {
		return nil, fmt.Errorf("snapshot %s: corrupt record: %w", sn.ID, err)
	}
	if len(sn.Metadata) == 0 {
		sn.Metadata = nil
	}
	sn.CreateTime, sn.ExpireTime, sn.StoreTime = sn.CreateTime.UTC(), utc(et), utc(st)
	return &sn, nil
}

func snapshotArgs(sn *store.Snapshot) ([]any, error) {
	disk := sn.Disk
	if disk == nil {
		disk = []string{}
	}
	d, err := jsonOf(disk)
	if err != nil {
		return nil, err
	}
	var meta []byte
	if len(sn.Metadata) > 0 {
		meta = sn.Metadata
	}
	return []any{sn.ID, sn.Name, sn.SandboxID, sn.SandboxName, sn.Image, sn.ImageID, bytesOr(sn.Shape, "{}"),
		bytesOr(sn.Memory, "[]"), d, sn.MemoryBytes, sn.DiskBytes, sn.StoredBytes, meta, sn.Fork, sn.State,
		sn.CreateTime.UTC(), optTime(sn.ExpireTime), sn.Suspend, sn.Owner, optTime(sn.StoreTime)}, nil
}

// AddSnapshot implements store.Store.
func (s *Store) AddSnapshot(ctx context.Context, sn *store.Snapshot) error {
	if sn.CreateTime.IsZero() {
		sn.CreateTime = time.Now()
	}
	if sn.State == "" {
		sn.State = "ready"
	}
	if sn.StoreTime.IsZero() && sn.HasMemory() {
		sn.StoreTime = sn.CreateTime
	}
	args, err := snapshotArgs(sn)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (`+placeholders(1, len(args))+`)`, args...)
	if _, ok := uniqueViolation(err); ok {
		return errdefs.Conflictf("snapshot %s exists", sn.ID)
	}
	return err
}

// UpdateSnapshot implements store.Store.
func (s *Store) UpdateSnapshot(ctx context.Context, sn *store.Snapshot) error {
	args, err := snapshotArgs(sn)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE snapshots SET `+setList(snapshotCols)+` WHERE id = $1`, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", sn.ID)
	}
	return nil
}

// SetSnapshotStored implements store.Store.
func (s *Store) SetSnapshotStored(ctx context.Context, sn *store.Snapshot) error {
	if sn.StoreTime.IsZero() {
		sn.StoreTime = time.Now()
	}
	tag, err := s.pool.Exec(ctx, `UPDATE snapshots SET memory = $1, memory_bytes = $2, stored_bytes = $3, store_time = $4
		WHERE id = $5 AND state = 'ready'`, bytesOr(sn.Memory, "[]"), sn.MemoryBytes, sn.StoredBytes, sn.StoreTime.UTC(), sn.ID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", sn.ID)
	}
	return nil
}

// GetSnapshot implements store.Store.
func (s *Store) GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error) {
	sn, err := scanSnapshot(s.pool.QueryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", id)
	}
	return sn, err
}

// ListSnapshots implements store.Store.
func (s *Store) ListSnapshots(ctx context.Context, sandboxID string) ([]*store.Snapshot, error) {
	q := `SELECT ` + snapshotCols + ` FROM snapshots`
	var args []any
	if sandboxID != "" {
		q += ` WHERE sandbox_id = $1`
		args = append(args, sandboxID)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY create_time DESC, id`, args...)
	return collect(rows, err, scanSnapshot)
}

// DeleteSnapshot implements store.Store.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM snapshots WHERE id = $1`, id)
	return err
}

// PutOp implements store.Store.
func (s *Store) PutOp(ctx context.Context, op *store.Op) error {
	if op.CreateTime.IsZero() {
		op.CreateTime = time.Now()
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO operations (id, sandbox_id, kind, data, create_time, node) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (id) DO UPDATE SET data = excluded.data`, op.ID, op.SandboxID, op.Kind, bytesOr(op.Data, "{}"),
		op.CreateTime.UTC(), op.Node)
	return err
}

// DeleteOp implements store.Store.
func (s *Store) DeleteOp(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM operations WHERE id = $1`, id)
	return err
}

// ListOps implements store.Store.
func (s *Store) ListOps(ctx context.Context, node string) ([]*store.Op, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, sandbox_id, kind, data, create_time, node FROM operations
		WHERE $1 = '' OR node = $1 ORDER BY create_time, id`, node)
	return collect(rows, err, func(r row) (*store.Op, error) {
		var op store.Op
		if err := r.Scan(&op.ID, &op.SandboxID, &op.Kind, &op.Data, &op.CreateTime, &op.Node); err != nil {
			return nil, err
		}
		op.CreateTime = op.CreateTime.UTC()
		return &op, nil
	})
}

// PutImage implements store.Store.
func (s *Store) PutImage(ctx context.Context, img *store.Image) error {
	if img.CreateTime.IsZero() {
		img.CreateTime = time.Now()
	}
	env := img.Env
	if env == nil {
		env = []string{}
	}
	e, err := jsonOf(env)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO images (name, id, digest, source, size_bytes, env, create_time, owner)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO UPDATE SET id = excluded.id, digest = excluded.digest,
		source = excluded.source, size_bytes = excluded.size_bytes, env = excluded.env,
		create_time = excluded.create_time, owner = excluded.owner`,
		img.Name, img.ID, img.Digest, img.Source, img.SizeBytes, e, img.CreateTime.UTC(), img.Owner)
	return err
}

func scanImage(r row) (*store.Image, error) {
	var img store.Image
	var env []byte
	if err := r.Scan(&img.Name, &img.ID, &img.Digest, &img.Source, &img.SizeBytes, &env, &img.CreateTime, &img.Owner); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(env, &img.Env); err != nil {
		return nil, fmt.Errorf("image %s: corrupt record: %w", img.Name, err)
	}
	img.CreateTime = img.CreateTime.UTC()
	return &img, nil
}

const imageCols = `name, id, digest, source, size_bytes, env, create_time, owner`

// GetImage implements store.Store.
func (s *Store) GetImage(ctx context.Context, name string) (*store.Image, error) {
	img, err := scanImage(s.pool.QueryRow(ctx, `SELECT `+imageCols+` FROM images WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrImageNotFound, "no image named %q", name)
	}
	return img, err
}

// ListImages implements store.Store.
func (s *Store) ListImages(ctx context.Context) ([]*store.Image, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+imageCols+` FROM images ORDER BY name`)
	return collect(rows, err, scanImage)
}

// DeleteImage implements store.Store.
func (s *Store) DeleteImage(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM images WHERE name = $1`, name)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrImageNotFound, "no image named %q", name)
	}
	return nil
}
