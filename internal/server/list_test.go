package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/store"
)

// TestListPages: GET /v1/sandboxes?limit= answers pages, oldest first,
// with the next page's token in X-Next-Page-Token until the last; every
// sandbox comes once. A bad limit or token is 400 naming the field; a
// tenant's pages hold its own sandboxes only; no limit lists them all.
func TestListPages(t *testing.T) {
	ks := newKeyServer(t)
	tenant := ks.newKey(t, `{"name":"agent-1"}`)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var want, mine []string
	for i := range 7 {
		owner := ""
		if i%3 == 0 {
			owner = tenant.ID
			mine = append(mine, fmt.Sprintf("s%d", i))
		}
		want = append(want, fmt.Sprintf("s%d", i))
		if err := ks.st.CreateSandbox(ctx, &store.Sandbox{ID: fmt.Sprintf("sbx_%016x", i), Name: fmt.Sprintf("s%d", i),
			State: api.StateStopped, Image: "default", CreateTime: t0.Add(time.Duration(i) * time.Second), Owner: owner}); err != nil {
			t.Fatal(err)
		}
	}
	pages := func(key string, limit int) (names []string, n int) {
		t.Helper()
		token := ""
		for {
			path := fmt.Sprintf("/v1/sandboxes?limit=%d", limit)
			if token != "" {
				path += "&page_token=" + token
			}
			resp := ks.do(t, "GET", path, key, "")
			var page []api.Sandbox
			if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&page) != nil || len(page) > limit {
				t.Fatalf("%s: %d %v", path, resp.StatusCode, page)
			}
			n++
			for _, sb := range page {
				names = append(names, sb.Name)
			}
			if token = resp.Header.Get(NextPageHeader); token == "" {
				return names, n
			}
		}
	}
	if got, n := pages(testKey, 3); strings.Join(got, " ") != strings.Join(want, " ") || n != 3 {
		t.Fatalf("pages of 3: %v in %d pages, want %v in 3", got, n, want)
	}
	if got, n := pages(testKey, 7); len(got) != 7 || n != 1 {
		t.Fatalf("one page of 7: %v in %d pages", got, n)
	}
	if got, _ := pages(tenant.Secret, 1); strings.Join(got, " ") != strings.Join(mine, " ") {
		t.Fatalf("the tenant's pages: %v, want %v", got, mine)
	}
	var all []api.Sandbox
	if resp := ks.do(t, "GET", "/v1/sandboxes", testKey, ""); json.NewDecoder(resp.Body).Decode(&all) != nil || len(all) != 7 || resp.Header.Get(NextPageHeader) != "" {
		t.Fatalf("no limit: %d sandboxes", len(all))
	}
	for q, field := range map[string]string{"limit=0": "limit", "limit=1001": "limit", "limit=x": "limit", "limit=2&page_token=bogus": "page_token"} {
		resp := ks.do(t, "GET", "/v1/sandboxes?"+q, testKey, "")
		var e api.ErrorResponse
		if resp.StatusCode != 400 || json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error.Code != api.CodeInvalidArgument || !strings.Contains(e.Error.Message, field) {
			t.Fatalf("%s: %d %+v, want 400 naming %s", q, resp.StatusCode, e, field)
		}
	}
}
