package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// portServers starts, in one python3 process, a static file server on
// 127.0.0.1:3000 (socketserver, not http.server's HTTPServer, whose bind
// looks up the host's name: that stalls without DNS), an upgrade-echo
// server on 0.0.0.0:3001 (answers an Upgrade request with 101, then echoes
// bytes upper-cased until EOF, then says "bye" and closes), and a server
// on [::1]:3002 only that answers "v6".
const portServers = `
import functools, http.server, socket, socketserver, threading

class Files(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass

class Upgrade(socketserver.StreamRequestHandler):
    def handle(self):
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            b = self.rfile.read(1)
            if not b:
                return
            head += b
        if b"upgrade: echo" not in head.lower():
            self.wfile.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        self.wfile.flush()
        while True:
            b = self.connection.recv(4096)
            if not b:
                break
            self.connection.sendall(b.upper())
        self.connection.sendall(b"bye")

class V6(socketserver.ThreadingTCPServer):
    address_family = socket.AF_INET6
    allow_reuse_address = True
    daemon_threads = True

class Hello(socketserver.StreamRequestHandler):
    def handle(self):
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nv6")

files = Files(("127.0.0.1", 3000), functools.partial(Quiet, directory="/workspace/site"))
up = Files(("0.0.0.0", 3001), Upgrade)
v6 = V6(("::1", 3002), Hello)
for s in (up, v6):
    threading.Thread(target=s.serve_forever, daemon=True).start()
files.serve_forever()
`

// tcpClient is a client of the sbxd under test over TCP, with its key.
func tcpClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.WithURL("http://"+h.listen), client.WithAPIKey(h.apiKey))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// get sends a request to sbxd's TCP listener, with Host host when not ""
// and headers in pairs, without following redirects.
func get(t *testing.T, rawURL, host string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	hc := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func wantAPIError(t *testing.T, what string, resp *http.Response, body string, status int, code api.Code) string {
	t.Helper()
	var er api.ErrorResponse
	if resp.StatusCode != status || json.Unmarshal([]byte(body), &er) != nil || er.Error.Code != code {
		t.Fatalf("%s: want %d %s, got %d %s", what, status, code, resp.StatusCode, body)
	}
	return er.Error.Message
}

// upgrade opens a raw connection to sbxd, asks path (on host) for an
// upgrade to "echo" and returns the connection after the 101.
func upgrade(t *testing.T, path, host string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", h.listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", path, host, h.apiKey)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade %s: %d %v %s", path, resp.StatusCode, resp.Header, b)
	}
	return c, br
}

func echo(t *testing.T, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(br, b); err != nil || string(b) != strings.ToUpper(msg) {
		t.Fatalf("echo of %q: %q %v", msg, b, err)
	}
}

