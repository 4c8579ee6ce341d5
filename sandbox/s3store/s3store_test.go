package s3store_test

import (
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/homearchive/archivetest"
	"github.com/shellgate/shellgate/sandbox/s3store"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
)

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
		return s3test.Open(t, cfg).Objects("homes")
	})
}
