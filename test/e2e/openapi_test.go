package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sbxhq/sbx/api"
)

// contract sends requests to sbxd over its socket and holds each request
// and answer to api/openapi.yaml: the request must be one the document
// describes, and the answer's status, content type and body (every line of
// an NDJSON answer) must be ones it declares for the operation.
type contract struct {
	t   *testing.T
	doc *openapi3.T
	hc  *http.Client
}

func newContract(t *testing.T) *contract {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPIYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/x-tar+zstd", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/x-pem-file", openapi3filter.FileBodyDecoder)
	return &contract{t: t, doc: doc, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
		}}}}
}

// call is one request: path is the document's template, filled from params.
type call struct {
	method, path string
	params       map[string]string
	query        string
	body         any // []byte as is, else JSON
	contentType  string
	accept       string
	status       int // the status expected
	// invalid: the request is outside the document on purpose (a field
	// sbxd refuses), and the document must refuse it too.
	invalid bool
}

// do sends c, checks the request and the answer against the document and
// returns the answer's body.
func (k *contract) do(c call) []byte {
	t := k.t
	t.Helper()
	item := k.doc.Paths.Find(c.path)
	if item == nil || item.GetOperation(c.method) == nil {
		t.Fatalf("%s %s is not in the document", c.method, c.path)
	}
	op := item.GetOperation(c.method)
	path := c.path
	for name, v := range c.params {
		path = strings.ReplaceAll(path, "{"+name+"}", v)
	}
	var body []byte
	switch b := c.body.(type) {
	case nil:
	case []byte:
		body = b
	default:
		body, _ = json.Marshal(b)
		if c.contentType == "" {
			c.contentType = "application/json"
		}
	}
	newReq := func() *http.Request {
		u := "http://sbxd" + path
		if c.query != "" {
			u += "?" + c.query
		}
		r, _ := http.NewRequestWithContext(ctxT(t), c.method, u, bytes.NewReader(body))
		if c.contentType != "" {
			r.Header.Set("Content-Type", c.contentType)
		}
		if c.accept != "" {
			r.Header.Set("Accept", c.accept)
		}
		return r
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: newReq(), PathParams: c.params, Options: opts,
		Route: &routers.Route{Spec: k.doc, Path: c.path, PathItem: item, Method: c.method, Operation: op}}
	what := c.method + " " + path
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && !c.invalid {
		t.Errorf("%s: the request does not match the document: %v", what, err)
	} else if err == nil && c.invalid {
		t.Errorf("%s: the document takes a request that sbxd refuses", what)
	}
	res, err := k.hc.Do(newReq())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.StatusCode != c.status {
		t.Fatalf("%s: %d, want %d: %s", what, res.StatusCode, c.status, out)
	}
	if ct := res.Header.Get("Content-Type"); ct == "application/x-ndjson" {
		rr := op.Responses.Status(res.StatusCode)
		if rr == nil || rr.Value.Content.Get(ct) == nil {
			t.Fatalf("%s: the document declares no %s answer %d", what, ct, res.StatusCode)
		}
		schema := rr.Value.Content.Get(ct).Schema.Value
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 64<<20)
		n := 0
		for sc.Scan() {
			var v any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatalf("%s: line %d is not JSON: %s", what, n, sc.Bytes())
			}
			if err := k.doc.ValidateSchemaJSON(schema, v, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("%s: line %s does not match the document: %v", what, sc.Bytes(), err)
			}
			n++
		}
		if n == 0 {
			t.Errorf("%s: no lines", what)
		}
		return out
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: res.StatusCode, Header: res.Header, Body: io.NopCloser(bytes.NewReader(out)), Options: opts})
	if err != nil {
		t.Errorf("%s: the answer %d does not match the document: %v\n%.2000s", what, res.StatusCode, err, out)
	}
	return out
}

