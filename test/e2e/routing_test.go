package e2e

import (
	"os"
	"os/exec"
	"testing"

	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestServeRouting runs two `shellgate serve` processes as replicas with
// routing on (--node-id, --advertise-url), one PostgreSQL and one S3 bucket
// (versitygw): an exec through B for a container awake on A is answered
// by A's sandbox, and once A stops (its sandboxes sleep, their homes
// archived) the container wakes through B with its files.
func TestServeRouting(t *testing.T) {
	bin, dataA, env := serveBinary(t)
	dataB := sandboxtest.DataDirWithImages(t)
	bucket := s3test.NewBucket(t)
	env = append(env, "SHELLGATE_DATABASE="+pgtest.NewDatabase(t),
		"SHELLGATE_STORAGE=s3://"+bucket.Bucket+"/?endpoint="+bucket.Endpoint,
		"AWS_ACCESS_KEY_ID="+bucket.AccessKey, "AWS_SECRET_ACCESS_KEY="+bucket.SecretKey)
	// Each address is chosen first, so that its URL can be advertised.
	node := func(id, data string) (string, *exec.Cmd, chan error) {
		base, srv, exited, logs := startServeFor(t, bin, data, env, func(addr string) []string {
			return []string{"--node-id", id, "--advertise-url", "http://" + addr}
		})
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s's log:\n%s", id, logs.String())
			}
		})
		return base, srv, exited
	}
	baseA, srvA, exitedA := node("node-a", dataA)
	baseB, _, _ := node("node-b", dataB)

	key := createKey(t, bin, env)
	a, b := apiCaller(t, baseA, key), apiCaller(t, baseB, key)
	stdout := func(r map[string]any) any { return r["output"].([]any)[0].(map[string]any)["stdout"] }

	if st, c := a("POST", "/api/v1/containers", `{"name":"roaming"}`); st != 200 {
		t.Fatalf("create through A: %d %v", st, c)
	}
	if st, r := a("POST", "/api/v1/containers/roaming/exec", `{"commands":["echo kept > f; echo a-only > /tmp/layer"]}`); st != 200 {
		t.Fatalf("exec through A: %d %v", st, r)
	}
	if st, r := b("POST", "/api/v1/containers/roaming/exec", `{"commands":["cat /tmp/layer"]}`); st != 200 || stdout(r) != "a-only\n" {
		t.Fatalf("exec through B, proxied to A: %d %v", st, r)
	}
	// A stops as an operator stops it: its sandboxes sleep and archive.
	srvA.Process.Signal(os.Interrupt)
	if err := <-exitedA; err != nil {
		t.Fatalf("A did not stop cleanly: %v", err)
	}
	exitedA <- nil // for startServe's cleanup
	st, r := b("POST", "/api/v1/containers/roaming/exec", `{"commands":["cat f; cat /tmp/layer 2>/dev/null; true"]}`)
	if st != 200 || stdout(r) != "kept\n" || r["usage"].(map[string]any)["container_start"] != "woken" {
		t.Fatalf("woken through B after A stopped: %d %v", st, r)
	}
}
