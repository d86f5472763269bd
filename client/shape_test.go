package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestNetworkOffOn: Off and On replace the rules with internet false and
// true, and the sandbox's copy follows the answer.
func TestNetworkOffOn(t *testing.T) {
	var bodies []string
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPut || r.URL.Path != "/v1/sandboxes/sbx_1/network" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		bodies = append(bodies, string(b))
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	sb := c.Sandboxes.wrap(api.Sandbox{ID: "sbx_1", Name: "a"})
	ctx := context.Background()
	if r, err := sb.Network().Off(ctx); err != nil || r.Internet || sb.Sandbox.Network.Internet {
		t.Fatalf("off: %+v, %v", r, err)
	}
	if r, err := sb.Network().On(ctx); err != nil || !r.Internet || !sb.Sandbox.Network.Internet {
		t.Fatalf("on: %+v, %v", r, err)
	}
	for i, want := range []bool{false, true} {
		var got api.NetworkRules
		if err := json.Unmarshal([]byte(bodies[i]), &got); err != nil || got.Internet != want || len(got.Allow)+len(got.Deny)+len(got.Connect) != 0 {
			t.Errorf("request %d: %s", i, bodies[i])
		}
	}
}

// TestForkOne: one copy comes back as a Sandbox; a copy's own error is the
// error; more than one copy is refused before any request.
func TestForkOne(t *testing.T) {
	answer := `{"copies":[{"sandbox":{"id":"sbx_2","name":"b","state":"running"}}],"paused_ms":3}`
	calls := 0
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"complete","data":`+answer+`,"time":"2026-01-01T00:00:00Z"}`+"\n")
	})
	sb := c.Sandboxes.wrap(api.Sandbox{ID: "sbx_1", Name: "a"})
	ctx := context.Background()
	cp, err := sb.ForkOne(ctx, api.ForkRequest{Name: "b"})
	if err != nil || cp.ID != "sbx_2" || cp.Name != "b" {
		t.Fatalf("fork: %+v, %v", cp, err)
	}
	answer = `{"copies":[{"error":{"code":"fork_failed","message":"no room"}}]}`
	if _, err := sb.ForkOne(ctx, api.ForkRequest{}); err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("failed copy: %v", err)
	}
	n := calls
	if _, err := sb.ForkOne(ctx, api.ForkRequest{Count: 2}); err == nil || calls != n {
		t.Fatalf("count 2: %v after %d requests", err, calls-n)
	}
}
