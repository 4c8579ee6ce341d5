// Package s3blobs keeps workspace files and uploads (a store.Blobs) in an
// S3-compatible bucket, under PREFIX/files/ of a sandbox/s3store.Store:
// spooled to an unlinked temporary file while counted and hashed, then one
// PutObject with If-None-Match: *, so a blob is whole or absent and one of
// two racing Puts wins; Open's reader seeks with ranged GETs.
package s3blobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/sandbox/ctxio"
	"github.com/shellgate/shellgate/sandbox/s3store"
)

// MaxBlobBytes is the largest blob one PutObject can carry (S3's limit
// for a single PUT).
const MaxBlobBytes = 5 << 30

// Blobs is a store.Blobs in the bucket, under PREFIX/files/.
//
// A Put first spools the bytes to a temporary file (counting them against
// the cap and hashing them), then sends them in one PutObject with
// If-None-Match: *, so the object appears whole or not at all, and of two
// Puts of one id (on any replica) exactly one wins. Open's reader is an
// io.ReadSeeker (a seek starts a ranged GET) for HTTP range requests.
type Blobs struct {
	s      *s3store.Store
	client *s3.Client
	bucket string
}

// New returns the blob view of s.
func New(s *s3store.Store) *Blobs { return &Blobs{s: s, client: s.Client(), bucket: s.Bucket()} }

var _ store.Blobs = (*Blobs)(nil)

func (b *Blobs) key(id string) *string { return aws.String(b.s.Key("files/" + id)) }

func (b *Blobs) Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (store.BlobInfo, error) {
	if !store.ValidBlobID(id) {
		return store.BlobInfo{}, fmt.Errorf("%w: blob id %q", store.ErrInvalid, id)
	}
	if maxBytes < 0 {
		return store.BlobInfo{}, fmt.Errorf("%w: blob size cap %d", store.ErrInvalid, maxBytes)
	}
	maxBytes = min(maxBytes, MaxBlobBytes)
	f, err := os.CreateTemp(b.s.TempDir(), ".shellgate-blob-*")
	if err != nil {
		return store.BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	defer f.Close()
	// Unlinked at once: nothing is left behind by a crash.
	os.Remove(f.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxio.Reader(ctx, r), maxBytes+1))
	if err != nil {
		return store.BlobInfo{}, fmt.Errorf("blob %s: writing: %w", id, err)
	}
	if n > maxBytes {
		return store.BlobInfo{}, fmt.Errorf("blob %s: more than %d bytes: %w", id, maxBytes, store.ErrTooLarge)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return store.BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	_, err = b.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &b.bucket, Key: b.key(id), Body: f, ContentLength: &n,
		IfNoneMatch: aws.String("*"),
	})
	if s3store.PreconditionFailed(err) {
		return store.BlobInfo{}, fmt.Errorf("blob %s: %w", id, store.ErrConflict)
	}
	if err != nil {
		return store.BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	return store.BlobInfo{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func (b *Blobs) Open(ctx context.Context, id string) (io.ReadCloser, int64, error) {
	if !store.ValidBlobID(id) {
		return nil, 0, fmt.Errorf("blob %q: %w", id, store.ErrNotFound)
	}
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: b.key(id)})
	if s3store.NotFound(err) {
		return nil, 0, fmt.Errorf("blob %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("blob %s: %w", id, err)
	}
	size := aws.ToInt64(out.ContentLength)
	return &object{b: b, ctx: ctx, id: id, size: size, body: out.Body, etag: aws.ToString(out.ETag)}, size, nil
}

func (b *Blobs) Delete(ctx context.Context, id string) error {
	if !store.ValidBlobID(id) {
		return fmt.Errorf("blob %q: %w", id, store.ErrNotFound)
	}
	// S3's DELETE succeeds on a missing key: ask first.
	_, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: b.key(id)})
	if s3store.NotFound(err) {
		return fmt.Errorf("blob %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("blob %s: %w", id, err)
	}
	if _, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: b.key(id)}); err != nil {
		return fmt.Errorf("blob %s: %w", id, err)
	}
	return nil
}

func (b *Blobs) Walk(ctx context.Context, fn func(id string, stored time.Time) error) error {
	prefix := *b.key("")
	pages := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: &prefix})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing blobs: %w", err)
		}
		for _, o := range page.Contents {
			id := strings.TrimPrefix(aws.ToString(o.Key), prefix)
			if !store.ValidBlobID(id) {
				continue // not a blob of ours (a "directory", another tool's object)
			}
			if err := fn(id, aws.ToTime(o.LastModified)); err != nil {
				return err
			}
		}
	}
	return nil
}

// object reads a blob; Seek drops the current body and the next Read
// starts a ranged GET at the new offset (of the same version: If-Match).
type object struct {
	b    *Blobs
	ctx  context.Context
	id   string
	etag string
	size int64
	off  int64
	body io.ReadCloser // nil after a seek
}

func (o *object) Read(p []byte) (int, error) {
	if o.off >= o.size {
		return 0, io.EOF
	}
	if o.body == nil {
		in := &s3.GetObjectInput{Bucket: &o.b.bucket, Key: o.b.key(o.id), Range: aws.String(fmt.Sprintf("bytes=%d-", o.off))}
		if o.etag != "" {
			in.IfMatch = &o.etag
		}
		out, err := o.b.client.GetObject(o.ctx, in)
		if err != nil {
			return 0, fmt.Errorf("blob %s at %d: %w", o.id, o.off, err)
		}
		o.body = out.Body
	}
	n, err := o.body.Read(p)
	o.off += int64(n)
	return n, err
}

func (o *object) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += o.off
	case io.SeekEnd:
		offset += o.size
	default:
		return 0, errors.New("seek: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("seek: negative offset")
	}
	if offset != o.off && o.body != nil {
		o.body.Close()
		o.body = nil
	}
	o.off = offset
	return offset, nil
}

func (o *object) Close() error {
	if o.body == nil {
		return nil
	}
	err := o.body.Close()
	o.body = nil
	return err
}
