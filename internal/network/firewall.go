package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The firewall is one nftables table of sbxd's own ("inet sbx" by default;
// the table is named after the manager's tag), written with google/nftables
// over netlink, never with the nft command. P is the interface prefix
// ("sbx-"), X one sandbox's host interface. Base chains dispatch to a
// sandbox's own chains through verdict maps keyed by interface name, so
// adding, changing or removing a sandbox touches only its own chains and
// map elements, whatever the number of sandboxes:
//
//	guard        (filter, prerouting -150) from X → g-X: a source other
//	             than X's address is dropped (anti-spoof); IPv6 from P* is
//	             dropped.
//	prerouting   (nat, dstnat) from P*: UDP/TCP 53 to anywhere → sbxd's DNS
//	             server; from X → nat-X: with domain rules or secrets, TCP 80/443 to
//	             outside the sandbox network → the egress proxy.
//	input        from P* → sbx_input: replies, and the DNS and proxy ports
//	             (after the redirect); anything else → in-X (recorded,
//	             dropped). The DNS and proxy ports are closed to new flows
//	             from every other interface but loopback.
//	forward      from X → sb-X (X's rules); from an unknown P* interface:
//	             drop; into P*: replies only.
//	sb-X         replies, connect targets, never the sandbox network, the
//	             host's loopback or link-local (metadata) addresses, then
//	             internet / deny / allow (CIDRs, and addresses that sbxd's DNS
//	             server answered for allowed names, in the set ok-X).
//	postrouting  (nat, srcnat) masquerade what leaves the sandbox network.
//
// A refused packet updates the set "dropped" (saddr . daddr . dport, with a
// one-hour timeout), which the audit log reads, and the counter drops-X.
type firewall struct {
	mu        sync.Mutex
	table     *nftables.Table
	prefix    string       // interface prefix, e.g. "sbx-"
	cidr      netip.Prefix // every sandbox's address is in it
	dnsPort   uint16
	proxyPort uint16
	sandboxes map[string]*fwSandbox // by interface name
}

// fwSandbox is what the firewall knows of one sandbox.
type fwSandbox struct {
	ifname     string
	slot       int
	addr       netip.Addr
	rules      *Rules
	connectIPs []netip.Addr
}

const (
	droppedSet  = "dropped"
	dropTimeout = time.Hour
	// learnMinTTL is the least time an address answered by the DNS server
	// stays in a sandbox's ok- set, whatever the record's TTL.
	learnMinTTL = 5 * time.Minute
)

// dispatch lists the verdict maps of the base chains and the prefix of
// the per-sandbox chain each sends a sandbox's packets to.
var dispatch = []struct{ vmap, chain string }{
	{"v_guard", "g-"}, {"v_nat", "nat-"}, {"v_in", "in-"}, {"v_fwd", "sb-"},
}

// ctMark is the conntrack mark of a sandbox's forwarded flows: 0x5b in
// the top byte, the sandbox's slot below (the firewall owns marks with that
// top byte).
func ctMark(slot int) uint32 { return 0x5b<<24 | uint32(slot)&0xffffff }

// internalPrefixes are never reachable from a sandbox, whatever its rules:
// "this network", loopback, link-local (cloud metadata services live at
// 169.254.169.254), multicast and broadcast.
var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/3"),
}

func newFirewall(table, prefix string, cidr netip.Prefix, dnsPort, proxyPort uint16) *firewall {
	return &firewall{
		table:  &nftables.Table{Family: nftables.TableFamilyINet, Name: table},
		prefix: prefix, cidr: cidr, dnsPort: dnsPort, proxyPort: proxyPort,
		sandboxes: map[string]*fwSandbox{},
	}
}

// setAll makes the sandboxes (by interface name) the ones the firewall
// enforces and rewrites the whole table (sbxd's start).
func (fw *firewall) setAll(sbs map[string]*fwSandbox) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.sandboxes = sbs
	return fw.syncLocked()
}

