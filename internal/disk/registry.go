package disk

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrPrivateRegistry is the dial error of an image pull that would connect
// to an address of the host or its private networks.
var ErrPrivateRegistry = fmt.Errorf("registry address is on the host or a private network (sbxd --allow-private-registries allows it)")

// privateAddr reports whether a is loopback, private (RFC 1918, ULA),
// link-local (metadata services), unspecified or multicast.
func privateAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast() ||
		netip.MustParsePrefix("100.64.0.0/10").Contains(a) // carrier-grade NAT
}

// registryTransport is the HTTP transport of image pulls. Unless
// allowPrivate, every connection (the registry's, a token realm's, and
// each redirect's: they all dial through it) is refused when the address
// it would reach is private (privateAddr): an API client must not make
// sbxd fetch from the host's loopback or its networks.
func registryTransport(allowPrivate bool) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("registry address %q: %w", address, err)
			}
			if privateAddr(ap.Addr()) {
				return fmt.Errorf("%s: %w", address, ErrPrivateRegistry)
			}
			return nil
		}
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	t.Proxy = nil
	return t
}
