package secret

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

func rule(host string, methods ...string) api.SecretRule {
	return api.SecretRule{Host: host, Methods: methods}
}

// Every bad input of issue 14 gets ErrInvalidArgument naming its field.
func TestValidateNamesTheField(t *testing.T) {
	ok := api.Secret{Name: "API_TOKEN", Value: "tok", Rules: []api.SecretRule{rule("api.test", "GET")}}
	with := func(f func(*api.Secret)) []api.Secret {
		s := ok
		s.Rules = append([]api.SecretRule{}, ok.Rules...)
		f(&s)
		return []api.Secret{s}
	}
	many := make([]api.Secret, 1000)
	for i := range many {
		many[i] = ok
	}
	for _, c := range []struct {
		in    []api.Secret
		field string
	}{
		{with(func(s *api.Secret) { s.Name = "API-TOKEN" }), "secrets[0].name"},
		{with(func(s *api.Secret) { s.Name = "1TOKEN" }), "secrets[0].name"},
		{with(func(s *api.Secret) { s.Name = "" }), "secrets[0].name"},
		{with(func(s *api.Secret) { s.Name = "A=B" }), "secrets[0].name"},
		{with(func(s *api.Secret) { s.Rules[0].Host = "https://api.test" }), "secrets[0].rules[0].host"},
		{with(func(s *api.Secret) { s.Rules[0].Host = "api.test/items" }), "secrets[0].rules[0].host"},
		{with(func(s *api.Secret) { s.Rules[0].Host = "api.test:443" }), "secrets[0].rules[0].host"},
		{with(func(s *api.Secret) { s.Rules[0].Host = "10.0.0.1" }), "secrets[0].rules[0].host"},
		{with(func(s *api.Secret) { s.Rules[0].Host = "user@api.test" }), "secrets[0].rules[0].host"},
		{with(func(s *api.Secret) { s.Rules[0].Host = "localhost" }), "secrets[0].rules[0].host"},
		{with(func(s *api.Secret) { s.Rules[0].Host = "a.*.test" }), "secrets[0].rules[0].host"},
		{with(func(s *api.Secret) { s.Rules[0].Methods = []string{"GET", "FETCH"} }), "secrets[0].rules[0].methods[1]"},
		{with(func(s *api.Secret) { s.Rules[0].Methods = []string{"get"} }), "secrets[0].rules[0].methods[0]"},
		{with(func(s *api.Secret) { s.Rules[0].Methods = nil }), "secrets[0].rules[0].methods"},
		{with(func(s *api.Secret) { s.Rules[0].PathPrefix = "items" }), "secrets[0].rules[0].path_prefix"},
		{with(func(s *api.Secret) { s.Rules[0].PathPrefix = "/items/../admin" }), "secrets[0].rules[0].path_prefix"},
		{with(func(s *api.Secret) { s.Rules[0].PathPrefix = "/items?x=1" }), "secrets[0].rules[0].path_prefix"},
		{with(func(s *api.Secret) { s.Rules = nil }), "secrets[0].rules"},
		{with(func(s *api.Secret) { s.Value = strings.Repeat("x", MaxValueBytes+1) }), "secrets[0].value"},
		{with(func(s *api.Secret) { s.Value = "" }), "secrets[0].value"},
		{with(func(s *api.Secret) { s.Value = "a\r\nX-Evil: 1" }), "secrets[0].value"},
		{append(with(func(*api.Secret) {}), ok), "secrets[1].name"},
		{many, "secrets"},
	} {
		_, err := Validate("secrets", c.in)
		if !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), c.field+": ") {
			t.Errorf("%+v: got %v, want invalid_argument naming %s", c.in[0].Rules, err, c.field)
		}
		if err != nil && len(c.in[0].Value) > 8 && strings.Contains(err.Error(), c.in[0].Value) {
			t.Errorf("the error quotes the value: %v", err)
		}
	}
	rules, err := Validate("secrets", []api.Secret{{Name: "T", Value: strings.Repeat("v", MaxValueBytes),
		Rules: []api.SecretRule{{Host: "API.Test.", Methods: []string{"GET", "GET", "HEAD"}}, rule("*.example.org", "POST")}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rules[0][0]; got.Host != "api.test" || got.PathPrefix != "/" || len(got.Methods) != 2 {
		t.Errorf("parsed %+v: want host api.test, prefix /, methods GET HEAD", got)
	}
}

func TestRuleMatch(t *testing.T) {
	rs, err := ParseRules("rules", []api.SecretRule{{Host: "api.test", Methods: []string{"GET"}, PathPrefix: "/items"}, rule("*.example.org", "POST")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, method, path string
		want               bool
	}{
		{"api.test", "GET", "/items", true},
		{"API.test.", "GET", "/items/1", true},
		{"api.test", "GET", "/items/", true},
		{"api.test", "POST", "/items", false},
		{"api.test", "GET", "/itemsX", false},
		{"api.test", "GET", "/", false},
		{"api.test", "GET", "/items/../admin", false},
		{"api.test", "GET", "/items//x", false},
		{"api.test", "GET", "/items/./x", false},
		{"evil.test", "GET", "/items", false},
		{"api.test.evil.test", "GET", "/items", false},
		{"a.example.org", "POST", "/x", true},
		{"example.org", "POST", "/x", false},
		{"a.example.org", "GET", "/x", false},
	} {
		if got := MatchAny(rs, c.host, c.method, c.path); got != c.want {
			t.Errorf("%s %s %s: match %v, want %v", c.method, c.host, c.path, got, c.want)
		}
	}
}

func TestPlaceholder(t *testing.T) {
	a, b := NewPlaceholder(), NewPlaceholder()
	if a == b || !strings.HasPrefix(a, PlaceholderPrefix) || len(a) != len(PlaceholderPrefix)+32 {
		t.Fatalf("placeholders %q %q", a, b)
	}
}

func TestKeeperSealOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFile)
	k, err := OpenKeeper(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != keyBytes {
		t.Fatalf("key file: %v %v", st, err)
	}
	value := []byte("ghp_the-real-token-1234567890")
	sealed := k.Seal(value, "secret:API_TOKEN")
	if bytes.Contains(sealed, value) || bytes.Contains(sealed, []byte("the-real-token")) {
		t.Fatal("the sealed form holds the value")
	}
	if bytes.Equal(k.Seal(value, "x")[1:13], k.Seal(value, "x")[1:13]) {
		t.Fatal("two seals share a nonce")
	}
	// A second keeper on the same file (sbxd restarted) opens it.
	k2, err := OpenKeeper(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k2.Open(sealed, "secret:API_TOKEN")
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := k2.Open(sealed, "secret:OTHER"); !errors.Is(err, ErrUnsealable) {
		t.Fatalf("open for another purpose: %v, want ErrUnsealable", err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := k2.Open(sealed, "secret:API_TOKEN"); !errors.Is(err, ErrUnsealable) {
		t.Fatalf("open damaged: %v, want ErrUnsealable", err)
	}
	// Another data dir's key does not open it.
	k3, err := OpenKeeper(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k3.Open(k.Seal(value, "p"), "p"); !errors.Is(err, ErrUnsealable) {
		t.Fatalf("another key: %v", err)
	}
}

// The key file is never read through a symlink, nor used when others
// can read it.
func TestKeeperRefusesHostileKeyFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, bytes.Repeat([]byte{1}, keyBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKeeper(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlink key: %v", err)
	}
	open := filepath.Join(dir, "open.key")
	if err := os.WriteFile(open, bytes.Repeat([]byte{1}, keyBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKeeper(open); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("0644 key: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte{1, 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKeeper(short); err == nil {
		t.Error("a 2-byte key was accepted")
	}
}

func TestAuthorityLeaf(t *testing.T) {
	k, err := OpenKeeper(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, sealedKey, err := k.NewCA("sbx_test")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(certPEM, []byte("PRIVATE")) {
		t.Fatal("the CA certificate PEM holds a private key")
	}
	ca, err := k.OpenCA(certPEM, sealedKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err != nil {
		t.Fatalf("the leaf does not verify against the CA: %v", err)
	}
	if again, _ := ca.Leaf("api.test"); again != leaf {
		t.Error("the leaf was made again")
	}
	// The sandbox's CA is not another sandbox's.
	other, key2, _ := k.NewCA("sbx_other")
	ca2, err := k.OpenCA(other, key2)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := ca2.Leaf("api.test")
	if _, err := l2.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err == nil {
		t.Error("another sandbox's leaf verifies against this sandbox's CA")
	}
}

// TestDeriveKeeper: keepers derived from the same cluster key open each
// other's values; another cluster key, or a node's own key, does not; a
// short secret is refused.
func TestDeriveKeeper(t *testing.T) {
	a, err := DeriveKeeper([]byte("cluster-key-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeriveKeeper([]byte("cluster-key-0123456789"))
	other, _ := DeriveKeeper([]byte("cluster-key-9876543210"))
	own, err := OpenKeeper(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	sealed := a.Seal([]byte("v"), "secret:T")
	if got, err := b.Open(sealed, "secret:T"); err != nil || string(got) != "v" {
		t.Fatalf("another node of the cluster: %q %v", got, err)
	}
	for _, k := range []*Keeper{other, own} {
		if _, err := k.Open(sealed, "secret:T"); !errors.Is(err, ErrUnsealable) {
			t.Fatalf("another key opened it: %v", err)
		}
	}
	if _, err := DeriveKeeper([]byte("short")); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
}
