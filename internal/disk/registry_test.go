package disk

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestPrivateAddr(t *testing.T) {
	for a, want := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "192.168.0.1": true, "172.16.5.4": true,
		"169.254.169.254": true, "fe80::1": true, "fd00::1": true, "0.0.0.0": true, "100.64.0.1": true,
		"::ffff:127.0.0.1": true, "8.8.8.8": false, "2001:4860:4860::8888": false, "151.101.1.1": false,
	} {
		if got := privateAddr(netip.MustParseAddr(a)); got != want {
			t.Errorf("privateAddr(%s) = %v, want %v", a, got, want)
		}
	}
}

// TestRegistryTransportRefusesLoopback: the pull transport does not
// connect to the host's loopback, nor follow a redirect there, unless
// allowed.
func TestRegistryTransportRefusesLoopback(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	c := &http.Client{Transport: registryTransport(false)}
	if _, err := c.Get(srv.URL); !errors.Is(err, ErrPrivateRegistry) {
		t.Fatalf("GET loopback: %v, want ErrPrivateRegistry", err)
	}
	if hits != 0 {
		t.Fatal("the loopback server was reached")
	}
	c = &http.Client{Transport: registryTransport(true)}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("allowed: %v", err)
	}
	resp.Body.Close()
	if hits != 1 {
		t.Fatalf("hits = %d, want 1", hits)
	}
}
