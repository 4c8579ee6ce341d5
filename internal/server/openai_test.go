package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/shellgate/shellgate/internal/gateway/openaierr"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/sandbox/egress"
)

// openAIEnvelope checks that body is OpenAI's error envelope
// {"error":{"message","type","param","code"}} and returns its error.
func openAIEnvelope(t *testing.T, status int, body []byte) openaierr.Detail {
	t.Helper()
	var raw struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || raw.Error == nil {
		t.Fatalf("status %d: not OpenAI's error envelope: %s", status, body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw.Error[k]; !ok {
			t.Fatalf("status %d: envelope without %q: %s", status, k, body)
		}
	}
	var eb openaierr.Body
	json.Unmarshal(body, &eb)
	if eb.Error.Message == "" || eb.Error.Type == "" {
		t.Fatalf("status %d: empty message or type: %s", status, body)
	}
	return eb.Error
}

// putFile stores a workspace file of scope sc as the files API would:
// bytes first, then the record.
func putFile(t *testing.T, e *env, blobs store.Blobs, sc store.Scope, name, content string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(content))
	f, err := e.st.Files().Create(t.Context(), store.File{Scope: sc, Name: name, Bytes: int64(len(content)),
		SHA256: hex.EncodeToString(sum[:]), Purpose: "user_data", Source: "upload"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Put(t.Context(), f.ID, strings.NewReader(content), 1<<20); err != nil {
		t.Fatal(err)
	}
	return f.ID
}

func TestOpenAIContainers(t *testing.T) {
	blobs, err := store.OpenLocalBlobs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	var e *env
	e = newEnv(t, "crun", "busybox", func(c *Config) {
		c.MaxLimits = Limits{MemoryBytes: 2 << 30}
		c.WorkspaceFiles = StoreBackend{St: c.Containers.(StoreBackend).St, Blobs: blobs}
		c.NetworkAllow = &egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"pypi.org", "*.pythonhosted.org"}}
	})
	ctx := t.Context()
	client := e.openAI(e.keyA)

	created, err := client.Containers.New(ctx, openai.ContainerNewParams{
		Name:         "My analysis",
		MemoryLimit:  openai.ContainerNewParamsMemoryLimit1g,
		ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 90},
		NetworkPolicy: openai.ContainerNewParamsNetworkPolicyUnion{OfAllowlist: &responses.ContainerNetworkPolicyAllowlistParam{
			AllowedDomains: []string{"PyPI.org", "*.pythonhosted.org"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("01 create answers every field openai-go reads", func(t *testing.T) {
		c := created
		if !strings.HasPrefix(c.ID, "cntr_") || c.Object != "container" || c.Name != "My analysis" || c.Status != "running" || c.CreatedAt == 0 || c.LastActiveAt < c.CreatedAt {
			t.Fatalf("%s", c.RawJSON())
		}
		if c.MemoryLimit != "1g" || c.ExpiresAfter.Anchor != "last_active_at" || c.ExpiresAfter.Minutes != 90 {
			t.Fatalf("memory_limit and expires_after: %s", c.RawJSON())
		}
		if c.NetworkPolicy.Type != "allowlist" || !slices.Equal(c.NetworkPolicy.AllowedDomains, []string{"pypi.org", "*.pythonhosted.org"}) {
			t.Fatalf("network_policy: %s", c.RawJSON())
		}
	})

	t.Run("02 one record on both routes: get on /v1 and /api/v1", func(t *testing.T) {
		got, err := client.Containers.Get(ctx, created.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != created.ID || got.Name != created.Name || got.MemoryLimit != "1g" || got.ExpiresAfter.Minutes != 90 {
			t.Fatalf("%s", got.RawJSON())
		}
		var c containerObject
		st, b := e.do("GET", "/api/v1/containers/"+created.ID, e.keyA, nil)
		e.must(st, b, &c)
		if c.Name != "My analysis" || c.Limits.MemoryMB != 1024 || c.MemoryLimit != "1g" || c.ExpiresAt != c.LastActiveAt+90*60 || c.NetworkPolicy.Type != "allowlist" {
			t.Fatalf("%s", b)
		}
		// And a container made on /api/v1 is one OpenAI's client reads.
		other := e.create(e.keyA, "made-on-api")
		got, err = client.Containers.Get(ctx, other.ID)
		if err != nil || got.Name != "made-on-api" || got.NetworkPolicy.Type != "disabled" || got.ExpiresAfter.Minutes != int64(DefaultRetention.Minutes()) {
			t.Fatalf("%v %s", err, got.RawJSON())
		}
		if err := client.Containers.Delete(ctx, other.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("03 memory_limit is clamped to the server's maximum", func(t *testing.T) {
		c, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "big", MemoryLimit: openai.ContainerNewParamsMemoryLimit16g})
		if err != nil {
			t.Fatal(err)
		}
		if c.MemoryLimit != "2g" {
			t.Fatalf("16g on a server whose maximum is 2 GiB: %s", c.RawJSON())
		}
		plain, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "plain"})
		if err != nil {
			t.Fatal(err)
		}
		if string(plain.MemoryLimit) != memoryLimit(e.mgr.Defaults().Limits.MemoryBytes) {
			t.Fatalf("no memory_limit: the server's default, got %s", plain.RawJSON())
		}
	})

	t.Run("04 list pages with openai-go's auto-pager", func(t *testing.T) {
		for i := range 4 {
			if _, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: fmt.Sprintf("page-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		var want []string
		var page listObject
		st, b := e.do("GET", "/api/v1/containers?limit=100", e.keyA, nil)
		e.must(st, b, &page)
		for _, c := range page.Data {
			want = append(want, c.ID)
		}
		var got []string
		pager := client.Containers.ListAutoPaging(ctx, openai.ContainerListParams{Limit: openai.Int(2)})
		for pager.Next() {
			got = append(got, pager.Current().ID)
		}
		if err := pager.Err(); err != nil {
			t.Fatal(err)
		}
		if len(want) != 7 || !slices.Equal(got, want) {
			t.Fatalf("auto-paged %v\nwant (newest first) %v", got, want)
		}
		asc, err := client.Containers.List(ctx, openai.ContainerListParams{Order: openai.ContainerListParamsOrderAsc, Limit: openai.Int(100)})
		if err != nil || len(asc.Data) != 7 || asc.Data[0].ID != created.ID || asc.HasMore {
			t.Fatalf("asc: %v %s", err, asc.RawJSON())
		}
		byName, err := client.Containers.List(ctx, openai.ContainerListParams{Name: openai.String("My analysis")})
		if err != nil || len(byName.Data) != 1 || byName.Data[0].ID != created.ID {
			t.Fatalf("by name: %v %s", err, byName.RawJSON())
		}
	})

	t.Run("05 file_ids are copied into the new container's home", func(t *testing.T) {
		a := store.Scope{Account: "acme", Workspace: "a"}
		id := putFile(t, e, blobs, a, "sales.csv", "region,total\nnorth,12\n")
		odd := putFile(t, e, blobs, a, "../../etc/evil name.txt", "contained\n")
		c, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "with-files", FileIDs: []string{id, odd}})
		if err != nil {
			t.Fatal(err)
		}
		r := e.exec(e.keyA, c.ID, "cat sales.csv", "cat 'evil name.txt'", "ls /workspace/home | grep -v -e lost+found -e output")
		if r.Output[0].Stdout != "region,total\nnorth,12\n" || r.Output[1].Stdout != "contained\n" || r.Output[2].Stdout != "evil name.txt\nsales.csv\n" {
			t.Fatalf("%+v", r.Output)
		}
		// Another workspace's file is no file of this one; nothing is made.
		foreign := putFile(t, e, blobs, store.Scope{Account: "acme", Workspace: "b"}, "b.csv", "b\n")
		for _, bad := range []string{foreign, "file_0123456789abcdef0123456789abcdef"} {
			st, b := e.do("POST", "/v1/containers", e.keyA, map[string]any{"name": "never-" + bad[len(bad)-4:], "file_ids": []string{bad}})
			if d := openAIEnvelope(t, st, b); st != http.StatusBadRequest || d.Param == nil || *d.Param != "file_ids" || !strings.Contains(d.Message, "no file") {
				t.Fatalf("%d %s", st, b)
			}
		}
		if l, _ := client.Containers.List(ctx, openai.ContainerListParams{Name: openai.String("never-" + foreign[len(foreign)-4:])}); len(l.Data) != 0 {
			t.Fatal("a refused create left a container")
		}
	})

	t.Run("06 delete, then 404 on both routes; another workspace's id is the same 404", func(t *testing.T) {
		victim, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "victim"})
		if err != nil {
			t.Fatal(err)
		}
		clientB := e.openAI(e.keyB)
		missing := "cntr_0123456789abcdef0123456789abcdef"
		for _, m := range []string{"GET", "DELETE"} {
			stM, bM := e.do(m, "/v1/containers/"+missing, e.keyB, nil)
			stA, bA := e.do(m, "/v1/containers/"+victim.ID, e.keyB, nil)
			if stM != http.StatusNotFound || stA != stM || strings.ReplaceAll(string(bA), victim.ID, missing) != string(bM) {
				t.Fatalf("%s missing: %d %s\nother workspace's: %d %s", m, stM, bM, stA, bA)
			}
			openAIEnvelope(t, stA, bA)
		}
		if _, err := clientB.Containers.Get(ctx, victim.ID); !isStatus(err, 404) {
			t.Fatalf("workspace b's client: %v", err)
		}
		if err := client.Containers.Delete(ctx, victim.ID); err != nil {
			t.Fatal(err)
		}
		_, err = client.Containers.Get(ctx, victim.ID)
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != 404 || oe.Type != "invalid_request_error" {
			t.Fatalf("get after delete: %v", err)
		}
		if st, b := e.do("GET", "/api/v1/containers/"+victim.ID, e.keyA, nil); st != 404 {
			t.Fatalf("/api/v1 after a /v1 delete: %d %s", st, b)
		}
	})

	t.Run("07 names are unique in a workspace", func(t *testing.T) {
		_, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "My analysis"})
		if !isStatus(err, http.StatusConflict) {
			t.Fatalf("second container named My analysis: %v", err)
		}
	})
}

