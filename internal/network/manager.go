// Package network contains sandboxes: each gets a network namespace of its
// own (runsc joins it with --network=sandbox) linked to the host by a veth
// pair on a /30 of its own, and everything that leaves it is decided on the
// host, where root in the guest cannot reach: an nftables table (addresses,
// CIDRs, NAT), a DNS server that answers only the names a sandbox's rules
// allow, and an egress proxy that reads the name of each HTTP and HTTPS
// connection (Host header, TLS SNI) and forwards it only where the rules
// say. It also keeps the audit of what it refused.
package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/network/nsfile"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config configures a Manager. Zero fields take the defaults.
type Config struct {
	// NetnsDir holds the namespace files (default /run/sbx/netns).
	NetnsDir string
	// CIDR is the IPv4 network sandboxes' addresses come from, one /30 each
	// (default 10.200.0.0/16: 16383 sandboxes). Its first /30 is reserved:
	// its first address is the resolver every sandbox is given.
	CIDR netip.Prefix
	// Tag names this sbxd's firewall table ("inet <tag>") and starts its
	// interface names ("<tag>-…"): 1 to 4 lowercase letters or digits,
	// default "sbx". Two sbxd on one host need different tags and CIDRs.
	Tag string
	// Upstream is the DNS server ("ip:port") that allowed names are
	// resolved with; default the first nameserver of /etc/resolv.conf.
	Upstream string
	// Log gets warnings; default slog.Default().
	Log *slog.Logger
	// LockDir holds the host-wide locks of tags and CIDRs (default
	// /run/sbx): NewManager refuses a Tag, or a CIDR overlapping one, that
	// another live sbxd holds.
	LockDir string
	// Holder says who this sbxd is in its locks, for the error another
	// sbxd gets (e.g. "data dir /var/lib/sbx"); the pid is always written.
	Holder string
}

// Manager plumbs sandboxes' networks and enforces their rules. It is safe
// for concurrent use.
type Manager struct {
	cfg    Config
	prefix string // interface prefix, "<tag>-"
	mtu    int
	fw     *firewall
	locks  *hostLocks
	dns    *dnsServer
	proxy  *proxy
	up     *resolver
	log    *slog.Logger

	mu      sync.Mutex
	started bool
	byID    map[string]*attachment
	byAddr  map[netip.Addr]*attachment
	slots   map[int]string // slot → id
}

// attachment is a sandbox's network while it runs.
type attachment struct {
	id, name string
	ifname   string
	slot     int
	addr, gw netip.Addr
	audit    *auditLog

	mu      sync.Mutex
	rules   *Rules
	learned map[netip.Addr]learnedAddr // answered by DNS for allowed names
}

func (a *attachment) getRules() *Rules {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rules
}

var tagRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,3}$`)

// DefaultCIDR is the network sandboxes' addresses come from by default.
var DefaultCIDR = netip.MustParsePrefix("10.200.0.0/16")

// NewManager checks cfg, enables IPv4 forwarding, and starts the DNS server
// and the egress proxy (each on a port of its own, on every address; the
// firewall closes them to all but sandboxes). Call Attach for the
// sandboxes that already run, then Start, before Create.
//
// It first takes the host-wide locks of the tag and the CIDR (see
// Config.LockDir), before it touches anything of the host's network.
//
// Errors: a bad Config; the tag, or a CIDR overlapping cfg.CIDR, is held
// by another sbxd (the error names it); no nftables or netlink (not root).
func NewManager(cfg Config) (m *Manager, err error) {
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = "/run/sbx/netns"
	}
	if !cfg.CIDR.IsValid() {
		cfg.CIDR = DefaultCIDR
	}
	if !cfg.CIDR.Addr().Is4() || cfg.CIDR.Bits() > 28 || cfg.CIDR.Bits() < 8 || cfg.CIDR.Masked() != cfg.CIDR {
		return nil, fmt.Errorf("network CIDR %s: want an IPv4 network from /8 to /28", cfg.CIDR)
	}
	if cfg.Tag == "" {
		cfg.Tag = "sbx"
	}
	if !tagRE.MatchString(cfg.Tag) {
		return nil, fmt.Errorf("network tag %q: want 1 to 4 lowercase letters or digits, a letter first", cfg.Tag)
	}
	if cfg.Upstream == "" {
		cfg.Upstream = systemResolver()
	}
	if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
		cfg.Upstream = net.JoinHostPort(cfg.Upstream, "53")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LockDir == "" {
		cfg.LockDir = DefaultLockDir
	}
	locks, err := lockNetwork(cfg.LockDir, cfg.Tag, cfg.CIDR, cfg.Holder)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			locks.release()
		}
	}()
	if err := nsfile.PrivateDir(cfg.NetnsDir); err != nil {
		return nil, err
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	m = &Manager{
		cfg: cfg, prefix: cfg.Tag + "-", mtu: defaultRouteMTU(), log: cfg.Log, locks: locks,
		byID: map[string]*attachment{}, byAddr: map[netip.Addr]*attachment{}, slots: map[int]string{},
	}
	// Addresses of the sandbox network that no sandbox holds are
	// unreachable on this host; without this route they would follow the
	// default route out. A sandbox's /30 on its veth is more specific.
	if err := netlink.RouteReplace(m.unreachableRoute()); err != nil {
		return nil, fmt.Errorf("route %s unreachable: %w", cfg.CIDR, err)
	}
	m.up = newResolver(cfg.Upstream)
	if m.dns, err = startDNS(m); err != nil {
		return nil, err
	}
	if m.proxy, err = startProxy(m); err != nil {
		m.dns.close()
		return nil, err
	}
	m.fw = newFirewall(cfg.Tag, m.prefix, cfg.CIDR, m.dns.port, m.proxy.port)
	return m, nil
}

// systemResolver is the first nameserver of /etc/resolv.conf.
func systemResolver() string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && !a.IsLoopback() {
					return f[1]
				}
			}
		}
	}
	return "127.0.0.53"
}

// defaultRouteMTU is the MTU of the interface of the host's default route
// (a veth bigger than the path out would break large packets), or 1500.
func defaultRouteMTU() int {
	routes, err := Consistent(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_V4) })
	if err == nil {
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil && l.Attrs().MTU > 0 {
					return l.Attrs().MTU
				}
			}
		}
	}
	return 1500
}

// ResolvConf is the /etc/resolv.conf every sandbox gets: sbxd's DNS server
// at the network's service address (any address on port 53 reaches it).
func (m *Manager) ResolvConf() string {
	return "# sbx: names are answered by sbxd on the host, by this sandbox's network rules\n" +
		"nameserver " + m.serviceAddr().String() + "\nsearch " + internalDomain + "\noptions timeout:2 attempts:2\n"
}

func (m *Manager) serviceAddr() netip.Addr { return m.cfg.CIDR.Addr().Next() }

// slotAddrs are the gateway (host side) and sandbox addresses of a slot.
func (m *Manager) slotAddrs(slot int) (gw, addr netip.Addr) {
	b := m.cfg.CIDR.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n := base + uint32(slot)*4
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 1)}),
		netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 2)})
}

func (m *Manager) slotOf(addr netip.Addr) int {
	a, b := addr.As4(), m.cfg.CIDR.Addr().As4()
	x := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	y := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return int((x - y) / 4)
}

func (m *Manager) slotCount() int { return 1 << (32 - m.cfg.CIDR.Bits()) / 4 }

// ifname is the host-side interface of sandbox id: the prefix and as much
// of the id as fits the kernel's 15 characters.
func (m *Manager) ifname(id string) string {
	s := strings.TrimPrefix(id, "sbx_")
	if n := 15 - len(m.prefix); len(s) > n {
		s = s[:n]
	}
	return m.prefix + s
}

// Attach takes over the network of a sandbox that runs already (sbxd
// restarted): it finds the address on its interface and enforces rules.
// Errors: the sandbox's interface is missing (the caller should reboot it).
func (m *Manager) Attach(id, name string, rules *Rules) error {
	ifn := m.ifname(id)
	l, err := netlink.LinkByName(ifn)
	if err != nil {
		return fmt.Errorf("network of %s: interface %s: %w", name, ifn, err)
	}
	addrs, err := Consistent(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("network of %s: no address on %s", name, ifn)
	}
	gw, _ := netip.AddrFromSlice(addrs[0].IP.To4())
	slot := m.slotOf(gw)
	_, addr := m.slotAddrs(slot)
	a := &attachment{id: id, name: name, ifname: ifn, slot: slot, addr: addr, gw: gw, rules: rules,
		audit: newAuditLog(), learned: map[netip.Addr]learnedAddr{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	if other, ok := m.slots[slot]; ok && other != id {
		return fmt.Errorf("network of %s: address %s is taken by %s", name, addr, other)
	}
	m.register(a)
	if m.started {
		return m.addLocked(a)
	}
	return nil
}

// addLocked writes a new attachment's rules, and refreshes the rules of
// the sandboxes whose connect lists name it. m.mu is held.
func (m *Manager) addLocked(a *attachment) error {
	if err := m.fw.add(m.fwSandbox(a, nil)); err != nil {
		return err
	}
	return m.refreshConnectors(a.name)
}

// refreshConnectors rewrites the rules of running sandboxes whose connect
// lists name one of names (that sandbox came, went or was renamed). m.mu is
// held.
func (m *Manager) refreshConnectors(names ...string) error {
	for _, x := range m.byID {
		for _, n := range x.getRules().Connect {
			if slices.Contains(names, n) {
				if err := m.fw.update(m.fwSandbox(x, nil), nil); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

func (m *Manager) register(a *attachment) {
	m.byID[a.id] = a
	m.byAddr[a.addr] = a
	m.slots[a.slot] = a.id
}

// Start writes the firewall for the attached sandboxes and removes what
// earlier runs left: interfaces, namespaces, chains and sets of sandboxes
// not attached. keep reports the ids whose namespaces must stay (sandboxes
// that exist but are not running keep none).
func (m *Manager) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started = true
	if err := m.syncLocked(); err != nil {
		return err
	}
	links, err := Consistent(netlink.LinkList)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, a := range m.byID {
		known[a.ifname] = true
	}
	for _, l := range links {
		n := l.Attrs().Name
		if strings.HasPrefix(n, m.prefix) && !known[n] {
			m.log.Info("network: removing orphan interface", "ifname", n)
			_ = netlink.LinkDel(l)
		}
	}
	ids, err := listNamespaces(m.cfg.NetnsDir)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if m.byID[id] == nil {
			m.log.Info("network: removing orphan netns", "id", id)
			if err := nsfile.Delete(m.nsPath(id)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Create makes sandbox id's network: a namespace with loopback and eth0
// (address and default route), the host end of the veth, and the rules.
// It returns the namespace's path for runsc. A namespace left over for id
// is replaced.
//
// Errors: no free address in the CIDR; netlink or nftables failures. On
// error nothing is left behind.
func (m *Manager) Create(id, name string, rules *Rules) (path string, err error) {
	m.mu.Lock()
	if !m.started {
		m.mu.Unlock()
		return "", errors.New("network manager not started")
	}
	if old := m.byID[id]; old != nil {
		m.unregister(old)
	}
	for _, other := range m.byID {
		if other.ifname == m.ifname(id) {
			m.mu.Unlock()
			return "", fmt.Errorf("network of %s: interface name %s is taken by sandbox %s (ids alike in their first characters)", name, other.ifname, other.name)
		}
	}
	slot := 0
	for i := 1; i < m.slotCount(); i++ {
		if _, taken := m.slots[i]; !taken {
			slot = i
			break
		}
	}
	if slot == 0 {
		m.mu.Unlock()
		return "", fmt.Errorf("network %s has no free address for another sandbox", m.cfg.CIDR)
	}
	gw, addr := m.slotAddrs(slot)
	a := &attachment{id: id, name: name, ifname: m.ifname(id), slot: slot, addr: addr, gw: gw, rules: rules,
		audit: newAuditLog(), learned: map[netip.Addr]learnedAddr{}}
	m.slots[slot] = id // reserved while the plumbing is made
	m.mu.Unlock()

	defer func() {
		if err != nil {
			m.mu.Lock()
			if m.slots[slot] == id {
				delete(m.slots, slot)
			}
			m.mu.Unlock()
			m.teardown(id, a.ifname)
		}
	}()
	if l, err := netlink.LinkByName(a.ifname); err == nil {
		_ = netlink.LinkDel(l)
	}
	_ = nsfile.Delete(m.nsPath(id))
	path = m.nsPath(id)
	if err := nsfile.Create(path); err != nil {
		return "", fmt.Errorf("create netns for %s: %w", name, err)
	}
	if err := m.plumb(a, path); err != nil {
		return "", fmt.Errorf("network of %s: %w", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.register(a)
	if err := m.addLocked(a); err != nil {
		m.unregister(a)
		_ = m.fw.remove(a.ifname)
		return "", err
	}
	return path, nil
}

// plumb makes the veth pair: the host end with the gateway address, the
// sandbox end (eth0, in the namespace) with the sandbox's address and a
// default route through the gateway. IPv6 is off on the host end.
func (m *Manager) plumb(a *attachment, path string) error {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer h.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: a.ifname, MTU: m.mtu},
		PeerName:  "eth0", PeerNamespace: netlink.NsFd(int(h)), PeerMTU: uint32(m.mtu),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", a.ifname, err)
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+a.ifname+"/disable_ipv6", []byte("1"), 0o644)
	host, err := netlink.LinkByName(a.ifname)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: prefixNet(a.gw, 30)}); err != nil {
		return fmt.Errorf("address %s on %s: %w", a.gw, a.ifname, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return err
	}
	defer nh.Close()
	for _, n := range []string{"lo", "eth0"} {
		l, err := nh.LinkByName(n)
		if err != nil {
			return err
		}
		if n == "eth0" {
			if err := nh.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(a.addr, 30)}); err != nil {
				return fmt.Errorf("address %s on eth0: %w", a.addr, err)
			}
		}
		if err := nh.LinkSetUp(l); err != nil {
			return err
		}
		if n == "eth0" {
			if err := nh.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: a.gw.AsSlice()}); err != nil {
				return fmt.Errorf("default route: %w", err)
			}
		}
	}
	return nil
}

func prefixNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// Update replaces a running sandbox's rules. Within the call the firewall
// holds the new rules, and connections they forbid are cut: proxied ones
// are closed, forwarded ones lose their conntrack entry so their next
// packet meets the new rules. A sandbox not running has nothing to update.
func (m *Manager) Update(id string, rules *Rules) error {
	m.mu.Lock()
	a := m.byID[id]
	if a == nil {
		m.mu.Unlock()
		return nil
	}
	a.mu.Lock()
	a.rules = rules
	a.mu.Unlock()
	err := m.fw.update(m.fwSandbox(a, nil), a.pruneLearned())
	m.mu.Unlock()
	if err != nil {
		return err
	}
	m.proxy.recheck(a)
	if err := m.cutForbidden(a); err != nil {
		m.log.Warn("network: cut connections", "sandbox", a.name, "err", err)
	}
	return nil
}

// Rename tells the network a sandbox's new name (connect rules and DNS
// names use names).
func (m *Manager) Rename(id, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.byID[id]; a != nil {
		old := a.name
		a.name = name
		_ = m.refreshConnectors(old, name)
	}
}

// Delete removes sandbox id's network: rules, interface, namespace, and
// the proxy's connections. A missing one is fine.
func (m *Manager) Delete(id string) error {
	m.mu.Lock()
	a := m.byID[id]
	ifn := m.ifname(id)
	if a != nil {
		m.unregister(a)
		if m.started {
			if err := m.fw.remove(a.ifname); err != nil {
				m.mu.Unlock()
				return err
			}
			_ = m.refreshConnectors(a.name)
		}
	}
	m.mu.Unlock()
	if a != nil {
		m.proxy.closeAll(a)
		m.fw.forgetDropped(a.addr)
	}
	return m.teardown(id, ifn)
}

func (m *Manager) unregister(a *attachment) {
	delete(m.byID, a.id)
	if m.byAddr[a.addr] == a {
		delete(m.byAddr, a.addr)
	}
	if m.slots[a.slot] == a.id {
		delete(m.slots, a.slot)
	}
}

// teardown deletes an interface and a namespace; missing ones are fine.
func (m *Manager) teardown(id, ifn string) error {
	if l, err := netlink.LinkByName(ifn); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("delete %s: %w", ifn, err)
		}
	}
	return nsfile.Delete(m.nsPath(id))
}

// syncLocked rewrites the firewall from the attachments. m.mu is held.
func (m *Manager) syncLocked() error {
	byName := map[string]*attachment{}
	for _, a := range m.byID {
		byName[a.name] = a
	}
	sbs := make(map[string]*fwSandbox, len(m.byID))
	for _, a := range m.byID {
		sbs[a.ifname] = m.fwSandbox(a, byName)
	}
	return m.fw.setAll(sbs)
}

// fwSandbox is what the firewall needs of a: its rules, and the addresses
// of the running sandboxes its connect rules name (byName: the running
// sandboxes by name; nil to build it). m.mu is held.
func (m *Manager) fwSandbox(a *attachment, byName map[string]*attachment) *fwSandbox {
	if byName == nil {
		byName = map[string]*attachment{}
		for _, x := range m.byID {
			byName[x.name] = x
		}
	}
	r := a.getRules()
	sb := &fwSandbox{ifname: a.ifname, slot: a.slot, addr: a.addr, rules: r}
	for _, n := range r.Connect {
		if t := byName[n]; t != nil && t != a {
			sb.connectIPs = append(sb.connectIPs, t.addr)
		}
	}
	return sb
}

// lookup is the attachment whose sandbox has address src, or nil.
func (m *Manager) lookup(src netip.Addr) *attachment {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byAddr[src.Unmap()]
}

// connectAddr is the address of the sandbox named target if a may reach
// it (it is a itself, or in a's connect list and running); otherwise why
// not.
func (m *Manager) connectAddr(a *attachment, target string) (netip.Addr, string) {
	r := a.getRules()
	m.mu.Lock()
	defer m.mu.Unlock()
	if target == a.name {
		return a.addr, ""
	}
	if !slices.Contains(r.Connect, target) {
		return netip.Addr{}, "no sandbox named " + target + " in this sandbox's connect rules"
	}
	for _, t := range m.byID {
		if t.name == target {
			return t.addr, ""
		}
	}
	return netip.Addr{}, "sandbox " + target + " is not running"
}

// isConnectAddr reports whether addr is a sandbox a may reach.
func (m *Manager) isConnectAddr(a *attachment, addr netip.Addr) bool {
	t := m.lookup(addr)
	if t == nil {
		return false
	}
	for _, n := range a.getRules().Connect {
		if n == t.name {
			return true
		}
	}
	return false
}

// Addr is the address of a running sandbox, or false.
func (m *Manager) Addr(id string) (netip.Addr, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.byID[id]; a != nil {
		return a.addr, true
	}
	return netip.Addr{}, false
}

// Close stops the DNS server and the proxy, and drops the tag and CIDR
// locks. The firewall and the sandboxes' networks stay, so that running
// sandboxes stay contained while sbxd is down (a new sbxd takes them over
// with Attach).
func (m *Manager) Close() {
	m.dns.close()
	m.proxy.close()
	m.locks.release()
}

// Remove deletes the firewall table and the sandbox network's unreachable
// route (for tests and uninstalling sbxd): sandboxes still running lose
// egress.
func (m *Manager) Remove() error {
	_ = netlink.RouteDel(m.unreachableRoute())
	return m.fw.deleteTable()
}

func (m *Manager) unreachableRoute() *netlink.Route {
	return &netlink.Route{Dst: prefixNet(m.cfg.CIDR.Addr(), m.cfg.CIDR.Bits()), Type: unix.RTN_UNREACHABLE}
}

// learnedAddr is an address the DNS server answered for allowed names.
type learnedAddr struct {
	until time.Time
	names map[string]bool
}

// learnMaxTTL bounds how long a DNS answer keeps its addresses open.
const learnMaxTTL = time.Hour

// learn records addresses the DNS server answered for name, which a's
// rules allow, so that the firewall lets a reach them on any port, for the
// record's TTL (5 minutes to an hour).
func (m *Manager) learn(a *attachment, name string, addrs []netip.Addr, ttl time.Duration) {
	r := a.getRules()
	if !r.Internet || len(r.AllowDomains) == 0 || len(addrs) == 0 {
		return
	}
	ttl = min(max(ttl, learnMinTTL), learnMaxTTL)
	now := time.Now()
	var fresh, refresh []netip.Addr
	a.mu.Lock()
	for _, ad := range addrs {
		l, ok := a.learned[ad]
		if ok && now.Before(l.until) {
			refresh = append(refresh, ad)
		} else {
			l = learnedAddr{names: map[string]bool{}}
			fresh = append(fresh, ad)
		}
		l.until = now.Add(ttl)
		l.names[name] = true
		a.learned[ad] = l
	}
	a.mu.Unlock()
	if err := m.fw.learn(a.ifname, fresh, refresh, ttl); err != nil {
		m.log.Warn("network: learn addresses", "sandbox", a.name, "err", err)
	}
}

// pruneLearned forgets learned addresses none of whose names the rules
// allow any more, and returns the rest with their time left.
func (a *attachment) pruneLearned() map[netip.Addr]time.Duration {
	r := a.getRules()
	now := time.Now()
	keep := map[netip.Addr]time.Duration{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for ad, l := range a.learned {
		ok := false
		if r.Internet && len(r.AllowDomains) > 0 && now.Before(l.until) {
			for n := range l.names {
				if r.AllowConn(n, ad).Allow && anyDomain(r.AllowDomains, n) {
					ok = true
					break
				}
			}
		}
		if ok {
			keep[ad] = l.until.Sub(now)
		} else {
			delete(a.learned, ad)
		}
	}
	return keep
}

func (a *attachment) isLearned(addr netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Now().Before(a.learned[addr].until)
}

// never says why no sandbox may ever reach addr ("" when it may): the
// sandbox network, the host's own addresses, loopback, link-local,
// multicast, broadcast.
func (m *Manager) never(addr netip.Addr) string {
	switch {
	case m.cfg.CIDR.Contains(addr):
		return "an address of the sandbox network: another sandbox (not in this sandbox's connect rules) or sbxd's side"
	case !addr.Is4():
		return "not IPv4"
	case netip.MustParsePrefix("127.0.0.0/8").Contains(addr):
		return "loopback: the host's own services"
	case netip.MustParsePrefix("169.254.0.0/16").Contains(addr):
		return "link-local: where cloud metadata services live"
	case netip.MustParsePrefix("224.0.0.0/3").Contains(addr), addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "multicast or broadcast"
	case netip.MustParsePrefix("0.0.0.0/8").Contains(addr):
		return `"this network" (0.0.0.0/8)`
	case isLocalAddr(addr):
		return "an address of the host"
	}
	return ""
}

// packetReason says which rule refused a packet from a to addr, by a's
// rules now (they may have changed since the packet).
func (m *Manager) packetReason(a *attachment, addr netip.Addr) string {
	if why := m.never(addr); why != "" && !m.isConnectAddr(a, addr) {
		return why
	}
	r := a.getRules()
	switch {
	case !r.Internet:
		return "internet is off"
	case anyCIDR(r.DenyCIDRs, addr):
		return "denied by a deny rule (address)"
	case len(r.AllowCIDRs)+len(r.AllowDomains) > 0 && !anyCIDR(r.AllowCIDRs, addr) && !a.isLearned(addr):
		return "not in the allow list (nor an address DNS answered for an allowed name)"
	}
	return "refused by the firewall (the rules then)"
}

// isLocalAddr reports whether addr is one of the host's.
func isLocalAddr(addr netip.Addr) bool {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == addr {
				return true
			}
		}
	}
	return false
}

// ctxTimeout is a context for one network operation.
func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Check refuses rules that can never work on this host: an allow CIDR
// inside the sandbox network (sandboxes reach each other only by connect).
//
// Errors: ErrInvalidArgument naming the entry.
func (m *Manager) Check(r *Rules) error {
	for _, p := range r.AllowCIDRs {
		if m.cfg.CIDR.Overlaps(p) && p.Bits() >= m.cfg.CIDR.Bits() {
			return errdefs.Invalid("network.allow", "%s is in the sandbox network %s: sandboxes reach each other only through connect", p, m.cfg.CIDR)
		}
	}
	return nil
}

// Log is the audit of a running sandbox's network: counts, and the
// destinations refused recently (by the DNS server, the proxy and the
// firewall), newest first.
//
// Errors: ErrNotRunning-like plain error when the sandbox has no network
// (it is not running); nftables failures.
func (m *Manager) Log(id string) (api.NetworkLog, error) {
	m.mu.Lock()
	a := m.byID[id]
	m.mu.Unlock()
	if a == nil {
		return api.NetworkLog{Refused: []api.NetworkRefusal{}}, nil
	}
	dropped, err := m.fw.listDropped(a.addr)
	if err != nil {
		return api.NetworkLog{}, err
	}
	packets, err := m.fw.drops(a.ifname)
	if err != nil {
		return api.NetworkLog{}, err
	}
	return a.audit.snapshot(dropped, packets, func(d netip.Addr) string { return m.packetReason(a, d) }), nil
}
