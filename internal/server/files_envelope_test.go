package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFileRoutesEnvelopes: each family of file routes answers its errors
// in its own API's envelope, the key check's and the body cap's included.
func TestFileRoutesEnvelopes(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	c := e.create(e.keyA, "")
	big := strings.Repeat("x", 8<<10)
	anth := map[string]string{"x-api-key": e.keyA, "anthropic-version": "2023-06-01", "anthropic-beta": "files-api-2025-04-14"}
	oa := map[string]string{"Authorization": "Bearer " + e.keyA}
	for _, tc := range []struct {
		method, path string
		body         any
		hdr          map[string]string
		want         int
		shape        shape
	}{
		{"GET", "/v1/containers/" + c.ID + "/files?limit=101", nil, oa, 400, shapeOpenAI},
		{"GET", "/v1/containers/" + c.ID + "/files?order=sideways", nil, oa, 400, shapeOpenAI},
		{"GET", "/v1/containers/" + c.ID + "/files/cfile_%25", nil, oa, 400, shapeOpenAI},
		{"GET", "/v1/containers/nope/files", nil, oa, 404, shapeOpenAI},
		{"GET", "/v1/containers/" + c.ID + "/files", big, oa, 413, shapeOpenAI},
		{"GET", "/v1/containers/" + c.ID + "/files", nil, map[string]string{"Authorization": "Bearer sgk_bad"}, 401, shapeOpenAI},
		{"POST", "/v1/containers/" + c.ID + "/files", "{}", map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": "application/json"}, 400, shapeOpenAI},
		{"GET", "/v1/files?limit=0", nil, oa, 400, shapeOpenAI},
		{"GET", "/v1/files?purpose=assistants", nil, oa, 400, shapeOpenAI},
		{"GET", "/v1/files/file_nope", nil, oa, 404, shapeOpenAI},
		{"POST", "/v1/files", "not multipart", oa, 400, shapeOpenAI},
		{"GET", "/v1/files", nil, nil, 401, shapeOpenAI},
		{"GET", "/v1/files?before_id=file_x", nil, anth, 400, shapeAnthropic},
		{"GET", "/v1/files?limit=1001", nil, anth, 400, shapeAnthropic},
		{"GET", "/v1/files/file_nope/content", nil, anth, 404, shapeAnthropic},
		{"DELETE", "/v1/files/file_nope", nil, anth, 404, shapeAnthropic},
		{"GET", "/v1/files", big, anth, 413, shapeAnthropic},
		{"GET", "/api/v1/files/file_nope", nil, oa, 404, shapeOpenRouter},
		{"GET", "/api/v1/containers/" + c.ID + "/files", big, oa, 413, shapeOpenRouter},
	} {
		st, b := e.doH(tc.method, tc.path, tc.body, tc.hdr)
		if st != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, st, b, tc.want)
			continue
		}
		switch tc.shape {
		case shapeOpenAI:
			var oe struct {
				Error struct{ Message, Type string } `json:"error"`
			}
			if json.Unmarshal(b, &oe) != nil || oe.Error.Message == "" || oe.Error.Type == "" {
				t.Errorf("%s %s: not OpenAI's envelope: %s", tc.method, tc.path, b)
			}
		case shapeAnthropic:
			var ae struct {
				Type  string                         `json:"type"`
				Error struct{ Type, Message string } `json:"error"`
			}
			if json.Unmarshal(b, &ae) != nil || ae.Type != "error" || ae.Error.Message == "" || ae.Error.Type == "" {
				t.Errorf("%s %s: not Anthropic's envelope: %s", tc.method, tc.path, b)
			}
		default:
			envelope(t, st, b)
		}
	}
}