func isStatus(err error, status int) bool {
	var oe *openai.Error
	return errors.As(err, &oe) && oe.StatusCode == status
}

func TestOpenAIContainersBadInput(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	c := e.create(e.keyA, "bad-v1")
	many := make([]string, 51)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		param              string
	}{
		{"01 malformed JSON", "POST", "/v1/containers", `{"name":`, 400, ""},
		{"02 not an object", "POST", "/v1/containers", `[1,2]`, 400, ""},
		{"03 empty body: name is required", "POST", "/v1/containers", ``, 400, ""},
		{"04 no name", "POST", "/v1/containers", `{}`, 400, "name"},
		{"05 name of the wrong type", "POST", "/v1/containers", `{"name":7}`, 400, ""},
		{"06 empty name", "POST", "/v1/containers", `{"name":""}`, 400, "name"},
		{"07 name with a control character", "POST", "/v1/containers", `{"name":"a\u0007b"}`, 400, "name"},
		{"08 unknown field", "POST", "/v1/containers", `{"name":"x","colour":"red"}`, 400, ""},
		{"09 memory_limit not a tier", "POST", "/v1/containers", `{"name":"x","memory_limit":"2g"}`, 400, "memory_limit"},
		{"10 memory_limit and limits.memory_mb", "POST", "/v1/containers", `{"name":"x","memory_limit":"1g","limits":{"memory_mb":64}}`, 400, "memory_limit"},
		{"11 expires_after with another anchor", "POST", "/v1/containers", `{"name":"x","expires_after":{"anchor":"created_at","minutes":5}}`, 400, "expires_after.anchor"},
		{"12 expires_after of 0 minutes", "POST", "/v1/containers", `{"name":"x","expires_after":{"anchor":"last_active_at","minutes":0}}`, 400, "expires_after.minutes"},
		{"13 network_policy without a type", "POST", "/v1/containers", `{"name":"x","network_policy":{}}`, 400, "network_policy.type"},
		{"14 network_policy of an unknown type", "POST", "/v1/containers", `{"name":"x","network_policy":{"type":"open"}}`, 400, "network_policy.type"},
		{"15 51 allowed domains", "POST", "/v1/containers", map[string]any{"name": "x", "network_policy": map[string]any{"type": "allowlist", "allowed_domains": many}}, 400, "network_policy.allowed_domains"},
		{"16 an IP literal as a domain", "POST", "/v1/containers", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["10.0.0.1"]}}`, 400, "network_policy.allowed_domains"},
		{"17 a glob of one label", "POST", "/v1/containers", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["*.com"]}}`, 400, "network_policy.allowed_domains"},
		{"18 a glob in the middle", "POST", "/v1/containers", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["a.*.com"]}}`, 400, "network_policy.allowed_domains"},
		{"19 allowlist with no domains", "POST", "/v1/containers", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":[]}}`, 400, "network_policy.allowed_domains"},
		{"19b a domain the operator did not allow this workspace", "POST", "/v1/containers", `{"name":"x","network_policy":{"type":"allowlist","allowed_domains":["example.com"]}}`, 400, "network_policy.allowed_domains"},
		{"20 disabled with domains", "POST", "/v1/containers", `{"name":"x","network_policy":{"type":"disabled","allowed_domains":["a.com"]}}`, 400, "network_policy.allowed_domains"},
		{"21 skills", "POST", "/v1/containers", `{"name":"x","skills":[{"type":"skill_reference","skill_id":"s"}]}`, 400, "skills"},
		{"22 file_ids of the wrong type", "POST", "/v1/containers", `{"name":"x","file_ids":"file_1"}`, 400, ""},
		{"23 oversized body", "POST", "/v1/containers", `{"name":"` + strings.Repeat("x", maxCreateBody) + `"}`, 413, ""},
		{"24 limit 0", "GET", "/v1/containers?limit=0", nil, 400, "limit"},
		{"25 limit 101", "GET", "/v1/containers?limit=101", nil, 400, "limit"},
		{"26 bad order", "GET", "/v1/containers?order=up", nil, 400, "order"},
		{"27 unknown query parameter", "GET", "/v1/containers?colour=red", nil, 400, ""},
		{"28 a cursor of no container", "GET", "/v1/containers?after=cntr_0123456789abcdef0123456789abcdef", nil, 400, "after"},
		{"29 a body on GET", "GET", "/v1/containers/" + c.ID, strings.Repeat("x", maxEmptyBody+1), 413, ""},
		{"30 an id that is not one", "GET", "/v1/containers/..%2f..%2fetc", nil, 404, ""},
		{"31 limits above the maximum", "POST", "/v1/containers", `{"name":"x","limits":{"processes":100000}}`, 400, "limits.processes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, b := e.do(tc.method, tc.path, e.keyA, tc.body)
			if st != tc.status {
				t.Fatalf("%d %s", st, b)
			}
			d := openAIEnvelope(t, st, b)
			if tc.param != "" && (d.Param == nil || *d.Param != tc.param) {
				t.Fatalf("param: %s", b)
			}
		})
	}
	t.Run("32 unknown routes and methods answer in OpenAI's envelope", func(t *testing.T) {
		st, b := e.do("PUT", "/v1/containers/"+c.ID, e.keyA, nil)
		if d := openAIEnvelope(t, st, b); st != http.StatusMethodNotAllowed || !strings.Contains(d.Message, "GET, DELETE") {
			t.Fatalf("PUT: %d %s", st, b)
		}
		st, b = e.do("GET", "/v1/containers/"+c.ID+"/nothing", e.keyA, nil)
		if openAIEnvelope(t, st, b); st != http.StatusNotFound {
			t.Fatalf("unknown route: %d %s", st, b)
		}
	})
	t.Run("33 no key: 401 in OpenAI's envelope", func(t *testing.T) {
		for _, r := range [][2]string{{"POST", "/v1/containers"}, {"GET", "/v1/containers"}, {"GET", "/v1/containers/" + c.ID}, {"DELETE", "/v1/containers/" + c.ID}} {
			st, b := e.doH(r[0], r[1], `{"name":"x"}`, nil)
			if d := openAIEnvelope(t, st, b); st != 401 || d.Type != "authentication_error" {
				t.Fatalf("%s %s: %d %s", r[0], r[1], st, b)
			}
		}
	})
	var page listObject
	st, b := e.do("GET", "/v1/containers", e.keyA, nil)
	e.must(st, b, &page)
	if len(page.Data) != 1 || !bytes.Contains(b, []byte(c.ID)) {
		t.Fatalf("refused creates left containers: %s", b)
	}
}
