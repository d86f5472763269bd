// Package server is sbxd's REST API v1 (docs/api.md): it parses and
// validates requests, calls the engine, maps errors to API error codes in
// one place (writeError) and streams NDJSON. It holds no lifecycle logic.
package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/console"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// Version is reported by GET /v1/health: the repository's VERSION file when
// built by scripts/install.sh or make build (-ldflags -X), else "dev".
var Version = "dev"

// MaxJSONBody is the largest JSON request body, in bytes; an exec's body
// (whose stdin is a JSON string) may be up to MaxExecBody.
const (
	MaxJSONBody = 1 << 20
	MaxExecBody = 64 << 20
)

// Config configures the API.
type Config struct {
	// Node is this sbxd's node name in a cluster ("" on a single sbxd):
	// requests on a sandbox of another node are forwarded to it.
	Node string
	// ClusterKey authenticates the nodes of a cluster to each other
	// (ClusterKeyHeader): a request that carries it is trusted with the
	// caller the forwarding node authenticated.
	ClusterKey string
	// APIKeys are the operator's bearer keys (--api-key, $SBX_API_KEYS),
	// accepted where auth is required (TCP) as admin keys. Keys made
	// through POST /v1/keys are records in the store.
	APIKeys []string
	// PreviewDomain is the domain of host-based previews: a request whose
	// Host is <port>-<name>.<PreviewDomain> goes whole to that sandbox's
	// port. "" turns host-based routing off (path-based previews remain).
	PreviewDomain string
	// Platform and PlatformReason are the runtime's platform and why it
	// was chosen, shown by GET /v1/health.
	Platform, PlatformReason string
	// MaxUploadBytes bounds the body of PUT .../files and PUT .../archive
	// (default DefaultMaxUploadBytes).
	MaxUploadBytes int64
	// PreviewConnectTimeout, PreviewResponseTimeout and PreviewIdleTimeout
	// bound a preview request (0: DefaultPreviewConnectTimeout, ...): the
	// connection to the sandbox's port must open within the first, the
	// program's response head arrive within the second, and its response
	// body never stay silent longer than the third (upgraded connections,
	// WebSockets, have no idle bound). Past one, the client gets
	// 504 port_timeout.
	PreviewConnectTimeout, PreviewResponseTimeout, PreviewIdleTimeout time.Duration
	// Console serves the web console (internal/console) on the TCP
	// listener: "/" and the paths under /console/, before authentication
	// (the page holds no data; it calls the API with the key a person
	// signs in with). nil serves no console.
	Console http.Handler
}

// DefaultMaxUploadBytes is the default bound of a file or archive upload:
// 1 GiB.
const DefaultMaxUploadBytes = 1 << 30

// Server serves the API.
type Server struct {
	eng *engine.Engine
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// dial connects to a sandbox's TCP port (the engine's DialPort); the
	// proxy passes the sandbox's id.
	dial func(ctx context.Context, id string, port int) (net.Conn, error)
	// lookup returns the id of the sandbox named idOrName as ctx's caller
	// sees it (the engine's Get): ErrSandboxNotFound for another tenant's.
	lookup func(ctx context.Context, idOrName string) (string, error)
	proxy  *httputil.ReverseProxy
	// forwarder forwards requests to other nodes (forward.go).
	forwarder *httputil.ReverseProxy
	// selfLn serve this API in process to the MCP tools (serveMCP),
	// without auth [0] and with it [1].
	selfOnce [2]sync.Once
	selfLn   [2]*pipeListener
	// openapi is the API's OpenAPI description as JSON (openAPI), or why
	// it could not be converted.
	openapi    []byte
	openapiErr error
	// streams are the requests in progress of each key record, ended
	// when the key is revoked.
	streams keyStreams
	// outage is the record store's outage (the engine's StoreOutage); nil
	// when it cannot have one.
	outage func() error
}

