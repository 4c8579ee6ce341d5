// Package scripted is a scripted upstream model: a real HTTP server that
// speaks the four upstream wire protocols Shellgate's gateway calls —
// OpenAI Chat Completions (POST /v1/chat/completions), OpenAI Responses
// (POST /v1/responses), Anthropic Messages (POST /v1/messages) and the
// Gemini API (POST /v1beta/models/MODEL:generateContent, and
// :streamGenerateContent?alt=sse) —
// streamed (each API's own SSE grammar) and not, and answers with turns
// from a script instead of a model.
//
// It exists because no model API is reachable from tests: the gateway's
// upstream adapters, the request loop and the client frontends are tested
// against it, and the README's demo runs on it when no real provider is
// configured. It validates what it receives the way the real APIs do where
// a translation bug would show (unanswered tool calls, orphan tool results,
// roles out of order, malformed tools) and answers 400 in that API's
// envelope, and it records every request so a test can assert what the
// gateway sent.
//
// # Script
//
// A Script is a list of turns per model name:
//
//	turns:                       # played for any model not named below
//	  - tool_calls:
//	      - name: shell
//	        arguments: {commands: ["python3 -c 'print(1+1)'"]}
//	    usage: {input_tokens: 120, output_tokens: 20}
//	  - text: "The answer is {{last_tool_stdout}}"
//	models:
//	  broken-model:
//	    - error: {status: 429, type: rate_limit_error, message: "slow down"}
//	    - error: {status: 529, message: "Overloaded", mid_stream: true}   # streams, then an error event
//	  slow-model:
//	    - {text: "late", delay: 2s, chunk_delay: 50ms}
//	    - {hang: true}              # answers nothing until the client goes away
//	    - {text: "a b c", hang_stream: true}   # first event, then stalls
//	  any-shell:
//	    - tool_calls:
//	        - name: shell|bash_code_execution   # the first the request offers
//	          arguments: {commands: [ls]}
//	          arguments_for: {bash_code_execution: {command: ls}}
//	        - {name: broken, arguments: "{not json"}   # a string is sent as written
//
// A turn may report runs of the provider's own hosted tool, done before
// its text, as a provider that runs them itself answers (the request must
// offer that tool: Responses {"type":"shell"} or code_interpreter,
// Messages code_execution_20250825, Gemini codeExecution; else 400):
//
//	native-model:
//	  - hosted:
//	      - {code: "echo hi", stdout: "hi\n"}          # exit_code, stderr, error
//	    text: "It printed hi."
//
// Responses answers shell_call + shell_call_output items (or a
// code_interpreter_call when the request offers no shell), Messages
// server_tool_use + bash_code_execution_tool_result blocks, Gemini
// executableCode + codeExecutionResult parts; streamed in each API's
// events.
//
// Each turn may also set stop (end, max_tokens, tool_use, stop_sequence,
// refusal, pause), stop_sequence, usage (input_tokens, output_tokens,
// cache_read_tokens, cache_write_tokens, reasoning_tokens) and model (the
// name the answer claims); see Turn.
//
// Which turn answers a request: by default the number of assistant turns
// already in the request's conversation (a fresh conversation gets turn 0,
// the request after one tool round gets turn 1, ...), so concurrent
// conversations each play the script from the start. With sequential: true
// a per-model counter picks turns in the order requests arrive instead.
// Past the last turn the server answers 500 ("the script has no turn N")
// unless repeat: true, which starts over (turn N mod len).
//
// A turn's text and tool-call arguments may use placeholders filled from
// the request: {{last_tool_output}} (the last tool result's content as the
// request carries it), {{last_tool_stdout}} (the stdout of the commands in
// the last tool result when it is Shellgate's shell result JSON or a
// bash_code_execution_result, else the
// content), {{last_user_text}}, {{model}} and {{turn}} (0-based).
//
// # Role
//
//   - Scripted upstream (`internal/gateway/scripted`): a real HTTP server
//     speaking all four APIs from a script (per model; turns by conversation
//     position), validating requests as the real APIs do, recording them; the
//     tests' model and the demo's (`shellgate scripted-upstream`).
package scripted

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Script is what the server plays.
type Script struct {
	// Turns are played for a model not listed in Models.
	Turns []Turn `json:"turns,omitempty"`
	// Models are per-model turns, by the model name in the request.
	Models map[string][]Turn `json:"models,omitempty"`
	// Sequential picks turns by a per-model counter of requests instead of
	// by the number of assistant turns in the conversation.
	Sequential bool `json:"sequential,omitempty"`
	// Repeat starts the turns over past the last one instead of answering
	// 500.
	Repeat bool `json:"repeat,omitempty"`
}

