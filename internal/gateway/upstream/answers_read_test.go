package upstream

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/jsonr"
	"github.com/shellgate/shellgate/internal/jsonr/jsonrtest"
)

// answerKinds are the lean views with a reader, each with a fresh value.
var answerKinds = map[string]func() answerReader{
	gateway.APIResponses: func() answerReader { return new(responsesAnswer) },
	gateway.APIChat:      func() answerReader { return new(chatAnswer) },
	gateway.APIMessages:  func() answerReader { return new(messagesAnswer) },
	gateway.APIGemini:    func() answerReader { return new(geminiAnswer) },
}

// readerAnswers are answers of every API, the live shapes of
// answerBodies and wire-formats §7 with hostile strings in every field a
// reader keeps: each reader must take those of its own API.
func readerAnswers() map[string][]string {
	out := map[string][]string{}
	for api, body := range answerBodies {
		out[api] = append(out[api], body)
	}
	for i, s := range hostileJSONStrings() {
		out[gateway.APIResponses] = append(out[gateway.APIResponses],
			fmt.Sprintf(`{"id":%s,"object":"response","status":"completed","error":null,"incomplete_details":null,"model":%s,"output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}]},{"id":"fc_%d","type":"function_call","status":"completed","arguments":%s,"call_id":%s,"name":%s}],"temperature":1.0,"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":3},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":9},"metadata":{"k":%s}}`,
				s, s, s, i, s, s, s, i, s),
			fmt.Sprintf(`{"id":"r","status":"failed","error":{"code":"server_error","message":%s},"output":[]}`, s),
			fmt.Sprintf(`{"id":"r","status":"incomplete","incomplete_details":{"reason":%s},"output":null}`, s))
		out[gateway.APIChat] = append(out[gateway.APIChat],
			fmt.Sprintf(`{"id":%s,"object":"chat.completion","model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":%s,"tool_calls":[{"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}]},"logprobs":null,"finish_reason":%s}],"usage":{"prompt_tokens":%d,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":1}}}`,
				s, s, s, s, s, s, s, s, i),
			`{"id":"c","choices":[{"message":{"content":null,"tool_calls":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":null}}`)
		out[gateway.APIMessages] = append(out[gateway.APIMessages],
			fmt.Sprintf(`{"id":%s,"type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":%s,"citations":null},{"type":"tool_use","id":%s,"name":%s,"input":{"command":%s,"n":[1.5,null]}}],"stop_reason":%s,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":1,"cache_read_input_tokens":2,"output_tokens":3,"output_tokens_details":{"thinking_tokens":4},"service_tier":"standard"}}`,
				s, s, s, s, s, s, s, i))
		out[gateway.APIGemini] = append(out[gateway.APIGemini],
			fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"text":%s},{"text":"x","thought":true,"thoughtSignature":"c2ln"},{"functionCall":{"id":"c%d","name":%s,"args":{"code":%s,"n":1.5e3,"big":12345678901234567890,"nested":{"a":[1,null,true,{"b":%s}]}}}}]},"finishReason":"STOP","index":0}],"promptFeedback":{"blockReason":%s},"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":7,"cachedContentTokenCount":3,"thoughtsTokenCount":2},"modelVersion":%s,"responseId":"r%d"}`,
				s, i, s, s, s, s, i, s, i),
			`{"candidates":[null,{"content":null},{"content":{"parts":[null,{"functionCall":{"name":"f","args":null}},{"functionCall":{"name":"f","args":{}}}]}}],"promptFeedback":null,"usageMetadata":null}`)
		// The provider's own hosted tools' items (engine auto).
		out[gateway.APIResponses] = append(out[gateway.APIResponses],
			fmt.Sprintf(`{"id":"r","status":"completed","output":[{"id":"sh_1","type":"shell_call","status":"completed","call_id":%s,"action":{"commands":[%s],"timeout_ms":null},"environment":{"type":"container_reference","container_id":%s}},{"id":"sho_1","type":"shell_call_output","status":%s,"call_id":%s,"max_output_length":null,"output":[{"stdout":%s,"stderr":"","outcome":{"type":"exit","exit_code":%d}}]},{"id":"ci_1","type":"code_interpreter_call","status":"failed","code":%s,"container_id":"c","outputs":null}]}`,
				s, s, s, s, s, s, i, s))
		out[gateway.APIMessages] = append(out[gateway.APIMessages],
			fmt.Sprintf(`{"id":"m","content":[{"type":"server_tool_use","id":%s,"name":"bash_code_execution","input":{"command":%s}},{"type":"bash_code_execution_tool_result","tool_use_id":%s,"content":{"type":"bash_code_execution_result","stdout":%s,"stderr":"","return_code":%d,"content":[]}}],"stop_reason":"end_turn","container":{"id":%s,"expires_at":"2026-01-01T00:00:00Z"}}`,
				s, s, s, s, i, s))
		out[gateway.APIGemini] = append(out[gateway.APIGemini],
			fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"executableCode":{"language":"PYTHON","code":%s}},{"codeExecutionResult":{"outcome":%s,"output":%s}},{"executableCode":null}]}}]}`, s, s, s))
	}
	return out
}