func (fw *firewall) vmapSet(name string) *nftables.Set {
	return &nftables.Set{Table: fw.table, Name: name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

func (fw *firewall) okSet(ifname string) *nftables.Set {
	return &nftables.Set{Table: fw.table, Name: "ok-" + ifname, KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

// syncLocked brings the whole table to the state fw describes. Sets and
// counters persist (they hold learned addresses and audit data); chains and
// verdict maps are flushed and refilled in one netlink transaction, so a
// packet meets the old rules or the new, never none. Chains, sets and
// counters of interfaces no longer known (a sandbox deleted while sbxd was
// down) go.
func (fw *firewall) syncLocked() error {
	c, err := newNFT()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := fw.table
	// 1. Table, sets and counters that must exist before rules use them.
	c.AddTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: create table inet %s: %w", t.Name, err)
	}
	sets, err := c.GetSets(t)
	if err != nil {
		return fmt.Errorf("nftables: list sets: %w", err)
	}
	haveSet := map[string]*nftables.Set{}
	for _, s := range sets {
		haveSet[s.Name] = s
	}
	objs, err := c.GetNamedObjects(t)
	if err != nil {
		return fmt.Errorf("nftables: list counters: %w", err)
	}
	haveObj := map[string]bool{}
	for _, o := range objs {
		switch o := o.(type) {
		case *nftables.NamedObj:
			haveObj[o.Name] = true
		case *nftables.CounterObj:
			haveObj[o.Name] = true
		}
	}
	if haveSet[droppedSet] == nil {
		err := c.AddSet(&nftables.Set{
			Table: t, Name: droppedSet,
			KeyType:       nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetService),
			Concatenation: true, Dynamic: true, HasTimeout: true, Timeout: dropTimeout,
		}, nil)
		if err != nil {
			return err
		}
	}
	for _, d := range dispatch {
		if haveSet[d.vmap] == nil {
			if err := c.AddSet(fw.vmapSet(d.vmap), nil); err != nil {
				return err
			}
		}
	}
	for n := range fw.sandboxes {
		if haveSet["ok-"+n] == nil {
			if err := c.AddSet(fw.okSet(n), nil); err != nil {
				return err
			}
		}
		if !haveObj["drops-"+n] {
			c.AddObj(&nftables.CounterObj{Table: t, Name: "drops-" + n})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: create sets: %w", err)
	}

	// 2. Chains and verdict maps, flushed and refilled in one transaction.
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("nftables: list chains: %w", err)
	}
	var stale []*nftables.Chain
	for _, ch := range chains {
		if ch.Table.Name != t.Name {
			continue
		}
		for _, d := range dispatch {
			if n, ok := strings.CutPrefix(ch.Name, d.chain); ok && fw.sandboxes[n] == nil {
				stale = append(stale, &nftables.Chain{Table: t, Name: ch.Name})
			}
		}
	}
	for _, d := range dispatch {
		c.FlushSet(fw.vmapSet(d.vmap))
	}
	fw.baseChains(c)
	for _, sb := range fw.sandboxes {
		if err := fw.sandboxChains(c, sb); err != nil {
			return err
		}
	}
	for _, ch := range stale {
		c.FlushChain(ch)
		c.DelChain(ch)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: write rules of table inet %s: %w", t.Name, err)
	}

	// 3. Sets and counters of interfaces no longer known.
	n := 0
	for name, s := range haveSet {
		if ifn, ok := strings.CutPrefix(name, "ok-"); ok && fw.sandboxes[ifn] == nil {
			c.DelSet(s)
			n++
		}
	}
	for name := range haveObj {
		if ifn, ok := strings.CutPrefix(name, "drops-"); ok && fw.sandboxes[ifn] == nil {
			c.DeleteObject(&nftables.CounterObj{Table: t, Name: name})
			n++
		}
	}
	if n > 0 {
		if err := c.Flush(); err != nil {
			return fmt.Errorf("nftables: remove stale sets: %w", err)
		}
	}
	return nil
}

// baseChains flushes and fills the hooked chains and sbx_input.
func (fw *firewall) baseChains(c *nftables.Conn) {
	t := fw.table
	accept := nftables.ChainPolicyAccept
	base := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		ch := c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept})
		c.FlushChain(ch)
		return ch
	}
	guard := base("guard", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRef(-150))
	pre := base("prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
	input := base("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	sbxInput := c.AddChain(&nftables.Chain{Name: "sbx_input", Table: t})
	c.FlushChain(sbxInput)
	forward := base("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	post := base("postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(parts...)})
	}
	mine := fw.prefixMatch(expr.MetaKeyIIFNAME, expr.CmpOpEq)
	viaMap := func(name string) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: name, DestRegister: 0, IsDestRegSet: true},
		}
	}

	rule(guard, mine, viaMap("v_guard"))
	rule(guard, mine, nfproto(unix.NFPROTO_IPV6), verdict(expr.VerdictDrop))

	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(pre, mine, ipv4(), l4proto(proto), dport(53), redirect(fw.dnsPort))
	}
	rule(pre, mine, viaMap("v_nat"))

	rule(input, mine, jump(sbxInput.Name))
	// The DNS and proxy ports are closed to new flows from other hosts.
	// Loopback and replies to the host's own connections pass: the table
	// outlives sbxd (it keeps sandboxes contained while sbxd is down), and
	// once sbxd's sockets are gone the kernel hands those port numbers to
	// other programs, whose loopback listeners and outgoing connections
	// must not go dark.
	notLo := []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifnameBytes("lo")}}
	fresh := ctState(expr.CtStateBitNEW | expr.CtStateBitINVALID | expr.CtStateBitUNTRACKED)
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(input, notLo, l4proto(proto), dport(fw.dnsPort), fresh, verdict(expr.VerdictDrop))
	}
	rule(input, notLo, l4proto(unix.IPPROTO_TCP), dport(fw.proxyPort), fresh, verdict(expr.VerdictDrop))
	rule(sbxInput, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(sbxInput, ipv4(), l4proto(proto), dport(fw.dnsPort), verdict(expr.VerdictAccept))
	}
	rule(sbxInput, ipv4(), l4proto(unix.IPPROTO_TCP), dport(fw.proxyPort), verdict(expr.VerdictAccept))
	rule(sbxInput, viaMap("v_in"))
	rule(sbxInput, verdict(expr.VerdictDrop))

	rule(forward, mine, viaMap("v_fwd"))
	rule(forward, mine, verdict(expr.VerdictDrop))
	rule(forward, fw.prefixMatch(expr.MetaKeyOIFNAME, expr.CmpOpEq), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	rule(forward, fw.prefixMatch(expr.MetaKeyOIFNAME, expr.CmpOpEq), verdict(expr.VerdictDrop))

	rule(post, ipv4(), saddrIn(fw.cidr), fw.prefixMatch(expr.MetaKeyOIFNAME, expr.CmpOpNeq), []expr.Any{&expr.Masq{}})
}

