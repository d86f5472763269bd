package delivery

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

type tentry struct {
	name, link string
	typ        byte
	data       string
	mtime      time.Time
	uname      string
}

func tarOf(t *testing.T, ents []tentry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o640, Uid: 1000, Gid: 1000, Uname: e.uname, ModTime: e.mtime, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	return buf.Bytes()
}

func pack(t *testing.T, limit int64, srcs ...struct {
	path, typ string
	tar       []byte
}) ([]byte, []File, error) {
	t.Helper()
	p, err := NewPacker(t.TempDir(), limit)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, s := range srcs {
		if err := p.Add(s.path, s.typ, bytes.NewReader(s.tar)); err != nil {
			return nil, nil, err
		}
	}
	var out bytes.Buffer
	files, err := p.Write(&out)
	return out.Bytes(), files, err
}

type src = struct {
	path, typ string
	tar       []byte
}

// TestArchiveReproducible: the same files make the same bytes, whatever
// their times, owner names and the order they were read in; a changed
// byte of a file changes the archive.
func TestArchiveReproducible(t *testing.T) {
	t1, t2 := time.Unix(1700000000, 5), time.Unix(1800000000, 7)
	a := []tentry{
		{name: "sub/", typ: tar.TypeDir, mtime: t1},
		{name: "sub/b.txt", typ: tar.TypeReg, data: "bee", mtime: t1, uname: "alice"},
		{name: "a.txt", typ: tar.TypeReg, data: "ay", mtime: t1},
		{name: "link", typ: tar.TypeSymlink, link: "/etc/passwd", mtime: t1},
	}
	b := []tentry{a[2], a[3], a[0], a[1]}
	for i := range b {
		b[i].mtime = t2
		b[i].uname = "bob"
	}
	file := tarOf(t, []tentry{{name: "patch.diff", typ: tar.TypeReg, data: "+x", mtime: t1}})
	out1, files1, err := pack(t, 0, src{"/workspace/out", "dir", tarOf(t, a)}, src{"/workspace/patch.diff", "file", file})
	if err != nil {
		t.Fatal(err)
	}
	out2, _, err := pack(t, 0, src{"/workspace/patch.diff", "file", file}, src{"/workspace/out", "dir", tarOf(t, b)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out1, out2) {
		t.Fatalf("same files, different archives (%d and %d bytes)", len(out1), len(out2))
	}
	var names []string
	for _, f := range files1 {
		names = append(names, f.Name)
	}
	if got := strings.Join(names, ","); got != "workspace/out/a.txt,workspace/out/sub/b.txt,workspace/patch.diff" {
		t.Fatalf("files: %s", got)
	}
	sum := sha256.Sum256([]byte("bee"))
	if files1[1].SHA256 != hex.EncodeToString(sum[:]) || files1[1].Size != 3 {
		t.Fatalf("digest of b.txt: %+v", files1[1])
	}
	// What the archive holds: sorted names, Epoch times, owners and modes
	// kept, the symlink a link.
	zr, _ := zstd.NewReader(bytes.NewReader(out1))
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(Epoch) || h.Uid != 1000 || h.Mode != 0o640 || h.Uname != "" {
			t.Fatalf("%s: mtime %v uid %d mode %o uname %q", h.Name, h.ModTime, h.Uid, h.Mode, h.Uname)
		}
		if h.Name == "workspace/out/link" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc/passwd") {
			t.Fatalf("symlink not kept as a link: %+v", h)
		}
		got = append(got, h.Name)
	}
	if s := strings.Join(got, ","); s != "workspace/out/a.txt,workspace/out/link,workspace/out/sub/,workspace/out/sub/b.txt,workspace/patch.diff" {
		t.Fatalf("entries: %s", s)
	}
	c := append([]tentry(nil), a...)
	c[2].data = "az"
	out3, _, _ := pack(t, 0, src{"/workspace/out", "dir", tarOf(t, c)}, src{"/workspace/patch.diff", "file", file})
	if bytes.Equal(out1, out3) {
		t.Fatal("a changed file did not change the archive")
	}
}

// TestArchiveRefusesEscapes: an entry of a path's stream that is absolute
// or climbs out of the path is refused (a hostile agent's stream).
func TestArchiveRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../etc/passwd", "/etc/passwd", "a/../../x", "./a"} {
		_, _, err := pack(t, 0, src{"/workspace/out", "dir", tarOf(t, []tentry{{name: name, typ: tar.TypeReg, data: "x"}})})
		if err == nil || !strings.Contains(err.Error(), "not a clean relative name") {
			t.Errorf("%q: %v", name, err)
		}
	}
}

// TestArchiveRefusesEntriesBeneathLinks: a stream with a symlink and an
// entry beneath it (which the agent never sends: it does not walk through
// links) is refused, so that extracting the archive cannot write through
// the link.
func TestArchiveRefusesEntriesBeneathLinks(t *testing.T) {
	_, _, err := pack(t, 0, src{"/w", "dir", tarOf(t, []tentry{
		{name: "etc", typ: tar.TypeSymlink, link: "/etc"},
		{name: "etc/cron.d/x", typ: tar.TypeReg, data: "* * * * * root sh"},
	})})
	if err == nil || !strings.Contains(err.Error(), `"w/etc/cron.d/x" lies beneath the symlink "w/etc"`) {
		t.Fatalf("want a refusal, got %v", err)
	}
}

