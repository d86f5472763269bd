package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
	"github.com/sbxhq/sbx/mcp"
)

// mcpPath serves the API's tools to MCP clients (streamable HTTP).
const mcpPath = "/v1/mcp"

// serveMCP serves /v1/mcp. Its tools act through a client of this same
// API, in process, that carries the caller's key (with auth), so every
// rule of the API applies to them unchanged.
// Only POST is served: the transport is stateless, so there is no session
// for GET to stream on or for DELETE to end; other methods answer the
// API's JSON 405 (method_not_allowed, Allow: POST).
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request, auth bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, api.ErrorResponse{Error: api.ErrorBody{
			Code: api.CodeMethodNotAllowed,
			Message: fmt.Sprintf("method %s is not allowed on %s (allowed: POST): MCP here is streamable HTTP, stateless: "+
				"POST each JSON-RPC message; there is no session to open a GET stream on or to DELETE", r.Method, mcpPath)}})
		return
	}
	self := s.self(auth)
	key := ""
	if auth {
		key, _ = bearerKey(r.Header.Get("Authorization"))
	}
	mcp.Handler(func(*http.Request) *client.Client {
		c, err := client.New(client.WithURL("http://sbxd"), client.WithAPIKey(key),
			client.WithHTTPClient(&http.Client{Transport: &http.Transport{DialContext: self.dial}}))
		if err != nil {
			s.log.Error("mcp: in-process client", "err", err)
			return nil
		}
		return c
	}, Version).ServeHTTP(w, r)
}

// self returns the in-process listener that serves this API (with or
// without auth) to the MCP tools, starting it on first use. It lives as
// long as the process.
func (s *Server) self(auth bool) *pipeListener {
	i := 0
	if auth {
		i = 1
	}
	s.selfOnce[i].Do(func() {
		ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		hs := &http.Server{Handler: s.Handler(auth), ReadHeaderTimeout: 30 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		s.selfLn[i] = ln
	})
	return s.selfLn[i]
}

// pipeListener is a net.Listener whose connections are in-memory pipes
// (net.Pipe) made by dial.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// Accept waits for a dial.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; connections made stay open.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a placeholder address.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, c := net.Pipe()
	select {
	case l.conns <- server:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "sbxd" }
