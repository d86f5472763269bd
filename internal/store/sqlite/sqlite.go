// Package sqlite is the embedded [store.Store]: one SQLite file (WAL mode)
// through the pure-Go driver modernc.org/sqlite, its schema versioned by
// goose migrations embedded from migrations/.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on one SQLite file.
type Store struct {
	db *sql.DB
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and migrates its
// schema to the newest version.
func Open(ctx context.Context, path string) (*Store, error) {
	// The database holds API keys' hashes, sandboxes' env and events: only
	// root reads it. SQLite makes its -wal and -shm files with the
	// database's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = f.Chmod(0o600)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		_ = os.Chmod(p, 0o600)
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One connection: writes are serialised anyway, and SQLITE_BUSY between
	// connections of one process is avoided.
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		db.Close()
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

const timeFmt = time.RFC3339Nano

func fmtTime(t time.Time) string { return t.UTC().Format(timeFmt) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(timeFmt, s)
	return t
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func isUnique(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

const sandboxCols = `id, name, state, state_reason, image, image_id, cpus, memory_mb, disk_mb, env, labels,
	network, volumes, timeout_ms, source_sandbox, source_snapshot, disk_source, pooled, create_time, update_time,
	suspend_snapshot, wake_on, keep_alive, suspend_time, owner, secrets, node,
	recovery_interval_ms, recovery_snapshot, recovery_time`

func scanSandbox(row interface{ Scan(...any) error }) (*store.Sandbox, error) {
	var sb store.Sandbox
	var env, labels, network, volumes, ct, ut, st, secrets, rt string
	var state string
	if err := row.Scan(&sb.ID, &sb.Name, &state, &sb.StateReason, &sb.Image, &sb.ImageID, &sb.CPUs, &sb.MemoryMB,
		&sb.DiskMB, &env, &labels, &network, &volumes, &sb.TimeoutMS, &sb.SourceSandbox, &sb.SourceSnapshot,
		&sb.DiskSource, &sb.Pooled, &ct, &ut, &sb.SuspendSnapshot, &sb.WakeOn, &sb.KeepAlive, &st, &sb.Owner, &secrets, &sb.Node,
		&sb.RecoveryIntervalMS, &sb.RecoverySnapshot, &rt); err != nil {
		return nil, err
	}
	if secrets != "" {
		if err := json.Unmarshal([]byte(secrets), &sb.Secrets); err != nil {
			return nil, fmt.Errorf("sandbox %s: corrupt secrets record: %w", sb.ID, err)
		}
	}
	sb.State = api.State(state)
	if err := errors.Join(json.Unmarshal([]byte(env), &sb.Env), json.Unmarshal([]byte(labels), &sb.Labels),
		json.Unmarshal([]byte(network), &sb.Network), json.Unmarshal([]byte(volumes), &sb.Volumes)); err != nil {
		return nil, fmt.Errorf("sandbox %s: corrupt record: %w", sb.ID, err)
	}
	sb.CreateTime, sb.UpdateTime = parseTime(ct), parseTime(ut)
	if st != "" {
		sb.SuspendTime = parseTime(st)
	}
	if rt != "" {
		sb.RecoveryTime = parseTime(rt)
	}
	return &sb, nil
}

// CreateSandbox implements store.Store.
func (s *Store) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	now := time.Now()
	if sb.CreateTime.IsZero() {
		sb.CreateTime = now
	}
	sb.UpdateTime = now
	_, err := s.db.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sb.ID, sb.Name, string(sb.State), sb.StateReason, sb.Image, sb.ImageID, sb.CPUs, sb.MemoryMB, sb.DiskMB,
		toJSON(nonNil(sb.Env)), toJSON(nonNil(sb.Labels)), toJSON(sb.Network), toJSON(volumesOf(sb)), sb.TimeoutMS,
		sb.SourceSandbox, sb.SourceSnapshot, sb.DiskSource, sb.Pooled, fmtTime(sb.CreateTime), fmtTime(sb.UpdateTime),
		sb.SuspendSnapshot, sb.WakeOn, sb.KeepAlive, optTime(sb.SuspendTime), sb.Owner, secretsJSON(sb.Secrets), sb.Node,
		sb.RecoveryIntervalMS, sb.RecoverySnapshot, optTime(sb.RecoveryTime))
	if isUnique(err) {
		return errdefs.New(errdefs.ErrNameTaken, "a sandbox named %q exists", sb.Name)
	}
	return err
}

// secretsJSON is the secrets column: the empty string for none.
func secretsJSON(s *store.SecretSet) string {
	if s == nil || (len(s.List) == 0 && len(s.CACert) == 0) {
		return ""
	}
	return toJSON(s)
}

func volumesOf(sb *store.Sandbox) []api.Volume {
	if sb.Volumes == nil {
		return []api.Volume{}
	}
	return sb.Volumes
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// GetSandbox implements store.Store.
func (s *Store) GetSandbox(ctx context.Context, idOrName string) (*store.Sandbox, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes
		WHERE id = ? OR (name = ? AND pooled = 0) ORDER BY id = ? DESC LIMIT 1`, idOrName, idOrName, idOrName)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", idOrName)
	}
	return sb, err
}

// ListSandboxes implements store.Store.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	q := `SELECT ` + sandboxCols + ` FROM sandboxes WHERE 1 = 1`
	args := []any{}
	if !f.All {
		q += ` AND pooled = ?`
		args = append(args, f.Pooled)
	}
	if f.SourceSnapshot != "" {
		q += ` AND source_snapshot = ?`
		args = append(args, f.SourceSnapshot)
	}
	if f.Owners != nil {
		var c string
		c, args = inList("owner", f.Owners, args)
		q += ` AND ` + c
	}
	if f.Node != "" {
		q += ` AND node = ?`
		args = append(args, f.Node)
	}
	if f.WakeOn != "" {
		q += ` AND wake_on = ? AND state = ?`
		args = append(args, f.WakeOn, string(api.StateSuspended))
	}
	// Labels, the page's start and its limit are applied here, after the
	// query, in the order of time values (the text column's order differs
	// where a time has no fraction of a second).
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY create_time, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, err
		}
		if matchLabels(sb.Labels, f.Labels) {
			out = append(out, sb)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b *store.Sandbox) int {
		if c := a.CreateTime.Compare(b.CreateTime); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if k := f.After; k != nil {
		i := 0
		for i < len(out) && (out[i].CreateTime.Before(k.CreateTime) || (out[i].CreateTime.Equal(k.CreateTime) && out[i].ID <= k.ID)) {
			i++
		}
		out = out[i:]
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// SandboxUsage implements store.Store with one aggregate query.
func (s *Store) SandboxUsage(ctx context.Context, node string) (store.Usage, error) {
	var u store.Usage
	err := s.db.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN pooled THEN 0 ELSE 1 END), 0),
		COALESCE(SUM(CASE WHEN state = ? THEN 0 ELSE cpus END), 0),
		COALESCE(SUM(CASE WHEN state = ? THEN 0 ELSE memory_mb END), 0)
		FROM sandboxes WHERE ? = '' OR node = ?`, string(api.StateSuspended), string(api.StateSuspended), node, node).Scan(&u.Count, &u.CPUs, &u.MemoryMB)
	return u, err
}

// inList is the condition "col IN (owners...)" and args with the owners
// appended; an empty list matches nothing.
func inList(col string, owners []string, args []any) (string, []any) {
	if len(owners) == 0 {
		return "0 = 1", args
	}
	for _, o := range owners {
		args = append(args, o)
	}
	return col + " IN (?" + strings.Repeat(", ?", len(owners)-1) + ")", args
}

func matchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// UpdateSandbox implements store.Store.
func (s *Store) UpdateSandbox(ctx context.Context, sb *store.Sandbox) error {
	sb.UpdateTime = time.Now()
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET name = ?, state = ?, state_reason = ?,
		image = ?, image_id = ?, cpus = ?, memory_mb = ?, disk_mb = ?, env = ?, labels = ?, network = ?, volumes = ?, timeout_ms = ?,
		source_sandbox = ?, source_snapshot = ?, disk_source = ?, pooled = ?, create_time = ?, update_time = ?,
		suspend_snapshot = ?, wake_on = ?, keep_alive = ?, suspend_time = ?, owner = ?, secrets = ?,
		recovery_interval_ms = ?, recovery_snapshot = ?, recovery_time = ? WHERE id = ? AND node = ?`,
		sb.Name, string(sb.State), sb.StateReason, sb.Image, sb.ImageID, sb.CPUs, sb.MemoryMB, sb.DiskMB,
		toJSON(nonNil(sb.Env)), toJSON(nonNil(sb.Labels)), toJSON(sb.Network), toJSON(volumesOf(sb)), sb.TimeoutMS,
		sb.SourceSandbox, sb.SourceSnapshot, sb.DiskSource, sb.Pooled, fmtTime(sb.CreateTime), fmtTime(sb.UpdateTime),
		sb.SuspendSnapshot, sb.WakeOn, sb.KeepAlive, optTime(sb.SuspendTime), sb.Owner, secretsJSON(sb.Secrets),
		sb.RecoveryIntervalMS, sb.RecoverySnapshot, optTime(sb.RecoveryTime), sb.ID, sb.Node)
	if isUnique(err) {
		return errdefs.New(errdefs.ErrNameTaken, "a sandbox named %q exists", sb.Name)
	}
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var node string
		if err := s.db.QueryRowContext(ctx, `SELECT node FROM sandboxes WHERE id = ?`, sb.ID).Scan(&node); err == nil {
			return errdefs.Conflictf("sandbox %s belongs to node %q, not %q: this change is refused", sb.Name, node, sb.Node)
		}
		return errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox with id %q", sb.ID)
	}
	return nil
}

// DeleteSandbox implements store.Store; the sandbox's checkpoints go with
// it (ON DELETE CASCADE).
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	return err
}

const checkpointCols = `sandbox_id, seq, comment, source_id, health, manifest, size_bytes, added_bytes, files, create_time, store_time`

func scanCheckpoint(row interface{ Scan(...any) error }) (*store.Checkpoint, error) {
	var cp store.Checkpoint
	var manifest, ct, storeT string
	if err := row.Scan(&cp.SandboxID, &cp.Seq, &cp.Comment, &cp.SourceID, &cp.Health, &manifest,
		&cp.SizeBytes, &cp.AddedBytes, &cp.Files, &ct, &storeT); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(manifest), &cp.Manifest); err != nil {
		return nil, fmt.Errorf("checkpoint %s/v%d: corrupt record: %w", cp.SandboxID, cp.Seq, err)
	}
	cp.CreateTime = parseTime(ct)
	if storeT != "" {
		cp.StoreTime = parseTime(storeT)
	}
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
	storeT := ""
	if !cp.StoreTime.IsZero() {
		storeT = fmtTime(cp.StoreTime)
	}
	manifest := cp.Manifest
	if manifest == nil {
		manifest = []string{}
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO checkpoints (`+checkpointCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		cp.SandboxID, cp.Seq, cp.Comment, cp.SourceID, cp.Health, toJSON(manifest), cp.SizeBytes, cp.AddedBytes,
		cp.Files, fmtTime(cp.CreateTime), storeT)
	if isUnique(err) {
		return errdefs.Conflictf("checkpoint v%d of sandbox %s exists", cp.Seq, cp.SandboxID)
	}
	return err
}

// GetCheckpoint implements store.Store.
func (s *Store) GetCheckpoint(ctx context.Context, sandboxID string, seq int) (*store.Checkpoint, error) {
	cp, err := scanCheckpoint(s.db.QueryRowContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints
		WHERE sandbox_id = ? AND seq = ?`, sandboxID, seq))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrCheckpointNotFound, "no checkpoint v%d", seq)
	}
	return cp, err
}

// ListCheckpoints implements store.Store.
func (s *Store) ListCheckpoints(ctx context.Context, sandboxID string) ([]*store.Checkpoint, error) {
	q := `SELECT ` + checkpointCols + ` FROM checkpoints`
	var args []any
	if sandboxID != "" {
		q += ` WHERE sandbox_id = ?`
		args = append(args, sandboxID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY sandbox_id, seq DESC`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Checkpoint
	for rows.Next() {
		cp, err := scanCheckpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, rows.Err()
}

// SetCheckpointStored implements store.Store.
func (s *Store) SetCheckpointStored(ctx context.Context, cp *store.Checkpoint) error {
	if cp.StoreTime.IsZero() {
		cp.StoreTime = time.Now()
	}
	res, err := s.db.ExecContext(ctx, `UPDATE checkpoints SET manifest = ?, size_bytes = ?, added_bytes = ?, files = ?, store_time = ?
		WHERE sandbox_id = ? AND seq = ?`, toJSON(cp.Manifest), cp.SizeBytes, cp.AddedBytes, cp.Files, fmtTime(cp.StoreTime), cp.SandboxID, cp.Seq)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrCheckpointNotFound, "no checkpoint v%d of sandbox %s", cp.Seq, cp.SandboxID)
	}
	return nil
}

// SetCheckpointHealth implements store.Store.
func (s *Store) SetCheckpointHealth(ctx context.Context, sandboxID string, seq int, health string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE checkpoints SET health = ? WHERE sandbox_id = ? AND seq = ?`, health, sandboxID, seq)
	return err
}

// DeleteCheckpoints implements store.Store.
func (s *Store) DeleteCheckpoints(ctx context.Context, sandboxID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM checkpoints WHERE sandbox_id = ?`, sandboxID)
	return err
}

