package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestClassify: POST /v1/classify answers a shell line's and an argv's
// undo with a reason that matches the schema, refuses what is neither,
// and needs the key over TCP.
func TestClassify(t *testing.T) {
	s := New(nil, Config{APIKeys: []string{testKey}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	doc := loadSpec(t)
	post := func(tcp bool, key, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/classify", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		s.Handler(tcp).ServeHTTP(rec, r)
		return rec
	}
	for _, c := range []struct {
		body, undo, reason string
	}{
		{`{"cmd": "git checkout -- ."}`, "git", "`git checkout`"},
		{`{"cmd": "ls && npm install"}`, "checkpoint", "`npm install`"},
		{`{"cmd": ["rm", "-rf", "build dir"]}`, "git", "`rm`"},
		{`{"cmd": ["sh", "-c", "psql -c 'DROP TABLE t'"]}`, "fork", "`psql`"},
		{`{"cmd": "cat README"}`, "none", "only reads"},
		{`{"cmd": ""}`, "none", "runs nothing"},
	} {
		rec := post(false, "", c.body)
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", c.body, rec.Code, rec.Body)
		}
		checkJSON(t, doc, "ClassifyResult", rec.Body.Bytes())
		var res api.ClassifyResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res.Undo != c.undo || !strings.Contains(res.Reason, c.reason) {
			t.Errorf("%s: %+v, want %s and %q", c.body, res, c.undo, c.reason)
		}
	}
	for body, want := range map[string]string{
		`{}`:                    "cmd: is required",
		`{"cmd": 3}`:            "cmd: expected",
		`{"cmd": {"a": 1}}`:     "cmd: expected",
		`{"cmd": ["ls", 1]}`:    "cmd: expected",
		`{"cmd": "ls", "x": 1}`: "x: unknown field",
		``:                      "a JSON object is required",
	} {
		rec := post(false, "", body)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"invalid_argument"`) || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%q: %d %s, want 400 invalid_argument with %q", body, rec.Code, rec.Body, want)
		}
		checkJSON(t, doc, "ErrorResponse", rec.Body.Bytes())
	}
	if rec := post(true, "", `{"cmd": "ls"}`); rec.Code != 401 {
		t.Errorf("over TCP without a key: %d", rec.Code)
	}
	if rec := post(true, testKey, `{"cmd": "ls"}`); rec.Code != 200 {
		t.Errorf("over TCP with the key: %d %s", rec.Code, rec.Body)
	}
}
