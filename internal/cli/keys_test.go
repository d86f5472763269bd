package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sbxhq/sbx/api"
)

// TestKeyRmCarriesOn: `sbx key rm A B C` with B unknown still revokes C
// (an emergency revoke never leaves later keys live), prints the keys it
// revoked, names B's error and exits 1.
func TestKeyRmCarriesOn(t *testing.T) {
	var mu sync.Mutex
	var revoked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/v1/keys/")
		if r.Method != http.MethodDelete || !ok {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		if id == "key_gone" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"` + string(api.CodeKeyNotFound) + `","message":"no key key_gone"}}`))
			return
		}
		mu.Lock()
		revoked = append(revoked, id)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	var out, errb strings.Builder
	code := Run(context.Background(), []string{"--url", srv.URL, "key", "rm", "key_a", "key_gone", "key_c"}, strings.NewReader(""), &out, &errb)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(revoked, []string{"key_a", "key_c"}) {
		t.Fatalf("revoked %v, want key_a and key_c", revoked)
	}
	if code != 1 || out.String() != "key_a\nkey_c\n" || !strings.Contains(errb.String(), "key_gone") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
