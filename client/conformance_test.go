package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// update rewrites sdk/testdata/conformance.json from what this client sends:
//
//	go test ./client -run TestConformance -update
var update = flag.Bool("update", false, "rewrite sdk/testdata/conformance.json from the Go client's requests")

const conformancePath = "../sdk/testdata/conformance.json"

// confRequest is a request as the conformance file holds it.
type confRequest struct {
	Method string              `json:"method"`
	Path   string              `json:"path"`
	Query  map[string][]string `json:"query,omitempty"`
	// NDJSON: the request asked for a stream (Accept: application/x-ndjson).
	NDJSON bool `json:"ndjson"`
	// Body is the JSON body; BodyText a body that is not JSON.
	Body     json.RawMessage `json:"body,omitempty"`
	BodyText *string         `json:"body_text,omitempty"`
}

// confResponse is a canned answer.
type confResponse struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body,omitempty"`
	// NDJSON lines, sent as application/x-ndjson.
	NDJSON   []json.RawMessage `json:"ndjson,omitempty"`
	BodyText *string           `json:"body_text,omitempty"`
}

// confCase is one call of the script.
type confCase struct {
	Call     string          `json:"call"`
	Args     json.RawMessage `json:"args"`
	Request  confRequest     `json:"request"`
	Response confResponse    `json:"response"`
	// ErrorCode is the API error code the call must raise ("" for none).
	ErrorCode string `json:"error_code,omitempty"`
}

type confFile struct {
	About []string   `json:"about"`
	Calls []string   `json:"calls"`
	Cases []confCase `json:"cases"`
}

const sbID = "sbx_0123456789abcdef"