// New returns the API server.
func New(eng *engine.Engine, cfg Config, log *slog.Logger) *Server {
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.PreviewConnectTimeout <= 0 {
		cfg.PreviewConnectTimeout = DefaultPreviewConnectTimeout
	}
	if cfg.PreviewResponseTimeout <= 0 {
		cfg.PreviewResponseTimeout = DefaultPreviewResponseTimeout
	}
	if cfg.PreviewIdleTimeout <= 0 {
		cfg.PreviewIdleTimeout = DefaultPreviewIdleTimeout
	}
	s := &Server{eng: eng, cfg: cfg, log: log, mux: http.NewServeMux(), outage: eng.StoreOutage}
	s.dial = func(ctx context.Context, id string, port int) (net.Conn, error) {
		return s.eng.DialPort(ctx, id, port)
	}
	s.lookup = func(ctx context.Context, idOrName string) (string, error) {
		sb, err := s.eng.Get(ctx, idOrName)
		if err != nil {
			return "", err
		}
		return sb.ID, nil
	}
	s.proxy = s.newProxy()
	s.forwarder = s.newForwarder()
	if cfg.Node != "" && cfg.ClusterKey != "" {
		eng.SetPeers(peers{s})
	}
	s.loadOpenAPI()
	s.routes()
	return s
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /v1/health", s.health)
	m.HandleFunc("GET /v1/openapi.json", s.openAPI)

	m.HandleFunc("POST /v1/sandboxes", s.createSandbox)
	m.HandleFunc("GET /v1/sandboxes", s.listSandboxes)
	m.HandleFunc("GET /v1/sandboxes/{name}", s.getSandbox)
	m.HandleFunc("DELETE /v1/sandboxes/{name}", s.deleteSandbox)
	m.HandleFunc("POST /v1/sandboxes/{name}/stop", s.stopSandbox)
	m.HandleFunc("PUT /v1/sandboxes/{name}", s.updateSandbox)
	m.HandleFunc("POST /v1/sandboxes/{name}/suspend", s.suspendSandbox)
	m.HandleFunc("POST /v1/sandboxes/{name}/resume", s.resumeSandbox)
	m.HandleFunc("GET /v1/sandboxes/{name}/events", s.listEvents)
	m.HandleFunc("POST /v1/events/{key...}", s.postEvent)
	m.HandleFunc("GET /v1/events", s.listPendingEvents)
	m.HandleFunc("DELETE /v1/events", s.cancelEvents)
	m.HandleFunc("DELETE /v1/events/{id}", s.cancelEvent)
	m.HandleFunc("POST /v1/sandboxes/{name}/exec", s.exec)
	m.HandleFunc("GET /v1/sandboxes/{name}/exec", s.execTTY)
	m.HandleFunc("GET /v1/sandboxes/{name}/files", s.getFile)
	m.HandleFunc("PUT /v1/sandboxes/{name}/files", s.putFile)
	m.HandleFunc("DELETE /v1/sandboxes/{name}/files", s.deleteFile)
	m.HandleFunc("GET /v1/sandboxes/{name}/archive", s.getArchive)
	m.HandleFunc("PUT /v1/sandboxes/{name}/archive", s.putArchive)
	m.HandleFunc("POST /v1/sandboxes/{name}/checkpoint", s.checkpoint)
	m.HandleFunc("GET /v1/sandboxes/{name}/checkpoints", s.listCheckpoints)
	m.HandleFunc("GET /v1/sandboxes/{name}/checkpoints/{id}", s.getCheckpoint)
	m.HandleFunc("POST /v1/sandboxes/{name}/checkpoints/{id}/restore", s.restore)
	m.HandleFunc("GET /v1/sandboxes/{name}/checkpoints/{id}/diff", s.diff)
	m.HandleFunc("POST /v1/sandboxes/{name}/snapshot", s.snapshot)
	m.HandleFunc("POST /v1/sandboxes/{name}/fork", s.fork)
	m.HandleFunc("GET /v1/sandboxes/{name}/ports", s.listPorts)
	// Requests for /v1/sandboxes/{name}/ports/{port}/... (any method) and
	// for <port>-<name>.<preview domain> are proxied before routing
	// (Handler, servePreview): they have their own authentication.
	m.HandleFunc("GET /v1/sandboxes/{name}/processes", s.listProcesses)
	m.HandleFunc("GET /v1/sandboxes/{name}/processes/{pid}/output", s.processOutput)
	m.HandleFunc("POST /v1/sandboxes/{name}/processes/{pid}/signal", s.signalProcess)
	m.HandleFunc("GET /v1/sandboxes/{name}/processes/{pid}/tty", s.attachTTY)
	m.HandleFunc("GET /v1/sandboxes/{name}/network", s.getNetwork)
	m.HandleFunc("PUT /v1/sandboxes/{name}/network", s.putNetwork)
	m.HandleFunc("GET /v1/sandboxes/{name}/network/log", s.networkLog)
	m.HandleFunc("GET /v1/sandboxes/{name}/secrets", s.listSecrets)
	m.HandleFunc("PUT /v1/sandboxes/{name}/secrets", s.setSecrets)
	m.HandleFunc("PUT /v1/sandboxes/{name}/secrets/{secret}", s.putSecret)
	m.HandleFunc("DELETE /v1/sandboxes/{name}/secrets/{secret}", s.deleteSecret)
	m.HandleFunc("POST /v1/sandboxes/{name}/deliveries", s.deliver)
	m.HandleFunc("GET /v1/deliveries", s.listDeliveries)
	m.HandleFunc("GET /v1/deliveries/key", s.deliveryKey)
	m.HandleFunc("GET /v1/deliveries/{id}", s.getDelivery)
	m.HandleFunc("GET /v1/deliveries/{id}/archive", s.deliveryArchive)
	m.HandleFunc("POST /v1/classify", s.classify)
	m.HandleFunc("GET /v1/usage", s.usage)
	m.HandleFunc("GET /v1/nodes", s.listNodes)
	m.HandleFunc("POST /v1/nodes/{name}/drain", s.drainNode(true))
	m.HandleFunc("DELETE /v1/nodes/{name}/drain", s.drainNode(false))
	m.HandleFunc("DELETE /v1/nodes/{name}", s.removeNode)
	m.HandleFunc("GET /v1/snapshots", s.listSnapshots)
	m.HandleFunc("GET /v1/snapshots/{id}", s.getSnapshot)
	m.HandleFunc("DELETE /v1/snapshots/{id}", s.deleteSnapshot)

	m.HandleFunc("POST /v1/keys", s.createKey)
	m.HandleFunc("GET /v1/keys", s.listKeys)
	m.HandleFunc("GET /v1/keys/{id}", s.getKey)
	m.HandleFunc("DELETE /v1/keys/{id}", s.deleteKey)
	m.HandleFunc("PUT /v1/keys/{id}/limit", s.putKeyLimit)

	m.HandleFunc("GET /v1/images", s.listImages)
	m.HandleFunc("GET /v1/images/{name}", s.getImage)
	m.HandleFunc("DELETE /v1/images/{name}", s.deleteImage)
	m.HandleFunc("POST /v1/images/build", s.buildImage)
	m.HandleFunc("POST /v1/images/pull", s.pullImage)
	m.HandleFunc("POST /v1/images/import", s.importImage)
}

