package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// Headers of a request one node forwards to another (forward.go). Only a
// request whose ClusterKeyHeader is the cluster's key is trusted with the
// others; a client's own values are ignored.
const (
	// ClusterKeyHeader carries the cluster key (Config.ClusterKey).
	ClusterKeyHeader = "X-Sbx-Cluster-Key"
	// ForwardedByHeader names the node that forwarded the request; a
	// forwarded request is never forwarded again.
	ForwardedByHeader = "X-Sbx-Forwarded-By"
	// CallerHeader is the caller the forwarding node authenticated, as
	// JSON: {"key_id":"key_…","admin":false} ({"admin":true} for the
	// operator).
	CallerHeader = "X-Sbx-Caller"
)

// ForwardDialTimeout bounds the connection to another node.
const ForwardDialTimeout = 5 * time.Second

// wireCaller is engine.Caller as CallerHeader carries it.
type wireCaller struct {
	KeyID string `json:"key_id,omitempty"`
	Admin bool   `json:"admin"`
}

// newForwarder is the reverse proxy to other nodes: it streams both ways
// as it goes (NDJSON lines, WebSocket upgrades, archives) and answers 503
// unavailable when the node does not answer.
func (s *Server) newForwarder() *httputil.ReverseProxy {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: ForwardDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
	return &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(forwardKey{}).(*forwardTarget)
			pr.SetURL(target.url)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			h := pr.Out.Header
			h.Del("Authorization")
			h.Set(ClusterKeyHeader, s.cfg.ClusterKey)
			h.Set(ForwardedByHeader, s.cfg.Node)
			h.Set(CallerHeader, target.caller)
			h.Set("X-Request-Id", target.rid)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			target := r.Context().Value(forwardKey{}).(*forwardTarget)
			s.log.Warn("forward to another node", "node_url", target.url.String(), "request_id", target.rid, "err", err)
			if r.Context().Err() != nil {
				return
			}
			s.writeError(w, r, errdefs.New(errdefs.ErrUnavailable,
				"the node this sandbox runs on does not answer (%s); retry", target.url.Host))
		},
	}
}

type forwardKey struct{}

// forwardTarget is where one request is forwarded, and as whom.
type forwardTarget struct {
	url    *url.URL
	caller string
	rid    string
}

// forwarded reports whether r came from another node of the cluster (its
// ClusterKeyHeader is the cluster key), and the caller that node
// authenticated.
func (s *Server) forwarded(r *http.Request) (engine.Caller, bool) {
	key := r.Header.Get(ClusterKeyHeader)
	if s.cfg.ClusterKey == "" || key == "" || subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.ClusterKey)) != 1 {
		return engine.Caller{}, false
	}
	var wc wireCaller
	if err := json.Unmarshal([]byte(r.Header.Get(CallerHeader)), &wc); err != nil {
		return engine.Caller{}, false
	}
	return engine.Caller{KeyID: wc.KeyID, Admin: wc.Admin}, true
}

// forward serves r by forwarding it to the node sandbox name runs on, when
// that is another node (engine.Route; engine.RouteDelete for a delete of
// the sandbox), and reports whether it did: it answered r (forwarded, or
// an error) and the caller must not. A request that another node forwarded
// is served here or refused, never forwarded again.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, name string) bool {
	if s.cfg.Node == "" {
		return false
	}
	route := s.eng.Route
	if r.Method == http.MethodDelete && !strings.Contains(strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/"), "/") {
		route = s.eng.RouteDelete
	}
	to, err := route(r.Context(), name)
	if err != nil {
		if errors.Is(err, errdefs.ErrUnavailable) {
			s.writeError(w, r, err)
			return true
		}
		// A missing sandbox and the like: the handler answers them.
		return false
	}
	if to == "" {
		return false
	}
	if s.cfg.ClusterKey == "" {
		s.writeError(w, r, errdefs.New(errdefs.ErrUnavailable,
			"sandbox %s runs on another node, and this node has no cluster key to forward the request with ($SBX_CLUSTER_KEY)", name))
		return true
	}
	if _, again := s.forwarded(r); again {
		s.writeError(w, r, errdefs.New(errdefs.ErrUnavailable,
			"sandbox %s moved to another node while this request was on its way; retry", name))
		return true
	}
	s.forwardTo(w, r, to)
	return true
}

