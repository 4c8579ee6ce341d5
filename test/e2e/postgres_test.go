package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestServePostgresReplicas runs two `shellgate serve` processes, each
// with its own data directory (its sandboxes) and both on one PostgreSQL
// database given by $SHELLGATE_DATABASE, as two replicas behind a load
// balancer: a key made with `keys create` works on both, a container made
// through one is seen through the other and its name is taken on both,
// a continuation issued by one resumes once across both, and the usage
// of both is one ledger. Neither writes a DATA/shellgate.db.
func TestServePostgresReplicas(t *testing.T) {
	bin, dataA, env := serveBinary(t)
	dataB := sandboxtest.DataDirWithImages(t)
	dsn := pgtest.NewDatabase(t)
	env = append(env, "SHELLGATE_DATABASE="+dsn, "SHELLGATE_CONTINUATION_SECRET="+strings.Repeat("s3cret-", 6))
	baseA, _, _, logsA := startServe(t, bin, dataA, env)
	baseB, _, _, logsB := startServe(t, bin, dataB, env)

	key := createKey(t, bin, env)
	a, b := apiCaller(t, baseA, key), apiCaller(t, baseB, key)

	st, c := a("POST", "/api/v1/containers", `{"name":"shared"}`)
	if st != 200 {
		t.Fatalf("create through A: %d %v", st, c)
	}
	if st, r := a("POST", "/api/v1/containers/shared/exec", `{"commands":["echo hi"]}`); st != 200 || r["output"].([]any)[0].(map[string]any)["stdout"] != "hi\n" {
		t.Fatalf("exec through A: %d %v", st, r)
	}
	if st, g := b("GET", "/api/v1/containers/shared", ""); st != 200 || g["id"] != c["id"] {
		t.Fatalf("get through B: %d %v", st, g)
	}
	if st, e := b("POST", "/api/v1/containers", `{"name":"shared"}`); st != 409 {
		t.Fatalf("the same name through B: %d %v, want 409", st, e)
	}

	evalReq := map[string]any{"source": `await ui.ok(); return 42`, "client_functions": map[string][]string{"ui": {"ok"}}}
	body := func() string { j, _ := json.Marshal(evalReq); return string(j) }
	st, ev := a("POST", "/api/v1/eval", body())
	if st != 200 || ev["status"] != "interrupted" {
		t.Fatalf("eval through A: %d %v", st, ev)
	}
	evalReq["continuation"] = ev["continuation"]
	evalReq["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": true}}
	if st, ev := b("POST", "/api/v1/eval", body()); st != 200 || ev["value"] != 42.0 {
		t.Fatalf("resumed through B: %d %v", st, ev)
	}
	for name, call := range map[string]func(string, string, string) (int, map[string]any){"A": a, "B": b} {
		if st, ev := call("POST", "/api/v1/eval", body()); st != 409 || ev["error"].(map[string]any)["code"] != "RUN_CONTINUATION_USED" {
			t.Fatalf("resumed again through %s: %d %v", name, st, ev)
		}
	}
	// One ledger: an exec through each replica, on a container of its own
	// (a sandbox lives on the node that made it until routing comes).
	if st, r := b("POST", "/api/v1/containers", `{"name":"on-b"}`); st != 200 {
		t.Fatalf("create through B: %d %v", st, r)
	}
	if st, r := b("POST", "/api/v1/containers/on-b/exec", `{"commands":["true"]}`); st != 200 {
		t.Fatalf("exec through B: %d %v", st, r)
	}
	ua, ub := map[string]any{}, map[string]any{}
	if st, ua = a("GET", "/api/v1/usage", ""); st != 200 {
		t.Fatalf("usage through A: %d %v", st, ua)
	}
	if st, ub = b("GET", "/api/v1/usage", ""); st != 200 {
		t.Fatalf("usage through B: %d %v", st, ub)
	}
	if ua["total"].(map[string]any)["events"] != 2.0 || !jsonEqual(ua["total"], ub["total"]) {
		t.Fatalf("usage: A says %v, B says %v; want 2 events on both", ua["total"], ub["total"])
	}
	for _, d := range []string{dataA, dataB} {
		if _, err := os.Stat(filepath.Join(d, "shellgate.db")); !os.IsNotExist(err) {
			t.Fatalf("%s/shellgate.db exists with --database: %v", d, err)
		}
	}
	for _, l := range []string{logsA.String(), logsB.String()} {
		if strings.Contains(l, dsn) || strings.Contains(l, key) {
			t.Fatal("a replica logged the DSN or a key")
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestServeConfigSelectsStoreAndStorage: `database:` and `storage:` in
// the --config file select PostgreSQL and S3 as --database and --storage
// would: a key made in that database works, nothing is written to
// DATA/shellgate.db, and an uploaded file's bytes are served from the
// bucket, not DATA/files.
func TestServeConfigSelectsStoreAndStorage(t *testing.T) {
	bin, data, env := serveBinary(t)
	dsn := pgtest.NewDatabase(t)
	bucket := s3test.NewBucket(t)
	cfg := filepath.Join(t.TempDir(), "shellgate.yaml")
	if err := os.WriteFile(cfg, []byte("database: "+dsn+"\nstorage: s3://"+bucket.Bucket+"/?endpoint="+bucket.Endpoint+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env = append(env, "AWS_ACCESS_KEY_ID="+bucket.AccessKey, "AWS_SECRET_ACCESS_KEY="+bucket.SecretKey)
	base, _, _, logs := startServe(t, bin, data, env, "--config", cfg)
	key := createKey(t, bin, append(env, "SHELLGATE_DATABASE="+dsn))

	st, b := postFile(t, base+"/api/v1/files", "Authorization", "Bearer "+key, "sales.csv", []byte("region,revenue\nnorth,37.5\n"), "purpose", "user_data")
	var f struct {
		ID string `json:"id"`
	}
	json.Unmarshal(b, &f)
	if st != 200 || f.ID == "" {
		t.Fatalf("upload with the key from the configured database: %d %+v\n%s", st, f, logs)
	}
	if st, got := getBody(t, base+"/api/v1/files/"+f.ID+"/content", "Authorization", "Bearer "+key); st != 200 || string(got) != "region,revenue\nnorth,37.5\n" {
		t.Fatalf("download: %d %q", st, got)
	}
	if _, err := os.Stat(filepath.Join(data, "shellgate.db")); !os.IsNotExist(err) {
		t.Fatalf("DATA/shellgate.db exists with database: in the config: %v", err)
	}
	if local, _ := filepath.Glob(filepath.Join(data, "files", "file_*")); len(local) != 0 {
		t.Fatalf("the file's bytes are on local disk with storage: in the config: %v", local)
	}
	if strings.Contains(logs.String(), dsn) {
		t.Fatal("serve logged the DSN")
	}
}