func sandboxJSON(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"id":%q,"name":%q,"state":"running","image":"default","cpus":1,"memory_mb":512,"labels":{"team":"a"},"env":{},"network":{"internet":false},"create_time":"2026-11-29T10:00:00Z","source":null}`, sbID, name))
}

func text(s string) *string { return &s }

func complete(data string) []json.RawMessage {
	return []json.RawMessage{
		json.RawMessage(`{"type":"info","data":"working","time":"2026-11-29T10:00:01Z"}`),
		json.RawMessage(`{"type":"complete","data":` + data + `,"time":"2026-11-29T10:00:02Z"}`),
	}
}

const (
	checkpointJSON = `{"id":"v1","create_time":"2026-11-29T10:00:00Z","comment":"deps","source_id":null,"health":"ok","size_bytes":10,"added_bytes":10,"files":1}`
	snapshotJSON   = `{"id":"snap_0123456789abcdef","name":"step-1","sandbox":"c1","create_time":"2026-11-29T10:00:00Z","expire_time":"2026-11-30T10:00:00Z","memory_bytes":100,"disk_bytes":10,"stored_bytes":50,"metadata":{"sbx_chain":{"sandbox":"c1","step":"step-1"}},"billable":true}`
	keyJSON        = `{"id":"key_0123456789abcdef","name":"agent-1","labels":{"team":"a"},"admin":false,"daily_limit_usd":2.5,"create_time":"2026-11-29T10:00:00Z"}`
	secretInfoJSON = `{"name":"API_TOKEN","placeholder":"sbx-secret-0123456789abcdef0123456789abcdef","rules":[{"host":"api.example.org","methods":["GET"],"path_prefix":"/v1"}],"value_bytes":5,"update_time":"2026-11-29T10:00:00Z"}`
	deliveryJSON   = `{"id":"dlv_0123456789abcdef","name":"release-1","seq":1,"sandbox":"c2","sandbox_id":"sbx_0123456789abcdef","archive_digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","archive_bytes":6,"files":1,"digest":"sha256:2222222222222222222222222222222222222222222222222222222222222222","previous":"","envelope":{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"k1","sig":"c2ln"}]},"metadata":{"ticket":"T-16"},"create_time":"2026-11-29T10:00:00Z"}`
)

// script is the calls every SDK makes, in order, with their arguments and
// canned answers; the requests are what the Go client sends.
func script() []confCase {
	j := func(s string) json.RawMessage { return json.RawMessage(s) }
	return []confCase{
		{Call: "health", Args: j(`{}`), Response: confResponse{Status: 200, Body: j(`{"status":"ok","version":"test"}`)}},
		{Call: "create", Args: j(`{"request":{"name":"c1","image":"default","cpus":1,"memory_mb":512,"labels":{"team":"a"},"env":{"A":"1"},"network":{"internet":false},"timeout_ms":60000,"secrets":[{"name":"API_TOKEN","value":"tok-1","rules":[{"host":"api.example.org","methods":["GET"],"path_prefix":"/v1"}]}]}}`),
			Response: confResponse{Status: 201, Body: sandboxJSON("c1")}},
		{Call: "get", Args: j(`{"name":"c1"}`), Response: confResponse{Status: 200, Body: sandboxJSON("c1")}},
		{Call: "get", Args: j(`{"name":"missing"}`), ErrorCode: "sandbox_not_found",
			Response: confResponse{Status: 404, Body: j(`{"error":{"code":"sandbox_not_found","message":"no sandbox named \"missing\""}}`)}},
		{Call: "list", Args: j(`{"labels":{"team":"a"}}`), Response: confResponse{Status: 200, Body: j(`[` + string(sandboxJSON("c1")) + `]`)}},
		{Call: "exec", Args: j(`{"command":"echo hi"}`),
			Response: confResponse{Status: 200, Body: j(`{"pid":2,"stdout":"hi\n","stderr":"","exit_code":0,"duration_ms":5}`)}},
		{Call: "run", Args: j(`{"request":{"cmd":["ls","-l"],"cwd":"/tmp","env":{"X":"1"},"timeout_ms":5000,"stdin":"in"}}`),
			Response: confResponse{Status: 200, Body: j(`{"pid":3,"stdout":"","stderr":"","exit_code":0,"duration_ms":5}`)}},
		{Call: "run", Args: j(`{"request":{"cmd":["sh","-c","make"],"undo":"auto","rollback_on_failure":true}}`),
			Response: confResponse{Status: 200, Body: j(`{"pid":4,"stdout":"","stderr":"fail\n","exit_code":2,"duration_ms":5,"undo":{"kind":"checkpoint","class":"checkpoint","checkpoint":"v2","rolled_back":true}}`)}},
		{Call: "stream", Args: j(`{"request":{"cmd":["sh","-c","echo hi; echo err >&2"]}}`),
			Response: confResponse{Status: 200, NDJSON: []json.RawMessage{
				j(`{"type":"start","pid":5}`), j(`{"type":"stdout","data":"hi\n"}`), j(`{"type":"stderr","data":"err\n"}`),
				j(`{"type":"exit","exit_code":0,"duration_ms":3}`)}}},
		{Call: "write_file", Args: j(`{"path":"/workspace/a.txt","content":"hello\n","mode":420}`),
			Response: confResponse{Status: 200, Body: j(`{"path":"/workspace/a.txt","size":6}`)}},
		{Call: "read_file", Args: j(`{"path":"/workspace/a.txt"}`),
			Response: confResponse{Status: 200, BodyText: text("hello\n")}},
		{Call: "read_file", Args: j(`{"path":"/workspace/big.bin","max_bytes":1000}`), ErrorCode: "too_large",
			Response: confResponse{Status: 413, Body: j(`{"error":{"code":"too_large","message":"/workspace/big.bin is 2147483648 bytes, over max_bytes 1000"}}`)}},
		{Call: "list_files", Args: j(`{"path":"/workspace"}`),
			Response: confResponse{Status: 200, Body: j(`[{"name":"a.txt","path":"/workspace/a.txt","type":"file","size":6,"mode":420,"mod_time":"2026-11-29T10:00:00Z"}]`)}},
		{Call: "delete_file", Args: j(`{"path":"/workspace/a.txt"}`), Response: confResponse{Status: 204}},
		{Call: "checkpoint", Args: j(`{"comment":"deps"}`), Response: confResponse{Status: 200, NDJSON: complete(checkpointJSON)}},
		{Call: "checkpoint", Args: j(`{"comment":"again"}`), ErrorCode: "checkpoint_failed",
			Response: confResponse{Status: 200, NDJSON: []json.RawMessage{j(`{"type":"error","error":"disk full","code":"checkpoint_failed","time":"2026-11-29T10:00:02Z"}`)}}},
		{Call: "list_checkpoints", Args: j(`{}`), Response: confResponse{Status: 200, Body: j(`[` + checkpointJSON + `]`)}},
		{Call: "get_checkpoint", Args: j(`{"id":"v1"}`), Response: confResponse{Status: 200, Body: j(checkpointJSON)}},
		{Call: "restore", Args: j(`{"id":"v1"}`), Response: confResponse{Status: 200, NDJSON: complete(string(sandboxJSON("c1")))}},
		{Call: "diff", Args: j(`{"from":"v0","to":"v1"}`),
			Response: confResponse{Status: 200, Body: j(`{"from":"v0","to":"v1","added":[{"path":"/workspace/a.txt","size":6}],"modified":[],"deleted":[]}`)}},
		{Call: "snapshot", Args: j(`{"request":{"name":"step-1","retention_days":1,"metadata":{"sbx_chain":{"sandbox":"c1","step":"step-1"}}}}`),
			Response: confResponse{Status: 200, NDJSON: complete(snapshotJSON)}},
		{Call: "list_snapshots", Args: j(`{"sandbox":"c1"}`), Response: confResponse{Status: 200, Body: j(`[` + snapshotJSON + `]`)}},
		{Call: "get_snapshot", Args: j(`{"id":"snap_0123456789abcdef"}`), Response: confResponse{Status: 200, Body: j(snapshotJSON)}},
		{Call: "create", Args: j(`{"request":{"name":"c1-back","snapshot":"snap_0123456789abcdef"}}`),
			Response: confResponse{Status: 201, Body: sandboxJSON("c1-back")}},
		{Call: "delete_snapshot", Args: j(`{"id":"snap_0123456789abcdef"}`), Response: confResponse{Status: 204}},
		{Call: "fork", Args: j(`{"request":{"name":"c1-try","labels":{"team":"a"},"network":{"internet":false}}}`),
			Response: confResponse{Status: 200, NDJSON: complete(`{"snapshot":"snap_fedcba9876543210","paused_ms":300,"copies":[{"sandbox":` + string(sandboxJSON("c1-try")) + `}]}`)}},
		{Call: "get_network", Args: j(`{}`), Response: confResponse{Status: 200, Body: j(`{"internet":true,"allow":[],"deny":[],"connect":[]}`)}},
		{Call: "set_network", Args: j(`{"rules":{"internet":true,"allow":["registry.npmjs.org"],"deny":[],"connect":[]}}`),
			Response: confResponse{Status: 200, Body: j(`{"internet":true,"allow":["registry.npmjs.org"],"deny":[],"connect":[]}`)}},
		{Call: "list_secrets", Args: j(`{}`), Response: confResponse{Status: 200, Body: j(`{"secrets":[` + secretInfoJSON + `]}`)}},
		{Call: "set_secrets", Args: j(`{"secrets":[{"name":"API_TOKEN","value":"tok-2","rules":[{"host":"api.example.org","methods":["GET","HEAD"]}]}]}`),
			Response: confResponse{Status: 200, Body: j(`{"secrets":[` + secretInfoJSON + `]}`)}},
		{Call: "put_secret", Args: j(`{"name":"API_TOKEN","value":"tok-3","secret_rules":[{"host":"api.example.org","methods":["GET"],"path_prefix":"/v1"}]}`),
			Response: confResponse{Status: 200, Body: j(secretInfoJSON)}},
		{Call: "put_secret", Args: j(`{"name":"API_TOKEN","secret_rules":[{"host":"*.example.org","methods":["GET"]}]}`),
			Response: confResponse{Status: 200, Body: j(secretInfoJSON)}},
		{Call: "put_secret", Args: j(`{"name":"BAD-NAME","value":"x","secret_rules":[{"host":"api.example.org","methods":["GET"]}]}`), ErrorCode: "invalid_argument",
			Response: confResponse{Status: 400, Body: j(`{"error":{"code":"invalid_argument","message":"name: \"BAD-NAME\" is not an env var name"}}`)}},
		{Call: "delete_secret", Args: j(`{"name":"API_TOKEN"}`), Response: confResponse{Status: 204}},
		{Call: "update", Args: j(`{"request":{"name":"c2","labels":{"team":"b"}}}`), Response: confResponse{Status: 200, Body: sandboxJSON("c2")}},
		{Call: "suspend", Args: j(`{"wake_on":"approval-1"}`), Response: confResponse{Status: 200, NDJSON: complete(string(sandboxJSON("c2")))}},
		{Call: "post_event", Args: j(`{"key":"approval-1","data":{"approved":true}}`),
			Response: confResponse{Status: 200, Body: j(`{"id":"evt_0123456789abcdef","woken":["c2"],"pending":false}`)}},
		{Call: "resume", Args: j(`{}`), Response: confResponse{Status: 200, NDJSON: complete(string(sandboxJSON("c2")))}},
		{Call: "events", Args: j(`{}`),
			Response: confResponse{Status: 200, Body: j(`[{"id":"evt_0123456789abcdef","key":"approval-1","data":{"approved":true},"create_time":"2026-11-29T10:00:00Z","deliver_time":"2026-11-29T10:00:01Z"}]`)}},
		{Call: "deliver", Args: j(`{"request":{"paths":["/workspace/out","/workspace/patch.diff"],"name":"release-1","metadata":{"ticket":"T-16"}}}`),
			Response: confResponse{Status: 200, NDJSON: complete(deliveryJSON)}},
		{Call: "deliver", Args: j(`{"request":{"paths":["/workspace/missing"]}}`), ErrorCode: "invalid_argument",
			Response: confResponse{Status: 400, Body: j(`{"error":{"code":"invalid_argument","message":"/workspace/missing: no such file or directory"}}`)}},
		{Call: "list_deliveries", Args: j(`{"sandbox":"c2"}`), Response: confResponse{Status: 200, Body: j(`[` + deliveryJSON + `]`)}},
		{Call: "get_delivery", Args: j(`{"id":"dlv_0123456789abcdef"}`), Response: confResponse{Status: 200, Body: j(deliveryJSON)}},
		{Call: "get_delivery", Args: j(`{"id":"dlv_missing"}`), ErrorCode: "not_found",
			Response: confResponse{Status: 404, Body: j(`{"error":{"code":"not_found","message":"no delivery dlv_missing"}}`)}},
		{Call: "delivery_archive", Args: j(`{"id":"dlv_0123456789abcdef"}`), Response: confResponse{Status: 200, BodyText: text("zstd!\n")}},
		{Call: "delivery_key", Args: j(`{}`), Response: confResponse{Status: 200, BodyText: text("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n")}},
		{Call: "create_key", Args: j(`{"request":{"name":"agent-1","daily_limit_usd":2.5,"labels":{"team":"a"}}}`),
			Response: confResponse{Status: 201, Body: j(keyJSON[:len(keyJSON)-1] + `,"secret":"sbxk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`)}},
		{Call: "create_key", Args: j(`{"request":{"name":"root","admin":true}}`), ErrorCode: "forbidden",
			Response: confResponse{Status: 403, Body: j(`{"error":{"code":"forbidden","message":"creating API keys needs an admin key; this is a tenant key"}}`)}},
		{Call: "list_keys", Args: j(`{"revoked":true}`), Response: confResponse{Status: 200, Body: j(`[` + keyJSON + `]`)}},
		{Call: "get_key", Args: j(`{"id":"agent-1"}`), Response: confResponse{Status: 200, Body: j(keyJSON)}},
		{Call: "revoke_key", Args: j(`{"id":"key_0123456789abcdef"}`), Response: confResponse{Status: 204}},
		{Call: "revoke_key", Args: j(`{"id":"key_0123456789abcdef"}`), ErrorCode: "key_not_found",
			Response: confResponse{Status: 404, Body: j(`{"error":{"code":"key_not_found","message":"API key \"key_0123456789abcdef\" is already revoked"}}`)}},
		{Call: "usage", Args: j(`{"since":"2026-11-29T00:00:00Z","until":"2026-11-30T00:00:00Z","group_by":"day"}`),
			Response: confResponse{Status: 200, Body: j(usageJSON)}},
		{Call: "usage", Args: j(`{"group_by":"week"}`), ErrorCode: "invalid_argument",
			Response: confResponse{Status: 400, Body: j(`{"error":{"code":"invalid_argument","message":"group_by: \"week\": want sandbox, key or day"}}`)}},
		{Call: "set_key_limit", Args: j(`{"id":"key_0123456789abcdef","daily_limit_usd":0.5,"resume_suspended":true}`),
			Response: confResponse{Status: 200, Body: j(`{"id":"key_0123456789abcdef","name":"ci","labels":{},"admin":false,"daily_limit_usd":0.5,"create_time":"2026-11-29T10:00:00Z"}`)}},
		{Call: "set_key_limit", Args: j(`{"id":"ci"}`), Response: confResponse{Status: 200, Body: j(`{"id":"key_0123456789abcdef","name":"ci","labels":{},"admin":false,"daily_limit_usd":null,"create_time":"2026-11-29T10:00:00Z"}`)}},
		{Call: "delete", Args: j(`{}`), Response: confResponse{Status: 204}},
		{Call: "classify", Args: j(`{"command":"git checkout -- ."}`), Response: confResponse{Status: 200,
			Body: j(`{"undo":"git","reason":"` + "`git checkout`" + ` edits files in the working tree: a git snapshot of the repository undoes it (a disk checkpoint outside a git work tree)"}`)}},
	}
}

