package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// check checks the invariants with the agents held: the sandboxes,
// checkpoints and snapshots listed against what the agents did, and the
// host against the sandboxes listed.
func (s *soak) check(ctx context.Context, label string) {
	s.mu.Lock()
	s.checks++
	s.mu.Unlock()
	start := time.Now()
	list, err := s.c.Sandboxes.List(ctx, nil)
	if err != nil {
		s.violation("%s: list sandboxes: %v", label, err)
		return
	}
	byName := map[string]*client.Sandbox{}
	for _, sb := range list {
		byName[sb.Name] = sb
		switch sb.State {
		case api.StateCreating, api.StateDeleting, api.StatePaused:
			s.violation("%s: sandbox %s is listed %s with nothing in progress (half-made)", label, sb.Name, sb.State)
		}
	}
	owned := map[string]bool{}
	for _, a := range s.agents {
		for _, b := range a.boxes {
			owned[b.name] = true
		}
	}
	for _, sb := range list {
		if !owned[sb.Name] {
			s.violation("%s: sandbox %s (%s, %s) is listed, but no create or fork that answered or was cut made it", label, sb.Name, sb.ID, sb.State)
		}
	}
	snaps, err := s.c.Snapshots.List(ctx, "")
	if err != nil {
		s.violation("%s: list snapshots: %v", label, err)
	}
	for _, a := range s.agents {
		s.resync(ctx, label, a, byName, snaps)
	}
	// The resync may have booted or woken sandboxes: list again.
	if list, err = s.c.Sandboxes.List(ctx, nil); err != nil {
		s.violation("%s: list sandboxes: %v", label, err)
		return
	}
	s.checkHost(ctx, label, list)
	s.checkLog(label)
	s.logf("%s: checked in %.1fs", label, time.Since(start).Seconds())
}

// resync settles what kills left uncertain in agent a's model against
// what sbxd lists, and checks each sandbox's checkpoints.
func (s *soak) resync(ctx context.Context, label string, a *soakAgent, byName map[string]*client.Sandbox, snaps []api.Snapshot) {
	for _, b := range append([]*soakBox(nil), a.boxes...) {
		sb := byName[b.name]
		switch {
		case b.pending == "create":
			if sb == nil {
				a.forget(b)
				continue
			}
			// Made after all: read its disk back (a copy's is its
			// source's as the fork found it).
			b.sb, b.created = sb, true
			b.pending = "exec"
		case b.pending == "delete":
			if sb == nil {
				a.forget(b)
				continue
			}
			b.pending = ""
		case sb == nil:
			s.violation("%s: sandbox %s (%s) is gone, but no delete was asked", label, b.name, b.sb.ID)
			a.forget(b)
			continue
		}
		b.sb = sb
		b.suspended = sb.State == api.StateSuspended
		if b.pending == "suspend" || b.pending == "resume" {
			b.pending = ""
		}
		s.checkCheckpoints(ctx, label, b)
		switch b.pending {
		case "exec", "restore":
			rctx, cancel := context.WithTimeout(ctx, s.o.deadline)
			seen, err := a.readMarkers(rctx, b)
			cancel()
			if err != nil {
				s.violation("%s: sandbox %s: reading its files: %v", label, b.name, err)
				break
			}
			p := b.live.mismatch(seen)
			if b.pending == "restore" && p != "" {
				if q := b.pendingMarkers.mismatch(seen); q == "" {
					p = ""
				} else {
					p = "neither the disk before the restore (" + p + ") nor the checkpoint's (" + q + ")"
				}
			}
			if p != "" {
				s.violation("%s: sandbox %s after a %s cut by the kill: %s", label, b.name, b.pending, p)
			}
			b.live = markers{}
			for n := range seen {
				b.live[n] = true
			}
			b.suspended = false
		}
		b.pending, b.pendingMarkers = "", nil
	}
	// Snapshots: each one taken is listed; one a kill cut short may be.
	listed := map[string]api.Snapshot{}
	for _, sn := range snaps {
		listed[sn.ID] = sn
	}
	known := map[string]bool{}
	var keep []*soakSnap
	for _, sn := range a.snaps {
		known[sn.id] = true
		if _, ok := listed[sn.id]; !ok && sn.deleting {
			continue // its delete, cut by the kill, was done
		} else if !ok {
			s.violation("%s: snapshot %s of %s (agent %d) is not listed, and nothing deleted it", label, sn.id, sn.from, a.n)
			continue
		}
		sn.deleting = false
		keep = append(keep, sn)
	}
	a.snaps = keep
	if p := a.pending; p != nil {
		for _, sn := range snaps {
			if sn.Sandbox == p.from && sn.Billable && !known[sn.ID] {
				p.id = sn.ID
				a.snaps = append(a.snaps, p)
				break
			}
		}
		a.pending = nil
	}
}

