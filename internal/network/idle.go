package network

import (
	"net"
	"sync/atomic"
	"time"
)

// idleLink bounds how long the two connections of one terminated TLS
// connection (the sandbox's and the real host's) may both stay idle: every
// Read or Write on either that starts or moves bytes pushes the deadlines
// of both connections, reads and writes, to idle from then. So a transfer
// in one direction only (a download, a stream of WebSocket frames one way)
// keeps the other direction's pending read alive, and when nothing moves
// on either connection for idle, every pending and later Read and Write on
// both fails with os.ErrDeadlineExceeded (the proxy then closes both).
//
// Deadlines are pushed at most every idle/16, so a connection is cut after
// between 15/16 of idle and idle without traffic.
type idleLink struct {
	idle  time.Duration
	last  atomic.Int64 // when deadlines were last pushed, Unix ns
	conns [2]*idleConn
}

// idleConn is one connection of an idleLink. Its SetDeadline,
// SetReadDeadline and SetWriteDeadline set a fixed limit (a handshake's,
// a refusal's) that the idle deadline never passes; the zero time removes
// it.
type idleConn struct {
	net.Conn
	link              *idleLink
	readCap, writeCap atomic.Int64 // fixed limits, Unix ns; 0: none
}

// newIdleLink wraps a and b, which stay idle together for at most idle.
func newIdleLink(idle time.Duration, a, b net.Conn) (*idleConn, *idleConn) {
	l := &idleLink{idle: idle}
	l.conns[0] = &idleConn{Conn: a, link: l}
	l.conns[1] = &idleConn{Conn: b, link: l}
	l.push(time.Now())
	return l.conns[0], l.conns[1]
}

// touch pushes the deadlines if they were last pushed more than idle/16
// ago.
func (l *idleLink) touch() {
	now := time.Now()
	if now.UnixNano()-l.last.Load() < int64(l.idle/16) {
		return
	}
	l.push(now)
}

func (l *idleLink) push(now time.Time) {
	l.last.Store(now.UnixNano())
	end := now.Add(l.idle)
	for _, c := range l.conns {
		c.apply(end)
	}
}

// apply sets c's deadlines to end, or to its fixed limits when earlier.
func (c *idleConn) apply(end time.Time) {
	_ = c.Conn.SetReadDeadline(earlier(end, c.readCap.Load()))
	_ = c.Conn.SetWriteDeadline(earlier(end, c.writeCap.Load()))
}

func earlier(t time.Time, capNs int64) time.Time {
	if capNs != 0 && capNs < t.UnixNano() {
		return time.Unix(0, capNs)
	}
	return t
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.link.touch()
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.link.touch()
	}
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.link.touch()
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.link.touch()
	}
	return n, err
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.readCap.Store(unixNs(t))
	c.writeCap.Store(unixNs(t))
	c.apply(time.Unix(0, c.link.last.Load()).Add(c.link.idle))
	return nil
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.readCap.Store(unixNs(t))
	c.apply(time.Unix(0, c.link.last.Load()).Add(c.link.idle))
	return nil
}

func (c *idleConn) SetWriteDeadline(t time.Time) error {
	c.writeCap.Store(unixNs(t))
	c.apply(time.Unix(0, c.link.last.Load()).Add(c.link.idle))
	return nil
}

func unixNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