// terminal runs a command on the terminal WebSocket (GET .../exec?tty=1)
// and holds its query and every text message, both ways, to the document.
func (k *contract) terminal(name string) {
	t := k.t
	t.Helper()
	const path = "/v1/sandboxes/{name}/exec"
	query := "tty=1&cmd=sh&cmd=-c&cmd=" + url.QueryEscape("echo hi; read x; exit 3") + "&rows=30&cols=100"
	item := k.doc.Paths.Find(path)
	r, _ := http.NewRequest("GET", "http://sbxd/v1/sandboxes/"+name+"/exec?"+query, nil)
	r.Header.Set("Upgrade", "websocket")
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: map[string]string{"name": name},
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		Route:   &routers.Route{Spec: k.doc, Path: path, PathItem: item, Method: "GET", Operation: item.Get}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		t.Errorf("terminal: the request does not match the document: %v", err)
	}
	ctx := ctxT(t)
	c, res, err := websocket.Dial(ctx, "ws://sbxd/v1/sandboxes/"+name+"/exec?"+query, &websocket.DialOptions{HTTPClient: k.hc})
	if err != nil {
		t.Fatalf("terminal: %v", err)
	}
	defer c.CloseNow()
	if res.StatusCode != http.StatusSwitchingProtocols || item.Get.Responses.Status(101) == nil {
		t.Fatalf("terminal: %d, or the document has no 101", res.StatusCode)
	}
	schema := k.doc.Components.Schemas["TTYMessage"].Value
	check := func(b []byte) api.TTYMessage {
		var v any
		_ = json.Unmarshal(b, &v)
		if err := k.doc.ValidateSchemaJSON(schema, v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("terminal: message %s does not match TTYMessage: %v", b, err)
		}
		var m api.TTYMessage
		_ = json.Unmarshal(b, &m)
		return m
	}
	send := func(m api.TTYMessage) {
		b, _ := json.Marshal(m)
		check(b)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("terminal: %v", err)
		}
	}
	var types []string
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("terminal: %v after %v", err, types)
		}
		if typ == websocket.MessageBinary {
			continue
		}
		m := check(b)
		types = append(types, m.Type)
		if m.Type == api.ExecStart {
			send(api.TTYMessage{Type: api.TTYResize, Rows: 40, Cols: 120})
			if err := c.Write(ctx, websocket.MessageBinary, []byte("go\n")); err != nil {
				t.Fatal(err)
			}
		}
		if m.Type == api.ExecExit || m.Type == api.ExecError {
			if m.Type != api.ExecExit || m.ExitCode == nil || *m.ExitCode != 3 {
				t.Errorf("terminal: ended with %s", b)
			}
			return
		}
	}
}

// complete returns the data of an NDJSON answer's complete line.
func complete(t *testing.T, out []byte) json.RawMessage {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var l api.StreamLine
	if err := json.Unmarshal(lines[len(lines)-1], &l); err != nil || l.Type != api.LineComplete {
		t.Fatalf("the last line is not complete: %s", lines[len(lines)-1])
	}
	return l.Data
}

