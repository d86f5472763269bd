package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/store"
)

const (
	secretV1 = "ghp_FIRST-real-value-7d1c0a"
	secretV2 = "ghp_SECOND-real-value-93be44"
)

func getRule() []api.SecretRule {
	return []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}, PathPrefix: "/items"}}
}

// proxied is the secret name as the network got it, nil if absent.
func proxied(r *network.Rules, name string) *network.Secret {
	if r == nil || r.Secrets == nil {
		return nil
	}
	for i := range r.Secrets.List {
		if r.Secrets.List[i].Name == name {
			return &r.Secrets.List[i]
		}
	}
	return nil
}

// grepTree reports the files under dir that hold any of needles.
func grepTree(t *testing.T, dir string, needles ...string) []string {
	t.Helper()
	var hits []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				hits = append(hits, p)
			}
		}
		return nil
	})
	return hits
}

func TestFakeSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := newFakeDataDir(t)
	f := startFakeEngine(t, dir, Config{})
	sb, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "s",
		Secrets: []api.Secret{{Name: "API_TOKEN", Value: secretV1, Rules: getRule()}}}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, f.logs.String())
	}
	list, err := f.e.Secrets(ctx, "s")
	if err != nil || len(list.Secrets) != 1 {
		t.Fatalf("secrets: %+v %v", list, err)
	}
	ph := list.Secrets[0].Placeholder
	if !strings.HasPrefix(ph, "sbx-secret-") || list.Secrets[0].ValueBytes != len(secretV1) || list.Secrets[0].Rules[0].Host != "api.test" {
		t.Fatalf("secret info: %+v", list.Secrets[0])
	}

	t.Run("the sandbox sees the placeholder and its trust store", func(t *testing.T) {
		out, _ := f.run(t, "s", "env")
		if !strings.Contains(out, "API_TOKEN="+ph+"\n") || !strings.Contains(out, "SSL_CERT_FILE=/.sbx/ca/bundle.pem") ||
			!strings.Contains(out, "NODE_EXTRA_CA_CERTS=/.sbx/ca/ca.pem") {
			t.Fatalf("env: %s", out)
		}
		if strings.Contains(out, secretV1) {
			t.Fatal("the value is in the sandbox's env")
		}
		cur, _ := f.e.Get(ctx, "s")
		ca, err := os.ReadFile(filepath.Join(f.e.caDir(sb.ID), "ca.pem"))
		if err != nil || !bytes.Equal(ca, cur.Secrets.CACert) || !cur.Secrets.Mounted {
			t.Fatalf("the trust store's CA file: %v, mounted %v", err, cur.Secrets.Mounted)
		}
	})
	t.Run("the network gets the value, with the rules", func(t *testing.T) {
		s := proxied(f.net.rulesOf(sb.ID), "API_TOKEN")
		if s == nil || string(s.Value) != secretV1 || s.Placeholder != ph || s.Rules[0].PathPrefix != "/items" {
			t.Fatalf("network secret: %+v", s)
		}
		if f.net.rulesOf(sb.ID).Secrets.CA == nil {
			t.Fatal("no CA")
		}
	})
	t.Run("put keeps the placeholder; rules alone keep the value", func(t *testing.T) {
		info, err := f.e.PutSecret(ctx, "s", "API_TOKEN", api.PutSecretRequest{Rules: []api.SecretRule{{Host: "api.test", Methods: []string{"GET", "HEAD"}}}})
		if err != nil || info.Placeholder != ph || len(info.Rules[0].Methods) != 2 || info.Rules[0].PathPrefix != "/" {
			t.Fatalf("put rules: %+v %v", info, err)
		}
		if s := proxied(f.net.rulesOf(sb.ID), "API_TOKEN"); s == nil || string(s.Value) != secretV1 || len(s.Rules[0].Methods) != 2 {
			t.Fatalf("after put rules: %+v", s)
		}
		if _, err := f.e.PutSecret(ctx, "s", "NEW_ONE", api.PutSecretRequest{Rules: getRule()}); !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "value: ") {
			t.Fatalf("a new secret without a value: %v", err)
		}
		v := secretV2
		if _, err := f.e.PutSecret(ctx, "s", "API_TOKEN", api.PutSecretRequest{Value: &v, Rules: getRule()}); err != nil {
			t.Fatal(err)
		}
		if s := proxied(f.net.rulesOf(sb.ID), "API_TOKEN"); s == nil || string(s.Value) != secretV2 || s.Placeholder != ph {
			t.Fatalf("after put value: %+v", s)
		}
	})
	t.Run("set replaces all; delete removes one", func(t *testing.T) {
		l, err := f.e.SetSecrets(ctx, "s", []api.Secret{{Name: "API_TOKEN", Value: secretV2, Rules: getRule()}, {Name: "OTHER", Value: "x-other", Rules: getRule()}})
		if err != nil || len(l.Secrets) != 2 || l.Secrets[0].Name != "API_TOKEN" || l.Secrets[0].Placeholder != ph {
			t.Fatalf("set: %+v %v", l, err)
		}
		out, _ := f.run(t, "s", "env")
		if !strings.Contains(out, "OTHER="+l.Secrets[1].Placeholder) {
			t.Fatalf("a new exec does not see the new secret: %s", out)
		}
		if err := f.e.DeleteSecret(ctx, "s", "OTHER"); err != nil {
			t.Fatal(err)
		}
		if err := f.e.DeleteSecret(ctx, "s", "OTHER"); !errdefs.IsNotFound(err) {
			t.Fatalf("second delete: %v", err)
		}
		if proxied(f.net.rulesOf(sb.ID), "OTHER") != nil {
			t.Fatal("a deleted secret is still proxied")
		}
	})
	t.Run("bad input changes nothing", func(t *testing.T) {
		_, err := f.e.SetSecrets(ctx, "s", []api.Secret{{Name: "BAD-NAME", Value: "v", Rules: getRule()}})
		if !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "secrets[0].name: ") {
			t.Fatalf("%v", err)
		}
		_, err = f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "bad",
			Secrets: []api.Secret{{Name: "T", Value: "v", Rules: []api.SecretRule{{Host: "https://api.test/", Methods: []string{"GET"}}}}}}})
		if !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "secrets[0].rules[0].host: ") {
			t.Fatalf("create with a URL host: %v", err)
		}
		if _, err := f.e.Get(ctx, "bad"); !errdefs.IsNotFound(err) {
			t.Fatalf("a refused create left a sandbox: %v", err)
		}
		if l, _ := f.e.Secrets(ctx, "s"); len(l.Secrets) != 1 {
			t.Fatalf("a refused set changed the secrets: %+v", l)
		}
	})
	t.Run("the value is in no answer, log or file of the data dir", func(t *testing.T) {
		l, _ := f.e.Secrets(ctx, "s")
		rec, _ := f.e.Get(ctx, "s")
		for _, v := range []any{l, rec.Secrets} {
			b, _ := json.Marshal(v)
			if bytes.Contains(b, []byte(secretV1)) || bytes.Contains(b, []byte(secretV2)) {
				t.Fatalf("an answer holds a value: %s", b)
			}
		}
		if strings.Contains(f.logs.String(), secretV1) || strings.Contains(f.logs.String(), secretV2) {
			t.Fatal("the log holds a value")
		}
		if hits := grepTree(t, dir, secretV1, secretV2, "real-value"); len(hits) > 0 {
			t.Fatalf("the data dir holds a value in the clear: %v", hits)
		}
	})
	t.Run("a restarted sbxd opens them", func(t *testing.T) {
		f.e.Close()
		g := startFakeEngine(t, dir, Config{})
		if s := proxied(g.net.rulesOf(sb.ID), "API_TOKEN"); s == nil || string(s.Value) != secretV2 || s.Placeholder != ph {
			t.Fatalf("after restart: %+v", s)
		}
	})
}