// placeCreate forwards a create (POST /v1/sandboxes) to the node placement
// picks (engine.PlaceCreate; engine.PlaceStart for a start from a
// snapshot) when that is another node, and reports whether it did. A
// create another node forwarded is made here.
func (s *Server) placeCreate(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Node == "" || s.cfg.ClusterKey == "" {
		return false
	}
	if _, placed := s.forwarded(r); placed {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxJSONBody+1))
	if err != nil {
		s.writeError(w, r, err)
		return true
	}
	// The handler reads the whole body again (and answers one too large).
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if len(body) > MaxJSONBody {
		return false
	}
	var req struct {
		Image    string `json:"image"`
		Snapshot string `json:"snapshot"`
	}
	if json.Unmarshal(body, &req) != nil {
		return false // a bad body is answered here
	}
	place := func() (string, error) { return s.eng.PlaceCreate(r.Context(), req.Image) }
	if req.Snapshot != "" {
		place = func() (string, error) { return s.eng.PlaceStart(r.Context(), req.Snapshot) }
	}
	to, err := place()
	if err != nil || to == "" {
		return false
	}
	s.forwardTo(w, r, to)
	return true
}

// forwardTo forwards r to the node at URL to, as r's caller.
func (s *Server) forwardTo(w http.ResponseWriter, r *http.Request, to string) {
	u, err := url.Parse(to)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c := engine.CallerOf(r.Context())
	caller, _ := json.Marshal(wireCaller{KeyID: c.KeyID, Admin: c.Admin})
	rid := requestID(r.Context())
	// The other node answers with the same request id.
	w.Header().Del("X-Request-Id")
	ctx := context.WithValue(r.Context(), forwardKey{}, &forwardTarget{url: u, caller: string(caller), rid: rid})
	s.forwarder.ServeHTTP(w, r.WithContext(ctx))
}

// sandboxOfPath is the sandbox name of an API path on one sandbox
// (/v1/sandboxes/{name}[/...]), "" for any other path.
func sandboxOfPath(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/sandboxes/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

// PeerCallTimeout bounds a call the engine makes on another node (a fork's
// copy started there: a fetch of the memory image and a restore).
const PeerCallTimeout = 5 * time.Minute

// peers is engine.Peers over the other nodes' HTTP API.
type peers struct{ s *Server }

// CreateSandbox implements engine.Peers: POST url/v1/sandboxes as ctx's
// caller, with the cluster key; the node makes it itself (a forwarded
// create is not placed again).
func (p peers) CreateSandbox(ctx context.Context, nodeURL string, req api.CreateSandboxRequest) (string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, PeerCallTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(nodeURL, "/")+"/v1/sandboxes", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	c := engine.CallerOf(ctx)
	caller, _ := json.Marshal(wireCaller{KeyID: c.KeyID, Admin: c.Admin})
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(ClusterKeyHeader, p.s.cfg.ClusterKey)
	hr.Header.Set(ForwardedByHeader, p.s.cfg.Node)
	hr.Header.Set(CallerHeader, string(caller))
	resp, err := p.s.forwarder.Transport.RoundTrip(hr)
	if err != nil {
		return "", errdefs.New(errdefs.ErrUnavailable, "node at %s does not answer: %v", hr.URL.Host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxJSONBody))
	if resp.StatusCode != http.StatusCreated {
		var er api.ErrorResponse
		if json.Unmarshal(b, &er) == nil && er.Error.Code != "" {
			return "", fmt.Errorf("node at %s: %s (%s)", hr.URL.Host, er.Error.Message, er.Error.Code)
		}
		return "", fmt.Errorf("node at %s: HTTP %d", hr.URL.Host, resp.StatusCode)
	}
	var sb api.Sandbox
	if err := json.Unmarshal(b, &sb); err != nil || sb.ID == "" {
		return "", fmt.Errorf("node at %s: an unreadable sandbox: %v", hr.URL.Host, err)
	}
	return sb.ID, nil
}
