package network

import (
	"fmt"

	"net/netip"

	"github.com/ti-mo/conntrack"
)

// cutForbidden deletes the conntrack entries of a's forwarded flows (those
// with its mark, see ctMark) that its rules no longer allow. The firewall accepts established flows before
// it looks at the rules; without their entry, a flow's next packet is
// judged like a new one and dropped. Flows redirected to the DNS server or
// the proxy are left alone (the proxy rechecks its own).
func (m *Manager) cutForbidden(a *attachment) error {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	defer c.Close()
	flows, err := c.DumpFilter(conntrack.NewFilter().Mark(ctMark(a.slot)), nil)
	if err != nil {
		return fmt.Errorf("conntrack dump: %w", err)
	}
	r := a.getRules()
	connect := func(addr netip.Addr) bool { return m.isConnectAddr(a, addr) }
	for _, f := range flows {
		if f.TupleOrig.IP.SourceAddress.Unmap() != a.addr {
			continue
		}
		if f.TupleReply.IP.SourceAddress.Unmap() == a.gw {
			continue // redirected to sbxd (DNS, proxy)
		}
		dst := f.TupleOrig.IP.DestinationAddress.Unmap()
		if r.allowAddr(dst, m.cfg.CIDR, connect, a.isLearned) {
			continue
		}
		if err := c.Delete(f); err != nil {
			m.log.Debug("conntrack delete", "err", err)
			continue
		}
		a.audit.refuse("connection", dst.String(), dst.String(), f.TupleOrig.Proto.DestinationPort, "cut: the sandbox's rules changed")
	}
	return nil
}
