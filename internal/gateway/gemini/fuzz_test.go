package gemini

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

// FuzzParse: a generateContent body is refused with a 4xx in Google's
// envelope (classify), never a 500; one that is accepted is a
// conversation a model can be sent: it ends with a user turn, turns
// alternate and none is empty, every call's arguments are a JSON object,
// and every tool result answers a call made before it. The corpus is in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		var req request
		if json.Unmarshal(body, &req) != nil {
			return // Serve answers 400 "Invalid JSON payload"
		}
		r := httptest.NewRequest("POST", "/v1beta/models/p/m:generateContent", nil)
		run, err := parse(&req, r)
		if err != nil {
			if status, msg := classify(err); status < 400 || status > 499 || msg == "" {
				t.Fatalf("%q: refused with %d %q", body, status, msg)
			}
			return
		}
		msgs := run.Request.Messages
		if len(msgs) == 0 || msgs[len(msgs)-1].Role != gateway.RoleUser {
			t.Fatalf("%q: accepted without a last user turn: %+v", body, msgs)
		}
		calls := map[string]bool{}
		for i, m := range msgs {
			if len(m.Parts) == 0 || (i > 0 && msgs[i-1].Role == m.Role) {
				t.Fatalf("%q: message %d is empty or repeats its role", body, i)
			}
			for _, p := range m.Parts {
				switch p.Kind {
				case gateway.PartToolCall:
					var args map[string]any
					if m.Role != gateway.RoleAssistant || json.Unmarshal([]byte(p.Call.Arguments), &args) != nil || args == nil {
						t.Fatalf("%q: call %+v in a %s turn", body, p.Call, m.Role)
					}
					calls[p.Call.ID] = true
				case gateway.PartToolResult:
					if m.Role != gateway.RoleUser || !calls[p.Result.CallID] {
						t.Fatalf("%q: result %+v answers no earlier call", body, p.Result)
					}
				}
			}
		}
	})
}
