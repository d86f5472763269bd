package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
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

// capacityTTL is how long placement uses a reading of this node's
// capacity (placementCapacity): a burst of creates does not list images,
// stat each and query usage once each.
const capacityTTL = time.Second

// capacityCache is this node's last capacity reading for placement.
type capacityCache struct {
	mu sync.Mutex
	at time.Time
	c  api.NodeCapacity
}

// placementCapacity is NodeCapacity as read at most capacityTTL ago
// (the other nodes' are as of their last heartbeat, a quarter lease ago
// at most).
func (e *Engine) placementCapacity(ctx context.Context) api.NodeCapacity {
	c := &e.capCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > capacityTTL {
		c.c, c.at = e.NodeCapacity(ctx), time.Now()
	}
	return c.c
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
		switch {
		case node.Self:
			// The answering node's capacity as of now, not as of its
			// last heartbeat.
			node.Capacity = e.NodeCapacity(ctx)
		case !n.Live:
			// Its last heartbeat's count is stale: its sandboxes may
			// have been recovered elsewhere or deleted since. The
			// records that still name it (what RemoveNode waits for).
			if u, err := e.st.SandboxUsage(ctx, n.Name); err == nil {
				node.Capacity.Sandboxes = u.Count
			}
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
	return e.route(ctx, idOrName, false)
}

// RouteDelete is Route for a delete of the sandbox: one whose node is not
// live is deleted by this node (its record, and whatever this host has of
// it; what its node's host has goes when that node is back, with the
// orphans its reconcile removes), so that a node that will not come back
// leaves no sandbox that cannot be deleted, nor a record that cannot be
// removed (RemoveNode).
func (e *Engine) RouteDelete(ctx context.Context, idOrName string) (string, error) {
	return e.route(ctx, idOrName, true)
}

func (e *Engine) route(ctx context.Context, idOrName string, del bool) (string, error) {
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
	case suspended && n != nil && n.State == api.NodeDraining:
		// A draining node wakes nothing: this one does.
		return "", nil
	case n == nil || !n.Live:
		if suspended || del {
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
// least loaded (fewest sandboxes), then the one with the most free memory;
// this node when it is one of the best, or when no record says better. It
// returns the node's name.
func (e *Engine) place(ctx context.Context, imageID string) (string, error) {
	cl, ok := e.st.(store.Cluster)
	if !ok || e.cfg.Node == "" {
		return e.cfg.Node, nil
	}
	recs, err := cl.ListNodes(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range recs {
		if n.Name == e.cfg.Node {
			// This node's capacity as of now (a second at most), not of
			// its last heartbeat.
			n.Capacity = e.placementCapacity(ctx)
		}
	}
	_, shared := e.distributesImages()
	return placeOn(recs, imageID, e.cfg.Node, !shared), nil
}

// placeOn is place's rule over the node records: live and active nodes
// (only those with imageID unpacked when needImage: images do not travel
// between the nodes); those with imageID unpacked first; then the fewest
// sandboxes; then the most free memory; ties go to self, then by name.
func placeOn(nodes []*store.Node, imageID, self string, needImage bool) string {
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
		if a.Capacity.Sandboxes != b.Capacity.Sandboxes {
			return a.Capacity.Sandboxes < b.Capacity.Sandboxes
		}
		return a.Capacity.FreeMemoryBytes > b.Capacity.FreeMemoryBytes
	}
	if bestN != nil && (!bestN.Live || bestN.State != api.NodeActive || (needImage && !slices.Contains(bestN.Capacity.Images, imageID))) {
		bestN, best = nil, ""
	}
	for _, n := range nodes {
		if !n.Live || n.State != api.NodeActive || n.Name == self || (needImage && !slices.Contains(n.Capacity.Images, imageID)) {
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

// wakeLoop makes sure that suspended sandboxes that were delivered an
// event wake, whatever was lost on the way (a wake sent to a node that
// died, a crash between an event and its wake): every orphanInterval the
// duty holder wakes, on a placed node, those of lost nodes; every
// ownWakeInterval each node wakes its own (wake, which places them
// elsewhere while it drains).
func (e *Engine) wakeLoop(cl store.Cluster) {
	defer e.bg.Done()
	n := 0
	e.every(orphanInterval, roundBound, func(ctx context.Context) {
		n++
		if _, shared := e.distributesImages(); shared && e.holdsDuty(ctx) {
			e.wakeOrphans(ctx, cl)
		}
		if n%int(ownWakeInterval/orphanInterval) == 0 {
			e.wakeDelivered(ctx)
		}
	})
}

// ownWakeInterval is how often a node looks for its own suspended
// sandboxes that an event reached and that still sleep.
const ownWakeInterval = 10 * time.Second

// every calls fn every interval until the engine closes, each time with
// a context that ends with the engine or after bound: a round waits on
// nothing for ever (a database that takes connections and never answers,
// say), and the next round tries again.
func (e *Engine) every(interval, bound time.Duration, fn func(ctx context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(e.ctx, bound)
		fn(ctx)
		cancel()
	}
}

// roundBound bounds a background round of database calls and wakes
// (every).
const roundBound = time.Minute

// captureRoundBound bounds a background round that may capture a sandbox
// (a drain's suspend, a recovery snapshot): a capture's own limit, and
// time to store what it took.
func (e *Engine) captureRoundBound() time.Duration { return e.cfg.CaptureTimeout + 5*time.Minute }

// wakeOrphans is the duty holder's round over the nodes that are not
// live: it wakes, on placed nodes, their suspended sandboxes that an
// event reached or that were recovered (recovery.go) and still sleep,
// and recovers the running sandboxes of those that are lost
// (recoverLost).
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
		if n.State == api.NodeLost {
			e.recoverLost(ctx, cl, n.Name, sbs)
		}
		for _, sb := range sbs {
			if sb.State != api.StateSuspended || !(recovered(sb) || (sb.WakeOn != "" && e.deliveredSince(ctx, sb))) || !e.wakeDue(sb.ID) {
				continue
			}
			to := placeOn(nodes, sb.ImageID, e.cfg.Node, false)
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
// own node takes it; another node only when sb's node is not live or
// drains (read now, not from the cache), and then only if no node took
// it since sb was read (store.Cluster.ClaimSandbox). So of nodes racing to resume it, one
// goes on; the others get ErrConflict.
func (e *Engine) claim(ctx context.Context, cl store.Cluster, sb *store.Sandbox) error {
	if sb.Node != "" && sb.Node != e.cfg.Node {
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Name == sb.Node && n.Live && n.State != api.NodeDraining {
				return errdefs.Conflictf("sandbox %s belongs to node %s, which is live: it resumes there", sb.Name, sb.Node)
			}
		}
		if !movable(sb) {
			return errdefs.New(errdefs.ErrUnavailable,
				"sandbox %s cannot move from node %s (a volume, or secrets sealed with that node's own key): it resumes when that node is back", sb.Name, sb.Node)
		}
		// The lost node may have been in the middle of an operation on
		// it: this node takes its journal entries on it over. A resume it
		// had begun may run on in its runsc sandbox, which outlives its
		// sbxd: fencing stops it if the node comes back (its writes are
		// refused, and its reconcile and fence check stop what another
		// node owns).
		// (A suspend completes only for a running sandbox: this one is
		// suspended, so nothing completes here.)
		if _, _, err := e.takeOverOps(ctx, sb); err != nil {
			return err
		}
	}
	return cl.ClaimSandbox(ctx, sb, e.cfg.Node)
}

// drainInterval is how often a node checks whether it drains, and moves
// what it still runs.
const drainInterval = time.Second

// DrainNode marks node name draining (drain) or active again: a draining
// node takes no new sandboxes (placement skips it) and moves each sandbox
// it runs to another node, with its processes (a suspend there, a resume
// elsewhere). Its record is answered. Errors: ErrForbidden for a tenant
// key; ErrInvalidArgument on a single sbxd (no other node to move to) or
// in a cluster whose nodes do not share a blob store (nothing can move);
// ErrNotFound (no such node); the store's.
func (e *Engine) DrainNode(ctx context.Context, name string, drain bool) (*api.Node, error) {
	if !CallerOf(ctx).Admin {
		return nil, errdefs.New(errdefs.ErrForbidden, "nodes are the operator's: only an admin key may drain one")
	}
	cl, ok := e.st.(store.Cluster)
	if !ok || e.cfg.Node == "" {
		return nil, errdefs.Invalid("node", "this sbxd is not a cluster's node (its store is not PostgreSQL): there is no other node to drain to")
	}
	if _, shared := e.distributesImages(); !shared && drain {
		return nil, errdefs.Invalid("node", "a drain moves sandboxes through a blob store the nodes share, and this cluster's nodes each keep their own (sbxd --blob-store)")
	}
	if err := cl.SetNodeDraining(ctx, name, drain); err != nil {
		return nil, err
	}
	e.nodes.mu.Lock()
	e.nodes.at = time.Time{} // read the change at once
	e.nodes.mu.Unlock()
	nodes, err := e.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i], nil
		}
	}
	return nil, errdefs.New(errdefs.ErrNotFound, "no node named %q", name)
}

// RemoveNode deletes the record of node name, which will not come back,
// with its journal entries, so that it is listed no more. Errors:
// ErrForbidden for a tenant key; ErrInvalidArgument on a single sbxd;
// ErrNotFound; ErrConflict when it is live or sandboxes still name it
// (store.Cluster.RemoveNode).
func (e *Engine) RemoveNode(ctx context.Context, name string) error {
	if !CallerOf(ctx).Admin {
		return errdefs.New(errdefs.ErrForbidden, "nodes are the operator's: only an admin key may remove one")
	}
	cl, ok := e.st.(store.Cluster)
	if !ok || e.cfg.Node == "" {
		return errdefs.Invalid("node", "this sbxd is not a cluster's node (its store is not PostgreSQL): it has no node records")
	}
	if name == e.cfg.Node {
		return errdefs.Conflictf("node %s is the one answering: it is live", name)
	}
	if err := cl.RemoveNode(ctx, name); err != nil {
		return err
	}
	e.nodes.mu.Lock()
	e.nodes.at = time.Time{}
	e.nodes.mu.Unlock()
	e.log.Info("removed a node's record", "node", name)
	return nil
}

// drainLoop moves this node's running sandboxes away while it drains.
func (e *Engine) drainLoop(cl store.Cluster) {
	defer e.bg.Done()
	e.every(drainInterval, e.captureRoundBound(), func(ctx context.Context) {
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return
		}
		for _, n := range nodes {
			if n.Name == e.cfg.Node && n.State == api.NodeDraining {
				e.drainOnce(ctx, cl, nodes)
			}
		}
	})
}

// movable reports whether sb can move to another node: not with a volume
// (a directory of this host), nor with secrets sealed with this node's
// key, which the other nodes do not have (secretsStay; those sealed with
// the cluster's key move).
func movable(sb *store.Sandbox) bool {
	return len(sb.Volumes) == 0 && !secretsStay(sb.Secrets)
}

// drainOnce moves each running sandbox of this node to the node placement
// picks: it suspends it here (durably: memory and image in the blob
// store) and asks that node to wake it. A sandbox that cannot move
// (movable) stays; one whose lock another operation holds waits for the
// next round; none moves while no other node can take it.
func (e *Engine) drainOnce(ctx context.Context, cl store.Cluster, nodes []*store.Node) {
	sbs, err := e.localSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return
	}
	for _, sb := range sbs {
		if sb.State != api.StateRunning || !movable(sb) {
			continue
		}
		to := placeOn(nodes, sb.ImageID, e.cfg.Node, false)
		if to == e.cfg.Node {
			e.log.Warn("drain: no other live, active node to move to", "sandbox", sb.Name)
			return
		}
		unlock, err := e.lockID(ctx, sb.ID, sb.Name, "suspend", lockOrConflict)
		if err != nil {
			continue
		}
		cur, err := e.st.GetSandbox(ctx, sb.ID)
		if err != nil || cur.State != api.StateRunning || cur.Node != e.cfg.Node {
			unlock()
			continue
		}
		e.log.Info("drain: moving a sandbox", "sandbox", sb.Name, "to", to)
		// The move is an event on a key of its own, posted before the
		// suspend: the suspend takes it and wakes the sandbox on a placed
		// node (wake), and whatever is lost on the way (a crash of this
		// node, a target that dies) is found again by wakeLoop, so the
		// sandbox does not stay suspended.
		key := "sbx.drain." + sb.ID
		now := time.Now().UTC()
		ev := &store.Event{ID: newEventID(), Key: key, Data: []byte("moved by a drain of node " + e.cfg.Node),
			ContentType: "text/plain", CreateTime: now, ExpireTime: now.Add(DefaultEventRetention)}
		if err := e.st.AddEvent(ctx, ev); err != nil {
			unlock()
			continue
		}
		_, err = e.suspendLocked(ctx, cur, key, "", nil)
		unlock()
		if err != nil {
			_, _ = e.st.DeletePendingEvents(ctx, key, nil)
			e.log.Warn("drain: suspend", "sandbox", sb.Name, "err", err)
		}
	}
}

// PlaceCreate says where a create of a sandbox of image (its name, ""
// the default image) goes: "" for this node, else the URL of the node
// placement picks (place). An image the caller cannot see, or that does
// not exist yet (the default image, built on first use), is created here,
// where the create answers for it.
func (e *Engine) PlaceCreate(ctx context.Context, image string) (string, error) {
	if e.cfg.Node == "" {
		return "", nil
	}
	if image == "" {
		image = disk.DefaultImage
	}
	img, err := e.GetImage(ctx, image)
	if err != nil {
		return "", nil
	}
	to, err := e.place(ctx, img.ID)
	if err != nil || to == e.cfg.Node || to == "" {
		return "", err
	}
	n, err := e.node(ctx, to)
	if err != nil || n == nil || n.URL == "" {
		return "", err
	}
	return n.URL, nil
}

// FenceCheck stops what this node runs but no longer owns: each container
// whose record is gone, or names another node (another node took the
// sandbox over while this one could not reach the database), or says it is
// suspended (the duty holder recorded it suspended on its recovery point,
// to be recovered elsewhere, while this node's lease had run out). It is
// called when the node's heartbeat succeeds again after failing. A sandbox
// that an operation here holds is left for the next check.
func (e *Engine) FenceCheck(ctx context.Context) {
	if e.cfg.Node == "" {
		return
	}
	conts, err := e.rt.List(ctx)
	if err != nil {
		e.log.Warn("fence check: list containers", "err", err)
		return
	}
	for _, c := range conts {
		sb, err := e.st.GetSandbox(ctx, c.ID)
		switch {
		case errdefs.IsNotFound(err):
		case err != nil:
			continue
		case sb.Node == e.cfg.Node && sb.State == api.StateSuspended:
			unlock, err := e.lockID(ctx, sb.ID, sb.Name, "fence", lockOrConflict)
			if err != nil {
				continue
			}
			// Read again under the lock: a suspend or resume here may
			// have just ended.
			if cur, err := e.st.GetSandbox(ctx, sb.ID); err == nil && cur.State == api.StateSuspended && cur.Node == e.cfg.Node {
				e.log.Warn("fenced: stopping a sandbox recorded suspended while this node's lease had run out", "sandbox", sb.Name, "id", sb.ID, "reason", cur.StateReason)
				e.unwatch(sb.ID)
				e.dropAgent(sb.ID)
				if err := e.dropSuspendedHost(ctx, sb.ID); err != nil {
					e.log.Warn("fence check: stop", "sandbox", sb.Name, "err", err)
				}
				e.forgetInstance(sb.ID)
			}
			unlock()
			continue
		case sb.Node == e.cfg.Node:
			continue
		}
		name := c.ID
		if sb != nil {
			name = sb.Name
		}
		unlock, err := e.lockID(ctx, c.ID, name, "fence", lockOrConflict)
		if err != nil {
			continue
		}
		if sb != nil {
			e.log.Warn("fenced: stopping a sandbox that another node took over", "sandbox", sb.Name, "id", sb.ID, "owner", sb.Node)
		} else {
			e.log.Warn("fenced: stopping a sandbox whose record is gone", "id", c.ID)
		}
		e.removeAll(ctx, c.ID)
		e.forgetInstance(c.ID)
		unlock()
	}
}

// Peers reaches the other nodes of a cluster. internal/server implements
// it over their HTTP API: each call goes as ctx's caller, with the cluster
// key, and is never forwarded again.
type Peers interface {
	// CreateSandbox makes a sandbox on the node at url (POST
	// /v1/sandboxes, req as given) and returns its id. Errors: the
	// node's answer (its code and message), or ErrUnavailable when it
	// does not answer.
	CreateSandbox(ctx context.Context, url string, req api.CreateSandboxRequest) (string, error)
}

// SetPeers gives the engine its way to other nodes (Peers); until then,
// and on a single sbxd, everything runs on this node.
func (e *Engine) SetPeers(p Peers) { e.peers = p }

// placeCopies says where each of n copies of sb goes (a fork): node
// names, this node's for the copies that stay. Each copy counts as a
// sandbox on its node for the next one's placement, so copies spread
// while nodes are alike. All stay here on a single sbxd, without Peers,
// where images do not travel (no shared blob store), and for a sandbox
// that cannot move (movable).
func (e *Engine) placeCopies(ctx context.Context, sb *store.Sandbox, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = e.cfg.Node
	}
	cl, shared := e.distributesImages()
	if !shared || e.peers == nil || !movable(sb) {
		return out
	}
	imageID := sb.ImageID
	recs, err := cl.ListNodes(ctx)
	if err != nil {
		return out
	}
	for _, r := range recs {
		if r.Name == e.cfg.Node {
			r.Capacity = e.placementCapacity(ctx)
		}
	}
	for i := range out {
		to := placeOn(recs, imageID, e.cfg.Node, false)
		out[i] = to
		for _, r := range recs {
			if r.Name == to {
				r.Capacity.Sandboxes++
			}
		}
	}
	return out
}

