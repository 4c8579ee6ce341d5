package s3store_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/s3store"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
)

// BenchmarkWake is the wake of a home from S3 (versitygw on loopback) by
// home size and by how much changed since the local copy, beside what a
// user would otherwise do: download the whole image as one object (the
// SDK's GetObject into a file, as `aws s3 cp` of one object). The homes
// are full of random bytes (the worst case: no holes, no zero chunks).
//
//	go test -run '^$' -bench BenchmarkWake -benchtime 3x ./sandbox/s3store/
func BenchmarkWake(b *testing.B) {
	cfg := s3test.NewBucket(b)
	st, err := s3store.Open(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ar := homearchive.New(st.Objects("homes"))
	for _, mb := range []int64{64, 256} {
		size := mb << 20
		dir := b.TempDir()
		src := filepath.Join(dir, "src.img")
		writeRandom(b, src, size)
		name := fmt.Sprintf("bench%d", mb)
		if err := ar.Archive(b.Context(), name, src); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(src)
		if err != nil {
			b.Fatal(err)
		}
		key := st.Key("bench/" + name + ".img")
		if _, err := st.Client().PutObject(b.Context(), &s3.PutObjectInput{Bucket: aws.String(st.Bucket()), Key: &key, Body: f, ContentLength: &size}); err != nil {
			b.Fatal(err)
		}
		f.Close()
		b.Run(fmt.Sprintf("home=%dMiB/sdk-get-whole-object", mb), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				out, err := st.Client().GetObject(b.Context(), &s3.GetObjectInput{Bucket: aws.String(st.Bucket()), Key: &key})
				if err != nil {
					b.Fatal(err)
				}
				dst, err := os.Create(filepath.Join(dir, "whole.img"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(dst, out.Body); err != nil {
					b.Fatal(err)
				}
				out.Body.Close()
				dst.Sync()
				dst.Close()
			}
		})
		b.Run(fmt.Sprintf("home=%dMiB/restore-no-local-copy", mb), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				b.StopTimer()
				dst := filepath.Join(dir, "restored.img")
				os.Remove(dst)
				homearchive.RemoveSidecar(dst)
				b.StartTimer()
				if err := ar.Restore(b.Context(), name, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, changed := range []int64{4, 16} {
			b.Run(fmt.Sprintf("home=%dMiB/restore-local-copy-%dMiB-changed", mb, changed), func(b *testing.B) {
				b.SetBytes(size)
				dst := filepath.Join(dir, "stale.img")
				for b.Loop() {
					b.StopTimer()
					copyImage(b, src, dst)
					homearchive.RemoveSidecar(dst)
					scribble(b, dst, changed<<20)
					before := ar.Stats()
					b.StartTimer()
					if err := ar.Restore(b.Context(), name, dst); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if got := ar.Stats().BytesGot - before.BytesGot; got != changed<<20 {
						b.Fatalf("fetched %d bytes for %d changed", got, changed<<20)
					}
					b.StartTimer()
				}
			})
		}
		// Sleep and wake on one node: the image was archived here and not
		// touched since.
		b.Run(fmt.Sprintf("home=%dMiB/restore-same-node-unchanged", mb), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				b.StopTimer()
				if err := ar.Archive(b.Context(), name, src); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := ar.Restore(b.Context(), name, src); err != nil {
					b.Fatal(err)
				}
			}
		})
		// A node whose copy is the previous version, untouched since it
		// slept there: the manifests tell what changed, the image is not
		// read.
		b.Run(fmt.Sprintf("home=%dMiB/restore-older-version-4MiB-changed", mb), func(b *testing.B) {
			b.SetBytes(size)
			old := filepath.Join(dir, "old.img")
			copyImage(b, src, old)
			homearchive.RemoveSidecar(old)
			if err := ar.Restore(b.Context(), name, old); err != nil {
				b.Fatal(err)
			}
			if err := ar.Archive(b.Context(), name, old); err != nil { // as its sleep would
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				scribbleSeed(b, src, 4<<20, byte(i))
				if err := ar.Archive(b.Context(), name, src); err != nil {
					b.Fatal(err)
				}
				before := ar.Stats()
				b.StartTimer()
				if err := ar.Restore(b.Context(), name, old); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if got := ar.Stats().BytesGot - before.BytesGot; got != 4<<20 {
					b.Fatalf("fetched %d bytes for 4 MiB changed", got)
				}
				// As the node's next sleep would, unchanged: no upload.
				if err := ar.Archive(b.Context(), name, old); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		os.RemoveAll(dir)
	}
}

func writeRandom(b *testing.B, p string, size int64) {
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := rand.NewChaCha8([32]byte{1})
	if _, err := io.CopyN(f, r, size); err != nil {
		b.Fatal(err)
	}
}

func copyImage(b *testing.B, from, to string) {
	in, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
}

// scribble overwrites n bytes (whole chunks) at the image's start.
func scribble(b *testing.B, p string, n int64) { scribbleSeed(b, p, n, 0) }

func scribbleSeed(b *testing.B, p string, n int64, seed byte) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := rand.NewChaCha8([32]byte{byte(n >> 20), 9, seed})
	if _, err := io.CopyN(f, r, n); err != nil {
		b.Fatal(err)
	}
}
