package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateReportsEverything(t *testing.T) {
	c := Defaults()
	c.DataDir = "relative"
	c.Listen = "127.0.0.1:7070"
	c.PoolSize = -1
	c.LogLevel = "loud"
	c.PreviewDomain = "*.example.org"
	c.Store = "mysql://db"
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"absolute", "API key", "pool size", "log level", "preview domain", "postgres:// URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	d := Defaults()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestConfigSources(t *testing.T) {
	c := Defaults()
	p := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(p, []byte(`{"pool_size": 5, "data_dir": "/srv/sbx"}`), 0o644)
	if err := c.LoadFile(p); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SBX_POOL_SIZE": "7", "SBX_API_KEYS": "aaaaaaaaaaaaaaaa,bbbbbbbbbbbbbbbb", "SBX_PREVIEW_DOMAIN": "preview.example.org",
		"SBX_STORE": "postgres://sbx@db/sbx"}
	if err := c.LoadEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.PoolSize != 7 || c.DataDir != "/srv/sbx" || len(c.APIKeys) != 2 || c.PreviewDomain != "preview.example.org" ||
		c.Store != "postgres://sbx@db/sbx" {
		t.Fatalf("%+v", c)
	}
	os.WriteFile(p, []byte(`{"pool": 5}`), 0o644)
	if err := c.LoadFile(p); err == nil {
		t.Fatal("unknown key accepted")
	}
}

func TestPreviewDomainOff(t *testing.T) {
	c := Defaults()
	if c.PreviewDomain != "localhost" {
		t.Fatalf("default preview domain %q", c.PreviewDomain)
	}
	p := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(p, []byte(`{"preview_domain": ""}`), 0o644)
	if err := c.LoadFile(p); err != nil {
		t.Fatal(err)
	}
	if c.PreviewDomain != "" || c.Validate() != nil {
		t.Fatalf("an empty preview domain does not turn host routing off: %q %v", c.PreviewDomain, c.Validate())
	}
	for _, d := range []string{"localhost", "preview.example.org", "a-b.c"} {
		if !validDomain(d) {
			t.Errorf("%q refused", d)
		}
	}
	for _, d := range []string{"http://x", "x:80", "-a.b", "a..b", "*.b"} {
		if validDomain(d) {
			t.Errorf("%q accepted", d)
		}
	}
}