const snapshotCols = `id, name, sandbox_id, sandbox_name, image, image_id, shape, memory, disk, memory_bytes,
	disk_bytes, stored_bytes, metadata, fork, state, create_time, expire_time, suspend, owner, store_time`

func scanSnapshot(row interface{ Scan(...any) error }) (*store.Snapshot, error) {
	var sn store.Snapshot
	var shape, memory, disk, metadata, ct, et, st string
	if err := row.Scan(&sn.ID, &sn.Name, &sn.SandboxID, &sn.SandboxName, &sn.Image, &sn.ImageID, &shape, &memory,
		&disk, &sn.MemoryBytes, &sn.DiskBytes, &sn.StoredBytes, &metadata, &sn.Fork, &sn.State, &ct, &et, &sn.Suspend, &sn.Owner, &st); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(disk), &sn.Disk); err != nil {
		return nil, fmt.Errorf("snapshot %s: corrupt record: %w", sn.ID, err)
	}
	sn.Shape, sn.Memory = []byte(shape), []byte(memory)
	if metadata != "null" && metadata != "" {
		sn.Metadata = []byte(metadata)
	}
	sn.CreateTime = parseTime(ct)
	if et != "" {
		sn.ExpireTime = parseTime(et)
	}
	if st != "" {
		sn.StoreTime = parseTime(st)
	}
	return &sn, nil
}