// sandboxChains creates (or flushes) and fills a sandbox's four chains and
// points the verdict maps at them. Its ok- set and drops- counter must
// exist.
func (fw *firewall) sandboxChains(c *nftables.Conn, sb *fwSandbox) error {
	t := fw.table
	n := sb.ifname
	mk := func(name string) *nftables.Chain {
		ch := c.AddChain(&nftables.Chain{Name: name + n, Table: t})
		c.FlushChain(ch)
		return ch
	}
	g, nat, in, fwd := mk("g-"), mk("nat-"), mk("in-"), mk("sb-")
	c.AddRule(&nftables.Rule{Table: t, Chain: g, Exprs: cat(ipv4(), saddrNot(sb.addr), verdict(expr.VerdictDrop))})
	fw.natRules(c, nat, sb)
	for _, r := range fw.dropRules(n) {
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: r})
	}
	fw.sandboxRules(c, fwd, sb)
	for _, d := range dispatch {
		err := c.SetAddElements(fw.vmapSet(d.vmap), []nftables.SetElement{{
			Key: ifnameBytes(n), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: d.chain + n},
		}})
		if err != nil {
			return err
		}
	}
	return nil
}

// add starts enforcing a new sandbox: its set, counter, chains and map
// elements, in two transactions; nothing of other sandboxes is touched.
func (fw *firewall) add(sb *fwSandbox) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	c, err := newNFT()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := c.AddSet(fw.okSet(sb.ifname), nil); err != nil {
		return err
	}
	c.AddObj(&nftables.CounterObj{Table: fw.table, Name: "drops-" + sb.ifname})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: add sets of %s: %w", sb.ifname, err)
	}
	if err := fw.sandboxChains(c, sb); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: add rules of %s: %w", sb.ifname, err)
	}
	fw.sandboxes[sb.ifname] = sb
	return nil
}

