package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sbxhq/sbx/api"
)

// Ports lists the TCP ports that programs listen on in the sandbox, one
// entry a port, sorted by port: {Port, Address (the bind address, e.g.
// "0.0.0.0" or "127.0.0.1"), PID and Command of the process holding the
// socket when found}. sbxd reaches every one of them, whatever the bind
// address and the sandbox's network rules, at PortURL. The sandbox must be
// running: a stopped one is ErrConflict (a port request never boots it);
// an unknown one ErrSandboxNotFound.
func (sb *Sandbox) Ports(ctx context.Context) ([]api.Port, error) {
	var out []api.Port
	if err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID, "ports"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// PortURL returns the URL at which sbxd proxies HTTP and WebSocket traffic
// to TCP port (1-65535) of the sandbox, path-based:
// <sbxd URL>/v1/sandboxes/<name>/ports/<port>/ (the program sees the rest
// of the path after the port). Requests to it need the API key like any
// other (Authorization: Bearer), or, from a browser, open it once with
// ?sbx_key=<key>, which sets a cookie for that port and redirects. Answers
// from sbxd itself, not the program: 409 conflict when the sandbox is not
// running, 502 port_unreachable when nothing listens on the port.
//
// PortURL is "" for a client that reaches sbxd over its Unix socket: no
// browser can open such a URL; start sbxd with --listen for previews.
func (sb *Sandbox) PortURL(port int) string {
	if sb.c.socket {
		return ""
	}
	name := sb.Name
	if name == "" {
		name = sb.ID
	}
	u := *sb.c.base
	u.RawQuery, u.Fragment = "", ""
	raw := strings.TrimSuffix(u.EscapedPath(), "/") + sbPath(name, "ports", strconv.Itoa(port)) + "/"
	u.Path, _ = url.PathUnescape(raw)
	u.RawPath = raw
	return u.String()
}
