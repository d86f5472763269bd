package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// tenantKey makes a tenant key through the operator's socket, revoked when
// the test ends, and returns it with a client over TCP that uses it.
func tenantKey(t *testing.T, name string) (*api.CreatedKey, *client.Client) {
	t.Helper()
	k, err := h.c.Keys.Create(ctxT(t), api.CreateKeyRequest{Name: name + "-" + randomHex(3)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.c.Keys.Revoke(context.Background(), k.ID); err != nil && !errors.Is(err, client.ErrKeyNotFound) {
			t.Errorf("revoke %s: %v", k.Name, err)
		}
	})
	c, err := client.New(client.WithURL("http://"+h.listen), client.WithAPIKey(k.Secret))
	if err != nil {
		t.Fatal(err)
	}
	return k, c
}

// attempt is one request of tenant B on tenant A's objects.
type attempt struct {
	query       string
	body        []byte
	contentType string
	// want are the statuses it may answer; "never data" holds whatever
	// they are. Empty: 403 or 404.
	want []int
	// check looks at a 2xx answer's body (a list must not hold A's).
	check func(t *testing.T, body []byte)
}

// TestTenantsEveryEndpoint: tenant B tries every route of api/openapi.yaml
// (read from the document, so a new route is tried too) on tenant A's
// objects: sandbox (by name and by id), checkpoint, snapshot, delivery,
// pending event, image, key, process, port. Each answers as if A's object
// did not exist (404), is refused (403), or, for a name A holds, says only
// that it is taken (409); no answer carries anything of A's that B did not
// send; lists leave A's out; and A's objects are as they were afterwards.
func TestTenantsEveryEndpoint(t *testing.T) {
	ctx := ctxT(t)
	keyA, cA := tenantKey(t, "tenant-a")
	keyB, cB := tenantKey(t, "tenant-b")

	// Tenant A's objects.
	marker := "secret-of-a-" + randomHex(8)
	sbA, err := cA.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "ta-" + randomHex(4), Labels: map[string]string{"tenant": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.c.Sandboxes.Delete(context.Background(), sbA.ID); err != nil && !errors.Is(err, client.ErrSandboxNotFound) {
			t.Errorf("delete A's sandbox: %v", err)
		}
	})
	mustSh(t, sbA, "mkdir -p /workspace && echo "+marker+" > /workspace/secret.txt")
	// A secret of A's sandbox: its value and its placeholder are A's.
	secretValue := "token-of-a-" + randomHex(8)
	si, err := sbA.Secrets().Put(ctx, "API_TOKEN", &secretValue, []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}, PathPrefix: "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sbA.Checkpoint(ctx, "a's"); err != nil {
		t.Fatal(err)
	}
	snA, err := sbA.Snapshot(ctx, api.SnapshotRequest{Name: "a-step"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Snapshots.Delete(context.Background(), snA.ID) })
	dA, err := sbA.Deliver(ctx, api.DeliveryRequest{Paths: []string{"/workspace/secret.txt"}, Name: "a-release"})
	if err != nil {
		t.Fatal(err)
	}
	wake := "wk-" + randomHex(4)
	evA, err := cA.Events.Post(ctx, wake, []byte(`{"from":"a"}`), "")
	if err != nil || !evA.Pending {
		t.Fatalf("A's pending event: %+v %v", evA, err)
	}
	t.Cleanup(func() { _, _ = h.c.Events.CancelKey(context.Background(), wake) })
	imgA := "ti-" + randomHex(4)
	var tarball bytes.Buffer
	writeTar(t, &tarball, map[string]string{"etc/a-image": marker})
	if _, err := cA.Images.Import(ctx, imgA, &tarball, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Images.Delete(context.Background(), imgA) })
	if img, err := h.c.Images.Get(ctx, imgA); err != nil || img.Name != imgA {
		t.Fatalf("A's image: %v %v", img, err)
	}

	// What B must never see (unless B sent it itself).
	secrets := []string{marker, keyA.Secret, sbA.ID, sbA.Name, snA.ID, dA.ID, evA.ID, imgA, keyA.ID, secretValue, si.Placeholder}

	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPIYAML)
	if err != nil {
		t.Fatal(err)
	}
	noneOfA := func(t *testing.T, body []byte) {
		t.Helper()
		for _, s := range secrets {
			if bytes.Contains(body, []byte(s)) {
				t.Errorf("a list for B holds %q of A's: %s", s, body)
			}
		}
	}
	j := func(s string) []byte { return []byte(s) }
	ok := []int{200, 201, 202, 204}
	// The attempts of each route; a route not listed gets a generic one.
	attempts := map[string][]attempt{
		"GET /v1/health":       {{want: ok}},
		"GET /v1/openapi.json": {{want: ok}},
		"POST /v1/classify":    {{body: j(`{"cmd":"cat /workspace/secret.txt"}`), want: ok, check: noneOfA}},
		"POST /v1/sandboxes": {
			{body: j(`{"name":"` + sbA.Name + `"}`), want: []int{409}},
			{body: j(`{"name":"tb-` + randomHex(4) + `","snapshot":"` + snA.ID + `"}`), want: []int{404}},
			{body: j(`{"name":"tb-` + randomHex(4) + `","image":"` + imgA + `"}`), want: []int{404}},
			{body: j(`{"name":"tb-` + randomHex(4) + `","network":{"internet":true,"connect":["` + sbA.Name + `"]}}`), want: []int{400}},
		},
		"GET /v1/sandboxes":                                  {{want: ok, check: noneOfA}, {query: "label=tenant=a", want: ok, check: noneOfA}},
		"GET /v1/sandboxes/{name}":                           {{}},
		"PUT /v1/sandboxes/{name}":                           {{body: j(`{"labels":{"owned":"by-b"}}`)}},
		"DELETE /v1/sandboxes/{name}":                        {{}},
		"POST /v1/sandboxes/{name}/stop":                     {{}},
		"POST /v1/sandboxes/{name}/suspend":                  {{body: j(`{"wake_on":"` + wake + `"}`)}},
		"POST /v1/sandboxes/{name}/resume":                   {{}},
		"GET /v1/sandboxes/{name}/events":                    {{}},
		"POST /v1/events/{key}":                              {{body: j(`{"from":"b"}`), want: ok, check: noneOfA}},
		"DELETE /v1/events/{key}":                            {{}},
		"GET /v1/events":                                     {{want: ok, check: noneOfA}, {query: "key=" + wake, want: ok, check: noneOfA}},
		"DELETE /v1/events":                                  {{query: "key=" + wake, want: ok, check: noneOfA}},
		"POST /v1/sandboxes/{name}/exec":                     {{body: j(`{"cmd":["cat","/workspace/secret.txt"]}`)}},
		"GET /v1/sandboxes/{name}/files":                     {{query: "path=/workspace/secret.txt"}, {query: "path=/workspace&list=1"}},
		"PUT /v1/sandboxes/{name}/files":                     {{query: "path=/workspace/secret.txt", body: j("overwritten by b"), contentType: "application/octet-stream"}},
		"DELETE /v1/sandboxes/{name}/files":                  {{query: "path=/workspace/secret.txt"}},
		"GET /v1/sandboxes/{name}/archive":                   {{query: "path=/workspace"}},
		"PUT /v1/sandboxes/{name}/archive":                   {{query: "path=/workspace", body: tarOf(t, map[string]string{"secret.txt": "b"}), contentType: "application/x-tar"}},
		"POST /v1/sandboxes/{name}/checkpoint":               {{body: j(`{"comment":"b"}`)}},
		"GET /v1/sandboxes/{name}/checkpoints":               {{}},
		"GET /v1/sandboxes/{name}/checkpoints/{id}":          {{}},
		"POST /v1/sandboxes/{name}/checkpoints/{id}/restore": {{}},
		"GET /v1/sandboxes/{name}/checkpoints/{id}/diff":     {{}},
		"POST /v1/sandboxes/{name}/snapshot":                 {{body: j(`{"name":"b"}`)}},
		"POST /v1/sandboxes/{name}/deliveries":               {{body: j(`{"paths":["/workspace/secret.txt"]}`)}},
		"POST /v1/sandboxes/{name}/fork":                     {{body: j(`{"name":"tb-` + randomHex(4) + `"}`)}},
		"GET /v1/sandboxes/{name}/ports":                     {{}},
		"GET /v1/sandboxes/{name}/processes":                 {{}},
		"GET /v1/sandboxes/{name}/processes/{pid}/output":    {{}},
		"POST /v1/sandboxes/{name}/processes/{pid}/signal":   {{body: j(`{"signal":9}`)}},
		"GET /v1/sandboxes/{name}/network":                   {{}},
		"PUT /v1/sandboxes/{name}/network":                   {{body: j(`{"internet":false}`)}},
		"GET /v1/sandboxes/{name}/network/log":               {{}},
		"GET /v1/deliveries":                                 {{want: ok, check: noneOfA}, {query: "sandbox=" + sbA.Name, want: ok, check: noneOfA}},
		"GET /v1/deliveries/key":                             {{want: ok}},
		"GET /v1/deliveries/{id}":                            {{}},
		"GET /v1/deliveries/{id}/archive":                    {{}},
		"GET /v1/snapshots":                                  {{want: ok, check: noneOfA}, {query: "sandbox=" + sbA.Name, want: []int{200, 404}, check: noneOfA}},
		"GET /v1/snapshots/{id}":                             {{}},
		"DELETE /v1/snapshots/{id}":                          {{}},
		"POST /v1/keys":                                      {{body: j(`{"name":"b-made"}`), want: []int{403}}},
		"GET /v1/keys": {{want: ok, check: func(t *testing.T, b []byte) {
			noneOfA(t, b)
			if !bytes.Contains(b, []byte(keyB.ID)) {
				t.Errorf("B's key list lacks B: %s", b)
			}
		}}},
		"GET /v1/keys/{id}":    {{}},
		"DELETE /v1/keys/{id}": {{want: []int{403}}},
		"GET /v1/images":       {{want: ok, check: noneOfA}},
		// B's own usage: nothing of A's sandbox or key in it, however grouped.
		"GET /v1/usage": {{want: ok, check: noneOfA}, {query: "group_by=key", want: ok, check: noneOfA},
			{query: "group_by=day", want: ok, check: noneOfA}},
		"PUT /v1/keys/{id}/limit":                      {{body: j(`{"daily_limit_usd":1000}`), want: []int{403}}},
		"GET /v1/sandboxes/{name}/secrets":             {{}},
		"PUT /v1/sandboxes/{name}/secrets":             {{body: j(`{"secrets":[]}`)}},
		"PUT /v1/sandboxes/{name}/secrets/{secret}":    {{body: j(`{"value":"b","rules":[{"host":"evil.test","methods":["GET"],"path_prefix":"/"}]}`)}},
		"DELETE /v1/sandboxes/{name}/secrets/{secret}": {{}},
		"GET /v1/images/{name}":                        {{}},
		"DELETE /v1/images/{name}":                     {{}},
		"POST /v1/images/build":                        {{body: j(`{"name":"` + imgA + `"}`), want: []int{409}}},
		"POST /v1/images/pull":                         {{body: j(`{"name":"` + imgA + `","ref":"127.0.0.1:1/none:1"}`), want: []int{409}}},
		"POST /v1/images/import":                       {{query: "name=" + imgA, body: tarOf(t, map[string]string{"x": "b"}), contentType: "application/x-tar", want: []int{409}}},
	}
	// Previews of A's ports: as missing as A's sandbox, whatever the method.
	for _, m := range []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"} {
		attempts[m+" /v1/sandboxes/{name}/ports/{port}/{path}"] = []attempt{{want: []int{404}}}
	}
	// The values of path parameters, by route prefix.
	params := func(route string, byID bool) map[string]string {
		sb := sbA.Name
		if byID {
			sb = sbA.ID
		}
		p := map[string]string{"name": sb, "pid": "1", "port": "8080", "path": "x", "key": wake, "secret": "API_TOKEN"}
		switch {
		case strings.HasPrefix(route, "/v1/images/"):
			p["name"] = imgA
		case strings.Contains(route, "/checkpoints/"):
			p["id"] = "v1"
		case strings.HasPrefix(route, "/v1/snapshots/"):
			p["id"] = snA.ID
		case strings.HasPrefix(route, "/v1/deliveries/"):
			p["id"] = dA.ID
		case strings.HasPrefix(route, "/v1/keys/"):
			p["id"] = keyA.ID
		}
		return p
	}

	bearer := "Bearer " + keyB.Secret
	hc := &http.Client{Timeout: 2 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var routes []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			routes = append(routes, method+" "+path)
		}
	}
	sort.Strings(routes)
	tried := 0
	for _, route := range routes {
		method, tmpl, _ := strings.Cut(route, " ")
		as, known := attempts[route]
		switch {
		case tmpl == "/v1/mcp":
			tried++
			tenantMCP(t, hc, bearer, sbA.Name, secrets)
			continue
		case method == "GET" && tmpl == "/v1/sandboxes/{name}/exec":
			tried++
			tenantTerminal(t, bearer, sbA.Name, marker)
			continue
		case !known:
			t.Logf("%s: not in the test's table; a generic attempt (params of A, body {})", route)
			as = []attempt{{body: j(`{}`), want: []int{400, 403, 404, 409}}}
		}
		for _, byID := range []bool{false, true} {
			if byID && !strings.Contains(tmpl, "/v1/sandboxes/{name}") {
				continue
			}
			p := params(tmpl, byID)
			if method == "DELETE" && tmpl == "/v1/events/{key}" {
				p["key"] = evA.ID // DELETE takes a pending event's id where POST takes a key
			}
			path := tmpl
			for k, v := range p {
				path = strings.ReplaceAll(path, "{"+k+"}", v)
			}
			for _, a := range as {
				tried++
				u := "http://" + h.listen + path
				if a.query != "" {
					u += "?" + a.query
				}
				req, _ := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(a.body))
				req.Header.Set("Authorization", bearer)
				if len(a.body) > 0 {
					ct := a.contentType
					if ct == "" {
						ct = "application/json"
					}
					req.Header.Set("Content-Type", ct)
				}
				res, err := hc.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				want := a.want
				if len(want) == 0 {
					want = []int{403, 404}
				}
				what := fmt.Sprintf("B %s %s?%s", method, path, a.query)
				if !slices.Contains(want, res.StatusCode) {
					t.Errorf("%s: %d %s; want one of %v", what, res.StatusCode, body, want)
				}
				sent := path + "?" + a.query + string(a.body)
				for _, s := range secrets {
					if bytes.Contains(body, []byte(s)) && !strings.Contains(sent, s) {
						t.Errorf("%s: the answer holds %q of A's: %s", what, s, body)
					}
				}
				// An NDJSON answer (a long operation) must not complete.
				if bytes.Contains(body, []byte(`"type":"complete"`)) && !slices.Contains(want, 200) {
					t.Errorf("%s: completed: %s", what, body)
				}
				if res.StatusCode < 300 && a.check != nil {
					a.check(t, body)
				}
			}
		}
	}
	if tried < len(routes) {
		t.Fatalf("tried %d requests for %d routes", tried, len(routes))
	}
	t.Logf("B tried %d requests on %d routes of the document", tried, len(routes))
	// B's own event of the POST above goes.
	_, _ = cB.Events.CancelKey(ctx, wake)

	// A's objects are as they were.
	got, err := cA.Sandboxes.Get(ctx, sbA.Name)
	if err != nil || got.State != api.StateRunning || got.Labels["owned"] != "" || !got.Sandbox.Network.Internet {
		t.Fatalf("A's sandbox after B: %+v %v", got, err)
	}
	if out := mustSh(t, got, "cat /workspace/secret.txt"); strings.TrimSpace(out) != marker {
		t.Fatalf("A's file after B: %q", out)
	}
	if cps, err := got.ListCheckpoints(ctx); err != nil || len(cps) != 2 {
		t.Fatalf("A's checkpoints after B: %v %v", cps, err)
	}
	if _, err := cA.Snapshots.Get(ctx, snA.ID); err != nil {
		t.Fatalf("A's snapshot after B: %v", err)
	}
	if _, err := cA.Deliveries.Get(ctx, dA.ID); err != nil {
		t.Fatalf("A's delivery after B: %v", err)
	}
	if _, err := cA.Images.Get(ctx, imgA); err != nil {
		t.Fatalf("A's image after B: %v", err)
	}
	if _, err := cA.Keys.Get(ctx, keyA.ID); err != nil {
		t.Fatalf("A's key after B: %v", err)
	}
	limit := func(p *float64) string {
		if p == nil {
			return "none"
		}
		return fmt.Sprint(*p)
	}
	if k, err := cA.Keys.Get(ctx, keyA.ID); err != nil || limit(k.DailyLimitUSD) != limit(keyA.DailyLimitUSD) {
		t.Fatalf("A's key limit after B: %+v %v", k, err)
	}
	if l, err := got.Secrets().List(ctx); err != nil || len(l) != 1 || l[0].Name != "API_TOKEN" || len(l[0].Rules) != 1 || l[0].Rules[0].Host != "api.test" {
		t.Fatalf("A's secrets after B: %+v %v", l, err)
	}
	if evs, _, err := cA.Events.Pending(ctx, wake, client.PageOptions{}); err != nil || len(evs) != 1 || evs[0].ID != evA.ID {
		t.Fatalf("A's pending event after B: %v %v", evs, err)
	}
	// And A, like the operator, sees its own; B sees none of it.
	if l, err := cB.Sandboxes.List(ctx, nil); err != nil || slices.ContainsFunc(l, func(s *client.Sandbox) bool { return s.ID == sbA.ID }) {
		t.Fatalf("B's list: %v %v", l, err)
	}
}