// PlaceStart says where a start from snapshot snapID (a create with
// snapshot) goes: "" for this node, else the URL of another node. A
// snapshot whose memory image is in the shared blob store is placed as a
// create of its image is. One whose image is still only on the node that
// took it (stored in the background, hot.go), or that holds secrets
// (sealed with that node's key), starts on the node of the sandbox it was
// taken of, while that node is live. A snapshot the caller cannot see is
// answered here.
func (e *Engine) PlaceStart(ctx context.Context, snapID string) (string, error) {
	if e.cfg.Node == "" {
		return "", nil
	}
	sn, err := e.GetSnapshot(ctx, snapID)
	if err != nil {
		return "", nil
	}
	var sh sandboxShape
	_ = json.Unmarshal(sn.Shape, &sh)
	to := ""
	if _, shared := e.distributesImages(); shared && !pendingHot(sn) && !secretsStay(sh.Secrets) {
		if to, err = e.place(ctx, sn.ImageID); err != nil {
			return "", err
		}
	} else if src, err := e.st.GetSandbox(ctx, sn.SandboxID); err == nil && src.State != api.StateSuspended {
		to = src.Node
	}
	if to == "" || to == e.cfg.Node {
		return "", nil
	}
	n, err := e.node(ctx, to)
	if err != nil || n == nil || !n.Live || n.URL == "" {
		return "", err
	}
	return n.URL, nil
}
