package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// loadSpec loads api/openapi.yaml with kin-openapi (an OpenAPI 3.1
// validator).
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPIYAML)
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	return doc
}

// checkJSON validates a JSON document against a component schema with
// the JSON Schema 2020-12 validator of OpenAPI 3.1.
func checkJSON(t *testing.T, doc *openapi3.T, component string, b []byte) {
	t.Helper()
	sr := doc.Components.Schemas[component]
	if sr == nil {
		t.Fatalf("no schema %s", component)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: not JSON: %v: %s", component, err, b)
	}
	if err := doc.ValidateSchemaJSON(sr.Value, v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s does not match its schema: %v\n%s", component, err, b)
	}
}

// TestOpenAPIValid: a real OpenAPI 3.1 validator accepts the document, and
// the examples in it match their schemas.
func TestOpenAPIValid(t *testing.T) {
	doc := loadSpec(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi: %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableMultiError(), openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("openapi.yaml is not valid OpenAPI 3.1:\n%v", err)
	}
	n := 0
	for name, sr := range doc.Components.Schemas {
		for _, ex := range sr.Value.Examples {
			b, _ := json.Marshal(ex)
			checkJSON(t, doc, name, b)
			n++
		}
	}
	if n == 0 {
		t.Fatal("no examples were checked")
	}
}

