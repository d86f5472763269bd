package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/network/nettest"
)

// Network tests send packets only to hosts in namespaces they make
// (nettest.Outside), to loopback, and, in TestNetworkAptMirror, to the
// Debian mirror of the machine's apt settings. Names of test hosts are
// answered by the test DNS upstream (upstream).

// vethOf is the host side of sandbox id's veth under d.
func vethOf(d *harness, id string) string {
	s := strings.TrimPrefix(id, "sbx_")
	if n := 15 - len(d.netTag) - 1; len(s) > n {
		s = s[:n]
	}
	return d.netTag + "-" + s
}

// nftChains lists the chains of table inet tag as " name name ".
func nftChains(t *testing.T, tag string) string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, ch := range chains {
		if ch.Table.Name == tag {
			b.WriteString(" " + ch.Name + " ")
		}
	}
	return b.String()
}

// removeNetwork deletes what a test sbxd's network left: its table,
// interfaces and the unreachable route of its CIDR (sbxd keeps them while
// sandboxes may run). cidr may be "" (a sbxd that never started).
func removeNetwork(tag, cidr string) {
	if p, err := netip.ParsePrefix(cidr); err == nil {
		_ = netlink.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}, Type: unix.RTN_UNREACHABLE})
	}
	if tag == "" {
		return
	}
	if c, err := nftables.New(); err == nil {
		t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tag}
		c.AddTable(t)
		c.DelTable(t)
		_ = c.Flush()
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, tag+"-") {
			_ = netlink.LinkDel(l)
		}
	}
}

// aptMirrorHosts are the hosts of the machine's enabled apt sources
// (one-line .list and deb822 .sources files).
func aptMirrorHosts() []string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append(files, "/etc/apt/sources.list")
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".list") && !strings.HasSuffix(f, ".sources") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "#") {
				continue
			}
			for _, w := range strings.Fields(line) {
				if u, ok := strings.CutPrefix(w, "http://"); ok || strings.HasPrefix(w, "https://") {
					if !ok {
						u = strings.TrimPrefix(w, "https://")
					}
					host := strings.SplitN(u, "/", 2)[0]
					if !seen[host] {
						seen[host] = true
						out = append(out, host)
					}
				}
			}
		}
	}
	return out
}

// debianSources is the machine's deb822 Debian source file, for a sandbox
// to install from the same mirror.
func debianSources(t *testing.T) (content, host string) {
	t.Helper()
	b, err := os.ReadFile("/etc/apt/sources.list.d/debian.sources")
	if err != nil {
		t.Skip("no /etc/apt/sources.list.d/debian.sources on this machine")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if u, ok := strings.CutPrefix(line, "URIs: http://"); ok {
			return string(b), strings.SplitN(u, "/", 2)[0]
		}
	}
	t.Skip("the machine's Debian source has no http URI")
	return "", ""
}

// outsideNet holds the fake internet hosts of this run; the harness
// routes all of it to a blackhole, so nothing sent to an address of it
// leaves the machine, whether a test host is up or not.
var outsideNet = netip.MustParsePrefix("10.239.0.0/16")

// startOutside makes the fake internet host (always at the same address
// within a run, so that sbxd's cache of outside.test stays true) and names
// it outside.test, api.outside.test and evil.test in the test DNS
// upstream.
func startOutside(t *testing.T) *nettest.Outside {
	t.Helper()
	subnet := netip.MustParsePrefix(fmt.Sprintf("10.239.%d.0/24", os.Getpid()%250))
	o := nettest.StartOutside(t, fmt.Sprintf("eo%d", os.Getpid()%100000), subnet)
	for _, n := range []string{"outside.test", "api.outside.test", "evil.test"} {
		upstream.Set(n, o.Addr)
	}
	return o
}

