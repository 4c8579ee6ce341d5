package scripted

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestOfficialClients: the official SDKs read the scripted model's answers
// — non-streamed, and streamed through their own accumulators — as the
// same objects, so tests built on it see what the real APIs would give.
func TestOfficialClients(t *testing.T) {
	srv := NewServer(&Script{Turns: []Turn{{Text: "Let me check that for you.", Usage: Usage{InputTokens: 50, OutputTokens: 12, CacheReadTokens: 8},
		ToolCalls: []ToolCall{{ID: "call_1", Name: "shell", Arguments: json.RawMessage(`{"commands":["ls"]}`)}}}}, Repeat: true})
	defer srv.Close()
	ctx := context.Background()
	oc := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))

	t.Run("chat", func(t *testing.T) {
		p := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
		cc, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: p.Model, Messages: p.Messages})
		if err != nil {
			t.Fatal(err)
		}
		s := oc.Chat.Completions.NewStreaming(ctx, p)
		acc := openai.ChatCompletionAccumulator{}
		for s.Next() {
			if !acc.AddChunk(s.Current()) {
				t.Fatalf("accumulator refused %s", s.Current().RawJSON())
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		a, b := cc.Choices[0], acc.Choices[0]
		if a.Message.Content != b.Message.Content || a.Message.Content != "Let me check that for you." || a.FinishReason != b.FinishReason ||
			len(b.Message.ToolCalls) != 1 || b.Message.ToolCalls[0].Function.Arguments != a.Message.ToolCalls[0].Function.Arguments ||
			acc.Usage.PromptTokens != cc.Usage.PromptTokens || cc.Usage.PromptTokensDetails.CachedTokens != 8 {
			t.Errorf("non-streamed %s\nstreamed %+v", cc.RawJSON(), acc.ChatCompletion)
		}
	})
	t.Run("responses", func(t *testing.T) {
		p := responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
		r, err := oc.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		s := oc.Responses.NewStreaming(ctx, p)
		var final responses.Response
		seq := int64(0)
		for s.Next() {
			e := s.Current()
			if e.SequenceNumber != seq {
				t.Errorf("sequence_number %d, want %d", e.SequenceNumber, seq)
			}
			seq++
			if e.Type == "response.completed" {
				final = e.Response
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if r.OutputText() != "Let me check that for you." || final.OutputText() != r.OutputText() || len(final.Output) != 2 ||
			final.Output[1].AsFunctionCall().Arguments != r.Output[1].AsFunctionCall().Arguments || final.Usage.InputTokens != 50 {
			t.Errorf("non-streamed %s\nstreamed %s", r.RawJSON(), final.RawJSON())
		}
	})
	t.Run("messages", func(t *testing.T) {
		ac := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("k"), aoption.WithMaxRetries(0))
		p := anthropic.MessageNewParams{Model: "m", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
		m, err := ac.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		s := ac.Messages.NewStreaming(ctx, p)
		acc := anthropic.Message{}
		for s.Next() {
			if err := acc.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Content) != 2 || acc.Content[0].Text != m.Content[0].Text || string(acc.Content[1].Input) != string(m.Content[1].Input) ||
			acc.StopReason != m.StopReason || acc.StopReason != "tool_use" || acc.Usage.OutputTokens != m.Usage.OutputTokens ||
			acc.Usage.InputTokens != m.Usage.InputTokens || m.Usage.InputTokens != 42 || m.Usage.CacheReadInputTokens != 8 {
			t.Errorf("non-streamed %s\nstreamed %s", m.RawJSON(), acc.RawJSON())
		}
	})
}
