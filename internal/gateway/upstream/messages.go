package upstream

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
)

// AnthropicVersion is the anthropic-version header sent to Messages
// upstreams.
const AnthropicVersion = "2023-06-01"

// DefaultMaxTokens is max_tokens when the request has none (Messages
// requires one).
const DefaultMaxTokens = 4096

// Messages is an Anthropic Messages upstream (POST {base}/v1/messages;
// a base URL with or without /v1 works).
//
// Translation: the system prompt is one system text block; consecutive
// messages of one role are merged (Messages wants them alternating) and
// empty text dropped (Messages refuses empty text blocks); in a user
// message the tool_result blocks come first; a tool call whose arguments
// are not a JSON object (the model wrote bad JSON) is replayed with input
// {"_invalid_json": "<the text>"}, since tool_use input must be an object;
// images are base64 or url sources (data: URLs decoded to base64). Stop
// reasons: end_turn, max_tokens (and model_context_window_exceeded),
// tool_use, stop_sequence, refusal, pause_turn. Usage: InputTokens is
// input_tokens plus both cache counts, as the other APIs count it.
type Messages struct {
	Endpoint
	hdr http.Header // the API key's and the version's headers, read only
}

// NewMessages returns the adapter for e.
func NewMessages(e Endpoint) *Messages {
	hdr := keyHeader("x-api-key", "", e.APIKey)
	hdr.Set("anthropic-version", AnthropicVersion)
	return &Messages{Endpoint: e, hdr: hdr}
}

func anthropicImage(img *gateway.Image) anthropic.ImageBlockParamSourceUnion {
	if img.URL == "" || strings.HasPrefix(img.URL, "data:") {
		mt, data := img.MediaType, img.Data
		if strings.HasPrefix(img.URL, "data:") {
			head, b64, _ := strings.Cut(strings.TrimPrefix(img.URL, "data:"), ",")
			mt, _, _ = strings.Cut(head, ";")
			data = b64
		}
		return anthropic.ImageBlockParamSourceUnion{OfBase64: &anthropic.Base64ImageSourceParam{
			MediaType: anthropic.Base64ImageSourceMediaType(mt), Data: data}}
	}
	return anthropic.ImageBlockParamSourceUnion{OfURL: &anthropic.URLImageSourceParam{URL: img.URL}}
}

// toolInput is a call's arguments as a tool_use input object.
func toolInput(args string) json.RawMessage {
	t := strings.TrimSpace(args)
	if t == "" {
		return json.RawMessage("{}")
	}
	if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(map[string]string{"_invalid_json": args})
	return b
}