// tarOf returns a tar of files.
func tarOf(t *testing.T, files map[string]string) []byte {
	var b bytes.Buffer
	writeTar(t, &b, files)
	return b.Bytes()
}

// tenantMCP: B's MCP tools act as B: A's sandbox is missing for them and
// B's list does not show it.
func tenantMCP(t *testing.T, hc *http.Client, bearer, sandboxA string, secrets []string) {
	t.Helper()
	for _, call := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_sandboxes","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_file","arguments":{"sandbox":"` + sandboxA + `","path":"/workspace/secret.txt"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox":"` + sandboxA + `","command":"cat /workspace/secret.txt"}}}`,
	} {
		req, _ := http.NewRequest("POST", "http://"+h.listen+"/v1/mcp", strings.NewReader(call))
		req.Header.Set("Authorization", bearer)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("B's MCP %s: %d %s", call, res.StatusCode, body)
		}
		for _, s := range secrets {
			if bytes.Contains(body, []byte(s)) && !strings.Contains(call, s) {
				t.Errorf("B's MCP %s: the answer holds %q of A's: %s", call, s, body)
			}
		}
		if strings.Contains(call, sandboxA) && !bytes.Contains(body, []byte("sandbox_not_found")) {
			t.Errorf("B's MCP %s: want sandbox_not_found: %s", call, body)
		}
	}
}

// tenantTerminal: B's terminal on A's sandbox ends with sandbox_not_found
// and runs nothing.
func tenantTerminal(t *testing.T, bearer, sandboxA, marker string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, res, err := websocket.Dial(ctx, "ws://"+h.listen+"/v1/sandboxes/"+sandboxA+"/exec?tty=1&cmd=cat&cmd=/workspace/secret.txt",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {bearer}}})
	if err != nil {
		if res != nil && (res.StatusCode == 404 || res.StatusCode == 403) {
			return
		}
		t.Fatalf("B's terminal on A's sandbox: %v", err)
	}
	defer c.CloseNow()
	var all []byte
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			break
		}
		all = append(all, b...)
	}
	if bytes.Contains(all, []byte(marker)) || !bytes.Contains(all, []byte("sandbox_not_found")) {
		t.Errorf("B's terminal on A's sandbox: %s", all)
	}
}

// TestRevokeEndsExec: revoking a tenant key ends its exec stream at once
// with unauthorized and closes its terminal, and its next request is 401;
// its sandbox stays.
func TestRevokeEndsExec(t *testing.T) {
	ctx := ctxT(t)
	k, c := tenantKey(t, "revoked")
	sb, err := c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "tr-" + randomHex(4)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Sandboxes.Delete(context.Background(), sb.ID) })
	// A terminal of the key, open across the revoke.
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	term, _, err := websocket.Dial(wctx, "ws://"+h.listen+"/v1/sandboxes/"+sb.Name+"/exec?tty=1&cmd=sh&cmd=-c&cmd=echo+tty-up%3B+sleep+600",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + k.Secret}}})
	if err != nil {
		t.Fatal(err)
	}
	defer term.CloseNow()
	for seen := ""; !strings.Contains(seen, "tty-up"); {
		_, b, err := term.Read(wctx)
		if err != nil {
			t.Fatalf("terminal before the revoke: %v (read %q)", err, seen)
		}
		seen += string(b)
	}
	st, err := sb.Stream(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "echo started; sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var end error
	revoked := false
	for ev, err := range st.Events() {
		if err != nil {
			end = err
			break
		}
		if ev.Type == api.ExecStdout && strings.Contains(ev.Data, "started") && !revoked {
			revoked = true
			if err := h.c.Keys.Revoke(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
		}
		if ev.Type == api.ExecExit {
			t.Fatalf("the command exited: %+v", ev)
		}
	}
	if !revoked || !errors.Is(end, client.ErrUnauthorized) {
		t.Fatalf("the stream ended with %v, want unauthorized after the revoke", end)
	}
	// The terminal ends too (within the test's bound, not after its sleep).
	for {
		if _, _, err := term.Read(wctx); err != nil {
			if wctx.Err() != nil {
				t.Fatal("the revoked key's terminal stayed open")
			}
			break
		}
	}
	_, err = c.Sandboxes.List(ctx, nil)
	wantCode(t, err, api.CodeUnauthorized)
	if _, err := h.c.Sandboxes.Get(ctx, sb.ID); err != nil {
		t.Fatalf("the revoked key's sandbox: %v", err)
	}
}

// keepAliveServer serves /workspace/site on 127.0.0.1:3000 with HTTP/1.1
// keep-alive (http.server's default HTTP/1.0 closes each connection, so
// sbxd would pool none).
const keepAliveServer = `
import functools, http.server, socketserver