// route serves r, answering unknown routes (404) and wrong methods (405,
// with Allow) with the API's JSON error body.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r) // sets the path values
		return
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", rec.Header().Get("Allow"))
		writeJSON(w, http.StatusMethodNotAllowed, api.ErrorResponse{Error: api.ErrorBody{
			Code: api.CodeMethodNotAllowed, Message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, rec.Header().Get("Allow"))}})
		return
	}
	s.writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// Handler returns the API handler; with auth it requires a bearer key (the
// TCP listener): a configured key acts as the operator (an admin), a key
// record as itself (engine.Caller: a tenant sees only what it made).
// Without auth it trusts the caller as the operator (the Unix socket,
// guarded by its file permissions). Requests for a sandbox's port
// (previews) are proxied to it; with auth they take the key as a bearer
// key or as the preview cookie that ?sbx_key=KEY sets. The requests of a
// key record end when it is revoked.
func (s *Server) Handler(auth bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := newRequestID()
		if _, ok := s.forwarded(r); ok && validRequestID(r.Header.Get("X-Request-Id")) {
			// The node that forwarded the request logged it under its id.
			rid = r.Header.Get("X-Request-Id")
		}
		w.Header().Set("X-Request-Id", rid)
		ctx := context.WithValue(r.Context(), ridKey{}, rid)
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}
		if p, ok := s.previewOf(r); ok {
			s.servePreview(sw, r, p, auth)
		} else if auth && s.cfg.Console != nil && console.Serves(r.URL.Path) {
			s.cfg.Console.ServeHTTP(sw, r)
		} else {
			s.serveAPI(sw, r, auth)
		}
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"ms", time.Since(start).Milliseconds(), "request_id", rid)
	})
}