// TestOpenAPIServed: GET /v1/openapi.json answers the YAML document as
// JSON, and needs the key over TCP like /v1/health.
func TestOpenAPIServed(t *testing.T) {
	s := New(nil, Config{APIKeys: []string{testKey}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rec := httptest.NewRecorder()
	s.Handler(false).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	served, err := openapi3.NewLoader().LoadFromData(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("the served document does not load: %v", err)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatal("the served document is not JSON")
	}
	want, _ := json.Marshal(loadSpec(t))
	got, _ := json.Marshal(served)
	if !bytes.Equal(got, want) {
		t.Fatalf("the served document differs from api/openapi.yaml")
	}
	for key, code := range map[string]int{"": 401, "Bearer " + testKey: 200} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/openapi.json", nil)
		if key != "" {
			r.Header.Set("Authorization", key)
		}
		s.Handler(true).ServeHTTP(rec, r)
		if rec.Code != code {
			t.Errorf("over TCP with Authorization %q: %d, want %d", key, rec.Code, code)
		}
	}
}

// goTypes are the Go types that schemas of the document mirror.
var goTypes = map[string]any{
	"ErrorBody": api.ErrorBody{}, "ErrorResponse": api.ErrorResponse{},
	"Sandbox": api.Sandbox{}, "Source": api.Source{}, "NetworkRules": api.NetworkRules{},
	"NetworkLog": api.NetworkLog{}, "NetworkCounts": api.NetworkCounts{}, "NetworkRefusal": api.NetworkRefusal{},
	"Volume": api.Volume{}, "CreateSandboxRequest": api.CreateSandboxRequest{},
	"UpdateSandboxRequest": api.UpdateSandboxRequest{}, "SuspendRequest": api.SuspendRequest{},
	"Event": api.Event{}, "CancelEventsResult": api.CancelEventsResult{}, "EventResult": api.EventResult{},
	"ExecRequest": api.ExecRequest{}, "TTYMessage": api.TTYMessage{}, "Winsize": api.Winsize{},
	"UndoResult": api.UndoResult{}, "ExecResult": api.ExecResult{}, "ExecEvent": api.ExecEvent{},
	"FileInfo": api.FileInfo{}, "Image": api.Image{}, "BuildImageRequest": api.BuildImageRequest{},
	"PullImageRequest": api.PullImageRequest{}, "StreamLine": api.StreamLine{}, "Health": api.Health{},
	"Capacity": api.Capacity{}, "CheckpointRequest": api.CheckpointRequest{}, "Checkpoint": api.Checkpoint{},
	"Change": api.Change{}, "Diff": api.Diff{}, "SnapshotRequest": api.SnapshotRequest{},
	"Snapshot": api.Snapshot{}, "ForkRequest": api.ForkRequest{}, "ForkCopy": api.ForkCopy{},
	"ForkResult": api.ForkResult{}, "Process": api.Process{}, "SignalRequest": api.SignalRequest{},
	"Port": api.Port{}, "DeliveryRequest": api.DeliveryRequest{}, "Delivery": api.Delivery{}, "Teardown": api.Teardown{},
	"Usage": api.Usage{}, "UsageEntry": api.UsageEntry{}, "UsagePrices": api.UsagePrices{}, "KeyLimitRequest": api.KeyLimitRequest{},
	"FileWritten": FileWritten{}, "ArchiveWritten": ArchiveWritten{},
	"CreateKeyRequest": api.CreateKeyRequest{}, "Key": api.Key{}, "Node": api.Node{}, "NodeCapacity": api.NodeCapacity{}, "CreatedKey": api.CreatedKey{},
	"Secret": api.Secret{}, "SecretRule": api.SecretRule{}, "SecretInfo": api.SecretInfo{}, "SecretList": api.SecretList{},
	"SetSecretsRequest": api.SetSecretsRequest{}, "PutSecretRequest": api.PutSecretRequest{}, "SecretUse": api.SecretUse{},
	"GitUndo": api.GitUndo{}, "ClassifyRequest": api.ClassifyRequest{}, "ClassifyResult": api.ClassifyResult{},
}

// specOnly are the schemas that mirror no Go struct, and what they are.
var specOnly = map[string]string{
	"ErrorCode":            "api.Code and its constants (TestOpenAPIErrorCodes)",
	"State":                "api.State and its constants",
	"SandboxNameString":    "a name's pattern",
	"ImageNameString":      "an image name's pattern",
	"Labels":               "map[string]string",
	"Env":                  "map[string]string",
	"DetachedProcess":      `exec's {"pid": N} (a map in the handler)`,
	"SandboxStreamLine":    "StreamLine with a Sandbox",
	"CheckpointStreamLine": "StreamLine with a Checkpoint",
	"SnapshotStreamLine":   "StreamLine with a Snapshot",
	"ForkStreamLine":       "StreamLine with a ForkResult",
	"DeliveryStreamLine":   "StreamLine with a Delivery",
	"ImageStreamLine":      "StreamLine with an Image",
}

// notRequired are fields without omitempty that requests may leave out:
// the server gives them a default.
var notRequired = map[string][]string{
	"NetworkRules":      {"internet", "allow", "deny", "connect"}, // internet absent is true
	"BuildImageRequest": {"name"},                                 // "default"
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

// jsonFields lists the JSON fields of struct type t (embedded structs'
// fields promoted).
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty"), typ: f.Type})
	}
	return out
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// nonNull returns the schema of sr without its null alternative, and
// whether null is allowed: {type: [X, "null"]} or oneOf [X, {type: null}].
func nonNull(sr *openapi3.SchemaRef) (*openapi3.SchemaRef, bool) {
	s := sr.Value
	if s.Type != nil && s.Type.Includes("null") {
		return sr, true
	}
	if len(s.OneOf) == 2 {
		for i, alt := range s.OneOf {
			if alt.Value.Type != nil && alt.Value.Type.Is("null") {
				return s.OneOf[1-i], true
			}
		}
	}
	return sr, false
}

// checkType reports how the JSON of Go type t differs from schema sr.
func checkType(where string, t reflect.Type, sr *openapi3.SchemaRef, nullable bool) []string {
	sr, null := nonNull(sr)
	var errs []string
	if nullable && !null {
		errs = append(errs, where+": can be null (a pointer without omitempty), the schema does not allow it")
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawType {
		return errs // any JSON
	}
	if t == reflect.TypeOf(api.Command{}) {
		// A string (a shell line) or an array of strings (an argv).
		var kinds []string
		for _, o := range sr.Value.OneOf {
			kinds = append(kinds, strings.Join(o.Value.Type.Slice(), "|"))
			if o.Value.Items != nil {
				kinds[len(kinds)-1] += " of " + strings.Join(o.Value.Items.Value.Type.Slice(), "|")
			}
		}
		if strings.Join(kinds, ", ") != "string, array of string" {
			errs = append(errs, where+": Go api.Command is a string or an array of strings, the schema's oneOf is ["+strings.Join(kinds, ", ")+"]")
		}
		return errs
	}
	want := ""
	switch t.Kind() {
	case reflect.String:
		want = "string"
	case reflect.Bool:
		want = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "integer"
	case reflect.Float32, reflect.Float64:
		want = "number"
	case reflect.Slice, reflect.Array:
		want = "array"
	case reflect.Map:
		want = "object"
	case reflect.Struct:
		want = "object"
		if t == timeType {
			want = "string"
		}
	}
	s := sr.Value
	var types []string
	if s.Type != nil {
		for _, ty := range s.Type.Slice() {
			if ty != "null" {
				types = append(types, ty)
			}
		}
	}
	if len(types) != 1 || types[0] != want {
		return append(errs, where+": Go "+t.String()+" is JSON "+want+", the schema says "+strings.Join(types, "|"))
	}
	switch {
	case t == timeType:
		if s.Format != "date-time" {
			errs = append(errs, where+": a time, the schema's format is "+strconv.Quote(s.Format))
		}
	case t.Kind() == reflect.Slice:
		if s.Items == nil {
			return append(errs, where+": no items schema")
		}
		errs = append(errs, checkType(where+"[]", t.Elem(), s.Items, false)...)
	case t.Kind() == reflect.Map:
		if s.AdditionalProperties.Schema == nil {
			return append(errs, where+": no additionalProperties schema")
		}
		errs = append(errs, checkType(where+"{}", t.Elem(), s.AdditionalProperties.Schema, false)...)
	case t.Kind() == reflect.Struct:
		name := strings.TrimPrefix(sr.Ref, "#/components/schemas/")
		if g, ok := goTypes[name]; !ok || reflect.TypeOf(g) != t {
			errs = append(errs, where+": Go "+t.String()+" must be a $ref to its component, not "+strconv.Quote(sr.Ref))
		}
	}
	return errs
}

// TestOpenAPIMatchesGoTypes: every schema that mirrors a Go struct has
// exactly its JSON fields, of matching JSON types, with the fields that are
// always present (no omitempty) required; every struct of package api has
// a schema; the enums of State and FileType are the Go constants.
func TestOpenAPIMatchesGoTypes(t *testing.T) {
	doc := loadSpec(t)
	for name := range doc.Components.Schemas {
		if _, ok := goTypes[name]; !ok && specOnly[name] == "" {
			t.Errorf("schema %s mirrors no Go type: add it to goTypes (or to specOnly, saying what it is)", name)
		}
	}
	for name, v := range goTypes {
		sr := doc.Components.Schemas[name]
		if sr == nil {
			t.Errorf("Go %T has no schema %s in api/openapi.yaml", v, name)
			continue
		}
		s := sr.Value
		var required []string
		fields := map[string]bool{}
		for _, f := range jsonFields(reflect.TypeOf(v)) {
			fields[f.name] = true
			if !f.omitempty && !slices.Contains(notRequired[name], f.name) {
				required = append(required, f.name)
			}
			ps := s.Properties[f.name]
			if ps == nil {
				t.Errorf("%s: Go field %q is not in the schema's properties", name, f.name)
				continue
			}
			for _, e := range checkType(name+"."+f.name, f.typ, ps, f.typ.Kind() == reflect.Pointer && !f.omitempty) {
				t.Error(e)
			}
		}
		for p := range s.Properties {
			if !fields[p] {
				t.Errorf("%s: schema property %q is not a field of Go %T", name, p, v)
			}
		}
		sort.Strings(required)
		got := slices.Sorted(slices.Values(s.Required))
		if !slices.Equal(got, required) {
			t.Errorf("%s: required %v, want %v (the Go fields without omitempty)", name, got, required)
		}
	}
	// Every struct type of package api has a schema.
	for _, d := range apiDecls(t) {
		ts, ok := d.(*ast.TypeSpec)
		if !ok {
			continue
		}
		if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
			if _, ok := goTypes[ts.Name.Name]; !ok {
				t.Errorf("api.%s has no schema in api/openapi.yaml (and no entry in goTypes)", ts.Name.Name)
			}
		}
	}
	for schema, typ := range map[string]string{"State": "State", "FileInfo.type": "FileType"} {
		sr := doc.Components.Schemas[schema]
		if name, prop, ok := strings.Cut(schema, "."); ok {
			sr = doc.Components.Schemas[name].Value.Properties[prop]
		}
		var got []string
		for _, e := range sr.Value.Enum {
			got = append(got, e.(string))
		}
		want := apiConsts(t, typ)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: enum %v, Go's %s constants are %v", schema, got, typ, want)
		}
	}
}

