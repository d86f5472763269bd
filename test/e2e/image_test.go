package e2e

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sbxhq/sbx/api"
)

// testImage is busybox plus a marker layer that whites out /bin/vi, so an
// image's layers and whiteouts are applied in order.
func testImage(t *testing.T, marker string) v1.Image {
	t.Helper()
	base, err := busyboxLayer()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	writeTar(t, &buf, map[string]string{"etc/marker": marker + "\n", "bin/.wh.vi": ""})
	b := buf.Bytes()
	top, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin", "IMAGE_MARKER=" + marker}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestImagePullFromRegistry(t *testing.T) {
	ctx := ctxT(t)
	var hits atomic.Int64
	regh := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		regh.ServeHTTP(w, r)
	}))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	ref, err := name.ParseReference(host+"/team/tools:1.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, testImage(t, "pulled")); err != nil {
		t.Fatal(err)
	}
	// By default sbxd refuses to pull from the host's loopback (or private
	// networks): an API client must not reach what only the host reaches (a
	// fresh review read a loopback-only page through a pull's redirect).
	before := hits.Load()
	_, err = h.c.Images.Pull(ctx, api.PullImageRequest{Name: "pulled", Ref: ref.String(), Insecure: true}, nil)
	if e := wantCode(t, err, api.CodeInvalidArgument); !strings.Contains(e.Message, "private network") {
		t.Fatalf("a pull from loopback: %v", err)
	}
	if n := hits.Load() - before; n != 0 {
		t.Fatalf("sbxd sent %d requests to a loopback registry it should refuse", n)
	}
	withArgs(t, "--allow-private-registries")
	var lines []string
	img, err := h.c.Images.Pull(ctx, api.PullImageRequest{Name: "pulled", Ref: ref.String(), Insecure: true},
		func(msg string, _ time_) { lines = append(lines, msg) })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.Digest, "sha256:") || img.Source != "registry:"+ref.String() || len(lines) == 0 {
		t.Fatalf("pulled image %+v, progress %v", img, lines)
	}
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "pulled"})
	if out := mustSh(t, sb, "cat /etc/marker; echo $IMAGE_MARKER; test -e /bin/vi && echo vi-present || echo vi-gone"); out != "pulled\npulled\nvi-gone\n" {
		t.Fatalf("sandbox of the pulled image: %q", out)
	}

	_, err = h.c.Images.Pull(ctx, api.PullImageRequest{Name: "missing", Ref: host + "/team/nothing:1", Insecure: true}, nil)
	wantCode(t, err, api.CodeImageNotFound)
	_, err = h.c.Images.Pull(ctx, api.PullImageRequest{Name: "Bad Name", Ref: ref.String()}, nil)
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = h.c.Images.Pull(ctx, api.PullImageRequest{Name: "x", Ref: "::not a ref"}, nil)
	wantCode(t, err, api.CodeInvalidArgument)

	// An image in use cannot be removed; once unused it can.
	err = h.c.Images.Delete(ctx, "pulled")
	wantCode(t, err, api.CodeConflict)
	if err := sb.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Images.Delete(ctx, "pulled"); err != nil {
		t.Fatal(err)
	}
	_, err = h.c.Images.Get(ctx, "pulled")
	wantCode(t, err, api.CodeImageNotFound)
}

func TestImageImportDockerArchive(t *testing.T) {
	ctx := ctxT(t)
	tag, _ := name.NewTag("example.org/tools:2")
	var buf bytes.Buffer
	if err := tarball.Write(tag, testImage(t, "docker-archive"), &buf); err != nil {
		t.Fatal(err)
	}
	img, err := h.c.Images.Import(ctx, "from-archive", &buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Images.Delete(ctxT(t), "from-archive") })
	if img.Source != "archive" {
		t.Fatalf("source %q", img.Source)
	}
	sb := newSandbox(t, api.CreateSandboxRequest{Image: "from-archive"})
	if out := mustSh(t, sb, "cat /etc/marker"); out != "docker-archive\n" {
		t.Fatalf("%q", out)
	}
	_, err = h.c.Images.Import(ctx, "garbage", strings.NewReader("this is not a tar archive at all, not even close..........."), nil)
	wantCode(t, err, api.CodeInvalidArgument)
	// A root filesystem tarball whose hard link fails: the error names the
	// tarball's paths, never the host's (a fresh review saw the data dir).
	var bad bytes.Buffer
	tw := tar.NewWriter(&bad)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/no/such/file"})
	_ = tw.Close()
	_, err = h.c.Images.Import(ctx, "badlink", &bad, nil)
	if e := wantCode(t, err, api.CodeInvalidArgument); strings.Contains(e.Message, h.dataDir) {
		t.Fatalf("the error shows a host path: %s", e.Message)
	}
	list, err := h.c.Images.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		if i.Name == "garbage" {
			t.Fatal("a failed import is listed")
		}
	}
}