// serveAPI authenticates r (with auth) and serves it as its caller.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, auth bool) {
	c := engine.Operator
	if fc, ok := s.forwarded(r); ok {
		c = fc
	} else if auth {
		key, _ := requestKey(r)
		var err error
		if c, err = s.callerOfKey(r.Context(), key); err != nil {
			s.writeError(w, r, err)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), apiKeyKey{}, key))
	}
	r, done, err := s.track(r, c)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer done()
	if r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes" && s.placeCreate(w, r) {
		return
	}
	// A sandbox's record is read here; anything else on it is served by
	// its node.
	if name := sandboxOfPath(r.URL.Path); name != "" && !(r.Method == http.MethodGet && r.URL.Path == "/v1/sandboxes/"+name) && s.forward(w, r, name) {
		return
	}
	if r.URL.Path == mcpPath {
		s.serveMCP(w, r, auth)
	} else {
		s.route(w, r)
	}
}

// requestKey returns the API key of r: its Authorization header's bearer
// token or, for a WebSocket upgrade without that header (a browser's
// WebSocket cannot send one), the key carried as the subprotocol
// "bearer.<key in unpadded base64url>" (ttyKeyProtocol; as Kubernetes'
// base64url.bearer.authorization.k8s.io). sbxd never answers that
// subprotocol back: it selects "sbx.tty" (ttyProtocol).
func requestKey(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		return bearerKey(h)
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return "", false
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			enc, ok := strings.CutPrefix(strings.TrimSpace(p), ttyKeyProtocol)
			if !ok {
				continue
			}
			b, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil || len(b) == 0 {
				return "", false
			}
			return string(b), true
		}
	}
	return "", false
}

// bearerKey returns the token of an Authorization header of the Bearer
// scheme. The scheme is matched without regard to case and may be followed
// by more than one space (RFC 7235 section 2.1, RFC 6750 section 2.1).
func bearerKey(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}

type ridKey struct{}

// apiKeyKey is the context key of the API key that admitted a request
// (serveAPI with auth); a request over the Unix socket carries none.
type apiKeyKey struct{}

// apiKeyOf returns the API key that admitted ctx's request; "" over the
// Unix socket.
func apiKeyOf(ctx context.Context) string {
	k, _ := ctx.Value(apiKeyKey{}).(string)
	return k
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// validRequestID reports whether id has newRequestID's form.
func validRequestID(id string) bool {
	hexPart, ok := strings.CutPrefix(id, "req_")
	if !ok || len(hexPart) != 16 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(ridKey{}).(string)
	return id
}

// statusWriter records the status for the log and passes Flush through.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// listNodes answers the cluster's nodes (an admin key's request).
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.eng.Nodes(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, nodes)
}

