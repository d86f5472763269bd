// Package disk owns what a sandbox's disk is made of: images (read-only
// root filesystems, unpacked once and shared), each sandbox's writable layer
// (the upperdir of a host overlayfs whose lowerdir is the image), and, in
// later layers, disk checkpoints of that writable layer.
package disk

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"golang.org/x/sys/unix"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// DefaultImage is the name of the image that sandboxes use when none is
// given, built with mmdebstrap from Debian bookworm on first use.
const DefaultImage = "default"

// DefaultEnv is the environment of images that carry none (built and plain
// rootfs images).
var DefaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8",
}

// Progress receives human-readable progress lines of a long operation.
type Progress func(msg string)

// Images unpacks images under dir/<id>/rootfs and records them in the store.
// An image's directory is never changed once it is unpacked; rebuilding a
// name unpacks a new id, and GC removes ids that no image and no sandbox
// references.
type Images struct {
	dir        string
	cacheDir   string
	st         store.Store
	log        *slog.Logger
	mmdebstrap string

	mu   sync.Mutex
	busy map[string]*flight // image name → operation in progress

	// AllowPrivateRegistries lets pulls reach registries on the host's
	// loopback or private networks (off by default: an API client could
	// otherwise make sbxd fetch from services only the host reaches).
	AllowPrivateRegistries bool

	// OnChange, if set, is called with an image's name after it is
	// (re)unpacked or removed.
	OnChange func(name string)
}

type flight struct {
	done chan struct{}
	img  *store.Image
	err  error
}

// NewImages returns an image manager that unpacks under dir and keeps
// mmdebstrap's output tarballs in cacheDir (empty disables the cache).
func NewImages(dir, cacheDir string, st store.Store, log *slog.Logger) (*Images, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if cacheDir != "" {
		if err := os.MkdirAll(cacheDir, 0o700); err != nil {
			return nil, err
		}
	}
	return &Images{dir: dir, cacheDir: cacheDir, st: st, log: log, mmdebstrap: "mmdebstrap", busy: map[string]*flight{}}, nil
}

var imageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateImageName checks an image name: [a-z0-9][a-z0-9._-]{0,62}.
func ValidateImageName(n string) error {
	if !imageNameRE.MatchString(n) {
		return errdefs.Invalid("name", "image name %q must match [a-z0-9][a-z0-9._-]{0,62}", n)
	}
	return nil
}

// RootFS is the directory of an image's unpacked root filesystem.
func (m *Images) RootFS(id string) string { return filepath.Join(m.dir, id, "rootfs") }

// Get returns the image record, or errdefs.ErrImageNotFound.
func (m *Images) Get(ctx context.Context, name string) (*store.Image, error) {
	return m.st.GetImage(ctx, name)
}

// List returns every image.
func (m *Images) List(ctx context.Context) ([]*store.Image, error) { return m.st.ListImages(ctx) }

