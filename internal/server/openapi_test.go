package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPI checks openapi.json against the routes the mux serves, both
// ways: every operation in the document reaches its own route on the real
// mux (not the /api/v1/ catch-all, not a 404 or 405), and every route the
// server registers is in the document with the same method and path.
func TestOpenAPI(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	st, body := e.doH("GET", "/api/v1/openapi.json", nil, nil)
	if st != http.StatusOK {
		t.Fatalf("GET openapi.json: %d", st)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	methods := map[string]bool{"get": true, "post": true, "put": true, "delete": true, "patch": true, "head": true, "options": true}
	var documented []string
	for path, item := range doc.Paths {
		for m, op := range item {
			if !methods[m] {
				continue
			}
			documented = append(documented, strings.ToUpper(m)+" "+path)
			var o struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(op, &o); err != nil || len(o.Responses) == 0 {
				t.Errorf("%s %s: no responses", m, path)
			}
		}
	}
	slices.Sort(documented)

	var served []string
	for _, p := range e.srv.Routes() {
		if p == "/api/v1/" || p == "/v1/containers/" || p == "/v1beta/" || p == "/api/v1beta/" {
			continue // the catch-alls that answer 404/405 in the envelope
		}
		served = append(served, p)
	}
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("openapi.json documents\n  %v\nthe server registers\n  %v", documented, served)
	}

	// Each documented operation, with its path parameters filled in,
	// resolves on the real mux to the pattern of the same text.
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, op := range documented {
		method, path, _ := strings.Cut(op, " ")
		req := httptest.NewRequest(method, param.ReplaceAllString(path, "x1"), nil)
		if _, pat := e.srv.mux.Handler(req); pat != op {
			t.Errorf("%s resolves to route %q", op, pat)
		}
	}

	// Every $ref points at something the document defines.
	var all map[string]any
	json.Unmarshal(body, &all)
	for _, ref := range regexp.MustCompile(`"\$ref":\s*"#/([^"]+)"`).FindAllStringSubmatch(string(body), -1) {
		var cur any = all
		for _, part := range strings.Split(ref[1], "/") {
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		if cur == nil {
			t.Errorf("dangling $ref #/%s", ref[1])
		}
	}
}
