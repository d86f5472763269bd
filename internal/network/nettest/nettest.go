// Package nettest gives network tests a fake outside world on this machine:
// a host in a network namespace of its own behind a veth (HTTP on port 80,
// TLS on 443, any other port on demand) and a DNS server on loopback that
// knows its names. Tests using it need root. No packet leaves the machine.
package nettest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/sbxhq/sbx/internal/network/nsfile"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequireRoot skips t unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables)")
	}
}

// InNS runs f on an OS thread in the network namespace at path: sockets f
// makes belong to that namespace.
func InNS(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		h, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- err // the thread stays locked and dies with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Outside is a fake internet host.
type Outside struct {
	// Addr is its address; the host side of its veth is the address before.
	Addr netip.Addr
	// NS is the path of its network namespace.
	NS string
	// Ifname is the host side of its veth.
	Ifname string
}

// StartOutside makes a namespace holding the second address of subnet
// (the host side of the veth has the first), with HTTP on port 80 and TLS
// (a self-signed certificate for *.test names) on 443; both answer "hello
// from HOST" with the Host the request named. ifname (≤ 15 bytes) names the
// host side. Everything goes when t ends.
func StartOutside(t testing.TB, ifname string, subnet netip.Prefix) *Outside {
	t.Helper()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	return StartOutsideWith(t, ifname, subnet, handler, SelfSigned(t))
}

// StartOutsideWith is StartOutside with handler serving HTTP on port 80
// and, with cert, TLS on 443.
func StartOutsideWith(t testing.TB, ifname string, subnet netip.Prefix, handler http.Handler, cert tls.Certificate) *Outside {
	t.Helper()
	dir := filepath.Join("/run", "sbx-nettest-"+ifname)
	must(t, os.MkdirAll(dir, 0o755))
	must(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH); _ = os.Remove(dir) })
	path := filepath.Join(dir, "ns")
	must(t, nsfile.Create(path))
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	hostAddr := subnet.Addr().Next()
	addr := hostAddr.Next()
	h, err := netns.GetFromPath(path)
	must(t, err)
	defer h.Close()
	if l, err := netlink.LinkByName(ifname); err == nil {
		_ = netlink.LinkDel(l)
	}
	must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifname}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(h))}))
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(ifname); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	l, err := netlink.LinkByName(ifname)
	must(t, err)
	must(t, netlink.AddrAdd(l, &netlink.Addr{IPNet: ipNet(hostAddr, subnet.Bits())}))
	must(t, netlink.LinkSetUp(l))
	nh, err := netlink.NewHandleAt(h)
	must(t, err)
	defer nh.Close()
	for _, n := range []string{"lo", "eth0"} {
		l, err := nh.LinkByName(n)
		must(t, err)
		if n == "eth0" {
			must(t, nh.AddrAdd(l, &netlink.Addr{IPNet: ipNet(addr, subnet.Bits())}))
		}
		must(t, nh.LinkSetUp(l))
		if n == "eth0" {
			must(t, nh.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: hostAddr.AsSlice()}))
		}
	}
	o := &Outside{Addr: addr, NS: path, Ifname: ifname}
	l80 := o.Listen(t, 80)
	l443 := o.Listen(t, 443)
	s := &http.Server{Handler: handler}
	go s.Serve(l80)
	s2 := &http.Server{Handler: handler, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go s2.ServeTLS(l443, "", "")
	t.Cleanup(func() { s.Close(); s2.Close() })
	return o
}

