package responses

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/testenv"
)

func TestMain(m *testing.M) { testenv.RunCheckingLeaks(m, 5*time.Second, nil) }

// FuzzReadRequest: whatever the body, reading it is a request or a 4xx in
// OpenAI's envelope — never a panic, never a 5xx.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"p/m","input":"hi"}`,
		`{"model":"p/m","input":[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"data:image/png;base64,AA=="}]}],"tools":[{"type":"shell","environment":{"type":"container_auto","file_ids":["f"],"network_policy":{"type":"allowlist","allowed_domains":["pypi.org"]}}}]}`,
		`{"model":"p/m","input":[{"type":"shell_call","call_id":"c","action":{"commands":["ls"]},"environment":{"type":"container_reference","container_id":"x"}},{"type":"shell_call_output","call_id":"c","status":"incomplete","output":[{"stdout":"","stderr":"e","outcome":{"type":"exit","exit_code":1}}]}]}`,
		`{"model":"p/m","input":[{"type":"local_shell_call","call_id":"c","action":{"type":"exec","command":["ls","-l"]}},{"type":"local_shell_call_output","id":"c","output":"{}"}]}`,
		`{"model":"p/m","input":[{"type":"openrouter:shell","call_id":"c","arguments":"{}","output":[]}],"tools":[{"type":"openrouter:shell","parameters":{"engine":"auto"}}],"tool_choice":{"type":"openrouter:shell"}}`,
		`{"model":"p/m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"r"}]}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"required","max_tool_calls":99,"metadata":{"a":"b"}}`,
		`{"model":"p/m","input":[{"type":"code_interpreter_call","id":"ci_1","status":"completed","code":"x=1","container_id":"cntr_1","outputs":[{"type":"logs","logs":"1"},{"type":"image","url":"data:image/png;base64,AA=="}]}],"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["f"],"memory_limit":"4g"}},{"type":"shell"}],"tool_choice":{"type":"code_interpreter"},"include":["code_interpreter_call.outputs"]}`,
		`{"model":"p/m","input":[{"type":"program","id":"prog_1","call_id":"c","code":"return 1","fingerprint":"f"},{"type":"function_call","call_id":"c.interrupt-1","name":"g","arguments":"{}","caller":{"type":"program","caller_id":"c"}},{"type":"function_call_output","call_id":"c.interrupt-1","output":"r"},{"type":"program_output","call_id":"c","result":"1","status":"completed"}],"tools":[{"type":"programmatic_tool_calling"},{"type":"function","name":"g","allowed_callers":["direct","programmatic"]}],"tool_choice":{"type":"programmatic_tool_calling"}}`,
		`{"model":1}`, `[]`, `null`, `{"model":"p/m","input":[null]}`, `{"model":"p/m","input":[{"type":"message","role":"user","content":null}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/v1/responses", strings.NewReader(body))
		p, err := readRequest(httptest.NewRecorder(), r)
		if err == nil {
			if p.req == nil || p.model == "" || p.maxCalls < 1 || p.maxCalls > gateway.MaxToolCalls {
				t.Fatalf("accepted %q as %+v", body, p)
			}
			return
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status < 400 || ae.Status > 499 || ae.Type != "invalid_request_error" || ae.Message == "" {
			t.Fatalf("body %q: %v", body, err)
		}
	})
}

// TestReplayedRefusalReadsTheSame: a refused step's items, replayed, give
// the model the text it read when the step was refused.
func TestReplayedRefusalReadsTheSame(t *testing.T) {
	step := &gateway.Step{Call: gateway.ToolCall{ID: "call_1", Name: "shell", Arguments: `{"commands":[]}`},
		Result: gateway.StepResult{IsError: true, Content: "error: invalid shell call: commands is empty"}}
	p := &parsed{shell: shellNative, model: "p/m"}
	m := newMeta(p, "cntr_1")
	items := m.renderOutput(&gateway.Result{Items: []gateway.Item{{Kind: gateway.ItemStep, Step: step}}})
	body := `{"model":"p/m","input":[` + string(items[0]) + `,` + string(items[1]) + `]}`
	r := httptest.NewRequest("POST", "/v1/responses", strings.NewReader(body))
	got, err := readRequest(httptest.NewRecorder(), r)
	if err != nil {
		t.Fatal(err)
	}
	res := got.req.Messages[1].Parts[0].Result
	if !res.IsError || res.Content != step.Result.Content || got.sel.ConversationContainerIDs[0] != "cntr_1" {
		t.Fatalf("%+v %+v", res, got.sel)
	}
}