// cpNumber orders checkpoint ids ("v12" → 12).
func cpNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "v"))
	return n
}

// checkCheckpoints checks b's checkpoints: each one that answered is
// listed and verifies, a new one is there only after a checkpoint a kill
// cut short, and each holds the markers written before it (a diff from
// v0, once per checkpoint).
func (s *soak) checkCheckpoints(ctx context.Context, label string, b *soakBox) {
	cps, err := b.sb.ListCheckpoints(ctx)
	if err != nil {
		s.violation("%s: sandbox %s: list checkpoints: %v", label, b.name, err)
		return
	}
	listed := map[string]bool{}
	for _, cp := range cps {
		listed[cp.ID] = true
		if _, ok := b.cps[cp.ID]; ok {
			continue
		}
		if b.pending == "checkpoint" && b.pendingMarkers != nil {
			b.cps[cp.ID] = b.pendingMarkers
			b.pendingMarkers = nil
			continue
		}
		s.violation("%s: sandbox %s lists checkpoint %s, which no checkpoint call made", label, b.name, cp.ID)
	}
	for id := range b.cps {
		if !listed[id] {
			s.violation("%s: sandbox %s: checkpoint %s answered complete, but is not listed", label, b.name, id)
			delete(b.cps, id)
		}
	}
	ids := make([]string, 0, len(b.cps))
	for id := range b.cps {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return cpNumber(ids[i]) < cpNumber(ids[j]) })
	for _, id := range ids {
		cp, err := b.sb.GetCheckpoint(ctx, id, true)
		if err != nil {
			s.violation("%s: sandbox %s: verify checkpoint %s: %v", label, b.name, id, err)
			continue
		}
		if cp.Health != api.HealthOK {
			s.violation("%s: sandbox %s: checkpoint %s verifies %q", label, b.name, id, cp.Health)
			continue
		}
		if id == "v0" || b.diffed[id] {
			continue
		}
		d, err := b.sb.DiffN(ctx, "v0", id, 100000)
		if err != nil {
			s.violation("%s: sandbox %s: diff v0 → %s: %v", label, b.name, id, err)
			continue
		}
		if p := diffMismatch(b.cps["v0"], b.cps[id], d); p != "" {
			s.violation("%s: sandbox %s: checkpoint %s does not hold what was written before it: %s", label, b.name, id, p)
		}
		b.diffed[id] = true
	}
}

// diffMismatch compares a diff v0 → vK with the markers the agent had
// written at v0 and at vK ("" when they agree). Sizes are checked; the
// content itself is read back after restores.
func diffMismatch(v0, vk markers, d *api.Diff) string {
	prefix := markerDir + "/m-"
	added, deleted := map[string]int64{}, map[string]bool{}
	for _, c := range append(append([]api.Change(nil), d.Added...), d.Modified...) {
		if strings.HasPrefix(c.Path, prefix) {
			added[strings.TrimPrefix(c.Path, markerDir+"/")] = c.Size
		}
	}
	for _, c := range d.Deleted {
		if strings.HasPrefix(c.Path, prefix) {
			deleted[strings.TrimPrefix(c.Path, markerDir+"/")] = true
		}
	}
	var probs []string
	for n, sure := range vk {
		if _, was := v0[n]; was {
			continue
		}
		size, ok := added[n]
		switch {
		case !ok && sure:
			probs = append(probs, "missing "+n)
		case ok && size != int64(len(markerContent(n))):
			probs = append(probs, fmt.Sprintf("%s has %d bytes, not %d", n, size, len(markerContent(n))))
		}
	}
	for n := range added {
		if _, ok := vk[n]; !ok {
			probs = append(probs, "unexpected "+n)
		}
	}
	for n, sure := range v0 {
		_, kept := vk[n]
		if !kept && sure && !deleted[n] {
			probs = append(probs, "still has "+n+", deleted before")
		}
		if kept && vk[n] && v0[n] && deleted[n] {
			probs = append(probs, "lost "+n)
		}
	}
	if d.Truncated {
		probs = append(probs, "the diff was truncated")
	}
	sort.Strings(probs)
	if len(probs) > 6 {
		probs = append(probs[:6], fmt.Sprintf("and %d more", len(probs)-6))
	}
	return strings.Join(probs, ", ")
}

