package network

import (
	"bufio"
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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/network/nettest"
	"github.com/sbxhq/sbx/internal/secret"
)

// These tests run the proxy on loopback, as the firewall would hand it a
// sandbox's connection: every connection goes to the test host (origDst),
// a TLS server with a certificate from a CA the test makes, which the
// proxy trusts (its roots). The client plays the sandbox: it trusts the
// sandbox's CA only.

const testValue = "ghp_REAL-token-never-in-the-sandbox"

type secretRig struct {
	p      *proxy
	a      *attachment
	rec    *nettest.Recorder
	ca     *nettest.CA
	sandCA *x509.CertPool // the sandbox's trust store
	ph     string         // the placeholder of API_TOKEN
	target netip.AddrPort
}

func newSecretRig(t testing.TB, netRules api.NetworkRules) *secretRig {
	return newSecretRigWith(t, netRules, nil)
}

// newSecretRigWith is newSecretRig whose test host, when serve is not
// nil, is serve called with each TLS connection (handshake done), instead
// of the Recorder.
func newSecretRigWith(t testing.TB, netRules api.NetworkRules, serve func(c *tls.Conn)) *secretRig {
	t.Helper()
	ca := nettest.NewCA(t)
	rec := &nettest.Recorder{}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	if serve == nil {
		rec.ServeTLS(t, ln, ca.Issue(t, "api.test", "other.test"))
	} else {
		serveTLS(t, ln, ca.Issue(t, "api.test", "other.test"), serve)
	}
	target := netip.MustParseAddrPort(ln.Addr().String())

	k, err := secret.OpenKeeper(filepath.Join(t.TempDir(), secret.KeyFile))
	must(t, err)
	certPEM, sealed, err := k.NewCA("sbx_test")
	must(t, err)
	auth, err := k.OpenCA(certPEM, sealed)
	must(t, err)
	rs, err := secret.ParseRules("rules", []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}, PathPrefix: "/items"}})
	must(t, err)
	r, err := ParseRules(netRules)
	must(t, err)
	ph := secret.NewPlaceholder()
	r.Secrets = &Secrets{CA: auth, List: []Secret{{Name: "API_TOKEN", Placeholder: ph, Value: []byte(testValue), Rules: rs}}}

	pln, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	p := newProxy(pln)
	a := &attachment{name: "s", rules: r, audit: newAuditLog(), learned: map[netip.Addr]learnedAddr{}}
	p.lookup = func(netip.Addr) *attachment { return a }
	p.origDst = func(c *net.TCPConn) (netip.AddrPort, error) {
		if netip.MustParseAddrPort(c.LocalAddr().String()).Port() == 0 {
			return netip.AddrPort{}, fmt.Errorf("no port")
		}
		return target, nil
	}
	p.resolve = func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{target.Addr()}, nil }
	p.never = func(*attachment, netip.Addr) string { return "" }
	p.roots = ca.Pool()
	go p.serve()
	t.Cleanup(p.close)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return &secretRig{p: p, a: a, rec: rec, ca: ca, sandCA: pool, ph: ph, target: target}
}

