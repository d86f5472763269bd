package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
	"github.com/sbxhq/sbx/delivery"
)

// bundleEntry finds an entry of an exported bundle (a plain ustar file):
// the offset and size of its data.
func bundleEntry(t *testing.T, b []byte, name string) (int, int) {
	t.Helper()
	for off := 0; off+512 <= len(b); {
		hdr := b[off : off+512]
		n := strings.TrimRight(string(hdr[:100]), "\x00")
		if n == "" {
			break
		}
		size, err := strconv.ParseInt(strings.TrimSpace(strings.TrimRight(string(hdr[124:136]), "\x00")), 8, 64)
		if err != nil {
			t.Fatalf("bundle header %q: %v", n, err)
		}
		if n == name {
			return off + 512, int(size)
		}
		off += 512 + int((size+511)/512*512)
	}
	t.Fatalf("bundle has no %s", name)
	return 0, 0
}

// withoutRecord rewrites a bundle without records/<n> (the ones after it
// renumbered): a chain with a middle record deleted.
func withoutRecord(t *testing.T, b []byte, n int) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	skip := fmt.Sprintf("records/%06d.json", n)
	i := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Name == skip {
			continue
		}
		if strings.HasPrefix(h.Name, "records/") {
			i++
			h.Name = fmt.Sprintf("records/%06d.json", i)
		}
		tw.WriteHeader(h)
		tw.Write(data)
	}
	tw.Close()
	return out.Bytes()
}

// verifyOffline runs sbx delivery verify on a bundle with no sbxd to ask
// (a socket that does not exist).
func verifyOffline(t *testing.T, bundle []byte, keyFile string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "bundle")
	if err := os.WriteFile(p, bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(h.binDir, "sbx"), "--socket", filepath.Join(dir, "no-sbxd.sock"),
		"delivery", "verify", "--bundle", p, "--key", keyFile)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestDeliverTeardownVerify: an agent builds something in a real sandbox
