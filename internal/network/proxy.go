package network

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// sniffTimeout bounds how long the proxy waits for the first bytes of a
// connection (the TLS ClientHello or the HTTP request head) before it
// decides by address alone.
const sniffTimeout = 5 * time.Second

// maxHead bounds an HTTP request head the proxy reads for its Host.
const maxHead = 64 << 10

// proxy is the egress proxy: the firewall redirects to it the TCP 80 and
// 443 connections of sandboxes whose rules name domains. For each it reads
// the name the client asked for (TLS SNI, or the HTTP Host header),
// resolves it itself, and connects only to an address of that name (the
// one the client dialled if it is one of them), and only if the rules
// allow the name or the address. A refused HTTP request gets a 403 that
// says why; a refused TLS connection is closed.
type proxy struct {
	ln   net.Listener
	port uint16

	lookup  func(src netip.Addr) *attachment
	origDst func(c *net.TCPConn) (netip.AddrPort, error)
	resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	// never says why a may never reach addr, "" if it may.
	never func(a *attachment, addr netip.Addr) string
	// roots verify the real hosts of connections whose TLS the proxy
	// terminates (secrets.go); nil is the host's trust store.
	roots *x509.CertPool
	// sessions resume TLS sessions with real hosts across connections:
	// a new connection skips the upstream's full handshake.
	sessions tls.ClientSessionCache
	// idle bounds how long both connections of a terminated TLS
	// connection may stay idle (secretIdle; tests shorten it).
	idle time.Duration
	log  *slog.Logger

	mu    sync.Mutex
	conns map[*attachment]map[*proxyConn]struct{}
}

// proxyConn is one proxied connection, kept to recheck on a rules change.
type proxyConn struct {
	client, up net.Conn
	kind, name string
	target     netip.AddrPort
}

// startProxy listens on a free port of every address.
func startProxy(m *Manager) (*proxy, error) {
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	p := newProxy(ln)
	p.lookup = m.lookup
	p.log = m.log
	p.roots = systemRoots()
	p.origDst = originalDst
	p.resolve = m.up.lookupA
	p.never = func(a *attachment, addr netip.Addr) string {
		if m.isConnectAddr(a, addr) {
			return ""
		}
		return m.never(addr)
	}
	go p.serve()
	return p, nil
}

func newProxy(ln net.Listener) *proxy {
	return &proxy{ln: ln, port: uint16(ln.Addr().(*net.TCPAddr).Port), conns: map[*attachment]map[*proxyConn]struct{}{},
		sessions: tls.NewLRUClientSessionCache(1024), idle: secretIdle}
}

func (p *proxy) close() { _ = p.ln.Close() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go p.handle(c.(*net.TCPConn))
	}
}

// originalDst is where a redirected connection was going
// (getsockopt SO_ORIGINAL_DST, a struct sockaddr_in).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		b := m.Multiaddr
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	})
	if err == nil {
		err = serr
	}
	return out, err
}

