package engine

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/agent"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// Ports reach servers listening inside a sandbox through its agent, not
// through the sandbox's network: that works whatever the sandbox's network
// rules (offline too) and reaches servers bound to 127.0.0.1. A port
// request never boots a stopped sandbox; forwarding stops with it.

// ListPorts lists the TCP ports that programs listen on in a running
// sandbox, one entry a port, by port. A sandbox that is not running is
// ErrConflict.
func (e *Engine) ListPorts(ctx context.Context, idOrName string) ([]api.Port, error) {
	sb, err := e.portTarget(ctx, idOrName, "list its ports")
	if err != nil {
		return nil, err
	}
	ps, err := e.agentFor(sb).Ports(ctx)
	if err != nil {
		return nil, e.sandboxErr(ctx, sb, errAgent(err, "ports"))
	}
	out := make([]api.Port, 0, len(ps))
	for _, p := range ps {
		out = append(out, api.Port{Port: p.Port, Address: p.Address, PID: p.PID, Command: p.Command})
	}
	return out, nil
}

// DialPort connects to TCP port (1-65535) in a running sandbox, trying
// 127.0.0.1, ::1 and the addresses the port's listeners are bound to. The
// connection is a plain byte stream to the program listening there; it is
// closed when the sandbox stops, reboots or is captured (snapshot, fork),
// and ctx bounds only the dial. Errors: ErrInvalidArgument naming "port",
// ErrSandboxNotFound, ErrConflict when the sandbox is not running, and
// ErrPortUnreachable when nothing listens on the port or the connect fails.
func (e *Engine) DialPort(ctx context.Context, idOrName string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.Invalid("port", "%d is out of range [1, 65535]", port)
	}
	sb, err := e.portTarget(ctx, idOrName, "reach its ports")
	if err != nil {
		return nil, err
	}
	epoch := e.quiesceEpoch(sb.ID)
	c, _, err := e.agentFor(sb).Dial(ctx, port)
	if err != nil && !isAgentFailure(err) && e.waitQuiesce(ctx, sb.ID, epoch) {
		// A capture began meanwhile and the agent dropped its connections:
		// once it listens again, try once more.
		c, _, err = e.agentFor(sb).Dial(ctx, port)
	}
	if err != nil {
		var ae *agent.Error
		if errors.As(err, &ae) {
			switch ae.Kind {
			case agent.FailRefused:
				return nil, errdefs.New(errdefs.ErrPortUnreachable, "nothing listens on port %d in sandbox %s", port, sb.Name)
			case agent.FailUnreachable:
				return nil, errdefs.New(errdefs.ErrPortUnreachable, "sandbox %s: %s", sb.Name, ae.Message)
			}
			return nil, errAgent(err, "port")
		}
		return nil, e.sandboxErr(ctx, sb, err)
	}
	return e.trackPortConn(sb.ID, c), nil
}

// portTarget finds a sandbox for a port request; it must be running. A
// capture in progress (its agent is quiesced) is waited for.
func (e *Engine) portTarget(ctx context.Context, idOrName, what string) (*store.Sandbox, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if sb.State == api.StateSuspended {
		if sb, err = e.Resume(ctx, sb.ID, nil); err != nil {
			return nil, err
		}
	}
	if sb.State != api.StateRunning {
		return nil, stateForbids(sb, what)
	}
	if err := e.waitCapture(ctx, sb.ID); err != nil {
		return nil, err
	}
	return sb, nil
}

// waitCapture waits for a capture of sandbox id in progress, if any, to end.
func (e *Engine) waitCapture(ctx context.Context, id string) error {
	q := e.quiesceOf(id)
	if q.done == nil {
		return nil
	}
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func isAgentFailure(err error) bool {
	var ae *agent.Error
	return errors.As(err, &ae)
}

// portConn is a connection returned by DialPort; it forgets itself when
// closed.
type portConn struct {
	net.Conn
	in   *instance
	once sync.Once
	done func() // ends the activity it counts as (idle timeout)
}

// Close closes the connection.
func (c *portConn) Close() error {
	c.once.Do(func() {
		c.done()
		c.in.mu.Lock()
		delete(c.in.ports, c)
		c.in.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseWrite shuts down the writing side: the program in the sandbox reads
// EOF and can still answer.
func (c *portConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return c.Conn.Close()
}

func (e *Engine) trackPortConn(id string, c net.Conn) net.Conn {
	in := e.liveInstance(id)
	pc := &portConn{Conn: c, in: in, done: e.busy(id)}
	in.mu.Lock()
	if in.ports == nil {
		in.ports = map[*portConn]bool{}
	}
	in.ports[pc] = true
	in.mu.Unlock()
	return pc
}

// closePortConns closes every port connection of sandbox id (it stops or
// reboots): forwarding stops with the sandbox.
func (e *Engine) closePortConns(id string) {
	in := e.peekInstance(id)
	if in == nil {
		return
	}
	in.mu.Lock()
	conns := in.ports
	in.ports = nil
	in.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}