// remove stops enforcing a sandbox and deletes its chains, set and counter.
// Traffic from its interface, if the interface remains, is dropped (the
// base chains drop unknown P* interfaces).
func (fw *firewall) remove(ifname string) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	c, err := newNFT()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	for _, d := range dispatch {
		if err := c.SetDeleteElements(fw.vmapSet(d.vmap), []nftables.SetElement{{Key: ifnameBytes(ifname)}}); err != nil {
			return err
		}
	}
	for _, d := range dispatch {
		ch := &nftables.Chain{Table: fw.table, Name: d.chain + ifname}
		c.FlushChain(ch)
		c.DelChain(ch)
	}
	if err := c.Flush(); err != nil && fw.sandboxes[ifname] != nil {
		return fmt.Errorf("nftables: remove rules of %s: %w", ifname, err)
	}
	c.DelSet(fw.okSet(ifname))
	c.DeleteObject(&nftables.CounterObj{Table: fw.table, Name: "drops-" + ifname})
	_ = c.Flush() // already gone is fine
	delete(fw.sandboxes, ifname)
	return nil
}

// update rewrites one sandbox's rules (its forward and nat chains) in one
// transaction. With learned non-nil, its ok- set becomes exactly those
// addresses (with their time left). A sandbox the table does not hold yet
// is added.
func (fw *firewall) update(sb *fwSandbox, learned map[netip.Addr]time.Duration) error {
	fw.mu.Lock()
	if fw.sandboxes[sb.ifname] == nil {
		fw.mu.Unlock()
		return fw.add(sb)
	}
	defer fw.mu.Unlock()
	fw.sandboxes[sb.ifname] = sb
	c, err := newNFT()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	fwd := &nftables.Chain{Table: fw.table, Name: "sb-" + sb.ifname}
	nat := &nftables.Chain{Table: fw.table, Name: "nat-" + sb.ifname}
	c.FlushChain(fwd)
	c.FlushChain(nat)
	fw.sandboxRules(c, fwd, sb)
	fw.natRules(c, nat, sb)
	if learned != nil {
		set := fw.okSet(sb.ifname)
		c.FlushSet(set)
		var els []nftables.SetElement
		for a, left := range learned {
			b := a.As4()
			els = append(els, nftables.SetElement{Key: b[:], Timeout: max(left, time.Second)})
		}
		if len(els) > 0 {
			if err := c.SetAddElements(set, els); err != nil {
				return err
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: rewrite rules of %s: %w", sb.ifname, err)
	}
	return nil
}

// natRules fills a sandbox's prerouting (nat) chain: HTTP and HTTPS to
// outside the sandbox network go to the egress proxy when the rules name
// domains or the sandbox has secrets.
func (fw *firewall) natRules(c *nftables.Conn, ch *nftables.Chain, sb *fwSandbox) {
	if r := sb.rules; r.Internet && r.proxied() {
		for _, port := range []uint16{80, 443} {
			c.AddRule(&nftables.Rule{Table: fw.table, Chain: ch, Exprs: cat(ipv4(), daddrNotIn(fw.cidr),
				l4proto(unix.IPPROTO_TCP), dport(port), redirect(fw.proxyPort))})
		}
	}
}

// sandboxRules fills a sandbox's forward chain.
func (fw *firewall) sandboxRules(c *nftables.Conn, ch *nftables.Chain, sb *fwSandbox) {
	add := func(parts ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: fw.table, Chain: ch, Exprs: cat(parts...)})
	}
	drop := func(match ...[]expr.Any) {
		for _, r := range fw.dropRules(sb.ifname, match...) {
			add(r)
		}
	}
	// Every forwarded flow carries its sandbox's mark, so that a rules
	// change can find the sandbox's flows without dumping the whole
	// conntrack table.
	add([]expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(ctMark(sb.slot))},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true},
	})
	add(ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	for _, ip := range sb.connectIPs {
		add(ipv4(), daddrIn(netip.PrefixFrom(ip, 32)), verdict(expr.VerdictAccept))
	}
	drop(ipv4(), daddrIn(fw.cidr))
	for _, p := range internalPrefixes {
		drop(ipv4(), daddrIn(p))
	}
	drop(ipv4(), daddrIn(netip.PrefixFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), 32)))
	r := sb.rules
	if !r.Internet {
		drop(ipv4())
		return
	}
	for _, p := range r.DenyCIDRs {
		drop(ipv4(), daddrIn(p))
	}
	if len(r.AllowCIDRs) == 0 && len(r.AllowDomains) == 0 {
		add(verdict(expr.VerdictAccept))
		return
	}
	for _, p := range r.AllowCIDRs {
		add(ipv4(), daddrIn(p), verdict(expr.VerdictAccept))
	}
	if len(r.AllowDomains) > 0 {
		add(ipv4(), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: "ok-" + sb.ifname},
		}, verdict(expr.VerdictAccept))
	}
	drop(ipv4())
}

