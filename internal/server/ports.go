package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// Ports: GET /v1/sandboxes/{name}/ports lists the listening TCP ports of a
// sandbox, and sbxd proxies HTTP and WebSocket traffic to a port, either
// path-based (/v1/sandboxes/{name}/ports/{port}/...) or host-based
// (http://{port}-{name}.{preview domain}/...). The engine reaches the port
// through the sandbox's agent, whatever its network rules.

const (
	// previewCookie carries a preview's credential in a browser: an HMAC of
	// the sandbox and port under an API key, never the key itself.
	previewCookie = "sbx_preview"
	// previewKeyParam is the query parameter that trades an API key for
	// the cookie once.
	previewKeyParam = "sbx_key"
	// previewTokenParam is the query parameter that trades the cookie's
	// value (previewToken, which a client holding the key computes, as the
	// web console does) for the cookie once: a preview link that opens
	// one port, without the key in the URL.
	previewTokenParam = "sbx_preview"
	// portHostSuffix ends the URL host that names a sandbox port inside the
	// proxy's transport ("sbx_0123456789abcdef.3000.sbx-port"): it keys the
	// transport's connection pool by sandbox id and port, so a connection
	// one caller opened is never reused for a sandbox another caller names
	// the same way (another tenant's, or a new one after a rename).
	portHostSuffix = ".sbx-port"
)

// preview is a request for a sandbox's port.
type preview struct {
	name    string // the sandbox's name or id, as the request gave it
	portArg string // the port as the request gave it
	port    int
	// id is the sandbox's id, resolved as the request's caller: the
	// proxy dials it, and its connection pool is keyed by it.
	id string
	// path is the escaped path the program sees; "" for a path-based
	// request without the slash after the port (redirected to add it).
	path string
	// prefix is the path-based prefix /v1/sandboxes/{name}/ports/{port}
	// (escaped), "" for host-based routing.
	prefix string
	// stripAuth: the Authorization header carried sbxd's key and must not
	// reach the sandbox.
	stripAuth bool
	// cancel aborts the request to the sandbox (its response body went
	// idle).
	cancel context.CancelCauseFunc
}

// cookiePath is where the preview's cookie applies.
func (p *preview) cookiePath() string {
	if p.prefix == "" {
		return "/"
	}
	return p.prefix + "/"
}

type previewKey struct{}

// Deadlines of a preview request (Config.PreviewConnectTimeout, ...).
const (
	// DefaultPreviewConnectTimeout bounds opening the connection to the
	// sandbox's port through its agent: 30 s.
	DefaultPreviewConnectTimeout = 30 * time.Second
	// DefaultPreviewResponseTimeout is how long a preview waits for the
	// program to answer a request with its whole response head (status
	// line and headers), trickled or not: 5 min, for a dev server whose
	// first page compiles for a while.
	DefaultPreviewResponseTimeout = 5 * time.Minute
	// DefaultPreviewIdleTimeout is how long a response body (not an
	// upgraded connection) may send nothing before sbxd cuts it: 2 min,
	// above the keep-alive period of event streams.
	DefaultPreviewIdleTimeout = 2 * time.Minute
)

// validTargetName reports whether s can be a sandbox name or id: names are
// [a-z0-9-], ids sbx_ and hex.
func validTargetName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// previewOf reports whether r is for a sandbox's port: by its Host
// (<port>-<name>.<preview domain>), or by its path
// (/v1/sandboxes/{name}/ports/{port}/...).
func (s *Server) previewOf(r *http.Request) (*preview, bool) {
	if d := s.cfg.PreviewDomain; d != "" {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		if label, ok := strings.CutSuffix(host, "."+strings.ToLower(d)); ok && !strings.Contains(label, ".") {
			if port, name, ok := strings.Cut(label, "-"); ok && allDigits(port) && name != "" {
				return &preview{name: name, portArg: port, path: r.URL.EscapedPath()}, true
			}
		}
	}
	// "", "v1", "sandboxes", name, "ports", port, rest
	parts := strings.SplitN(r.URL.EscapedPath(), "/", 7)
	if len(parts) < 6 || parts[0] != "" || parts[1] != "v1" || parts[2] != "sandboxes" || parts[4] != "ports" || parts[5] == "" {
		return nil, false
	}
	name, err1 := url.PathUnescape(parts[3])
	port, err2 := url.PathUnescape(parts[5])
	if err1 != nil || err2 != nil {
		return nil, false
	}
	p := &preview{name: name, portArg: port, prefix: strings.Join(parts[:6], "/")}
	if len(parts) == 7 {
		p.path = "/" + parts[6]
	}
	return p, true
}

