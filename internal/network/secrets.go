package network

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/secret"
)

// Secrets are what the egress proxy puts into a sandbox's requests: the
// sandbox's CA, with which the proxy terminates TLS for the hosts of the
// secrets' rules, and the secrets, values in the clear (they live only in
// sbxd's memory).
type Secrets struct {
	CA   *secret.Authority
	List []Secret
}

// Secret is one secret as the proxy uses it.
type Secret struct {
	// Name is the secret's (and the sandbox's env var's) name.
	Name string
	// Placeholder is what the sandbox sends instead of Value.
	Placeholder string
	// Value replaces Placeholder in the headers of requests that match
	// Rules.
	Value []byte
	Rules []secret.Rule
}

// terminates reports whether the proxy terminates TLS for host: a rule of
// a secret names it.
func (s *Secrets) terminates(host string) bool {
	if s == nil || s.CA == nil {
		return false
	}
	for _, x := range s.List {
		for _, r := range x.Rules {
			if r.MatchHost(host) {
				return true
			}
		}
	}
	return false
}

// secretIdle bounds how long both connections of a terminated TLS
// connection may stay idle together (waiting for the next request, the
// upstream's answer, a body's next bytes, an upgraded connection's next
// frame): then the proxy closes both.
const secretIdle = 5 * time.Minute

// maxAuditUses bounds a sandbox's audit of secret uses; the oldest go.
const maxAuditUses = 256

// prefixConn reads head first, then the connection: the bytes the proxy
// read to find the SNI are the TLS handshake's start.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// terminate serves a TLS connection of sandbox a to host (its SNI), which
// a secret's rule names: it completes the handshake with a certificate for
// host from a's CA, opens TLS to the real host on up (verified against
// the host's trust store, SSL_CERT_FILE honoured), and forwards each
// HTTP/1.1 request, its placeholders replaced in headers where a rule
// allows, or answers 403 where none does. head is what was read of the
// client's ClientHello; port is the upstream's (for the audit). Both
// connections are closed when nothing moves on either for p.idle.
func (p *proxy) terminate(a *attachment, client net.Conn, head []byte, host string, port uint16, up net.Conn) {
	defer client.Close()
	defer up.Close()
	sec := a.getRules().Secrets
	if sec == nil || sec.CA == nil {
		return
	}
	cert, err := sec.CA.Leaf(host)
	if err != nil {
		p.warn("secrets: certificate", "sandbox", a.name, "host", host, "err", err)
		return
	}
	// One idle bound for both connections, every step (request and
	// response heads and bodies, writes either way, an upgrade's pipe):
	// the fixed deadlines below (handshakes, refusals) only shorten it.
	cl, ul := newIdleLink(p.idle, &prefixConn{Conn: client, r: io.MultiReader(bytes.NewReader(head), client)}, up)
	tc := tls.Server(cl, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	// Both handshakes at once: the upstream's does not wait for the
	// sandbox's. No request is sent before the sandbox's completes.
	uc := tls.Client(ul, &tls.Config{ServerName: host, RootCAs: p.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
		ClientSessionCache: p.sessions})
	_ = uc.SetDeadline(time.Now().Add(sniffTimeout * 2))
	upDone := make(chan error, 1)
	go func() { upDone <- uc.Handshake() }()
	_ = tc.SetDeadline(time.Now().Add(sniffTimeout * 2))
	if err := tc.Handshake(); err != nil {
		up.Close()
		<-upDone
		return
	}
	if err := <-upDone; err != nil {
		a.audit.refuse("tls", host, "", port, fmt.Sprintf("the upstream's certificate: %v", err))
		// The 502 answers the sandbox's request: read its head first
		// (an answer before it, on a connection the client thinks idle,
		// is dropped by HTTP clients as unsolicited).
		_ = tc.SetReadDeadline(time.Now().Add(sniffTimeout))
		_, _ = http.ReadRequest(bufio.NewReader(tc))
		refuseHTTP(tc, 502, "Bad Gateway", fmt.Sprintf("sbx: %s: the upstream's TLS certificate does not verify against the host's trust store: %v", host, err))
		return
	}
	_ = tc.SetDeadline(time.Time{})
	_ = uc.SetDeadline(time.Time{})
	cr := bufio.NewReader(tc)
	got := &countReader{r: uc}
	ur := bufio.NewReader(got)
	for served := 0; ; served++ {
		req, err := http.ReadRequest(cr)
		if err != nil {
			return
		}
		if why := p.inject(a, host, req); why != "" {
			refuseHTTP(tc, 403, "Forbidden", "sbx: "+why)
			return
		}
		if req.Header.Get("Expect") == "100-continue" {
			// The body is read as it is forwarded: let the client send it.
			req.Header.Del("Expect")
			_, _ = io.WriteString(tc, "HTTP/1.1 100 Continue\r\n\r\n")
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // Write adds none then
		}
		before := got.n
		if err := req.Write(uc); err != nil {
			return
		}
		resp, err := http.ReadResponse(ur, req)
		for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			_ = resp.Write(tc)
			resp, err = http.ReadResponse(ur, req)
		}
		if err != nil {
			if served > 0 && got.n == before && !errors.Is(err, os.ErrDeadlineExceeded) {
				// The host closed the kept-alive connection while it
				// was idle (servers do after 5-75 s) and read nothing of
				// this request: close the sandbox's connection unanswered,
				// as the host did, so that its client retries the request
				// on a new connection, rather than a 502 it would not.
				return
			}
			refuseHTTP(tc, 502, "Bad Gateway", fmt.Sprintf("sbx: %s: %v", host, err))
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// A WebSocket or other upgrade: the rest is theirs.
			if err := resp.Write(tc); err != nil {
				return
			}
			pipe(tc, cr, uc, ur)
			return
		}
		err = resp.Write(tc)
		resp.Body.Close()
		if err != nil || resp.Close || req.Close {
			return
		}
	}
}