// client is an HTTPS client in the "sandbox": every connection goes to
// the proxy; it trusts the sandbox's CA (roots nil) or roots.
func (r *secretRig) client(roots *x509.CertPool) *http.Client {
	if roots == nil {
		roots = r.sandCA
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp4", fmt.Sprintf("127.0.0.1:%d", r.p.port))
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	return &http.Client{Transport: tr}
}

func (r *secretRig) do(t *testing.T, c *http.Client, method, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	must(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if h := hdr["Host"]; h != "" {
		req.Host = h
	}
	resp, err := c.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// seenValue reports whether the test host ever received the value.
func (r *secretRig) seenValue() []nettest.Seen {
	var out []nettest.Seen
	for _, s := range r.rec.Seen() {
		if strings.Contains(s.Authorization, testValue) {
			out = append(out, s)
		}
	}
	return out
}

func TestSecretsProxy(t *testing.T) {
	r := newSecretRig(t, api.NetworkRules{Internet: true})
	c := r.client(nil)
	bearer := map[string]string{"Authorization": "Bearer " + r.ph}

	t.Run("a matching request gets the value", func(t *testing.T) {
		code, body := r.do(t, c, "GET", "https://api.test/items", bearer)
		if code != 200 || body != "hello from api.test" {
			t.Fatalf("%d %q", code, body)
		}
		// A second request on the same connection too.
		code, _ = r.do(t, c, "GET", "https://api.test/items/7", bearer)
		if code != 200 {
			t.Fatalf("second request: %d", code)
		}
		got := r.seenValue()
		if len(got) != 2 || got[0].Authorization != "Bearer "+testValue || got[1].Path != "/items/7" {
			t.Fatalf("the test host saw %+v", r.rec.Seen())
		}
	})
	refused := []struct {
		name, method, url string
		hdr               map[string]string
	}{
		{"another method", "POST", "https://api.test/items", bearer},
		{"another path", "GET", "https://api.test/admin", bearer},
		{"a path that only starts like the prefix", "GET", "https://api.test/itemsX", bearer},
		{"a path that climbs out of the prefix", "GET", "https://api.test/items/%2e%2e/admin", bearer},
		{"the placeholder in the query", "GET", "https://api.test/items?token=" + r.ph, nil},
		{"a Host header other than the TLS name", "GET", "https://api.test/items", map[string]string{"Authorization": "Bearer " + r.ph, "Host": "other.test"}},
	}
	for _, x := range refused {
		t.Run("refused: "+x.name, func(t *testing.T) {
			before := len(r.rec.Seen())
			code, body := r.do(t, c, x.method, x.url, x.hdr)
			if code != 403 || !strings.Contains(body, "sbx:") {
				t.Fatalf("%d %q", code, body)
			}
			if n := len(r.rec.Seen()); n != before {
				t.Fatalf("the refused request reached the test host: %+v", r.rec.Seen()[before:])
			}
		})
	}
	t.Run("requests without a placeholder pass untouched", func(t *testing.T) {
		code, _ := r.do(t, c, "POST", "https://api.test/admin", map[string]string{"Authorization": "Bearer mine"})
		if code != 200 {
			t.Fatalf("%d", code)
		}
	})
	t.Run("plain HTTP with a placeholder is refused", func(t *testing.T) {
		conn, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", r.p.port))
		must(t, err)
		defer conn.Close()
		fmt.Fprintf(conn, "GET /items HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n", r.ph)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		must(t, err)
		if resp.StatusCode != 403 {
			t.Fatalf("%s", resp.Status)
		}
	})
	t.Run("every use is audited", func(t *testing.T) {
		l := r.a.audit.snapshot(nil, 0, nil)
		var allowed, refusedN int
		for _, u := range l.Secrets {
			if u.Secret != "API_TOKEN" || u.Host != "api.test" || u.Time.IsZero() {
				t.Errorf("use %+v", u)
			}
			if u.Allowed {
				allowed++
			} else {
				refusedN++
				if u.Reason == "" {
					t.Errorf("a refusal without a reason: %+v", u)
				}
			}
		}
		if allowed != 2 || refusedN != 7 {
			t.Fatalf("audit: %d allowed, %d refused, want 2 and 7: %+v", allowed, refusedN, l.Secrets)
		}
		if l.Secrets[len(l.Secrets)-1].Method != "GET" || l.Secrets[len(l.Secrets)-1].Path != "/items" {
			t.Errorf("oldest last: %+v", l.Secrets[len(l.Secrets)-1])
		}
	})
	if got := r.seenValue(); len(got) != 2 {
		t.Fatalf("the value reached the test host %d times, want 2 (the allowed ones): %+v", len(got), got)
	}
}

// TLS to hosts no secret names is not terminated: the client sees the
// real host's certificate, end to end.
func TestSecretsProxyPassThrough(t *testing.T) {
	r := newSecretRig(t, api.NetworkRules{Internet: true})
	code, body := r.do(t, r.client(r.ca.Pool()), "GET", "https://other.test/", nil)
	if code != 200 || body != "hello from other.test" {
		t.Fatalf("%d %q", code, body)
	}
	if _, err := r.client(nil).Get("https://other.test/"); err == nil {
		t.Fatal("the sandbox's CA verified a host no secret names: its TLS was terminated")
	}
}

// An upstream whose certificate the host does not trust never gets the
// value: the proxy answers 502.
func TestSecretsProxyUntrustedUpstream(t *testing.T) {
	r := newSecretRig(t, api.NetworkRules{Internet: true})
	r.p.roots = x509.NewCertPool() // trusts nothing
	code, body := r.do(t, r.client(nil), "GET", "https://api.test/items", map[string]string{"Authorization": "Bearer " + r.ph})
	if code != 502 || !strings.Contains(body, "certificate") {
		t.Fatalf("%d %q", code, body)
	}
	if len(r.rec.Seen()) != 0 {
		t.Fatalf("the test host got %+v", r.rec.Seen())
	}
}

// Egress rules still decide first: a secret's host outside the allow list
// is refused like any other.
func TestSecretsProxyObeysEgressRules(t *testing.T) {
	r := newSecretRig(t, api.NetworkRules{Internet: true, Allow: []string{"elsewhere.test"}})
	if _, err := r.client(nil).Get("https://api.test/items"); err == nil {
		t.Fatal("a host outside the allow list answered")
	}
	if len(r.rec.Seen()) != 0 {
		t.Fatalf("the test host got %+v", r.rec.Seen())
	}
}

// BenchmarkProxySecret: one HTTPS request that gets a secret, direct to a
// loopback TLS server and through the egress proxy (TLS terminated with
// the sandbox's CA, re-originated and verified, the header rewritten).
// "new-conn" makes a connection (two handshakes through the proxy) per
// request; "keep-alive" reuses one. The difference in p50-ms (the median
// request) is the latency the proxy adds (issue 14: ≤ 2 ms p50).
func BenchmarkProxySecret(b *testing.B) {
	r := newSecretRig(b, api.NetworkRules{Internet: true})
	for _, keep := range []bool{false, true} {
		for _, via := range []string{"direct", "proxy"} {
			name := "new-conn/" + via
			if keep {
				name = "keep-alive/" + via
			}
			b.Run(name, func(b *testing.B) {
				addr := r.target.String()
				roots := r.ca.Pool()
				if via == "proxy" {
					addr = fmt.Sprintf("127.0.0.1:%d", r.p.port)
					roots = r.sandCA
				}
				tr := &http.Transport{DisableKeepAlives: !keep, TLSClientConfig: &tls.Config{RootCAs: roots},
					DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
						return (&net.Dialer{}).DialContext(ctx, "tcp4", addr)
					}}
				defer tr.CloseIdleConnections()
				cl := &http.Client{Transport: tr}
				req, _ := http.NewRequest("GET", "https://api.test/items", nil)
				req.Header.Set("Authorization", "Bearer "+r.ph)
				var took []time.Duration
				for b.Loop() {
					start := time.Now()
					resp, err := cl.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatal(resp.Status)
					}
					took = append(took, time.Since(start))
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			})
		}
	}
}

// TestSecretsThroughFirewall: a sandbox (a namespace made by the Manager)
// whose rules name no domain but which has a secret: the firewall sends
// its HTTPS to the proxy, which terminates TLS for the secret's host with
// the sandbox's CA and puts the value in where the rule allows. The test
// host lives in a namespace of its own, with a certificate from a CA the
// test makes, which the proxy trusts.
func TestSecretsThroughFirewall(t *testing.T) {
	nettest.RequireRoot(t)
	ca := nettest.NewCA(t)
	rec := &nettest.Recorder{}
	out := nettest.StartOutsideWith(t, fmt.Sprintf("tos%d", os.Getpid()%10000), netip.MustParsePrefix("10.232.1.0/24"), rec, ca.Issue(t, "api.test"))
	up := nettest.StartUpstream(t, map[string]netip.Addr{"api.test": out.Addr}, nil, "")
	m := testManager(t, up.Addr)
	m.proxy.roots = ca.Pool()

	k, err := secret.OpenKeeper(filepath.Join(t.TempDir(), secret.KeyFile))
	must(t, err)
	certPEM, sealed, err := k.NewCA("sbx_s")
	must(t, err)
	auth, err := k.OpenCA(certPEM, sealed)
	must(t, err)
	rs, err := secret.ParseRules("rules", []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}, PathPrefix: "/items"}})
	must(t, err)
	ph := secret.NewPlaceholder()
	r := rules(t, api.NetworkRules{Internet: true})
	r.Secrets = &Secrets{CA: auth, List: []Secret{{Name: "API_TOKEN", Placeholder: ph, Value: []byte(testValue), Rules: rs}}}
	path, err := m.Create("sbx_ssssssssssssssss", "s", r)
	must(t, err)
	c := nsClient{t, path}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	do := func(method string) (int, error) {
		tr := &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return c.dial("tcp4", out.Addr.String()+":443")
			},
			TLSClientConfig: &tls.Config{RootCAs: pool},
		}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(method, "https://api.test/items", nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	code, err := do("GET")
	if err != nil || code != 200 {
		t.Fatalf("GET: %d %v", code, err)
	}
	code, err = do("POST")
	if err != nil || code != 403 {
		t.Fatalf("POST: %d %v", code, err)
	}
	seen := rec.Seen()
	if len(seen) != 1 || seen[0].Authorization != "Bearer "+testValue || seen[0].Method != "GET" {
		t.Fatalf("the test host saw %+v", seen)
	}
	l, err := m.Log("sbx_ssssssssssssssss")
	must(t, err)
	if len(l.Secrets) != 2 || l.Secrets[0].Allowed || l.Secrets[0].Method != "POST" || !l.Secrets[1].Allowed {
		t.Fatalf("the log's secret uses: %+v", l.Secrets)
	}
	// Without secrets the same sandbox's TLS is not terminated: the
	// sandbox's CA no longer verifies the host.
	must(t, m.Update("sbx_ssssssssssssssss", rules(t, api.NetworkRules{Internet: true})))
	if _, err := do("GET"); err == nil {
		t.Fatal("TLS still terminated after the secrets went")
	}
}
