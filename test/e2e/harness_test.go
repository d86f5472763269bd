// Package e2e drives a real sbxd (real runsc sandboxes, as root) through
// the public client, black box. It needs root, runsc and busybox-static;
// with CI=true a missing prerequisite fails the run instead of skipping.
package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
	"github.com/sbxhq/sbx/internal/network/nettest"
	"github.com/sbxhq/sbx/internal/store/postgres/pgtest"
	"github.com/vishvananda/netlink"
)

// h is the sbxd under test, shared by the package's tests, which run one
// at a time (no t.Parallel: the machine has 2 cores and tests restart sbxd).
var h *harness

type harness struct {
	binDir   string
	dataDir  string
	netnsDir string
	sock     string
	listen   string
	apiKey   string
	cacheDir string
	pool     int
	env      []string // extra environment of sbxd (SBX_FAULTS=...)
	args     []string // extra flags of sbxd
	cmd      *exec.Cmd
	logPath  string
	c        *client.Client
	// netTag and netCIDR keep this sbxd's firewall table, interfaces and
	// addresses apart from any other sbxd on the machine; dnsUpstream is
	// the test DNS server (names of test hosts; package mirrors forwarded).
	netTag, netCIDR, dnsUpstream string
}

// upstream is the DNS server every test sbxd resolves names with.
var upstream *nettest.Upstream

// listenAddr picks a free loopback address for an sbxd's TCP API, with a
// port below Linux's ephemeral range (32768 and up): a port from that
// range, free when picked, may become an outgoing connection's local port
// before sbxd binds it (or before a killed sbxd starts again on it).
func listenAddr() (string, error) {
	b := make([]byte, 2)
	for range 100 {
		_, _ = rand.Read(b)
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+(int(b[0])<<8|int(b[1]))%12000)
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr, nil
		}
	}
	return "", errors.New("no free loopback port in 20000-31999")
}

// netIdentity picks a network tag and a /20 for one test sbxd, skipping
// CIDRs another sbxd on this machine holds now (another test run's: sbxd
// refuses a CIDR another one holds).
func netIdentity(first byte) (tag, cidr string) {
	for range 64 {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
		tag = string([]byte{first, alnum[int(b[0])%36], alnum[int(b[1])%36], alnum[int(b[2])%36]})
		third := (int(b[0]) % 16) * 16
		cidr = fmt.Sprintf("10.%d.%d.0/20", 240+int(b[3])%8, third)
		if !lockHeld(fmt.Sprintf("/run/sbx/net-cidr-10.%d.%d.0-20.lock", 240+int(b[3])%8, third)) {
			break
		}
	}
	return tag, cidr
}

// lockHeld reports whether another process holds the flock of path.
func lockHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// overlaps reports whether two CIDRs share an address.
func overlaps(a, b string) bool {
	p, err1 := netip.ParsePrefix(a)
	q, err2 := netip.ParsePrefix(b)
	return err1 == nil && err2 == nil && p.Overlaps(q)
}

func TestMain(m *testing.M) {
	if err := prerequisites(); err != nil {
		if os.Getenv("CI") == "true" || os.Getenv("SBX_E2E") == "1" {
			fmt.Fprintln(os.Stderr, "e2e: prerequisite missing (required in CI):", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "e2e: skipped:", err)
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		if h != nil {
			fmt.Fprintln(os.Stderr, "--- sbxd log tail ---\n"+tail(h.logPath, 4000))
		}
		os.Exit(1)
	}
	os.Exit(code)
}

func prerequisites() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		return errors.New("runsc is not installed")
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		return errors.New("busybox-static is not installed (/bin/busybox)")
	}
	return nil
}

