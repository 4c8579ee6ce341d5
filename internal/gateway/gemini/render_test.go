package gemini

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
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

// A step's figures are inlineData parts after its result, in the shape
// genai's Part decodes (Blob: mimeType, data in base64), and a replayed
// run's inlineData parts right after its result go back with that result.
func TestStepImages(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\xff")
	st := &gateway.Step{Call: gateway.ToolCall{Name: "code_execution", Arguments: `{"code":"plt.show()"}`},
		Result: gateway.StepResult{Detail: &gateway.CodeExecDetail{Content: &gateway.BashResult{}, Images: []tool.Display{{MIME: "image/png", Data: png}}}}}
	rd := &renderer{model: "m", id: "x"}
	b, _ := json.Marshal(rd.response(&gateway.Result{Items: []gateway.Item{{Kind: gateway.ItemStep, Step: st}}}))
	var resp genai.GenerateContentResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	parts := resp.Candidates[0].Content.Parts
	if len(parts) != 3 || parts[1].CodeExecutionResult == nil || parts[2].InlineData == nil ||
		parts[2].InlineData.MIMEType != "image/png" || string(parts[2].InlineData.Data) != string(png) {
		t.Fatalf("%s", b)
	}

	// Replayed with a text part after the figure: the figure goes with the
	// result, an image after the text does not.
	resp.Candidates[0].Content.Parts = append(parts, &genai.Part{Text: "Here."}, parts[2])
	req := request{Contents: []*genai.Content{genai.NewContentFromText("plot", genai.RoleUser), resp.Candidates[0].Content,
		genai.NewContentFromText("again", genai.RoleUser)}, Tools: []*genai.Tool{{CodeExecution: &genai.ToolCodeExecution{}}}}
	run, err := parse(&req, httptest.NewRequest("POST", "/v1beta/models/p/m:generateContent", nil))
	if err != nil {
		t.Fatal(err)
	}
	r := run.Request.Messages[2].Parts[0].Result
	if r == nil || len(r.Images) != 1 || r.Images[0].MediaType != "image/png" || r.Images[0].Data != base64Std(png) {
		t.Fatalf("replayed result %+v", r)
	}
	for _, m := range run.Request.Messages[3:] {
		for _, p := range m.Parts {
			if p.Kind == gateway.PartImage {
				t.Fatalf("an image after the text was kept: %+v", run.Request.Messages)
			}
		}
	}
}
