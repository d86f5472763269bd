package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/runtime/runtimetest"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/sqlite"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

// noNetwork is an engine.Network that makes nothing (no sandbox runs in
// these tests).
type noNetwork struct{}

func (noNetwork) ResolvConf() string                                    { return "nameserver 127.0.0.1\n" }
func (noNetwork) Start() error                                          { return nil }
func (noNetwork) Create(string, string, *network.Rules) (string, error) { return "", nil }
func (noNetwork) Attach(string, string, *network.Rules) error           { return nil }
func (noNetwork) Update(string, *network.Rules) error                   { return nil }
func (noNetwork) Rename(string, string)                                 {}
func (noNetwork) Delete(string) error                                   { return nil }
func (noNetwork) Check(*network.Rules) error                            { return nil }
func (noNetwork) Log(string) (api.NetworkLog, error)                    { return api.NetworkLog{}, nil }

// keyServer is an API server on a real engine and store (no runtime: the
// tests touch keys only) with test routes that stream until their request
// ends, and previews that reach an echo backend.
type keyServer struct {
	s     *Server
	st    *sqlite.Store
	front *httptest.Server
	// pages are the programs listening in sandboxes, by sandbox id (any
	// port); a sandbox without one has the echo backend.
	mu    sync.Mutex
	pages map[string]*httptest.Server
	// release ends the long operation of POST /v1/test/long.
	release chan struct{}
}

func newKeyServer(t *testing.T) *keyServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbxk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	images, err := disk.NewImages(filepath.Join(dir, "images"), "", st, log)
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(runtimetest.AgentBinary(t), "sbx-agent")
	eng, err := engine.New(engine.Config{DataDir: dir, Layers: disk.LayersDir, AgentBin: agent}, st, nil, images, noNetwork{}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	ks := &keyServer{st: st, release: make(chan struct{}), pages: map[string]*httptest.Server{}}
	ks.s = New(eng, Config{APIKeys: []string{testKey}, PreviewDomain: "localhost"}, log)
	// A stream that says who it serves and lasts until its request ends,
	// as an exec stream does.
	ks.s.mux.HandleFunc("GET /v1/test/stream", func(w http.ResponseWriter, r *http.Request) {
		st := startStream(w)
		st.line(map[string]string{"type": "start", "key": engine.CallerOf(r.Context()).KeyID})
		<-r.Context().Done()
		body := ks.s.errorOf(r.Context(), r.Context().Err())
		st.line(api.ExecEvent{Type: api.ExecError, Error: body.Message, Code: body.Code})
	})
	ks.s.mux.HandleFunc("POST /v1/test/long", func(w http.ResponseWriter, r *http.Request) {
		ks.s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
			progress("begun")
			<-ks.release
			return map[string]bool{"done": true}, nil
		})
	})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		_, _ = io.Copy(c, brw)
	}))
	t.Cleanup(backend.Close)
	// As the engine's DialPort: the sandbox as the caller sees it, then
	// its program.
	ks.s.dial = func(ctx context.Context, id string, port int) (net.Conn, error) {
		sb, err := eng.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		addr := backend.Listener.Addr().String()
		ks.mu.Lock()
		if pg := ks.pages[sb.ID]; pg != nil {
			addr = pg.Listener.Addr().String()
		}
		ks.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	ks.front = httptest.NewServer(ks.s.Handler(true))
	t.Cleanup(ks.front.Close)
	t.Cleanup(func() { close(ks.release) })
	return ks
}

// sandbox records a running sandbox named name of key owner (no runtime)
// and returns its id. With page, its ports serve "the page of <name>
// (<id>)"; without, the echo backend.
func (ks *keyServer) sandbox(t *testing.T, owner, name string, page bool) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "sbx_" + hex.EncodeToString(b[:])
	now := time.Now()
	if err := ks.st.CreateSandbox(context.Background(), &store.Sandbox{ID: id, Name: name, State: api.StateRunning,
		Image: "base", CreateTime: now, UpdateTime: now, Owner: owner}); err != nil {
		t.Fatal(err)
	}
	if page {
		pg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "the page of %s (%s)", name, id)
		}))
		t.Cleanup(pg.Close)
		ks.mu.Lock()
		ks.pages[id] = pg
		ks.mu.Unlock()
	}
	return id
}