// servePreview authenticates a request for a sandbox's port (when auth is
// required) and proxies it as its caller: a tenant key reaches only its
// own sandboxes' ports, and its previews end when it is revoked.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, p *preview, auth bool) {
	q := r.URL.Query()
	_, hasKey := q[previewKeyParam]
	_, hasToken := q[previewTokenParam]
	c := engine.Operator
	fc, forwarded := s.forwarded(r)
	if forwarded {
		c = fc
	} else if auth {
		var cookieOK bool
		var err error
		if _, bearer := bearerKey(r.Header.Get("Authorization")); bearer {
			c, err = s.authenticate(r)
			if err == nil {
				p.stripAuth = true
			}
		}
		if !p.stripAuth {
			c, cookieOK = s.previewCookieCaller(r, p)
		}
		switch {
		case p.stripAuth, cookieOK:
		case hasToken:
			token := q.Get(previewTokenParam)
			if _, ok := s.previewTokenCaller(r.Context(), token, p); !ok {
				s.writeError(w, r, errdefs.New(errdefs.ErrUnauthorized, "wrong preview token in ?%s= (it opens one sandbox port under one API key)", previewTokenParam))
				return
			}
			http.SetCookie(w, &http.Cookie{
				Name: previewCookie, Value: token, Path: p.cookiePath(),
				HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil,
			})
			q.Del(previewTokenParam)
			s.redirect(w, r, r.URL.EscapedPath(), q)
			return
		case hasKey:
			key := q.Get(previewKeyParam)
			token, err := s.previewTokenOf(r.Context(), key, p)
			if err != nil {
				s.writeError(w, r, errdefs.New(errdefs.ErrUnauthorized, "wrong API key in ?%s=", previewKeyParam))
				return
			}
			http.SetCookie(w, &http.Cookie{
				Name: previewCookie, Value: token, Path: p.cookiePath(),
				HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil,
			})
			q.Del(previewKeyParam)
			s.redirect(w, r, r.URL.EscapedPath(), q)
			return
		default:
			s.writeError(w, r, errdefs.New(errdefs.ErrUnauthorized,
				"missing or wrong API key: send Authorization: Bearer <key>, or open the URL once with ?%s=<key>", previewKeyParam))
			return
		}
	}
	if p.path == "" {
		// Relative links of the page resolve under the port's root only
		// with the slash.
		s.redirect(w, r, p.prefix+"/", q)
		return
	}
	if !validTargetName(p.name) {
		s.writeError(w, r, errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", p.name))
		return
	}
	port, err := strconv.Atoi(p.portArg)
	if err != nil || !allDigits(p.portArg) {
		s.writeError(w, r, errdefs.Invalid("port", "%q is not a port number (1-65535)", p.portArg))
		return
	}
	if port < 1 || port > 65535 {
		s.writeError(w, r, errdefs.Invalid("port", "%d is out of range [1, 65535]", port))
		return
	}
	p.port = port
	r, done, err := s.track(r, c)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer done()
	// The caller must see the sandbox before anything is proxied: the
	// transport reuses an idle connection without dialing again, so the
	// dial's own check is not enough.
	if s.forward(w, r, p.name) {
		return
	}
	id, err := s.lookup(r.Context(), p.name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p.id = id
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), previewKey{}, p))
	defer cancel(nil)
	p.cancel = cancel
	s.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// redirect sends the client to path with query q: 302 for GET and HEAD,
// 307 (same method and body) otherwise.
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	loc := path
	if len(q) > 0 {
		loc += "?" + q.Encode()
	}
	code := http.StatusTemporaryRedirect
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		code = http.StatusFound
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(code)
}

// previewToken is the cookie value that admits a browser to one sandbox
// port: an HMAC of the sandbox and port under an API key, so the cookie
// neither reveals the key nor opens anything else.
func previewToken(key, name, port string) string {
	m := hmac.New(sha256.New, []byte(key))
	fmt.Fprintf(m, "sbx-preview\x00%s\x00%s", name, port)
	return hex.EncodeToString(m.Sum(nil))
}

