package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/shellgate/shellgate/internal/gateway"
)

// Chat is an OpenAI-compatible Chat Completions upstream
// (POST {base}/chat/completions).
//
// Translation: the system prompt is the first message (role system); a
// user message's tool results become role "tool" messages before the rest
// of it (images in a tool result follow as a user message, since tool
// messages carry text only; an error result's text is prefixed "error: "
// when it does not say so, Chat having no is_error); images are image_url
// parts (inline ones as data: URLs). MaxTokens is sent as max_tokens, the
// field every OpenAI-compatible server knows (OpenAI's reasoning models
// want max_completion_tokens: use a responses provider for them).
// finish_reason stop/length/tool_calls/content_filter map to end,
// max_tokens, tool_use, refusal (tool calls with "stop", as some servers
// send, are tool_use); a refusal's text is the turn's text.
type Chat struct {
	Endpoint
	hdr http.Header // the API key's header (keyHeader), read only
}

// NewChat returns the adapter for e.
func NewChat(e Endpoint) *Chat {
	return &Chat{Endpoint: e, hdr: keyHeader("Authorization", "Bearer ", e.APIKey)}
}

// chatParams translates req into Chat Completions parameters, with the
// messages from from on (and the system prompt only from the first);
// tail[i] is the message that message i of the params was made of (0 for
// the system prompt).
func chatParams(req *gateway.Request, from int) (p openai.ChatCompletionNewParams, tail []int, err error) {
	p = openai.ChatCompletionNewParams{Model: shared.ChatModel(req.Model)}
	if req.System != "" && from == 0 {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
		tail = append(tail, 0)
	}
	for mi, m := range req.Messages[from:] {
		mi += from
		switch m.Role {
		case gateway.RoleUser:
			var parts []openai.ChatCompletionContentPartUnionParam
			var toolImages []openai.ChatCompletionContentPartUnionParam
			for _, part := range m.Parts {
				switch part.Kind {
				case gateway.PartToolResult:
					r := part.Result
					p.Messages = append(p.Messages, openai.ToolMessage(errorText(r), r.CallID))
					tail = append(tail, mi)
					for i := range r.Images {
						if len(toolImages) == 0 {
							toolImages = append(toolImages, openai.TextContentPart("Images returned by tool call "+r.CallID+":"))
						}
						toolImages = append(toolImages, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: imageURL(&r.Images[i])}))
					}
				case gateway.PartText:
					parts = append(parts, openai.TextContentPart(part.Text))
				case gateway.PartImage:
					parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: imageURL(part.Image)}))
				}
			}
			parts = append(toolImages, parts...)
			switch {
			case len(parts) == 1 && parts[0].OfText != nil:
				p.Messages = append(p.Messages, openai.UserMessage(parts[0].OfText.Text))
				tail = append(tail, mi)
			case len(parts) > 0:
				p.Messages = append(p.Messages, openai.UserMessage(parts))
				tail = append(tail, mi)
			}
		case gateway.RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			var text strings.Builder
			for _, part := range m.Parts {
				switch part.Kind {
				case gateway.PartText:
					text.WriteString(part.Text)
				case gateway.PartToolCall:
					a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
						OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
							ID:       part.Call.ID,
							Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: part.Call.Name, Arguments: part.Call.Arguments},
						}})
				}
			}
			if text.Len() > 0 || len(a.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(text.String())
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
			tail = append(tail, mi)
		default:
			return p, nil, gateway.BadRequest("messages", "unknown role %q", m.Role)
		}
	}
	for _, t := range toolsToEncode(req, gateway.APIChat) {
		s, err := schema(t.Parameters)
		if err != nil {
			return p, nil, gateway.BadRequest("tools", "tool %s: %v", t.Name, err)
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(s)}
		if t.Description != "" {
			fd.Description = param.NewOpt(t.Description)
		}
		if t.Strict {
			fd.Strict = param.NewOpt(true)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if len(req.Tools) > 0 {
		switch req.ToolChoice.Mode {
		case gateway.ChoiceNone, gateway.ChoiceRequired:
			p.ToolChoice.OfAuto = param.NewOpt(req.ToolChoice.Mode)
		case gateway.ChoiceTool:
			p.ToolChoice.OfFunctionToolChoice = &openai.ChatCompletionNamedToolChoiceParam{
				Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: req.ToolChoice.Name}}
		}
		if req.ToolChoice.DisableParallel {
			p.ParallelToolCalls = param.NewOpt(false)
		}
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = param.NewOpt(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	if req.TopP != nil {
		p.TopP = param.NewOpt(*req.TopP)
	}
	if len(req.Stop) > 0 {
		p.Stop.OfStringArray = req.Stop
	}
	if req.User != "" {
		p.User = param.NewOpt(req.User)
	}
	return p, tail, nil
}

func chatStop(finish string, hasCalls bool) gateway.StopReason {
	switch finish {
	case "length":
		return gateway.StopMaxTokens
	case "tool_calls", "function_call":
		return gateway.StopToolUse
	case "content_filter":
		return gateway.StopRefusal
	}
	if hasCalls {
		return gateway.StopToolUse
	}
	return gateway.StopEnd
}

// chatBody is the request body of req.
func chatBody(req *gateway.Request, stream bool) ([]byte, error) {
	if body, ok := directTurn(req, gateway.APIChat, stream, "messages", false, chatResults); ok {
		return body, nil
	}
	// A message of the params is made of one message: the new ones never
	// change the memo's.
	from := memoFrom(req, gateway.APIChat)
	p, tail, err := chatParams(req, from)
	if err != nil {
		return nil, err
	}
	if stream {
		p.StreamOptions.IncludeUsage = param.NewOpt(true)
		p.SetExtraFields(map[string]any{"stream": true})
	}
	return encodeBody(req, gateway.APIChat, stream, &p, "messages", &p.Messages, &p.Tools, from, tail, nil)
}

const chatPath = "/chat/completions"

// Turn implements gateway.Upstream.
func (c *Chat) Turn(ctx context.Context, req *gateway.Request, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	return turn(ctx, &c.Endpoint, req, onDelta, chatBody, chatPath, c.hdr, chatTurn, chatStream)
}

// chatTurn is a non-streamed answer as a Turn.
func chatTurn(cc *chatAnswer) (*gateway.Turn, error) {
	if len(cc.Choices) == 0 {
		return nil, badAnswer(errNoChoices)
	}
	ch := cc.Choices[0]
	t := &gateway.Turn{ID: cc.ID, Model: cc.Model, Usage: cc.Usage.usage()}
	refusal := ch.Message.Refusal != ""
	switch {
	case refusal:
		t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartText, Text: ch.Message.Refusal})
	case ch.Message.Content != "":
		t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartText, Text: ch.Message.Content})
	}
	for _, tc := range ch.Message.ToolCalls {
		t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
	}
	t.Stop = chatStop(ch.FinishReason, len(ch.Message.ToolCalls) > 0)
	if refusal {
		t.Stop = gateway.StopRefusal
	}
	return t, nil
}