// usageJSON is an answer of GET /v1/usage?group_by=day: the pricing
// example of a 3-minute fork of a 2 vCPU / 4 GiB sandbox.
const usageJSON = `{"since":"2026-11-29T00:00:00Z","until":"2026-11-30T00:00:00Z","group_by":"day",` +
	`"prices":{"cpu_hour":0.025,"memory_gib_hour":0.0075,"storage_gb_month":0.08},` +
	`"usage":[{"day":"2026-11-29","cpu_seconds":180,"memory_gib_seconds":720,"stored_byte_seconds":0,"cost":0.00275}],` +
	`"total":{"cpu_seconds":180,"memory_gib_seconds":720,"stored_byte_seconds":0,"cost":0.00275}}`

// callNames documents the calls and their arguments for the other SDKs.
var callNames = []string{
	"health {}: GET /v1/health",
	"create {request}: create a sandbox from the request object (wire field names); the result is the current sandbox",
	"get {name}: get a sandbox by name; the result, when there is one, is the current sandbox",
	"list {labels}: list the sandboxes carrying all labels",
	"exec {command}: the current sandbox runs a shell command line (sh -c), buffered",
	"run {request}: the current sandbox runs an exec request object, buffered",
	"stream {request}: the current sandbox runs an exec request, streamed; read every event",
	"write_file {path, content, mode}: write content (UTF-8 text) with permission bits mode",
	"read_file {path, max_bytes}: read a file (max_bytes sent when given); the content must equal the canned body",
	"list_files {path}: list a directory",
	"delete_file {path}: delete a file",
	"checkpoint {comment}: take a checkpoint (NDJSON)",
	"list_checkpoints {}, get_checkpoint {id}, restore {id}, diff {from, to}",
	"snapshot {request}: take a memory snapshot from the request object (NDJSON)",
	"list_snapshots {sandbox}, get_snapshot {id}, delete_snapshot {id}",
	"fork {request}: fork the current sandbox (NDJSON); the current sandbox stays the same",
	"get_network {}, set_network {rules}",
	"list_secrets {}, set_secrets {secrets}: the current sandbox's secrets (set replaces all)",
	"put_secret {name, value, secret_rules}: add or replace one secret (value absent: keep the value); delete_secret {name}",
	"update {request}: PUT the update request object on the current sandbox",
	"suspend {wake_on}, resume {}, events {}: on the current sandbox",
	"post_event {key, data}: post data (a JSON value) to the event key",
	"deliver {request}: the current sandbox delivers with the request object (NDJSON)",
	"list_deliveries {sandbox}, get_delivery {id}",
	"delivery_archive {id}: the archive's bytes; they must equal the canned body",
	"delivery_key {}: the node's public key (PEM); it must equal the canned body",
	"create_key {request}: make an API key from the request object; the result carries the secret",
	"list_keys {revoked}: list API keys (revoked ones too when revoked is true: ?revoked=1)",
	"get_key {id}, revoke_key {id}: one API key by id or name; revoke it (DELETE)",
	"usage {since, until, group_by}: GET /v1/usage, each argument sent only when given (times as RFC 3339 UTC, as given)",
	"classify {command}: POST /v1/classify with the shell line as cmd (checkpointFor)",
	"set_key_limit {id, daily_limit_usd, resume_suspended}: PUT /v1/keys/{id}/limit; daily_limit_usd absent means no limit (send null), resume_suspended sent only when true",
	"delete {}: delete the current sandbox",
}