func TestNetworkEgress(t *testing.T) {
	ctx := ctxT(t)
	out := startOutside(t)
	extra := out.Listen(t, 8080)
	go func() {
		for {
			c, err := extra.Accept()
			if err != nil {
				return
			}
			// Read the request first: closing with it unread would reset
			// the connection before curl reads the answer.
			br := bufio.NewReader(c)
			for {
				l, err := br.ReadString('\n')
				if err != nil || l == "\r\n" {
					break
				}
			}
			fmt.Fprint(c, "HTTP/1.0 200 OK\r\n\r\nport 8080")
			c.Close()
		}
	}()
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{
		Internet: true, Allow: []string{"outside.test", "*.outside.test"},
	}})
	if !sb.Sandbox.Network.Internet || len(sb.Sandbox.Network.Allow) != 2 {
		t.Fatalf("the sandbox object's rules: %+v", sb.Sandbox.Network)
	}
	addr := out.Addr.String()

	t.Run("allowed names pass, by HTTP and TLS", func(t *testing.T) {
		if got := mustSh(t, sb, "curl -sS -m 5 http://outside.test/"); got != "hello from outside.test" {
			t.Fatalf("http: %q", got)
		}
		if got := mustSh(t, sb, "curl -sS -m 5 -k https://api.outside.test/"); got != "hello from api.outside.test" {
			t.Fatalf("https: %q", got)
		}
	})
	t.Run("other names are refused", func(t *testing.T) {
		if res := sh(t, sb, "getent hosts evil.test"); res.ExitCode == 0 {
			t.Fatalf("evil.test resolved: %q", res.Stdout)
		}
		// With the address given by hand, the proxy refuses by name.
		res := sh(t, sb, "curl -sS -m 5 --resolve evil.test:80:"+addr+" http://evil.test/ -w ' %{http_code}'")
		if !strings.HasSuffix(res.Stdout, " 403") || !strings.Contains(res.Stdout, "refused") {
			t.Fatalf("http to evil.test: %+v", res)
		}
		if res := sh(t, sb, "curl -sS -m 5 -k --resolve evil.test:443:"+addr+" https://evil.test/"); res.ExitCode == 0 {
			t.Fatalf("https to evil.test passed: %q", res.Stdout)
		}
	})
	t.Run("CIDR deny wins, on any port", func(t *testing.T) {
		// outside.test's address was answered by DNS for an allowed name,
		// so other ports of it are open...
		if got := mustSh(t, sb, "curl -sS -m 5 http://"+addr+":8080/"); got != "port 8080" {
			t.Fatalf("port 8080: %q", got)
		}
		// ...until a deny rule covers it.
		_, err := sb.Network().Set(ctx, api.NetworkRules{Internet: true, Allow: []string{"outside.test"}, Deny: []string{out.Addr.String()}})
		if err != nil {
			t.Fatal(err)
		}
		if res := sh(t, sb, "curl -sS -m 3 http://"+addr+":8080/"); res.ExitCode == 0 {
			t.Fatalf("a denied address answered: %q", res.Stdout)
		}
	})
	t.Run("internet off applies at once", func(t *testing.T) {
		if _, err := sb.Network().Set(ctx, api.NetworkRules{Internet: true, Allow: []string{"outside.test"}}); err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb, "curl -sS -m 5 http://outside.test/ >/dev/null")
		start := time.Now()
		if _, err := sb.Network().Set(ctx, api.NetworkRules{Internet: false}); err != nil {
			t.Fatal(err)
		}
		t.Logf("PUT network answered in %v", time.Since(start))
		if res := sh(t, sb, "curl -sS -m 3 http://outside.test/"); res.ExitCode == 0 {
			t.Fatalf("internet off, yet: %q", res.Stdout)
		}
		got, err := sb.Network().Get(ctx)
		if err != nil || got.Internet {
			t.Fatalf("GET network: %+v, %v", got, err)
		}
	})
	t.Run("the audit log says what was refused", func(t *testing.T) {
		l, err := sb.Network().Log(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range l.Refused {
			seen[e.Kind+" "+e.Destination] = true
		}
		for _, want := range []string{"dns evil.test", "http evil.test", "tls evil.test", "packet " + addr} {
			if !seen[want] {
				t.Errorf("no %q in the log: %+v", want, l.Refused)
			}
		}
		if l.Counts.DNSAnswered == 0 || l.Counts.ConnectionsAllowed == 0 || l.Counts.PacketsRefused == 0 {
			t.Errorf("counts: %+v", l.Counts)
		}
	})
}