// TestOpenAPIContract drives every kind of route of a real sbxd and holds
// the requests and answers to api/openapi.yaml (the document the SDKs are
// checked and generated against).
func TestOpenAPIContract(t *testing.T) {
	k := newContract(t)
	name := "oa-" + randomHex(4)
	sb := map[string]string{"name": name}
	ndjson := "application/x-ndjson"
	var snap api.Snapshot
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = h.c.Sandboxes.Delete(ctx, name)
		_ = h.c.Sandboxes.Delete(ctx, name+"-copy")
		if snap.ID != "" {
			_ = h.c.Snapshots.Delete(ctx, snap.ID)
		}
	})

	k.do(call{method: "GET", path: "/v1/health", status: 200})
	k.do(call{method: "GET", path: "/v1/openapi.json", status: 200})
	k.do(call{method: "POST", path: "/v1/sandboxes", body: api.CreateSandboxRequest{Name: name, Image: "busybox",
		Labels: map[string]string{"oa": name}, Env: map[string]string{"A": "1"}}, status: 201})
	k.do(call{method: "GET", path: "/v1/sandboxes", query: "label=oa=" + name, status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}", params: sb, status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}", params: map[string]string{"name": "no-such-" + name}, status: 404})
	k.do(call{method: "PUT", path: "/v1/sandboxes/{name}", params: sb, body: map[string]any{"labels": map[string]string{"oa": name, "b": "2"}}, status: 200})

	// Exec: buffered, guarded, streamed, detached; processes.
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/exec", params: sb,
		body: api.ExecRequest{Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, status: 200})
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/exec", params: sb,
		body: api.ExecRequest{Cmd: []string{"sh", "-c", "echo x > /workspace/g; false"}, Undo: api.UndoCheckpoint, RollbackOnFailure: true}, status: 200})
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/exec", params: sb, accept: ndjson,
		body: api.ExecRequest{Cmd: []string{"sh", "-c", "echo a; echo b >&2"}, Encoding: api.EncodingBase64}, status: 200})
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/exec", params: sb,
		body: api.ExecRequest{Cmd: []string{"no-such-command"}}, status: 400})
	out := k.do(call{method: "POST", path: "/v1/sandboxes/{name}/exec", params: sb,
		body: api.ExecRequest{Cmd: []string{"sh", "-c", "echo detached"}, Detach: true}, status: 202})
	var det struct{ PID int }
	_ = json.Unmarshal(out, &det)
	pid := map[string]string{"name": name, "pid": fmt.Sprint(det.PID)}
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/processes/{pid}/output", params: pid, query: "offset=0", status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/processes", params: sb, status: 200})
	out = k.do(call{method: "POST", path: "/v1/sandboxes/{name}/exec", params: sb,
		body: api.ExecRequest{Cmd: []string{"sleep", "60"}, Detach: true}, status: 202})
	_ = json.Unmarshal(out, &det)
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/processes/{pid}/signal", params: map[string]string{"name": name, "pid": fmt.Sprint(det.PID)},
		body: api.SignalRequest{Signal: 9}, status: 204})

	// Files and archives.
	file := "path=/workspace/d/a.txt"
	k.do(call{method: "PUT", path: "/v1/sandboxes/{name}/files", params: sb, query: file + "&mode=0600",
		body: []byte("hello\n"), contentType: "application/octet-stream", status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/files", params: sb, query: file, status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/files", params: sb, query: "path=/workspace/d&list=1", status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/files", params: sb, query: "path=/workspace/nothing", status: 404})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/archive", params: sb, query: "path=/workspace/d", status: 200})
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "b.txt", Mode: 0o644, Size: 2})
	_, _ = tw.Write([]byte("b\n"))
	_ = tw.Close()
	k.do(call{method: "PUT", path: "/v1/sandboxes/{name}/archive", params: sb, query: "path=/workspace/e",
		body: tb.Bytes(), contentType: "application/x-tar", status: 200})
	k.do(call{method: "DELETE", path: "/v1/sandboxes/{name}/files", params: sb, query: "path=/workspace/e&recursive=1", status: 204})

	// Checkpoints.
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/checkpoint", params: sb, body: api.CheckpointRequest{Comment: "files"}, status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/checkpoints", params: sb, status: 200})
	v0 := map[string]string{"name": name, "id": "v0"}
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/checkpoints/{id}", params: v0, query: "verify=1", status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/checkpoints/{id}/diff", params: map[string]string{"name": name, "id": "live"}, query: "from=v0", status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/checkpoints/{id}", params: map[string]string{"name": name, "id": "v99"}, status: 404})

	// Network and ports.
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/network", params: sb, status: 200})
	k.do(call{method: "PUT", path: "/v1/sandboxes/{name}/network", params: sb, body: map[string]any{"allow": []string{"example.org"}}, status: 200})
	k.do(call{method: "PUT", path: "/v1/sandboxes/{name}/network", params: sb, body: map[string]any{"alow": []string{"example.org"}}, status: 400, invalid: true})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/network/log", params: sb, status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/ports", params: sb, status: 200})

	// Snapshots and forks.
	out = k.do(call{method: "POST", path: "/v1/sandboxes/{name}/snapshot", params: sb, body: map[string]any{"name": "s", "metadata": map[string]int{"step": 1}}, status: 200})
	_ = json.Unmarshal(complete(t, out), &snap)
	sn := map[string]string{"id": snap.ID}
	k.do(call{method: "GET", path: "/v1/snapshots", query: "sandbox=" + name, status: 200})
	k.do(call{method: "GET", path: "/v1/snapshots/{id}", params: sn, status: 200})
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/fork", params: sb, body: map[string]any{"name": name + "-copy", "network": map[string]bool{"internet": false}}, status: 200})
	// Deliveries: of the sandbox, then of the copy with teardown.
	out = k.do(call{method: "POST", path: "/v1/sandboxes/{name}/deliveries", params: sb,
		body: map[string]any{"paths": []string{"/workspace/d"}, "name": "oa", "metadata": map[string]int{"step": 1}}, status: 200})
	var dlv api.Delivery
	_ = json.Unmarshal(complete(t, out), &dlv)
	dl := map[string]string{"id": dlv.ID}
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/deliveries", params: sb, body: map[string]any{"paths": []string{"/workspace/nothing"}}, status: 400})
	k.do(call{method: "GET", path: "/v1/deliveries", query: "sandbox=" + name, status: 200})
	k.do(call{method: "GET", path: "/v1/deliveries/{id}", params: dl, status: 200})
	k.do(call{method: "GET", path: "/v1/deliveries/{id}", params: map[string]string{"id": "dlv_none"}, status: 404})
	k.do(call{method: "GET", path: "/v1/deliveries/{id}/archive", params: dl, status: 200})
	k.do(call{method: "GET", path: "/v1/deliveries/key", status: 200})
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/deliveries", params: map[string]string{"name": name + "-copy"},
		body: map[string]any{"paths": []string{"/workspace/d/a.txt"}, "teardown": true}, status: 200})
	k.do(call{method: "DELETE", path: "/v1/sandboxes/{name}", params: map[string]string{"name": name + "-copy"}, status: 404})

	// Events, suspend and resume.
	key := map[string]string{"key": "oa/" + name}
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/suspend", params: sb, body: api.SuspendRequest{WakeOn: "oa/" + name}, accept: ndjson, status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}", params: sb, status: 200})
	k.do(call{method: "POST", path: "/v1/events/{key}", params: map[string]string{"key": "oa/none/" + name}, body: []byte("text"), contentType: "text/plain", status: 202})
	k.do(call{method: "GET", path: "/v1/events", query: "key=oa/none/" + name, status: 200})
	k.do(call{method: "DELETE", path: "/v1/events", query: "key=oa/none/" + name, status: 200})
	k.do(call{method: "POST", path: "/v1/events/{key}", params: key, body: map[string]bool{"approved": true}, status: 202})
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/resume", params: sb, status: 200})
	k.do(call{method: "GET", path: "/v1/sandboxes/{name}/events", params: sb, query: "limit=10", status: 200})

	k.terminal(name)

	// Stop, restore, images, errors, delete.
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/stop", params: sb, status: 200})
	k.do(call{method: "POST", path: "/v1/sandboxes/{name}/checkpoints/{id}/restore", params: v0, status: 200})
	k.do(call{method: "GET", path: "/v1/images", status: 200})
	k.do(call{method: "GET", path: "/v1/images/{name}", params: map[string]string{"name": "busybox"}, status: 200})
	k.do(call{method: "DELETE", path: "/v1/images/{name}", params: map[string]string{"name": "busybox"}, status: 409})
	k.do(call{method: "DELETE", path: "/v1/snapshots/{id}", params: sn, status: 204})
	k.do(call{method: "DELETE", path: "/v1/sandboxes/{name}", params: sb, status: 204})
	k.do(call{method: "DELETE", path: "/v1/sandboxes/{name}", params: sb, status: 404})

	// API keys.
	out = k.do(call{method: "POST", path: "/v1/keys", body: map[string]any{"name": name, "daily_limit_usd": 1.5,
		"labels": map[string]string{"oa": name}}, status: 201})
	var made api.CreatedKey
	_ = json.Unmarshal(out, &made)
	kp := map[string]string{"id": made.ID}
	k.do(call{method: "POST", path: "/v1/keys", body: map[string]any{"name": name + "-x", "daily_limit_usd": -1}, status: 400, invalid: true})
	k.do(call{method: "GET", path: "/v1/keys", status: 200})
	k.do(call{method: "GET", path: "/v1/keys/{id}", params: kp, status: 200})
	k.do(call{method: "DELETE", path: "/v1/keys/{id}", params: kp, status: 204})
	k.do(call{method: "GET", path: "/v1/keys", query: "revoked=1", status: 200})
	k.do(call{method: "DELETE", path: "/v1/keys/{id}", params: kp, status: 404})
}