class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

class Files(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass

Server(("127.0.0.1", 3000), functools.partial(Files, directory="/workspace/site")).serve_forever()
`

// TestPreviewTenants: tenant A serves a port; right after A's preview
// request (its connection to A's program idle in sbxd's pool), tenant B
// asks for the same preview URL with its own key and gets 404
// sandbox_not_found, never A's page, path- and host-based. A's port list
// carries A's preview token (none over the Unix socket), which opens A's
// preview without the key and stops working once A's key is revoked.
func TestPreviewTenants(t *testing.T) {
	ctx := ctxT(t)
	kA, cA := tenantKey(t, "pva")
	kB, _ := tenantKey(t, "pvb")
	sb, err := cA.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "tp-" + randomHex(4), Network: &api.NetworkRules{Internet: false}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Sandboxes.Delete(context.Background(), sb.ID) })
	page := "page of tenant A " + sb.ID + "\n"
	if err := sb.WriteFile(ctx, "/workspace/site/index.html", strings.NewReader(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "/workspace/server.py", strings.NewReader(keepAliveServer), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"python3", "/workspace/server.py"}}); err != nil {
		t.Fatal(err)
	}
	var token string
	for deadline := time.Now().Add(60 * time.Second); token == ""; time.Sleep(200 * time.Millisecond) {
		ports, err := sb.Ports(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if p.Port == 3000 {
				token = p.PreviewToken
				if !strings.HasPrefix(token, kA.ID+".") {
					t.Fatalf("A's port 3000 lists preview token %q, want one of key %s", token, kA.ID)
				}
			}
		}
		if token == "" && time.Now().After(deadline) {
			t.Fatalf("port 3000 not listed after 60 s: %+v", ports)
		}
	}
	// Over the socket no key is used: no token.
	sockSb, err := h.c.Sandboxes.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	sockPorts, err := sockSb.Ports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sockPorts {
		if p.PreviewToken != "" {
			t.Fatalf("over the socket port %d lists preview token %q", p.Port, p.PreviewToken)
		}
	}

	listenPort := strings.Split(h.listen, ":")[1]
	for _, u := range []struct{ url, host string }{
		{"http://" + h.listen + "/v1/sandboxes/" + sb.Name + "/ports/3000/", ""},
		{"http://" + h.listen + "/v1/sandboxes/" + sb.ID + "/ports/3000/", ""},
		{"http://" + h.listen + "/", "3000-" + sb.Name + ".localhost:" + listenPort},
	} {
		resp, body := get(t, u.url, u.host, "Authorization", "Bearer "+kA.Secret)
		if resp.StatusCode != 200 || body != page {
			t.Fatalf("A's preview %s (host %q): %d %q", u.url, u.host, resp.StatusCode, body)
		}
		resp, body = get(t, u.url, u.host, "Authorization", "Bearer "+kB.Secret)
		if strings.Contains(body, "tenant A") {
			t.Fatalf("B reached A's page at %s (host %q): %d %q", u.url, u.host, resp.StatusCode, body)
		}
		wantAPIError(t, "B's request for A's preview "+u.url, resp, body, 404, api.CodeSandboxNotFound)
	}

	// A's token, as the list gave it, opens the preview that names the
	// sandbox as the list's request did (by id), without the key.
	url := "http://" + h.listen + "/v1/sandboxes/" + sb.ID + "/ports/3000/"
	resp, body := get(t, url+"?sbx_preview="+token, "")
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "sbx_preview" {
			cookie = ck
		}
	}
	if resp.StatusCode != http.StatusFound || cookie == nil || cookie.Value != token {
		t.Fatalf("A's preview token: %d %v %q", resp.StatusCode, resp.Cookies(), body)
	}
	resp, body = get(t, url, "", "Cookie", "sbx_preview="+token)
	if resp.StatusCode != 200 || body != page {
		t.Fatalf("A's preview with its token's cookie: %d %q", resp.StatusCode, body)
	}
	if err := h.c.Keys.Revoke(ctx, kA.ID); err != nil {
		t.Fatal(err)
	}
	resp, body = get(t, url, "", "Cookie", "sbx_preview="+token)
	wantAPIError(t, "the cookie of A's revoked key", resp, body, 401, api.CodeUnauthorized)
	resp, body = get(t, url+"?sbx_preview="+token, "")
	wantAPIError(t, "the token of A's revoked key", resp, body, 401, api.CodeUnauthorized)
}