// Turn is one answer of the model.
type Turn struct {
	// Text is the assistant text (placeholders filled), before any tool
	// calls. Empty: no text part.
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Hosted are runs of the provider's own hosted tool the turn reports
	// as done, before Text.
	Hosted []HostedRun `json:"hosted,omitempty"`
	// Stop is the stop reason in the gateway's neutral words: end,
	// max_tokens, tool_use, stop_sequence, refusal, pause. Empty: tool_use
	// when the turn has tool calls, else end. With refusal the text is the
	// refusal.
	Stop string `json:"stop,omitempty"`
	// StopSequence is the sequence reported with stop_sequence (Messages).
	StopSequence string `json:"stop_sequence,omitempty"`
	Usage        Usage  `json:"usage,omitempty"`
	// Error, when set, is answered instead of the turn.
	Error *Error `json:"error,omitempty"`
	// Delay waits before answering (before the response head).
	Delay Duration `json:"delay,omitempty"`
	// ChunkDelay waits between streamed events.
	ChunkDelay Duration `json:"chunk_delay,omitempty"`
	// Hang holds the request open, answering nothing, until the client
	// goes away.
	Hang bool `json:"hang,omitempty"`
	// HangStream, on a streamed request, sends the response head and the
	// first event and then hangs until the client goes away (a stream that
	// stalls). On a non-streamed request it is Hang.
	HangStream bool `json:"hang_stream,omitempty"`
	// Model is the model name the answer claims; empty: the request's.
	Model string `json:"model,omitempty"`
}

// ToolCall is a call the scripted model makes.
type ToolCall struct {
	// ID is the call id; empty: generated in the API's style (call_…,
	// toolu_…).
	ID string `json:"id,omitempty"`
	// Name is the tool called. "a|b|c" names alternatives: the first the
	// request offers as a tool is called (else a), so one script can drive
	// whichever shell tool the gateway exposed.
	Name string `json:"name"`
	// Arguments is the arguments JSON. In a script file it may be an
	// object (written as is) or a string (its text is the arguments, so a
	// script can send invalid JSON).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ArgumentsFor overrides Arguments for the alternative chosen, by name.
	ArgumentsFor map[string]json.RawMessage `json:"arguments_for,omitempty"`
}

// resolve picks the alternative of the call's name the request offers and
// its arguments text.
func (c ToolCall) resolve(tools []string) (name, args string) {
	alts := strings.Split(c.Name, "|")
	name = alts[0]
	for _, a := range alts {
		if slices.Contains(tools, a) {
			name = a
			break
		}
	}
	if a, ok := c.ArgumentsFor[name]; ok {
		c.Arguments = a
	}
	return name, c.ArgumentsText()
}

// ArgumentsText is the arguments as the model writes them.
func (c ToolCall) ArgumentsText() string {
	a := bytes.TrimSpace(c.Arguments)
	if len(a) == 0 {
		return "{}"
	}
	if a[0] == '"' {
		var s string
		if json.Unmarshal(a, &s) == nil {
			return s
		}
	}
	return string(a)
}

// HostedRun is a run of the provider's hosted tool: what ran (a shell
// command; Python on Gemini and code_interpreter) and what it printed.
type HostedRun struct {
	ID       string `json:"id,omitempty"` // empty: generated in the API's style
	Code     string `json:"code"`
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	// Error is the tool's error code instead of a result ("unavailable",
	// …; Messages' tool_result_error, Gemini's OUTCOME_FAILED).
	Error string `json:"error,omitempty"`
	// Editor, on Messages, makes the run a text_editor_code_execution
	// call with this input, answered with Result (its content object, as
	// written) instead of Code's bash run.
	Editor json.RawMessage `json:"editor,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Usage is the turn's token counts. InputTokens includes the cached ones
// (CacheRead, CacheWrite); OutputTokens includes ReasoningTokens. Each API
// renders them its own way (Messages: input_tokens without the cache).
type Usage struct {
	InputTokens      int64 `json:"input_tokens,omitempty"`
	OutputTokens     int64 `json:"output_tokens,omitempty"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
}

// Error is an error answer: Status and the API's error envelope with Type
// and Message, or Body verbatim when set.
type Error struct {
	Status  int    `json:"status"`
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"`
	Body    string `json:"body,omitempty"`
	// MidStream, on a streamed request, starts the stream (status 200 and
	// the API's opening events) and then sends the error as that API
	// does mid-stream: Chat a data: {"error":{...}} chunk, Responses an
	// "error" event, Messages an "error" event. Status is then only the
	// error's type where the API has none (Messages). Non-streamed
	// requests get the plain error answer.
	MidStream bool `json:"mid_stream,omitempty"`
}