func TestNetworkBadRules(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	long := make([]string, 1001)
	for i := range long {
		long[i] = fmt.Sprintf("h%d.example.org", i)
	}
	for _, c := range []struct {
		rules api.NetworkRules
		want  string
	}{
		{api.NetworkRules{Internet: true, Allow: []string{"https://pypi.org/simple"}}, "network.allow[0]"},
		{api.NetworkRules{Internet: true, Allow: []string{"pypi.org", "pypi.org:443"}}, "network.allow[1]"},
		{api.NetworkRules{Internet: true, Deny: []string{"10.0.0.0/33"}}, "network.deny[0]"},
		{api.NetworkRules{Internet: true, Deny: []string{"10.0.0.1/8"}}, "10.0.0.0/8"},
		{api.NetworkRules{Internet: true, Allow: []string{"*.*.org"}}, "network.allow[0]"},
		{api.NetworkRules{Internet: true, Allow: []string{"2001:db8::/32"}}, "IPv6"},
		{api.NetworkRules{Internet: true, Connect: []string{"no-such-sandbox"}}, "network.connect[0]"},
		{api.NetworkRules{Internet: true, Allow: long}, "at most 1000"},
	} {
		_, err := sb.Network().Set(ctx, c.rules)
		e := wantCode(t, err, api.CodeInvalidArgument)
		if !strings.Contains(e.Message, c.want) {
			t.Errorf("%+v: message %q lacks %q", c.rules, e.Message, c.want)
		}
	}
	// Nothing changed, and a create with bad rules makes nothing.
	if got, _ := sb.Network().Get(ctx); !got.Internet || len(got.Allow) != 0 {
		t.Fatalf("rules changed by failed PUTs: %+v", got)
	}
	_, err := h.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "busybox", Name: "bad-net", Network: &api.NetworkRules{Allow: []string{"x.org/path"}}})
	wantCode(t, err, api.CodeInvalidArgument)
	if _, err := h.c.Sandboxes.Get(ctx, "bad-net"); err == nil {
		t.Fatal("a create with bad rules left a sandbox")
	}
	// A bare address is a /32.
	got, err := sb.Network().Set(ctx, api.NetworkRules{Internet: true, Deny: []string{"192.0.2.7"}})
	if err != nil || got.Deny[0] != "192.0.2.7" {
		t.Fatalf("bare address: %+v, %v", got, err)
	}
}

// TestNetworkRootCannotEscape: root in the sandbox changes its addresses
// and routes and still reaches nothing the rules deny, nor the host.
func TestNetworkRootCannotEscape(t *testing.T) {
	out := startOutside(t)
	ln := out.Listen(t, 8080)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.0 200 OK\r\n\r\nreached")
			c.Close()
		}
	}()
	// A service of the host on every address, like sbxd's --listen.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.0 200 OK\r\n\r\nreached")
			c.Close()
		}
	}()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{
		Internet: true, Deny: []string{out.Addr.String()},
	}})
	myAddr := strings.Fields(mustSh(t, sb, "ip -4 -o addr show eth0 | awk '{print $4}'"))[0]
	gw := strings.Fields(mustSh(t, sb, "ip route show default | awk '{print $3}'"))[0]
	// Try to become someone else: another address, new routes, a new MAC.
	tries := sh(t, sb, "id -u; ip addr add 10.239.250.9/24 dev eth0; ip addr flush dev eth0; ip addr add 10.239.250.9/24 dev eth0;"+
		" ip route replace default via "+gw+" dev eth0 onlink; ip link set eth0 address 02:00:00:00:00:99;"+
		" ip route add "+out.Addr.String()+"/32 dev eth0; ip addr; ip route")
	t.Logf("root's attempts (was %s):\n%s%s", myAddr, tries.Stdout, tries.Stderr)
	if !strings.HasPrefix(tries.Stdout, "0\n") {
		t.Fatalf("not root in the sandbox: %q", tries.Stdout)
	}
	targets := []string{out.Addr.String() + ":8080", gw + fmt.Sprintf(":%d", hostPort)}
	for _, a := range nettest.HostAddrs() {
		targets = append(targets, fmt.Sprintf("%s:%d", a, hostPort))
	}
	for _, a := range targets {
		if res := sh(t, sb, "curl -sS -m 2 http://"+a+"/"); strings.Contains(res.Stdout, "reached") {
			t.Errorf("root in the sandbox reached %s", a)
		}
	}
}