func snapshotArgs(sn *store.Snapshot) []any {
	et := ""
	if !sn.ExpireTime.IsZero() {
		et = fmtTime(sn.ExpireTime)
	}
	meta := "null"
	if len(sn.Metadata) > 0 {
		meta = string(sn.Metadata)
	}
	disk := sn.Disk
	if disk == nil {
		disk = []string{}
	}
	orJSON := func(b []byte, def string) string {
		if len(b) == 0 {
			return def
		}
		return string(b)
	}
	return []any{sn.ID, sn.Name, sn.SandboxID, sn.SandboxName, sn.Image, sn.ImageID, orJSON(sn.Shape, "{}"),
		orJSON(sn.Memory, "[]"), toJSON(disk), sn.MemoryBytes, sn.DiskBytes, sn.StoredBytes, meta, sn.Fork, sn.State,
		fmtTime(sn.CreateTime), et, sn.Suspend, sn.Owner, optTime(sn.StoreTime)}
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
	_, err := s.db.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		snapshotArgs(sn)...)
	return err
}

// UpdateSnapshot implements store.Store.
func (s *Store) UpdateSnapshot(ctx context.Context, sn *store.Snapshot) error {
	args := snapshotArgs(sn)
	res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET name = ?, sandbox_id = ?, sandbox_name = ?, image = ?,
		image_id = ?, shape = ?, memory = ?, disk = ?, memory_bytes = ?, disk_bytes = ?, stored_bytes = ?, metadata = ?,
		fork = ?, state = ?, create_time = ?, expire_time = ?, suspend = ?, owner = ?, store_time = ? WHERE id = ?`, append(args[1:], args[0])...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", sn.ID)
	}
	return nil
}

// SetSnapshotStored implements store.Store.
func (s *Store) SetSnapshotStored(ctx context.Context, sn *store.Snapshot) error {
	if sn.StoreTime.IsZero() {
		sn.StoreTime = time.Now()
	}
	memory := string(sn.Memory)
	if memory == "" {
		memory = "[]"
	}
	res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET memory = ?, memory_bytes = ?, stored_bytes = ?, store_time = ?
		WHERE id = ? AND state = 'ready'`, memory, sn.MemoryBytes, sn.StoredBytes, fmtTime(sn.StoreTime), sn.ID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", sn.ID)
	}
	return nil
}

