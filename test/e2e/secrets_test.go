package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/network/nettest"
)

// TestSecretsEndToEnd (issue 14, item 4): in a real sandbox, an agent's
// curl with "Authorization: Bearer $API_TOKEN" reaches the test host with
// the real token; a POST with the same header is refused (403) and logged.
// The value is then looked for, and must not be found, in the data dir
// (the database, layers, checkpoints and the snapshot's chunks), sbxd's
// log, every API answer, and the sandbox's env and /proc. A fork and a
// restore of v0 keep the secret.
//
// The test host is in a network namespace the test makes, with a
// certificate from a CA the test makes; sbxd (a second one) trusts that CA
// through SSL_CERT_FILE, as the host's trust store.
func TestSecretsEndToEnd(t *testing.T) {
	const value = "ghp_e2e-REAL-token-4c1f9a0b7d"
	ctx := ctxT(t)
	ca := nettest.NewCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &nettest.Recorder{}
	subnet := netip.MustParsePrefix(fmt.Sprintf("10.239.%d.0/24", (os.Getpid()+7)%250))
	out := nettest.StartOutsideWith(t, fmt.Sprintf("es%d", os.Getpid()%100000), subnet, rec, ca.Issue(t, "api.test"))
	upstream.Set("api.test", out.Addr)
	d := secondEnv(t, []string{"SSL_CERT_FILE=" + caFile}, "--pool", "0")

	sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "sec", Secrets: []api.Secret{{
		Name: "API_TOKEN", Value: value,
		Rules: []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}, PathPrefix: "/items"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var answers [][]byte // every API answer, searched for the value at the end
	keep := func(v any) {
		b, _ := json.Marshal(v)
		answers = append(answers, b)
	}
	keep(sb.Sandbox)
	list, err := sb.Secrets().List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("secrets: %+v %v", list, err)
	}
	keep(list)
	ph := list[0].Placeholder
	const curl = `curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" `

	t.Run("the sandbox sees the placeholder", func(t *testing.T) {
		if got := strings.TrimSpace(mustSh(t, sb, "echo $API_TOKEN")); got != ph {
			t.Fatalf("$API_TOKEN is %q, want %q", got, ph)
		}
	})
	t.Run("a GET that a rule allows gets the real token", func(t *testing.T) {
		if got := mustSh(t, sb, curl+"https://api.test/items"); got != "hello from api.test" {
			t.Fatalf("curl: %q", got)
		}
		seen := rec.Seen()
		if len(seen) != 1 || seen[0].Authorization != "Bearer "+value || seen[0].Path != "/items" {
			t.Fatalf("the test host saw %+v", seen)
		}
		// Python's requests and the system trust store work too.
		if got := mustSh(t, sb, `python3 -c 'import os,urllib.request as u; r=u.Request("https://api.test/items/2", headers={"Authorization": "Bearer "+os.environ["API_TOKEN"]}); print(u.urlopen(r).read().decode())'`); strings.TrimSpace(got) != "hello from api.test" {
			t.Fatalf("python: %q", got)
		}
	})
	t.Run("a POST with the same header is refused and logged", func(t *testing.T) {
		before := len(rec.Seen())
		res := sh(t, sb, curl+"-X POST -o /dev/null -w '%{http_code}' https://api.test/items")
		if res.Stdout != "403" {
			t.Fatalf("POST: %+v", res)
		}
		if n := len(rec.Seen()); n != before {
			t.Fatalf("the refused POST reached the test host: %+v", rec.Seen()[before:])
		}
		l, err := sb.Network().Log(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keep(l)
		var allowed, refused bool
		for _, u := range l.Secrets {
			if u.Secret == "API_TOKEN" && u.Host == "api.test" && u.Method == "POST" && !u.Allowed && u.Reason != "" {
				refused = true
			}
			if u.Secret == "API_TOKEN" && u.Method == "GET" && u.Path == "/items" && u.Allowed {
				allowed = true
			}
		}
		if !allowed || !refused {
			t.Fatalf("the log's secret uses: %+v", l.Secrets)
		}
		if !strings.Contains(string(tailFile(d.logPath, 1<<20)), "secrets: request refused") {
			t.Fatal("sbxd's log does not record the refusal")
		}
	})
	t.Run("not in the sandbox's env or /proc", func(t *testing.T) {
		env := mustSh(t, sb, "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done 2>/dev/null; true")
		if strings.Contains(env, value) {
			t.Fatal("the value is in the sandbox's env or /proc")
		}
		if !strings.Contains(env, ph) {
			t.Fatalf("the placeholder is not in the sandbox's env (the search saw nothing?): %.2000s", env)
		}
	})
	t.Run("a restore of v0 and a fork keep the secret", func(t *testing.T) {
		mustSh(t, sb, "mkdir -p /workspace; echo \"$API_TOKEN\" > /workspace/token-was")
		if err := sb.Restore(ctx, "v0", nil); err != nil {
			t.Fatal(err)
		}
		if got := mustSh(t, sb, curl+"https://api.test/items"); got != "hello from api.test" {
			t.Fatalf("after restoring v0: %q", got)
		}
		mustSh(t, sb, "echo \"$API_TOKEN\" > /workspace/token-was; sleep 1000 >/dev/null 2>&1 &")
		fr, err := sb.Fork(ctx, api.ForkRequest{Name: "sec-copy"})
		if err != nil || len(fr.Copies) != 1 || fr.Copies[0] == nil {
			t.Fatalf("fork: %+v %v", fr, err)
		}
		cp := fr.Copies[0]
		t.Cleanup(func() { _ = cp.Delete(ctx) })
		keep(cp.Sandbox)
		cl, err := cp.Secrets().List(ctx)
		if err != nil || len(cl) != 1 || cl[0].Placeholder != ph {
			t.Fatalf("the copy's secrets: %+v %v", cl, err)
		}
		keep(cl)
		if got := mustSh(t, cp, curl+"https://api.test/items/copy"); got != "hello from api.test" {
			t.Fatalf("curl in the copy: %q", got)
		}
		seen := rec.Seen()
		if last := seen[len(seen)-1]; last.Path != "/items/copy" || last.Authorization != "Bearer "+value {
			t.Fatalf("the copy's request: %+v", last)
		}
	})
	t.Run("bad input is 400 naming the field and changes nothing", func(t *testing.T) {
		rules := []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}}}
		many := make([]api.Secret, 1000)
		for i := range many {
			many[i] = api.Secret{Name: fmt.Sprintf("S%d", i), Value: "v", Rules: rules}
		}
		for _, c := range []struct {
			in    []api.Secret
			field string
		}{
			{[]api.Secret{{Name: "API-TOKEN", Value: "v", Rules: rules}}, "secrets[0].name"},
			{[]api.Secret{{Name: "T", Value: "v", Rules: []api.SecretRule{{Host: "https://api.test/items", Methods: []string{"GET"}}}}}, "secrets[0].rules[0].host"},
			{[]api.Secret{{Name: "T", Value: "v", Rules: []api.SecretRule{{Host: "api.test", Methods: []string{"FETCH"}}}}}, "secrets[0].rules[0].methods[0]"},
			{[]api.Secret{{Name: "T", Value: strings.Repeat("x", 64<<10+1), Rules: rules}}, "secrets[0].value"},
			{many, "secrets"},
		} {
			_, err := sb.Secrets().Set(ctx, c.in)
			if ae := wantCode(t, err, api.CodeInvalidArgument); !strings.HasPrefix(ae.Message, c.field+":") {
				t.Errorf("want the message to name %s: %s", c.field, ae.Message)
			}
		}
		if l, err := sb.Secrets().List(ctx); err != nil || len(l) != 1 || l[0].Placeholder != ph {
			t.Fatalf("after refused changes: %+v %v", l, err)
		}
	})
	t.Run("a snapshot, the data dir, the log and every answer hold no value", func(t *testing.T) {
		sn, err := sb.Snapshot(ctx, api.SnapshotRequest{Name: "with-secret"})
		if err != nil {
			t.Fatal(err)
		}
		keep(sn)
		sbs, err := d.c.Sandboxes.List(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range sbs {
			keep(x.Sandbox)
		}
		cps, _ := sb.ListCheckpoints(ctx)
		keep(cps)
		for i, a := range answers {
			if bytes.Contains(a, []byte(value)) {
				t.Errorf("API answer %d holds the value: %.500s", i, a)
			}
		}
		if bytes.Contains(tailFile(d.logPath, 64<<20), []byte(value)) {
			t.Error("sbxd's log holds the value")
		}
		hits, phHits := findInTree(t, d.dataDir, value), findInTree(t, d.dataDir, ph)
		if len(hits) > 0 {
			t.Errorf("the data dir holds the value in the clear: %v", hits)
		}
		// The search sees what the sandbox held: its placeholder, in its
		// disk (layers, the snapshot's chunks) and memory, not only in the
		// database's records.
		var outsideDB int
		for _, p := range phHits {
			if !strings.Contains(filepath.Base(p), ".db") {
				outsideDB++
			}
		}
		if outsideDB == 0 {
			t.Errorf("the placeholder is nowhere in the data dir but the database (%v): the search would miss the value too", phHits)
		}
		t.Logf("the placeholder is in %d files of the data dir, e.g. %v", len(phHits), phHits[:min(3, len(phHits))])
		t.Run("a sandbox started from the snapshot has the secret", func(t *testing.T) {
			ns, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "sec-from-snap", Snapshot: sn.ID})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ns.Delete(ctx) })
			if l, err := ns.Secrets().List(ctx); err != nil || len(l) != 1 || l[0].Placeholder != ph {
				t.Fatalf("its secrets: %+v %v", l, err)
			}
			if got := mustSh(t, ns, curl+"https://api.test/items/snap"); got != "hello from api.test" {
				t.Fatalf("curl: %q", got)
			}
			seen := rec.Seen()
			if last := seen[len(seen)-1]; last.Path != "/items/snap" || last.Authorization != "Bearer "+value {
				t.Fatalf("its request: %+v", last)
			}
		})
	})
}

// findInTree returns the regular files under dir that hold needle,
// reading each in windows (a needle across two windows is found).
func findInTree(t *testing.T, dir, needle string) []string {
	t.Helper()
	var hits []string
	n := []byte(needle)
	buf := make([]byte, 4<<20)
	_ = filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		carry := 0
		for {
			k, err := io.ReadFull(f, buf[carry:])
			w := buf[:carry+k]
			if bytes.Contains(w, n) {
				hits = append(hits, strings.TrimPrefix(p, dir))
				return nil
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Logf("read %s: %v", p, err)
				}
				return nil
			}
			carry = min(len(n)-1, len(w))
			copy(buf, w[len(w)-carry:])
		}
	})
	return hits
}

// tailFile is the last max bytes of a file (nil if unreadable).
func tailFile(path string, max int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return b
}
