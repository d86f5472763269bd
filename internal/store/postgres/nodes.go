package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

var _ store.Cluster = (*Store)(nil)

const nodeCols = `name, url, host_id, version, protocol, epoch, state, draining, lease_expire_time > now(),
	join_time, heartbeat_time, lease_expire_time, capacity`

func scanNode(r row) (*store.Node, error) {
	var n store.Node
	var state string
	var draining bool
	var capacity []byte
	if err := r.Scan(&n.Name, &n.URL, &n.HostID, &n.Version, &n.Protocol, &n.Epoch, &state, &draining, &n.Live,
		&n.JoinTime, &n.HeartbeatTime, &n.LeaseExpireTime, &capacity); err != nil {
		return nil, err
	}
	switch {
	case state == string(api.NodeStopped) && !n.Live:
		n.State = api.NodeStopped
	case !n.Live:
		n.State = api.NodeLost
	case draining:
		n.State = api.NodeDraining
	default:
		n.State = api.NodeActive
	}
	n.JoinTime, n.HeartbeatTime, n.LeaseExpireTime = n.JoinTime.UTC(), n.HeartbeatTime.UTC(), n.LeaseExpireTime.UTC()
	if err := json.Unmarshal(capacity, &n.Capacity); err != nil {
		return nil, fmt.Errorf("node %s: corrupt capacity: %w", n.Name, err)
	}
	return &n, nil
}

// JoinNode implements store.Cluster, in one transaction that locks the
// nodes table against other joins (so that two nodes of different
// protocols joining at once cannot both pass the check).
func (s *Store) JoinNode(ctx context.Context, n *store.Node, ttl time.Duration) error {
	capacity, err := jsonOf(n.Capacity)
	if err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE nodes IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return err
	}
	var other string
	var otherProto int
	var otherVersion string
	err = tx.QueryRow(ctx, `SELECT name, protocol, version FROM nodes
		WHERE lease_expire_time > now() AND protocol <> $1 AND name <> $2 ORDER BY name LIMIT 1`,
		n.Protocol, n.Name).Scan(&other, &otherProto, &otherVersion)
	switch {
	case err == nil:
		return errdefs.Conflictf("node %s (sbx %s) speaks cluster protocol %d and live node %s (sbx %s) speaks %d: nodes of one cluster must speak the same (stop every node, then start the new version)",
			n.Name, n.Version, n.Protocol, other, otherVersion, otherProto)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	row := tx.QueryRow(ctx, `INSERT INTO nodes (name, url, host_id, version, protocol, epoch, state,
			join_time, heartbeat_time, lease_expire_time, capacity)
		VALUES ($1, $2, $3, $4, $5, 1, 'active', now(), now(), now() + $6 * interval '1 millisecond', $7)
		ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url, host_id = EXCLUDED.host_id,
			version = EXCLUDED.version, protocol = EXCLUDED.protocol, epoch = nodes.epoch + 1,
			state = 'active',
			join_time = now(), heartbeat_time = now(), lease_expire_time = EXCLUDED.lease_expire_time,
			capacity = EXCLUDED.capacity
		WHERE nodes.lease_expire_time <= now() OR nodes.host_id = EXCLUDED.host_id
		RETURNING `+nodeCols, n.Name, n.URL, n.HostID, n.Version, n.Protocol, ttl.Milliseconds(), capacity)
	got, err := scanNode(row)
	if errors.Is(err, pgx.ErrNoRows) {
		var url string
		var left time.Duration
		_ = tx.QueryRow(ctx, `SELECT url, EXTRACT(EPOCH FROM lease_expire_time - now()) * interval '1 second' FROM nodes WHERE name = $1`, n.Name).Scan(&url, &left)
		return errdefs.Conflictf("node name %s is held by another sbxd (advertised at %q; its lease runs %s more): give this one another --node, or stop that one",
			n.Name, url, left.Round(time.Second))
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	*n = *got
	return nil
}

// HeartbeatNode implements store.Cluster.
func (s *Store) HeartbeatNode(ctx context.Context, name string, epoch int64, c api.NodeCapacity, ttl time.Duration) error {
	capacity, err := jsonOf(c)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE nodes SET heartbeat_time = now(),
		lease_expire_time = now() + $3 * interval '1 millisecond', capacity = $4
		WHERE name = $1 AND epoch = $2`, name, epoch, ttl.Milliseconds(), capacity)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.Conflictf("node %s at epoch %d was taken over by another sbxd (fenced)", name, epoch)
	}
	return nil
}

// LeaveNode implements store.Cluster.
func (s *Store) LeaveNode(ctx context.Context, name string, epoch int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE nodes SET state = 'stopped', lease_expire_time = now()
		WHERE name = $1 AND epoch = $2`, name, epoch)
	return err
}

