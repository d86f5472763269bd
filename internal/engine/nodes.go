package engine

import (
	"bufio"
	"context"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// NodeCapacity is what this node publishes in its heartbeats for
// placement: the host's CPUs and memory, what the sandboxes not suspended
// hold of what admission allows, how many sandboxes it has, and which
// images and snapshot memory images it holds locally.
func (e *Engine) NodeCapacity(ctx context.Context) api.NodeCapacity {
	c := api.NodeCapacity{CPUs: e.host.CPUs, MemoryBytes: e.host.MemoryBytes, FreeMemoryBytes: memAvailable(),
		Images: []string{}, SnapshotImages: []string{}}
	if u, err := e.nodeUsage(ctx); err == nil {
		c.Sandboxes = u.Count
	}
	if imgs, err := e.images.List(ctx); err == nil {
		for _, img := range imgs {
			if _, err := os.Stat(e.images.RootFS(img.ID)); err == nil {
				c.Images = append(c.Images, img.ID)
			}
		}
	}
	if ents, err := os.ReadDir(e.hotDir()); err == nil {
		for _, de := range ents {
			if de.IsDir() && !strings.HasPrefix(de.Name(), ".") {
				c.SnapshotImages = append(c.SnapshotImages, de.Name())
			}
		}
	}
	sort.Strings(c.Images)
	sort.Strings(c.SnapshotImages)
	return c
}

// localSandboxes lists the sandboxes f selects whose node is this one
// (running here, or suspended by it); on a single sbxd, every one f
// selects. Work on the host (reconcile, idle suspends, metering, the
// network's rules) reads this list: another node's sandboxes are its own.
func (e *Engine) localSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	f.Node = e.cfg.Node
	return e.st.ListSandboxes(ctx, f)
}

// holdsDuty reports whether this node does the cluster's duty, the work
// done once for the whole cluster (store.Cluster.HoldDuty): a single sbxd
// always does; a node that cannot tell (the database does not answer)
// does not.
func (e *Engine) holdsDuty(ctx context.Context) bool {
	cl, ok := e.st.(store.Cluster)
	if !ok || e.cfg.Node == "" {
		return true
	}
	held, err := cl.HoldDuty(ctx)
	if err != nil {
		e.log.Debug("cluster duty", "err", err)
	}
	return held
}

// nodeUsage is what the sandboxes of this node hold (store.SandboxUsage):
// every sandbox's on a single sbxd.
func (e *Engine) nodeUsage(ctx context.Context) (store.Usage, error) {
	return e.st.SandboxUsage(ctx, e.cfg.Node)
}

// memAvailable is /proc/meminfo's MemAvailable in bytes, 0 when unknown.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Nodes lists the nodes of the cluster this sbxd belongs to, by name, with
// the one answering marked Self; a single sbxd (not a cluster's node)
// lists itself alone, with no lease. The answering node's capacity is as
// of now, the others' as of their last heartbeat. Errors:
// ErrForbidden for a tenant key (nodes are the operator's); the store's.
func (e *Engine) Nodes(ctx context.Context) ([]api.Node, error) {
	if !CallerOf(ctx).Admin {
		return nil, errdefs.New(errdefs.ErrForbidden, "nodes are the operator's: only an admin key may list them")
	}
	cl, ok := e.st.(store.Cluster)
	if !ok || e.cfg.Node == "" {
		name, _ := os.Hostname()
		return []api.Node{{Name: name, URL: e.cfg.NodeURL, State: api.NodeActive, Version: e.cfg.Version,
			Protocol: api.ClusterProtocol, Self: true, JoinTime: e.started.UTC(), Capacity: e.NodeCapacity(ctx)}}, nil
	}
	recs, err := cl.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Node, 0, len(recs))
	for _, n := range recs {
		hb, exp := n.HeartbeatTime, n.LeaseExpireTime
		node := api.Node{Name: n.Name, URL: n.URL, State: n.State, Version: n.Version, Protocol: n.Protocol,
			Epoch: n.Epoch, Self: n.Name == e.cfg.Node, JoinTime: n.JoinTime, HeartbeatTime: &hb,
			LeaseExpireTime: &exp, Capacity: n.Capacity}
		if node.Self {
			// The answering node's capacity as of now, not as of its
			// last heartbeat.
			node.Capacity = e.NodeCapacity(ctx)
		}
		out = append(out, node)
	}
	return out, nil
}

// nodesCacheTTL is how long a request may route on a read of the nodes
// table: a node that was just lost gets requests for at most this long
// (they fail as its node does not answer).
const nodesCacheTTL = time.Second

// nodeCache is the last read of the nodes table, by name.
type nodeCache struct {
	mu    sync.Mutex
	at    time.Time
	nodes map[string]*store.Node
}

// node returns the record of node name, read at most nodesCacheTTL ago;
// nil when there is no such node.
func (e *Engine) node(ctx context.Context, name string) (*store.Node, error) {
	cl, ok := e.st.(store.Cluster)
	if !ok {
		return nil, nil
	}
	c := &e.nodes
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > nodesCacheTTL {
		recs, err := cl.ListNodes(ctx)
		if err != nil {
			return nil, err
		}
		c.nodes = make(map[string]*store.Node, len(recs))
		for _, n := range recs {
			c.nodes[n.Name] = n
		}
		c.at = time.Now()
	}
	return c.nodes[name], nil
}