// TestPortsPreview is the ports issue's "done when": servers listening in
// an offline sandbox (one on 127.0.0.1 only, one on ::1 only) are listed
// and reached from the host through sbxd, path- and host-based, HTTP and an
// upgraded connection; a closed port is a 502; the API key guards it all;
// and forwarding stops with the sandbox.
func TestPortsPreview(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Network: &api.NetworkRules{Internet: false}})
	page := "hello from " + sb.Name + "\n"
	if err := sb.WriteFile(ctx, "/workspace/site/hello.txt", strings.NewReader(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "/workspace/servers.py", strings.NewReader(portServers), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, err := sb.Start(ctx, api.ExecRequest{Cmd: []string{"python3", "/workspace/servers.py"}})
	if err != nil {
		t.Fatal(err)
	}

	// The ports appear in the list, with the process holding them.
	var ports []api.Port
	deadline := time.Now().Add(60 * time.Second)
	for {
		ports, err = sb.Ports(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byPort := map[int]api.Port{}
		for _, p := range ports {
			byPort[p.Port] = p
		}
		if len(byPort[3000].Address) > 0 && len(byPort[3001].Address) > 0 && len(byPort[3002].Address) > 0 {
			for port, addr := range map[int]string{3000: "127.0.0.1", 3001: "0.0.0.0", 3002: "::1"} {
				p := byPort[port]
				if p.Address != addr || p.PID != pid || p.Command != "python3" {
					t.Errorf("port %d: %+v, want address %s, pid %d, command python3", port, p, addr, pid)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			out, _ := sb.Exec(ctx, "cat /proc/net/tcp /proc/net/tcp6")
			t.Fatalf("ports 3000-3002 not listed after 60 s: %+v\n%s", ports, out.Stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Path-based, at the client's PortURL, with the key.
	tc := tcpClient(t)
	tsb, err := tc.Sandboxes.Get(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	base := tsb.PortURL(3000)
	if want := "http://" + h.listen + "/v1/sandboxes/" + sb.Name + "/ports/3000/"; base != want {
		t.Fatalf("PortURL %q, want %q", base, want)
	}
	resp, body := get(t, base+"hello.txt", "", "Authorization", "Bearer "+h.apiKey)
	if resp.StatusCode != 200 || body != page {
		t.Fatalf("path-based: %d %q", resp.StatusCode, body)
	}
	// A server bound to ::1 only is reached too.
	resp, body = get(t, tsb.PortURL(3002), "", "Authorization", "Bearer "+h.apiKey)
	if resp.StatusCode != 200 || body != "v6" {
		t.Fatalf("[::1]:3002: %d %q", resp.StatusCode, body)
	}

	// Host-based: Host 3000-<name>.localhost:<port>.
	host := fmt.Sprintf("3000-%s.localhost:%s", sb.Name, strings.Split(h.listen, ":")[1])
	resp, body = get(t, "http://"+h.listen+"/hello.txt", host, "Authorization", "Bearer "+h.apiKey)
	if resp.StatusCode != 200 || body != page {
		t.Fatalf("host-based: %d %q", resp.StatusCode, body)
	}

	// Without the key: 401; ?sbx_key= trades it for a cookie once.
	resp, body = get(t, "http://"+h.listen+"/hello.txt", host)
	wantAPIError(t, "no key", resp, body, 401, api.CodeUnauthorized)
	resp, _ = get(t, "http://"+h.listen+"/hello.txt?sbx_key="+h.apiKey, host)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/hello.txt" || len(resp.Cookies()) != 1 {
		t.Fatalf("sbx_key: %d %q %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	ck := resp.Cookies()[0]
	resp, body = get(t, "http://"+h.listen+"/hello.txt", host, "Cookie", ck.Name+"="+ck.Value)
	if resp.StatusCode != 200 || body != page {
		t.Fatalf("with the preview cookie: %d %q", resp.StatusCode, body)
	}

	// An upgraded connection: bytes flow both ways after the 101, path-
	// and host-based.
	c, br := upgrade(t, "/v1/sandboxes/"+sb.Name+"/ports/3001/ws", h.listen)
	echo(t, c, br, "hello")
	echo(t, c, br, "and again")
	// Half-close passes through: the server sees EOF, answers, closes.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "bye" {
		t.Fatalf("after half-close: %q %v", rest, err)
	}
	c, br = upgrade(t, "/ws", fmt.Sprintf("3001-%s.localhost", sb.Name))
	echo(t, c, br, "via host")

	// Nothing on the port: 502 with a JSON error.
	resp, body = get(t, tsb.PortURL(3999), "", "Authorization", "Bearer "+h.apiKey)
	if msg := wantAPIError(t, "closed port", resp, body, 502, api.CodePortUnreachable); msg != "nothing listens on port 3999 in sandbox "+sb.Name {
		t.Fatalf("closed port: %q", msg)
	}
	resp, body = get(t, "http://"+h.listen+"/v1/sandboxes/no-such-sandbox/ports/3000/", "", "Authorization", "Bearer "+h.apiKey)
	wantAPIError(t, "unknown sandbox", resp, body, 404, api.CodeSandboxNotFound)

	// A memory snapshot closes open connections (the agent drops its host
	// sockets for the capture); the server runs on and answers again.
	c, br = upgrade(t, "/v1/sandboxes/"+sb.Name+"/ports/3001/ws", h.listen)
	echo(t, c, br, "before snapshot")
	snap, err := sb.Snapshot(ctx, api.SnapshotRequest{Name: "ports"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = h.c.Snapshots.Delete(ctx, snap.ID)
	})
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("an upgraded connection outlived a snapshot: %v", err)
	}
	resp, body = get(t, base+"hello.txt", "", "Authorization", "Bearer "+h.apiKey)
	if resp.StatusCode != 200 || body != page {
		t.Fatalf("after a snapshot: %d %q", resp.StatusCode, body)
	}

	// The CLI lists them, with URLs over TCP.
	cmd := exec.Command(filepath.Join(h.binDir, "sbx"), "--url", "http://"+h.listen, "ports", sb.Name)
	cmd.Env = append(os.Environ(), "SBX_API_KEY="+h.apiKey)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PORT") || !strings.Contains(string(out), base) || !strings.Contains(string(out), "python3") {
		t.Fatalf("sbx ports: %v\n%s", err, out)
	}
	t.Logf("sbx ports:\n%s", out)
	jout, errs, code := sbxCLI(t, "", "ports", sb.Name, "-o", "json")
	var listed []api.Port
	if code != 0 || json.Unmarshal([]byte(jout), &listed) != nil || len(listed) < 3 {
		t.Fatalf("sbx ports -o json: %d %q %q", code, jout, errs)
	}

	// Forwarding stops with the sandbox: the open connection ends, and
	// requests answer 409 (a port request does not boot it).
	c, br = upgrade(t, "/v1/sandboxes/"+sb.Name+"/ports/3001/ws", h.listen)
	echo(t, c, br, "before stop")
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("the upgraded connection outlived the sandbox: %v", err)
	}
	resp, body = get(t, base+"hello.txt", "", "Authorization", "Bearer "+h.apiKey)
	wantAPIError(t, "stopped, path-based", resp, body, 409, api.CodeConflict)
	resp, body = get(t, "http://"+h.listen+"/hello.txt", host, "Authorization", "Bearer "+h.apiKey)
	wantAPIError(t, "stopped, host-based", resp, body, 409, api.CodeConflict)
	if _, err := sb.Ports(ctx); !strings.Contains(fmt.Sprint(err), "conflict") {
		t.Fatalf("ports of a stopped sandbox: %v", err)
	}
	if err := sb.Refresh(ctx); err != nil || sb.State != api.StateStopped {
		t.Fatalf("a port request booted the sandbox: %s %v", sb.State, err)
	}
}
