package network

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/secret"
)

// MaxRuleEntries bounds each of a rule set's lists.
const MaxRuleEntries = 1000

// Rules are a sandbox's egress rules, parsed: domains and CIDRs apart.
type Rules struct {
	Internet bool
	// Allow and Deny hold domain patterns ("example.org" or
	// "*.example.org", lowercase, without a trailing dot) and prefixes.
	AllowDomains, DenyDomains []string
	AllowCIDRs, DenyCIDRs     []netip.Prefix
	// Connect is the names of sandboxes this one may reach.
	Connect []string
	// Secrets are put into the sandbox's HTTPS requests by the egress
	// proxy (secrets.go); nil for none. They are not part of the API's
	// network rules: the engine adds them.
	Secrets *Secrets
}

// ParseRules validates API rules and returns them parsed, or
// ErrInvalidArgument naming the entry: "allow[2]: ...". A bare IPv4
// address is a /32; IPv6 is refused (sandboxes have IPv4 only); a domain
// must be a host name, not a URL (no scheme, port or path).
func ParseRules(r api.NetworkRules) (*Rules, error) {
	out := &Rules{Internet: r.Internet}
	for _, l := range []struct {
		field   string
		entries []string
		domains *[]string
		cidrs   *[]netip.Prefix
	}{
		{"allow", r.Allow, &out.AllowDomains, &out.AllowCIDRs},
		{"deny", r.Deny, &out.DenyDomains, &out.DenyCIDRs},
	} {
		if len(l.entries) > MaxRuleEntries {
			return nil, errdefs.Invalid("network."+l.field, "%d entries, at most %d", len(l.entries), MaxRuleEntries)
		}
		for i, e := range l.entries {
			field := fmt.Sprintf("network.%s[%d]", l.field, i)
			if p, ok, err := parseAddr(e); ok {
				if err != nil {
					return nil, errdefs.Invalid(field, "%q: %v", e, err)
				}
				*l.cidrs = append(*l.cidrs, p)
				continue
			}
			d, err := parseDomain(e)
			if err != nil {
				return nil, errdefs.Invalid(field, "%q: %v", e, err)
			}
			*l.domains = append(*l.domains, d)
		}
	}
	for _, p := range out.AllowCIDRs {
		for _, ip := range internalPrefixes {
			if ip.Contains(p.Addr()) && ip.Bits() <= p.Bits() {
				return nil, errdefs.Invalid(allowField(r.Allow, p), "%s is never reachable from a sandbox, whatever the rules (loopback, link-local, multicast)", p)
			}
		}
	}
	for _, d := range out.AllowDomains {
		if d == internalDomain || strings.HasSuffix(d, "."+internalDomain) {
			return nil, errdefs.Invalid(allowField(r.Allow, netip.Prefix{}), "%s: names under %s are sandboxes; list them in connect", d, internalDomain)
		}
	}
	if len(r.Connect) > MaxRuleEntries {
		return nil, errdefs.Invalid("network.connect", "%d entries, at most %d", len(r.Connect), MaxRuleEntries)
	}
	out.Connect = dedupe(r.Connect)
	out.AllowDomains, out.DenyDomains = dedupe(out.AllowDomains), dedupe(out.DenyDomains)
	out.AllowCIDRs, out.DenyCIDRs = dedupe(out.AllowCIDRs), dedupe(out.DenyCIDRs)
	return out, nil
}

// allowField names the allow entry that parsed to p ("network.allow").
func allowField(entries []string, p netip.Prefix) string {
	for i, e := range entries {
		if q, ok, err := parseAddr(e); ok && err == nil && q == p {
			return fmt.Sprintf("network.allow[%d]", i)
		}
	}
	return "network.allow"
}

func dedupe[T comparable](xs []T) []T {
	seen := make(map[T]bool, len(xs))
	out := xs[:0:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// API returns the rules in the API's form, canonical: domains lowercase
// without a trailing dot, CIDRs masked (a /32 as the bare address), no
// duplicates; what sbxd stores and answers.
func (r *Rules) API() api.NetworkRules {
	out := api.NetworkRules{Internet: r.Internet, Allow: []string{}, Deny: []string{}, Connect: append([]string{}, r.Connect...)}
	for _, l := range []struct {
		dst     *[]string
		domains []string
		cidrs   []netip.Prefix
	}{{&out.Allow, r.AllowDomains, r.AllowCIDRs}, {&out.Deny, r.DenyDomains, r.DenyCIDRs}} {
		*l.dst = append(*l.dst, l.domains...)
		for _, p := range l.cidrs {
			if p.Bits() == 32 {
				*l.dst = append(*l.dst, p.Addr().String())
			} else {
				*l.dst = append(*l.dst, p.String())
			}
		}
	}
	return out
}

// parseAddr recognises an IP address or CIDR; ok is false for anything
// that is not one (a domain).
func parseAddr(s string) (netip.Prefix, bool, error) {
	if strings.Contains(s, "/") && !strings.Contains(s, "://") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(strings.SplitN(s, "/", 2)[0]); aerr == nil {
				if !a.Is4() {
					return netip.Prefix{}, true, fmt.Errorf("IPv6 is not supported: sandboxes have IPv4 only")
				}
				return netip.Prefix{}, true, fmt.Errorf("not a CIDR: the prefix length must be 0 to 32")
			}
			return netip.Prefix{}, false, nil
		}
		if !p.Addr().Is4() {
			return netip.Prefix{}, true, fmt.Errorf("IPv6 is not supported: sandboxes have IPv4 only")
		}
		if p.Masked() != p {
			return netip.Prefix{}, true, fmt.Errorf("has host bits set: did you mean %s?", p.Masked())
		}
		return p, true, nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Prefix{}, false, nil
	}
	if !a.Is4() {
		return netip.Prefix{}, true, fmt.Errorf("IPv6 is not supported: sandboxes have IPv4 only")
	}
	return netip.PrefixFrom(a, 32), true, nil
}