// and delivers it with teardown; nothing of the sandbox remains on the
// host; the exported bundle verifies offline with the node's key, and
// fails, naming what, when one byte of its archive or of a record is
// flipped, a middle record is deleted, or the key is another.
func TestDeliverTeardownVerify(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	blobs := filepath.Join(h.dataDir, "blobs")
	before := dirSize(blobs)
	// The agent's build: outputs, a report, a link to a host path, and
	// scratch that only the sandbox's checkpoint stores.
	mustSh(t, sb, `mkdir -p /workspace/out/logs && cd /workspace && head -c 3000000 /dev/urandom > scratch.bin &&
		for i in 1 2 3; do seq 1 $((i*1000)) > out/part$i.txt; done &&
		cat out/part*.txt | md5sum > out/report.txt && echo build ok > out/logs/build.log &&
		ln -s /etc/shadow out/hostlink && printf -- '--- a\n+++ b\n+fix\n' > patch.diff`)
	if _, err := sb.Checkpoint(ctx, "built"); err != nil {
		t.Fatal(err)
	}

	// Bad paths: 400 naming the path, before any work.
	for _, c := range []struct{ path, msg string }{
		{"/workspace/missing", "/workspace/missing"},
		{"/workspace/../etc/passwd", "/workspace/../etc/passwd"},
		{"/proc/self/environ", "/proc/self/environ"},
	} {
		_, err := sb.Deliver(ctx, api.DeliveryRequest{Paths: []string{"/workspace/patch.diff", c.path}})
		ae := wantCode(t, err, api.CodeInvalidArgument)
		if ae.Status != 400 || !strings.Contains(ae.Message, c.msg) {
			t.Fatalf("%s: status %d, message %q", c.path, ae.Status, ae.Message)
		}
	}
	// Two deliveries before the last: the chain has a middle to delete.
	for i := 0; i < 2; i++ {
		if _, err := sb.Deliver(ctx, api.DeliveryRequest{Paths: []string{"/workspace/patch.diff"}, Name: fmt.Sprintf("draft-%d", i)}); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}

	out, errs, code := sbxCLI(t, "", "deliver", sb.Name, "/workspace/out", "/workspace/patch.diff", "--name", "release-1",
		"--metadata", `{"ticket":"T-16"}`, "--teardown")
	if code != 0 {
		t.Fatalf("sbx deliver: exit %d\n%s", code, errs)
	}
	id := strings.TrimSpace(out)
	if !strings.Contains(errs, "tore down "+sb.Name) || !strings.Contains(errs, "removed container, network, mounts, layer, sandbox_dir") {
		t.Fatalf("teardown report: %q", errs)
	}
	if _, err := h.c.Sandboxes.Get(ctx, sb.Name); !errors.Is(err, client.ErrSandboxNotFound) {
		t.Fatalf("sandbox after teardown: %v", err)
	}
	if left := hostLeftovers(t, sb.ID); len(left) > 0 {
		t.Fatalf("the host still has of the torn-down sandbox: %v", left)
	}
	d, err := h.c.Deliveries.Get(ctx, id)
	if err != nil || d.Sandbox != sb.Name || d.Files != 6 {
		t.Fatalf("delivery after teardown: %+v %v", d, err)
	}
	// No blob that only the sandbox used stays (its checkpoint's scratch);
	// the deliveries' archives do.
	deadline := time.Now().Add(30 * time.Second)
	for dirSize(blobs) > before+300_000 {
		if time.Now().After(deadline) {
			t.Fatalf("the torn-down sandbox's blobs were not freed: %d bytes now, %d before", dirSize(blobs), before)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Online verification, then export and the key, to another path.
	if out, errs, code := sbxCLI(t, "", "delivery", "verify", id); code != 0 || !strings.Contains(out, "ok: delivery "+id) {
		t.Fatalf("verify online: %d %q %q", code, out, errs)
	}
	dir := t.TempDir()
	bundleFile, keyFile := filepath.Join(dir, "bundle"), filepath.Join(dir, "node.pub")
	if _, errs, code := sbxCLI(t, "", "delivery", "export", id, "--file", bundleFile); code != 0 {
		t.Fatalf("export: %s", errs)
	}
	keyPEM, _, code := sbxCLI(t, "", "delivery", "key")
	if code != 0 || os.WriteFile(keyFile, []byte(keyPEM), 0o644) != nil {
		t.Fatal("key")
	}
	bundle, err := os.ReadFile(bundleFile)
	if err != nil {
		t.Fatal(err)
	}
	// The archive downloaded alone is the bundle's, byte for byte; the
	// record's statement names the sandbox, its checkpoint and the caller's
	// metadata.
	archFile := filepath.Join(dir, "out.tar.zst")
	if _, errs, code := sbxCLI(t, "", "delivery", "download", id, "--file", archFile); code != 0 {
		t.Fatalf("download: %s", errs)
	}
	arch, _ := os.ReadFile(archFile)
	if aoff, asize := bundleEntry(t, bundle, "archive.tar.zst"); !bytes.Equal(arch, bundle[aoff:aoff+asize]) {
		t.Fatal("the downloaded archive differs from the exported one")
	}
	stmt, _, code := sbxCLI(t, "", "delivery", "get", id, "--statement")
	for _, want := range []string{`"https://in-toto.io/Statement/v1"`, `"name": "` + sb.Name + `"`, `"comment": "built"`, `"ticket": "T-16"`, `"seq"`} {
		if code != 0 || !strings.Contains(stmt, want) {
			t.Fatalf("statement lacks %s: %d\n%s", want, code, stmt)
		}
	}
	if out, code := verifyOffline(t, bundle, keyFile); code != 0 || !strings.Contains(out, "ok: delivery "+id) {
		t.Fatalf("offline verify of the good bundle: %d %s", code, out)
	}
	// What the archive holds: the files, the link as a link.
	aoff, asize := bundleEntry(t, bundle, "archive.tar.zst")
	got := map[string]string{}
	files, err := delivery.ReadFiles(bytes.NewReader(bundle[aoff : aoff+asize]))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got[f.Name] = f.SHA256
	}
	for _, want := range []string{"workspace/out/part1.txt", "workspace/out/report.txt", "workspace/out/logs/build.log", "workspace/patch.diff"} {
		if got[want] == "" {
			t.Fatalf("archive lacks %s: %v", want, got)
		}
	}
	if _, ok := got["workspace/out/hostlink"]; ok {
		t.Fatal("the symlink to a host path was archived as a file")
	}

	flipped := func(off int) []byte {
		b := bytes.Clone(bundle)
		b[off] ^= 0x01
		return b
	}
	roff, rsize := bundleEntry(t, bundle, "records/000001.json")
	var nrec int
	for nrec = 1; bytes.Contains(bundle, []byte(fmt.Sprintf("records/%06d.json", nrec+1))); nrec++ {
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherKey := filepath.Join(dir, "other.pub")
	os.WriteFile(otherKey, delivery.PublicKeyPEM(other.Public().(ed25519.PublicKey)), 0o644)
	for _, c := range []struct {
		name   string
		bundle []byte
		key    string
		want   string
	}{
		{"archive byte", flipped(aoff + asize/2), keyFile, "archive altered"},
		{"record byte", flipped(roff + rsize/2), keyFile, "record 1 of the chain: record altered"},
		{"middle record deleted", withoutRecord(t, bundle, nrec-1), keyFile, "chain broken"},
		{"another key", bundle, otherKey, "not signed by the given key"},
	} {
		out, code := verifyOffline(t, c.bundle, c.key)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want a failure naming %q:\n%s", c.name, code, c.want, out)
		}
	}
}

// TestDeliverCrash kills sbxd (SIGKILL) in the middle of a delivery with
// teardown: after its archive is stored but before its record, and after
// its record. After each restart the chain verifies, with either no new
// record or the complete one whose archive verifies.
func TestDeliverCrash(t *testing.T) {
	ctx := ctxT(t)
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "busybox"})
	mustSh(t, sb, "mkdir -p /workspace/out && head -c 300000 /dev/urandom > /workspace/out/data && echo done > /workspace/out/ok")
	count := func() int {
		ds, err := h.c.Deliveries.List(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return len(ds)
	}
	crash := func(point string) {
		t.Helper()
		off := h.logSize()
		h.restartWith(t, "SBX_FAULTS="+point+"=60s")
		c, err := h.c.Sandboxes.Get(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		go c.Deliver(context.Background(), api.DeliveryRequest{Paths: []string{"/workspace/out"}, Teardown: true})
		h.waitLog(t, off, "fault point reached", 60*time.Second)
		h.restartWith(t) // SIGKILL, then a plain sbxd
	}
	verifyAll := func() string {
		t.Helper()
		out, errs, code := sbxCLI(t, "", "delivery", "verify", "--all")
		if code != 0 {
			t.Fatalf("verify --all after the crash: %d %s %s", code, out, errs)
		}
		return out
	}

	crash("deliver:stored")
	if n := count(); n != 0 {
		t.Fatalf("a delivery killed before its record is listed (%d)", n)
	}
	verifyAll()
	crash("deliver:recorded")
	ds, err := h.c.Deliveries.List(ctx, sb.ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("a delivery killed after its record: %v %v, want the one record", ds, err)
	}
	if out := verifyAll(); !strings.Contains(out, "ok: delivery "+ds[0].ID) {
		t.Fatalf("verify --all does not name the delivery: %s", out)
	}
	// The teardown the crash cut off is not done behind the caller's back.
	if _, err := h.c.Sandboxes.Get(ctx, sb.Name); err != nil {
		t.Fatalf("sandbox after a crash before its teardown: %v", err)
	}
}