func TestNetworkConnect(t *testing.T) {
	srv := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{Internet: false}})
	cli := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{Internet: false, Connect: []string{srv.Name}}})
	other := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	mustSh(t, srv, "mkdir -p /srv && echo from-srv > /srv/index.html && cd /srv && (setsid python3 -m http.server 8000 >/dev/null 2>&1 &)")
	mustSh(t, cli, "echo from-cli > /tmp/index.html && cd /tmp && (setsid python3 -m http.server 8001 >/dev/null 2>&1 &)")
	srvAddr := strings.TrimSpace(mustSh(t, srv, "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1"))
	cliAddr := strings.TrimSpace(mustSh(t, cli, "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1"))
	// By name (search sbx.internal) and by address.
	var got string
	for i := 0; i < 50; i++ {
		if res := sh(t, cli, "curl -sS -m 3 http://"+srv.Name+":8000/index.html"); res.ExitCode == 0 {
			got = strings.TrimSpace(res.Stdout)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "from-srv" {
		t.Fatalf("client could not reach %s by name: %q", srv.Name, got)
	}
	if got := strings.TrimSpace(mustSh(t, cli, "curl -sS -m 3 http://"+srvAddr+":8000/index.html")); got != "from-srv" {
		t.Fatalf("by address: %q", got)
	}
	// Not the other way, and not from a sandbox without the rule.
	if res := sh(t, srv, "curl -sS -m 3 http://"+cliAddr+":8001/index.html"); res.ExitCode == 0 {
		t.Fatalf("srv reached cli without a connect rule: %q", res.Stdout)
	}
	if res := sh(t, other, "curl -sS -m 3 http://"+srvAddr+":8000/index.html"); res.ExitCode == 0 {
		t.Fatalf("another sandbox reached srv: %q", res.Stdout)
	}
	if res := sh(t, other, "getent hosts "+srv.Name); res.ExitCode == 0 {
		t.Fatalf("another sandbox resolved %s: %q", srv.Name, res.Stdout)
	}
	// Deleting srv takes it out of cli's rules: a later sandbox of the same
	// name is not reachable by rules written for this one.
	ctx := ctxT(t)
	if err := srv.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rules, err := cli.Network().Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rules.Connect) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect still names the deleted sandbox: %+v", rules)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNetworkForkOffline: a fork started offline has its own rules; the
// original keeps its own.
func TestNetworkForkOffline(t *testing.T) {
	ctx := ctxT(t)
	startOutside(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{Internet: true, Allow: []string{"outside.test"}}})
	mustSh(t, sb, "curl -sS -m 5 http://outside.test/ >/dev/null")
	res, err := sb.Fork(ctx, api.ForkRequest{Name: sb.Name + "-trial", Network: &api.NetworkRules{Internet: false}})
	if err != nil {
		t.Fatal(err)
	}
	cp := res.Copies[0]
	if cp == nil {
		t.Fatal(res.Errors[0])
	}
	t.Cleanup(func() { _ = cp.Delete(ctx) })
	rules, err := cp.Network().Get(ctx)
	if err != nil || rules.Internet {
		t.Fatalf("the copy's rules: %+v, %v", rules, err)
	}
	if res := sh(t, cp, "curl -sS -m 3 http://outside.test/"); res.ExitCode == 0 {
		t.Fatalf("the offline copy reached outside.test: %q", res.Stdout)
	}
	if res := sh(t, sb, "curl -sSv -m 5 http://outside.test/"); res.Stdout != "hello from outside.test" {
		t.Fatalf("the original lost its network: %+v", res)
	}
	if rules, _ := sb.Network().Get(ctx); !rules.Internet {
		t.Fatalf("the original's rules changed: %+v", rules)
	}
}

