package network

import (
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
)

// maxAuditEntries bounds a sandbox's list of refused destinations; the
// least recent go first.
const maxAuditEntries = 256

// auditLog is what the DNS server and the proxy decided for one sandbox.
type auditLog struct {
	mu      sync.Mutex
	counts  api.NetworkCounts
	refused map[auditKey]*api.NetworkRefusal
	// uses are the requests that carried a secret's placeholder, oldest
	// first (secrets.go).
	uses []api.SecretUse
}

type auditKey struct {
	kind, dest string
	port       uint16
}

func newAuditLog() *auditLog { return &auditLog{refused: map[auditKey]*api.NetworkRefusal{}} }

// allowed counts an answered query (kind "dns") or a proxied connection.
func (l *auditLog) allowed(kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if kind == "dns" {
		l.counts.DNSAnswered++
	} else {
		l.counts.ConnectionsAllowed++
	}
}

// refuse records a refusal.
func (l *auditLog) refuse(kind, dest, addr string, port uint16, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if kind == "dns" {
		l.counts.DNSRefused++
	} else {
		l.counts.ConnectionsRefused++
	}
	k := auditKey{kind, dest, port}
	e := l.refused[k]
	if e == nil {
		if len(l.refused) >= maxAuditEntries {
			var oldest auditKey
			var t time.Time
			for k, e := range l.refused {
				if t.IsZero() || e.Time.Before(t) {
					oldest, t = k, e.Time
				}
			}
			delete(l.refused, oldest)
		}
		e = &api.NetworkRefusal{Kind: kind, Destination: dest, Port: port}
		l.refused[k] = e
	}
	e.Time = time.Now().UTC().Truncate(time.Millisecond)
	e.Reason = reason
	if addr != "" {
		e.Address = addr
	}
	e.Count++
}

// snapshot returns the log with the firewall's dropped packets merged in
// (reason says why each was refused), newest first.
func (l *auditLog) snapshot(dropped []Dropped, packets uint64, reason func(netip.Addr) string) api.NetworkLog {
	l.mu.Lock()
	out := api.NetworkLog{Counts: l.counts, Refused: make([]api.NetworkRefusal, 0, len(l.refused)+len(dropped))}
	for _, e := range l.refused {
		out.Refused = append(out.Refused, *e)
	}
	for i := len(l.uses) - 1; i >= 0; i-- {
		out.Secrets = append(out.Secrets, l.uses[i])
	}
	l.mu.Unlock()
	out.Counts.PacketsRefused = packets
	for _, d := range dropped {
		out.Refused = append(out.Refused, api.NetworkRefusal{
			Time: d.Last.UTC(), Kind: "packet", Destination: d.Dst.String(), Address: d.Dst.String(), Port: d.Port,
			Reason: reason(d.Dst), Count: 1,
		})
	}
	sort.SliceStable(out.Refused, func(i, j int) bool { return out.Refused[i].Time.After(out.Refused[j].Time) })
	if len(out.Refused) > maxAuditEntries {
		out.Refused = out.Refused[:maxAuditEntries]
	}
	return out
}
