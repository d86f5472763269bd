// Package deptest guards the layering of DESIGN.md: the CLI reaches sbxd
// only through the public client, the engine knows nothing of HTTP, and
// the public packages (api, client) import nothing internal.
package deptest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sbxhq/sbx"

// deps returns the packages pkg imports, directly or not; with direct,
// only those its own files import.
func deps(t *testing.T, pkg string, direct bool) []string {
	t.Helper()
	if direct {
		out, err := exec.Command("go", "list", "-json=Imports", module+"/"+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		var p struct{ Imports []string }
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatal(err)
		}
		return p.Imports
	}
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	var res []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			p.ImportPath = "std:" + p.ImportPath
		}
		res = append(res, p.ImportPath)
	}
	return res
}

func TestLayering(t *testing.T) {
	for _, tc := range []struct {
		pkg    string
		direct bool
		allow  func(dep string) bool
		reason string
	}{
		{"cmd/sbx", false, func(d string) bool {
			return !strings.HasPrefix(d, module+"/internal/") || d == module+"/internal/cli"
		}, "the CLI talks to sbxd only through client/"},
		{"internal/cli", false, func(d string) bool {
			return !strings.HasPrefix(d, module+"/internal/") || d == module+"/internal/cli"
		}, "the CLI talks to sbxd only through client/"},
		{"client", false, func(d string) bool { return !strings.HasPrefix(d, module+"/internal/") },
			"the public SDK imports only api and the standard library"},
		{"mcp", false, func(d string) bool { return !strings.HasPrefix(d, module+"/internal/") },
			"the MCP tools act through the public client, like any other program"},
		{"api", false, func(d string) bool { return strings.HasPrefix(d, "std:") || d == module+"/api" },
			"the wire contract is standard library only"},
		// Direct imports (which carry no "std:" mark): the engine reaches
		// registries through disk, whose client speaks HTTP, but it never
		// handles HTTP itself.
		{"internal/engine", true, func(d string) bool { return d != "net/http" && !strings.HasPrefix(d, module+"/internal/server") },
			"the engine holds lifecycle rules, not HTTP"},
		{"cmd/sbx-agent", false, func(d string) bool {
			return !strings.HasPrefix(d, module+"/internal/") || d == module+"/internal/agent"
		}, "the in-sandbox agent stays small"},
	} {
		for _, d := range deps(t, tc.pkg, tc.direct) {
			if !tc.allow(d) {
				t.Errorf("%s imports %s: %s", tc.pkg, d, tc.reason)
			}
		}
	}
}
