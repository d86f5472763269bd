//go:build linux

package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Port is a TCP port that a program listens on in the sandbox, as the
// ports op reports it.
type Port struct {
	Port int `json:"port"`
	// Address is the bind address: "0.0.0.0" or "::" for every address,
	// "127.0.0.1" or "::1" for loopback only.
	Address string `json:"address"`
	// PID and Command name the process holding the socket (its comm), when
	// one is found; 0 and "" otherwise.
	PID     int    `json:"pid,omitempty"`
	Command string `json:"command,omitempty"`
}

// DialResult answers a dial before the connection turns into a byte pipe.
type DialResult struct {
	// Address is the address the agent connected to, e.g. "127.0.0.1:3000".
	Address string `json:"address"`
}

// procNetFiles are the kernel's TCP socket tables, IPv4 then IPv6.
var procNetFiles = []string{"/proc/net/tcp", "/proc/net/tcp6"}

// tcpListen is the state of a listening socket in /proc/net/tcp (TCP_LISTEN).
const tcpListen = "0A"

// listener is one listening socket of /proc/net/tcp{,6}.
type listener struct {
	addr  netip.Addr
	port  int
	inode string
}

// parseProcNetTCP reads the listening sockets of a /proc/net/tcp or
// /proc/net/tcp6 table. Addresses there are hex words in host byte order.
func parseProcNetTCP(r io.Reader) ([]listener, error) {
	var out []listener
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // the header line
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != tcpListen {
			continue
		}
		host, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil || p == 0 {
			continue
		}
		raw, err := hex.DecodeString(host)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			continue
		}
		// Each 32-bit word was printed as a number in host byte order.
		b := make([]byte, len(raw))
		for i := 0; i < len(raw); i += 4 {
			binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
		}
		addr, _ := netip.AddrFromSlice(b)
		out = append(out, listener{addr: addr.Unmap(), port: int(p), inode: f[9]})
	}
	return out, sc.Err()
}

// listeners reads every listening TCP socket of the sandbox, IPv4 first.
func listeners() ([]listener, error) {
	var all []listener
	for _, p := range procNetFiles {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, err
		}
		ls, err := parseProcNetTCP(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		all = append(all, ls...)
	}
	return all, nil
}

// socketOwners finds, for the socket inodes wanted, a process holding each
// (by /proc/*/fd links "socket:[inode]"); it stops once all are found.
func socketOwners(wanted map[string]bool) map[string]int {
	owners := map[string]int{}
	if len(wanted) == 0 {
		return owners
	}
	pids, _ := os.ReadDir("/proc")
	for _, de := range pids {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", de.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or not ours to see
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			inode, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			inode = strings.TrimSuffix(inode, "]")
			if wanted[inode] {
				if _, seen := owners[inode]; !seen {
					owners[inode] = pid
				}
			}
		}
		if len(owners) == len(wanted) {
			break
		}
	}
	return owners
}

// listPorts lists the listening TCP ports, one entry a port (a port
// listened on over IPv4 and IPv6 is reported once, IPv4 first), by port.
func listPorts() ([]Port, error) {
	ls, err := listeners()
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	for _, l := range ls {
		if l.inode != "0" {
			wanted[l.inode] = true
		}
	}
	owners := socketOwners(wanted)
	byPort := map[int]*Port{}
	for _, l := range ls {
		pid := owners[l.inode]
		if p, ok := byPort[l.port]; ok {
			if p.PID == 0 && pid != 0 {
				p.PID, p.Command = pid, comm(pid)
			}
			continue
		}
		p := &Port{Port: l.port, Address: l.addr.String()}
		if pid != 0 {
			p.PID, p.Command = pid, comm(pid)
		}
		byPort[l.port] = p
	}
	out := make([]Port, 0, len(byPort))
	for _, p := range byPort {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out, nil
}

// comm is a process's command name, "" if it is gone.
func comm(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// dialTimeout bounds one connect attempt of a dial (local addresses answer
// at once unless the listener's backlog is full).
const dialTimeout = 5 * time.Second

// dialLocal connects to a TCP port of the sandbox: 127.0.0.1 first, then
// ::1, then the addresses that sockets listening on that port are bound
// to (a server bound to the sandbox's own IP only). When every attempt is
// refused the error is a Failure of kind refused naming the port.
func dialLocal(port int) (*net.TCPConn, error) {
	cands := []string{"127.0.0.1", "::1"}
	if ls, err := listeners(); err == nil {
		for _, l := range ls {
			if l.port != port || l.addr.IsUnspecified() || l.addr.IsLoopback() {
				continue
			}
			cands = append(cands, l.addr.String())
		}
	}
	var firstErr error
	seen := map[string]bool{}
	for _, host := range cands {
		if seen[host] {
			continue
		}
		seen[host] = true
		c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), dialTimeout)
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		if firstErr == nil && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EADDRNOTAVAIL) &&
			!errors.Is(err, syscall.ENETUNREACH) && !errors.Is(err, syscall.EAFNOSUPPORT) {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, &Error{Failure{Kind: FailUnreachable, Field: "port", Message: fmt.Sprintf("connect to port %d: %v", port, firstErr)}}
	}
	return nil, &Error{Failure{Kind: FailRefused, Field: "port", Message: fmt.Sprintf("nothing listens on port %d", port)}}
}

// dialPort connects to port and, once it has answered the dial, turns the
// connection into a byte pipe between the host and the TCP connection.
// Half-closes pass through: the host's shutdown(SHUT_WR) becomes the TCP
// connection's, and the TCP peer's EOF the host's. The pipe ends when both
// directions have, or when either side fails (then both are closed).
func dialPort(c *conn, port int) error {
	if port < 1 || port > 65535 {
		return c.fail(&Error{Failure{Kind: FailInvalid, Field: "port", Message: fmt.Sprintf("port %d is out of range [1, 65535]", port)}})
	}
	hc, ok := c.c.(halfCloser)
	if !ok {
		return c.fail(fmt.Errorf("dial: a %T cannot be half-closed", c.c))
	}
	tc, err := dialLocal(port)
	if err != nil {
		return c.fail(err)
	}
	defer tc.Close()
	if err := c.sendJSON(FrameResult, DialResult{Address: tc.RemoteAddr().String()}); err != nil {
		return err
	}
	return pipe(hc, tc)
}

// halfCloser is a connection whose write side can be shut down alone.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// pipe copies a to b and b to a until both directions end; an error in
// either direction closes both connections.
func pipe(a, b halfCloser) error {
	var once sync.Once
	var firstErr error
	abort := func(err error) {
		once.Do(func() {
			firstErr = err
			a.Close()
			b.Close()
		})
	}
	var wg sync.WaitGroup
	cp := func(dst, src halfCloser) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		if _, err := io.CopyBuffer(dst, src, buf); err != nil {
			abort(err)
			return
		}
		if err := dst.CloseWrite(); err != nil {
			abort(err)
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	if firstErr != nil && !isClosed(firstErr) {
		return firstErr
	}
	return nil
}