// once runs fn for name unless an operation on name is already running, in
// which case it waits for that one and returns its result.
func (m *Images) once(ctx context.Context, name string, fn func() (*store.Image, error)) (*store.Image, error) {
	m.mu.Lock()
	if f, ok := m.busy[name]; ok {
		m.mu.Unlock()
		select {
		case <-f.done:
			return f.img, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	m.busy[name] = f
	m.mu.Unlock()
	f.img, f.err = fn()
	m.mu.Lock()
	delete(m.busy, name)
	m.mu.Unlock()
	close(f.done)
	return f.img, f.err
}

// Ensure returns the named image; for DefaultImage it builds it first if it
// is missing (a few minutes), sending build output to progress.
func (m *Images) Ensure(ctx context.Context, name string, progress Progress) (*store.Image, error) {
	img, err := m.st.GetImage(ctx, name)
	if err == nil || name != DefaultImage || !errors.Is(err, errdefs.ErrImageNotFound) {
		return img, err
	}
	m.log.Info("default image missing: building it", "image", name)
	return m.Build(ctx, api.BuildImageRequest{Name: DefaultImage}, "", progress)
}

// HasRootFS reports whether image id is unpacked on this node.
func (m *Images) HasRootFS(id string) bool {
	_, err := os.Stat(m.RootFS(id))
	return err == nil
}

// Install makes the root filesystem of image id on this node with fill,
// which builds it in an empty directory; the directory becomes RootFS(id)
// only when fill succeeded (a partial one is removed, and an interrupted
// one, a dot-name, goes at the next startup GC). Calls for one id at a
// time run once; a present root filesystem is kept as it is.
func (m *Images) Install(ctx context.Context, id string, fill func(rootfs string) error) error {
	if m.HasRootFS(id) {
		return nil
	}
	_, err := m.once(ctx, "rootfs:"+id, func() (*store.Image, error) {
		if m.HasRootFS(id) {
			return nil, nil
		}
		tmp := filepath.Join(m.dir, ".fetch-"+id)
		_ = os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return nil, err
		}
		if err := fill(filepath.Join(tmp, "rootfs")); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		if err := os.Rename(tmp, filepath.Join(m.dir, id)); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		m.log.Info("image installed from the blob store", "id", id)
		return nil, nil
	})
	return err
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recipe is what a built image is made from; its digest keys the cache.
type recipe struct {
	Tool     string   `json:"tool"`
	Variant  string   `json:"variant"`
	Suite    string   `json:"suite"`
	Packages []string `json:"packages"`
}

func (r recipe) digest() string {
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

var pkgRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
var suiteRE = regexp.MustCompile(`^[a-z][a-z0-9-]{1,30}$`)

// Build builds an image with mmdebstrap (Debian minbase plus packages) and
// unpacks it under req.Name. The mmdebstrap tarball is cached by recipe
// digest unless req.NoCache. Progress gets mmdebstrap's output lines.
// owner is recorded as the image's Owner (the API key that asked; "" for
// the operator).
func (m *Images) Build(ctx context.Context, req api.BuildImageRequest, owner string, progress Progress) (*store.Image, error) {
	if req.Name == "" {
		req.Name = DefaultImage
	}
	if err := ValidateImageName(req.Name); err != nil {
		return nil, err
	}
	rc := recipe{Tool: "mmdebstrap", Variant: "minbase", Suite: req.Suite, Packages: slices.Clone(req.Packages)}
	if rc.Suite == "" {
		rc.Suite = "bookworm"
	}
	if !suiteRE.MatchString(rc.Suite) {
		return nil, errdefs.Invalid("suite", "%q is not a Debian suite name", rc.Suite)
	}
	if req.Packages == nil {
		rc.Packages = slices.Clone(api.DefaultPackages)
	}
	for _, p := range rc.Packages {
		if !pkgRE.MatchString(p) {
			return nil, errdefs.Invalid("packages", "%q is not a Debian package name", p)
		}
	}
	sort.Strings(rc.Packages)
	rc.Packages = slices.Compact(rc.Packages)
	return m.once(ctx, req.Name, func() (*store.Image, error) {
		tarPath, cleanup, err := m.mmdebstrapTar(ctx, rc, req.NoCache, progress)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		f, err := os.Open(tarPath)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		progress("unpacking root filesystem")
		return m.unpack(ctx, req.Name, owner, rc.digest(), "build:mmdebstrap "+rc.Suite+" minbase+"+strings.Join(rc.Packages, ","),
			DefaultEnv, func(dir string) (int64, error) { return untar(f, dir) })
	})
}

// mmdebstrapTar returns a tarball of the recipe's root filesystem, from the
// cache or from a new mmdebstrap run.
func (m *Images) mmdebstrapTar(ctx context.Context, rc recipe, noCache bool, progress Progress) (string, func(), error) {
	key := strings.TrimPrefix(rc.digest(), "sha256:")[:16]
	cached := ""
	if m.cacheDir != "" {
		cached = filepath.Join(m.cacheDir, "mmdebstrap-"+rc.Suite+"-"+key+".tar")
		if _, err := os.Stat(cached); err == nil && !noCache {
			progress("using cached build " + cached)
			return cached, func() {}, nil
		}
	}
	if _, err := exec.LookPath(m.mmdebstrap); err != nil {
		return "", nil, errdefs.New(errdefs.ErrUnavailable, "image build needs mmdebstrap (apt-get install -y mmdebstrap)")
	}
	tmpDir := m.cacheDir
	if tmpDir == "" {
		tmpDir = m.dir
	}
	tmp := filepath.Join(tmpDir, ".build-"+newID()+".tar")
	args := []string{"--variant=minbase", "--mode=root", "--format=tar"}
	if len(rc.Packages) > 0 {
		args = append(args, "--include="+strings.Join(rc.Packages, ","))
	}
	args = append(args, rc.Suite, tmp)
	progress("mmdebstrap " + strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, m.mmdebstrap, args...)
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tail []string
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			tail = append(tail, line)
			if len(tail) > 20 {
				tail = tail[1:]
			}
			progress(line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-scanDone
	if err != nil {
		os.Remove(tmp)
		return "", nil, fmt.Errorf("mmdebstrap failed: %v: %s", err, strings.Join(tail, "\n"))
	}
	if cached == "" {
		return tmp, func() { os.Remove(tmp) }, nil
	}
	if err := os.Rename(tmp, cached); err != nil {
		os.Remove(tmp)
		return "", nil, err
	}
	return cached, func() {}, nil
}

// unpack fills a new image directory with fill, prepares it for sbx, and
// records it under name, owned by owner, replacing an older image of that
// name (whose directory GC removes once no sandbox uses it).
func (m *Images) unpack(ctx context.Context, name, owner, digest, source string, env []string, fill func(dir string) (int64, error)) (*store.Image, error) {
	id := newID()
	tmp := filepath.Join(m.dir, ".tmp-"+id)
	if err := os.MkdirAll(filepath.Join(tmp, "rootfs"), 0o755); err != nil {
		return nil, err
	}
	fail := func(err error) (*store.Image, error) {
		os.RemoveAll(tmp)
		return nil, err
	}
	size, err := fill(filepath.Join(tmp, "rootfs"))
	if err != nil {
		return fail(err)
	}
	if err := prepareRootFS(filepath.Join(tmp, "rootfs")); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, id)); err != nil {
		return fail(err)
	}
	if len(env) == 0 {
		env = DefaultEnv
	}
	img := &store.Image{Name: name, ID: id, Digest: digest, Source: source, SizeBytes: size, Env: env, Owner: owner, CreateTime: time.Now().UTC()}
	if err := m.st.PutImage(ctx, img); err != nil {
		os.RemoveAll(filepath.Join(m.dir, id))
		return nil, err
	}
	m.log.Info("image ready", "image", name, "id", id, "size_bytes", size, "source", source)
	if m.OnChange != nil {
		m.OnChange(name)
	}
	return img, nil
}

// mountpoints are directories that every image gets, so that the
// sandbox's mounts never create them in its writable layer.
var mountpoints = []struct {
	path string
	mode fs.FileMode
}{
	{"/.sbx", 0o755}, {"/.sbx/bin", 0o755}, {"/.sbx/run", 0o755}, {"/.sbx/ca", 0o755},
	{"/proc", 0o555}, {"/sys", 0o555}, {"/dev", 0o755}, {"/tmp", 0o1777 | fs.ModeSticky},
	{"/workspace", 0o755}, {"/root", 0o700}, {"/etc", 0o755},
}

// DefaultHosts is the /etc/hosts that an image without one gets, so that
// localhost resolves (the sandbox's own name is answered by sbxd's DNS).
const DefaultHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// prepareRootFS adds the mount points sbx needs to an unpacked image, an
// empty TmpKeepName in /tmp (see Layers.KeepTmp: the image keeps /tmp
// non-empty, so a sandbox's layer need not), and an /etc/hosts
// (DefaultHosts) when it has none.
func prepareRootFS(root string) error {
	if err := mountpointDirs(root); err != nil {
		return err
	}
	if ents, err := os.ReadDir(filepath.Join(root, "tmp")); err == nil && len(ents) == 0 {
		if err := os.WriteFile(filepath.Join(root, "tmp", TmpKeepName), nil, 0o644); err != nil {
			return err
		}
	}
	if err := neutralHostname(root); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(root, "etc", "hosts"), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil // the image's own (or its link), kept as it is
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(DefaultHosts); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// neutralHostname makes the image's /etc/hostname a regular file that
// says "localhost": mmdebstrap copies the building host's name there. A
// sandbox sees its own name (sbx mounts a file over it); the image keeps
// no host's name, and the mount point is a file in the image, not one that
// runsc would make in a sandbox's writable layer.
func neutralHostname(root string) error {
	p := filepath.Join(root, "etc", "hostname")
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return os.WriteFile(p, []byte("localhost\n"), 0o644)
}

func mountpointDirs(root string) error {
	for _, mp := range mountpoints {
		p := filepath.Join(root, mp.path)
		fi, err := os.Lstat(p)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			return fmt.Errorf("image has %s as a non-directory; sbx needs it as a mount point", mp.path)
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, mp.mode.Perm()|mp.mode&fs.ModeSticky); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

// Import unpacks an image from r, which holds one of: a docker-save archive
// (manifest.json), a tar of an OCI image layout (oci-layout, index.json), or
// a plain root filesystem tarball; each may be gzip-compressed. tmpDir
// receives a spooled copy of r. owner is recorded as the image's Owner.
func (m *Images) Import(ctx context.Context, name, owner string, r io.Reader, progress Progress) (*store.Image, error) {
	if err := ValidateImageName(name); err != nil {
		return nil, err
	}
	return m.once(ctx, name, func() (*store.Image, error) {
		spool, err := os.CreateTemp(m.dir, ".import-*.tar")
		if err != nil {
			return nil, err
		}
		defer os.Remove(spool.Name())
		defer spool.Close()
		progress("receiving archive")
		br := bufio.NewReaderSize(r, 1<<16)
		var src io.Reader = br
		if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
			gz, err := gzip.NewReader(br)
			if err != nil {
				return nil, errdefs.Invalid("body", "bad gzip stream: %v", err)
			}
			src = gz
		}
		n, err := io.Copy(spool, src)
		if err != nil {
			return nil, fmt.Errorf("receive archive: %w", err)
		}
		if n == 0 {
			return nil, errdefs.Invalid("body", "the archive is empty")
		}
		progress(fmt.Sprintf("received %d bytes", n))
		kind, err := archiveKind(spool.Name())
		if err != nil {
			return nil, err
		}
		switch kind {
		case "docker":
			img, err := tarball.ImageFromPath(spool.Name(), nil)
			if err != nil {
				return nil, errdefs.Invalid("body", "bad docker archive: %v", err)
			}
			return m.unpackOCI(ctx, name, owner, "archive", img, progress)
		case "oci":
			dir, err := os.MkdirTemp(m.dir, ".layout-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(dir)
			if _, err := spool.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
			if _, err := untar(spool, dir); err != nil {
				return nil, errdefs.Invalid("body", "bad OCI layout archive: %v", err)
			}
			img, err := imageFromLayout(dir)
			if err != nil {
				return nil, err
			}
			return m.unpackOCI(ctx, name, owner, "oci-layout", img, progress)
		default:
			if _, err := spool.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
			h := sha256.New()
			if _, err := io.Copy(h, spool); err != nil {
				return nil, err
			}
			if _, err := spool.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
			progress("unpacking root filesystem tarball")
			digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
			return m.unpack(ctx, name, owner, digest, "archive:rootfs", DefaultEnv, func(dir string) (int64, error) {
				size, err := untar(spool, dir)
				if err != nil {
					// Paths in the message are the tarball's, not the host's.
					msg := strings.ReplaceAll(err.Error(), dir, "")
					return 0, errdefs.Invalid("body", "bad root filesystem tarball: %s", msg)
				}
				return size, nil
			})
		}
	})
}

// archiveKind looks at the top-level names of a tar: "docker", "oci" or
// "rootfs".
func archiveKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	hasLayout, hasIndex, hasManifest, entries := false, false, false, 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", errdefs.Invalid("body", "not a tar archive: %v", err)
		}
		entries++
		switch strings.TrimPrefix(hdr.Name, "./") {
		case "oci-layout":
			hasLayout = true
		case "index.json":
			hasIndex = true
		case "manifest.json":
			hasManifest = true
		}
	}
	switch {
	case entries == 0:
		return "", errdefs.Invalid("body", "the archive has no entries")
	case hasLayout && hasIndex:
		return "oci", nil
	case hasManifest:
		return "docker", nil
	}
	return "rootfs", nil
}

// imageFromLayout picks the image of an OCI layout: its only manifest, or
// the linux/amd64 one of an index.
func imageFromLayout(dir string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, errdefs.Invalid("body", "bad OCI layout: %v", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, errdefs.Invalid("body", "bad OCI layout index: %v", err)
	}
	return pickImage(idx, v1.Platform{OS: "linux", Architecture: "amd64"})
}

// pickImage descends an index to one image, preferring platform.
func pickImage(idx v1.ImageIndex, platform v1.Platform) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, errdefs.Invalid("body", "bad image index: %v", err)
	}
	var candidates []v1.Descriptor
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.Satisfies(platform) {
			candidates = append(candidates, d)
		}
	}
	if len(candidates) == 0 {
		return nil, errdefs.Invalid("body", "the image index has no %s image", platform.String())
	}
	d := candidates[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		return pickImage(child, platform)
	}
	return idx.Image(d.Digest)
}