// messagesParams translates req into Messages parameters, with the
// messages from from on; tail[i] is the first message that message i is
// made of.
func messagesParams(req *gateway.Request, from int) (p anthropic.MessageNewParams, tail []int, err error) {
	p = anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: int64(req.MaxTokens)}
	if p.MaxTokens <= 0 {
		p.MaxTokens = DefaultMaxTokens
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	type turn struct {
		role   gateway.Role
		blocks []anthropic.ContentBlockParamUnion
		from   int
	}
	turns := make([]turn, 0, len(req.Messages)-from)
	for mi, m := range req.Messages[from:] {
		mi += from
		var blocks []anthropic.ContentBlockParamUnion
		switch m.Role {
		case gateway.RoleUser:
			for _, part := range m.Parts {
				if part.Kind != gateway.PartToolResult {
					continue
				}
				r := part.Result
				tr := anthropic.ToolResultBlockParam{ToolUseID: r.CallID}
				if r.IsError {
					tr.IsError = param.NewOpt(true)
				}
				if r.Content != "" {
					tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: r.Content}})
				}
				for i := range r.Images {
					tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{Source: anthropicImage(&r.Images[i])}})
				}
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &tr})
			}
		case gateway.RoleAssistant:
		default:
			return p, nil, gateway.BadRequest("messages", "unknown role %q", m.Role)
		}
		// After the tool results: the text, a user's images, an
		// assistant's calls.
		for _, part := range m.Parts {
			switch {
			case part.Kind == gateway.PartText && part.Text != "":
				blocks = append(blocks, anthropic.NewTextBlock(part.Text))
			case part.Kind == gateway.PartImage && m.Role == gateway.RoleUser:
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfImage: &anthropic.ImageBlockParam{Source: anthropicImage(part.Image)}})
			case part.Kind == gateway.PartToolCall && m.Role == gateway.RoleAssistant:
				blocks = append(blocks, anthropic.NewToolUseBlock(part.Call.ID, toolInput(part.Call.Arguments), part.Call.Name))
			}
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(turns); n > 0 && turns[n-1].role == m.Role {
			prev := &turns[n-1]
			if m.Role == gateway.RoleUser {
				// tool results stay first in the merged message
				var results, rest []anthropic.ContentBlockParamUnion
				for _, b := range append(append([]anthropic.ContentBlockParamUnion(nil), prev.blocks...), blocks...) {
					if b.OfToolResult != nil {
						results = append(results, b)
					} else {
						rest = append(rest, b)
					}
				}
				prev.blocks = append(results, rest...)
			} else {
				prev.blocks = append(prev.blocks, blocks...)
			}
			continue
		}
		turns = append(turns, turn{m.Role, blocks, mi})
	}
	if len(turns) > 0 {
		p.Messages = make([]anthropic.MessageParam, 0, len(turns))
		tail = make([]int, 0, len(turns))
	}
	for _, t := range turns {
		tail = append(tail, t.from)
		if t.role == gateway.RoleUser {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(t.blocks...))
		} else {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(t.blocks...))
		}
	}
	for _, t := range toolsToEncode(req, gateway.APIMessages) {
		if t.Native == gateway.NativeCodeExecution {
			p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}})
			if t.Container != "" {
				p.Container.OfString = param.NewOpt(t.Container)
			}
			continue
		}
		s, err := schema(t.Parameters)
		if err != nil {
			return p, nil, gateway.BadRequest("tools", "tool %s: %v", t.Name, err)
		}
		in := anthropic.ToolInputSchemaParam{Properties: s["properties"]}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok {
					in.Required = append(in.Required, name)
				}
			}
		}
		extra := map[string]any{}
		for k, v := range s {
			if k != "properties" && k != "required" && k != "type" {
				extra[k] = v
			}
		}
		if len(extra) > 0 {
			in.ExtraFields = extra
		}
		tp := &anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tp.Description = param.NewOpt(t.Description)
		}
		if t.Strict {
			tp.Strict = param.NewOpt(true)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: tp})
	}
	if len(req.Tools) > 0 {
		var noParallel param.Opt[bool]
		if req.ToolChoice.DisableParallel {
			noParallel = param.NewOpt(true)
		}
		switch req.ToolChoice.Mode {
		case gateway.ChoiceNone:
			p.ToolChoice.OfNone = &anthropic.ToolChoiceNoneParam{}
		case gateway.ChoiceRequired:
			p.ToolChoice.OfAny = &anthropic.ToolChoiceAnyParam{DisableParallelToolUse: noParallel}
		case gateway.ChoiceTool:
			p.ToolChoice.OfTool = &anthropic.ToolChoiceToolParam{Name: req.ToolChoice.Name, DisableParallelToolUse: noParallel}
		default:
			if req.ToolChoice.DisableParallel {
				p.ToolChoice.OfAuto = &anthropic.ToolChoiceAutoParam{DisableParallelToolUse: noParallel}
			}
		}
	}
	// anthropic-sdk-go v2 has no temperature or top_p fields (newer
	// models refuse them); the API still takes them, so they go as extra
	// fields when the client set them.
	extra := map[string]any{}
	if req.Temperature != nil {
		extra["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		extra["top_p"] = *req.TopP
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
	if len(req.Stop) > 0 {
		p.StopSequences = req.Stop
	}
	if req.User != "" {
		p.Metadata.UserID = param.NewOpt(req.User)
	}
	return p, tail, nil
}

func messagesStop(r string) gateway.StopReason {
	switch r {
	case "max_tokens", "model_context_window_exceeded":
		return gateway.StopMaxTokens
	case "tool_use":
		return gateway.StopToolUse
	case "stop_sequence":
		return gateway.StopSequence
	case "refusal":
		return gateway.StopRefusal
	case "pause_turn":
		return gateway.StopPause
	default:
		return gateway.StopEnd
	}
}

// messagesBody is the request body of req.
func messagesBody(req *gateway.Request, stream bool) ([]byte, error) {
	if body, ok := directTurn(req, gateway.APIMessages, stream, "messages", true, messagesResults); ok {
		return body, nil
	}
	p, from, tail, err := mergedParams(req, gateway.APIMessages, messagesParams)
	if err != nil {
		return nil, err
	}
	if stream {
		extra := p.ExtraFields()
		if extra == nil {
			extra = map[string]any{}
		}
		extra["stream"] = true
		p.SetExtraFields(extra)
	}
	return encodeBody(req, gateway.APIMessages, stream, &p, "messages", &p.Messages, &p.Tools, from, tail, leanMessage)
}

const messagesPath = "/v1/messages"

// Turn implements gateway.Upstream.
func (c *Messages) Turn(ctx context.Context, req *gateway.Request, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	return turn(ctx, &c.Endpoint, req, onDelta, messagesBody, messagesPath, c.hdr, messagesTurn, messagesStream)
}

// messagesTurn is a non-streamed answer as a Turn.
func messagesTurn(m *messagesAnswer) (*gateway.Turn, error) {
	t := &gateway.Turn{ID: m.ID, Model: m.Model, Stop: messagesStop(m.StopReason),
		Usage: gateway.Usage{
			InputTokens:      m.Usage.InputTokens + m.Usage.CacheReadInputTokens + m.Usage.CacheCreationInputTokens,
			OutputTokens:     m.Usage.OutputTokens,
			CacheReadTokens:  m.Usage.CacheReadInputTokens,
			CacheWriteTokens: m.Usage.CacheCreationInputTokens,
			ReasoningTokens:  m.Usage.OutputTokensDetails.ThinkingTokens,
		}}
	hosted := map[string]*gateway.HostedCall{}
	for i := range m.Content {
		b := &m.Content[i]
		switch b.Type {
		case "text":
			if b.Text != "" {
				t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartText, Text: b.Text})
			}
		case "tool_use":
			t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)}})
		default:
			h, err := messagesHosted(b, hosted)
			if err != nil {
				return nil, badAnswer(err)
			}
			if h != nil {
				if err := hostedInput(h, b.Input); err != nil {
					return nil, badAnswer(err)
				}
				t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartHosted, Hosted: h})
			}
		}
	}
	hostedIn(t, m.Container)
	return t, nil
}