// eventKinds are the stream events' lean views, by API.
var eventKinds = map[string]func() answerReader{
	gateway.APIResponses: func() answerReader { return new(responsesEvent) },
	gateway.APIChat:      func() answerReader { return new(chatChunk) },
	gateway.APIMessages:  func() answerReader { return new(messagesEvent) },
}

// readerEvents are stream events of each API in the live shapes, with
// hostile strings in every field a reader keeps.
func readerEvents() map[string][]string {
	out := map[string][]string{}
	answers := readerAnswers()
	for i, s := range hostileJSONStrings() {
		out[gateway.APIResponses] = append(out[gateway.APIResponses],
			fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":%s,"output_index":0,"content_index":0,"delta":%s,"logprobs":[]}`, i, s, s),
			fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":2,"output_index":1,"item":{"id":%s,"type":"function_call","status":"in_progress","arguments":"","call_id":%s,"name":%s}}`, s, s, s),
			fmt.Sprintf(`{"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_1","output_index":1,"delta":%s,"obfuscation":"x"}`, s),
			fmt.Sprintf(`{"type":"response.completed","sequence_number":9,"response":%s}`, answers[gateway.APIResponses][min(i, len(answers[gateway.APIResponses])-1)]),
			fmt.Sprintf(`{"type":"error","sequence_number":1,"code":%s,"message":%s,"param":null}`, s, s))
		out[gateway.APIChat] = append(out[gateway.APIChat],
			fmt.Sprintf(`{"id":%s,"object":"chat.completion.chunk","created":1,"model":%s,"choices":[{"index":0,"delta":{"role":"assistant","content":%s,"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`, s, s, s),
			fmt.Sprintf(`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}]},"finish_reason":%s}]}`, i, s, s, s, s),
			fmt.Sprintf(`{"id":"c","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":0}}}`, i))
		out[gateway.APIMessages] = append(out[gateway.APIMessages],
			fmt.Sprintf(`{"type":"message_start","message":{"id":%s,"type":"message","role":"assistant","model":%s,"content":[],"stop_reason":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":2,"output_tokens":1}}}`, s, s, i),
			fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%s,"name":%s,"input":{}}}`, i, s, s),
			fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":%s}}`, s),
			fmt.Sprintf(`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":%s}}`, s),
			fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`, s),
			fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%s,"stop_sequence":null},"usage":{"output_tokens":%d}}`, s, i),
			fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","container":{"id":%s,"expires_at":%s}}}`, s, s),
			`{"type":"message_delta","delta":{"stop_reason":"end_turn","container":null}}`,
			`{"type":"content_block_stop","index":1}`, `{"type":"message_stop"}`, `{"type":"ping"}`)
	}
	return out
}

