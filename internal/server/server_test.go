package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

func decodeBody(t *testing.T, body string, v any) error {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/x", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return decode(httptest.NewRecorder(), r, 256, v, false)
}

func TestDecode(t *testing.T) {
	var req api.CreateSandboxRequest
	for body, want := range map[string]string{
		`{"nam": "x"}`:                      "nam: unknown field",
		`{"cpus": "two"}`:                   "cpus: expected a number",
		`{"name": "x"} {"a":1}`:             "trailing data",
		`{"name": `:                         "malformed JSON",
		``:                                  "a JSON object is required",
		`null`:                              "got JSON null",
		` null `:                            "got JSON null",
		`{"network": {"alow": ["x.org"]}}`:  "network.alow: unknown field",
		`{"network": {"Allow": ["x.org"]}}`: "network.Allow: unknown field",
		`{"network": ["x.org"]}`:            "network: want a JSON object",
	} {
		err := decodeBody(t, body, &req)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want invalid argument with %q", body, err, want)
		}
	}
	err := decodeBody(t, `{"name": "`+strings.Repeat("a", 400)+`"}`, &req)
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if b := s.errorOf(context.Background(), err); b.Code != api.CodeTooLarge {
		t.Fatalf("over-long body: %v → %s", err, b.Code)
	}
}

func TestErrorBodies(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.WithValue(context.Background(), ridKey{}, "req_1")
	// A deadline underneath (a runsc verb's) cut the operation: 503, saying
	// the sandbox does not answer, without runsc's arguments.
	cut := fmt.Errorf("stop web: runsc delete --force /var/lib/sbx/x: %w: %w", context.DeadlineExceeded, errdefs.ErrCheckpointFailed)
	if b := s.errorOf(ctx, cut); b.Code != api.CodeUnavailable || !strings.Contains(b.Message, "does not answer") || strings.Contains(b.Message, "/var/lib") {
		t.Fatalf("an operation cut by a deadline underneath → %+v, want unavailable saying the sandbox does not answer", b)
	}
	b := s.errorOf(ctx, errors.New("open /var/lib/sbx/x: permission denied"))
	if b.Code != api.CodeInternal || strings.Contains(b.Message, "/var/lib") || b.RequestID != "req_1" {
		t.Fatalf("internal error leaks or lacks the request id: %+v", b)
	}
	// An operation that failed underneath: runsc's spec, host paths and
	// what the guest wrote stay in the log.
	for _, err := range []error{
		fmt.Errorf("checkpoint of web: open /var/lib/sbx/layers/sbx_1/upper/x: no such file: %w", errdefs.ErrCheckpointFailed),
		fmt.Errorf("resume web: runsc restore: {\"ociVersion\":\"1.0\",\"root\":{\"path\":\"/var/lib/sbx/sandboxes/sbx_1/rootfs\"}} init.log: guest says hi: %w", errdefs.ErrResumeFailed),
		errdefs.WithDetail(fmt.Errorf("write /var/lib/sbx/blobs/x: no space left on device: %w", errdefs.ErrSnapshotFailed), "the blob store is full"),
	} {
		b := s.errorOf(ctx, err)
		if b.Code != errdefs.Code(err) || strings.Contains(b.Message, "/var/lib") || strings.Contains(b.Message, "guest says") ||
			strings.Contains(b.Message, "ociVersion") || b.RequestID != "req_1" || !strings.Contains(b.Message, "req_1") {
			t.Errorf("%v → %+v", err, b)
		}
	}
	if b := s.errorOf(ctx, errdefs.WithDetail(fmt.Errorf("x: %w", errdefs.ErrSnapshotFailed), "the blob store is full")); !strings.Contains(b.Message, "the blob store is full") {
		t.Errorf("the detail for callers is missing: %+v", b)
	}
	b = s.errorOf(ctx, errdefs.Invalid("name", "bad"))
	if b.Code != api.CodeInvalidArgument || b.Message != "name: bad" {
		t.Fatalf("%+v", b)
	}
}

func TestAuth(t *testing.T) {
	s := &Server{cfg: Config{APIKeys: []string{"0123456789abcdef"}}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /v1/ok", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	for key, want := range map[string]int{"": 401, "Bearer nope": 401, "0123456789abcdef": 401, "Bearer 0123456789abcdef": 204,
		// RFC 7235 §2.1: the scheme is case-insensitive; one or more spaces
		// follow it.
		"bearer 0123456789abcdef": 204, "BEARER 0123456789abcdef": 204, "bEaReR  0123456789abcdef": 204,
		"Basic 0123456789abcdef": 401, "Bearer0123456789abcdef": 401, "Bearer 0123456789abcdef x": 401,
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/ok", nil)
		if key != "" {
			r.Header.Set("Authorization", key)
		}
		s.Handler(true).ServeHTTP(rec, r)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", key, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	s.Handler(false).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/ok", nil))
	if rec.Code != 204 {
		t.Fatalf("the socket handler wants a key: %d", rec.Code)
	}
}

func TestUTF8Lines(t *testing.T) {
	rec := httptest.NewRecorder()
	st := startStream(rec)
	u := &utf8Lines{st: st, typ: api.ExecStdout}
	b := []byte("café ☕")
	// Split inside the multi-byte sequences.
	u.Write(b[:4])
	u.Write(b[4:7])
	u.Write(b[7:])
	u.flush()
	out := rec.Body.String()
	if strings.Contains(out, `\ufffd`) || strings.Contains(out, "\uFFFD") {
		t.Fatalf("a UTF-8 sequence was split: %s", out)
	}
	if !strings.Contains(out, `"caf`) || !strings.Contains(out, "☕") {
		t.Fatalf("%s", out)
	}
}

// TestDecodeRules: the body of PUT .../network is held to its exact keys.
func TestDecodeRules(t *testing.T) {
	for body, want := range map[string]string{
		`{"internet": false, "deny_list": ["y.org"]}`: "network.deny_list: unknown field",
		`null`:               "not null",
		`[]`:                 "want a JSON object",
		`{"allow": "x.org"}`: "allow: expected an array",
	} {
		var rules api.NetworkRules
		err := decodeBody(t, body, &rules)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want invalid argument with %q", body, err, want)
		}
	}
	var rules api.NetworkRules
	if err := decodeBody(t, `{"allow": ["x.org"]}`, &rules); err != nil || !rules.Internet || rules.Allow[0] != "x.org" {
		t.Fatalf("rules without internet: %+v, %v", rules, err)
	}
}

// TestMCPWrongMethod: /v1/mcp serves only POST (stateless streamable
// HTTP); GET and DELETE answer the API's JSON 405 with Allow: POST and a
// message that says so, not the MCP library's plain text.
func TestMCPWrongMethod(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), mux: http.NewServeMux()}
	for _, m := range []string{"GET", "DELETE"} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(m, mcpPath, nil)
		r.Header.Set("Accept", "text/event-stream")
		s.Handler(false).ServeHTTP(rec, r)
		var er api.ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || rec.Code != 405 ||
			er.Error.Code != api.CodeMethodNotAllowed || rec.Header().Get("Allow") != "POST" ||
			!strings.Contains(er.Error.Message, "stateless") || !strings.Contains(er.Error.Message, "POST") {
			t.Errorf("%s %s: %d Allow %q %q; want the API's JSON 405 method_not_allowed that says to POST",
				m, mcpPath, rec.Code, rec.Header().Get("Allow"), rec.Body.String())
		}
	}
}
