package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within runs f and fails the test if it has not returned after d: the
// hangs these tests look for would otherwise hang the test binary.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still waiting after %s: the call hangs", d)
	}
}

func TestReadFifoRefused(t *testing.T) {
	cl := startAgent(t, 0)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_, rc, err := cl.Open(ctx, fifo, 0)
		if err == nil {
			rc.Close()
		}
		if !isKind(err, FailNotRegular) {
			t.Errorf("open of a FIFO: %v, want kind %s", err, FailNotRegular)
		}
	})
	// A FIFO inside an archived directory is an entry, never opened.
	within(t, 10*time.Second, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_, rc, err := cl.TarOut(ctx, filepath.Dir(fifo), 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		hdr, err := tr.Next()
		if err != nil || hdr.Typeflag != tar.TypeFifo {
			t.Errorf("archive of a dir with a FIFO: %+v %v", hdr, err)
		}
	})
}

// stuckAgent accepts connections and reads from them but never answers,
// like an agent stopped with SIGSTOP (the kernel still queues connects).
func stuckAgent(t *testing.T, read bool) string {
	sock := filepath.Join(t.TempDir(), "stuck.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			if read {
				go io.Copy(io.Discard, c)
			}
		}
	}()
	return sock
}

func TestStalledAgentTimesOut(t *testing.T) {
	for _, read := range []bool{true, false} {
		cl := NewClient(stuckAgent(t, read), 0)
		cl.Stall, cl.Work = 300*time.Millisecond, 600*time.Millisecond
		ctx := context.Background()
		// Each call stalls for well under a second; the bound is loose so
		// that a loaded machine (the upload below copies megabytes) does
		// not pass it, while a hang (no deadline) still does.
		within(t, 60*time.Second, func() {
			if _, _, err := cl.Open(ctx, "/etc/hostname", 0); !errors.Is(err, ErrStalled) {
				t.Errorf("open: %v, want ErrStalled", err)
			}
			if _, _, err := cl.TarOut(ctx, "/etc", 0); !errors.Is(err, ErrStalled) {
				t.Errorf("tar_out: %v, want ErrStalled", err)
			}
			if err := cl.Ping(ctx); !errors.Is(err, ErrStalled) {
				t.Errorf("ping: %v, want ErrStalled", err)
			}
			if _, err := cl.List(ctx, "/"); !errors.Is(err, ErrStalled) {
				t.Errorf("list: %v, want ErrStalled", err)
			}
			// An upload larger than the socket's buffers (a few hundred
			// KiB for a Unix socket): the writes stall when the agent does
			// not read, the answer when it does.
			big := bytes.NewReader(make([]byte, 8<<20))
			if _, err := cl.WriteFile(ctx, "/tmp/x", 0, big); !errors.Is(err, ErrStalled) {
				t.Errorf("write (agent reads=%v): %v, want ErrStalled", read, err)
			}
			if _, err := cl.Start(ctx, &Request{Cmd: []string{"true"}}, nil); !errors.Is(err, ErrStalled) {
				t.Errorf("exec start: %v, want ErrStalled", err)
			}
		})
	}
}

// TestSilentExecHasNoDeadline: the stall deadline covers the agent, not
// a process that prints nothing for longer.
func TestSilentExecHasNoDeadline(t *testing.T) {
	cl := startAgent(t, 0)
	cl.Stall = time.Second // the started frame must come within it, even on a loaded machine
	_, _, ex := run(t, cl, &Request{Cmd: []string{"sh", "-c", "sleep 3; echo done"}, Env: env}, nil)
	if ex.ExitCode != 0 {
		t.Fatalf("%+v", ex)
	}
}

func tarOf(t *testing.T, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Linkname))
			body := h.Linkname
			h.Linkname = ""
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(body))
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	return &b
}

