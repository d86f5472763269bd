package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// TestForgedForwardHeaders: a client cannot pose as another node to take
// on another caller: the caller header counts only with the cluster key,
// and a node without a cluster key trusts no forwarded request. With the
// key, the forwarding node's caller is taken as is.
func TestForgedForwardHeaders(t *testing.T) {
	ks := newKeyServer(t)
	tenant := ks.newKey(t, `{"name":"agent-1"}`)
	// GET /v1/nodes answers an admin, and 403 to a tenant.
	nodes := func(key string, hdr ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", ks.front.URL+"/v1/nodes", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == 200 {
			var n []api.Node
			if err := json.NewDecoder(resp.Body).Decode(&n); err != nil || len(n) != 1 {
				t.Fatalf("nodes: %v %v", n, err)
			}
		}
		return resp.StatusCode
	}
	admin := `{"admin":true}`
	// No cluster key configured: the headers are ignored, even an empty key.
	if code := nodes(tenant.Secret); code != 403 {
		t.Fatalf("a tenant: %d", code)
	}
	if code := nodes(tenant.Secret, CallerHeader, admin, ClusterKeyHeader, ""); code != 403 {
		t.Fatalf("a tenant with a forged caller, no cluster key: %d", code)
	}
	if code := nodes("", CallerHeader, admin, ClusterKeyHeader, ""); code != 401 {
		t.Fatalf("no key, a forged caller: %d", code)
	}
	ks.s.cfg.ClusterKey = "cluster-key-0123456789"
	if code := nodes(tenant.Secret, CallerHeader, admin, ClusterKeyHeader, "wrong-key-0123456789"); code != 403 {
		t.Fatalf("a tenant with a forged caller and a wrong cluster key: %d", code)
	}
	if code := nodes("", CallerHeader, admin, ClusterKeyHeader, "wrong-key-0123456789"); code != 401 {
		t.Fatalf("no key, a wrong cluster key: %d", code)
	}
	if code := nodes("", CallerHeader, "not json", ClusterKeyHeader, "cluster-key-0123456789"); code != 401 {
		t.Fatalf("the cluster key with a caller that is not JSON: %d", code)
	}
	// The cluster key: the forwarding node's caller.
	if code := nodes("", CallerHeader, admin, ClusterKeyHeader, "cluster-key-0123456789"); code != 200 {
		t.Fatalf("a node forwarding the operator's request: %d", code)
	}
	tenantCaller := `{"key_id":"` + tenant.ID + `","admin":false}`
	if code := nodes("", CallerHeader, tenantCaller, ClusterKeyHeader, "cluster-key-0123456789"); code != 403 {
		t.Fatalf("a node forwarding the tenant's request: %d", code)
	}
}

// TestPlacedCreateBodyWhole: on a cluster's node, where a create's body is
// read for placement, a body past what placement reads reaches the create
// whole: the answer is the one a single sbxd gives, not a JSON error on a
// body cut short.
func TestPlacedCreateBodyWhole(t *testing.T) {
	ks := newKeyServer(t)
	body := `{"name":"big","labels":{"x":"` + strings.Repeat("a", MaxJSONBody) + `"}}`
	answer := func() string {
		resp := ks.do(t, "POST", "/v1/sandboxes", testKey, body)
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	single := answer()
	ks.s.cfg.Node, ks.s.cfg.ClusterKey = "n1", "cluster-key-0123456789"
	if got := answer(); got != single {
		t.Fatalf("a create of %d bytes on a cluster's node: %s, want what a single sbxd answers: %s", len(body), got, single)
	}
}
