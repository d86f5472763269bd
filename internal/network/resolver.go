package network

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// resolver asks the upstream DNS server, for the DNS server's forwarding
// and for the proxy's "what does this name resolve to". The proxy's A
// lookups are cached for their TTL (at least 5 s, at most 5 min).
type resolver struct {
	upstream string
	udp, tcp *dns.Client

	mu    sync.Mutex
	cache map[string]cachedA
}

type cachedA struct {
	addrs []netip.Addr
	until time.Time
}

func newResolver(upstream string) *resolver {
	return &resolver{
		upstream: upstream,
		udp:      &dns.Client{Net: "udp", Timeout: 5 * time.Second},
		tcp:      &dns.Client{Net: "tcp", Timeout: 5 * time.Second},
		cache:    map[string]cachedA{},
	}
}

// exchange forwards a query; a truncated UDP answer is retried over TCP
// when tcp is true (the client asked over TCP).
func (r *resolver) exchange(ctx context.Context, q *dns.Msg, tcp bool) (*dns.Msg, error) {
	c := r.udp
	if tcp {
		c = r.tcp
	}
	resp, _, err := c.ExchangeContext(ctx, q, r.upstream)
	if err == nil && resp.Truncated && !tcp {
		return resp, nil
	}
	return resp, err
}

// lookupA returns the IPv4 addresses of name, and the least TTL.
//
// Errors: the name does not exist, has no A record, or the upstream fails.
func (r *resolver) lookupA(ctx context.Context, name string) ([]netip.Addr, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	r.mu.Lock()
	if c, ok := r.cache[name]; ok && time.Now().Before(c.until) {
		r.mu.Unlock()
		return c.addrs, nil
	}
	r.mu.Unlock()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	resp, err := r.exchange(ctx, q, false)
	if err == nil && resp.Truncated {
		resp, err = r.exchange(ctx, q, true)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("resolve %s: %s", name, dns.RcodeToString[resp.Rcode])
	}
	addrs, ttl := answerAddrs(resp)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no IPv4 address", name)
	}
	ttl = min(max(ttl, 5*time.Second), 5*time.Minute)
	r.mu.Lock()
	if len(r.cache) > 10000 {
		clear(r.cache)
	}
	r.cache[name] = cachedA{addrs, time.Now().Add(ttl)}
	r.mu.Unlock()
	return addrs, nil
}

// answerAddrs are the A records of an answer and their least TTL.
func answerAddrs(m *dns.Msg) ([]netip.Addr, time.Duration) {
	var addrs []netip.Addr
	ttl := time.Duration(-1)
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				addrs = append(addrs, ip)
				t := time.Duration(a.Hdr.Ttl) * time.Second
				if ttl < 0 || t < ttl {
					ttl = t
				}
			}
		}
	}
	return addrs, max(ttl, 0)
}
