package network

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// internalDomain holds the names of sandboxes: "web.sbx.internal" (or just
// "web") is the sandbox named web, for a sandbox whose connect rules name
// it.
const internalDomain = "sbx.internal"

// dnsServer is the resolver of every sandbox: the firewall redirects their
// UDP and TCP port 53, whatever the address, to it. It tells sandboxes
// apart by source address (the guard chain drops spoofed ones), answers
// sandbox names itself, refuses names the rules do not allow (NXDOMAIN with
// an Extended DNS Error, RFC 8914, "Prohibited"), answers AAAA queries
// empty (sandboxes have IPv4 only), and forwards the rest upstream.
type dnsServer struct {
	m        *Manager
	port     uint16
	udp, tcp *dns.Server
}

// startDNS listens on UDP and TCP on one free port on every address.
func startDNS(m *Manager) (*dnsServer, error) {
	s := &dnsServer{m: m}
	var lastErr error
	for range 20 {
		pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
		if err != nil {
			return nil, fmt.Errorf("dns server: %w", err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			pc.Close()
			lastErr = err
			continue
		}
		s.port = uint16(port)
		s.udp = &dns.Server{PacketConn: pc, Handler: s, UDPSize: 65535}
		s.tcp = &dns.Server{Listener: ln, Handler: s, ReadTimeout: 10 * time.Second}
		go func() { _ = s.udp.ActivateAndServe() }()
		go func() { _ = s.tcp.ActivateAndServe() }()
		return s, nil
	}
	return nil, fmt.Errorf("dns server: no port free for both UDP and TCP: %w", lastErr)
}

func (s *dnsServer) close() {
	_ = s.udp.Shutdown()
	_ = s.tcp.Shutdown()
}

// ServeDNS answers one query.
func (s *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	reply := func(m *dns.Msg) { _ = w.WriteMsg(m) }
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	src := addrOf(w.RemoteAddr())
	a := s.m.lookup(src)
	if a == nil {
		m.Rcode = dns.RcodeRefused
		reply(m)
		return
	}
	if r.Opcode != dns.OpcodeQuery || len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		reply(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	if strings.HasSuffix(name, "."+internalDomain) && strings.Count(name, ".") > 2 {
		// "example.org.sbx.internal": the resolver's search list at work.
		m.Rcode = dns.RcodeNameError
		reply(m)
		return
	}
	if target, ok := sandboxName(name); ok {
		addr, why := s.m.connectAddr(a, target)
		if why != "" {
			a.audit.refuse("dns", name, "", 0, why)
			m.Rcode = dns.RcodeNameError
			reply(m)
			return
		}
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
				A:   addr.AsSlice(),
			})
		}
		m.Authoritative = true
		a.audit.allowed("dns")
		reply(m)
		return
	}
	if isSandboxReverse(name, s.m.cfg.CIDR) {
		m.Rcode = dns.RcodeNameError
		reply(m)
		return
	}
	if v := a.getRules().AllowName(name); !v.Allow {
		a.audit.refuse("dns", name, "", 0, v.Reason)
		m.Rcode = dns.RcodeNameError
		if opt := r.IsEdns0(); opt != nil {
			m.SetEdns0(opt.UDPSize(), false)
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{
				InfoCode: dns.ExtendedErrorCodeProhibited, ExtraText: "sbx: " + v.Reason,
			})
		}
		reply(m)
		return
	}
	if q.Qtype == dns.TypeAAAA {
		// No IPv6 in sandboxes: an empty answer makes clients use IPv4.
		a.audit.allowed("dns")
		reply(m)
		return
	}
	ctx, cancel := ctxTimeout(8 * time.Second)
	defer cancel()
	_, isTCP := w.RemoteAddr().(*net.TCPAddr)
	resp, err := s.m.up.exchange(ctx, r, isTCP)
	if err != nil || resp == nil {
		m.Rcode = dns.RcodeServerFailure
		reply(m)
		return
	}
	resp.Id = r.Id
	if addrs, ttl := answerAddrs(resp); len(addrs) > 0 {
		s.m.learn(a, name, addrs, ttl)
	}
	a.audit.allowed("dns")
	reply(resp)
}

// sandboxName recognises a name for a sandbox: one label ("web"), or one
// label under sbx.internal.
func sandboxName(name string) (string, bool) {
	if rest, ok := strings.CutSuffix(name, "."+internalDomain); ok {
		return rest, !strings.Contains(rest, ".") && rest != ""
	}
	return name, name != "" && !strings.Contains(name, ".")
}

// isSandboxReverse reports whether name is a reverse lookup
// (in-addr.arpa) of an address in the sandbox network.
func isSandboxReverse(name string, cidr netip.Prefix) bool {
	rest, ok := strings.CutSuffix(name, ".in-addr.arpa")
	if !ok {
		return false
	}
	p := strings.Split(rest, ".")
	if len(p) != 4 {
		return false
	}
	a, err := netip.ParseAddr(p[3] + "." + p[2] + "." + p[1] + "." + p[0])
	return err == nil && cidr.Contains(a)
}

// addrOf is the IP of a UDP or TCP address.
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}
