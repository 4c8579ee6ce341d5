package gemini

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

// TestParse: each malformed request is refused with a message naming what
// is wrong; a replayed code run becomes a call and its result.
func TestParse(t *testing.T) {
	bad := map[string]string{
		`{}`: "contents is not specified",
		`{"contents":[{"role":"robot","parts":[{"text":"hi"}]}]}`:                                                                                                                   "valid role",
		`{"contents":[{"role":"user","parts":[]}]}`:                                                                                                                                 "must not be empty",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"yo"}]}]}`:                                                                           "end with a user turn",
		`{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`:                                                                                  "answers no function call",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"text":"?"}]}]}`:          "need a functionResponse",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"codeExecutionResult":{"outcome":"OUTCOME_OK"}}]},{"role":"user","parts":[{"text":"?"}]}]}`: "no executableCode before it",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"executableCode":{"code":"1"}}]},{"role":"user","parts":[{"text":"?"}]}]}`:                  "needs its codeExecutionResult",
		`{"contents":[{"role":"user","parts":[{"functionCall":{"name":"f"}}]}]}`:                                                                                                    "cannot hold model parts",
		`{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"application/pdf","data":"AA=="}}]}]}`:                                                                      "only images",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":[{"name":""}]}]}`:                                                                   "Name is required",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":[{"name":"f"},{"name":"f"}]}]}`:                                                     "duplicate function name",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"codeExecution":{}},{"functionDeclarations":[{"name":"code_execution"}]}]}`:                                "code execution tool",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"googleSearch":{}}]}`:                                                                                      "only functionDeclarations and codeExecution",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"toolConfig":{"functionCallingConfig":{"mode":"SOMETIMES"}}}`:                                                        "function_calling_config.mode",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["g"]}}}`:                                 "not a declared function",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":2}}`:                                                                            "only 1 candidate",
	}
	r := httptest.NewRequest("POST", "/v1beta/models/p/m:generateContent", nil)
	for body, want := range bad {
		var req request
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		_, err := parse(&req, r)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}

	// A replayed run: text, code, result, text, then the user's turn.
	body := `{"contents":[{"role":"user","parts":[{"text":"sum?"}]},{"role":"model","parts":[{"text":"Let me."},{"executableCode":{"language":"PYTHON","code":"print(5050)"}},{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"5050\n"}},{"text":"It is 5050."}]},{"role":"user","parts":[{"text":"thanks"}]}],"tools":[{"codeExecution":{}}]}`
	var req request
	json.Unmarshal([]byte(body), &req)
	run, err := parse(&req, r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range run.Request.Messages {
		for _, p := range m.Parts {
			got = append(got, string(m.Role)+":"+string(p.Kind))
		}
	}
	want := "user:text assistant:text assistant:tool_call user:tool_result assistant:text user:text"
	if strings.Join(got, " ") != want {
		t.Fatalf("messages %v, want %s", got, want)
	}
	call := run.Request.Messages[1].Parts[1].Call
	res := run.Request.Messages[2].Parts[0].Result
	if call.Name != gateway.CodeExecution || call.Arguments != `{"code":"print(5050)"}` || res.CallID != call.ID || !strings.Contains(res.Content, `"stdout":"5050\n"`) || res.IsError {
		t.Fatalf("call %+v result %+v", call, res)
	}
	if _, ok := run.ServerTools[gateway.CodeExecution]; !ok {
		t.Fatal("codeExecution not served")
	}
}
