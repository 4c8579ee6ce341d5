package s3store_test

import (
	"io"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/s3store"
	"github.com/shellgate/shellgate/internal/s3store/s3test"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/storetest"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/homearchive/archivetest"
)

func open(t *testing.T, cfg s3store.Config) *s3store.Store {
	t.Helper()
	s, err := s3store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The same conformance suite as LocalBlobs, against versitygw.
func TestBlobsConformance(t *testing.T) {
	storetest.Blobs(t, func(t *testing.T) func() store.Blobs {
		cfg := s3test.NewBucket(t)
		cfg.Prefix = "some/prefix/"
		return func() store.Blobs { return open(t, cfg).Blobs() }
	})
}

// The reader Open returns seeks (ranged GETs), for HTTP range requests.
func TestBlobsSeek(t *testing.T) {
	b := open(t, s3test.NewBucket(t)).Blobs()
	if _, err := b.Put(t.Context(), "file_ok", strings.NewReader("0123456789"), 100); err != nil {
		t.Fatal(err)
	}
	rc, n, err := b.Open(t.Context(), "file_ok")
	if err != nil || n != 10 {
		t.Fatal(n, err)
	}
	defer rc.Close()
	rs, ok := rc.(io.ReadSeeker)
	if !ok {
		t.Fatal("not an io.ReadSeeker")
	}
	if end, err := rs.Seek(0, io.SeekEnd); err != nil || end != 10 {
		t.Fatal(end, err)
	}
	if _, err := rs.Seek(7, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(rs); string(rest) != "789" || err != nil {
		t.Fatalf("after seeking: %q, %v", rest, err)
	}
	if _, err := rs.Seek(2, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(rs, buf); err != nil || string(buf) != "234" {
		t.Fatalf("%q %v", buf, err)
	}
}

// A wrong bucket or wrong keys fail at Open, clearly.
func TestOpenChecksBucket(t *testing.T) {
	cfg := s3test.NewBucket(t)
	bad := cfg
	bad.Bucket = "no-such-bucket"
	if _, err := s3store.Open(t.Context(), bad); err == nil || !strings.Contains(err.Error(), "no-such-bucket") {
		t.Fatalf("open of a missing bucket: %v", err)
	}
	bad = cfg
	bad.SecretKey = "wrong"
	if _, err := s3store.Open(t.Context(), bad); err == nil {
		t.Fatal("wrong credentials accepted")
	}
}

func TestParseURL(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sk")
	c, err := s3store.ParseURL("s3://bkt/a/b/?endpoint=http://127.0.0.1:7070&region=eu-west-1")
	if err != nil || c.Bucket != "bkt" || c.Prefix != "a/b/" || c.Endpoint != "http://127.0.0.1:7070" || c.Region != "eu-west-1" || c.AccessKey != "ak" || c.SecretKey != "sk" {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := s3store.ParseURL("s3://bkt"); err != nil || c.Prefix != "" || c.Endpoint != "" {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []string{"http://bkt/x", "s3:///x", "s3://u:p@bkt/", "s3://bkt/?endpoint=file:///etc", "s3://bkt/?nope=1", "s3://bkt/?endpoint=ftp://h"} {
		if _, err := s3store.ParseURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := s3store.ParseURL("s3://bkt"); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("missing credentials: %v", err)
	}
}

// The home archive's conformance suite, in a bucket.
func TestArchiveConformance(t *testing.T) {
	archivetest.Run(t, func(t *testing.T) homearchive.Objects {
		cfg := s3test.NewBucket(t)
		cfg.Prefix = "p/"
		return open(t, cfg).Objects("homes")
	})
}
