package e2e

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeFiles drives the file routes of the real binary: an upload cap
// from --max-upload-mb, a container's files while it sleeps, and SIGKILL
// of the server during a download from a sleeping container (its home is
// mounted alone for the call): a restarted server finds it sleeping, with
// its files, and nothing left mounted.
func TestServeFiles(t *testing.T) {
	bin, data, env := serveBinary(t)
	base, srv, exited, _ := startServe(t, bin, data, env, "--max-upload-mb", "1", "--idle-timeout", "1s")
	key := keyFor(t, bin, data)
	call := apiCaller(t, base, key)
	createAndRun(t, call, "files", "echo precious > f && head -c 30000000 /dev/urandom > big")
	upload := func(path string, size int) (int, []byte) {
		return postFile(t, base+path, "x-api-key", key, "data.csv", bytes.Repeat([]byte("x"), size))
	}
	if st, b := upload("/api/v1/containers/files/files", 100); st != 200 || !strings.Contains(string(b), `"path":"data.csv"`) {
		t.Fatalf("upload: %d %s", st, b)
	}
	if st, b := upload("/api/v1/files", 2<<20); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload over --max-upload-mb: %d %s", st, b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, c := call("GET", "/api/v1/containers/files", ""); c["status"] == "sleeping" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the container did not go to sleep")
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, l := call("GET", "/api/v1/containers/files/files", "")
	if st != 200 || len(l["data"].([]any)) != 3 {
		t.Fatalf("list asleep: %d %v", st, l)
	}

	req, _ := http.NewRequest("GET", base+"/api/v1/containers/files/files/cfile_"+base64.RawURLEncoding.EncodeToString([]byte("big"))+"/content", nil)
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	srv.Process.Signal(syscall.SIGKILL)
	err = <-exited
	exited <- err
	resp.Body.Close()

	base2, _, _, _ := startServe(t, bin, data, env)
	call = apiCaller(t, base2, key)
	if st, c := call("GET", "/api/v1/containers/files", ""); st != 200 || c["status"] != "sleeping" {
		t.Fatalf("after kill -9 and restart: %d %v", st, c)
	}
	if st, b := getBody(t, base2+"/api/v1/containers/files/files/cfile_Zg/content", "x-api-key", key); st != 200 || string(b) != "precious\n" { // "f"
		t.Fatalf("file after restart: %d %q", st, b)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	real := data
	if r, err := os.Readlink(data); err == nil {
		real = r
	}
	if n := strings.Count(string(mi), real+"/run/sandboxes/"); n != 0 {
		t.Errorf("%d mounts left under the sandboxes' directory after the restart", n)
	}
	if st, l := call("GET", "/api/v1/containers/files/files", ""); st != 200 || len(l["data"].([]any)) != 3 {
		t.Fatalf("list after restart: %d %v", st, l)
	}
}