// drainNode answers a drain of node {name} (drain) or its end.
func (s *Server) drainNode(drain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, err := s.eng.DrainNode(r.Context(), r.PathValue("name"), drain)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, n)
	}
}

// removeNode answers DELETE /v1/nodes/{name}: 204 once the record is gone.
func (s *Server) removeNode(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.RemoveNode(r.Context(), r.PathValue("name")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// errorOf turns err into the API's error body: the class's code, and the
// message for classified errors; internal errors get a generic message and
// are logged once with the request id.
func (s *Server) errorOf(ctx context.Context, err error) api.ErrorBody {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = errdefs.New(errdefs.ErrTooLarge, "request body is larger than %d bytes", mbe.Limit)
	}
	if !errdefs.Public(err) && s.outage != nil && ctx.Err() == nil {
		if o := s.outage(); o != nil {
			// The operation failed because the record store does not
			// answer: that is the caller's answer (503, retry), whatever
			// the engine wrapped it in. The cause goes to the log.
			s.log.Warn("operation failed: the record store does not answer", "request_id", requestID(ctx), "err", err)
			err = o
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ctx.Err() == nil {
			// A deadline underneath (a runsc verb's, an agent's) cut the
			// operation: the sandbox does not answer. The cause's text
			// (runsc's arguments, host paths) goes to the log only.
			s.log.Warn("operation cut by its deadline", "request_id", requestID(ctx), "err", err)
			err = errdefs.New(errdefs.ErrUnavailable, "the operation did not finish within its deadline: the sandbox or runsc does not answer (stopped, frozen or overloaded), or the host is overloaded; other sandboxes are not affected; retry, or stop or delete it")
		}
	}
	gone := false
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errRevoked) {
		// The key was revoked while its request ran.
		err = errRevoked
	} else if ctx.Err() != nil && errors.Is(err, context.Canceled) && errdefs.Code(err) == api.CodeInternal {
		// The client went away (it hung up, or was interrupted): nobody
		// reads this answer, and it is not sbxd's failure.
		err = errdefs.New(errdefs.ErrUnavailable, "the request was cancelled: its client went away")
		gone = true
	}
	code := errdefs.Code(err)
	body := api.ErrorBody{Code: code, Message: err.Error()}
	if code == api.CodeInternal {
		rid := requestID(ctx)
		s.log.Error("internal error", "request_id", rid, "err", err)
		body.Message = "internal error; see sbxd's log for request " + rid
		body.RequestID = rid
	} else if !errdefs.Public(err) {
		// An operation failed underneath: its text can hold host paths,
		// runsc's spec and output, and lines the guest wrote. The caller
		// gets the code, what it means, the details meant for callers
		// and the request id; the log gets the rest.
		rid := requestID(ctx)
		s.log.Warn("operation failed", "request_id", rid, "code", code, "err", err)
		body.Message = failedMessages[code]
		if body.Message == "" {
			body.Message = "the operation failed"
		}
		if d := errdefs.Detail(err); d != "" {
			body.Message += ": " + d
		}
		body.Message += "; sbxd logged the cause under request " + rid
		body.RequestID = rid
	} else if code.HTTPStatus() >= 500 {
		body.RequestID = requestID(ctx)
		level := slog.LevelWarn
		if gone || code == api.CodePortUnreachable || code == api.CodePortTimeout {
			// A preview of a server not (yet) listening: the user's
			// condition, not sbxd's; a broken connection is logged where
			// it is seen.
			level = slog.LevelDebug
		}
		s.log.Log(ctx, level, "operation failed", "request_id", body.RequestID, "code", code, "err", err)
	}
	return body
}

// failedMessages say what an operation-failed code means, for error
// bodies whose cause is not shown (errdefs.Public).
var failedMessages = map[api.Code]string{
	api.CodeCheckpointFailed: "the checkpoint failed; nothing was changed",
	api.CodeRestoreFailed:    "the restore failed; the disk is as it was",
	api.CodeSnapshotFailed:   "the memory snapshot failed; nothing was changed",
	api.CodeForkFailed:       "the fork failed; nothing was changed",
	api.CodeSuspendFailed:    "the suspend failed; the sandbox runs as before",
	api.CodeResumeFailed:     "the resume failed; the sandbox is still suspended",
}

// writeError is the one place that maps errors to HTTP answers.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	body := s.errorOf(r.Context(), err)
	writeJSON(w, body.Code.HTTPStatus(), api.ErrorResponse{Error: body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// decode reads a JSON body of at most limit bytes into v; unknown fields
// and trailing data are errors naming what is wrong. An empty body leaves v
// as it is when optional.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any, optional bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return errdefs.Invalid("Content-Type", "%q: send application/json", ct)
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return err
	}
	if err := checkRulesKeys(b, v); err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		// json leaves v as it is for null: a client that sent a nil
		// value would get a default object (a sandbox) it did not ask for.
		return errdefs.Invalid("body", "expected an object, got JSON null")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.Is(err, io.EOF):
			if optional {
				return nil
			}
			return errdefs.Invalid("body", "a JSON object is required")
		}
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			field := ute.Field
			if field == "" {
				field = "body"
			}
			return errdefs.Invalid(field, "expected %s, got JSON %s", jsonKind(ute.Type), ute.Value)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return errdefs.Invalid(strings.Trim(f, `"`), "unknown field")
		}
		return errdefs.Invalid("body", "malformed JSON: %v", err)
	}
	if dec.More() {
		return errdefs.Invalid("body", "trailing data after the JSON object")
	}
	return nil
}

