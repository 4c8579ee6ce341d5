package upstream

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/jsontest"
)

func TestLeanMatchesSDK(t *testing.T) {
	check := func(t *testing.T, what string, lean func([]byte) ([]byte, bool), v any, wantLean bool) {
		t.Helper()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := lean([]byte("prefix"))
		if !strings.HasPrefix(string(got), "prefix") {
			t.Fatalf("%s: the lean encoder lost what was before it: %q", what, got)
		}
		if ok != wantLean {
			t.Fatalf("%s: lean encoder took it = %v, want %v (%s)", what, ok, wantLean, want)
		}
		if ok && string(got[len("prefix"):]) != string(want) {
			t.Fatalf("%s: lean encoding differs from the SDK's\n got %s\nwant %s", what, got[len("prefix"):], want)
		}
		if !ok && string(got) != "prefix" {
			t.Fatalf("%s: a refused element left bytes behind: %q", what, got)
		}
	}
	responsesCase := func(t *testing.T, u responses.ResponseInputItemUnionParam, wantLean bool) {
		t.Helper()
		check(t, fmt.Sprintf("%+v", u), func(b []byte) ([]byte, bool) { return leanResponsesItem(b, &u) }, u, wantLean)
	}
	messageCase := func(t *testing.T, m anthropic.MessageParam, wantLean bool) {
		t.Helper()
		check(t, fmt.Sprintf("%+v", m), func(b []byte) ([]byte, bool) { return leanMessage(b, &m) }, m, wantLean)
	}
	t.Run("responses", func(t *testing.T) {
		for _, s := range jsontest.Strings() {
			responsesCase(t, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
				CallID: "call_" + s, Name: s, Arguments: s}}, true)
			out := responses.ResponseInputItemFunctionCallOutputParam{CallID: param.NewOpt(s)}
			out.Output.OfString = param.NewOpt(s)
			responsesCase(t, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &out}, true)
		}
		// Anything more than what the encoder writes goes to the SDK.
		responsesCase(t, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
			CallID: "c", Name: "n", Arguments: "{}", ID: param.NewOpt("fc_1")}}, false)
		responsesCase(t, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
			CallID: "c", Name: "n", Arguments: "{}", Status: responses.ResponseFunctionToolCallStatusCompleted}}, false)
		withImage := responses.ResponseInputItemFunctionCallOutputParam{CallID: param.NewOpt("c")}
		withImage.Output.OfResponseFunctionCallOutputItemArray = responses.ResponseFunctionCallOutputItemListParam{
			{OfInputText: &responses.ResponseInputTextContentParam{Text: "t"}}}
		responsesCase(t, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &withImage}, false)
		withStatus := responses.ResponseInputItemFunctionCallOutputParam{CallID: param.NewOpt("c"), Status: "completed"}
		withStatus.Output.OfString = param.NewOpt("x")
		responsesCase(t, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &withStatus}, false)
		responsesCase(t, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
			Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfString: param.NewOpt("hi")}}}, false)
	})
	t.Run("messages", func(t *testing.T) {
		for _, s := range jsontest.Strings() {
			input := toolInput(s) // what messagesParams puts there, valid or not
			messageCase(t, anthropic.NewAssistantMessage(anthropic.NewTextBlock(s), anthropic.NewToolUseBlock("toolu_"+s, input, s)), true)
			tr := anthropic.ToolResultBlockParam{ToolUseID: s, IsError: anthropic.Bool(len(s)%2 == 0)}
			tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: s}})
			messageCase(t, anthropic.NewUserMessage(anthropic.ContentBlockParamUnion{OfToolResult: &tr}, anthropic.NewTextBlock(s)), true)
		}
		empty := anthropic.ToolResultBlockParam{ToolUseID: "t"}
		messageCase(t, anthropic.NewUserMessage(anthropic.ContentBlockParamUnion{OfToolResult: &empty}), true)
		messageCase(t, anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("t", json.RawMessage(`{"a": 1}`), "n")), false)
		messageCase(t, anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("t", map[string]any{"a": 1}, "n")), false)
		cached := anthropic.NewTextBlock("x")
		cached.OfText.CacheControl = anthropic.NewCacheControlEphemeralParam()
		messageCase(t, anthropic.NewUserMessage(cached), false)
		img := anthropic.ToolResultBlockParam{ToolUseID: "t"}
		img.Content = append(img.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{
			Source: anthropic.ImageBlockParamSourceUnion{OfBase64: &anthropic.Base64ImageSourceParam{Data: "aGk=", MediaType: "image/png"}}}})
		messageCase(t, anthropic.NewUserMessage(anthropic.NewTextBlock("first"), anthropic.ContentBlockParamUnion{OfToolResult: &img}), false)
	})
	geminiCase := func(t *testing.T, c *genai.Content, wantLean bool) {
		t.Helper()
		check(t, fmt.Sprintf("%+v", c), func(b []byte) ([]byte, bool) { return leanGeminiContent(b, &c) }, c, wantLean)
	}
	t.Run("gemini", func(t *testing.T) {
		for i, s := range jsontest.Strings() {
			// The arguments as geminiParams makes them: the model's JSON
			// decoded, or the text it wrote when that is not an object.
			var args map[string]any
			if json.Unmarshal([]byte(s), &args) != nil {
				args = map[string]any{"_raw_arguments": s}
			}
			geminiCase(t, &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{Text: s},
				{FunctionCall: &genai.FunctionCall{ID: s, Name: s, Args: args}}}}, s != "")
			key := []string{"output", "error"}[i%2]
			geminiCase(t, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{
				{FunctionResponse: &genai.FunctionResponse{ID: s, Name: s, Response: map[string]any{key: s}}}, {Text: s + "."}}}, true)
		}
		geminiCase(t, &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{Name: "n",
			Args: map[string]any{"commands": []any{"ls <a> & b"}, "timeout_ms": 1e3, "x": nil, "y": map[string]any{"z": true}}}}}}, true)
		geminiCase(t, &genai.Content{Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{ID: "c"}}}}, true)
		// Anything more than what the encoder writes goes to the SDK.
		geminiCase(t, &genai.Content{Role: genai.RoleUser}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: "t", Thought: true}}}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{Text: "t", ThoughtSignature: []byte("sig")}}}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{ID: "c", Name: "n"}, Text: "t"}}}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{ID: "c", Name: "n", WillContinue: genai.Ptr(true)}}}}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: "c", Name: "n",
			Response: map[string]any{"output": "x", "error": "y"}}}}}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: "c", Name: "n",
			Response: map[string]any{"output": 1}}}}}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: "c", Name: "n",
			Response: map[string]any{"output": "x"}, Parts: []*genai.FunctionResponsePart{{}}}}}}, false)
		geminiCase(t, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{InlineData: &genai.Blob{MIMEType: "image/png", Data: []byte("x")}}}}, false)
	})
}