// runCall makes one call of the script with this client; cur is the
// current sandbox.
func runCall(ctx context.Context, c *Client, cur **Sandbox, cc confCase) error {
	var a struct {
		Request  json.RawMessage   `json:"request"`
		Name     string            `json:"name"`
		Labels   map[string]string `json:"labels"`
		Command  string            `json:"command"`
		Path     string            `json:"path"`
		Content  string            `json:"content"`
		Mode     uint32            `json:"mode"`
		MaxBytes int64             `json:"max_bytes"`
		Comment  string            `json:"comment"`
		ID       string            `json:"id"`
		From     string            `json:"from"`
		To       string            `json:"to"`
		Sandbox  string            `json:"sandbox"`
		Rules    api.NetworkRules  `json:"rules"`
		Secrets  []api.Secret      `json:"secrets"`
		Value    *string           `json:"value"`
		SRules   []api.SecretRule  `json:"secret_rules"`
		WakeOn   string            `json:"wake_on"`
		Key      string            `json:"key"`
		Data     json.RawMessage   `json:"data"`
		Revoked  bool              `json:"revoked"`
		Since    time.Time         `json:"since"`
		Until    time.Time         `json:"until"`
		GroupBy  string            `json:"group_by"`
		Limit    *float64          `json:"daily_limit_usd"`
		Resume   bool              `json:"resume_suspended"`
	}
	if err := json.Unmarshal(cc.Args, &a); err != nil {
		return err
	}
	sb := *cur
	var err error
	switch cc.Call {
	case "health":
		_, err = c.Health(ctx)
	case "create":
		var req api.CreateSandboxRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			var s *Sandbox
			if s, err = c.Sandboxes.Create(ctx, req); err == nil {
				*cur = s
			}
		}
	case "get":
		var s *Sandbox
		if s, err = c.Sandboxes.Get(ctx, a.Name); err == nil {
			*cur = s
		}
	case "list":
		_, err = c.Sandboxes.List(ctx, a.Labels)
	case "exec":
		_, err = sb.Exec(ctx, a.Command)
	case "run":
		var req api.ExecRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			_, err = sb.Run(ctx, req)
		}
	case "stream":
		var req api.ExecRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			var st *ExecStream
			if st, err = sb.Stream(ctx, req); err == nil {
				_, err = st.Wait(io.Discard, io.Discard)
			}
		}
	case "write_file":
		err = sb.WriteFile(ctx, a.Path, strings.NewReader(a.Content), a.Mode)
	case "read_file":
		var f *File
		if f, err = sb.OpenFileMax(ctx, a.Path, a.MaxBytes); err == nil {
			_, err = io.ReadAll(f)
			f.Close()
		}
	case "list_files":
		_, err = sb.ListFiles(ctx, a.Path)
	case "delete_file":
		err = sb.RemoveFile(ctx, a.Path, false)
	case "checkpoint":
		_, err = sb.Checkpoint(ctx, a.Comment)
	case "list_checkpoints":
		_, err = sb.ListCheckpoints(ctx)
	case "get_checkpoint":
		_, err = sb.GetCheckpoint(ctx, a.ID, false)
	case "restore":
		err = sb.Restore(ctx, a.ID, nil)
	case "diff":
		_, err = sb.Diff(ctx, a.From, a.To)
	case "snapshot":
		var req api.SnapshotRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			_, err = sb.Snapshot(ctx, req)
		}
	case "list_snapshots":
		_, err = c.Snapshots.List(ctx, a.Sandbox)
	case "get_snapshot":
		_, err = c.Snapshots.Get(ctx, a.ID)
	case "delete_snapshot":
		err = c.Snapshots.Delete(ctx, a.ID)
	case "fork":
		var req api.ForkRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			_, err = sb.Fork(ctx, req)
		}
	case "get_network":
		_, err = sb.Network().Get(ctx)
	case "set_network":
		_, err = sb.Network().Set(ctx, a.Rules)
	case "list_secrets":
		_, err = sb.Secrets().List(ctx)
	case "set_secrets":
		_, err = sb.Secrets().Set(ctx, a.Secrets)
	case "put_secret":
		_, err = sb.Secrets().Put(ctx, a.Name, a.Value, a.SRules)
	case "delete_secret":
		err = sb.Secrets().Delete(ctx, a.Name)
	case "update":
		var req api.UpdateSandboxRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			err = sb.Update(ctx, req)
		}
	case "suspend":
		err = sb.Suspend(ctx, a.WakeOn)
	case "resume":
		err = sb.Resume(ctx)
	case "events":
		_, err = sb.Events(ctx)
	case "post_event":
		_, err = c.Events.Post(ctx, a.Key, a.Data, "")
	case "deliver":
		var req api.DeliveryRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			_, err = sb.Deliver(ctx, req)
		}
	case "list_deliveries":
		_, err = c.Deliveries.List(ctx, a.Sandbox)
	case "get_delivery":
		_, err = c.Deliveries.Get(ctx, a.ID)
	case "delivery_archive":
		var rc io.ReadCloser
		if rc, _, err = c.Deliveries.Archive(ctx, a.ID); err == nil {
			var b []byte
			b, err = io.ReadAll(rc)
			rc.Close()
			if err == nil && string(b) != *cc.Response.BodyText {
				err = fmt.Errorf("archive %q, want %q", b, *cc.Response.BodyText)
			}
		}
	case "delivery_key":
		var b []byte
		if b, err = c.Deliveries.PublicKey(ctx); err == nil && string(b) != *cc.Response.BodyText {
			err = fmt.Errorf("key %q, want %q", b, *cc.Response.BodyText)
		}
	case "create_key":
		var req api.CreateKeyRequest
		if err = json.Unmarshal(a.Request, &req); err == nil {
			var k *api.CreatedKey
			if k, err = c.Keys.Create(ctx, req); err == nil && k.Secret == "" {
				err = fmt.Errorf("no secret in %+v", k)
			}
		}
	case "list_keys":
		_, err = c.Keys.List(ctx, a.Revoked)
	case "get_key":
		_, err = c.Keys.Get(ctx, a.ID)
	case "revoke_key":
		err = c.Keys.Revoke(ctx, a.ID)
	case "set_key_limit":
		_, err = c.SetKeyLimit(ctx, a.ID, api.KeyLimitRequest{DailyLimitUSD: a.Limit, ResumeSuspended: a.Resume})
	case "usage":
		_, err = c.Usage(ctx, UsageQuery{Since: a.Since, Until: a.Until, GroupBy: a.GroupBy})
	case "delete":
		err = sb.Delete(ctx)
	case "classify":
		_, err = c.Classify(ctx, a.Command)
	default:
		return fmt.Errorf("unknown call %q", cc.Call)
	}
	return err
}