// countReader counts the bytes read through it: n is read only by the
// goroutine that reads.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// pipe copies both ways until one side ends: the client's (c, read through
// cr) and the upstream's (u, through ur).
func pipe(c net.Conn, cr io.Reader, u net.Conn, ur io.Reader) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, cr); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, ur); done <- struct{}{} }()
	<-done
}

// inject puts the values of the secrets whose placeholders req carries
// into its headers, if every one of them has a rule that allows host,
// req's method and path; otherwise it says why req is refused (and
// changes nothing). Each secret used is audited, allowed or refused.
func (p *proxy) inject(a *attachment, host string, req *http.Request) string {
	sec := a.getRules().Secrets
	if sec == nil {
		return ""
	}
	path := req.URL.Path
	type use struct {
		s   *Secret
		why string
	}
	var uses []use
	for i := range sec.List {
		s := &sec.List[i]
		inURL := strings.Contains(req.RequestURI, s.Placeholder)
		inHeader := false
		for _, vs := range req.Header {
			for _, v := range vs {
				if strings.Contains(v, s.Placeholder) {
					inHeader = true
				}
			}
		}
		if !inURL && !inHeader {
			continue
		}
		why := ""
		reqHost := strings.ToLower(req.Host)
		if h, _, err := net.SplitHostPort(reqHost); err == nil {
			reqHost = h
		}
		switch {
		case inURL:
			why = "placeholders are replaced in headers only, never in the URL"
		case strings.TrimSuffix(reqHost, ".") != host:
			why = fmt.Sprintf("the Host header (%q) is not the TLS server name (%s)", req.Host, host)
		case !secret.MatchAny(s.Rules, host, req.Method, path):
			why = fmt.Sprintf("no rule of secret %s allows %s %s%s", s.Name, req.Method, host, printable(path))
		}
		uses = append(uses, use{s, why})
	}
	refused := ""
	for _, u := range uses {
		if u.why != "" {
			refused = u.why
			break
		}
	}
	for _, u := range uses {
		why := u.why
		if why == "" && refused != "" {
			why = "another secret in the request was refused: " + refused
		}
		a.audit.secretUse(api.SecretUse{Secret: u.s.Name, Host: host, Method: req.Method, Path: path, Allowed: why == "", Reason: why})
		if why != "" {
			p.info("secrets: request refused", "sandbox", a.name, "secret", u.s.Name, "host", host, "method", req.Method, "path", path, "reason", why)
		}
	}
	if refused != "" {
		return refused
	}
	for _, u := range uses {
		for k, vs := range req.Header {
			for i, v := range vs {
				if strings.Contains(v, u.s.Placeholder) {
					req.Header[k][i] = strings.ReplaceAll(v, u.s.Placeholder, string(u.s.Value))
				}
			}
		}
	}
	return ""
}

// printable escapes what a request's path may hold that does not belong
// in a log line or a response header (control bytes, invalid UTF-8).
func printable(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// placeholderIn is the first of a's secrets whose placeholder head (a
// plain HTTP request's start) carries, or nil.
func placeholderIn(a *attachment, head []byte) *Secret {
	sec := a.getRules().Secrets
	if sec == nil {
		return nil
	}
	for i := range sec.List {
		if bytes.Contains(head, []byte(sec.List[i].Placeholder)) {
			return &sec.List[i]
		}
	}
	return nil
}

// refusePlainSecret audits and refuses a plain-HTTP request that carries
// s's placeholder: values go over TLS only.
func (p *proxy) refusePlainSecret(a *attachment, c net.Conn, s *Secret, host string, head []byte) {
	method, path := "", ""
	if req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head))); err == nil {
		method, path = req.Method, req.URL.Path
	}
	why := "secrets are sent over HTTPS only; this request is plain HTTP"
	a.audit.secretUse(api.SecretUse{Secret: s.Name, Host: host, Method: method, Path: path, Reason: why})
	p.info("secrets: request refused", "sandbox", a.name, "secret", s.Name, "host", host, "method", method, "path", path, "reason", why)
	refuseHTTP(c, 403, "Forbidden", "sbx: "+why)
}

// secretUse records a use of a secret.
func (l *auditLog) secretUse(u api.SecretUse) {
	u.Time = time.Now().UTC().Truncate(time.Millisecond)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.uses) >= maxAuditUses {
		copy(l.uses, l.uses[1:])
		l.uses = l.uses[:len(l.uses)-1]
	}
	l.uses = append(l.uses, u)
}

func (p *proxy) info(msg string, args ...any) {
	if p.log != nil {
		p.log.Info(msg, args...)
	}
}

func (p *proxy) warn(msg string, args ...any) {
	if p.log != nil {
		p.log.Warn(msg, args...)
	}
}

// systemRoots is the host's trust store (SSL_CERT_FILE and SSL_CERT_DIR
// honoured), nil when it cannot be read (crypto/tls then tries again).
func systemRoots() *x509.CertPool {
	p, err := x509.SystemCertPool()
	if err != nil {
		return nil
	}
	return p
}