// hostileJSONStrings are jsonrtest's strings that are valid UTF-8, as
// JSON strings.
func hostileJSONStrings() []string {
	var q []string
	for _, s := range jsonrtest.Strings() {
		if !strings.ContainsRune(strings.ToValidUTF8(s, "\uFFFD"), '\uFFFD') {
			b, _ := json.Marshal(s)
			q = append(q, string(b))
		}
	}
	return q
}

// readerRefuses are answers that some reader leaves to unmarshal (which
// decodes them, or refuses them itself).
var readerRefuses = []string{
	`{"ID":"x"}`, `{"id":"a","id":"b"}`, `{"id":"\xff"}`, `{"id":"\ud800"}`, `{"usage":{"input_tokens":1.0}}`,
	`{"usage":{"input_tokens":"1"}}`, `{"output":{}}`, `{"content":{}}`, `{"choices":{}}`, `{"candidates":{}}`,
	`{"usageMetadata":{"promptTokenCount":99999999999}}`, `{"candidates":[{"content":{"parts":[{"functionCall":{"args":[]}}]}}]}`,
	`{"candidates":[{"content":{"parts":[{"functionCall":{"args":{"a":1,"a":2}}}]}}]}`, `[]`, `"x"`, `{"id":"x"} {}`,
}

// TestAnswerReadersMatchUnmarshal: each reader takes the answers of its
// API and decodes them to what unmarshal does; what it refuses,
// decodeAnswer still decodes as unmarshal does, error included.
func TestAnswerReadersMatchUnmarshal(t *testing.T) {
	testReaders(t, answerKinds, readerAnswers())
}

// TestEventReadersMatchUnmarshal is TestAnswerReadersMatchUnmarshal for
// the stream events.
func TestEventReadersMatchUnmarshal(t *testing.T) {
	testReaders(t, eventKinds, readerEvents())
}

func testReaders(t *testing.T, kinds map[string]func() answerReader, answers map[string][]string) {
	for api, fresh := range kinds {
		if len(answers[api]) < 10 {
			t.Fatalf("%s: only %d answers", api, len(answers[api]))
		}
		for _, body := range answers[api] {
			got := fresh()
			if !jsonr.Decode([]byte(body), got.read) {
				t.Errorf("%s reader refused %s", api, body)
				continue
			}
			want := fresh()
			if err := unmarshal([]byte(body), want); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %s\nreader    %+v\nunmarshal %+v (%v)", api, body, got, want, err)
			}
		}
		for _, body := range append(readerRefuses, invalid...) {
			got, want := fresh(), fresh()
			err, wantErr := decodeAnswer([]byte(body), got), unmarshal([]byte(body), want)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || wantErr == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("%s: decodeAnswer(%s) = %+v, %v; unmarshal %+v, %v", api, body, got, err, want, wantErr)
			}
		}
	}
}

// invalid answers, which both refuse.
var invalid = []string{``, `{`, `{"id":}`, `{"id":"a",}`, `{"output":[1,]}`, `{"id":"a"}}`, `nul`}

// FuzzAnswerReadersMatchUnmarshal: whatever a reader (of an answer or a
// stream event) takes, unmarshal takes and decodes to the same value.
func FuzzAnswerReadersMatchUnmarshal(f *testing.F) {
	for _, bodies := range readerAnswers() {
		for _, b := range bodies[:min(len(bodies), 40)] {
			f.Add(b)
		}
	}
	for _, bodies := range readerEvents() {
		for _, b := range bodies[:min(len(bodies), 60)] {
			f.Add(b)
		}
	}
	for _, b := range append(readerRefuses, invalid...) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, kinds := range []map[string]func() answerReader{answerKinds, eventKinds} {
			for api, fresh := range kinds {
				got := fresh()
				if !jsonr.Decode([]byte(body), got.read) {
					continue
				}
				want := fresh()
				if err := unmarshal([]byte(body), want); err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("%s %T: %q\nreader    %+v\nunmarshal %+v (%v)", api, got, body, got, want, err)
				}
			}
		}
	})
}
