package server

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/shellgate/shellgate/internal/tool"
)

// BenchmarkExecRoundTrip is one exec call of one short command on a warm
// container, through HTTP (loopback, JSON, auth, call lock, metering,
// ledger) and on the library (tool.RunShell on the Manager) — the
// difference is what the HTTP layer adds.
func BenchmarkExecRoundTrip(b *testing.B) {
	e := newEnv(b, "crun", "busybox")
	c := e.create(e.keyA, "bench")
	plan, err := tool.ShellArgs{Commands: []string{"true"}}.Plan()
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"commands":["true"]}`)
	url := e.url + "/api/v1/containers/" + c.ID + "/exec"
	b.Run("http", func(b *testing.B) {
		for b.Loop() {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+e.keyA)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		for b.Loop() {
			if _, err := tool.RunShell(b.Context(), e.mgr, c.ID, plan); err != nil {
				b.Fatal(err)
			}
		}
	})
}
