// Package s3store is a bucket (under a prefix) on an S3-compatible server
// (AWS S3, versitygw, MinIO, Ceph RGW, R2…), through aws-sdk-go-v2's S3
// client: the chunks and manifests of archived sandbox homes (Objects, for
// package homearchive) and, above the sandbox layer, workspace files and
// uploads (package internal/store/s3blobs builds its store.Blobs on a
// Store).
//
// A Store is named by a URL:
//
//	s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:7070&region=us-east-1
//
// Requests are path-style (BUCKET in the path, which every S3-compatible
// server accepts) and signed with static credentials from the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, and AWS_SESSION_TOKEN if set).
// Without endpoint, the client talks to AWS in region (default
// us-east-1). The bucket must exist.
//
// Under PREFIX, blobs are files/ID and archived homes homes/NAME/….
//
// # How it works
//
//   - `sandbox/s3store` is S3-compatible storage through aws-sdk-go-v2's S3
//     client (path-style, static credentials, checksums only where S3 requires
//     them): `Objects` (a key space for the home archive), and the client,
//     keys and error tests that `internal/store/s3blobs` builds its `Blobs`
//     on. `sandbox/s3store/s3test` runs versitygw for tests like pgtest
//     runs PostgreSQL: posix backend in a temporary directory, free loopback
//     port, random root keys, one server per test binary, one bucket per test.
package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// Config says where a Store keeps its objects.
type Config struct {
	Bucket string
	// Prefix is prepended to every key; empty or ending in '/'.
	Prefix   string
	Endpoint string // "" is AWS
	Region   string // default us-east-1
	// AccessKey and SecretKey sign requests; SessionToken is optional.
	AccessKey, SecretKey, SessionToken string
	// TempDir holds uploads while they are counted and hashed (default
	// os.TempDir()).
	TempDir string
}

// ParseURL reads s3://BUCKET/PREFIX?endpoint=URL&region=REGION, with the
// credentials from the environment.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("storage URL: %w", err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return Config{}, fmt.Errorf("storage URL %q: want s3://BUCKET/PREFIX?endpoint=URL", raw)
	}
	c := Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if c.Prefix != "" {
		c.Prefix += "/"
	}
	q := u.Query()
	for k := range q {
		if k != "endpoint" && k != "region" {
			return Config{}, fmt.Errorf("storage URL: unknown parameter %q (endpoint and region are known)", k)
		}
	}
	c.Endpoint, c.Region = q.Get("endpoint"), q.Get("region")
	if c.Endpoint != "" {
		e, err := url.Parse(c.Endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return Config{}, fmt.Errorf("storage URL: endpoint %q is not an http(s) URL", c.Endpoint)
		}
	}
	c.AccessKey, c.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	c.SessionToken = os.Getenv("AWS_SESSION_TOKEN")
	if c.AccessKey == "" || c.SecretKey == "" {
		return Config{}, errors.New("S3 storage needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
	}
	return c, nil
}

// Store is a bucket (under a prefix) on one S3-compatible server.
type Store struct {
	cfg    Config
	client *s3.Client
	tr     *http.Transport
}

// Open makes a client for cfg and checks that the bucket answers.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: no bucket")
	}
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	creds := aws.Credentials{AccessKeyID: cfg.AccessKey, SecretAccessKey: cfg.SecretKey, SessionToken: cfg.SessionToken, Source: "shellgate"}
	client := s3.New(s3.Options{
		Region:       cfg.Region,
		Credentials:  aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil }),
		HTTPClient:   &http.Client{Transport: tr},
		UsePathStyle: true,
		BaseEndpoint: nilIfEmpty(cfg.Endpoint),
		// Checksums only where S3 requires them: not every S3-compatible
		// server knows the newer CRC trailers. Blobs hash their bytes
		// themselves, and archived chunks are named by their SHA-256.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
	})
	s := &Store{cfg: cfg, client: client, tr: tr}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &cfg.Bucket}); err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("s3: bucket %s at %s: %w", cfg.Bucket, s.where(), err)
	}
	return s, nil
}

func (s *Store) where() string {
	if s.cfg.Endpoint == "" {
		return "AWS " + s.cfg.Region
	}
	return s.cfg.Endpoint
}

// String describes the store for logs (no credentials).
func (s *Store) String() string {
	return fmt.Sprintf("s3://%s/%s (%s)", s.cfg.Bucket, s.cfg.Prefix, s.where())
}

// Client is the underlying S3 client (for tests and benchmarks).
func (s *Store) Client() *s3.Client { return s.client }

// Bucket is the store's bucket; Key is a key under its prefix.
func (s *Store) Bucket() string      { return s.cfg.Bucket }
func (s *Store) Key(k string) string { return s.cfg.Prefix + k }

// TempDir is where uploads wait while they are counted and hashed.
func (s *Store) TempDir() string { return s.cfg.TempDir }

// Close drops idle connections.
func (s *Store) Close() error {
	s.tr.CloseIdleConnections()
	return nil
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// NotFound reports whether err is S3's answer for a missing key.
func NotFound(err error) bool {
	var nk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nk) || errors.As(err, &nf) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound")
}

// PreconditionFailed reports whether err is S3's answer to a conditional
// write whose condition failed (If-None-Match: * on an existing key), or
// to two of them racing (409 ConditionalRequestConflict).
func PreconditionFailed(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "PreconditionFailed", "ConditionalRequestConflict":
			return true
		}
	}
	return false
}

// Objects is a flat key space under one sub-prefix of the store, for
// package homearchive: keys are relative, missing keys are fs.ErrNotExist.
type Objects struct {
	s      *Store
	prefix string
}

// Objects returns the key space under PREFIX/sub/.
func (s *Store) Objects(sub string) *Objects {
	return &Objects{s: s, prefix: s.cfg.Prefix + strings.Trim(sub, "/") + "/"}
}

// Put stores size bytes from r as key, replacing any object there.
func (o *Objects) Put(ctx context.Context, key string, r io.ReadSeeker, size int64) error {
	_, err := o.s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &o.s.cfg.Bucket, Key: aws.String(o.prefix + key), Body: r, ContentLength: &size,
	})
	if err != nil {
		return fmt.Errorf("s3 put %s: %w", key, err)
	}
	return nil
}

// Get streams key's bytes.
func (o *Objects) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := o.s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &o.s.cfg.Bucket, Key: aws.String(o.prefix + key)})
	if NotFound(err) {
		return nil, fmt.Errorf("s3 get %s: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("s3 get %s: %w", key, err)
	}
	return out.Body, nil
}

// Exists reports whether key is stored.
func (o *Objects) Exists(ctx context.Context, key string) (bool, error) {
	_, err := o.s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &o.s.cfg.Bucket, Key: aws.String(o.prefix + key)})
	if NotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("s3 head %s: %w", key, err)
	}
	return true, nil
}

// Delete removes key; a missing key is not an error.
func (o *Objects) Delete(ctx context.Context, key string) error {
	_, err := o.s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &o.s.cfg.Bucket, Key: aws.String(o.prefix + key)})
	if err != nil && !NotFound(err) {
		return fmt.Errorf("s3 delete %s: %w", key, err)
	}
	return nil
}

// List returns the keys that start with prefix.
func (o *Objects) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(o.s.client, &s3.ListObjectsV2Input{Bucket: &o.s.cfg.Bucket, Prefix: aws.String(o.prefix + prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3 list %s: %w", prefix, err)
		}
		for _, obj := range page.Contents {
			if k, ok := strings.CutPrefix(aws.ToString(obj.Key), o.prefix); ok {
				keys = append(keys, k)
			}
		}
	}
	return keys, nil
}