// unpackOCI flattens img's layers (applying whiteouts, as the OCI image
// spec's layer rules say) and unpacks the result.
func (m *Images) unpackOCI(ctx context.Context, name, owner, source string, img v1.Image, progress Progress) (*store.Image, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, errdefs.Invalid("image", "bad manifest: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, errdefs.Invalid("image", "bad config: %v", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, errdefs.Invalid("image", "bad layers: %v", err)
	}
	var total int64
	for _, l := range layers {
		if s, err := l.Size(); err == nil {
			total += s
		}
	}
	progress(fmt.Sprintf("image %s: %d layers, %d bytes compressed", digest, len(layers), total))
	env := cfg.Config.Env
	return m.unpack(ctx, name, owner, digest.String(), source, env, func(dir string) (int64, error) {
		rc := mutate.Extract(img)
		defer rc.Close()
		progress("unpacking layers")
		size, err := untar(rc, dir)
		if err != nil {
			return 0, fmt.Errorf("unpack %s: %w", digest, err)
		}
		return size, nil
	})
}

// Pull fetches req.Ref from its registry and unpacks it under req.Name,
// owned by owner.
func (m *Images) Pull(ctx context.Context, req api.PullImageRequest, owner string, progress Progress) (*store.Image, error) {
	if err := ValidateImageName(req.Name); err != nil {
		return nil, err
	}
	var opts []name.Option
	if req.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(req.Ref, opts...)
	if err != nil {
		return nil, errdefs.Invalid("ref", "%v", err)
	}
	platform := v1.Platform{OS: "linux", Architecture: "amd64"}
	if req.Platform != "" {
		p, err := v1.ParsePlatform(req.Platform)
		if err != nil {
			return nil, errdefs.Invalid("platform", "%v", err)
		}
		platform = *p
	}
	return m.once(ctx, req.Name, func() (*store.Image, error) {
		progress("resolving " + ref.String())
		img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithPlatform(platform),
			remote.WithTransport(registryTransport(m.AllowPrivateRegistries)))
		if err != nil {
			if errors.Is(err, ErrPrivateRegistry) {
				return nil, errdefs.Invalid("ref", "pull %s: %v", ref, ErrPrivateRegistry)
			}
			// The registry's answer is not echoed: it may be any server's
			// page (the detail goes to the log).
			m.log.Info("image pull failed", "ref", ref.String(), "err", err)
			var te *transport.Error
			if errors.As(err, &te) {
				if te.StatusCode == http.StatusNotFound || te.StatusCode == http.StatusUnauthorized {
					return nil, errdefs.New(errdefs.ErrImageNotFound, "pull %s: the registry answered %d", ref, te.StatusCode)
				}
				return nil, errdefs.New(errdefs.ErrUnavailable, "pull %s: the registry answered %d", ref, te.StatusCode)
			}
			return nil, errdefs.New(errdefs.ErrUnavailable, "pull %s: the registry could not be read (not a registry, or unreachable)", ref)
		}
		return m.unpackOCI(ctx, req.Name, owner, "registry:"+ref.String(), img, progress)
	})
}