// apiDecls parses package api's non-test files and returns their type and
// value specs.
func apiDecls(t *testing.T) []ast.Spec {
	t.Helper()
	fset := token.NewFileSet()
	var out []ast.Spec
	for _, f := range []string{"../../api/types.go", "../../api/errors.go"} {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if gd, ok := d.(*ast.GenDecl); ok {
				out = append(out, gd.Specs...)
			}
		}
	}
	return out
}

// apiConsts returns the values of package api's string constants of type
// typ, sorted.
func apiConsts(t *testing.T, typ string) []string {
	t.Helper()
	var out []string
	for _, d := range apiDecls(t) {
		vs, ok := d.(*ast.ValueSpec)
		if !ok || vs.Type == nil {
			continue
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
			continue
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				out = append(out, s)
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("no constants of type %s in package api", typ)
	}
	return out
}

// specCodes returns ErrorCode's codes and the status of each.
func specCodes(t *testing.T, doc *openapi3.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, alt := range doc.Components.Schemas["ErrorCode"].Value.OneOf {
		code, _ := alt.Value.Const.(string)
		st, ok := alt.Value.Extensions["x-sbx-status"].(float64)
		if code == "" || !ok {
			t.Fatalf("ErrorCode: an entry without const or x-sbx-status: %+v", alt.Value)
		}
		out[code] = int(st)
	}
	return out
}

// TestOpenAPIErrorCodes: every error code of api/errors.go is in the
// document with the status sbxd answers it with, and nothing else is; the
// error answers sbxd writes match the ErrorResponse schema.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadSpec(t)
	spec := specCodes(t, doc)
	consts := apiConsts(t, "Code")
	for _, c := range consts {
		st, ok := spec[c]
		if !ok {
			t.Errorf("error code %s is not in ErrorCode of api/openapi.yaml", c)
		} else if want := api.Code(c).HTTPStatus(); st != want {
			t.Errorf("error code %s: x-sbx-status %d, sbxd answers %d", c, st, want)
		}
	}
	for c := range spec {
		if !slices.Contains(consts, c) {
			t.Errorf("ErrorCode %s of api/openapi.yaml is not a code of api/errors.go", c)
		}
	}
	// The answers of the server's error mapper.
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), mux: http.NewServeMux()}
	s.routes()
	classes := []error{errdefs.ErrInvalidArgument, errdefs.ErrUnauthorized, errdefs.ErrSandboxNotFound,
		errdefs.ErrCheckpointNotFound, errdefs.ErrSnapshotNotFound, errdefs.ErrImageNotFound, errdefs.ErrFileNotFound,
		errdefs.ErrProcessNotFound, errdefs.ErrEventNotFound, errdefs.ErrKeyNotFound, errdefs.ErrForbidden, errdefs.ErrNotFound, errdefs.ErrNameTaken,
		errdefs.ErrConflict, errdefs.ErrHasVolume, errdefs.ErrTooLarge, errdefs.ErrQuota, errdefs.ErrCapacity,
		errdefs.ErrCaptureLimit, errdefs.ErrCheckpointFailed, errdefs.ErrRestoreFailed, errdefs.ErrSnapshotFailed,
		errdefs.ErrForkFailed, errdefs.ErrSuspendFailed, errdefs.ErrResumeFailed, errdefs.ErrPortUnreachable,
		errdefs.ErrPortTimeout, errdefs.ErrUnavailable, errors.New("something else")}
	seen := map[api.Code]bool{}
	check := func(what string, rec *httptest.ResponseRecorder) {
		var body api.ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen[body.Error.Code] = true
		if st, ok := spec[string(body.Error.Code)]; !ok || st != rec.Code {
			t.Errorf("%s: answered %d %s; the document says %d", what, rec.Code, body.Error.Code, st)
		}
		checkJSON(t, doc, "ErrorResponse", rec.Body.Bytes())
	}
	for _, class := range classes {
		rec := httptest.NewRecorder()
		s.writeError(rec, httptest.NewRequest("GET", "/", nil), errdefs.New(class, "x"))
		check(class.Error(), rec)
	}
	for _, r := range []*http.Request{httptest.NewRequest("PATCH", "/v1/sandboxes", nil), httptest.NewRequest("GET", "/v1/nothing", nil)} {
		rec := httptest.NewRecorder()
		s.route(rec, r)
		check(r.Method+" "+r.URL.Path, rec)
	}
	for _, c := range consts {
		if !seen[api.Code(c)] {
			t.Errorf("no answer of the test carried %s: add its class to the test", c)
		}
	}
}