// TestNetworkCrashAndCleanup: rules hold across a crash of sbxd (the
// firewall stays while sbxd is down, and the new sbxd takes over), what a
// crash left is removed, and a deleted sandbox leaves no interface,
// namespace or chain.
func TestNetworkCrashAndCleanup(t *testing.T) {
	ctx := ctxT(t)
	startOutside(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{Internet: true, Allow: []string{"outside.test"}}})
	mustSh(t, sb, "curl -sS -m 5 http://outside.test/ >/dev/null")
	h.kill()
	// While sbxd is down: the sandbox's chain still holds.
	if !strings.Contains(nftChains(t, h.netTag), " sb-"+vethOf(h, sb.ID)+" ") {
		t.Fatal("the sandbox's rules went with sbxd")
	}
	orphan := h.netTag + "-orphan0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: orphan}, PeerName: h.netTag + "-orphan1"}); err != nil {
		t.Fatal(err)
	}
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(orphan); err == nil {
		t.Error("an orphan interface survived sbxd's start")
	}
	if got := mustSh(t, sb, "curl -sS -m 5 http://outside.test/"); got != "hello from outside.test" {
		t.Fatalf("after the restart: %q", got)
	}
	if res := sh(t, sb, "curl -sS -m 5 --resolve evil.test:80:"+strings.TrimSpace(mustSh(t, sb, "getent hosts outside.test | awk '{print $1}'"))+" http://evil.test/ -w ' %{http_code}'"); !strings.HasSuffix(res.Stdout, " 403") {
		t.Fatalf("rules not enforced after the restart: %+v", res)
	}
	id := sb.ID
	if err := sb.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if left := hostLeftovers(t, id); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestNetworkAptMirror installs a package from the machine's Debian mirror
// with only that mirror allowed, then sees the install refused, with the
// reason in the audit log, once the mirror is not allowed.
func TestNetworkAptMirror(t *testing.T) {
	ctx := ctxT(t)
	sources, mirror := debianSources(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{Internet: true, Allow: []string{mirror}}})
	if err := sb.WriteFile(ctx, "/etc/apt/sources.list.d/debian.sources", strings.NewReader(sources), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "rm -f /etc/apt/sources.list; ls /etc/apt/sources.list.d/ | grep -vx debian.sources | sed 's|^|/etc/apt/sources.list.d/|' | xargs -r rm -f")
	res := sh(t, sb, "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q hello && hello")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Hello, world!") {
		t.Fatalf("install from %s: exit %d\n%s\n%s", mirror, res.ExitCode, tailStr(res.Stdout, 2000), tailStr(res.Stderr, 2000))
	}
	if _, err := sb.Network().Set(ctx, api.NetworkRules{Internet: true, Allow: []string{"outside.test"}}); err != nil {
		t.Fatal(err)
	}
	res = sh(t, sb, "apt-get clean; rm -rf /var/lib/apt/lists/*; apt-get update -q 2>&1; apt-get install -y -q cowsay 2>&1")
	if res.ExitCode == 0 {
		t.Fatalf("install passed with the mirror not allowed:\n%s", tailStr(res.Stdout, 2000))
	}
	l, err := sb.Network().Log(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range l.Refused {
		if e.Kind == "dns" && e.Destination == mirror && e.Reason != "" {
			found = true
		}
	}
	if !found {
		t.Fatalf("the log does not say %s was refused: %+v", mirror, l.Refused)
	}
}

func tailStr(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