// Remove deletes the image record; inUse reports whether a sandbox still
// uses an image id, in which case the removal is refused with ErrConflict.
// The directory goes at once when unused.
func (m *Images) Remove(ctx context.Context, name string, inUse func(id string) (bool, error)) error {
	img, err := m.st.GetImage(ctx, name)
	if err != nil {
		return err
	}
	used, err := inUse(img.ID)
	if err != nil {
		return err
	}
	if used {
		return errdefs.Conflictf("image %q is used by sandboxes; delete them first", name)
	}
	if err := m.st.DeleteImage(ctx, name); err != nil {
		return err
	}
	if m.OnChange != nil {
		m.OnChange(name)
	}
	return os.RemoveAll(filepath.Join(m.dir, img.ID))
}

// GC removes image directories that neither an image record nor a sandbox
// (keep) references; at startup also the leftovers of interrupted unpacks
// and imports (dot-names), which at other times may be in progress.
func (m *Images) GC(ctx context.Context, keep map[string]bool, startup bool) error {
	imgs, err := m.st.ListImages(ctx)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		keep[img.ID] = true
	}
	des, err := os.ReadDir(m.dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if keep[de.Name()] || (!startup && strings.HasPrefix(de.Name(), ".")) {
			continue
		}
		m.log.Info("removing unused image directory", "dir", de.Name())
		if err := os.RemoveAll(filepath.Join(m.dir, de.Name())); err != nil {
			return err
		}
	}
	return nil
}