var sandboxIDRe = regexp.MustCompile(`sbx_[0-9a-f]{16}`)

// hostView is what the host holds of sbxd's sandboxes, by sandbox id
// (or "?"+interface suffix when no id matches a truncated name).
type hostView struct {
	things map[string][]string
	runsc  map[string]string // container status by id
}

func (h *hostView) add(id, what string) { h.things[id] = append(h.things[id], what) }

// inspectHost lists what the host holds of the soak's sbxd: runsc
// containers and processes, mounts, network namespaces, veths, nftables
// chains, layer and sandbox directories.
func (s *soak) inspectHost(ctx context.Context) (*hostView, error) {
	h := &hostView{things: map[string][]string{}, runsc: map[string]string{}}
	root := filepath.Join(s.d.dataDir, "runsc")
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	out, err := exec.CommandContext(rctx, s.o.runsc, "--root", root, "list", "--format=json").Output()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("runsc list: %w", err)
	}
	var conts []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if t := strings.TrimSpace(string(out)); t != "" && t != "null" {
		if err := json.Unmarshal(out, &conts); err != nil {
			return nil, fmt.Errorf("runsc list: %w", err)
		}
	}
	for _, c := range conts {
		h.runsc[c.ID] = c.Status
		h.add(c.ID, "runsc container ("+c.Status+")")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !strings.Contains(filepath.Base(args[0]), "runsc") || !strings.Contains(string(b), s.d.dataDir) {
			continue
		}
		pid := filepath.Base(filepath.Dir(p))
		id := ""
		for i := len(args) - 1; i >= 0 && id == ""; i-- {
			id = sandboxIDRe.FindString(args[i])
		}
		if id == "" {
			id = "?runsc"
		}
		h.add(id, fmt.Sprintf("process %s (%s)", pid, filepath.Base(args[0])))
	}
	if des, err := os.ReadDir(s.d.netnsDir); err == nil {
		for _, de := range des {
			if id, ok := strings.CutPrefix(de.Name(), "sbx-"); ok {
				h.add(id, "netns "+de.Name())
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			mp := f[4]
			if !strings.HasPrefix(mp, s.d.dataDir+"/") && !strings.HasPrefix(mp, s.d.netnsDir+"/") {
				continue
			}
			if id := sandboxIDRe.FindString(mp); id != "" {
				h.add(id, "mount "+mp)
			}
		}
	}
	for _, sub := range []string{"layers", "sandboxes"} {
		des, _ := os.ReadDir(filepath.Join(s.d.dataDir, sub))
		for _, de := range des {
			if sandboxIDRe.MatchString(de.Name()) {
				h.add(de.Name(), sub+"/"+de.Name())
			}
		}
	}
	// Interfaces and chains name a sandbox by a prefix of its id.
	ids := make([]string, 0, len(h.things))
	for id := range h.things {
		ids = append(ids, id)
	}
	resolve := func(short string) string {
		for _, id := range ids {
			if strings.HasPrefix(strings.TrimPrefix(id, "sbx_"), short) {
				return id
			}
		}
		return "?" + short
	}
	links, err := linkList()
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if short, ok := strings.CutPrefix(l.Attrs().Name, s.d.netTag+"-"); ok {
			h.add(resolve(short), "interface "+l.Attrs().Name)
		}
	}
	if c, err := nftables.New(); err == nil {
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			return nil, err
		}
		for _, ch := range chains {
			if ch.Table.Name != s.d.netTag {
				continue
			}
			_, rest, ok := strings.Cut(ch.Name, "-")
			if !ok {
				continue
			}
			if short, ok := strings.CutPrefix(rest, s.d.netTag+"-"); ok {
				h.add(resolve(short), "nftables chain "+ch.Name)
			}
		}
	}
	return h, nil
}

// nftTables is the set of nftables table names of the inet family.
func nftTables() map[string]bool {
	out := map[string]bool{}
	c, err := nftables.New()
	if err != nil {
		return out
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return out
	}
	for _, t := range ts {
		out[t.Name] = true
	}
	return out
}

