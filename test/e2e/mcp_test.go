package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPOfficialClient drives sbx's MCP tools with a client nobody here
// wrote: the official MCP TypeScript SDK's (test/mcp/client.mjs, from
// npm), over stdio (sbx mcp) and over streamable HTTP (sbxd's /v1/mcp
// with the API key). The script lists the tools, meets a missing sandbox
// and a missing checkpoint as tool errors that say what to do next, runs
// a guarded exec that fails and rolls back, checkpoints (with progress),
// diffs, restores, and turns the network off.
func TestMCPOfficialClient(t *testing.T) {
	npm := need(t, "npm")
	node := need(t, "node")
	dir, _ := filepath.Abs("../mcp")
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			name := "mcp-" + mode + "-" + randomHex(3)
			t.Cleanup(func() {
				_ = h.c.Sandboxes.Delete(context.Background(), name)
				_ = h.c.Sandboxes.Delete(context.Background(), name+"-copy") // the fork's
			})
			cmd := exec.Command(node, "client.mjs", name)
			cmd.Dir = dir
			cmd.Env = append(sdkEnv(), "MODE="+mode, "SBX_BIN="+filepath.Join(h.binDir, "sbx"))
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "mcp-client ("+mode+"): OK") {
				t.Fatalf("the official MCP client against sbx (%s): %v\n%s", mode, err, tailStr(string(out), 6000))
			}
			// What the tools did is what sbxd has: the restore put the file
			// back and the network is off.
			sb, err := h.c.Sandboxes.Get(ctxT(t), name)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(mustSh(t, sb, "cat /workspace/proj/keep.txt")); got != "precious" {
				t.Fatalf("keep.txt after the client's restore: %q", got)
			}
			if sb.Sandbox.Network.Internet {
				t.Fatalf("the client turned the network off, sbxd says %+v", sb.Sandbox.Network)
			}
			cps, err := sb.ListCheckpoints(ctxT(t))
			if err != nil || len(cps) < 2 {
				t.Fatalf("checkpoints after the client's: %+v %v", cps, err)
			}
		})
	}
}

// TestMCPNeedsKey: /v1/mcp over TCP is the API: without the key it
// answers 401 and does nothing.
func TestMCPNeedsKey(t *testing.T) {
	out, err := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
		"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream",
		"--data", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "http://"+h.listen+"/v1/mcp").Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "401" {
		t.Fatalf("/v1/mcp without a key answered %s, want 401", out)
	}
}
