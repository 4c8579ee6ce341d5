package chat

import (
	"encoding/json"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

// FuzzParseRequest: a Chat Completions body for a translated model is
// refused with an *Error naming what is wrong (Errors.write answers it 400),
// never another error (a 502); one that is accepted holds only user and
// assistant turns, user turns never empty, images with a URL or data,
// tools with names, and a body that decodes the same when the request
// is encoded and read again. The corpus is in
// testdata/fuzz/FuzzParseRequest.
func FuzzParseRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		req, opt, err := ParseRequest(body, "m")
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Message == "" {
				t.Fatalf("%q: refused with %T %v, not a request error", body, err, err)
			}
			return
		}
		if req.Model != "m" {
			t.Fatalf("model %q", req.Model)
		}
		for i, m := range req.Messages {
			switch m.Role {
			case gateway.RoleUser:
				if len(m.Parts) == 0 {
					t.Fatalf("%q: user message %d is empty", body, i)
				}
			case gateway.RoleAssistant:
			default:
				t.Fatalf("%q: message %d has role %q", body, i, m.Role)
			}
			for _, p := range m.Parts {
				if p.Kind == gateway.PartImage && p.Image.URL == "" && p.Image.Data == "" {
					t.Fatalf("%q: an image without a URL or data", body)
				}
			}
		}
		for _, tl := range req.Tools {
			if tl.Name == "" {
				t.Fatalf("%q: a tool without a name", body)
			}
		}
		// The request, encoded as the body a client would send, reads the
		// same.
		var raw request
		if err := json.Unmarshal(body, &raw); err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(raw)
		if err != nil {
			return // a json.RawMessage that Unmarshal took but Marshal cannot compact (not a value)
		}
		req2, opt2, err := ParseRequest(again, "m")
		if err != nil || opt2 != opt {
			t.Fatalf("%q re-encoded as %s: %v %+v", body, again, err, opt2)
		}
		a, _ := json.Marshal(req)
		b, _ := json.Marshal(req2)
		if string(a) != string(b) {
			t.Fatalf("%q re-encoded as %s reads differently:\n%s\n%s", body, again, a, b)
		}
	})
}
