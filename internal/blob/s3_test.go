package blob_test

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

	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/blob/blobtest"
)

// S3Server is a real S3-compatible server (versitygw) for tests.
type s3Server struct {
	endpoint, access, secret string
}

// versitygw finds the versitygw binary: $SBX_VERSITYGW, PATH, or where
// scripts/install.sh puts it. Without it the S3 tests skip, unless CI=true.
func versitygw(t *testing.T) string {
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

func startS3(t *testing.T) *s3Server {
	t.Helper()
	bin := versitygw(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv := &s3Server{endpoint: "http://" + addr, access: "sbxtest" + randHex(4), secret: randHex(16)}
	cmd := exec.Command(bin, "--port", addr, "posix", t.TempDir())
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+srv.access, "ROOT_SECRET_KEY="+srv.secret)
	out, _ := os.CreateTemp(t.TempDir(), "versitygw-*.log")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return srv
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(out.Name())
	t.Fatalf("versitygw did not start: %s", b)
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// bucket creates a new bucket and returns a store on it.
func (srv *s3Server) bucket(t *testing.T) *blob.S3 {
	t.Helper()
	ctx := context.Background()
	name := "sbx-" + randHex(6)
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(srv.access, srv.secret, "")))
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(srv.endpoint); o.UsePathStyle = true })
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	s, err := blob.OpenS3(ctx, blob.S3Config{Bucket: name, Prefix: "blobs/", Endpoint: srv.endpoint, Region: "us-east-1",
		AccessKey: srv.access, SecretKey: srv.secret})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	srv := startS3(t)
	blobtest.Run(t, func(t *testing.T) blob.Store { return srv.bucket(t) })
}

func TestS3MissingBucket(t *testing.T) {
	srv := startS3(t)
	_, err := blob.OpenS3(context.Background(), blob.S3Config{Bucket: "no-such-bucket", Endpoint: srv.endpoint,
		Region: "us-east-1", AccessKey: srv.access, SecretKey: srv.secret})
	if err == nil {
		t.Fatal("opened a missing bucket")
	}
}

func TestParseS3URL(t *testing.T) {
	c, err := blob.ParseS3URL("s3://bkt/some/prefix?endpoint=http://127.0.0.1:9000")
	if err != nil || c.Bucket != "bkt" || c.Prefix != "some/prefix/" || c.Endpoint != "http://127.0.0.1:9000" || c.Region != "us-east-1" {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []string{"http://x", "s3://", "bkt"} {
		if _, err := blob.ParseS3URL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
