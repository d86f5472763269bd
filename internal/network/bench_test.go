package network

import (
	"context"
	"testing"
)

// TestMeasureSecretProxy: the measure behind `sbx bench secrets` answers n
// times of each kind, each a request that reached the host with the
// secret's value in place (the host answers 401 otherwise, and the
// measure fails).
func TestMeasureSecretProxy(t *testing.T) {
	got, err := MeasureSecretProxy(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	for name, xs := range map[string][]float64{"direct new": got.DirectNewConn, "proxy new": got.ProxyNewConn,
		"direct keep-alive": got.DirectKeepAlive, "proxy keep-alive": got.ProxyKeepAlive} {
		if len(xs) != 3 {
			t.Errorf("%s: %d times, want 3", name, len(xs))
		}
		for _, x := range xs {
			if x <= 0 {
				t.Errorf("%s: a time of %v ms", name, x)
			}
		}
	}
	if _, err := MeasureSecretProxy(context.Background(), 0); err == nil {
		t.Error("n = 0 accepted")
	}
}