// jsonKind names the JSON form of a Go type, for messages.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}

// rulesKeys are the fields of a network rules object.
var rulesKeys = map[string]bool{"internet": true, "allow": true, "deny": true, "connect": true}

// checkRulesKeys holds network rules, which decode with a default (internet
// true when absent) and so past DisallowUnknownFields, to their exact keys:
// a misspelt "alow" must not silently mean "no allow list". It checks the
// body itself when v is rules (PUT .../network), else a "network" object in
// it (create, fork).
func checkRulesKeys(b []byte, v any) error {
	field := "network"
	obj := b
	if _, ok := v.(*api.NetworkRules); !ok {
		var top map[string]json.RawMessage
		if json.Unmarshal(b, &top) != nil {
			return nil // the decode says what is wrong
		}
		raw, ok := top["network"]
		if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return nil
		}
		obj = raw
	} else if t := bytes.TrimSpace(b); bytes.Equal(t, []byte("null")) {
		return errdefs.Invalid("body", "want a JSON object {\"internet\", \"allow\", \"deny\", \"connect\"}, not null")
	}
	var rules map[string]json.RawMessage
	if err := json.Unmarshal(obj, &rules); err != nil {
		if len(bytes.TrimSpace(obj)) == 0 {
			return nil
		}
		return errdefs.Invalid(field, "want a JSON object {\"internet\", \"allow\", \"deny\", \"connect\"}")
	}
	for k := range rules {
		if !rulesKeys[k] {
			return errdefs.Invalid(field+"."+k, "unknown field (the fields are internet, allow, deny and connect)")
		}
	}
	return nil
}

// wantsNDJSON reports whether the client asked for an NDJSON stream.
func wantsNDJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "application/x-ndjson" {
			return true
		}
	}
	return false
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	kind, quota, diskMB, note := s.eng.DiskLayers()
	capacity := s.eng.Capacity()
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: Version, Runtime: s.eng.Runtime(),
		Platform: s.cfg.Platform, PlatformReason: s.cfg.PlatformReason,
		WarmSandboxes: s.eng.WarmSandboxes(), PID: os.Getpid(),
		Layers: kind, DiskQuota: quota, DefaultDiskMB: diskMB, LayersNote: note, Checkpoints: s.eng.CheckpointMechanism(),
		Capacity: &capacity})
}