func (p *proxy) handle(c *net.TCPConn) {
	a := p.lookup(addrOf(c.RemoteAddr()))
	if a == nil {
		c.Close()
		return
	}
	dst, err := p.origDst(c)
	if err != nil {
		c.Close()
		return
	}
	var head bytes.Buffer
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	kind, name := sniff(io.TeeReader(c, &head))
	_ = c.SetReadDeadline(time.Time{})

	target, reason := p.decide(a, kind, name, dst)
	dest := name
	if dest == "" {
		dest = dst.Addr().String()
	}
	if reason != "" {
		addr := ""
		if target.IsValid() {
			addr = target.Addr().String()
		}
		a.audit.refuse(kind, dest, addr, dst.Port(), reason)
		if kind == "http" {
			refuseHTTP(c, 403, "Forbidden", fmt.Sprintf("sbx: egress to %s refused: %s", dest, reason))
		}
		c.Close()
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.Dial("tcp4", target.String())
	if err != nil {
		if kind == "http" {
			refuseHTTP(c, 502, "Bad Gateway", fmt.Sprintf("sbx: could not connect to %s (%s): %v", dest, target, err))
		}
		c.Close()
		return
	}
	if kind == "http" {
		if s := placeholderIn(a, head.Bytes()); s != nil {
			p.refusePlainSecret(a, c, s, dest, head.Bytes())
			c.Close()
			up.Close()
			return
		}
	}
	a.audit.allowed(kind)
	pc := &proxyConn{client: c, up: up, kind: kind, name: name, target: target}
	p.track(a, pc, true)
	defer p.track(a, pc, false)
	if kind == "tls" && a.getRules().Secrets.terminates(name) {
		p.terminate(a, c, head.Bytes(), name, target.Port(), up)
		return
	}
	if _, err := up.Write(head.Bytes()); err != nil {
		c.Close()
		up.Close()
		return
	}
	splice(c, up.(*net.TCPConn))
}

// decide returns where to connect for a connection of kind asking for
// name (maybe empty) that was going to dst, or why it is refused.
func (p *proxy) decide(a *attachment, kind, name string, dst netip.AddrPort) (netip.AddrPort, string) {
	r := a.getRules()
	if !r.Internet {
		return netip.AddrPort{}, "internet is off"
	}
	target := dst
	if ip, err := netip.ParseAddr(name); err == nil {
		if ip.Unmap() != dst.Addr() {
			return dst, fmt.Sprintf("the %s names %s but the connection goes to %s", what(kind), ip, dst.Addr())
		}
		name = ""
	}
	if v := r.AllowName(name); name != "" && !v.Allow {
		if len(r.AllowCIDRs) == 0 {
			return netip.AddrPort{}, v.Reason
		}
		// Only an allowed CIDR can let this connection through, and it
		// decides by the address the sandbox chose: the name is never
		// looked up, which would carry it to the upstream resolver.
	} else if name != "" {
		ctx, cancel := ctxTimeout(8 * time.Second)
		addrs, err := p.resolve(ctx, name)
		cancel()
		if err != nil {
			return netip.AddrPort{}, fmt.Sprintf("%v", err)
		}
		pick := addrs[0]
		if slices.Contains(addrs, dst.Addr()) {
			pick = dst.Addr()
		}
		target = netip.AddrPortFrom(pick, dst.Port())
	}
	if why := p.never(a, target.Addr()); why != "" {
		return target, why + ", never reachable"
	}
	v := r.AllowConn(name, target.Addr())
	if !v.Allow && name == "" && a.isLearned(target.Addr()) {
		v.Allow = true
	}
	if !v.Allow {
		return target, v.Reason
	}
	return target, ""
}

func what(kind string) string {
	if kind == "tls" {
		return "TLS SNI"
	}
	return "Host header"
}

// recheck closes a's connections that its rules no longer allow. p.mu is
// held only to list them: decide may resolve names (seconds), and every
// sandbox's new connection takes p.mu.
func (p *proxy) recheck(a *attachment) {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns[a]))
	for pc := range p.conns[a] {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	var cut []*proxyConn
	for _, pc := range conns {
		if _, reason := p.decide(a, pc.kind, pc.name, pc.target); reason != "" {
			cut = append(cut, pc)
		}
	}
	for _, pc := range cut {
		dest := pc.name
		if dest == "" {
			dest = pc.target.Addr().String()
		}
		a.audit.refuse(pc.kind, dest, pc.target.Addr().String(), pc.target.Port(), "cut: the sandbox's rules changed")
		// A reset, not a close: a download cut short must not look complete.
		if tc, ok := pc.client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		pc.client.Close()
		pc.up.Close()
	}
}

// closeAll closes a's connections (its sandbox stopped).
func (p *proxy) closeAll(a *attachment) {
	p.mu.Lock()
	conns := p.conns[a]
	delete(p.conns, a)
	p.mu.Unlock()
	for pc := range conns {
		pc.client.Close()
		pc.up.Close()
	}
}

func (p *proxy) track(a *attachment, pc *proxyConn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.conns[a] == nil {
			p.conns[a] = map[*proxyConn]struct{}{}
		}
		p.conns[a][pc] = struct{}{}
		return
	}
	delete(p.conns[a], pc)
	if len(p.conns[a]) == 0 {
		delete(p.conns, a)
	}
}

// splice copies both ways until both directions end; on Linux io.Copy
// between two TCP connections uses splice(2), without copies to user space.
func splice(a, b *net.TCPConn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(b, a)
		_ = b.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(a, b)
	_ = a.CloseWrite()
	<-done
	a.Close()
	b.Close()
}

func refuseHTTP(c net.Conn, code int, status, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Sbx-Refused: %s\r\n\r\n%s\n",
		code, status, len(msg)+1, strings.ReplaceAll(msg, "\r\n", " "), msg)
}

// sniff reads the start of a connection: a TLS ClientHello gives kind
// "tls" and its SNI; an HTTP request head gives "http" and its Host (port
// removed); anything else (or nothing within the deadline) gives
// "connection" and no name.
func sniff(r io.Reader) (kind, name string) {
	br := bufio.NewReaderSize(io.LimitReader(r, maxHead), 4096)
	first, err := br.Peek(1)
	if err != nil {
		return "connection", ""
	}
	if first[0] == 0x16 { // TLS handshake record
		var sni string
		errDone := errors.New("sniffed")
		conf := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni = h.ServerName
			return nil, errDone
		}}
		_ = tls.Server(readOnlyConn{br}, conf).Handshake()
		if sni == "" {
			return "connection", ""
		}
		return "tls", strings.ToLower(sni)
	}
	req, err := http.ReadRequest(br)
	if err != nil || req.Host == "" {
		return "connection", ""
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	return "http", strings.ToLower(strings.TrimSuffix(host, "."))
}

// readOnlyConn feeds crypto/tls a ClientHello; what it would write back is
// discarded (the handshake stops at the hello).
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (readOnlyConn) Write(b []byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                       { return nil }
func (readOnlyConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (readOnlyConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (readOnlyConn) SetDeadline(t time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(t time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(t time.Time) error { return nil }
