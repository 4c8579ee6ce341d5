package scripted

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestValidation: what the real APIs refuse, the scripted one refuses too,
// in that API's envelope — so a translation bug fails a test.
func TestValidation(t *testing.T) {
	srv := NewServer(&Script{Turns: []Turn{{Text: "ok"}}, Repeat: true})
	defer srv.Close()
	chat, resp, msgs := srv.URL+"/v1/chat/completions", srv.URL+"/v1/responses", srv.URL+"/v1/messages"
	cases := []struct {
		name, url, body string
		status          int
		want            string
	}{
		{"01 chat ok", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200, `"content":"ok"`},
		{"02 chat not json", chat, `{"model":`, 400, `"error":{"code":null,"message":"the request body is not a JSON object"`},
		{"03 chat no model", chat, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "you must provide a model parameter"},
		{"04 chat orphan tool", chat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"call_x","content":"1"}]}`, 400, "must be a response to a preceeding message with 'tool_calls'"},
		{"05 chat unanswered call", chat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"and?"}]}`, 400, "did not have response messages: call_1"},
		{"06 chat object arguments", chat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]},{"role":"tool","tool_call_id":"c","content":"1"}]}`, 400, "expected a string"},
		{"07 chat tool_choice unknown", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool choice 'g' not found"},
		{"08 chat bad tool name", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"shellgate:shell"}}]}`, 400, "tools[0].function.name"},
		{"09 responses ok", resp, `{"model":"m","input":"hi"}`, 200, `"output_text"`},
		{"10 responses orphan output", resp, `{"model":"m","input":[{"type":"function_call_output","call_id":"call_9","output":"x"}]}`, 400, "No tool call found for function call output with call_id call_9."},
		{"11 responses unanswered call", resp, `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"call_3","name":"f","arguments":"{}"}]}`, 400, "No tool output found for function call call_3."},
		{"12 messages ok", msgs, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, 200, `"stop_reason":"end_turn"`},
		{"13 messages no max_tokens", msgs, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 400, `{"error":{"message":"max_tokens: Field required","type":"invalid_request_error"}`},
		{"14 messages roles", msgs, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"user","content":"again"}]}`, 400, "roles must alternate"},
		{"15 messages unanswered tool_use", msgs, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":"and?"}]}`, 400, "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"},
		{"16 messages orphan result", msgs, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"x"}]}]}`, 400, "unexpected `tool_use_id` found in `tool_result` blocks: toolu_2"},
		{"17 messages empty text", msgs, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, 400, "text content blocks must be non-empty"},
		{"18 messages input not object", msgs, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"x"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`, 400, "valid dictionary"},
		{"19 messages no schema", msgs, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f"}]}`, 400, "input_schema: Field required"},
		{"20 chat tool_choice mode", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"any"}`, 400, "Invalid value: 'any'. Supported values are: 'none', 'auto', and 'required'."},
		{"21 responses tool_choice mode", resp, `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":"any"}`, 400, "Invalid value: 'any'. Supported values are: 'none', 'auto', and 'required'."},
		{"22 responses tool_choice unknown", resp, `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, "Tool choice 'function' not found in 'tools' parameter."},
		{"23 responses tool_choice named", resp, `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"}}`, 200, `"output_text"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, body := post(t, c.url, c.body)
			if st != c.status || !strings.Contains(body, c.want) {
				t.Errorf("%d %s\nwant %d with %q", st, body, c.status, c.want)
			}
			if st != 200 && !strings.Contains(c.url, "messages") {
				var env struct {
					Error struct {
						Message, Type string
					} `json:"error"`
				}
				if json.Unmarshal([]byte(body), &env) != nil || env.Error.Type != "invalid_request_error" {
					t.Errorf("not OpenAI's envelope: %s", body)
				}
			}
		})
	}
}