func run(m *testing.M) (int, error) {
	tmp, err := os.MkdirTemp("", "sbx-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	defer pgtest.Stop()
	h = &harness{
		binDir:   filepath.Join(tmp, "bin"),
		dataDir:  filepath.Join(tmp, "data"),
		netnsDir: filepath.Join("/run", filepath.Base(tmp)+"-netns"),
		sock:     filepath.Join(tmp, "sbx.sock"),
		apiKey:   randomHex(16),
		cacheDir: os.Getenv("SBX_TEST_CACHE"),
		logPath:  filepath.Join(tmp, "sbxd.log"),
		pool:     1,
	}
	upstream, err = nettest.NewUpstream(nil, aptMirrorHosts(), nettest.SystemResolver())
	if err != nil {
		return 0, err
	}
	defer upstream.Close()
	defer nettest.Blackhole(nil, outsideNet)()
	h.netTag, h.netCIDR = netIdentity('e')
	h.dnsUpstream = upstream.Addr
	if h.cacheDir == "" {
		h.cacheDir = "/var/cache/sbx"
	}
	defer os.RemoveAll(h.netnsDir)
	if err := h.build(); err != nil {
		return 0, err
	}
	if h.listen, err = listenAddr(); err != nil {
		return 0, err
	}
	if err := h.start(); err != nil {
		return 0, err
	}
	defer h.cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := h.importBusybox(ctx); err != nil {
		return 0, fmt.Errorf("import busybox image: %w", err)
	}
	start := time.Now()
	if _, err := h.c.Images.Build(ctx, api.BuildImageRequest{Name: "default"}, nil); err != nil {
		return 0, fmt.Errorf("build default image: %w", err)
	}
	fmt.Fprintf(os.Stderr, "e2e: default image ready in %.1fs\n", time.Since(start).Seconds())
	if hl, err := h.c.Health(ctx); err == nil {
		fmt.Fprintf(os.Stderr, "e2e: layers %s, checkpoints %s\n", hl.Layers, hl.Checkpoints)
	}
	return m.Run(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// build compiles sbxd, sbx and the static agent.
func (h *harness) build() error {
	cmd := exec.Command("go", "build", "-o", h.binDir+"/", "../../cmd/sbxd", "../../cmd/sbx", "../../cmd/sbx-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// start starts sbxd and waits until it answers.
func (h *harness) start() error {
	logf, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"--data-dir", h.dataDir, "--socket", h.sock,
		"--cache-dir", h.cacheDir, "--netns-dir", h.netnsDir, "--pool", fmt.Sprint(h.pool), "--log-level", "debug",
		"--network-tag", h.netTag, "--network-cidr", h.netCIDR, "--dns-upstream", h.dnsUpstream}
	if h.listen != "" {
		args = append(args, "--listen", h.listen, "--api-key", h.apiKey)
	}
	if l := testLayers(); l != "" && !slices.Contains(h.args, "--layers") {
		args = append(args, "--layers", l)
	}
	h.cmd = exec.Command(filepath.Join(h.binDir, "sbxd"), append(args, h.args...)...)
	h.cmd.Env = append(os.Environ(), h.env...)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	if err := h.cmd.Start(); err != nil {
		return err
	}
	h.c, err = client.New(client.WithSocket(h.sock))
	if err != nil {
		return err
	}
	// A loaded machine (a CI run beside) has taken over a minute to start it.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = h.c.Health(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if h.cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Not left running: it would hold what the test took (its data dir,
	// its network, the lock a caller may hold around the suite).
	h.kill()
	return fmt.Errorf("sbxd did not answer: %v\n%s", err, tail(h.logPath, 3000))
}

// cgroupParentOf is the cgroup under which d's sbxd puts its sandboxes':
// /sbx for the network tag sbx, /sbx-TAG for another (one per sbxd on a
// host).
func cgroupParentOf(d *harness) string {
	if d.netTag == "sbx" {
		return "/sbx"
	}
	return "/sbx-" + d.netTag
}

// testLayers is where the suite's sbxds keep writable layers:
// SBX_TEST_LAYERS ("btrfs" or "dir"; empty lets sbxd choose, which is btrfs
// on this kind of machine). scripts/test.sh runs the suite on both paths. A
// test that starts an sbxd with its own --layers keeps it.
func testLayers() string { return os.Getenv("SBX_TEST_LAYERS") }

// stop stops sbxd gracefully (SIGTERM).
func (h *harness) stop() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	_ = h.cmd.Wait()
	h.cmd = nil
}

// kill kills sbxd with SIGKILL, as a crash would.
func (h *harness) kill() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
	h.cmd = nil
}

// cleanup deletes every sandbox and stops sbxd, then removes what runsc
// and the netns dir still hold.
func (h *harness) cleanup() {
	if h.c != nil && h.cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		sbs, _ := h.c.Sandboxes.List(ctx, nil)
		for _, sb := range sbs {
			_ = sb.Delete(ctx)
		}
		cancel()
	}
	h.stop()
	// Warm sandboxes remain (they outlive sbxd by design): remove them.
	out, _ := exec.Command("runsc", "--root", filepath.Join(h.dataDir, "runsc"), "list", "-quiet").Output()
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command("runsc", "--root", filepath.Join(h.dataDir, "runsc"), "delete", "--force", id).Run()
	}
	ents, _ := os.ReadDir(h.netnsDir)
	for _, e := range ents {
		_ = syscall.Unmount(filepath.Join(h.netnsDir, e.Name()), syscall.MNT_DETACH)
	}
	_ = syscall.Unmount(h.netnsDir, syscall.MNT_DETACH)
	removeNetwork(h.netTag, h.netCIDR)
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], h.dataDir) {
			_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
}