// do sends a request with key as bearer and body (JSON) if not "".
func (ks *keyServer) do(t *testing.T, method, path, key, body string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ks.front.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	// Bounded: a stream that a revoke fails to end fails the test.
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// newKey makes a key as the operator and returns it.
func (ks *keyServer) newKey(t *testing.T, body string) api.CreatedKey {
	t.Helper()
	resp := ks.do(t, "POST", "/v1/keys", testKey, body)
	var k api.CreatedKey
	if resp.StatusCode != 201 || json.NewDecoder(resp.Body).Decode(&k) != nil || k.Secret == "" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create key %s: %d %s", body, resp.StatusCode, b)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the secret's answer may be cached: %q", resp.Header.Get("Cache-Control"))
	}
	return k
}

// TestKeysAPI: an admin makes keys; a tenant key authenticates, sees only
// its own record and may not manage keys; bad requests are 400 naming the
// field; a revoked key is 401.
func TestKeysAPI(t *testing.T) {
	ks := newKeyServer(t)
	tenant := ks.newKey(t, `{"name":"agent-1","daily_limit_usd":0.5,"labels":{"team":"a"}}`)
	if tenant.Admin || tenant.DailyLimitUSD == nil || *tenant.DailyLimitUSD != 0.5 || tenant.Labels["team"] != "a" ||
		!strings.HasPrefix(tenant.Secret, "sbxk_") || !strings.HasPrefix(tenant.ID, "key_") {
		t.Fatalf("%+v", tenant)
	}
	admin := ks.newKey(t, `{"name":"ops","admin":true}`)
	// The operator lists both, without secrets.
	resp := ks.do(t, "GET", "/v1/keys", testKey, "")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.Contains(string(b), tenant.Secret) || strings.Contains(string(b), "secret") ||
		!strings.Contains(string(b), tenant.ID) || !strings.Contains(string(b), admin.ID) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// The tenant sees itself only.
	var mine []api.Key
	resp = ks.do(t, "GET", "/v1/keys", tenant.Secret, "")
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&mine) != nil || len(mine) != 1 || mine[0].ID != tenant.ID {
		t.Fatalf("tenant lists %d %+v", resp.StatusCode, mine)
	}
	errorOf(t, ks.do(t, "GET", "/v1/keys/"+admin.ID, tenant.Secret, ""), 404, api.CodeKeyNotFound)
	errorOf(t, ks.do(t, "POST", "/v1/keys", tenant.Secret, `{"name":"mine"}`), 403, api.CodeForbidden)
	errorOf(t, ks.do(t, "POST", "/v1/keys", tenant.Secret, `{"bogus":1}`), 403, api.CodeForbidden)
	errorOf(t, ks.do(t, "DELETE", "/v1/keys/"+admin.ID, tenant.Secret, ""), 403, api.CodeForbidden)
	// An admin key made through the API manages keys.
	other := ks.newKey(t, `{"name":"agent-2"}`)
	resp = ks.do(t, "POST", "/v1/keys", admin.Secret, `{"name":"agent-3"}`)
	if resp.StatusCode != 201 {
		t.Fatalf("an admin key makes a key: %d", resp.StatusCode)
	}
	for body, field := range map[string]string{
		`{}`:          "name",
		`{"name":""}`: "name",
		`{"name":5}`:  "name",
		`{"name":"` + strings.Repeat("n", 64) + `"}`: "name",
		`{"name":"a b"}`:                     "name",
		`{"name":"x","daily_limit_usd":-1}`:  "daily_limit_usd",
		`{"name":"x","daily_limit_usd":"1"}`: "daily_limit_usd",
		`{"name":"x","admin":"yes"}`:         "admin",
		`{"name":"x","labels":{"a b":"c"}}`:  "labels",
		`{"name":"x","owner":"me"}`:          "owner",
		`[]`:                                 "body",
		`{"name":"x"} {}`:                    "body",
	} {
		msg := errorOf(t, ks.do(t, "POST", "/v1/keys", testKey, body), 400, api.CodeInvalidArgument)
		if !strings.HasPrefix(msg, field+":") {
			t.Errorf("%s: %q, want the field %s named", body, msg, field)
		}
	}
	errorOf(t, ks.do(t, "POST", "/v1/keys", testKey, `{"name":"agent-1"}`), 409, api.CodeNameTaken)
	errorOf(t, ks.do(t, "DELETE", "/v1/keys/key_0000000000000000", testKey, ""), 404, api.CodeKeyNotFound)
	// Revoked: 401 at once; the name is free again.
	if resp := ks.do(t, "DELETE", "/v1/keys/"+other.ID, testKey, ""); resp.StatusCode != 204 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	errorOf(t, ks.do(t, "GET", "/v1/keys", other.Secret, ""), 401, api.CodeUnauthorized)
	errorOf(t, ks.do(t, "DELETE", "/v1/keys/"+other.ID, testKey, ""), 404, api.CodeKeyNotFound)
	ks.newKey(t, `{"name":"agent-2"}`)
	resp = ks.do(t, "GET", "/v1/keys?revoked=1", testKey, "")
	b, _ = io.ReadAll(resp.Body)
	if !strings.Contains(string(b), other.ID) || !strings.Contains(string(b), "revoke_time") {
		t.Fatalf("revoked keys: %s", b)
	}
	errorOf(t, ks.do(t, "GET", "/v1/keys?revoked=maybe", testKey, ""), 400, api.CodeInvalidArgument)
	// A wrong key of the record form is 401 too.
	errorOf(t, ks.do(t, "GET", "/v1/keys", "sbxk_"+strings.Repeat("A", 43), ""), 401, api.CodeUnauthorized)
}

