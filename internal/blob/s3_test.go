package blob_test

import (
	"context"
	"testing"

	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/blob/blobtest"
)

// bucket creates a new bucket and returns a store on it.
func bucket(t *testing.T, srv *blobtest.S3Server) *blob.S3 {
	t.Helper()
	name := srv.CreateBucket(t)
	s, err := blob.OpenS3(context.Background(), blob.S3Config{Bucket: name, Prefix: "blobs/", Endpoint: srv.Endpoint,
		Region: "us-east-1", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	srv := blobtest.StartS3(t)
	blobtest.Run(t, func(t *testing.T) blob.Store { return bucket(t, srv) })
}

func TestS3MissingBucket(t *testing.T) {
	srv := blobtest.StartS3(t)
	_, err := blob.OpenS3(context.Background(), blob.S3Config{Bucket: "no-such-bucket", Endpoint: srv.Endpoint,
		Region: "us-east-1", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
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