// ListNodes implements store.Cluster.
func (s *Store) ListNodes(ctx context.Context) ([]*store.Node, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+nodeCols+` FROM nodes ORDER BY name`)
	return collect(rows, err, scanNode)
}

// dutyLockID is the session advisory lock of the cluster's duty (an
// arbitrary constant: "sbx" and 2).
const dutyLockID = 0x736278_00000002

// HoldDuty implements store.Cluster: the lock is a session advisory lock
// held on a connection of this process's own, checked (a round trip) at
// each call; it is lost when that connection breaks, and taken by the
// first node to ask after.
func (s *Store) HoldDuty(ctx context.Context) (bool, error) {
	s.dutyMu.Lock()
	defer s.dutyMu.Unlock()
	if s.duty != nil {
		if err := s.duty.Ping(ctx); err == nil {
			return true, nil
		}
		_ = s.duty.Close(context.WithoutCancel(ctx))
		s.duty = nil
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := c.Hijack()
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(dutyLockID)).Scan(&ok); err != nil || !ok {
		_ = conn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	s.duty = conn
	return true, nil
}

// wakeChannel is node's LISTEN/NOTIFY channel of wakes, payload "NODE ID":
// "sbx_wake_" and 16 hex digits of the SHA-256 of its name (a name may be
// longer than an identifier, or need quoting). One channel per node, so a
// wake is delivered to the one connection that listens for it, not to
// every node's.
func wakeChannel(node string) string {
	sum := sha256.Sum256([]byte(node))
	return "sbx_wake_" + hex.EncodeToString(sum[:8])
}

// NotifyWake implements store.Cluster.
func (s *Store) NotifyWake(ctx context.Context, node, sandboxID string) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, wakeChannel(node), node+" "+sandboxID)
	return err
}