func TestArchiveLimit(t *testing.T) {
	big := strings.Repeat("x", 10000)
	_, _, err := pack(t, 5000, src{"/w", "dir", tarOf(t, []tentry{{name: "f", typ: tar.TypeReg, data: big}})})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	}
}

// chain makes n signed records with their archives.
func chain(t *testing.T, key ed25519.PrivateKey, n int) ([][]byte, [][]byte) {
	t.Helper()
	var envs, archives [][]byte
	prev := ""
	for i := 0; i < n; i++ {
		out, files, err := pack(t, 0, src{"/w/f", "file", tarOf(t, []tentry{{name: "f", typ: tar.TypeReg, data: strings.Repeat("data", i+1)}})})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(out)
		pred := &Predicate{Delivery: "dlv_" + string(rune('a'+i)), Seq: int64(i + 1), Previous: prev,
			Archive: Archive{Name: "x.tar.zst", MediaType: MediaType, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(out)), Files: len(files)}}
		env, err := Sign(context.Background(), key, pred, files)
		if err != nil {
			t.Fatal(err)
		}
		prev = DigestOf(env)
		envs = append(envs, env)
		archives = append(archives, out)
	}
	return envs, archives
}

func bundleOf(t *testing.T, envs [][]byte, archive []byte) []byte {
	var b bytes.Buffer
	var env struct{ Payload string }
	json.Unmarshal(envs[len(envs)-1], &env)
	p, _ := base64.StdEncoding.DecodeString(env.Payload)
	var st statementJSON
	json.Unmarshal(p, &st)
	if err := WriteBundle(&b, st.Predicate.Delivery, envs, bytes.NewReader(archive), int64(len(archive))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestVerify: a good bundle verifies; each kind of tampering fails with
// its own error naming what failed.
func TestVerify(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pub := key.Public().(ed25519.PublicKey)
	envs, archives := chain(t, key, 3)
	rec, err := VerifyBundle(bytes.NewReader(bundleOf(t, envs, archives[2])), pub)
	if err != nil {
		t.Fatalf("good bundle: %v", err)
	}
	if rec.Predicate.Delivery != "dlv_c" || len(rec.Files) != 1 || rec.Files[0].Name != "w/f" {
		t.Fatalf("record: %+v", rec)
	}

	flip := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		return c
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherEnvs, _ := chain(t, other, 3)
	// A record whose payload was altered (re-encoded, so that it parses).
	var env map[string]any
	json.Unmarshal(envs[1], &env)
	payload, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
	env["payload"] = base64.StdEncoding.EncodeToString(bytes.Replace(payload, []byte(`"seq":2`), []byte(`"seq":7`), 1))
	edited, _ := json.Marshal(env)

	cases := []struct {
		name    string
		envs    [][]byte
		archive []byte
		want    error
		msg     string
	}{
		{"archive byte flipped", envs, flip(archives[2], len(archives[2])/2), ErrTamperedArchive, "delivery dlv_c: archive altered"},
		{"archive of another delivery", envs, archives[1], ErrTamperedArchive, "the record says"},
		{"record byte flipped", [][]byte{envs[0], flip(envs[1], bytes.Index(envs[1], []byte(`"sig":"`))+10), envs[2]}, archives[2], ErrTamperedRecord, "record 2 of the chain: record altered"},
		{"record payload edited", [][]byte{envs[0], edited, envs[2]}, archives[2], ErrTamperedRecord, "record 2 of the chain: record altered"},
		{"middle record deleted", [][]byte{envs[0], envs[2]}, archives[2], ErrBrokenChain, "record 2 (delivery dlv_c): chain broken"},
		{"first record deleted", envs[1:], archives[2], ErrBrokenChain, "the records before it are missing"},
		{"records reordered", [][]byte{envs[1], envs[0], envs[2]}, archives[2], ErrBrokenChain, "record 1 (delivery dlv_b)"},
		{"record signed by another key", [][]byte{envs[0], otherEnvs[1], envs[2]}, archives[2], ErrWrongKey, "record 2 of the chain: not signed by the given key"},
	}
	for _, c := range cases {
		_, err := VerifyBundle(bytes.NewReader(bundleOf(t, c.envs, c.archive)), pub)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: want %v (%q), got %v", c.name, c.want, c.msg, err)
		}
	}
	// The right bundle checked with another key.
	if _, err := VerifyBundle(bytes.NewReader(bundleOf(t, envs, archives[2])), other.Public().(ed25519.PublicKey)); !errors.Is(err, ErrWrongKey) {
		t.Errorf("wrong key: %v", err)
	}
}

func TestKeyMadeOnceAndPrivate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "delivery.key")
	k1, err := LoadOrCreateKey(p)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
	k2, err := LoadOrCreateKey(p)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("key not kept: %v", err)
	}
	pub, err := ParsePublicKey(PublicKeyPEM(k1.Public().(ed25519.PublicKey)))
	if err != nil || !pub.Equal(k1.Public()) {
		t.Fatalf("public key round trip: %v", err)
	}
	// Never through a symlink.
	l := filepath.Join(t.TempDir(), "link.key")
	os.Symlink(p, l)
	if _, err := LoadOrCreateKey(l); err == nil {
		t.Fatal("a symlinked key file was followed")
	}
}
