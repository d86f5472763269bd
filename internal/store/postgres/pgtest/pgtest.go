// Package pgtest starts a throwaway PostgreSQL server for tests: Debian's
// postgresql package (initdb and postgres from /usr/lib/postgresql/*/bin),
// a cluster in a temporary directory, reached only through a Unix socket in
// that directory (no TCP port), fsync off. Under root the server runs as
// the "postgres" user (or "nobody"), since PostgreSQL refuses to run as
// root.
//
// A test package calls Main from its TestMain (or Stop after its own
// m.Run), then URL for each database it needs. Without PostgreSQL installed, URL skips the test, or fails it
// when CI=true (the CI installs it: scripts/install.sh --test-deps).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartTimeout bounds initdb plus the server's start.
const StartTimeout = 2 * time.Minute

var (
	mu      sync.Mutex
	started bool
	srv     *server
	srvErr  error
	schemas atomic.Int64
)

type server struct {
	dir  string
	bin  string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
	// url reaches the "postgres" database as the superuser "sbx".
	url string
}

// Main runs the package's tests and then stops the server, if one was
// started. Call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Stop stops the server, if one was started, and removes its files. A
// TestMain that runs m.Run itself calls it after.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if srv != nil {
		srv.stop()
		srv = nil
	}
}

// Binaries returns the directory that holds initdb and postgres, the
// newest installed version's; an error when there is none.
func Binaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL is not installed (apt-get install postgresql)")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// URL returns the URL of a fresh, empty schema of the test server (a
// postgres:// URL whose search_path is that schema), starting the server
// on first use.
func URL(t testing.TB) string {
	t.Helper()
	s := get(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s.url + "&search_path=" + name
}

// ServerURL is the URL of the test server's "postgres" database as its
// superuser, starting the server on first use.
func ServerURL(t testing.TB) string {
	t.Helper()
	return get(t).url
}

func get(t testing.TB) *server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !started {
		started = true
		srv, srvErr = start()
	}
	if srvErr != nil {
		if os.Getenv("CI") == "true" || !errors.Is(srvErr, errNotInstalled) {
			t.Fatalf("pgtest: %v", srvErr)
		}
		t.Skipf("pgtest: %v", srvErr)
	}
	return srv
}

var errNotInstalled = errors.New("not installed")

func start() (*server, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotInstalled, err)
	}
	dir, err := os.MkdirTemp("", "sbx-pg-")
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "sbx", "--auth=trust",
		"--no-locale", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	s := &server{dir: dir, bin: bin, cred: cred,
		url: "postgres://sbx@/postgres?host=" + dir + "&sslmode=disable"}
	if err := s.run(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// run starts postgres on the cluster in s.dir and waits, within
// StartTimeout, until it answers.
func (s *server) run() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	// The server dies with the test process (SIGQUIT: immediate shutdown).
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"), "-k", s.dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() { _ = cmd.Wait(); close(done) }()
	for {
		conn, err := pgx.Connect(ctx, s.url)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("postgres exited at start: %s", log)
		case <-ctx.Done():
			s.kill()
			return fmt.Errorf("postgres did not answer within %v: %v", StartTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Server is a PostgreSQL server of one test alone, which it can stop and
// start again (an outage) with its records kept.
type Server struct {
	s *server
}

// NewServer starts a server for t alone (skipped or failed as URL is,
// when PostgreSQL is not installed) and stops it, removing its files, when
// t ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s, err := start()
	if err != nil {
		if os.Getenv("CI") == "true" || !errors.Is(err, errNotInstalled) {
			t.Fatalf("pgtest: %v", err)
		}
		t.Skipf("pgtest: %v", err)
	}
	t.Cleanup(s.stop)
	return &Server{s: s}
}

// URL is the URL of the server's "postgres" database as its superuser.
func (s *Server) URL() string { return s.s.url }

// Down stops the server (a fast shutdown: what was committed is kept):
// its clients' connections break and new ones are refused until Up.
func (s *Server) Down(t testing.TB) {
	t.Helper()
	s.s.kill(syscall.SIGINT)
}

// Up starts the stopped server again on the same files.
func (s *Server) Up(t testing.TB) {
	t.Helper()
	if err := s.s.run(); err != nil {
		t.Fatalf("pgtest: start again: %v", err)
	}
}

// runAs is the credential the server runs with: nil (this process's) unless
// it is root.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New(`running as root, and there is neither a "postgres" nor a "nobody" user to run PostgreSQL as`)
}

// kill stops the server process, if it runs: sig (SIGQUIT, an immediate
// shutdown, by default; SIGINT, a fast one that disconnects its clients
// and writes what they committed), SIGKILL after 10 s.
func (s *server) kill(sig ...syscall.Signal) {
	select {
	case <-s.done:
		return
	default:
	}
	sg := syscall.SIGQUIT
	if len(sig) > 0 {
		sg = sig[0]
	}
	_ = s.cmd.Process.Signal(sg)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

func (s *server) stop() {
	s.kill()
	if !strings.HasPrefix(s.dir, os.TempDir()) {
		return
	}
	os.RemoveAll(s.dir)
}