// GetSnapshot implements store.Store.
func (s *Store) GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error) {
	sn, err := scanSnapshot(s.db.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrSnapshotNotFound, "no snapshot %q", id)
	}
	return sn, err
}

// ListSnapshots implements store.Store.
func (s *Store) ListSnapshots(ctx context.Context, sandboxID string) ([]*store.Snapshot, error) {
	q := `SELECT ` + snapshotCols + ` FROM snapshots`
	var args []any
	if sandboxID != "" {
		q += ` WHERE sandbox_id = ?`
		args = append(args, sandboxID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY create_time DESC, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Snapshot
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sn)
	}
	return out, rows.Err()
}

// DeleteSnapshot implements store.Store.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	return err
}

// PutOp implements store.Store.
func (s *Store) PutOp(ctx context.Context, op *store.Op) error {
	if op.CreateTime.IsZero() {
		op.CreateTime = time.Now()
	}
	data := string(op.Data)
	if data == "" {
		data = "{}"
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO operations (id, sandbox_id, kind, data, create_time, node) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET data = excluded.data`, op.ID, op.SandboxID, op.Kind, data, fmtTime(op.CreateTime), op.Node)
	return err
}

// DeleteOp implements store.Store.
func (s *Store) DeleteOp(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM operations WHERE id = ?`, id)
	return err
}