// The sandbox's bundle.pem holds the image's own trust store and the CA,
// wherever the image keeps its store: a plain file (Debian), behind
// links (RHEL's /etc/ssl/certs -> ../pki/tls/certs, its bundle an
// absolute link into /etc/pki/ca-trust), and the system bundle is
// replaced at the file the links lead to. An image without one gets a
// warning in sbxd's log, not a silent bundle of the CA alone.
func TestFakeSecretsImageBundle(t *testing.T) {
	t.Parallel()
	const marker = "-----IMAGE TRUST STORE MARKER-----"
	for _, c := range []struct {
		name   string
		layout func(t *testing.T, root string)
		dest   string // the system bundle's mount; "" for none
	}{
		{"debian", func(t *testing.T, root string) {
			writeIn(t, root, "etc/ssl/certs/ca-certificates.crt", marker)
		}, "/etc/ssl/certs/ca-certificates.crt"},
		{"rhel", func(t *testing.T, root string) {
			writeIn(t, root, "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", marker)
			linkIn(t, root, "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "etc/pki/tls/certs/ca-bundle.crt")
			linkIn(t, root, "../pki/tls/certs", "etc/ssl/certs")
		}, "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"},
		{"none", func(t *testing.T, root string) {}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := startFakeEngine(t, newFakeDataDir(t), Config{})
			c.layout(t, f.e.images.RootFS(testImageID))
			sb, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: api.CreateSandboxRequest{Name: "s",
				Secrets: []api.Secret{{Name: "API_TOKEN", Value: secretV1, Rules: getRule()}}}})
			if err != nil {
				t.Fatalf("create: %v\n%s", err, f.logs.String())
			}
			cur, _ := f.e.Get(ctx, "s")
			bundle, err := os.ReadFile(filepath.Join(f.e.caDir(sb.ID), "bundle.pem"))
			if err != nil || !bytes.Contains(bundle, cur.Secrets.CACert) {
				t.Fatalf("bundle.pem: %v, holds the CA: %v", err, bytes.Contains(bundle, cur.Secrets.CACert))
			}
			if got := bytes.Contains(bundle, []byte(marker)); got != (c.dest != "") {
				t.Fatalf("bundle.pem holds the image's trust store: %v", got)
			}
			mounts, err := f.e.secretMounts(cur, false)
			if err != nil {
				t.Fatal(err)
			}
			var dests []string
			for _, m := range mounts {
				dests = append(dests, m.Destination)
			}
			want := []string{sandboxCADir}
			if c.dest != "" {
				want = append(want, c.dest)
			}
			if strings.Join(dests, " ") != strings.Join(want, " ") {
				t.Fatalf("mounts %q, want %q", dests, want)
			}
			if warned := strings.Contains(f.logs.String(), "no system trust store"); warned != (c.dest == "") {
				t.Fatalf("warned of no trust store: %v\n%s", warned, f.logs.String())
			}
		})
	}
}

