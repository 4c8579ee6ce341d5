package upstream

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

var bodies = map[string]func(*gateway.Request, bool) ([]byte, error){
	gateway.APIChat: chatBody, gateway.APIResponses: responsesBody, gateway.APIMessages: messagesBody, gateway.APIGemini: geminiBody,
}

// TestEncodeMemo grows a conversation as a run does — text, images, two
// user messages in a row (which Messages merges), tool calls and results
// with images and errors, a user message after results, streamed and not,
// tool choice changed for the last turn — and checks that every turn's memoised body is the same JSON
// value as the whole request encoded afresh.
func TestEncodeMemo(t *testing.T) {
	img := &gateway.Image{MediaType: "image/png", Data: "aGVsbG8="}
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", api, stream), func(t *testing.T) {
				req := &gateway.Request{Model: "m", System: "sys", MaxTokens: 100, Encoded: &gateway.Encoded{},
					Tools: []gateway.Tool{gateway.ShellFunction("shell"), gateway.BashFunction("bash")}}
				steps := [][]gateway.Message{
					{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "hi"}, {Kind: gateway.PartImage, Image: img}}}},
					{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "and this"}}}},
				}
				for i := range 4 {
					id := fmt.Sprintf("call_%d", i)
					res := &gateway.ToolResult{CallID: id, Content: "out", IsError: i == 2}
					if i == 1 {
						res.Images = []gateway.Image{*img}
					}
					steps = append(steps, []gateway.Message{
						{Role: gateway.RoleAssistant, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "let me"}, {Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: id, Name: "shell", Arguments: `{"commands":["ls"]}`}}}},
						{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult, Result: res}}},
					})
				}
				// A user message right after tool results: Messages and
				// Gemini merge it into the results' element, which the memo
				// rebuilds from its first message.
				steps = append(steps, []gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "go on"}}}})
				for i, add := range steps {
					req.Messages = append(req.Messages, add...)
					if i == len(steps)-1 {
						req.ToolChoice = gateway.ToolChoice{Mode: gateway.ChoiceNone}
					}
					got, err := bodies[api](req, stream)
					if err != nil {
						t.Fatal(err)
					}
					plain := *req
					plain.Encoded = nil
					want, err := bodies[api](&plain, stream)
					if err != nil {
						t.Fatal(err)
					}
					var g, w any
					if err := json.Unmarshal(got, &g); err != nil {
						t.Fatalf("turn %d: memoised body is not JSON: %v\n%s", i, err, got)
					}
					json.Unmarshal(want, &w)
					if !reflect.DeepEqual(g, w) {
						t.Fatalf("turn %d: memoised body differs\n got %s\nwant %s", i, got, want)
					}
				}
				if len(req.Encoded.Elems) == 0 || req.Encoded.Tools == nil {
					t.Fatalf("the memo was not used: %+v", req.Encoded)
				}
				if api != gateway.APIChat && req.Encoded.From == 0 {
					t.Fatalf("the adapter translated the whole conversation every turn: %+v", req.Encoded)
				}
			})
		}
	}
}
