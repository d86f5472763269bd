package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func TestMarkersMismatch(t *testing.T) {
	m := markers{"m-a0-1": true, "m-a0-2": false}
	ok := map[string]string{"m-a0-1": markerContent("m-a0-1")}
	if p := m.mismatch(ok); p != "" {
		t.Errorf("a maybe-marker absent: %s", p)
	}
	ok["m-a0-2"] = markerContent("m-a0-2")
	if p := m.mismatch(ok); p != "" {
		t.Errorf("a maybe-marker present: %s", p)
	}
	for name, seen := range map[string]map[string]string{
		"missing m-a0-1":    {},
		"unexpected m-a0-3": {"m-a0-1": markerContent("m-a0-1"), "m-a0-3": markerContent("m-a0-3")},
		"m-a0-1 holds":      {"m-a0-1": "m-a0-1:0000"},
	} {
		if p := m.mismatch(seen); !strings.Contains(p, name) {
			t.Errorf("want %q in %q", name, p)
		}
	}
}

func TestDiffMismatch(t *testing.T) {
	v0 := markers{"m-a0-1": true, "m-a0-2": true}
	vk := markers{"m-a0-1": true, "m-a0-3": true, "m-a0-4": false}
	size := func(n string) int64 { return int64(len(markerContent(n))) }
	good := &api.Diff{
		Added:   []api.Change{{Path: "/soak/m-a0-3", Size: size("m-a0-3")}, {Path: "/soak/.m-a0-9.tmp"}, {Path: "/etc/x"}},
		Deleted: []api.Change{{Path: "/soak/m-a0-2"}},
	}
	if p := diffMismatch(v0, vk, good); p != "" {
		t.Errorf("a diff that matches: %s", p)
	}
	for want, d := range map[string]*api.Diff{
		"missing m-a0-3":         {Deleted: good.Deleted},
		"still has m-a0-2":       {Added: good.Added},
		"m-a0-3 has 1 bytes":     {Added: []api.Change{{Path: "/soak/m-a0-3", Size: 1}}, Deleted: good.Deleted},
		"unexpected m-a0-7":      {Added: append([]api.Change{{Path: "/soak/m-a0-7"}}, good.Added...), Deleted: good.Deleted},
		"lost m-a0-1":            {Added: good.Added, Deleted: append([]api.Change{{Path: "/soak/m-a0-1"}}, good.Deleted...)},
		"the diff was truncated": {Added: good.Added, Deleted: good.Deleted, Truncated: true},
	} {
		if p := diffMismatch(v0, vk, d); !strings.Contains(p, want) {
			t.Errorf("want %q in %q", want, p)
		}
	}
}

// TestCheckLiveCutByKill: the check at the end of a step that meets a
// dead sbxd is no violation when a kill came during the step, even after
// the step's operation answered and before the check began (the soak once
// reported such a read as a violation); with no kill it is one.
func TestCheckLiveCutByKill(t *testing.T) {
	// An sbxd that answers the lookup of the sandbox and then dies.
	sock := filepath.Join(t.TempDir(), "sbx.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.Sandbox{ID: "sbx_0123456789abcdef", Name: "b", State: api.StateRunning})
	})}
	go func() { _ = srv.Serve(ln) }()
	c, err := client.New(client.WithSocket(sock))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Get(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	_ = srv.Close()
	for _, killed := range []bool{true, false} {
		s := &soak{log: io.Discard, o: soakOptions{deadline: 5 * time.Second}}
		a := newSoakAgent(s, 1, 1)
		a.stepEpoch = s.epoch.Load()
		if killed {
			s.epoch.Add(1) // the kill: after the step's operation, before its check
		}
		b := &soakBox{name: "b", sb: sb, live: markers{"m-1": true}}
		a.checkLive(context.Background(), b, "after restoring v1")
		if got := len(s.violations); killed && got != 0 || !killed && got != 1 {
			t.Errorf("killed=%v: violations %q", killed, s.violations)
		}
		if b.pending != "exec" {
			t.Errorf("killed=%v: pending %q, want exec (read again later)", killed, b.pending)
		}
	}
}
