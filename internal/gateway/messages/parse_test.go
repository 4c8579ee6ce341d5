package messages

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"testing"
)

// FuzzParse: whatever the body, parsing a request answers a 4xx error in
// the envelope's terms or a run, and never panics.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"model":"p/m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"p/m","max_tokens":10,"system":[{"type":"text","text":"s"}],"container":{"id":"c"},"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"type":"shellgate:bash","parameters":{"engine":"shellgate","environment":{"type":"container_reference","container_id":"c"}}},{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}},{"type":"container_upload","file_id":"file_1"}]},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}},{"type":"server_tool_use","id":"srvtoolu_2","name":"shellgate:shell","input":{"commands":["ls"]}},{"type":"shellgate_shell_tool_result","tool_use_id":"srvtoolu_2","content":{"output":[],"container_id":"c"}},{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"r"}]}]}]}`,
		`{"model":"p/m","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"text_editor_code_execution_tool_result","tool_use_id":"x","content":{}}]}]}`,
		resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":"sunny"},{"type":"text","text":"more"}]`),
		`[]`, `null`, `{"messages":null}`, `{"model":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/messages", bytes.NewReader(body))
		req, err := readBody(r)
		if err == nil {
			var p *parsed
			p, err = parse(req, r)
			if err == nil && (p.run == nil || len(p.run.Request.Messages) == 0) {
				t.Fatal("a run without messages")
			}
		}
		var re *reqError
		if err != nil && (!errors.As(err, &re) || re.status < 400 || re.status >= 500 || re.msg == "") {
			t.Fatalf("error %v is not a client error", err)
		}
	})
}