// anthropicStatus is the HTTP status of an error type in a stream's error
// event.
func anthropicStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return 400
	case "authentication_error":
		return 401
	case "permission_error":
		return 403
	case "not_found_error":
		return 404
	case "request_too_large":
		return 413
	case "rate_limit_error":
		return 429
	case "overloaded_error":
		return 529
	default:
		return 502
	}
}

func messagesStream(ctx context.Context, call *call, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	r := newSSEReader(call)
	t := &gateway.Turn{}
	partOf := map[int64]int{} // block index → part index
	isText := map[int64]bool{}
	var texts, args = map[int]*strings.Builder{}, map[int]*strings.Builder{}
	hosted := map[string]*gateway.HostedCall{}
	var stop string
	var container messagesContainer
	// open adds part p for block index, its text or arguments gathered
	// in into, and returns the part's index.
	open := func(index int64, p gateway.Part, into map[int]*strings.Builder) int {
		i := len(t.Parts)
		partOf[index] = i
		t.Parts = append(t.Parts, p)
		into[i] = &strings.Builder{}
		return i
	}
	for {
		ev, err := r.next(ctx)
		if err == io.EOF {
			return nil, truncated("message_stop")
		}
		if err != nil {
			return nil, err
		}
		if ev.name == "error" {
			var e struct {
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			unmarshal(ev.data, &e)
			return nil, &gateway.UpstreamError{Status: anthropicStatus(e.Error.Type), Type: e.Error.Type, Message: e.Error.Message}
		}
		var e messagesEvent
		if err := unmarshal(ev.data, &e); err != nil {
			return nil, badAnswer(err)
		}
		switch e.Type {
		case "message_start":
			u := e.Message.Usage
			t.ID, t.Model = e.Message.ID, e.Message.Model
			t.Usage = gateway.Usage{
				InputTokens:      u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens,
				OutputTokens:     u.OutputTokens,
				CacheReadTokens:  u.CacheReadInputTokens,
				CacheWriteTokens: u.CacheCreationInputTokens,
			}
		case "content_block_start":
			switch e.ContentBlock.Type {
			case "text":
				isText[e.Index] = true
				if e.ContentBlock.Text != "" {
					i := open(e.Index, gateway.Part{Kind: gateway.PartText}, texts)
					texts[i].WriteString(e.ContentBlock.Text)
					onDelta(gateway.Delta{Kind: gateway.DeltaText, Index: i, Text: e.ContentBlock.Text})
				}
			case "tool_use":
				i := open(e.Index, gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: e.ContentBlock.ID, Name: e.ContentBlock.Name}}, args)
				onDelta(gateway.Delta{Kind: gateway.DeltaCallStart, Index: i, Call: &gateway.ToolCall{ID: e.ContentBlock.ID, Name: e.ContentBlock.Name}})
			default:
				h, err := messagesHosted(&e.ContentBlock, hosted)
				if err != nil {
					return nil, badAnswer(err)
				}
				if h != nil {
					i := open(e.Index, gateway.Part{Kind: gateway.PartHosted, Hosted: h}, args)
					onDelta(gateway.Delta{Kind: gateway.DeltaHosted, Index: i})
				}
			}
		case "content_block_delta":
			switch e.Delta.Type {
			case "text_delta":
				if e.Delta.Text == "" || !isText[e.Index] {
					continue
				}
				i, ok := partOf[e.Index]
				if !ok {
					i = open(e.Index, gateway.Part{Kind: gateway.PartText}, texts)
				}
				texts[i].WriteString(e.Delta.Text)
				onDelta(gateway.Delta{Kind: gateway.DeltaText, Index: i, Text: e.Delta.Text})
			case "input_json_delta":
				i, ok := partOf[e.Index]
				if !ok || args[i] == nil || e.Delta.PartialJSON == "" {
					continue
				}
				args[i].WriteString(e.Delta.PartialJSON)
				if t.Parts[i].Kind == gateway.PartToolCall {
					onDelta(gateway.Delta{Kind: gateway.DeltaCallArgs, Index: i, Text: e.Delta.PartialJSON})
				}
			}
		case "message_delta":
			stop = e.Delta.StopReason
			if e.Delta.Container.ID != "" {
				container = e.Delta.Container
			}
			if e.Usage == nil {
				break
			}
			u := e.Usage
			// message_delta's output_tokens is the final count
			t.Usage.OutputTokens = u.OutputTokens
			if u.InputTokens > 0 || u.CacheReadInputTokens > 0 || u.CacheCreationInputTokens > 0 {
				t.Usage.InputTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
				t.Usage.CacheReadTokens, t.Usage.CacheWriteTokens = u.CacheReadInputTokens, u.CacheCreationInputTokens
			}
			if u.OutputTokensDetails.ThinkingTokens > 0 {
				t.Usage.ReasoningTokens = u.OutputTokensDetails.ThinkingTokens
			}
		case "message_stop":
			for i := range t.Parts {
				switch t.Parts[i].Kind {
				case gateway.PartText:
					t.Parts[i].Text = texts[i].String()
				case gateway.PartToolCall:
					t.Parts[i].Call.Arguments = args[i].String()
					if t.Parts[i].Call.Arguments == "" {
						t.Parts[i].Call.Arguments = "{}"
					}
				case gateway.PartHosted:
					if err := hostedInput(t.Parts[i].Hosted, json.RawMessage(args[i].String())); err != nil {
						return nil, badAnswer(err)
					}
				}
			}
			t.Stop = messagesStop(stop)
			hostedIn(t, container)
			return t, nil
		}
	}
}

