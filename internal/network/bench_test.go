package network

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"

	"github.com/miekg/dns"
	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/network/nettest"
	"github.com/sbxhq/sbx/internal/network/nsfile"
	"golang.org/x/sys/unix"
)

// benchProxy is an egress proxy on loopback that sends every connection to
// target, as if the firewall had redirected it there, for a sandbox whose
// rules allow "bench.test" (which resolves to target).
func benchProxy(b *testing.B, target netip.AddrPort) *proxy {
	b.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := newProxy(ln)
	r, _ := ParseRules(api.NetworkRules{Internet: true, Allow: []string{"bench.test"}})
	a := &attachment{rules: r, audit: newAuditLog(), learned: map[netip.Addr]learnedAddr{}}
	p.lookup = func(netip.Addr) *attachment { return a }
	p.origDst = func(*net.TCPConn) (netip.AddrPort, error) { return target, nil }
	p.resolve = func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{target.Addr()}, nil }
	p.never = func(*attachment, netip.Addr) string { return "" }
	go p.serve()
	b.Cleanup(p.close)
	return p
}

// BenchmarkProxyHTTP: one HTTP/1.1 request on a new connection to a server
// on loopback, direct and through the egress proxy (Host checked, name
// resolved, upstream dialled, bytes spliced). The difference is the
// latency the proxy adds.
func BenchmarkProxyHTTP(b *testing.B) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	target := netip.MustParseAddrPort(ln.Addr().String())
	p := benchProxy(b, target)
	for _, c := range []struct{ name, addr string }{
		{"direct", target.String()},
		{"proxy", fmt.Sprintf("127.0.0.1:%d", p.port)},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp4", c.addr)
			}}
			cl := &http.Client{Transport: tr}
			for b.Loop() {
				resp, err := cl.Get("http://bench.test/")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}

// BenchmarkProxyThroughput: 256 MiB per op from a loopback server through
// the egress proxy (MB/s is the throughput; 125 MB/s is 1 Gbit/s).
func BenchmarkProxyThroughput(b *testing.B) {
	const size = 256 << 20
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	buf := make([]byte, 1<<20)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				head := make([]byte, 4096)
				_, _ = c.Read(head) // the request head
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
				for n := 0; n < size; n += len(buf) {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	p := benchProxy(b, netip.MustParseAddrPort(ln.Addr().String()))
	b.SetBytes(size)
	for b.Loop() {
		c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(int(p.port)))
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n")
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		if n < size {
			b.Fatalf("read %d bytes", n)
		}
	}
}

// BenchmarkNetworkCreate: making a sandbox's network (veth, addresses,
// route, firewall rules), what it adds to a boot, against a bare namespace
// (a sandbox without networking). Deletes run with the timer stopped
// (removing a veth waits for RCU: 20-40 ms, off the boot path).
func BenchmarkNetworkCreate(b *testing.B) {
	nettest.RequireRoot(b)
	m := benchManager(b)
	r, _ := ParseRules(api.NetworkRules{Internet: true})
	b.Run("bare-netns", func(b *testing.B) {
		path := m.nsPath("bench")
		for b.Loop() {
			if err := nsfile.Create(path); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := nsfile.Delete(path); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("veth+rules", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Create("sbx_benchbenchbench0", "bench", r); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := m.Delete("sbx_benchbenchbench0"); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// BenchmarkRulesUpdate: PUT-network's work for one sandbox among 50
// running ones (firewall rewritten in one transaction, proxy and conntrack
// rechecked): the time for a rules change to take effect.
func BenchmarkRulesUpdate(b *testing.B) {
	nettest.RequireRoot(b)
	m := benchManager(b)
	open, _ := ParseRules(api.NetworkRules{Internet: true})
	narrow, _ := ParseRules(api.NetworkRules{Internet: true, Allow: []string{"pypi.org", "*.pythonhosted.org"}, Deny: []string{"10.0.0.0/8"}})
	for i := range 50 {
		if _, err := m.Create(fmt.Sprintf("sbx_%010dbenc", i), fmt.Sprintf("b%d", i), open); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		r := open
		if i%2 == 0 {
			r = narrow
		}
		i++
		if err := m.Update("sbx_0000000007benc", r); err != nil {
			b.Fatal(err)
		}
	}
}

func benchManager(b *testing.B, upstream ...string) *Manager {
	b.Helper()
	up := "127.0.0.1:1"
	if len(upstream) > 0 {
		up = upstream[0]
	}
	m, err := NewManager(Config{NetnsDir: b.TempDir(), CIDR: netip.MustParsePrefix("10.234.0.0/24"), Tag: "bnch", Upstream: up})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for id := range m.byID {
			_ = m.Delete(id)
		}
		m.Close()
		_ = m.Remove()
		_ = unix.Unmount(m.cfg.NetnsDir, unix.MNT_DETACH)
	})
	return m
}

// BenchmarkDNS: a query from inside a sandbox's namespace to sbxd's DNS
// server: a sandbox name it answers itself, and an allowed name it
// forwards (to an upstream on loopback).
func BenchmarkDNS(b *testing.B) {
	nettest.RequireRoot(b)
	up := nettest.StartUpstream(b, map[string]netip.Addr{"pypi.org": netip.MustParseAddr("192.0.2.10")}, nil, "")
	m := benchManager(b, up.Addr)
	r, _ := ParseRules(api.NetworkRules{Internet: true, Allow: []string{"pypi.org"}, Connect: []string{"db"}})
	path, err := m.Create("sbx_1benchbenchbenc", "app", r)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Create("sbx_2benchbenchbenc", "db", r); err != nil {
		b.Fatal(err)
	}
	var conn net.Conn
	if err := nettest.InNS(path, func() (err error) {
		conn, err = net.Dial("udp4", m.serviceAddr().String()+":53")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	dc := &dns.Conn{Conn: conn}
	for _, name := range []string{"db", "pypi.org"} {
		b.Run(name, func(b *testing.B) {
			q := new(dns.Msg)
			q.SetQuestion(dns.Fqdn(name), dns.TypeA)
			for b.Loop() {
				if err := dc.WriteMsg(q); err != nil {
					b.Fatal(err)
				}
				resp, err := dc.ReadMsg()
				if err != nil || len(resp.Answer) != 1 {
					b.Fatalf("%v %v", resp, err)
				}
			}
		})
	}
}
