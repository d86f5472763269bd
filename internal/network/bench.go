package network

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/secret"
)

// SecretProxyTimes are the round trips of one HTTPS GET that carries a
// secret's placeholder, each in ms, n of each kind, measured in this
// process on loopback: a TLS host on 127.0.0.1 (its certificate from a CA
// made for the measure), reached directly (sending the value itself) and
// through the egress proxy, which terminates the client's TLS with a
// sandbox CA, puts the value in and re-originates TLS to the host. New
// connections pay both handshakes; keep-alive ones reuse the connection.
// The JSON form is what `sbxd bench-secrets` prints for `sbx bench secrets`.
type SecretProxyTimes struct {
	DirectNewConn   []float64 `json:"direct_new_conn_ms"`
	ProxyNewConn    []float64 `json:"proxy_new_conn_ms"`
	DirectKeepAlive []float64 `json:"direct_keep_alive_ms"`
	ProxyKeepAlive  []float64 `json:"proxy_keep_alive_ms"`
}

// MeasureSecretProxy times n requests of each kind of SecretProxyTimes
// (n ≥ 1) with the proxy sbxd runs, in-process: only the sandbox's network
// namespace and the firewall's redirect are left out (the connection
// reaches the proxy on loopback and is told its destination). Errors:
// setting up the listeners or the CAs failed, ctx ended, or a request did
// not answer 200 with the secret's value in place (a proxy that did not
// replace the placeholder is an error, not a fast row).
func MeasureSecretProxy(ctx context.Context, n int) (*SecretProxyTimes, error) {
	if n < 1 {
		return nil, fmt.Errorf("n must be at least 1, got %d", n)
	}
	dir, err := os.MkdirTemp("", "sbx-bench-secret-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	k, err := secret.OpenKeeper(filepath.Join(dir, secret.KeyFile))
	if err != nil {
		return nil, err
	}
	hostCA, err := newAuthority(k, "bench-host")
	if err != nil {
		return nil, err
	}
	sandCA, err := newAuthority(k, "bench-sandbox")
	if err != nil {
		return nil, err
	}
	const host, value = "api.test", "bench-secret-value"

	// The real host: 200 only when the value arrived in place.
	leaf, err := hostCA.Leaf(host)
	if err != nil {
		return nil, err
	}
	hln, err := tls.Listen("tcp4", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*leaf}})
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+value {
			http.Error(w, "no value", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(hln) }()
	defer srv.Close()
	target := netip.MustParseAddrPort(hln.Addr().String())

	rs, err := secret.ParseRules("rules", []api.SecretRule{{Host: host, Methods: []string{"GET"}, PathPrefix: "/items"}})
	if err != nil {
		return nil, err
	}
	rules, err := ParseRules(api.NetworkRules{Internet: true})
	if err != nil {
		return nil, err
	}
	ph := secret.NewPlaceholder()
	rules.Secrets = &Secrets{CA: sandCA, List: []Secret{{Name: "API_TOKEN", Placeholder: ph, Value: []byte(value), Rules: rs}}}
	pln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := newProxy(pln)
	a := &attachment{name: "bench", rules: rules, audit: newAuditLog(), learned: map[netip.Addr]learnedAddr{}}
	p.lookup = func(netip.Addr) *attachment { return a }
	p.origDst = func(*net.TCPConn) (netip.AddrPort, error) { return target, nil }
	p.resolve = func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{target.Addr()}, nil }
	p.never = func(*attachment, netip.Addr) string { return "" }
	p.roots = x509.NewCertPool()
	p.roots.AddCert(hostCA.Certificate())
	go p.serve()
	defer p.close()

	direct := x509.NewCertPool()
	direct.AddCert(hostCA.Certificate())
	viaProxy := x509.NewCertPool()
	viaProxy.AddCert(sandCA.Certificate())
	run := func(addr string, roots *x509.CertPool, keep bool, hdr string) ([]float64, error) {
		tr := &http.Transport{DisableKeepAlives: !keep, TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp4", addr)
			}}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		var ms []float64
		for range n + 1 { // the first warms the caches (leaf, TLS sessions) and is not counted
			req, err := http.NewRequestWithContext(ctx, "GET", "https://"+host+"/items", nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+hdr)
			start := time.Now()
			resp, err := cl.Do(req)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("GET https://%s/items via %s: %s", host, addr, resp.Status)
			}
			ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		}
		return ms[1:], nil
	}
	out := &SecretProxyTimes{}
	proxyAddr := pln.Addr().String()
	for _, c := range []struct {
		dst   *[]float64
		addr  string
		roots *x509.CertPool
		keep  bool
		hdr   string
	}{
		{&out.DirectNewConn, target.String(), direct, false, value},
		{&out.ProxyNewConn, proxyAddr, viaProxy, false, ph},
		{&out.DirectKeepAlive, target.String(), direct, true, value},
		{&out.ProxyKeepAlive, proxyAddr, viaProxy, true, ph},
	} {
		if *c.dst, err = run(c.addr, c.roots, c.keep, c.hdr); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// newAuthority makes a CA named name with k and opens it.
func newAuthority(k *secret.Keeper, name string) (*secret.Authority, error) {
	certPEM, sealed, err := k.NewCA(name)
	if err != nil {
		return nil, err
	}
	return k.OpenCA(certPEM, sealed)
}
