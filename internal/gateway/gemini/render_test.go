package gemini

import (
	"encoding/json"
	"testing"

	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
)

// TestStepPartsBytes: a step's parts are written with the bytes of the
// maps they replaced (encoding/json writes a map's keys sorted, HTML
// characters escaped), for hostile code and output.
func TestStepPartsBytes(t *testing.T) {
	strs := []string{"", "print(1)", "\"\\\n\t\x00\x1f", "<script>&</script>", "\xff\xfe bad utf-8", "\u2028\u2029", "é漢字🙂"}
	n := 0
	for _, code := range strs {
		for _, out := range strs {
			args, _ := json.Marshal(map[string]string{"code": code})
			details := []any{
				nil,
				&gateway.CodeExecDetail{Content: &gateway.BashResult{Stdout: out, Stderr: code, ReturnCode: 0}},
				&gateway.CodeExecDetail{Content: &gateway.BashResult{Stdout: out, Stderr: code, ReturnCode: 2}},
				&gateway.CodeExecDetail{Content: &gateway.CodeExecError{ErrorCode: "execution_time_exceeded", ErrorMessage: out}},
				&gateway.CodeExecDetail{Content: &gateway.CodeExecError{ErrorCode: "unavailable", ErrorMessage: out}},
			}
			for _, d := range details {
				st := &gateway.Step{Call: gateway.ToolCall{Name: "code_execution", Arguments: string(args)}, Result: gateway.StepResult{Content: out}}
				if d != nil {
					st.Result.Detail = d.(*gateway.CodeExecDetail)
				}
				c, r := stepParts(st)
				want := mapParts(st)
				got, _ := json.Marshal([]any{c, r, textPart{out}})
				if string(got) != want {
					t.Fatalf("parts:\n got %s\nwant %s", got, want)
				}
				n++
			}
		}
	}
	t.Logf("%d steps", n)
}

// mapParts is how the parts were written before: maps.
func mapParts(st *gateway.Step) string {
	var a struct {
		Code string `json:"code"`
	}
	json.Unmarshal([]byte(st.Call.Arguments), &a)
	code := a.Code
	r := stepResult(st)
	b, _ := json.Marshal([]any{
		map[string]any{"executableCode": map[string]any{"language": "PYTHON", "code": code}},
		map[string]any{"codeExecutionResult": map[string]any{"outcome": string(r.Outcome), "output": r.Output}},
		map[string]any{"text": st.Result.Content},
	})
	return string(b)
}

var _ genai.Outcome = genai.OutcomeOK
