// Package cluster is an sbxd's membership in a cluster of nodes that share
// one PostgreSQL store and one blob store: it joins the nodes table (a
// lease row with an epoch), renews the lease by heartbeats that publish
// the node's capacity, and reports when the node was fenced (another
// process took its name over). There is no protocol of its own: every
// decision is a row in the shared database (store.Cluster).
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// DefaultLeaseTTL is how long a node's lease runs without a heartbeat:
// a node whose sbxd died counts as lost this long after its last one.
const DefaultLeaseTTL = 15 * time.Second

// Config names the node and how it heartbeats.
type Config struct {
	// Name is the node's name: [a-z0-9][a-z0-9.-]{0,62}.
	Name string
	// URL is where other nodes reach this node's API (http://host:port),
	// "" when it serves none.
	URL string
	// DataDir holds the node's host id (DATA_DIR/node-id).
	DataDir string
	// Version is the sbx version this node runs.
	Version string
	// LeaseTTL is the lease's length (default DefaultLeaseTTL); a heartbeat
	// renews it every LeaseTTL/4.
	LeaseTTL time.Duration
	// Capacity is what the node publishes in each heartbeat.
	Capacity func(ctx context.Context) api.NodeCapacity
	// Key is the cluster key ("" when the node has none: it forwards
	// nothing); every node of a cluster must have the same, which Join
	// checks against the digest the first node recorded.
	Key string
	// Renewed, when not nil, is called after a heartbeat succeeds again
	// after failing: the node was out of touch with the database, its
	// lease may have run out, and another node may have taken sandboxes
	// over (fencing).
	Renewed func(ctx context.Context)
}

// Member is this sbxd's place in the cluster, from Join to Leave.
type Member struct {
	st  store.Cluster
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	node   store.Node
	fenced chan struct{}
	gone   bool
}

// ValidName checks a node name: [a-z0-9][a-z0-9.-]{0,62}.
func ValidName(name string) error {
	if name == "" || len(name) > 63 {
		return errdefs.Invalid("node", "%q: 1 to 63 characters", name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && (r == '-' || r == '.')
		if !ok {
			return errdefs.Invalid("node", "%q: lowercase letters, digits, '-' and '.', starting with a letter or digit", name)
		}
	}
	return nil
}

// Join takes the node's row in st (store.Cluster.JoinNode) with a first
// capacity. Errors: the name's (errdefs.ErrInvalidArgument); another live
// node holds the name or speaks another cluster protocol
// (errdefs.ErrConflict); the store's.
func Join(ctx context.Context, st store.Cluster, cfg Config, log *slog.Logger) (*Member, error) {
	if err := ValidName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	hostID, err := hostID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.Key != "" {
		sum := sha256.Sum256([]byte("sbx cluster key v1\x00" + cfg.Key))
		if err := st.CheckClusterKey(ctx, hex.EncodeToString(sum[:])); err != nil {
			return nil, fmt.Errorf("join the cluster as node %s: %w", cfg.Name, err)
		}
	}
	m := &Member{st: st, cfg: cfg, log: log, fenced: make(chan struct{})}
	m.node = store.Node{Name: cfg.Name, URL: cfg.URL, HostID: hostID, Version: cfg.Version,
		Protocol: api.ClusterProtocol, Capacity: m.capacity(ctx)}
	if err := st.JoinNode(ctx, &m.node, cfg.LeaseTTL); err != nil {
		return nil, fmt.Errorf("join the cluster as node %s: %w", cfg.Name, err)
	}
	return m, nil
}

// hostID returns the random id of the data dir (DIR/node-id), making it on
// first use: it tells a restart of this node from another sbxd that was
// given the same name.
func hostID(dir string) (string, error) {
	path := filepath.Join(dir, "node-id")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) == 32 {
		return strings.TrimSpace(string(b)), nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return id, nil
}

func (m *Member) capacity(ctx context.Context) api.NodeCapacity {
	if m.cfg.Capacity == nil {
		return api.NodeCapacity{}
	}
	return m.cfg.Capacity(ctx)
}

// Name is the node's name.
func (m *Member) Name() string { return m.cfg.Name }

// Epoch is the epoch this process joined at.
func (m *Member) Epoch() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.node.Epoch
}

// Fenced is closed when a heartbeat found the node's row taken over by
// another process (a higher epoch): this process no longer owns the node
// and must stop acting for it.
func (m *Member) Fenced() <-chan struct{} { return m.fenced }

// Run heartbeats every LeaseTTL/4 until ctx ends or the node is fenced. A
// heartbeat that fails (the database does not answer) is retried at the
// next tick: the lease may run out meanwhile, and the node then counts as
// lost to the others; it is fenced only if another process took its name
// over.
func (m *Member) Run(ctx context.Context) {
	every := m.cfg.LeaseTTL / 4
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := m.Heartbeat(ctx)
		switch {
		case err == nil:
			if failing {
				m.log.Info("node heartbeat renewed again", "node", m.cfg.Name)
				if m.cfg.Renewed != nil {
					m.cfg.Renewed(ctx)
				}
			}
			failing = false
		case errdefs.IsConflict(err):
			m.log.Error("this node was fenced: another sbxd took its name over", "node", m.cfg.Name, "err", err)
			return
		case ctx.Err() != nil:
			return
		default:
			if !failing {
				m.log.Warn("node heartbeat failed; retrying", "node", m.cfg.Name, "err", err)
			}
			failing = true
		}
	}
}

// Heartbeat renews the lease once, bounded by LeaseTTL/2, and publishes
// the capacity. Errors: errdefs.ErrConflict when the node was fenced (and
// Fenced is then closed); the store's.
func (m *Member) Heartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL/2)
	defer cancel()
	err := m.st.HeartbeatNode(ctx, m.cfg.Name, m.Epoch(), m.capacity(ctx), m.cfg.LeaseTTL)
	if errdefs.IsConflict(err) {
		m.mu.Lock()
		if !m.gone {
			m.gone = true
			close(m.fenced)
		}
		m.mu.Unlock()
	}
	return err
}

// Leave ends the lease now and records the node stopped (a clean stop of
// sbxd), within 5 s.
func (m *Member) Leave() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.st.LeaveNode(ctx, m.cfg.Name, m.Epoch())
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("leave the cluster: %w", err)
	}
	return nil
}