// dropRules are the rules that refuse what match matches. First the
// packet is counted against the sandbox (counter drops-X) and, when it
// opens something (a TCP SYN, or any other protocol's packet), recorded in
// the dropped set: replies and the rest of a cut stream are not attempts
// of the sandbox's. Then it is rejected: TCP with a reset, anything else
// with ICMP "administratively prohibited", so that a refused connection
// fails at once instead of hanging until its timeout (and a stream cut by
// a rules change ends on its next packet). The record and the verdict are
// separate rules so that a packet whose record fails (no transport header)
// is refused all the same. Only IPv4 reaches them: the guard chain drops
// IPv6 from sandboxes.
func (fw *firewall) dropRules(ifname string, match ...[]expr.Any) [][]expr.Any {
	record := []expr.Any{
		&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Dynset{SrcRegKey: 8, SetName: droppedSet, Operation: uint32(unix.NFT_DYNSET_OP_UPDATE), Timeout: dropTimeout},
	}
	count := []expr.Any{&expr.Objref{Type: 1 /* NFT_OBJECT_COUNTER */, Name: "drops-" + ifname}}
	synOnly := []expr.Any{ // tcp flags & (syn|ack) == syn
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x02}},
	}
	notTCP := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
	m := cat(match...)
	return [][]expr.Any{
		cat(m, count),
		cat(m, l4proto(unix.IPPROTO_TCP), synOnly, record),
		cat(m, notTCP, record),
		cat(m, l4proto(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
		cat(m, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}),
	}
}

// Dropped is a refused packet the firewall recorded: the last one of its
// (source, destination, port) within the last hour.
type Dropped struct {
	Src, Dst netip.Addr
	Port     uint16
	// Last is when one was last refused (to the second).
	Last time.Time
}

// listDropped reads the dropped set for packets from src.
func (fw *firewall) listDropped(src netip.Addr) ([]Dropped, error) {
	c, err := newNFT()
	if err != nil {
		return nil, err
	}
	els, err := c.GetSetElements(&nftables.Set{Table: fw.table, Name: droppedSet,
		KeyType:       nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetService),
		Concatenation: true})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []Dropped
	for _, el := range els {
		d, ok := decodeDropped(el, now)
		if ok && d.Src == src {
			out = append(out, d)
		}
	}
	return out, nil
}

func decodeDropped(el nftables.SetElement, now time.Time) (Dropped, bool) {
	k := el.Key
	if len(k) < 10 {
		return Dropped{}, false
	}
	src, _ := netip.AddrFromSlice(k[0:4])
	dst, _ := netip.AddrFromSlice(k[4:8])
	d := Dropped{Src: src, Dst: dst, Port: binary.BigEndian.Uint16(k[8:10]), Last: now}
	if el.Expires > 0 {
		d.Last = now.Add(el.Expires - dropTimeout).Truncate(time.Second)
	}
	return d, true
}

// forgetDropped deletes the dropped set's records of src (its sandbox is
// gone; the address may be given to another).
func (fw *firewall) forgetDropped(src netip.Addr) {
	c, err := newNFT()
	if err != nil {
		return
	}
	set := &nftables.Set{Table: fw.table, Name: droppedSet,
		KeyType:       nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr, nftables.TypeInetService),
		Concatenation: true}
	els, err := c.GetSetElements(set)
	if err != nil {
		return
	}
	var del []nftables.SetElement
	for _, el := range els {
		if d, ok := decodeDropped(el, time.Now()); ok && d.Src == src {
			del = append(del, nftables.SetElement{Key: el.Key})
		}
	}
	if len(del) > 0 && c.SetDeleteElements(set, del) == nil {
		_ = c.Flush()
	}
}