// record turns an incoming request into its conformance form.
func record(r *http.Request) (confRequest, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return confRequest{}, err
	}
	out := confRequest{Method: r.Method, Path: r.URL.EscapedPath(), NDJSON: strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")}
	if q := r.URL.Query(); len(q) > 0 {
		out.Query = q
	}
	if len(b) > 0 {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				return out, err
			}
			out.Body, _ = json.Marshal(v) // canonical: sorted keys
		} else {
			out.BodyText = text(string(b))
		}
	}
	return out, nil
}

// respond writes a canned answer.
func respond(w http.ResponseWriter, res confResponse) {
	switch {
	case res.NDJSON != nil:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(res.Status)
		for _, l := range res.NDJSON {
			var line bytes.Buffer
			json.Compact(&line, l) // the file holds them indented
			line.WriteByte('\n')
			w.Write(line.Bytes())
		}
	case res.BodyText != nil:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(res.Status)
		io.WriteString(w, *res.BodyText)
	case res.Body != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(res.Status)
		w.Write(res.Body)
	default:
		w.WriteHeader(res.Status)
	}
}

// TestConformance makes the script's calls through this client and checks
// each request against sdk/testdata/conformance.json, which the
// TypeScript and Python SDKs check theirs against too. With -update it
// rewrites the file from this client's requests.
func TestConformance(t *testing.T) {
	cases := script()
	if !*update {
		b, err := os.ReadFile(conformancePath)
		if err != nil {
			t.Fatal(err)
		}
		var f confFile
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		cases = f.Cases
	}
	var got []confRequest
	var authBad []string
	i := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer test-key" {
			authBad = append(authBad, r.URL.Path)
		}
		req, err := record(r)
		if err != nil {
			t.Errorf("case %d: %v", i, err)
		}
		got = append(got, req)
		if i >= len(cases) {
			http.Error(w, "no more cases", 500)
			return
		}
		respond(w, cases[i].Response)
	}))
	defer srv.Close()
	c, err := New(WithURL(srv.URL), WithAPIKey("test-key"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var cur *Sandbox
	for i = 0; i < len(cases); i++ {
		cc := cases[i]
		n := len(got)
		err := runCall(ctx, c, &cur, cc)
		var ae *Error
		switch {
		case cc.ErrorCode != "" && (!errors.As(err, &ae) || string(ae.Code) != cc.ErrorCode):
			t.Errorf("case %d %s: error %v, want code %s", i, cc.Call, err, cc.ErrorCode)
		case cc.ErrorCode == "" && err != nil:
			t.Errorf("case %d %s: %v", i, cc.Call, err)
		}
		if len(got) != n+1 {
			t.Fatalf("case %d %s: %d requests, want 1", i, cc.Call, len(got)-n)
		}
		if *update {
			cases[i].Request = got[n]
			continue
		}
		if !sameRequest(got[n], cc.Request) {
			g, _ := json.Marshal(got[n])
			w, _ := json.Marshal(cc.Request)
			t.Errorf("case %d %s:\n got %s\nwant %s", i, cc.Call, g, w)
		}
	}
	if len(authBad) > 0 {
		t.Errorf("requests without the API key: %v", authBad)
	}
	if *update {
		f := confFile{
			About: []string{
				"The calls every sbx SDK makes, in order, with the exact request each must send and a canned response (docs/undo.md, Conformance).",
				"A test serves the responses in order from a local HTTP server, makes the calls through its client over TCP with API key test-key,",
				"and checks method, path (escaped), query (as a multimap), ndjson (Accept: application/x-ndjson asked), the JSON body compared as a JSON value",
				"(object members that are null count as absent: send unset fields as null or leave them out), body_text for bodies that are not JSON, and Authorization: Bearer test-key on every request.",
				"error_code: the call must raise the SDK's typed error with that API code. Written by: go test ./client -run TestConformance -update",
			},
			Calls: callNames,
			Cases: cases,
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conformancePath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sameRequest compares requests, JSON bodies as values.
func sameRequest(a, b confRequest) bool {
	if a.Method != b.Method || a.Path != b.Path || a.NDJSON != b.NDJSON || !reflect.DeepEqual(sortedQuery(a.Query), sortedQuery(b.Query)) {
		return false
	}
	if (a.BodyText == nil) != (b.BodyText == nil) || a.BodyText != nil && *a.BodyText != *b.BodyText {
		return false
	}
	var av, bv any
	if len(a.Body) > 0 {
		json.Unmarshal(a.Body, &av)
	}
	if len(b.Body) > 0 {
		json.Unmarshal(b.Body, &bv)
	}
	return reflect.DeepEqual(dropNulls(av), dropNulls(bv))
}

// dropNulls removes object members whose value is null: an SDK may send
// an unset field as null or leave it out.
func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if e != nil {
				out[k] = dropNulls(e)
			}
		}
		return out
	case []any:
		for i := range x {
			x[i] = dropNulls(x[i])
		}
	}
	return v
}

func sortedQuery(q map[string][]string) map[string][]string {
	if len(q) == 0 {
		return nil
	}
	out := map[string][]string{}
	for k, v := range q {
		v = append([]string(nil), v...)
		sort.Strings(v)
		out[k] = v
	}
	return out
}
