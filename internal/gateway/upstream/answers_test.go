package upstream

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/jsontest"
)

// answerViews are the lean views of the answers and stream events, each
// with a fresh value and, for an answer, the adapter's making of a turn.
var answerViews = map[string]struct {
	fresh func() any
	turn  func(v any) (*gateway.Turn, error)
}{
	"responses":       {func() any { return new(responsesAnswer) }, func(v any) (*gateway.Turn, error) { return responsesTurn(v.(*responsesAnswer)) }},
	"chat":            {func() any { return new(chatAnswer) }, func(v any) (*gateway.Turn, error) { return chatTurn(v.(*chatAnswer)) }},
	"messages":        {func() any { return new(messagesAnswer) }, func(v any) (*gateway.Turn, error) { return messagesTurn(v.(*messagesAnswer)) }},
	"gemini":          {func() any { return new(geminiAnswer) }, func(v any) (*gateway.Turn, error) { return geminiWhole(v.(*geminiAnswer)) }},
	"responses event": {func() any { return new(responsesEvent) }, nil},
	"chat chunk":      {func() any { return new(chatChunk) }, nil},
	"messages event":  {func() any { return new(messagesEvent) }, nil},
}

// FuzzUnmarshalMatchesEncodingJSON: an upstream answer or stream event,
// hostile or not, decodes with unmarshal (what the adapters use) as with
// encoding/json — both accept it, to the same value, or both refuse it —
// and an accepted answer becomes a turn or an error, never a panic.
func FuzzUnmarshalMatchesEncodingJSON(f *testing.F) {
	for _, b := range answerBodies {
		f.Add(b)
	}
	for _, b := range []string{`{"ID":"x"}`, `{"id":"a","id":"b"}`, `{"usage":{"input_tokens":1.0}}`, `{"output":{}}`, `[]`, `{"id":"x"} {}`, `{"id":}`,
		`{"candidates":[null,{"content":null},{"content":{"parts":[null,{"functionCall":{"name":"f","args":null}}]}}],"usageMetadata":null}`,
		`{"candidates":[{"content":{"parts":[{"functionCall":{"args":{"a":1,"a":2}}}]}}]}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn","container":null},"usage":{"output_tokens":3}}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"shell","arguments":"{}"}}]},"finish_reason":null}],"usage":null}`} {
		f.Add(b)
	}
	for i, s := range jsontest.Strings()[:200] {
		q, _ := json.Marshal(s)
		f.Add(fmt.Sprintf(`{"type":"response.output_item.added","item_id":%s,"delta":%s,"item":{"id":"fc_%d","type":"function_call","arguments":%s,"call_id":%s,"name":%s}}`, q, q, i, q, q, q))
		f.Add(fmt.Sprintf(`{"id":"m","content":[{"type":"text","text":%s},{"type":"tool_use","id":%s,"name":%s,"input":{"command":%s}}],"stop_reason":"tool_use","usage":{"input_tokens":%d}}`, q, q, q, q, i))
	}
	f.Fuzz(func(t *testing.T, body string) {
		for name, view := range answerViews {
			got, want := view.fresh(), view.fresh()
			gerr, werr := unmarshal([]byte(body), got), json.Unmarshal([]byte(body), want)
			if (gerr == nil) != (werr == nil) || gerr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: %q\nunmarshal     %+v (%v)\nencoding/json %+v (%v)", name, body, got, gerr, want, werr)
			}
			if gerr == nil && view.turn != nil {
				if turn, err := view.turn(got); (turn == nil) == (err == nil) {
					t.Fatalf("%s: %q: turn %+v, error %v", name, body, turn, err)
				}
			}
		}
	})
}