type chatError string

func (e chatError) Error() string { return string(e) }

const errNoChoices = chatError("no choices")

// chatStream reads a streamed answer, calling onDelta as parts arrive.
func chatStream(ctx context.Context, call *call, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	r := newSSEReader(call)
	t := &gateway.Turn{}
	text := -1               // index in t.Parts of the open text part
	calls := map[int64]int{} // Chat's tool_call index → index in t.Parts
	textOf := map[int]*strings.Builder{}
	argsOf := map[int]*strings.Builder{}
	finish, refusal, done := "", false, false
	for {
		ev, err := r.next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if string(ev.data) == "[DONE]" {
			done = true
			break
		}
		if ue := streamError(ev.data); ue != nil {
			return nil, ue
		}
		var ch chatChunk
		if err := unmarshal(ev.data, &ch); err != nil {
			return nil, badAnswer(err)
		}
		if t.ID == "" {
			t.ID, t.Model = ch.ID, ch.Model
		}
		if ch.Usage != nil && ch.Usage.PromptTokens != nil {
			t.Usage = ch.Usage.usage()
		}
		if len(ch.Choices) == 0 {
			continue
		}
		d := ch.Choices[0].Delta
		piece := d.Content
		if d.Refusal != "" {
			piece, refusal = d.Refusal, true
		}
		if piece != "" {
			if text < 0 {
				text = len(t.Parts)
				t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartText})
				textOf[text] = &strings.Builder{}
			}
			textOf[text].WriteString(piece)
			onDelta(gateway.Delta{Kind: gateway.DeltaText, Index: text, Text: piece})
		}
		for _, tc := range d.ToolCalls {
			i, ok := calls[tc.Index]
			if ok && tc.ID != "" && t.Parts[i].Call.ID != "" && tc.ID != t.Parts[i].Call.ID {
				// A server that sends whole calls without distinct indexes
				// (older Ollama): a new id is a new call.
				ok = false
				tc.Index = -int64(len(t.Parts)) - 1
			}
			if !ok {
				text = -1
				i = len(t.Parts)
				calls[tc.Index] = i
				call := &gateway.ToolCall{ID: tc.ID, Name: tc.Function.Name}
				t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: call})
				argsOf[i] = &strings.Builder{}
				onDelta(gateway.Delta{Kind: gateway.DeltaCallStart, Index: i, Call: &gateway.ToolCall{ID: call.ID, Name: call.Name}})
			}
			if a := tc.Function.Arguments; a != "" {
				argsOf[i].WriteString(a)
				onDelta(gateway.Delta{Kind: gateway.DeltaCallArgs, Index: i, Text: a})
			}
		}
		if f := ch.Choices[0].FinishReason; f != "" {
			finish = f
		}
	}
	if !done && finish == "" {
		return nil, truncated("its finish_reason")
	}
	for i := range t.Parts {
		switch t.Parts[i].Kind {
		case gateway.PartText:
			t.Parts[i].Text = textOf[i].String()
		case gateway.PartToolCall:
			t.Parts[i].Call.Arguments = argsOf[i].String()
		}
	}
	t.Stop = chatStop(finish, len(calls) > 0)
	if refusal {
		t.Stop = gateway.StopRefusal
	}
	return t, nil
}

