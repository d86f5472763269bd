package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Config locates a bucket of an S3-compatible object store.
type S3Config struct {
	// Bucket must exist.
	Bucket string
	// Prefix is prepended to every key ("sbx/" puts blobs under sbx/sha256/).
	Prefix string
	// Endpoint is the store's URL ("" = AWS for Region); path-style
	// addressing is used with an endpoint, as most S3-compatible servers
	// (MinIO, versitygw, Ceph) expect.
	Endpoint string
	Region   string
	// AccessKey and SecretKey, when set, are static credentials; otherwise
	// the AWS SDK's default chain ($AWS_ACCESS_KEY_ID, ...) applies.
	AccessKey, SecretKey string
}

// ParseS3URL parses s3://bucket[/prefix][?endpoint=URL&region=R].
func ParseS3URL(raw string) (S3Config, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return S3Config{}, fmt.Errorf("blob store %q: want s3://bucket[/prefix][?endpoint=URL&region=R]", raw)
	}
	c := S3Config{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/"), Endpoint: u.Query().Get("endpoint"), Region: u.Query().Get("region")}
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	return c, nil
}

// S3 is a Store in an S3 bucket, one object per blob at
// <prefix>sha256/<first 2 hex>/<hex>. A PUT is atomic (an object appears
// whole or not at all), so Put is durable at once and Flush only checks.
type S3 struct {
	cfg S3Config
	c   *s3.Client
}

var _ Store = (*S3)(nil)

// OpenS3 connects to the bucket and checks that it answers.
func OpenS3(ctx context.Context, cfg S3Config) (*S3, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(cfg.Region)}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true
		}
	})
	s := &S3{cfg: cfg, c: client}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)}); err != nil {
		return nil, fmt.Errorf("s3 bucket %s at %s: %w", cfg.Bucket, s.endpoint(), err)
	}
	return s, nil
}

func (s *S3) endpoint() string {
	if s.cfg.Endpoint != "" {
		return s.cfg.Endpoint
	}
	return "aws:" + s.cfg.Region
}

// Name implements Store.
func (s *S3) Name() string { return "s3:" + s.endpoint() + "/" + s.cfg.Bucket + "/" + s.cfg.Prefix }

func (s *S3) key(d Digest) string {
	h := d.Hex()
	return s.cfg.Prefix + "sha256/" + h[:2] + "/" + h
}

func isNotFound(err error) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

// Put implements Store; the blob is verified against d before upload.
func (s *S3) Put(ctx context.Context, d Digest, encoded []byte) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if _, err := Decode(d, encoded); err != nil {
		return err
	}
	_, err := s.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(d)),
		Body: bytes.NewReader(encoded), ContentLength: aws.Int64(int64(len(encoded))),
	})
	if err != nil {
		return fmt.Errorf("s3 put %s: %w", d, err)
	}
	return nil
}

// Flush implements Store: every Put is already durable; it checks that
// each blob exists.
func (s *S3) Flush(ctx context.Context, ds []Digest) error {
	for _, d := range ds {
		ok, err := s.Has(ctx, d)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("flush %s: %w", d, ErrNotFound)
		}
	}
	return nil
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, d Digest) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(d))})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
		}
		return nil, fmt.Errorf("s3 get %s: %w", d, err)
	}
	defer out.Body.Close()
	return readAllLimit(out.Body, 1<<30)
}

// Has implements Store.
func (s *S3) Has(ctx context.Context, d Digest) (bool, error) {
	if err := d.Validate(); err != nil {
		return false, err
	}
	_, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(d))})
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("s3 head %s: %w", d, err)
	}
	return true, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, d Digest) error {
	if err := d.Validate(); err != nil {
		return err
	}
	_, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(d))})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("s3 delete %s: %w", d, err)
	}
	return nil
}

// Walk implements Store.
func (s *S3) Walk(ctx context.Context, fn func(Digest, int64) error) error {
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(s.cfg.Prefix + "sha256/"),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("s3 list: %w", err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			d := Digest("sha256:" + k[strings.LastIndex(k, "/")+1:])
			if d.Validate() != nil {
				continue
			}
			if err := fn(d, aws.ToInt64(o.Size)); err != nil {
				return err
			}
		}
	}
	return nil
}