// drops is how many packets the firewall refused for a sandbox.
func (fw *firewall) drops(ifname string) (uint64, error) {
	c, err := newNFT()
	if err != nil {
		return 0, err
	}
	o, err := c.GetObject(&nftables.CounterObj{Table: fw.table, Name: "drops-" + ifname})
	if err != nil {
		return 0, err
	}
	if co, ok := o.(*nftables.CounterObj); ok {
		return co.Packets, nil
	}
	return 0, errors.New("drops counter has another type")
}

// learn lets a sandbox reach addresses that sbxd's DNS server answered for
// a name its rules allow, for ttl: fresh ones are added, refresh ones
// (already in the set) re-added with the new timeout.
func (fw *firewall) learn(ifname string, fresh, refresh []netip.Addr, ttl time.Duration) error {
	if len(fresh)+len(refresh) == 0 {
		return nil
	}
	c, err := newNFT()
	if err != nil {
		return err
	}
	set := fw.okSet(ifname)
	els := func(addrs []netip.Addr) []nftables.SetElement {
		out := make([]nftables.SetElement, 0, len(addrs))
		for _, a := range addrs {
			b := a.As4()
			out = append(out, nftables.SetElement{Key: b[:], Timeout: ttl})
		}
		return out
	}
	if len(refresh) > 0 {
		if err := c.SetDeleteElements(set, els(refresh)); err != nil {
			return err
		}
	}
	if err := c.SetAddElements(set, els(append(fresh, refresh...))); err != nil {
		return err
	}
	if err := c.Flush(); err != nil && len(refresh) > 0 {
		// An element expired in the kernel meanwhile: add without deleting.
		if err := c.SetAddElements(set, els(append(fresh, refresh...))); err != nil {
			return err
		}
		return c.Flush()
	} else if err != nil {
		return err
	}
	return nil
}

// deleteTable removes the table and everything in it.
func (fw *firewall) deleteTable() error {
	c, err := newNFT()
	if err != nil {
		return err
	}
	c.AddTable(fw.table)
	c.DelTable(fw.table)
	return c.Flush()
}

// --- expression helpers ---

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func ifnameBytes(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}

// prefixMatch compares the first bytes of an interface name with the
// prefix (nft's iifname "sbx-*").
func (fw *firewall) prefixMatch(key expr.MetaKey, op expr.CmpOp) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: []byte(fw.prefix)}}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func ipv4() []expr.Any { return nfproto(unix.NFPROTO_IPV4) }

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

func addrMatch(offset uint32, p netip.Prefix, op expr.CmpOp) []expr.Any {
	a := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: net4Mask(p.Bits()), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: op, Register: 1, Data: a[:]},
	}
}

func net4Mask(bits int) []byte {
	m := make([]byte, 4)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

func daddrIn(p netip.Prefix) []expr.Any    { return addrMatch(16, p, expr.CmpOpEq) }
func daddrNotIn(p netip.Prefix) []expr.Any { return addrMatch(16, p, expr.CmpOpNeq) }
func saddrIn(p netip.Prefix) []expr.Any    { return addrMatch(12, p, expr.CmpOpEq) }
func saddrNot(a netip.Addr) []expr.Any     { return addrMatch(12, netip.PrefixFrom(a, 32), expr.CmpOpNeq) }

func ctState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

// nftBuffer is the socket buffer, each way, of sbxd's nftables netlink
// connections. A table rewrite is one batch of a few messages per rule
// (about 20 rules a sandbox) and the kernel answers each with an ack: the
// default 208 KiB would cap a batch at a few sandboxes.
const nftBuffer = 64 << 20

// newNFT opens an nftables connection with buffers for big batches
// (SO_SNDBUFFORCE and SO_RCVBUFFORCE: sbxd runs as root, past
// net.core.[rw]mem_max).
func newNFT() (*nftables.Conn, error) {
	return nftables.New(nftables.WithSockOptions(func(c *netlink.Conn) error {
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		err = rc.Control(func(fd uintptr) {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, nftBuffer); e != nil {
				serr = e
			}
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, nftBuffer); e != nil {
				serr = e
			}
		})
		if err != nil {
			return err
		}
		return serr
	}))
}