// ListenWakes implements store.Cluster on a connection of its own, which
// it makes again (after 1 s) when it breaks.
func (s *Store) ListenWakes(ctx context.Context, node string, listening func(), wake func(sandboxID string)) {
	for ctx.Err() == nil {
		err := s.listenWakes(ctx, node, listening, wake)
		if ctx.Err() != nil {
			return
		}
		s.health.mu.Lock()
		log := s.health.log
		s.health.mu.Unlock()
		if log != nil {
			log.Warn("wake listener: connection lost; listening again in 1 s", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listenWakes(ctx context.Context, node string, listening func(), wake func(string)) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := c.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+wakeChannel(node)); err != nil {
		return err
	}
	if listening != nil {
		listening()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		// The id has no space; a node's name might.
		if i := strings.LastIndexByte(n.Payload, ' '); i > 0 && n.Payload[:i] == node {
			wake(n.Payload[i+1:])
		}
	}
}

// PutImageRootFS implements store.Cluster; a second put of the same image
// keeps the first.
func (s *Store) PutImageRootFS(ctx context.Context, imageID string, manifest []string, sizeBytes int64) error {
	m, err := jsonOf(manifest)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO image_rootfs (image_id, manifest, size_bytes, create_time)
		VALUES ($1, $2, $3, now()) ON CONFLICT (image_id) DO NOTHING`, imageID, m, sizeBytes)
	return err
}

// GetImageRootFS implements store.Cluster.
func (s *Store) GetImageRootFS(ctx context.Context, imageID string) ([]string, error) {
	var m []byte
	err := s.pool.QueryRow(ctx, `SELECT manifest FROM image_rootfs WHERE image_id = $1`, imageID).Scan(&m)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrImageNotFound, "image %s has no root filesystem in the blob store", imageID)
	}
	if err != nil {
		return nil, err
	}
	var out []string
	if err := json.Unmarshal(m, &out); err != nil {
		return nil, fmt.Errorf("image %s: corrupt manifest record: %w", imageID, err)
	}
	return out, nil
}

// ClaimSandbox implements store.Cluster.
func (s *Store) ClaimSandbox(ctx context.Context, sb *store.Sandbox, to string) error {
	id := sb.ID
	now := time.Now().UTC().Truncate(time.Microsecond)
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET node = $3, update_time = $5
		WHERE id = $1 AND node = $2 AND state = $4 AND update_time = $6`,
		id, sb.Node, to, string(api.StateSuspended), now, sb.UpdateTime.UTC())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 {
		sb.Node, sb.UpdateTime = to, now
		return nil
	}
	var node, state string
	if err := s.pool.QueryRow(ctx, `SELECT node, state FROM sandboxes WHERE id = $1`, id).Scan(&node, &state); errors.Is(err, pgx.ErrNoRows) {
		return errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox with id %q", id)
	}
	return errdefs.Conflictf("sandbox %s changed before this node could resume it: node %s took it (now %s)", sb.Name, node, state)
}

// RemoveNode implements store.Cluster, in one transaction that locks the
// node's row (a node joining meanwhile waits, then joins anew).
func (s *Store) RemoveNode(ctx context.Context, name string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var live bool
	err = tx.QueryRow(ctx, `SELECT state = 'active' AND lease_expire_time > now() FROM nodes WHERE name = $1 FOR UPDATE`, name).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		return errdefs.New(errdefs.ErrNotFound, "no node named %q", name)
	}
	if err != nil {
		return err
	}
	if live {
		return errdefs.Conflictf("node %s is live (its lease runs): stop it, or wait for its lease to run out, first", name)
	}
	rows, err := tx.Query(ctx, `SELECT name FROM sandboxes WHERE node = $1 ORDER BY name LIMIT 6`, name)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(names) > 0 {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE node = $1`, name).Scan(&n); err != nil {
			return err
		}
		return errdefs.Conflictf("%d sandboxes still name node %s (%s): resume or delete them through another node first (running ones are recovered elsewhere once it is lost)",
			n, name, strings.Join(names[:min(len(names), 5)], ", "))
	}
	if _, err := tx.Exec(ctx, `DELETE FROM operations WHERE node = $1`, name); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM nodes WHERE name = $1`, name); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// SetNodeDraining implements store.Cluster.
func (s *Store) SetNodeDraining(ctx context.Context, name string, draining bool) error {
	tag, err := s.pool.Exec(ctx, `UPDATE nodes SET draining = $2 WHERE name = $1`, name, draining)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrNotFound, "no node named %q", name)
	}
	return nil
}

// CheckClusterKey implements store.Cluster.
func (s *Store) CheckClusterKey(ctx context.Context, digest string) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO cluster_meta (name, value) VALUES ('cluster_key_digest', $1)
		ON CONFLICT (name) DO NOTHING`, digest); err != nil {
		return err
	}
	var have string
	if err := s.pool.QueryRow(ctx, `SELECT value FROM cluster_meta WHERE name = 'cluster_key_digest'`).Scan(&have); err != nil {
		return err
	}
	if have != digest {
		return errdefs.Conflictf("this node's cluster key is not the cluster's: every node of a cluster needs the same $SBX_CLUSTER_KEY (the nodes could not forward requests to one another)")
	}
	return nil
}