// TestOpenAPIStreamLines: the NDJSON lines of a long operation match the
// document's line schemas.
func TestOpenAPIStreamLines(t *testing.T) {
	doc := loadSpec(t)
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	src := "v0"
	for _, fail := range []bool{false, true} {
		rec := httptest.NewRecorder()
		s.long(rec, httptest.NewRequest("POST", "/", nil), func(ctx context.Context, progress func(string)) (any, error) {
			progress("capturing")
			if fail {
				return nil, errdefs.New(errdefs.ErrCheckpointFailed, "no space")
			}
			return api.Checkpoint{ID: "v1", CreateTime: time.Now().UTC(), SourceID: &src, Health: api.HealthOK}, nil
		})
		if ct := rec.Header().Get("Content-Type"); ct != "application/x-ndjson" {
			t.Fatalf("Content-Type %s", ct)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(rec.Body.Bytes()), []byte("\n")) {
			checkJSON(t, doc, "CheckpointStreamLine", line)
		}
	}
	// A complete line that does not carry a checkpoint is refused.
	b, _ := json.Marshal(api.StreamLine{Type: api.LineComplete, Data: json.RawMessage(`{"id":3}`), Time: time.Now()})
	var v any
	_ = json.Unmarshal(b, &v)
	if doc.ValidateSchemaJSON(doc.Components.Schemas["CheckpointStreamLine"].Value, v, openapi3.EnableJSONSchema2020()) == nil {
		t.Fatalf("the line schema takes anything: %s", b)
	}
	rec := httptest.NewRecorder()
	st := startStream(rec)
	code := 0
	st.line(api.ExecEvent{Type: api.ExecStart, PID: 7})
	(&utf8Lines{st: st, typ: api.ExecStdout}).Write([]byte("hi\n"))
	st.line(api.ExecEvent{Type: api.ExecExit, ExitCode: &code, DurationMS: 3})
	st.line(api.ExecEvent{Type: api.ExecError, Error: "gone", Code: api.CodeConflict})
	for _, line := range bytes.Split(bytes.TrimSpace(rec.Body.Bytes()), []byte("\n")) {
		checkJSON(t, doc, "ExecEvent", line)
	}
}