// waitOpen waits until key id has n requests in progress.
func (ks *keyServer) waitOpen(t *testing.T, id string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ks.s.openRequests(id) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("key %s has %d requests open, want %d", id, ks.s.openRequests(id), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRevokeEndsStreams: revoking a key ends its open streams at once
// (with unauthorized), a long operation's answer included (the operation
// itself goes on), and an upgraded preview connection; another key's
// stream goes on.
func TestRevokeEndsStreams(t *testing.T) {
	ks := newKeyServer(t)
	victim := ks.newKey(t, `{"name":"victim"}`)
	bystander := ks.newKey(t, `{"name":"bystander"}`)
	ks.sandbox(t, victim.ID, "web", false)
	open := func(key string) *bufio.Reader {
		resp := ks.do(t, "GET", "/v1/test/stream", key, "")
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		if err != nil || !strings.Contains(line, `"start"`) {
			t.Fatalf("stream: %q %v", line, err)
		}
		return br
	}
	v, by := open(victim.Secret), open(bystander.Secret)
	longResp := ks.do(t, "POST", "/v1/test/long", victim.Secret, "")
	longBody := bufio.NewReader(longResp.Body)
	if line, err := longBody.ReadString('\n'); err != nil || !strings.Contains(line, "begun") {
		t.Fatalf("long: %q %v", line, err)
	}
	// A WebSocket-like upgraded preview connection under the key.
	conn, err := net.Dial("tcp", ks.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: 3000-web.localhost\r\nAuthorization: Bearer %s\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", victim.Secret)
	cr := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(cr, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 4); func() error { _, err := io.ReadFull(cr, b); return err }() != nil || string(b) != "ping" {
		t.Fatalf("echo %q", b)
	}
	ks.waitOpen(t, victim.ID, 3)

	if resp := ks.do(t, "DELETE", "/v1/keys/"+victim.ID, testKey, ""); resp.StatusCode != 204 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	rest, err := io.ReadAll(v)
	if err != nil || !strings.Contains(string(rest), `"code":"unauthorized"`) || !strings.Contains(string(rest), "revoked") {
		t.Fatalf("the victim's stream after the revoke: %q %v", rest, err)
	}
	rest, err = io.ReadAll(longBody)
	if err != nil || !strings.Contains(string(rest), `"code":"unauthorized"`) || strings.Contains(string(rest), "complete") {
		t.Fatalf("the victim's long answer after the revoke: %q %v", rest, err)
	}
	if n, err := cr.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the upgraded connection is open after the revoke (read %d bytes)", n)
	}
	ks.waitOpen(t, victim.ID, 0)
	// The bystander's stream still runs.
	if ks.s.openRequests(bystander.ID) != 1 {
		t.Fatalf("the bystander's stream ended")
	}
	ks.front.CloseClientConnections()
	_, _ = io.ReadAll(by)
	errorOf(t, ks.do(t, "GET", "/v1/test/stream", victim.Secret, ""), 401, api.CodeUnauthorized)
}

// TestPreviewCookieOfKeyRecord: ?sbx_key= with a key record's secret
// sets a cookie that names the key and holds no secret; the cookie stops
// working when the key is revoked.
func TestPreviewCookieOfKeyRecord(t *testing.T) {
	ks := newKeyServer(t)
	k := ks.newKey(t, `{"name":"web"}`)
	req, _ := http.NewRequest("GET", ks.front.URL+"/v1/sandboxes/web/ports/3000/x?sbx_key="+k.Secret, nil)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cs := resp.Cookies()
	if resp.StatusCode != http.StatusFound || len(cs) != 1 || !strings.HasPrefix(cs[0].Value, k.ID+".") ||
		strings.Contains(cs[0].Value, k.Secret[5:]) || bytes.Contains([]byte(cs[0].Value), []byte(engine.HashKey(k.Secret))) {
		t.Fatalf("%d %+v", resp.StatusCode, cs)
	}
	c := ks.s
	p := &preview{name: "web", portArg: "3000"}
	r := httptest.NewRequest("GET", "/v1/sandboxes/web/ports/3000/x", nil)
	r.AddCookie(cs[0])
	if who, ok := c.previewCookieCaller(r, p); !ok || who.KeyID != k.ID || who.Admin {
		t.Fatalf("cookie caller %+v %v", who, ok)
	}
	if _, ok := c.previewCookieCaller(r, &preview{name: "other", portArg: "3000"}); ok {
		t.Fatal("the cookie opens another sandbox")
	}
	if resp := ks.do(t, "DELETE", "/v1/keys/"+k.ID, testKey, ""); resp.StatusCode != 204 {
		t.Fatal(resp.StatusCode)
	}
	if _, ok := c.previewCookieCaller(r, p); ok {
		t.Fatal("the cookie of a revoked key still admits")
	}
}

// TestPreviewNeverCrossesTenants: a preview reaches only a sandbox its
// caller may see, even while the proxy holds an idle connection another
// caller opened to a sandbox of that name. Tenant B asking for tenant A's
// preview URL right after A gets 404 sandbox_not_found, never A's page;
// once A renames its sandbox and B makes one of the old name, B's preview
// of that name reaches B's sandbox, and A's the renamed one.
func TestPreviewNeverCrossesTenants(t *testing.T) {
	ks := newKeyServer(t)
	a := ks.newKey(t, `{"name":"a"}`)
	b := ks.newKey(t, `{"name":"b"}`)
	idA := ks.sandbox(t, a.ID, "web", true)
	get := func(key, host, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", ks.front.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	pageA := "the page of web (" + idA + ")"
	for _, u := range []struct{ host, path string }{
		{"", "/v1/sandboxes/web/ports/3000/"},
		{"3000-web.localhost", "/"},
		{"", "/v1/sandboxes/" + idA + "/ports/3000/"},
	} {
		if code, body := get(a.Secret, u.host, u.path); code != 200 || body != pageA {
			t.Fatalf("A's preview %s%s: %d %q", u.host, u.path, code, body)
		}
		// At once, while A's connection to its program is idle in the
		// proxy's pool.
		code, body := get(b.Secret, u.host, u.path)
		if code != 404 || strings.Contains(body, "page of") || !strings.Contains(body, string(api.CodeSandboxNotFound)) {
			t.Fatalf("B asked for A's preview %s%s: %d %q", u.host, u.path, code, body)
		}
	}
	ctx := context.Background()
	sb, err := ks.st.GetSandbox(ctx, idA)
	if err != nil {
		t.Fatal(err)
	}
	sb.Name = "web2"
	if err := ks.st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	idB := ks.sandbox(t, b.ID, "web", true)
	for _, host := range []string{"", "3000-web.localhost"} {
		path := "/"
		if host == "" {
			path = "/v1/sandboxes/web/ports/3000/"
		}
		if code, body := get(b.Secret, host, path); code != 200 || body != "the page of web ("+idB+")" {
			t.Fatalf("B's own web after A's rename %s%s: %d %q", host, path, code, body)
		}
	}
	if code, body := get(a.Secret, "", "/v1/sandboxes/web2/ports/3000/"); code != 200 || body != pageA {
		t.Fatalf("A's renamed sandbox: %d %q", code, body)
	}
}