// parseDomain checks a domain pattern: not a URL, no port, then a host
// name as secret.ParseHostName takes it, optionally "*." first.
func parseDomain(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("empty")
	}
	if strings.Contains(s, "://") {
		return "", fmt.Errorf("is a URL: give the host name only (e.g. %q)", hostOf(s))
	}
	if strings.ContainsAny(s, "/?#@") {
		return "", fmt.Errorf("has a path or user part: give the host name only")
	}
	if strings.Contains(s, ":") {
		return "", fmt.Errorf("has a port: rules apply to every port of a name; give the host name only")
	}
	return secret.ParseHostName(s)
}

func hostOf(u string) string {
	h := u[strings.Index(u, "://")+3:]
	if i := strings.IndexAny(h, "/?#"); i >= 0 {
		h = h[:i]
	}
	if i := strings.LastIndex(h, ":"); i >= 0 {
		h = h[:i]
	}
	return h
}

// matchDomain reports whether name matches a pattern: "example.org" only
// itself, "*.example.org" every name under it (not example.org itself).
func matchDomain(pattern, name string) bool { return secret.MatchHost(pattern, name) }

func anyDomain(patterns []string, name string) bool {
	for _, p := range patterns {
		if matchDomain(p, name) {
			return true
		}
	}
	return false
}

func anyCIDR(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Verdict is a rule decision and its reason (for the audit log).
type Verdict struct {
	Allow  bool
	Reason string
}

// AllowName decides a DNS query for name (and whether the egress proxy may
// look name up). A non-empty allow list allows only the names it lists: an
// allow list of CIDRs alone allows no name at all, so that a sandbox cannot
// carry data out in the names it asks sbxd to resolve upstream
// (exfil-<data>.attacker.example). With no allow list every name not
// denied is allowed.
func (r *Rules) AllowName(name string) Verdict {
	switch {
	case !r.Internet:
		return Verdict{false, "internet is off"}
	case anyDomain(r.DenyDomains, name):
		return Verdict{false, "denied by a deny rule"}
	case len(r.AllowDomains) == 0 && len(r.AllowCIDRs) > 0:
		return Verdict{false, "the allow list names no domain (CIDRs only): no name is resolved"}
	case len(r.AllowDomains) > 0 && !anyDomain(r.AllowDomains, name):
		return Verdict{false, "not in the allow list"}
	}
	return Verdict{true, ""}
}

// AllowConn decides an egress connection to addr, for the name the client
// asked for ("" when it gave none or an IP).
func (r *Rules) AllowConn(name string, addr netip.Addr) Verdict {
	switch {
	case !r.Internet:
		return Verdict{false, "internet is off"}
	case anyCIDR(r.DenyCIDRs, addr):
		return Verdict{false, "denied by a deny rule (address)"}
	case name != "" && anyDomain(r.DenyDomains, name):
		return Verdict{false, "denied by a deny rule (name)"}
	case len(r.AllowDomains) == 0 && len(r.AllowCIDRs) == 0:
		return Verdict{true, ""}
	case anyCIDR(r.AllowCIDRs, addr):
		return Verdict{true, ""}
	case name != "" && anyDomain(r.AllowDomains, name):
		return Verdict{true, ""}
	}
	return Verdict{false, "not in the allow list"}
}

// hasDomains reports whether the rules name any domain.
func (r *Rules) hasDomains() bool { return len(r.AllowDomains) > 0 || len(r.DenyDomains) > 0 }

// proxied reports whether the sandbox's HTTP and HTTPS go through the
// egress proxy: the rules name domains, or the sandbox has secrets.
func (r *Rules) proxied() bool {
	return r.hasDomains() || (r.Secrets != nil && len(r.Secrets.List) > 0)
}

// allowAddr decides a packet to addr by the rules alone, as the firewall's
// forward chain does: connect targets, internal addresses, then internet,
// deny and allow CIDRs, then learned (addresses the DNS server answered for
// allowed names).
func (r *Rules) allowAddr(addr netip.Addr, sandboxNet netip.Prefix, connect, learned func(netip.Addr) bool) bool {
	if connect(addr) {
		return true
	}
	if sandboxNet.Contains(addr) || isInternal(addr) || !r.Internet || anyCIDR(r.DenyCIDRs, addr) {
		return false
	}
	if len(r.AllowCIDRs) == 0 && len(r.AllowDomains) == 0 {
		return true
	}
	return anyCIDR(r.AllowCIDRs, addr) || (len(r.AllowDomains) > 0 && learned(addr))
}

// isInternal reports whether addr is one no sandbox may reach: loopback,
// link-local, "this network", multicast, broadcast, or not IPv4.
func isInternal(addr netip.Addr) bool {
	if !addr.Is4() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	return anyCIDR(internalPrefixes, addr)
}