// TestPlaying: turns by conversation position, per model, placeholders,
// sequential counters, the end of the script.
func TestPlaying(t *testing.T) {
	script, err := ParseScript([]byte(`
turns:
  - tool_calls: [{id: call_1, name: shell, arguments: {commands: [echo hi]}}]
  - text: "Output: {{last_tool_stdout}} / raw {{last_tool_output}} / asked {{last_user_text}} of {{model}} at {{turn}}"
models:
  seq:
    - text: one
    - text: two
`))
	if err != nil {
		t.Fatal(err)
	}
	script.Sequential = false
	srv := NewServer(script)
	defer srv.Close()
	chat := srv.URL + "/v1/chat/completions"
	_, body := post(t, chat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if !strings.Contains(body, `"arguments":"{\"commands\":[\"echo hi\"]}"`) || !strings.Contains(body, `"finish_reason":"tool_calls"`) {
		t.Errorf("turn 0: %s", body)
	}
	_, body = post(t, chat, `{"model":"m","messages":[{"role":"user","content":"sum?"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"{\"output\":[{\"stdout\":\"5050\\n\"}]}"}]}`)
	if !strings.Contains(body, `Output: 5050 / raw {\"output\":[{\"stdout\":\"5050\\n\"}]} / asked sum? of m at 1`) {
		t.Errorf("turn 1: %s", body)
	}
	_, body = post(t, chat, `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"},{"role":"user","content":"e"}]}`)
	if !strings.Contains(body, `the script of model \"m\" has 2 turns, this request is turn 2`) {
		t.Errorf("turn 2: %s", body)
	}
	// Per model; the sequential counter ignores the conversation.
	srv.Model.script.Sequential = true
	for _, want := range []string{"one", "two"} {
		_, body = post(t, srv.URL+"/v1/messages", `{"model":"seq","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`)
		if !strings.Contains(body, `"text":"`+want+`"`) {
			t.Errorf("sequential %s: %s", want, body)
		}
	}
	if n := len(srv.Requests()); n != 5 || srv.Requests()[4].Model != "seq" || srv.Requests()[4].Turn != 1 {
		t.Errorf("%d requests recorded, last %+v", n, srv.Last())
	}
}

func TestBadScript(t *testing.T) {
	for _, s := range []string{`turns: [{stop: halt}]`, `turns: [{error: {status: 200}}]`, `turns: [{tool_calls: [{arguments: {}}]}]`, `{}`, `turns: [{txt: a}]`, `models: {m: []}`} {
		if _, err := ParseScript([]byte(s)); err == nil {
			t.Errorf("%s: no error", s)
		}
	}
}

// TestDemo: the demo model calls the shell tool the request offers with a
// pandas command, then answers with the command's stdout and says it is
// scripted.
func TestDemo(t *testing.T) {
	srv := NewServer(Demo())
	defer srv.Close()
	_, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"north revenue?"}],"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object"}}}]}`)
	if !strings.Contains(body, `"name":"shell"`) || !strings.Contains(body, `{\"commands\":[\"f=$(ls *.csv`) || !strings.Contains(body, "pandas") {
		t.Errorf("turn 1: %s", body)
	}
	_, body = post(t, srv.URL+"/v1/messages", `{"model":"demo","max_tokens":100,"messages":[{"role":"user","content":"north revenue?"}],"tools":[{"name":"bash_code_execution","input_schema":{"type":"object"}}]}`)
	if !strings.Contains(body, `"name":"bash_code_execution"`) || !strings.Contains(body, `"input":{"command":"f=$(ls`) {
		t.Errorf("turn 1 on bash: %s", body)
	}
	_, body = post(t, srv.URL+"/v1/responses", `{"model":"demo","input":[{"role":"user","content":"north revenue?"},{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"{\"output\":[{\"stdout\":\"sales.csv: revenue by region\\nnorth    37.5\\n\",\"stderr\":\"\"}]}"}]}`)
	if !strings.Contains(body, "Scripted demo model") || !strings.Contains(body, `north    37.5`) {
		t.Errorf("turn 2: %s", body)
	}
}

// TestDocExample: the script in the package documentation parses.
func TestDocExample(t *testing.T) {
	s, err := ParseScript([]byte(`
turns:
  - tool_calls:
      - name: shell
        arguments: {commands: ["python3 -c 'print(1+1)'"]}
    usage: {input_tokens: 120, output_tokens: 20}
  - text: "The answer is {{last_tool_stdout}}"
models:
  broken-model:
    - error: {status: 429, type: rate_limit_error, message: "slow down"}
    - error: {status: 529, message: "Overloaded", mid_stream: true}   # streams, then an error event
  slow-model:
    - {text: "late", delay: 2s, chunk_delay: 50ms}
    - {hang: true}              # answers nothing until the client goes away
    - {text: "a b c", hang_stream: true}   # first event, then stalls
  any-shell:
    - tool_calls:
        - name: shell|bash_code_execution   # the first the request offers
          arguments: {commands: [ls]}
          arguments_for: {bash_code_execution: {command: ls}}
        - {name: broken, arguments: "{not json"}   # a string is sent as written
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Models["any-shell"][0].ToolCalls[1].ArgumentsText(); got != "{not json" {
		t.Errorf("string arguments %q", got)
	}
	if n, a := s.Models["any-shell"][0].ToolCalls[0].resolve([]string{"bash_code_execution"}); n != "bash_code_execution" || a != `{"command":"ls"}` {
		t.Errorf("alternative %s %s", n, a)
	}
	if time.Duration(s.Models["slow-model"][0].Delay) != 2*time.Second {
		t.Errorf("delay %v", s.Models["slow-model"][0].Delay)
	}
}