// ListOps implements store.Store.
func (s *Store) ListOps(ctx context.Context, node string) ([]*store.Op, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, sandbox_id, kind, data, create_time, node FROM operations
		WHERE ? = '' OR node = ? ORDER BY create_time`, node, node)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Op
	for rows.Next() {
		var op store.Op
		var data, ct string
		if err := rows.Scan(&op.ID, &op.SandboxID, &op.Kind, &data, &ct, &op.Node); err != nil {
			return nil, err
		}
		op.Data = []byte(data)
		op.CreateTime = parseTime(ct)
		out = append(out, &op)
	}
	return out, rows.Err()
}

// optTime formats t, or "" for the zero time.
func optTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return fmtTime(t)
}

const eventCols = `id, key, sandbox_id, data, content_type, create_time, deliver_time, expire_time, owner`

// eventSelect reads eventCols and the row's rowid (the event's Seq).
const eventSelect = `SELECT ` + eventCols + `, rowid FROM events`

func scanEvents(rows *sql.Rows) ([]*store.Event, error) {
	return scanEventsPage(rows, 0, 0)
}

// scanEventsPage reads rows until limit events (0: all) or until the
// bodies read reach maxBytes (0: no bound).
func scanEventsPage(rows *sql.Rows, limit int, maxBytes int64) ([]*store.Event, error) {
	defer rows.Close()
	var out []*store.Event
	var bytes int64
	for rows.Next() {
		if (limit > 0 && len(out) >= limit) || (maxBytes > 0 && bytes >= maxBytes) {
			break
		}
		var ev store.Event
		var ct, dt, et string
		if err := rows.Scan(&ev.ID, &ev.Key, &ev.SandboxID, &ev.Data, &ev.ContentType, &ct, &dt, &et, &ev.Owner, &ev.Seq); err != nil {
			return nil, err
		}
		bytes += int64(len(ev.Data))
		ev.CreateTime = parseTime(ct)
		if dt != "" {
			ev.DeliverTime = parseTime(dt)
		}
		if et != "" {
			ev.ExpireTime = parseTime(et)
		}
		out = append(out, &ev)
	}
	return out, rows.Err()
}

// AddEvent implements store.Store.
func (s *Store) AddEvent(ctx context.Context, ev *store.Event) error {
	if ev.CreateTime.IsZero() {
		ev.CreateTime = time.Now()
	}
	data := ev.Data
	if data == nil {
		data = []byte{}
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO events (`+eventCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ev.ID, ev.Key, ev.SandboxID, data, ev.ContentType, fmtTime(ev.CreateTime), optTime(ev.DeliverTime), optTime(ev.ExpireTime),
		ev.Owner)
	if err != nil {
		return err
	}
	ev.Seq, err = res.LastInsertId()
	return err
}

