package server

import (
	"io"
	"mime/multipart"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// streamedUpload posts a multipart body whose file part is size zero
// bytes, generated as it is sent: the client holds none of it either.
func (e *env) streamedUpload(t testing.TB, path string, fields map[string]string, size int64) (int, []byte) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for k, v := range fields {
			mw.WriteField(k, v)
		}
		w, err := mw.CreateFormFile("file", "big.bin")
		if err == nil {
			_, err = io.CopyN(w, zeros{}, size)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, _ := http.NewRequest("POST", e.url+path, pr)
	req.Header.Set("Authorization", "Bearer "+e.keyA)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	st, _, b := roundTrip(t, req)
	return st, b
}

// streamedDownload GETs path with key A and reads the body into nothing,
// returning the bytes it had; any status but 200 fails t.
func (e *env) streamedDownload(t testing.TB, path string) int64 {
	t.Helper()
	req, _ := http.NewRequest("GET", e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.keyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	return n
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// heapPeak samples the heap while fn runs and returns its growth at the
// peak over the heap before.
func heapPeak(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
				peak.Store(ms.HeapInuse - base)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	return peak.Load()
}

// TestFileStreamsBoundedMemory: uploads and downloads stream; the server's
// heap does not grow with the file (here a file is 8 times the bound).
func TestFileStreamsBoundedMemory(t *testing.T) {
	const size, bound = 256 << 20, 32 << 20
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.MaxUploadBytes = 1 << 30 })
	var f orFile
	grew := heapPeak(func() {
		st, b := e.streamedUpload(t, "/api/v1/files", nil, size)
		e.must(st, b, &f)
	})
	t.Logf("workspace upload of %d MiB: heap grew %.1f MiB", size>>20, float64(grew)/(1<<20))
	if f.SizeBytes != size || grew > bound {
		t.Errorf("workspace upload of %d MiB: %d bytes stored, heap grew %d MiB", size>>20, f.SizeBytes, grew>>20)
	}
	var n int64
	grew = heapPeak(func() { n = e.streamedDownload(t, "/api/v1/files/"+f.ID+"/content") })
	t.Logf("workspace download: heap grew %.1f MiB", float64(grew)/(1<<20))
	if n != size || grew > bound {
		t.Errorf("workspace download: %d bytes, heap grew %d MiB", n, grew>>20)
	}

	// Into and out of a container's home (the suite's homes hold 64 MiB).
	const csize = 48 << 20
	c := e.create(e.keyA, "")
	var cf ContainerFile
	grew = heapPeak(func() {
		st, b := e.streamedUpload(t, "/api/v1/containers/"+c.ID+"/files", nil, csize)
		e.must(st, b, &cf)
	})
	if cf.Bytes != csize || grew > bound {
		t.Errorf("container upload: %d bytes, heap grew %d MiB", cf.Bytes, grew>>20)
	}
	grew = heapPeak(func() { n = e.streamedDownload(t, "/api/v1/containers/"+c.ID+"/files/"+cf.ID+"/content") })
	if n != csize || grew > bound {
		t.Errorf("container download: %d bytes, heap grew %d MiB", n, grew>>20)
	}
	// A home fills up: the upload is refused with 413 and nothing is left.
	st, b := e.streamedUpload(t, "/api/v1/containers/"+c.ID+"/files", map[string]string{"path": "second.bin"}, csize)
	if st != http.StatusRequestEntityTooLarge {
		t.Errorf("upload past the home's quota: %d %s", st, b)
	}
	if got := paths(e.listAll("/api/v1", c.ID, 10, "")); len(got) != 1 || got[0] != "big.bin" {
		t.Errorf("after a refused upload: %q", got)
	}
}