// checkHost checks the host against the sandboxes listed: nothing is left
// of a sandbox that does not exist (beyond the warm pool's), a running
// sandbox is running (not paused) in runsc, a stopped or suspended one
// holds no runsc container, process, namespace or interface.
func (s *soak) checkHost(ctx context.Context, label string, list []*client.Sandbox) {
	// Let the warm pool fill, so that what it holds is counted.
	warm := 0
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if hh, err := s.c.Health(ctx); err == nil {
			warm = hh.WarmSandboxes
			if warm >= s.o.pool {
				break
			}
		}
	}
	h, err := s.inspectHost(ctx)
	if err != nil {
		s.violation("%s: inspect the host: %v", label, err)
		return
	}
	known := map[string]*client.Sandbox{}
	for _, sb := range list {
		known[sb.ID] = sb
	}
	var unknown []string
	for id, things := range h.things {
		if known[id] == nil {
			sort.Strings(things)
			unknown = append(unknown, id+": "+strings.Join(things, ", "))
		}
	}
	sort.Strings(unknown)
	if len(unknown) > warm {
		s.violation("%s: the host holds %d sandboxes that are not listed, and the warm pool has %d: %s",
			label, len(unknown), warm, strings.Join(unknown, "; "))
	}
	for _, sb := range list {
		st, has := h.runsc[sb.ID]
		switch sb.State {
		case api.StateRunning:
			if st == "paused" {
				s.violation("%s: sandbox %s is listed running, but runsc has it paused", label, sb.Name)
			} else if st != "running" {
				s.violation("%s: sandbox %s is listed running, but runsc has it %q", label, sb.Name, st)
			}
		case api.StateStopped, api.StateSuspended:
			var held []string
			for _, t := range h.things[sb.ID] {
				if strings.HasPrefix(t, "process") || strings.HasPrefix(t, "netns") || strings.HasPrefix(t, "interface") {
					held = append(held, t)
				}
			}
			if has {
				held = append(held, "runsc container ("+st+")")
			}
			if len(held) > 0 {
				s.violation("%s: sandbox %s is %s, but holds %s", label, sb.Name, sb.State, strings.Join(held, ", "))
			}
		}
	}
}

// checkLog looks for a panic in what sbxd logged since the last check.
func (s *soak) checkLog(label string) {
	b, err := os.ReadFile(s.d.logPath)
	if err != nil {
		return
	}
	s.mu.Lock()
	off := s.logOffset
	s.logOffset = len(b)
	s.mu.Unlock()
	if off > len(b) {
		off = 0
	}
	for _, needle := range []string{"panic:", "fatal error:", "DATA RACE"} {
		if i := strings.Index(string(b[off:]), needle); i >= 0 {
			s.violation("%s: sbxd's log has %q: %s", label, needle, trunc(string(b[off+i:]), 600))
		}
	}
}

// finalContent reads back real content: each sandbox's newest checkpoint
// is restored and its files read; a sandbox is started from each snapshot
// the agents kept and its files read, then deleted.
func (s *soak) finalContent(ctx context.Context) {
	for _, a := range s.agents {
		for _, b := range a.boxes {
			if !b.created || len(b.cps) < 2 {
				continue
			}
			newest := "v0"
			for id := range b.cps {
				if cpNumber(id) > cpNumber(newest) {
					newest = id
				}
			}
			if b.suspended {
				// A suspended sandbox's disk is restored once it runs.
				if out, err := a.do(ctx, "resume", b.name, func(ctx context.Context) error { return b.sb.Resume(ctx) }); out != outOK {
					s.violation("final check: resume %s: %v", b.name, err)
					continue
				}
				b.suspended = false
			}
			if out, err := a.do(ctx, "restore", b.name+" "+newest, func(ctx context.Context) error { return b.sb.Restore(ctx, newest, nil) }); out == outOK {
				b.live = b.cps[newest].clone()
				a.checkLive(ctx, b, "after restoring "+newest+" (final check)")
			} else {
				s.violation("final check: restore %s %s: %v", b.name, newest, err)
			}
		}
		for _, sn := range a.snaps {
			name := a.newName("fin")
			var sb *client.Sandbox
			out, err := a.do(ctx, "create", name+" from "+sn.id, func(ctx context.Context) error {
				var err error
				sb, err = s.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: name, Snapshot: sn.id, Labels: a.labels()})
				return err
			})
			if out != outOK {
				s.violation("final check: start a sandbox from snapshot %s (of %s): %v", sn.id, sn.from, err)
				continue
			}
			b := &soakBox{name: name, sb: sb, created: true, live: sn.markers.clone(), cps: map[string]markers{}, diffed: map[string]bool{}}
			a.checkLive(ctx, b, "started from snapshot "+sn.id+" (final check)")
			a.do(ctx, "delete", name, func(ctx context.Context) error { return s.c.Sandboxes.Delete(ctx, sb.ID) })
		}
	}
}