// Duration is a time.Duration written "2s" (or a number of nanoseconds).
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: want a string like \"2s\", got %s", b)
	}
	*d = Duration(n)
	return nil
}

// LoadScript reads a script file, YAML or JSON (JSON is YAML).
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseScript(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseScript parses a script in YAML or JSON. Unknown fields are errors.
func ParseScript(b []byte) (*Script, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	return &s, s.Validate()
}

// Validate checks what the server cannot play.
func (s *Script) Validate() error {
	check := func(where string, turns []Turn) error {
		for i, t := range turns {
			at := fmt.Sprintf("%s[%d]", where, i)
			switch t.Stop {
			case "", "end", "max_tokens", "tool_use", "stop_sequence", "refusal", "pause":
			default:
				return fmt.Errorf("%s.stop: %q is not one of end, max_tokens, tool_use, stop_sequence, refusal, pause", at, t.Stop)
			}
			if t.Error != nil && (t.Error.Status < 400 || t.Error.Status > 599) {
				return fmt.Errorf("%s.error.status: %d is not an HTTP error status", at, t.Error.Status)
			}
			for j, c := range t.ToolCalls {
				if c.Name == "" {
					return fmt.Errorf("%s.tool_calls[%d].name: empty", at, j)
				}
			}
		}
		return nil
	}
	if err := check("turns", s.Turns); err != nil {
		return err
	}
	for m, turns := range s.Models {
		if len(turns) == 0 {
			return fmt.Errorf("models.%s: no turns", m)
		}
		if err := check("models."+m, turns); err != nil {
			return err
		}
	}
	if len(s.Turns) == 0 && len(s.Models) == 0 {
		return errors.New("script: no turns")
	}
	return nil
}

// stop is the turn's stop reason, defaulted.
func (t *Turn) stop() string {
	if t.Stop != "" {
		return t.Stop
	}
	if len(t.ToolCalls) > 0 {
		return "tool_use"
	}
	return "end"
}

// conversation is what the server read from a request, in any API: the
// facts turn selection, placeholders and the record need.
type conversation struct {
	Model          string
	Stream         bool
	AssistantTurns int
	ToolResults    []string
	LastUserText   string
	Tools          []string
	// Hosted are the provider's own hosted tools the request offers
	// ("shell", "code_interpreter", "code_execution"); HostedContainer
	// the container the request names for them ("" for a new one, which
	// the answer calls cntr_scripted / container_scripted).
	Hosted          []string
	HostedContainer string
	// includeUsage: Chat Completions' stream_options.include_usage.
	includeUsage bool
}

// fill replaces the placeholders in s.
func fill(s string, c *conversation, turn int) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	last := ""
	if n := len(c.ToolResults); n > 0 {
		last = c.ToolResults[n-1]
	}
	return strings.NewReplacer(
		"{{last_tool_output}}", last,
		"{{last_tool_stdout}}", stdoutOf(last),
		"{{last_user_text}}", c.LastUserText,
		"{{model}}", c.Model,
		"{{turn}}", fmt.Sprint(turn),
	).Replace(s)
}

// stdoutOf is the stdout of Shellgate's shell result JSON
// ({"output":[{"stdout":...}]}) joined, trailing newline trimmed; other
// text is returned as is.
func stdoutOf(content string) string {
	var v struct {
		Output []struct {
			Stdout *string `json:"stdout"`
		} `json:"output"`
		// Anthropic's bash_code_execution_result, as the Messages
		// frontend gives it to the model.
		Stdout *string `json:"stdout"`
	}
	if json.Unmarshal([]byte(content), &v) != nil {
		return content
	}
	if len(v.Output) == 0 || v.Output[0].Stdout == nil {
		if v.Stdout != nil {
			return strings.TrimRight(*v.Stdout, "\n")
		}
		return content
	}
	var b strings.Builder
	for _, o := range v.Output {
		if o.Stdout != nil {
			b.WriteString(*o.Stdout)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

//go:embed demo-model.yaml
var demoScript []byte

// Demo is the scripted demo model (demo-model.yaml): a shell call with a
// pandas command over the uploaded CSV, then an answer with its output
// that says it is scripted.
func Demo() *Script {
	s, err := ParseScript(demoScript)
	if err != nil {
		panic("scripted: demo-model.yaml: " + err.Error())
	}
	return s
}