// messagesHosted reads a block of the provider's own code execution
// (code_execution_20250825): a server_tool_use of its bash or text editor
// is a new hosted call (returned; its input comes with hostedInput), a
// result block completes the call of its tool_use_id in calls. Other
// blocks are not the adapter's (nil).
func messagesHosted(b *messagesBlock, calls map[string]*gateway.HostedCall) (*gateway.HostedCall, error) {
	switch b.Type {
	case "server_tool_use":
		var kind string
		switch b.Name {
		case gateway.BashCodeExecution:
			kind = gateway.HostedBash
		case gateway.TextEditorCodeExecution:
			kind = gateway.HostedTextEditor
		default:
			return nil, nil
		}
		h := &gateway.HostedCall{ID: b.ID, Tool: gateway.NativeCodeExecution, Kind: kind}
		calls[b.ID] = h
		return h, nil
	case "bash_code_execution_tool_result", "text_editor_code_execution_tool_result":
		h := calls[b.ToolUseID]
		if h == nil {
			return nil, nil
		}
		if h.Kind == gateway.HostedTextEditor {
			h.Result = append(json.RawMessage(nil), b.Content...) // b may be a stream's event, read in place
			return nil, nil
		}
		var c struct {
			Type       string `json:"type"`
			Stdout     string `json:"stdout"`
			Stderr     string `json:"stderr"`
			ReturnCode int    `json:"return_code"`
			ErrorCode  string `json:"error_code"`
		}
		if err := unmarshal(b.Content, &c); err != nil {
			return nil, err
		}
		if c.Type == "bash_code_execution_tool_result_error" {
			h.Error = c.ErrorCode
			if h.Error == "" {
				h.Error = "unavailable"
			}
			return nil, nil
		}
		h.Outputs = []tool.CommandOutput{{Stdout: c.Stdout, Stderr: c.Stderr, Outcome: tool.Outcome{Type: "exit", ExitCode: &c.ReturnCode}}}
	}
	return nil, nil
}

// hostedIn says the turn's hosted calls ran in the provider's container
// id (Anthropic names it for the message, not for each call).
func hostedIn(t *gateway.Turn, c messagesContainer) {
	exp, _ := time.Parse(time.RFC3339, c.ExpiresAt)
	for _, p := range t.Parts {
		if p.Kind == gateway.PartHosted {
			p.Hosted.ContainerID, p.Hosted.ContainerExpiresAt = c.ID, exp
		}
	}
}

// hostedInput takes the input of h's server_tool_use.
func hostedInput(h *gateway.HostedCall, input json.RawMessage) error {
	if h.Kind == gateway.HostedTextEditor {
		h.Input = input
		return nil
	}
	var a struct {
		Command string `json:"command"`
	}
	if len(input) > 0 {
		if err := unmarshal(input, &a); err != nil {
			return err
		}
	}
	h.Code = []string{a.Command}
	return nil
}