// Route says which node serves requests on sandbox idOrName, as ctx's
// caller sees it: "" for this one, else the URL of the node it runs on.
// A single sbxd serves every request. A sandbox runs on its node; a
// suspended one is woken by the node that suspended it while that node is
// live, else by this one.
//
// Errors: the lookup's (ErrSandboxNotFound); ErrUnavailable when its node
// is lost or stopped (requests reach the sandbox again when the node is
// back) or advertises no URL.
func (e *Engine) Route(ctx context.Context, idOrName string) (string, error) {
	if e.cfg.Node == "" {
		return "", nil
	}
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return "", err
	}
	if sb.Node == "" || sb.Node == e.cfg.Node {
		return "", nil
	}
	n, err := e.node(ctx, sb.Node)
	if err != nil {
		return "", err
	}
	suspended := sb.State == api.StateSuspended
	switch {
	case n == nil || !n.Live:
		if suspended {
			return "", nil
		}
		state := api.NodeLost
		if n != nil {
			state = n.State
		}
		return "", errdefs.New(errdefs.ErrUnavailable,
			"sandbox %s runs on node %s, which is %s: requests reach it again when that node is back", sb.Name, sb.Node, state)
	case n.URL == "":
		return "", errdefs.New(errdefs.ErrUnavailable,
			"sandbox %s runs on node %s, which advertises no URL for other nodes to reach it (sbxd --advertise)", sb.Name, sb.Node)
	}
	return n.URL, nil
}

// orphanInterval is how often the duty holder looks for suspended
// sandboxes of lost nodes that an event was delivered to.
const orphanInterval = 2 * time.Second

// place picks the node to start or resume a sandbox of image imageID on:
// among the live, active nodes, one that has the image unpacked, then the
// one with the most free memory; this node when it is one of the best, or
// when no record says better. It returns the node's name.
func (e *Engine) place(ctx context.Context, imageID string) (string, error) {
	cl, ok := e.st.(store.Cluster)
	if !ok || e.cfg.Node == "" {
		return e.cfg.Node, nil
	}
	recs, err := cl.ListNodes(ctx)
	if err != nil {
		return "", err
	}
	return placeOn(recs, imageID, e.cfg.Node), nil
}

// placeOn is place's rule over the node records: live and active nodes;
// those with imageID unpacked first; then the most free memory; ties go to
// self, then by name.
func placeOn(nodes []*store.Node, imageID, self string) string {
	best := self
	var bestN *store.Node
	for _, n := range nodes {
		if n.Name == self {
			bestN = n
		}
	}
	better := func(a, b *store.Node) bool { // a better than b
		if b == nil {
			return true
		}
		ai, bi := slices.Contains(a.Capacity.Images, imageID), slices.Contains(b.Capacity.Images, imageID)
		if ai != bi {
			return ai
		}
		return a.Capacity.FreeMemoryBytes > b.Capacity.FreeMemoryBytes
	}
	if bestN != nil && (!bestN.Live || bestN.State != api.NodeActive) {
		bestN, best = nil, ""
	}
	for _, n := range nodes {
		if !n.Live || n.State != api.NodeActive || n.Name == self {
			continue
		}
		if better(n, bestN) {
			bestN, best = n, n.Name
		}
	}
	if best == "" {
		return self
	}
	return best
}

// wakeOrphans wakes, on a placed node, each suspended sandbox of a lost
// node that was delivered an event after it suspended (its node would
// have woken it); the duty holder does it, every orphanInterval.
func (e *Engine) wakeOrphansLoop(cl store.Cluster) {
	defer e.bg.Done()
	tick := time.NewTicker(orphanInterval)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		if e.holdsDuty(e.ctx) {
			e.wakeOrphans(e.ctx, cl)
		}
	}
}

func (e *Engine) wakeOrphans(ctx context.Context, cl store.Cluster) {
	nodes, err := cl.ListNodes(ctx)
	if err != nil {
		return
	}
	for _, n := range nodes {
		if n.Live {
			continue
		}
		sbs, err := e.st.ListSandboxes(ctx, store.SandboxFilter{Node: n.Name})
		if err != nil {
			return
		}
		for _, sb := range sbs {
			if sb.State != api.StateSuspended || sb.WakeOn == "" || !e.deliveredSince(ctx, sb) {
				continue
			}
			to := placeOn(nodes, sb.ImageID, e.cfg.Node)
			e.log.Info("waking a sandbox of a lost node", "sandbox", sb.Name, "lost_node", n.Name, "on", to)
			if to == e.cfg.Node {
				e.resumeAsync(sb.ID, "event for a sandbox of lost node "+n.Name)
			} else if err := cl.NotifyWake(ctx, to, sb.ID); err != nil {
				e.log.Warn("wake a sandbox of a lost node", "sandbox", sb.Name, "on", to, "err", err)
			}
		}
	}
}

// deliveredSince reports whether suspended sb was delivered an event
// after it suspended.
func (e *Engine) deliveredSince(ctx context.Context, sb *store.Sandbox) bool {
	evs, err := e.st.ListEvents(ctx, store.EventQuery{SandboxID: sb.ID})
	if err != nil {
		return false
	}
	for _, ev := range evs {
		if !ev.DeliverTime.IsZero() && !ev.DeliverTime.Before(sb.SuspendTime) {
			return true
		}
	}
	return false
}

// claim takes suspended sb for this node before it resumes it here: its
// own node takes it; another node only when sb's node is not live (read
// now, not from the cache), and then only if no node took it since sb was
// read (store.Cluster.ClaimSandbox). So of nodes racing to resume it, one
// goes on; the others get ErrConflict.
func (e *Engine) claim(ctx context.Context, cl store.Cluster, sb *store.Sandbox) error {
	if sb.Node != "" && sb.Node != e.cfg.Node {
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Name == sb.Node && n.Live {
				return errdefs.Conflictf("sandbox %s belongs to node %s, which is live: it resumes there", sb.Name, sb.Node)
			}
		}
	}
	return cl.ClaimSandbox(ctx, sb, e.cfg.Node)
}