// streamError is an error object some OpenAI-compatible servers (vLLM,
// OpenRouter) send as a stream event: {"error":{"message",...}}.
func streamError(data []byte) error {
	if !strings.Contains(string(data[:min(len(data), 32)]), `"error"`) {
		return nil
	}
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if unmarshal(data, &v) != nil || len(v.Error) == 0 || string(v.Error) == "null" {
		return nil
	}
	ue := errorFromBody(http.StatusBadGateway, data)
	var code struct {
		Code int `json:"code"`
	}
	if unmarshal(v.Error, &code) == nil && code.Code >= 400 && code.Code <= 599 {
		ue.Status = code.Code
	}
	return ue
}

// Forward sends a Chat Completions body as it is (the pass-through of
// POST /v1/chat/completions) and returns the upstream's answer, whatever
// its status, for the caller to copy to its client. The provider's
// timeout bounds the wait for the response head and then every gap
// between two reads of the body; closing the body releases the call.
// Errors are those of Turn: *gateway.UpstreamError 502/504, or ctx's.
func (c *Chat) Forward(ctx context.Context, body []byte) (*http.Response, error) {
	cl := c.startCall(ctx)
	req, err := http.NewRequestWithContext(cl.ctx, http.MethodPost, c.url("/chat/completions"), bytes.NewReader(body))
	if err != nil {
		cl.close()
		return nil, &gateway.UpstreamError{Status: http.StatusBadGateway, Message: "bad upstream URL: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.Header {
		req.Header[k] = v
	}
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	resp, err := c.client().Do(req)
	if err != nil {
		err = cl.fail(ctx, err)
		cl.close()
		return nil, err
	}
	cl.resp, cl.body = resp, resp.Body
	resp.Body = &forwardBody{c: cl, body: resp.Body, parent: ctx}
	return resp, nil
}

// forwardBody is a forwarded answer's body: each read restarts the
// timeout; a read error is the adapter's error (504 on the timeout).
type forwardBody struct {
	c      *call
	body   io.ReadCloser // the response's own (cl.close closes it)
	parent context.Context
}

func (b *forwardBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 {
		b.c.touch()
	}
	if err != nil && err != io.EOF {
		err = b.c.fail(b.parent, err)
	}
	return n, err
}

func (b *forwardBody) Close() error {
	b.c.close()
	return nil
}
