package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// socketJSON makes one JSON request to the harness's sbxd over its Unix
// socket (the operator) and decodes the answer into out.
func socketJSON(t *testing.T, method, path string, body, out any) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
	}}}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctxT(t), method, "http://sbxd"+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var eb api.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		t.Fatalf("%s %s: %d %+v", method, path, resp.StatusCode, eb)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpendingLimit: a tenant key whose daily limit is lowered to zero
// has its running sandbox suspended (files and processes kept) and gets
// 429 quota_exceeded on exec, create and resume, the message saying the
// limit and when it resets; raised again with resume_suspended, the
// sandbox resumes with its file and its process. Usage by key shows what
// the key spent; the tenant sees only its own.
func TestSpendingLimit(t *testing.T) {
	ctx := ctxT(t)
	var created api.CreatedKey
	socketJSON(t, "POST", "/v1/keys", map[string]any{"name": "limit-" + randomHex(3), "daily_limit_usd": 1}, &created)
	defer socketJSON(t, "DELETE", "/v1/keys/"+created.ID, nil, nil)
	tenant, err := client.New(client.WithURL("http://"+h.listen), client.WithAPIKey(created.Secret))
	if err != nil {
		t.Fatal(err)
	}
	name := "limit-" + randomHex(3)
	sb, err := tenant.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: name, Image: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.c.Sandboxes.Delete(context.Background(), name) }()
	mustSh(t, sb, "echo kept > /workspace/kept")
	if _, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done"}, Detach: true}); err != nil {
		t.Fatal(err)
	}

	zero := 0.0
	if _, err := h.c.SetKeyLimit(ctx, created.ID, api.KeyLimitRequest{DailyLimitUSD: &zero}); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, name, api.StateSuspended, 2*time.Minute)
	if !strings.HasPrefix(got.StateReason, "spending_limit:") {
		t.Errorf("state reason of the suspended sandbox: %q", got.StateReason)
	}
	tomorrow := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format(time.RFC3339)
	_, err = sb.Exec(ctx, "true")
	if e := wantCode(t, err, api.CodeQuotaExceeded); !strings.Contains(e.Message, "limit of $0.0000") || !strings.Contains(e.Message, "resets at "+tomorrow) {
		t.Errorf("exec at the limit: %q", e.Message)
	}
	_, err = tenant.Sandboxes.Create(ctx, api.CreateSandboxRequest{Image: "default"})
	wantCode(t, err, api.CodeQuotaExceeded)
	err = sb.Resume(ctx)
	wantCode(t, err, api.CodeQuotaExceeded)

	hundred := 100.0
	if _, err := h.c.SetKeyLimit(ctx, created.ID, api.KeyLimitRequest{DailyLimitUSD: &hundred, ResumeSuspended: true}); err != nil {
		t.Fatal(err)
	}
	waitState(t, name, api.StateRunning, 2*time.Minute)
	out := mustSh(t, sb, "cat /workspace/kept; a=$(cat /tmp/counter); sleep 0.5; b=$(cat /tmp/counter); [ \"$b\" -gt \"$a\" ] && echo moving")
	if strings.Fields(out)[0] != "kept" || !strings.Contains(out, "moving") {
		t.Fatalf("after the resume: %q (want the file and a counter that moves)", out)
	}

	u, err := h.c.Usage(ctx, client.UsageQuery{GroupBy: api.UsageByKey, Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range u.Usage {
		if e.Key == created.ID {
			found = e.MemoryGiBSeconds > 0 && e.CPUSeconds > 0 && e.Cost > 0
		}
	}
	if !found {
		t.Errorf("usage by key has no spend of %s: %+v", created.ID, u.Usage)
	}
	mine, err := tenant.Usage(ctx, client.UsageQuery{GroupBy: api.UsageByKey, Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(mine.Usage) != 1 || mine.Usage[0].Key != created.ID {
		t.Errorf("the tenant's usage shows other keys: %+v", mine.Usage)
	}
}