// previewTokenOf returns the preview cookie of key for p: for a
// configured key, previewToken under it; for a key record,
// "<key id>.<previewToken under the key's stored hash>", which the record
// can check again (and which stops working once the key is revoked).
//
// Errors: ErrUnauthorized (no such key, or revoked).
func (s *Server) previewTokenOf(ctx context.Context, key string, p *preview) (string, error) {
	c, err := s.callerOfKey(ctx, key)
	if err != nil {
		return "", err
	}
	return previewTokenOfCaller(c, key, p), nil
}

// previewTokenOfCaller returns the preview token of key for p, key having
// been authenticated as c: previewToken under a configured key (c has no
// KeyID), "<key id>.<previewToken under the key's hash>" for a key record.
func previewTokenOfCaller(c engine.Caller, key string, p *preview) string {
	if c.KeyID == "" {
		return previewToken(key, p.name, p.portArg)
	}
	return c.KeyID + "." + previewToken(engine.HashKey(key), p.name, p.portArg)
}

// previewCookieCaller returns the caller of a valid preview cookie of r
// for p.
func (s *Server) previewCookieCaller(r *http.Request, p *preview) (engine.Caller, bool) {
	for _, ck := range r.CookiesNamed(previewCookie) {
		if c, ok := s.previewTokenCaller(r.Context(), ck.Value, p); ok {
			return c, true
		}
	}
	return engine.Caller{}, false
}

// previewTokenCaller returns the caller whose preview token for p is
// token (a cookie's value, or ?sbx_preview=): "<key id>.<HMAC>" for a key
// record that is not revoked, previewToken under a configured key for the
// operator.
func (s *Server) previewTokenCaller(ctx context.Context, token string, p *preview) (engine.Caller, bool) {
	if id, mac, ok := strings.Cut(token, "."); ok {
		k, err := s.eng.GetKey(ctx, id)
		if err != nil || k.ID != id || !k.RevokeTime.IsZero() {
			return engine.Caller{}, false
		}
		if hmac.Equal([]byte(mac), []byte(previewToken(k.Hash, p.name, p.portArg))) {
			return engine.Caller{KeyID: k.ID, Admin: k.Admin}, true
		}
		return engine.Caller{}, false
	}
	ok := false
	for _, k := range s.cfg.APIKeys {
		if hmac.Equal([]byte(token), []byte(previewToken(k, p.name, p.portArg))) {
			ok = true
		}
	}
	if ok {
		return engine.Operator, true
	}
	return engine.Caller{}, false
}

// withoutCookie removes the cookie named name from Cookie header values.
func withoutCookie(values []string, name string) []string {
	var out []string
	for _, v := range values {
		var keep []string
		for _, part := range strings.Split(v, ";") {
			n, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if n != name && strings.TrimSpace(part) != "" {
				keep = append(keep, strings.TrimSpace(part))
			}
		}
		if len(keep) > 0 {
			out = append(out, strings.Join(keep, "; "))
		}
	}
	return out
}

