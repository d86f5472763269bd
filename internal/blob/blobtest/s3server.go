package blobtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Server is a real S3-compatible server (versitygw, Apache-2.0) on
// loopback, for tests.
type S3Server struct {
	Endpoint             string
	AccessKey, SecretKey string

	t         *testing.T
	bin, addr string
	dir, log  string
	cmd       *exec.Cmd
}

// versitygw finds the versitygw binary: $SBX_VERSITYGW or PATH. Without it
// the test skips, unless CI=true, where it fails.
func versitygw(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SBX_VERSITYGW"), "versitygw", "/usr/local/bin/versitygw"} {
		if p == "" {
			continue
		}
		if full, err := exec.LookPath(p); err == nil {
			return full
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("versitygw is not installed (scripts/install.sh --test-deps builds it); required in CI")
	}
	t.Skip("versitygw is not installed; run scripts/install.sh --test-deps")
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// StartS3 starts versitygw (posix backend in a temp dir) on a free
// loopback port; it stops when the test ends.
func StartS3(t *testing.T) *S3Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out, _ := os.CreateTemp(t.TempDir(), "versitygw-*.log")
	out.Close()
	srv := &S3Server{Endpoint: "http://" + addr, AccessKey: "sbxtest" + randHex(4), SecretKey: randHex(16),
		t: t, bin: versitygw(t), addr: addr, dir: t.TempDir(), log: out.Name()}
	srv.Start()
	t.Cleanup(srv.Stop)
	return srv
}

// Stop kills the server: requests to it fail (connection refused) until
// Start. Its buckets and objects stay on disk.
func (srv *S3Server) Stop() {
	if srv.cmd != nil {
		_ = srv.cmd.Process.Kill()
		_ = srv.cmd.Wait()
		srv.cmd = nil
	}
}

// Start starts the server (again) on its address, with its data, and
// waits until it accepts connections.
func (srv *S3Server) Start() {
	t := srv.t
	t.Helper()
	cmd := exec.Command(srv.bin, "--port", srv.addr, "posix", srv.dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+srv.AccessKey, "ROOT_SECRET_KEY="+srv.SecretKey)
	out, err := os.OpenFile(srv.log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	srv.cmd = cmd
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", srv.addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(srv.log)
	t.Fatalf("versitygw did not start: %s", b)
}

// CreateBucket creates a new bucket and returns its name.
func (srv *S3Server) CreateBucket(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := "sbx-" + randHex(6)
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")))
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(srv.Endpoint); o.UsePathStyle = true })
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	return name
}