// restart stops (or, with crash, kills) sbxd and starts it again.
func (h *harness) restart(t *testing.T, crash bool) {
	t.Helper()
	if crash {
		h.kill()
	} else {
		h.stop()
	}
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
}

// importBusybox builds a one-layer OCI image from the host's static
// busybox and imports it as "busybox" through the API, as a tar of an OCI
// image layout.
func (h *harness) importBusybox(ctx context.Context) error {
	layer, err := busyboxLayer()
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin", "BUSYBOX=1"}})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := tarTree(dir, &buf); err != nil {
		return err
	}
	_, err = h.c.Images.Import(ctx, "busybox", &buf, nil)
	return err
}

// busyboxLayer is a layer with /bin/busybox and a symlink per applet.
func busyboxLayer() (v1.Layer, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "etc/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		_ = tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode})
	}
	_ = tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
	_, _ = tw.Write(bb)
	for _, app := range strings.Fields(string(out)) {
		if app == "busybox" {
			continue
		}
		_ = tw.WriteHeader(&tar.Header{Name: "bin/" + app, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\n"
	_ = tw.WriteHeader(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))})
	_, _ = tw.Write([]byte(passwd))
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// tarTree writes dir's tree as a tar with relative names.
func tarTree(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// --- helpers for tests ---

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newSandbox creates a sandbox that the test deletes when it ends.
func newSandbox(t *testing.T, req api.CreateSandboxRequest) *client.Sandbox {
	t.Helper()
	if req.Name == "" {
		req.Name = "t-" + randomHex(4)
	}
	sb, err := h.c.Sandboxes.Create(ctxT(t), req)
	if err != nil {
		t.Fatalf("create %s: %v", req.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.c.Sandboxes.Delete(ctx, sb.ID); err != nil && !errors.Is(err, client.ErrSandboxNotFound) {
			t.Errorf("delete %s: %v", sb.Name, err)
		}
	})
	return sb
}

// sh runs a shell command and fails the test on a transport error.
func sh(t *testing.T, sb *client.Sandbox, cmd string) *client.ExecResult {
	t.Helper()
	res, err := sb.Exec(ctxT(t), cmd)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res
}

// mustSh runs a shell command that must exit 0 and returns its stdout.
func mustSh(t *testing.T, sb *client.Sandbox, cmd string) string {
	t.Helper()
	res := sh(t, sb, cmd)
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d\nstdout: %s\nstderr: %s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// wantCode checks that err is an API error with the code.
func wantCode(t *testing.T, err error, code api.Code) *client.Error {
	t.Helper()
	var ae *client.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want API error %s, got %v", code, err)
	}
	if ae.Code != code {
		t.Fatalf("want code %s, got %s (%s)", code, ae.Code, ae.Message)
	}
	return ae
}

// runscIDs lists the containers runsc knows under the test's data dir.
func runscIDs(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("runsc", "--root", filepath.Join(h.dataDir, "runsc"), "list", "-quiet").Output()
	if err != nil {
		t.Fatalf("runsc list: %v", err)
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(string(out)) {
		ids[id] = true
	}
	return ids
}

// hostLeftovers returns what the host still has of sandbox id: its runsc
// container, layer dir, sandbox dir, netns and overlay mount.
func hostLeftovers(t *testing.T, id string) []string {
	t.Helper()
	var left []string
	if runscIDs(t)[id] {
		left = append(left, "runsc container")
	}
	for _, p := range []string{
		layerDir(h, id), filepath.Join(h.dataDir, "sandboxes", id),
		filepath.Join(h.netnsDir, "sbx-"+id),
	} {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if strings.Contains(string(mounts), id) {
		left = append(left, "a mount")
	}
	if _, err := netlink.LinkByName(vethOf(h, id)); err == nil {
		left = append(left, "interface "+vethOf(h, id))
	}
	if chains := nftChains(t, h.netTag); strings.Contains(chains, " sb-"+vethOf(h, id)+" ") {
		left = append(left, "nftables chain sb-"+vethOf(h, id))
	}
	return left
}

// layerDir is the host dir of sandbox id's writable layer: on the btrfs
// volume when sbxd has one, else under the data dir.
func layerDir(d *harness, id string) string {
	if _, err := os.Stat(filepath.Join(d.dataDir, "volume", "layers")); err == nil {
		return filepath.Join(d.dataDir, "volume", "layers", id)
	}
	return filepath.Join(d.dataDir, "layers", id)
}

// time_ is time.Time, for progress callbacks.
type time_ = time.Time

// writeTar writes files (name → content) as a tar.
func writeTar(t *testing.T, w io.Writer, files map[string]string) {
	t.Helper()
	tw := tar.NewWriter(w)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(c))}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(c))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// restartWith restarts sbxd (killing it) with extra environment, e.g.
// SBX_FAULTS; nil env restarts it plain.
func (h *harness) restartWith(t *testing.T, env ...string) {
	t.Helper()
	h.kill()
	h.env = env
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits until sbxd's log has a line containing s after offset.
func (h *harness) waitLog(t *testing.T, offset int64, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(h.logPath)
		if int64(len(b)) > offset && strings.Contains(string(b[offset:]), s) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("sbxd's log has no %q after %v", s, timeout)
}

// logSize is the current length of sbxd's log.
func (h *harness) logSize() int64 {
	fi, err := os.Stat(h.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// second starts another sbxd with its own data dir, socket and netns dir
// (no TCP), with extra flags; it is stopped when the test ends.
func second(t *testing.T, args ...string) *harness {
	t.Helper()
	return secondEnv(t, nil, args...)
}

// secondEnv is second with extra environment for sbxd.
func secondEnv(t *testing.T, env []string, args ...string) *harness {
	t.Helper()
	tmp, err := os.MkdirTemp("", "sbx-e2e2-")
	if err != nil {
		t.Fatal(err)
	}
	d := &harness{
		binDir: h.binDir, dataDir: filepath.Join(tmp, "data"), netnsDir: filepath.Join("/run", filepath.Base(tmp)+"-netns"),
		sock: filepath.Join(tmp, "sbx.sock"), cacheDir: h.cacheDir, logPath: filepath.Join(tmp, "sbxd.log"), args: args, env: env,
		dnsUpstream: h.dnsUpstream,
	}
	d.netTag, d.netCIDR = netIdentity('f')
	for overlaps(d.netCIDR, h.netCIDR) {
		// sbxd refuses a CIDR overlapping another sbxd's.
		d.netTag, d.netCIDR = netIdentity('f')
	}
	// Cleaned up even when it does not start (what it mounted goes).
	t.Cleanup(func() {
		d.cleanup()
		os.RemoveAll(tmp)
		os.RemoveAll(d.netnsDir)
	})
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	return d
}
