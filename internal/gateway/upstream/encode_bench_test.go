package upstream

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
)

// benchRun is the conversation of a gateway request at each of its turns:
// runs[k] has k shell steps (a system prompt, the user's question and the
// server tools' functions).
func benchRun(steps int) [][]gateway.Message {
	msgs := []gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "What is the north revenue in data.csv?"}}}}
	runs := [][]gateway.Message{msgs}
	for i := range steps {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			gateway.Message{Role: gateway.RoleAssistant, Parts: []gateway.Part{{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: id, Name: "shell", Arguments: `{"commands":["python3 -c 'import pandas'"]}`}}}},
			gateway.Message{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: id, Content: "exit code 0\nstdout:\n37.5\n"}}}})
		runs = append(runs, msgs)
	}
	return runs
}

// BenchmarkEncodeRun encodes the upstream request bodies of a 5-step run
// (6 turns, the conversation growing each turn) for each flavour, whole
// every turn (plain) and with the run's memo (memo); it reports the cost
// per turn and the ratio memo ÷ plain.
func BenchmarkEncodeRun(b *testing.B) {
	runs := benchRun(5)
	for _, api := range apis {
		var plainNs float64
		for _, memo := range []bool{false, true} {
			name := api + "/plain"
			if memo {
				name = api + "/memo"
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					req := &gateway.Request{Model: "m", System: "You are a data analyst.", MaxTokens: 1000,
						Tools: []gateway.Tool{gateway.ShellFunction("shell"), gateway.BashFunction("bash_code_execution")}}
					if memo {
						req.Encoded = &gateway.Encoded{}
					}
					for _, msgs := range runs {
						req.Messages = msgs
						if body, err := bodies[api](req, false); err != nil || len(body) == 0 {
							b.Fatal(err)
						}
					}
				}
				perTurn := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(len(runs))
				b.ReportMetric(perTurn/1000, "µs/turn")
				if !memo {
					plainNs = perTurn
				} else if plainNs > 0 {
					b.ReportMetric(perTurn/plainNs, "memo/plain")
				}
			})
		}
	}
}

// answerBodies are typical non-streamed answers with a tool call, as the
// three APIs send them.
var answerBodies = map[string]string{
	gateway.APIResponses: `{"id":"resp_1","object":"response","created_at":1760000000,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5","output":[{"id":"rs_1","type":"reasoning","summary":[]},{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"commands\":[\"python3 -c 'print(1)'\"]}","call_id":"call_1","name":"shell"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"medium","summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":0},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":1240},"user":null,"metadata":{}}`,
	gateway.APIChat:      `{"id":"chatcmpl-1","object":"chat.completion","created":1760000000,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"commands\":[\"python3 -c 'print(1)'\"]}"}}],"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1200,"completion_tokens":40,"total_tokens":1240,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}`,
	gateway.APIGemini:    `{"candidates":[{"content":{"role":"model","parts":[{"text":"Let me look."},{"functionCall":{"id":"call_1","name":"code_execution","args":{"code":"print(1)"}},"thoughtSignature":"c2lnbmF0dXJl"}]},"finishReason":"STOP","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HATE_SPEECH","probability":"NEGLIGIBLE"},{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","probability":"NEGLIGIBLE"}]}],"usageMetadata":{"promptTokenCount":1200,"candidatesTokenCount":40,"totalTokenCount":1240,"promptTokensDetails":[{"modality":"TEXT","tokenCount":1200}]},"modelVersion":"gemini-2.5-flash","responseId":"r_1","createTime":"2026-12-01T10:00:00.123456Z"}`,
	gateway.APIMessages:  `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"bash_code_execution","input":{"command":"python3 -c 'print(1)'"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":40,"service_tier":"standard"}}`,
}

// BenchmarkDecodeAnswer decodes one answer into the official SDK's type
// (sdk), into the adapter's lean view with encoding/json (lean-encjson)
// and with the package's unmarshal (lean, what the adapters do), and
// reports lean ÷ sdk and lean ÷ lean-encjson.
func BenchmarkDecodeAnswer(b *testing.B) {
	sdk := map[string]func([]byte) error{
		gateway.APIResponses: func(d []byte) error { var v responses.Response; return json.Unmarshal(d, &v) },
		gateway.APIChat:      func(d []byte) error { var v openai.ChatCompletion; return json.Unmarshal(d, &v) },
		gateway.APIMessages:  func(d []byte) error { var v anthropic.Message; return json.Unmarshal(d, &v) },
		gateway.APIGemini:    func(d []byte) error { var v genai.GenerateContentResponse; return json.Unmarshal(d, &v) },
	}
	leanWith := func(dec func([]byte, any) error) map[string]func([]byte) error {
		return map[string]func([]byte) error{
			gateway.APIResponses: decodeTurn(dec, responsesTurn),
			gateway.APIChat:      decodeTurn(dec, chatTurn),
			gateway.APIMessages:  decodeTurn[messagesAnswer](dec, nil),
			gateway.APIGemini:    decodeTurn[geminiAnswer](dec, nil),
		}
	}
	kinds := map[string]map[string]func([]byte) error{"sdk": sdk, "lean-encjson": leanWith(json.Unmarshal), "lean": leanWith(unmarshal)}
	for _, api := range []string{gateway.APIChat, gateway.APIResponses, gateway.APIMessages, gateway.APIGemini} {
		body := []byte(answerBodies[api])
		ns := map[string]float64{}
		for _, k := range []string{"sdk", "lean-encjson", "lean"} {
			f := kinds[k][api]
			b.Run(api+"/"+k, func(b *testing.B) {
				for b.Loop() {
					if err := f(body); err != nil {
						b.Fatal(err)
					}
				}
				ns[k] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				if k == "lean" && ns["sdk"] > 0 && ns["lean-encjson"] > 0 {
					b.ReportMetric(ns[k]/ns["sdk"], "lean/sdk")
					b.ReportMetric(ns[k]/ns["lean-encjson"], "lean/encjson")
				}
			})
		}
	}
}

// decodeTurn decodes an answer into an A with dec and, when turn is set,
// makes it a Turn.
func decodeTurn[A any](dec func([]byte, any) error, turn func(*A) (*gateway.Turn, error)) func([]byte) error {
	return func(d []byte) error {
		var v A
		if err := dec(d, &v); err != nil || turn == nil {
			return err
		}
		_, err := turn(&v)
		return err
	}
}
