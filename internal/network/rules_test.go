package network

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

func TestParseRulesRefuses(t *testing.T) {
	for _, c := range []struct {
		allow, deny []string
		want        string
	}{
		{allow: []string{"https://pypi.org/simple"}, want: `network.allow[0]: "https://pypi.org/simple": is a URL: give the host name only (e.g. "pypi.org")`},
		{allow: []string{"pypi.org:443"}, want: "has a port"},
		{allow: []string{"pypi.org/simple"}, want: "network.allow[0]"},
		{deny: []string{"10.0.0.0/33"}, want: "prefix length must be 0 to 32"},
		{deny: []string{"10.0.0.1/8"}, want: "did you mean 10.0.0.0/8"},
		{allow: []string{"[::1]"}, want: "IPv6"},
		{allow: []string{"2001:db8::/32"}, want: "IPv6"},
		{allow: []string{"300.1.1.1"}, want: "looks like an IPv4 address"},
		{allow: []string{"10.1"}, want: "looks like an IPv4 address"},
		{allow: []string{"*.*.org"}, want: "'*' is allowed only as the whole first label"},
		{allow: []string{"*.org"}, want: "two labels or more"},
		{allow: []string{"localhost"}, want: "no dot"},
		{allow: []string{"127.0.0.0/8"}, want: "never reachable"},
		{allow: []string{"169.254.169.254"}, want: "network.allow[0]: 169.254.169.254/32 is never reachable"},
		{allow: []string{"db.sbx.internal"}, want: "connect"},
		{allow: []string{""}, want: "empty"},
	} {
		_, err := ParseRules(api.NetworkRules{Internet: true, Allow: c.allow, Deny: c.deny})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allow %q deny %q: %v, want %q", c.allow, c.deny, err, c.want)
		}
	}
	many := make([]string, MaxRuleEntries+1)
	for i := range many {
		many[i] = "x.org"
	}
	if _, err := ParseRules(api.NetworkRules{Deny: many}); err == nil || !strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("1001 entries: %v", err)
	}
}

func TestRulesCanonical(t *testing.T) {
	r, err := ParseRules(api.NetworkRules{Internet: true,
		Allow:   []string{"PyPI.org.", "pypi.org", "10.1.0.0/16", "192.0.2.7", "*.Example.ORG"},
		Deny:    []string{"192.0.2.7/32", "192.0.2.7"},
		Connect: []string{"db", "db"}})
	if err != nil {
		t.Fatal(err)
	}
	got := r.API()
	if strings.Join(got.Allow, " ") != "pypi.org *.example.org 10.1.0.0/16 192.0.2.7" ||
		strings.Join(got.Deny, " ") != "192.0.2.7" || strings.Join(got.Connect, " ") != "db" {
		t.Fatalf("canonical form: %+v", got)
	}
}

func TestVerdicts(t *testing.T) {
	r, _ := ParseRules(api.NetworkRules{Internet: true, Allow: []string{"*.example.org", "10.0.0.0/8"}, Deny: []string{"bad.example.org", "10.9.0.0/16"}})
	for _, c := range []struct {
		name string
		addr string
		ok   bool
	}{
		{"a.example.org", "192.0.2.1", true},
		{"example.org", "192.0.2.1", false}, // the wildcard is not the bare name
		{"bad.example.org", "10.1.1.1", false},
		{"", "10.1.1.1", true},
		{"", "10.9.1.1", false},
		{"other.org", "192.0.2.1", false},
	} {
		if v := r.AllowConn(c.name, netip.MustParseAddr(c.addr)); v.Allow != c.ok {
			t.Errorf("%s %s: %+v, want %v", c.name, c.addr, v, c.ok)
		}
	}
	if r.AllowName("bad.example.org").Allow || !r.AllowName("A.Example.Org.").Allow {
		t.Error("names")
	}
	cidrs, _ := ParseRules(api.NetworkRules{Internet: true, Allow: []string{"10.0.0.0/8"}, Deny: []string{"bad.org"}})
	if cidrs.AllowName("x.org").Allow || !cidrs.AllowConn("", netip.MustParseAddr("10.1.1.1")).Allow {
		t.Error("an allow list of CIDRs only: a name is allowed, or its CIDR is not")
	}
	open, _ := ParseRules(api.NetworkRules{Internet: true, Deny: []string{"bad.org"}})
	if !open.AllowName("x.org").Allow || open.AllowName("bad.org").Allow {
		t.Error("no allow list: names are not forwarded as before")
	}
	off, _ := ParseRules(api.NetworkRules{Internet: false, Allow: []string{"x.org"}})
	if off.AllowName("x.org").Allow || off.AllowConn("x.org", netip.MustParseAddr("192.0.2.1")).Allow {
		t.Error("internet off allowed something")
	}
}