func TestTarInNeverFollowsSymlinks(t *testing.T) {
	cl := startAgent(t, 0)
	ctx := context.Background()
	outside := t.TempDir() // stands for /etc: what a link points out to
	dst := filepath.Join(t.TempDir(), "dst")
	// The archive makes lnk -> outside, then writes lnk/x.
	evil := tarOf(t,
		&tar.Header{Name: "lnk", Typeflag: tar.TypeSymlink, Linkname: outside, Mode: 0o777},
		&tar.Header{Name: "lnk/x", Typeflag: tar.TypeReg, Linkname: "pwned", Mode: 0o644})
	if _, err := cl.TarIn(ctx, dst, evil); !isKind(err, FailSymlink) {
		t.Errorf("tar through its own symlink: %v, want kind %s", err, FailSymlink)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Error("a tar entry was written through a symlink the tar made")
	}
	// A symlink the sandbox has beneath the target is not followed either.
	os.Symlink(outside, filepath.Join(dst, "pre"))
	evil = tarOf(t, &tar.Header{Name: "pre/y", Typeflag: tar.TypeReg, Linkname: "pwned", Mode: 0o644})
	if _, err := cl.TarIn(ctx, dst, evil); !isKind(err, FailSymlink) {
		t.Errorf("tar through an existing symlink: %v, want kind %s", err, FailSymlink)
	}
	if _, err := os.Stat(filepath.Join(outside, "y")); err == nil {
		t.Error("a tar entry was written through a symlink in the target")
	}
	// A directory entry over a symlink, and a hard link to a file outside.
	evil = tarOf(t, &tar.Header{Name: "pre", Typeflag: tar.TypeDir, Mode: 0o700})
	if _, err := cl.TarIn(ctx, dst, evil); !isKind(err, FailSymlink) {
		t.Errorf("directory over a symlink: %v", err)
	}
	if fi, _ := os.Stat(outside); fi.Mode().Perm() == 0o700 {
		t.Error("a directory entry chmodded through a symlink")
	}
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s"), 0o600)
	evil = tarOf(t, &tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "pre/secret"})
	if _, err := cl.TarIn(ctx, dst, evil); !isKind(err, FailSymlink) {
		t.Errorf("hard link through a symlink: %v", err)
	}
	// Plain archives still extract, with modes.
	ok := tarOf(t,
		&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750},
		&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Linkname: "hello", Mode: 0o640},
		&tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "f"},
		&tar.Header{Name: "d/h", Typeflag: tar.TypeLink, Linkname: "d/f"})
	res, err := cl.TarIn(ctx, dst, ok)
	if err != nil || res.Files != 4 || res.Bytes != 5 {
		t.Fatalf("%+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "d", "h")); string(b) != "hello" {
		t.Fatalf("hard link: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "d", "f")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dst, "d")); fi.Mode().Perm() != 0o750 {
		t.Fatalf("dir mode %v", fi.Mode())
	}
}

// TestReservedResolved: a path whose text is fine but which resolves,
// through a symlink the sandbox made, into a reserved place is refused.
func TestReservedResolved(t *testing.T) {
	cl := startAgent(t, 0)
	ctx := context.Background()
	reserved := t.TempDir() // stands for /.sbx
	saved := ReservedPaths
	ReservedPaths = append(slicesClone(saved), reserved)
	t.Cleanup(func() { ReservedPaths = saved })
	os.WriteFile(filepath.Join(reserved, "agent.conf"), []byte("secret"), 0o600)
	dir := t.TempDir()
	lnk := filepath.Join(dir, "lnk")
	os.Symlink(reserved, lnk)

	if _, err := cl.WriteFile(ctx, filepath.Join(lnk, "x"), 0, strings.NewReader("x")); !isKind(err, FailReserved) {
		t.Errorf("write through a link: %v, want kind %s", err, FailReserved)
	}
	if _, err := cl.TarIn(ctx, filepath.Join(lnk, "sub"), tarOf(t, &tar.Header{Name: "y", Typeflag: tar.TypeReg, Linkname: "y", Mode: 0o644})); !isKind(err, FailReserved) {
		t.Errorf("tar_in into a link: %v, want kind %s", err, FailReserved)
	}
	for _, p := range []string{"x", "sub"} {
		if _, err := os.Lstat(filepath.Join(reserved, p)); err == nil {
			t.Errorf("%s was created in the reserved place", p)
		}
	}
	if _, _, err := cl.Open(ctx, filepath.Join(lnk, "agent.conf"), 0); !isKind(err, FailReserved) {
		t.Errorf("read through a link: %v, want kind %s", err, FailReserved)
	}
	os.Symlink(filepath.Join(reserved, "agent.conf"), filepath.Join(dir, "flnk"))
	if _, _, err := cl.Open(ctx, filepath.Join(dir, "flnk"), 0); !isKind(err, FailReserved) {
		t.Errorf("read of a link to a reserved file: %v", err)
	}
	if _, err := cl.List(ctx, lnk); !isKind(err, FailReserved) {
		t.Errorf("list through a link: %v", err)
	}
	if _, _, err := cl.TarOut(ctx, filepath.Join(lnk, "agent.conf"), 0); !isKind(err, FailReserved) {
		t.Errorf("tar_out through a link: %v", err)
	}
	if err := cl.Remove(ctx, filepath.Join(lnk, "agent.conf"), false); !isKind(err, FailReserved) {
		t.Errorf("remove through a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(reserved, "agent.conf")); err != nil {
		t.Error("the reserved file was removed")
	}
	// Removing the link itself is fine: it is not followed.
	if err := cl.Remove(ctx, lnk, true); err != nil {
		t.Errorf("remove the link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(reserved, "agent.conf")); err != nil {
		t.Error("removing a link removed what it points to")
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// makeSparse makes a file of size bytes holding data at off, holes
// elsewhere.
func makeSparse(t *testing.T, p string, size, off int64, data string) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		t.Fatal(err)
	}
}

func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestSparseArchive(t *testing.T) {
	cl := startAgent(t, 0)
	ctx := context.Background()
	src := t.TempDir()
	const size = 1 << 30
	makeSparse(t, filepath.Join(src, "big"), size, 512<<20, "hello")
	// Allocated zeros (written, not a hole) become holes too.
	f, _ := os.OpenFile(filepath.Join(src, "big"), os.O_WRONLY, 0)
	f.WriteAt(make([]byte, 1<<20), 100<<20)
	f.Close()
	os.WriteFile(filepath.Join(src, "small"), []byte("dense"), 0o644)
	// gVisor makes st_blocks up from the size: there, what a file takes
	// on disk cannot be checked, but the archive's size still can.
	holesSeen := allocated(t, filepath.Join(src, "big")) <= 8<<20

	res, rc, err := cl.TarOut(ctx, src, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if res.Type != "dir" || res.Estimate > 4<<20 {
		t.Fatalf("%+v", res)
	}
	arch, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(arch) > 64<<10 {
		t.Fatalf("the archive of a 1 GiB sparse file is %d bytes", len(arch))
	}
	// Go's reader sees the real name, size and bytes.
	tr := tar.NewReader(bytes.NewReader(arch))
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "big" || hdr.Size != size {
		t.Fatalf("%+v %v", hdr, err)
	}
	buf := make([]byte, 1<<20)
	var pos int64
	found := false
	for {
		n, err := tr.Read(buf)
		if i := bytes.Index(buf[:n], []byte("hello")); i >= 0 {
			found = pos+int64(i) == 512<<20
		}
		pos += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if pos != size || !found {
		t.Fatalf("read %d bytes, data at its place: %v", pos, found)
	}
	if hdr, err = tr.Next(); err != nil || hdr.Name != "small" {
		t.Fatalf("%+v %v", hdr, err)
	}

	// tar_in keeps the holes.
	dst := filepath.Join(t.TempDir(), "dst")
	if _, err := cl.TarIn(ctx, dst, bytes.NewReader(arch)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dst, "big"))
	if err != nil || fi.Size() != size {
		t.Fatalf("%v %v", fi, err)
	}
	if a := allocated(t, filepath.Join(dst, "big")); holesSeen && a > 1<<20 {
		t.Fatalf("the extracted sparse file takes %d bytes", a)
	}
	g, _ := os.Open(filepath.Join(dst, "big"))
	got := make([]byte, 5)
	g.ReadAt(got, 512<<20)
	g.Close()
	if string(got) != "hello" {
		t.Fatalf("%q", got)
	}

	// Other readers: GNU tar and Python's tarfile, when installed.
	archPath := filepath.Join(t.TempDir(), "a.tar")
	os.WriteFile(archPath, arch, 0o644)
	if _, err := exec.LookPath("tar"); err == nil {
		out := t.TempDir()
		if b, err := exec.Command("tar", "-xf", archPath, "-C", out).CombinedOutput(); err != nil {
			t.Fatalf("GNU tar: %v %s", err, b)
		}
		if fi, err := os.Stat(filepath.Join(out, "big")); err != nil || fi.Size() != size {
			t.Fatalf("GNU tar extracted %v %v", fi, err)
		}
	}
	if _, err := exec.LookPath("python3"); err == nil {
		out := t.TempDir()
		script := "import tarfile,sys; t=tarfile.open(sys.argv[1]); t.extractall(sys.argv[2]); " +
			"f=open(sys.argv[2]+'/big','rb'); f.seek(512<<20); print(f.read(5).decode())"
		b, err := exec.Command("python3", "-c", script, archPath, out).CombinedOutput()
		if err != nil || strings.TrimSpace(string(b)) != "hello" {
			t.Fatalf("python tarfile: %v %s", err, b)
		}
		if a := allocated(t, filepath.Join(out, "big")); holesSeen && a > 1<<20 {
			t.Fatalf("python extracted a file of %d allocated bytes", a)
		}
	}
}

func TestScanZeros(t *testing.T) {
	data := make([]byte, 10*sparseBlock+100)
	data[sparseBlock+1] = 1   // block 1
	data[2*sparseBlock] = 1   // block 2: merged with 1
	data[9*sparseBlock+5] = 1 // block 9
	data[len(data)-1] = 1     // the short last block
	ext, err := scanZeros(bytes.NewReader(data), 0, int64(len(data)), nil, make([]byte, 3*sparseBlock), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []extent{{sparseBlock, 2 * sparseBlock}, {9 * sparseBlock, sparseBlock + 100}}
	if len(ext) != len(want) || ext[0] != want[0] || ext[1] != want[1] {
		t.Fatalf("%v, want %v", ext, want)
	}
	many := make([]extent, 0, 3*maxExtents)
	for i := int64(0); i < 3*maxExtents; i++ {
		many = append(many, extent{i * 3 * sparseBlock, sparseBlock})
	}
	if c := coarsen(many); len(c) > maxExtents || c[0].off != 0 || c[len(c)-1].end() != many[len(many)-1].end() {
		t.Fatalf("coarsened to %d extents, %v..%v", len(c), c[0], c[len(c)-1])
	}
}

func TestMaxBytes(t *testing.T) {
	cl := startAgent(t, 0)
	ctx := context.Background()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("data"), 25<<10), 0o644)
	if _, _, err := cl.Open(ctx, filepath.Join(dir, "f"), 1000); !isKind(err, FailTooLarge) {
		t.Errorf("read over max_bytes: %v", err)
	}
	if _, _, err := cl.TarOut(ctx, dir, 10<<10); !isKind(err, FailTooLarge) {
		t.Errorf("archive over max_bytes: %v", err)
	}
	st, rc, err := cl.Open(ctx, filepath.Join(dir, "f"), 100<<10)
	if err != nil || st.Size != 100<<10 {
		t.Fatalf("%+v %v", st, err)
	}
	rc.Close()
	// An archive that grows past max_bytes while it streams is cut.
	lw := &limitWriter{w: io.Discard, max: 10}
	if _, err := lw.Write(make([]byte, 11)); !errors.Is(err, errArchiveTooLarge) {
		t.Errorf("limitWriter: %v", err)
	}
}

// TestSortedNamesTwice: a tar_out walks its top directory twice (sizing,
// then writing); the second read of the same fd must see every entry (an
// archive of / once came out empty).
func TestSortedNamesTwice(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "b"), nil, 0o644)
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := 0; i < 2; i++ {
		names, err := sortedNames(int(d.Fd()), dir)
		if err != nil || len(names) != 2 {
			t.Fatalf("walk %d: %v %v", i+1, names, err)
		}
	}
}

// TestSpecialModeBitsKept: a file written with mode 04755 (sbx cp of a
// setuid program) or a tar entry with setuid, setgid or sticky bits keeps
// them inside the sandbox, as an image's su or ping does. (The host side
// of sbx cp drops them on purpose: docs/api.md.)
func TestSpecialModeBitsKept(t *testing.T) {
	cl := startAgent(t, 0)
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "prog")
	st, err := cl.WriteFile(ctx, p, 0o4755, strings.NewReader("#!/bin/sh\n"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode() != fs.ModeSetuid|0o755 || st.Mode != 0o4755 {
		t.Errorf("write with mode 04755: %v (answered %o), %v; want setuid kept", fi.Mode(), st.Mode, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "shared/", Typeflag: tar.TypeDir, Mode: 0o1777})
	tw.WriteHeader(&tar.Header{Name: "shared/suid", Typeflag: tar.TypeReg, Size: 1, Mode: 0o4755})
	tw.Write([]byte("x"))
	tw.WriteHeader(&tar.Header{Name: "shared/sgid", Typeflag: tar.TypeReg, Size: 1, Mode: 0o2711})
	tw.Write([]byte("y"))
	tw.Close()
	dst := filepath.Join(dir, "in")
	if _, err := cl.TarIn(ctx, dst, &buf); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{
		"shared":      fs.ModeDir | fs.ModeSticky | 0o777,
		"shared/suid": fs.ModeSetuid | 0o755,
		"shared/sgid": fs.ModeSetgid | 0o711,
	} {
		if fi, err := os.Stat(filepath.Join(dst, name)); err != nil || fi.Mode() != want {
			t.Errorf("tar entry %s: %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
}