// deleteAll deletes every sandbox and snapshot.
func (s *soak) deleteAll(ctx context.Context) {
	for try := 0; try < 5; try++ {
		list, err := s.c.Sandboxes.List(ctx, nil)
		if err != nil {
			s.violation("final: list sandboxes: %v", err)
			return
		}
		if len(list) == 0 {
			break
		}
		for _, sb := range list {
			dctx, cancel := context.WithTimeout(ctx, s.o.deadline)
			err := sb.Delete(dctx)
			cancel()
			if err != nil && !errors.Is(err, client.ErrSandboxNotFound) && try == 4 {
				s.violation("final: delete %s: %v", sb.Name, err)
			}
		}
	}
	snaps, err := s.c.Snapshots.List(ctx, "")
	if err != nil {
		s.violation("final: list snapshots: %v", err)
		return
	}
	for _, sn := range snaps {
		if !sn.Billable {
			continue // a fork's own: it goes with its last copy
		}
		if err := s.c.Snapshots.Delete(ctx, sn.ID); err != nil && !errors.Is(err, client.ErrSnapshotNotFound) {
			s.violation("final: delete snapshot %s: %v", sn.ID, err)
		}
	}
}

// checkEmpty checks, after everything was deleted, that nothing is listed
// and the host holds nothing but the warm pool.
func (s *soak) checkEmpty(ctx context.Context) {
	list, err := s.c.Sandboxes.List(ctx, nil)
	if err != nil {
		s.violation("final: list sandboxes: %v", err)
		return
	}
	for _, sb := range list {
		s.violation("final: sandbox %s (%s) is still listed after every sandbox was deleted", sb.Name, sb.State)
	}
	if snaps, err := s.c.Snapshots.List(ctx, ""); err == nil {
		for _, sn := range snaps {
			s.violation("final: snapshot %s (of %s, billable %v) is still listed after every sandbox and snapshot was deleted", sn.ID, sn.Sandbox, sn.Billable)
		}
	}
	s.checkHost(ctx, "final (all deleted)", list)
	s.checkLog("final")
}

// cleanupHost removes what the stopped sbxd leaves by design (warm
// sandboxes outlive it) or by a fault: containers, mounts, namespaces,
// its nftables table and interfaces.
func (s *soak) cleanupHost() {
	root := filepath.Join(s.d.dataDir, "runsc")
	out, _ := exec.Command(s.o.runsc, "--root", root, "list", "-quiet").Output()
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command(s.o.runsc, "--root", root, "delete", "--force", id).Run()
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mps []string
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], s.d.dataDir) || strings.HasPrefix(f[4], s.d.netnsDir)) {
				mps = append(mps, f[4])
			}
		}
		// Deepest first.
		sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
		for _, mp := range mps {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	_ = os.RemoveAll(s.d.netnsDir)
	// sbxd leaves its CIDR's unreachable route when it stops (containment
	// while it is down); left, each soak would take a /20 for good.
	if p, err := netip.ParsePrefix(s.d.netCIDR); err == nil {
		_ = netlink.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}, Type: unix.RTN_UNREACHABLE})
	}
	if c, err := nftables.New(); err == nil && nftTables()[s.d.netTag] {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: s.d.netTag})
		_ = c.Flush()
	}
	if links, err := linkList(); err == nil {
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, s.d.netTag+"-") {
				_ = netlink.LinkDel(l)
			}
		}
	}
}

// linkList is netlink.LinkList read again while the kernel reports that
// the list changed during the read (netlink.ErrDumpInterrupted: sandboxes
// boot and go meanwhile), at most 20 times. The CLI imports no internal
// package, so this is not sbxd's network.Consistent.
func linkList() ([]netlink.Link, error) {
	for i := 1; ; i++ {
		links, err := netlink.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == 20 {
			return links, err
		}
		time.Sleep(time.Duration(i) * 10 * time.Millisecond)
	}
}
