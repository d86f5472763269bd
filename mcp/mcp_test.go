package mcp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// TestToolsListed: a client lists every tool, each with a description and
// an object input schema (no sbxd needed to list them).
func TestToolsListed(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(client.WithURL("http://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	if _, err := NewServer(c, "test").Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, tl := range res.Tools {
		got[tl.Name] = true
		if tl.Description == "" || tl.InputSchema == nil {
			t.Errorf("%s: no description or input schema", tl.Name)
		}
	}
	for _, w := range []string{"create_sandbox", "list_sandboxes", "exec", "read_file", "write_file", "list_files",
		"checkpoint", "list_checkpoints", "diff", "restore", "fork", "try_in_copy", "snapshot", "go_back_to",
		"set_network", "network_log"} {
		if !got[w] {
			t.Errorf("tool %s missing", w)
		}
	}
	// A call that cannot reach sbxd is a tool error, not a protocol one.
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "list_sandboxes", Arguments: map[string]any{}})
	if err != nil || !r.IsError {
		t.Fatalf("list_sandboxes without sbxd: %+v, %v; want a tool error", r, err)
	}
}

// TestToolErrorSaysWhatNext: API errors become text that starts with the
// code and ends with the next step.
func TestToolErrorSaysWhatNext(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.Error{Code: api.CodeSandboxNotFound, Message: `no sandbox "x"`}, "create_sandbox"},
		{&client.Error{Code: api.CodeConflict, Message: `sandbox "x" is suspended: cannot checkpoint`}, "resumes on the next exec"},
		{&client.Error{Code: api.CodeConflict, Message: `sandbox "x": restore is in progress`}, "retry in a few seconds"},
		{&client.Error{Code: api.CodeCheckpointNotFound, Message: "no checkpoint v9"}, "list_checkpoints"},
	} {
		got := toolError(tc.err).Error()
		if !strings.HasPrefix(got, string(tc.err.(*client.Error).Code)+": ") || !strings.Contains(got, "Next: ") || !strings.Contains(got, tc.want) {
			t.Errorf("%v → %q, want the code first and %q", tc.err, got, tc.want)
		}
	}
	// No answer at all: unavailable, and what to do.
	got := toolError(fmt.Errorf("dial unix /run/sbx/sbx.sock: connect: connection refused")).Error()
	if !strings.HasPrefix(got, "unavailable: sbxd did not answer: dial unix") || !strings.Contains(got, "Next: ") {
		t.Errorf("a transport error → %q", got)
	}
}

// TestCutKeepsUTF8: output is cut at MaxOutputBytes on a rune boundary,
// and the cut is counted.
func TestCutKeepsUTF8(t *testing.T) {
	s := strings.Repeat("a", MaxOutputBytes-1) + "é" + "tail"
	got, n := cut(s)
	if len(got) != MaxOutputBytes-1 || n != len(s)-len(got) {
		t.Fatalf("cut to %d bytes, %d left out", len(got), n)
	}
	if got, n := cut("short"); got != "short" || n != 0 {
		t.Fatalf("a short output changed: %q %d", got, n)
	}
}

// TestArgumentErrorSaysWhatNext: a call with a wrong argument name (the
// SDK rejects it before the tool runs) is a tool error with the code
// invalid_argument and a Next: that names the tool's arguments.
func TestArgumentErrorSaysWhatNext(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(client.WithURL("http://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	if _, err := NewServer(c, "test").Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, args := range []map[string]any{
		{"sandbox": "dev", "cmd": "ls"},                // wrong name
		{"sandbox": "dev", "command": "ls", "undo": 3}, // wrong type
	} {
		r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "exec", Arguments: args})
		if err != nil || !r.IsError || len(r.Content) != 1 {
			t.Fatalf("exec %v: %+v, %v; want a tool error", args, r, err)
		}
		got := r.Content[0].(*sdk.TextContent).Text
		if !strings.HasPrefix(got, "invalid_argument: ") || !strings.Contains(got, "Next: ") ||
			!strings.Contains(got, "command (required)") || !strings.Contains(got, "rollback_on_failure") {
			t.Errorf("exec %v → %q; want invalid_argument and a Next: naming exec's arguments", args, got)
		}
	}
}