// eventWhere is the WHERE clause of q and its arguments.
func eventWhere(q store.EventQuery) (string, []any) {
	var conds []string
	var args []any
	switch {
	case q.SandboxID != "":
		conds, args = append(conds, "sandbox_id = ?"), append(args, q.SandboxID)
	case q.Pending:
		conds = append(conds, "sandbox_id = ''")
	}
	if q.Key != "" {
		conds, args = append(conds, "key = ?"), append(args, q.Key)
	}
	if q.After > 0 {
		conds, args = append(conds, "rowid > ?"), append(args, q.After)
	}
	if q.Owners != nil {
		var c string
		c, args = inList("owner", q.Owners, args)
		conds = append(conds, c)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// ListEvents implements store.Store: rows are read one at a time, and no
// more than the page holds.
func (s *Store) ListEvents(ctx context.Context, q store.EventQuery) ([]*store.Event, error) {
	where, args := eventWhere(q)
	query := eventSelect + where + ` ORDER BY rowid`
	if q.Limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanEventsPage(rows, q.Limit, q.MaxBytes)
}

// CountEvents implements store.Store.
func (s *Store) CountEvents(ctx context.Context, q store.EventQuery) (int, int64, error) {
	q.After = 0
	where, args := eventWhere(q)
	var n int
	var bytes int64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM events`+where, args...).Scan(&n, &bytes)
	return n, bytes, err
}

// DeletePendingEvent implements store.Store.
func (s *Store) DeletePendingEvent(ctx context.Context, id string, owners []string) error {
	q, args := `DELETE FROM events WHERE id = ? AND sandbox_id = ''`, []any{id}
	if owners != nil {
		var c string
		c, args = inList("owner", owners, args)
		q += ` AND ` + c
	}
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrEventNotFound, "no pending event %q", id)
	}
	return nil
}

// DeletePendingEvents implements store.Store.
func (s *Store) DeletePendingEvents(ctx context.Context, key string, owners []string) (int, error) {
	q, args := `DELETE FROM events WHERE key = ? AND sandbox_id = ''`, []any{key}
	if owners != nil {
		var c string
		c, args = inList("owner", owners, args)
		q += ` AND ` + c
	}
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// TakePending implements store.Store, in one transaction.
func (s *Store) TakePending(ctx context.Context, key, sandboxID string, owners []string, now time.Time) ([]*store.Event, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	q, args := eventSelect+` WHERE key = ? AND sandbox_id = ''`, []any{key}
	if owners != nil {
		var c string
		c, args = inList("owner", owners, args)
		q += ` AND ` + c
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY rowid`, args...)
	if err != nil {
		return nil, err
	}
	all, err := scanEvents(rows)
	if err != nil {
		return nil, err
	}
	// Times are RFC 3339 text, not fixed width: compare them in Go.
	var evs []*store.Event
	for _, ev := range all {
		if ev.ExpireTime.IsZero() || ev.ExpireTime.After(now) {
			evs = append(evs, ev)
		}
	}
	for _, ev := range evs {
		ev.SandboxID, ev.DeliverTime = sandboxID, now
		if _, err := tx.ExecContext(ctx, `UPDATE events SET sandbox_id = ?, deliver_time = ? WHERE id = ?`,
			sandboxID, fmtTime(now), ev.ID); err != nil {
			return nil, err
		}
	}
	return evs, tx.Commit()
}

// DeleteEvents implements store.Store.
func (s *Store) DeleteEvents(ctx context.Context, sandboxID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE sandbox_id = ? AND sandbox_id != ''`, sandboxID)
	return err
}

// DeleteExpiredEvents implements store.Store; it reads no bodies.
func (s *Store) DeleteExpiredEvents(ctx context.Context, now time.Time) (int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, expire_time FROM events WHERE sandbox_id = '' AND expire_time != ''`)
	if err != nil {
		return 0, err
	}
	var expired []string
	for rows.Next() {
		var id, et string
		if err := rows.Scan(&id, &et); err != nil {
			rows.Close()
			return 0, err
		}
		// Times are RFC 3339 text, not fixed width: compare them in Go.
		if !parseTime(et).After(now) {
			expired = append(expired, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range expired {
		if _, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE id = ?`, id); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
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
	_, err := s.db.ExecContext(ctx, `INSERT INTO images (name, id, digest, source, size_bytes, env, create_time, owner)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET id = excluded.id, digest = excluded.digest,
		source = excluded.source, size_bytes = excluded.size_bytes, env = excluded.env,
		create_time = excluded.create_time, owner = excluded.owner`,
		img.Name, img.ID, img.Digest, img.Source, img.SizeBytes, toJSON(env), fmtTime(img.CreateTime), img.Owner)
	return err
}

func scanImage(row interface{ Scan(...any) error }) (*store.Image, error) {
	var img store.Image
	var env, ct string
	if err := row.Scan(&img.Name, &img.ID, &img.Digest, &img.Source, &img.SizeBytes, &env, &ct, &img.Owner); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(env), &img.Env); err != nil {
		return nil, fmt.Errorf("image %s: corrupt record: %w", img.Name, err)
	}
	img.CreateTime = parseTime(ct)
	return &img, nil
}

// GetImage implements store.Store.
func (s *Store) GetImage(ctx context.Context, name string) (*store.Image, error) {
	img, err := scanImage(s.db.QueryRowContext(ctx,
		`SELECT name, id, digest, source, size_bytes, env, create_time, owner FROM images WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrImageNotFound, "no image named %q", name)
	}
	return img, err
}

// ListImages implements store.Store.
func (s *Store) ListImages(ctx context.Context) ([]*store.Image, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, id, digest, source, size_bytes, env, create_time, owner FROM images ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Image
	for rows.Next() {
		img, err := scanImage(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, rows.Err()
}

// DeleteImage implements store.Store.
func (s *Store) DeleteImage(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM images WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrImageNotFound, "no image named %q", name)
	}
	return nil
}