// newProxy returns the reverse proxy of previews: its transport dials the
// sandbox's port through the engine (dial, by the sandbox's id), one pool of
// connections per sandbox id and port.
func (s *Server) newProxy() *httputil.ReverseProxy {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			rest, _ := strings.CutSuffix(host, portHostSuffix)
			i := strings.LastIndexByte(rest, '.')
			if i < 0 {
				return nil, fmt.Errorf("bad preview address %q", addr)
			}
			port, err := strconv.Atoi(rest[i+1:])
			if err != nil {
				return nil, fmt.Errorf("bad preview address %q", addr)
			}
			id := rest[:i]
			// The agent's dial has its own deadline; this one also covers
			// a sandbox too loaded to answer it.
			dctx, cancel := context.WithTimeout(ctx, s.cfg.PreviewConnectTimeout)
			defer cancel()
			c, err := s.dial(dctx, id, port)
			if err != nil && ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
				return nil, errdefs.New(errdefs.ErrPortTimeout, "port %d in sandbox %s: the connection did not open within %s",
					port, id, s.cfg.PreviewConnectTimeout)
			}
			return c, err
		},
		Proxy:               nil,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		// A dev server's first page may compile for a while; one that
		// accepts and never answers gets a 504 after this.
		ResponseHeaderTimeout: s.cfg.PreviewResponseTimeout,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			p := pr.In.Context().Value(previewKey{}).(*preview)
			out := pr.Out
			out.URL.Scheme = "http"
			out.URL.Host = p.id + "." + strconv.Itoa(p.port) + portHostSuffix
			out.URL.RawPath = p.path
			out.URL.Path, _ = url.PathUnescape(p.path)
			// Credentials for sbxd never reach the program: the key and
			// the preview token (which opens this port).
			q := out.URL.Query()
			if q.Has(previewKeyParam) || q.Has(previewTokenParam) {
				q.Del(previewKeyParam)
				q.Del(previewTokenParam)
				out.URL.RawQuery = q.Encode()
			}
			out.Host = pr.In.Host
			if out.Host == "" {
				out.Host = "localhost:" + strconv.Itoa(p.port)
			}
			if p.stripAuth {
				out.Header.Del("Authorization")
			}
			if c := withoutCookie(out.Header.Values("Cookie"), previewCookie); len(c) > 0 {
				out.Header["Cookie"] = c
			} else {
				out.Header.Del("Cookie")
			}
			pr.SetXForwarded()
			if p.prefix != "" {
				out.Header.Set("X-Forwarded-Prefix", p.prefix)
			}
		},
		Transport:     tr,
		FlushInterval: -1, // dev servers stream (event streams, hot reload)
		ModifyResponse: func(res *http.Response) error {
			p := res.Request.Context().Value(previewKey{}).(*preview)
			if p.prefix != "" {
				// A path-based preview shares sbxd's origin with the web
				// console: a service worker its page registers must stay
				// scoped to the preview's path, never take over "/" (and
				// see the console's requests, which carry the key).
				res.Header.Del("Service-Worker-Allowed")
			}
			if res.StatusCode != http.StatusSwitchingProtocols {
				res.Body = newIdleBody(res.Body, s.cfg.PreviewIdleTimeout, p.cancel)
			}
			return nil
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			p := r.Context().Value(previewKey{}).(*preview)
			var ne net.Error
			if !errdefs.Public(err) && errors.As(err, &ne) && ne.Timeout() {
				// The transport's ResponseHeaderTimeout.
				err = errdefs.New(errdefs.ErrPortTimeout, "port %d in sandbox %s: the program did not answer within %s",
					p.port, p.name, s.cfg.PreviewResponseTimeout)
			}
			if !errdefs.Public(err) {
				s.log.Warn("preview", "request_id", requestID(r.Context()), "sandbox", p.name, "port", p.port, "err", err)
				err = errdefs.New(errdefs.ErrPortUnreachable, "port %d in sandbox %s: the connection failed before an answer", p.port, p.name)
			}
			s.writeError(w, r, err)
		},
	}
}

// errPreviewIdle ends a preview's response whose body stayed silent past
// the idle deadline.
var errPreviewIdle = errors.New("the response body sent nothing within the idle deadline")

// idleBody is a response body that cancels its request when a Read waits
// longer than idle for data.
type idleBody struct {
	io.ReadCloser
	idle  time.Duration
	timer *time.Timer
}

func newIdleBody(body io.ReadCloser, idle time.Duration, cancel context.CancelCauseFunc) *idleBody {
	return &idleBody{ReadCloser: body, idle: idle, timer: time.AfterFunc(idle, func() { cancel(errPreviewIdle) })}
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.ReadCloser.Read(p)
	if n > 0 || err != nil {
		b.timer.Stop()
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

// listPorts answers GET /v1/sandboxes/{name}/ports.
func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ports, err := s.eng.ListPorts(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if key := apiKeyOf(r.Context()); key != "" {
		// The caller's preview token of each port, for the sandbox as the
		// request named it (the preview URL must name it the same way).
		c := engine.CallerOf(r.Context())
		for i := range ports {
			ports[i].PreviewToken = previewTokenOfCaller(c, key, &preview{name: name, portArg: strconv.Itoa(ports[i].Port)})
		}
	}
	writeJSON(w, http.StatusOK, ports)
}