// Listen listens on port of the outside host; the listener closes when t
// ends.
func (o *Outside) Listen(t testing.TB, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	must(t, InNS(o.NS, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(o.Addr, uint16(port)).String())
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Blackhole routes prefix to nowhere on the host until t ends (or, with t
// nil, until the returned func runs), so that a test address with no test
// host behind it at some moment is dropped on this machine instead of
// following the default route out. Routes to test hosts are more specific
// and win.
func Blackhole(t testing.TB, prefix netip.Prefix) func() {
	r := &netlink.Route{Dst: ipNet(prefix.Addr(), prefix.Bits()), Type: unix.RTN_BLACKHOLE}
	_ = netlink.RouteDel(r)
	err := netlink.RouteAdd(r)
	undo := func() { _ = netlink.RouteDel(r) }
	if t != nil {
		t.Helper()
		must(t, err)
		t.Cleanup(undo)
	}
	return undo
}

// SelfSigned is a certificate for outside.test, *.test and *.outside.test.
func SelfSigned(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outside.test"},
		DNSNames:  []string{"outside.test", "*.test", "*.outside.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Upstream is a DNS server on loopback for tests: it answers A queries
// for the names it was given, forwards the names in forward to a real
// resolver (a package mirror's name, for a test that installs packages),
// and answers NXDOMAIN to everything else, so no other name leaves the
// machine. It logs every name that reaches it (Seen).
type Upstream struct {
	// Addr is "127.0.0.1:port" (UDP and TCP).
	Addr string

	mu       sync.Mutex
	names    map[string]netip.Addr
	forward  map[string]bool
	seen     []string
	resolver string
	udp, tcp *dns.Server
}

// NewUpstream starts an Upstream. resolver is the real server ("ip:port")
// that names in forward go to.
func NewUpstream(names map[string]netip.Addr, forward []string, resolver string) (*Upstream, error) {
	u := &Upstream{names: map[string]netip.Addr{}, forward: map[string]bool{}, resolver: resolver}
	for n, a := range names {
		u.Set(n, a)
	}
	for _, n := range forward {
		u.Forward(n)
	}
	// A free UDP port may be taken for TCP: try a few.
	var pc net.PacketConn
	var ln net.Listener
	var err error
	for range 20 {
		if pc, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		if ln, err = net.Listen("tcp4", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		return nil, err
	}
	u.udp = &dns.Server{PacketConn: pc, Handler: u}
	u.tcp = &dns.Server{Listener: ln, Handler: u}
	go u.udp.ActivateAndServe()
	go u.tcp.ActivateAndServe()
	u.Addr = pc.LocalAddr().String()
	return u, nil
}

// StartUpstream is NewUpstream for one test: it stops when t ends.
func StartUpstream(t testing.TB, names map[string]netip.Addr, forward []string, resolver string) *Upstream {
	t.Helper()
	u, err := NewUpstream(names, forward, resolver)
	must(t, err)
	t.Cleanup(u.Close)
	return u
}

// Set makes name resolve to addr.
func (u *Upstream) Set(name string, addr netip.Addr) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.names[strings.ToLower(name)] = addr
}

// Forward sends queries for name to the real resolver.
func (u *Upstream) Forward(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.forward[strings.ToLower(name)] = true
}

// maxSeen bounds the log of queried names.
const maxSeen = 100000

// Seen returns every name queried so far (lowercase, without the trailing
// dot), oldest first: what reached this resolver, for tests that assert a
// name never left sbxd.
func (u *Upstream) Seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// Close stops the server.
func (u *Upstream) Close() {
	_ = u.udp.Shutdown()
	_ = u.tcp.Shutdown()
}

// ServeDNS answers a query.
func (u *Upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	u.mu.Lock()
	if len(u.seen) < maxSeen {
		u.seen = append(u.seen, name)
	}
	fwd := u.forward[name]
	a, ok := u.names[name]
	u.mu.Unlock()
	if fwd && u.resolver != "" {
		if resp, err := dns.Exchange(r, u.resolver); err == nil {
			_ = w.WriteMsg(resp)
			return
		}
		m.Rcode = dns.RcodeServerFailure
		_ = w.WriteMsg(m)
		return
	}
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: a.AsSlice()})
	}
	_ = w.WriteMsg(m)
}

// SystemResolver is the first IPv4 nameserver of /etc/resolv.conf as
// "ip:53", or "".
func SystemResolver() string {
	b, _ := os.ReadFile("/etc/resolv.conf")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				return net.JoinHostPort(f[1], "53")
			}
		}
	}
	return ""
}

// HostAddrs are the host's own IPv4 addresses outside loopback.
func HostAddrs() []netip.Addr {
	var out []netip.Addr
	ifaddrs, _ := net.InterfaceAddrs()
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap().Is4() && !a.IsLoopback() {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// CA is a certificate authority a test makes, for test hosts' TLS: give
// its PEM to what must trust them (SSL_CERT_FILE, a pool).
type CA struct {
	// Cert is the CA's certificate; PEM the same, PEM-encoded.
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA (ECDSA P-256, valid a day).
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "sbx test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool is a cert pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a server certificate for names, signed by the CA.
func (ca *CA) Issue(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	must(t, err)
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key}
}

// Seen is a request a test host received.
type Seen struct {
	Method, Host, Path, Authorization string
}

// Recorder is an HTTP handler that answers "hello from HOST" and records
// every request it gets.
type Recorder struct {
	mu   sync.Mutex
	seen []Seen
}

// ServeHTTP records r and answers.
func (rec *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.seen = append(rec.seen, Seen{Method: r.Method, Host: r.Host, Path: r.URL.Path, Authorization: r.Header.Get("Authorization")})
	rec.mu.Unlock()
	fmt.Fprintf(w, "hello from %s", r.Host)
}

// Seen returns the requests received so far, oldest first.
func (rec *Recorder) Seen() []Seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Seen(nil), rec.seen...)
}

// ServeTLS serves rec over TLS with cert on ln until t ends.
func (rec *Recorder) ServeTLS(t testing.TB, ln net.Listener, cert tls.Certificate) {
	s := &http.Server{Handler: rec, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go s.ServeTLS(ln, "", "")
	t.Cleanup(func() { s.Close() })
}