// routePatterns returns the patterns that routes() in server.go registers,
// with path wildcards unnamed ("GET /v1/sandboxes/{}").
func routePatterns(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "server.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 2 {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "HandleFunc" {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			p, _ := strconv.Unquote(lit.Value)
			out = append(out, unnamed(p))
		}
		return true
	})
	if len(out) < 40 {
		t.Fatalf("found %d routes in server.go; the parse no longer matches routes()", len(out))
	}
	sort.Strings(out)
	return out
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

func unnamed(p string) string { return wildcard.ReplaceAllString(p, "{}") }

// TestOpenAPIRoutes: the document has exactly the routes sbxd serves: those
// of routes(), the MCP endpoint and the preview proxy.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadSpec(t)
	var spec []string
	preview := "/v1/sandboxes/{name}/ports/{port}/{path}"
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			switch path {
			case mcpPath, preview:
				continue
			}
			spec = append(spec, unnamed(method+" "+path))
		}
	}
	sort.Strings(spec)
	served := routePatterns(t)
	for _, p := range served {
		if !slices.Contains(spec, p) {
			t.Errorf("sbxd serves %s; api/openapi.yaml does not describe it", p)
		}
	}
	for _, p := range spec {
		if !slices.Contains(served, p) {
			t.Errorf("api/openapi.yaml describes %s; sbxd has no such route", p)
		}
	}
	if item := doc.Paths.Find(mcpPath); item == nil || item.Post == nil {
		t.Errorf("api/openapi.yaml does not describe POST %s", mcpPath)
	}
	s := &Server{}
	if item := doc.Paths.Find(preview); item == nil || len(item.Operations()) != 7 {
		t.Errorf("api/openapi.yaml does not describe the preview proxy %s (every method)", preview)
	} else if _, ok := s.previewOf(httptest.NewRequest("GET", "/v1/sandboxes/web/ports/3000/a/b", nil)); !ok {
		t.Errorf("%s is no longer the preview proxy's path", preview)
	}
}
