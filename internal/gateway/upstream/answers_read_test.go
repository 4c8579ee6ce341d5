package upstream

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/jsonr"
	"github.com/shellgate/shellgate/internal/jsonw/jsonwtest"
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
	var q []string
	for _, s := range jsonwtest.Strings() {
		if !strings.ContainsRune(strings.ToValidUTF8(s, "\uFFFD"), '\uFFFD') {
			b, _ := json.Marshal(s)
			q = append(q, string(b))
		}
	}
	for i, s := range q {
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
	}
	return out
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
	answers := readerAnswers()
	for api, fresh := range answerKinds {
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

// FuzzAnswerReadersMatchUnmarshal: whatever a reader takes, unmarshal
// takes and decodes to the same value.
func FuzzAnswerReadersMatchUnmarshal(f *testing.F) {
	for _, bodies := range readerAnswers() {
		for _, b := range bodies[:min(len(bodies), 40)] {
			f.Add(b)
		}
	}
	for _, b := range append(readerRefuses, invalid...) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for api, fresh := range answerKinds {
			got := fresh()
			if !jsonr.Decode([]byte(body), got.read) {
				continue
			}
			want := fresh()
			if err := unmarshal([]byte(body), want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: %q\nreader    %+v\nunmarshal %+v (%v)", api, body, got, want, err)
			}
		}
	})
}