func writeIn(t *testing.T, root, rel, data string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func linkIn(t *testing.T, root, target, rel string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// TestFakeSecretsClusterKeyring: a cluster's node (one with a cluster key)
// seals a sandbox's secrets with the cluster's key, so another node of the
// cluster opens them and the sandbox may move; without one, with its own
// key, and it stays.
func TestFakeSecretsClusterKeyring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key = "cluster-key-0123456789"
	f := startFakeEngine(t, newFakeDataDir(t), Config{Node: "n1", ClusterKey: key})
	g := startFakeEngine(t, newFakeDataDir(t), Config{Node: "n2", ClusterKey: key})
	single := startFakeEngine(t, newFakeDataDir(t), Config{})
	req := api.CreateSandboxRequest{Name: "s", Secrets: []api.Secret{{Name: "API_TOKEN", Value: secretV1, Rules: getRule()}}}
	sb, err := f.e.Create(ctx, CreateOptions{CreateSandboxRequest: req})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, f.logs.String())
	}
	if sb.Secrets.Keyring != store.KeyringCluster || !movable(sb) {
		t.Fatalf("a cluster's node sealed with keyring %q (movable %v)", sb.Secrets.Keyring, movable(sb))
	}
	opened := g.e.openSecrets(sb)
	if opened == nil || len(opened.List) != 1 || string(opened.List[0].Value) != secretV1 {
		t.Fatalf("another node of the cluster opened: %+v", opened)
	}
	if single.e.openSecrets(sb) != nil {
		t.Fatal("an sbxd without the cluster key opened them")
	}
	alone, err := single.e.Create(ctx, CreateOptions{CreateSandboxRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	if alone.Secrets.Keyring != "" || movable(alone) {
		t.Fatalf("a single sbxd sealed with keyring %q (movable %v)", alone.Secrets.Keyring, movable(alone))
	}
	// Secrets set later keep the set's key.
	if _, err := f.e.SetSecrets(ctx, "s", []api.Secret{{Name: "OTHER", Value: "x-other", Rules: getRule()}}); err != nil {
		t.Fatal(err)
	}
	cur, _ := f.e.Get(ctx, "s")
	if o := g.e.openSecrets(cur); cur.Secrets.Keyring != store.KeyringCluster || o == nil || len(o.List) != 1 || o.List[0].Name != "OTHER" {
		t.Fatalf("after adding a secret: keyring %q, opened %+v", cur.Secrets.Keyring, o)
	}
}
