package s3blobs_test

import (
	"io"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/s3blobs"
	"github.com/shellgate/shellgate/internal/store/storetest"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
)

// The same conformance suite as LocalBlobs, against versitygw.
func TestBlobsConformance(t *testing.T) {
	storetest.Blobs(t, func(t *testing.T) func() store.Blobs {
		cfg := s3test.NewBucket(t)
		cfg.Prefix = "some/prefix/"
		return func() store.Blobs { return s3blobs.New(s3test.Open(t, cfg)) }
	})
}

// The reader Open returns seeks (ranged GETs), for HTTP range requests.
func TestBlobsSeek(t *testing.T) {
	b := s3blobs.New(s3test.Open(t, s3test.NewBucket(t)))
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
