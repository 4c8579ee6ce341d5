package upstream

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
)

// Responses is an OpenAI Responses upstream (POST {base}/responses).
//
// Translation: the system prompt is instructions; the conversation is sent
// whole as input items every time (store: false, no previous_response_id):
// user text and images as a user message (input_text, input_image with a
// URL or a data: URL), assistant text as an assistant message, tool calls
// as function_call items and tool results as function_call_output items
// (with input_image parts when the result has images; an error result is
// prefixed "error: "). Function tools are sent with strict set explicitly
// (Responses defaults it to true, which the shell tool's optional fields
// would not pass). Stop sequences are not sent: the Responses API has
// none. status incomplete (max_output_tokens) maps to max_tokens, a
// refusal part to refusal, function calls to tool_use, else end.
type Responses struct {
	Endpoint
	hdr http.Header // the API key's header (keyHeader), read only
}

// NewResponses returns the adapter for e.
func NewResponses(e Endpoint) *Responses {
	return &Responses{Endpoint: e, hdr: keyHeader("Authorization", "Bearer ", e.APIKey)}
}

// responsesParams translates req into Responses parameters, with the
// messages from from on; tail[i] is the message input item i comes from.
func responsesParams(req *gateway.Request, from int) (p responses.ResponseNewParams, tail []int, err error) {
	p = responses.ResponseNewParams{Model: shared.ResponsesModel(req.Model), Store: param.NewOpt(false)}
	if req.System != "" {
		p.Instructions = param.NewOpt(req.System)
	}
	// About one item per message (a step adds a call and its output).
	items := make(responses.ResponseInputParam, 0, len(req.Messages)-from+1)
	tail = make([]int, 0, cap(items))
	for mi, m := range req.Messages[from:] {
		mi += from
		n0 := len(items)
		switch m.Role {
		case gateway.RoleUser:
			var content responses.ResponseInputMessageContentListParam
			for _, part := range m.Parts {
				switch part.Kind {
				case gateway.PartToolResult:
					r := part.Result
					out := responses.ResponseInputItemFunctionCallOutputParam{CallID: param.NewOpt(r.CallID)}
					if len(r.Images) == 0 {
						out.Output.OfString = param.NewOpt(errorText(r))
					} else {
						list := responses.ResponseFunctionCallOutputItemListParam{
							{OfInputText: &responses.ResponseInputTextContentParam{Text: errorText(r)}}}
						for i := range r.Images {
							list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{
								OfInputImage: &responses.ResponseInputImageContentParam{ImageURL: param.NewOpt(imageURL(&r.Images[i]))}})
						}
						out.Output.OfResponseFunctionCallOutputItemArray = list
					}
					items = append(items, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &out})
				case gateway.PartText:
					content = append(content, responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{Text: part.Text}})
				case gateway.PartImage:
					content = append(content, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
						Detail: responses.ResponseInputImageDetailAuto, ImageURL: param.NewOpt(imageURL(part.Image))}})
				}
			}
			if len(content) > 0 {
				items = append(items, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
					Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfInputItemContentList: content}}})
			}
		case gateway.RoleAssistant:
			var text strings.Builder
			flush := func() {
				if text.Len() > 0 {
					items = append(items, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
						Role: responses.EasyInputMessageRoleAssistant, Content: responses.EasyInputMessageContentUnionParam{OfString: param.NewOpt(text.String())}}})
					text.Reset()
				}
			}
			for _, part := range m.Parts {
				switch part.Kind {
				case gateway.PartText:
					text.WriteString(part.Text)
				case gateway.PartToolCall:
					flush()
					items = append(items, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
						CallID: part.Call.ID, Name: part.Call.Name, Arguments: part.Call.Arguments}})
				}
			}
			flush()
		default:
			return p, nil, gateway.BadRequest("messages", "unknown role %q", m.Role)
		}
		for range len(items) - n0 {
			tail = append(tail, mi)
		}
	}
	if len(items) > 0 {
		p.Input.OfInputItemList = items
	}
	for _, t := range toolsToEncode(req, gateway.APIResponses) {
		switch t.Native {
		case gateway.NativeShell:
			env := responses.FunctionShellToolEnvironmentUnionParam{OfContainerAuto: &responses.ContainerAutoParam{}}
			if t.Container != "" {
				env = responses.FunctionShellToolEnvironmentUnionParam{OfContainerReference: &responses.ContainerReferenceParam{ContainerID: t.Container}}
			}
			p.Tools = append(p.Tools, responses.ToolUnionParam{OfShell: &responses.FunctionShellToolParam{Environment: env}})
			continue
		case gateway.NativeCodeInterpreter:
			c := responses.ToolCodeInterpreterContainerUnionParam{OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}}
			if t.Container != "" {
				c = responses.ToolCodeInterpreterContainerUnionParam{OfString: param.NewOpt(t.Container)}
			}
			p.Tools = append(p.Tools, responses.ToolUnionParam{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{Container: c}})
			continue
		}
		s, err := schema(t.Parameters)
		if err != nil {
			return p, nil, gateway.BadRequest("tools", "tool %s: %v", t.Name, err)
		}
		ft := &responses.FunctionToolParam{Name: t.Name, Parameters: s, Strict: param.NewOpt(t.Strict)}
		if t.Description != "" {
			ft.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, responses.ToolUnionParam{OfFunction: ft})
	}
	if len(req.Tools) > 0 {
		switch req.ToolChoice.Mode {
		case gateway.ChoiceNone:
			p.ToolChoice.OfToolChoiceMode = param.NewOpt(responses.ToolChoiceOptionsNone)
		case gateway.ChoiceRequired:
			p.ToolChoice.OfToolChoiceMode = param.NewOpt(responses.ToolChoiceOptionsRequired)
		case gateway.ChoiceTool:
			switch nativeChoice(req) {
			case gateway.NativeShell:
				p.ToolChoice.OfSpecificShellToolChoice = &responses.ToolChoiceShellParam{}
			case gateway.NativeCodeInterpreter:
				p.ToolChoice.OfHostedTool = &responses.ToolChoiceTypesParam{Type: responses.ToolChoiceTypesTypeCodeInterpreter}
			default:
				p.ToolChoice.OfFunctionTool = &responses.ToolChoiceFunctionParam{Name: req.ToolChoice.Name}
			}
		}
		if req.ToolChoice.DisableParallel {
			p.ParallelToolCalls = param.NewOpt(false)
		}
	}
	if req.MaxTokens > 0 {
		p.MaxOutputTokens = param.NewOpt(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	if req.TopP != nil {
		p.TopP = param.NewOpt(*req.TopP)
	}
	if req.User != "" {
		p.User = param.NewOpt(req.User)
	}
	return p, tail, nil
}

// responsesTurn is a finished response as a Turn.
func responsesTurn(r *responsesAnswer) (*gateway.Turn, error) {
	if r.Status == "failed" {
		msg := r.Error.Message
		if msg == "" {
			msg = "the upstream response failed"
		}
		return nil, &gateway.UpstreamError{Status: http.StatusBadGateway, Type: r.Error.Code, Message: msg}
	}
	t := &gateway.Turn{ID: r.ID, Model: r.Model, Usage: gateway.Usage{
		InputTokens:     r.Usage.InputTokens,
		OutputTokens:    r.Usage.OutputTokens,
		CacheReadTokens: r.Usage.InputTokensDetails.CachedTokens,
		ReasoningTokens: r.Usage.OutputTokensDetails.ReasoningTokens,
	}}
	refusal, calls := false, false
	shells := map[string]*gateway.HostedCall{} // call_id → its shell_call's part
	for _, it := range r.Output {
		switch it.Type {
		case "message":
			var content []responsesContent
			if err := unmarshal(it.Content, &content); len(it.Content) > 0 && err != nil {
				return nil, badAnswer(err)
			}
			var text strings.Builder
			for _, c := range content {
				switch c.Type {
				case "output_text":
					text.WriteString(c.Text)
				case "refusal":
					text.WriteString(c.Refusal)
					refusal = true
				}
			}
			if text.Len() > 0 {
				t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartText, Text: text.String()})
			}
		case "function_call":
			calls = true
			t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{
				ID: it.CallID, Name: it.Name, Arguments: rawString(it.Arguments)}})
		case "shell_call", "shell_call_output", "code_interpreter_call":
			h, err := responsesHosted(&it, shells)
			if err != nil {
				return nil, badAnswer(err)
			}
			if h != nil {
				t.Parts = append(t.Parts, gateway.Part{Kind: gateway.PartHosted, Hosted: h})
			}
		}
	}
	switch {
	case r.Status == "incomplete" && r.IncompleteDetails.Reason == "content_filter":
		t.Stop = gateway.StopRefusal
	case r.Status == "incomplete":
		t.Stop = gateway.StopMaxTokens
	case refusal:
		t.Stop = gateway.StopRefusal
	case calls:
		t.Stop = gateway.StopToolUse
	default:
		t.Stop = gateway.StopEnd
	}
	return t, nil
}

// responsesBody is the request body of req.
func responsesBody(req *gateway.Request, stream bool) ([]byte, error) {
	if body, ok := directTurn(req, gateway.APIResponses, stream, "input", false, responsesResults); ok {
		return body, nil
	}
	// An item is made of one message: the new ones never change the
	// memo's.
	from := memoFrom(req, gateway.APIResponses)
	p, tail, err := responsesParams(req, from)
	if err != nil {
		return nil, err
	}
	if stream {
		p.SetExtraFields(map[string]any{"stream": true})
	}
	return encodeBody(req, gateway.APIResponses, stream, &p, "input", &p.Input.OfInputItemList, &p.Tools, from, tail, leanResponsesItem)
}

const responsesPath = "/responses"

// Turn implements gateway.Upstream.
func (c *Responses) Turn(ctx context.Context, req *gateway.Request, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	return turn(ctx, &c.Endpoint, req, onDelta, responsesBody, responsesPath, c.hdr, responsesTurn, responsesStream)
}

// responsesStream reads a streamed response, calling onDelta as text and
// call arguments arrive; the Turn is built from the final response object
// (response.completed / incomplete), as the non-streamed one is.
func responsesStream(ctx context.Context, call *call, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	r := newSSEReader(call)
	// Parts start at the output items that carry them: a message's first
	// text, a function_call's added event.
	partOf := map[string]int{} // item id → part index
	n := 0
	for {
		ev, err := r.next(ctx)
		if err == io.EOF {
			return nil, truncated("response.completed")
		}
		if err != nil {
			return nil, err
		}
		if string(ev.data) == "[DONE]" {
			return nil, truncated("response.completed")
		}
		var e responsesEvent
		if err := unmarshal(ev.data, &e); err != nil {
			return nil, badAnswer(err)
		}
		switch e.Type {
		case "response.output_text.delta", "response.refusal.delta":
			delta := rawString(e.Delta)
			if delta == "" {
				continue
			}
			i, ok := partOf[e.ItemID]
			if !ok {
				i = n
				n++
				partOf[e.ItemID] = i
			}
			onDelta(gateway.Delta{Kind: gateway.DeltaText, Index: i, Text: delta})
		case "response.output_item.added":
			if e.Item.Type == "shell_call" || e.Item.Type == "code_interpreter_call" {
				onDelta(gateway.Delta{Kind: gateway.DeltaHosted, Index: n})
				n++
			}
			if e.Item.Type == "function_call" {
				i := n
				n++
				partOf[e.Item.ID] = i
				onDelta(gateway.Delta{Kind: gateway.DeltaCallStart, Index: i, Call: &gateway.ToolCall{ID: e.Item.CallID, Name: e.Item.Name}})
				if a := rawString(e.Item.Arguments); a != "" {
					onDelta(gateway.Delta{Kind: gateway.DeltaCallArgs, Index: i, Text: a})
				}
			}
		case "response.function_call_arguments.delta":
			if i, ok := partOf[e.ItemID]; ok && rawString(e.Delta) != "" {
				onDelta(gateway.Delta{Kind: gateway.DeltaCallArgs, Index: i, Text: rawString(e.Delta)})
			}
		case "response.completed", "response.incomplete", "response.failed":
			return responsesTurn(&e.Response)
		case "error":
			status := http.StatusBadGateway
			if e.Code == "rate_limit_exceeded" {
				status = http.StatusTooManyRequests
			}
			return nil, &gateway.UpstreamError{Status: status, Type: e.Code, Message: e.Message}
		}
	}
}

// responsesHosted reads an item of the provider's own hosted tools: a
// shell_call or code_interpreter_call is a new hosted call (returned), a
// shell_call_output completes the shell_call of its call_id in shells.
func responsesHosted(it *responsesItem, shells map[string]*gateway.HostedCall) (*gateway.HostedCall, error) {
	switch it.Type {
	case "shell_call":
		var a struct {
			Commands []string `json:"commands"`
		}
		if len(it.Action) > 0 {
			if err := unmarshal(it.Action, &a); err != nil {
				return nil, err
			}
		}
		h := &gateway.HostedCall{ID: it.CallID, Tool: gateway.NativeShell, Kind: gateway.HostedBash, Code: a.Commands, ContainerID: it.Environment.ContainerID}
		shells[it.CallID] = h
		return h, nil
	case "shell_call_output":
		h := shells[it.CallID]
		if h == nil {
			return nil, nil // the output of a call of an earlier turn
		}
		if len(it.Output) > 0 && string(it.Output) != "null" {
			if err := unmarshal(it.Output, &h.Outputs); err != nil {
				return nil, err
			}
		}
		if h.Outputs == nil {
			h.Outputs = []tool.CommandOutput{}
		}
		return nil, nil
	default: // code_interpreter_call
		var outs []struct {
			Type string `json:"type"`
			Logs string `json:"logs"`
		}
		if len(it.Outputs) > 0 && string(it.Outputs) != "null" {
			if err := unmarshal(it.Outputs, &outs); err != nil {
				return nil, err
			}
		}
		h := &gateway.HostedCall{ID: it.ID, Tool: gateway.NativeCodeInterpreter, Kind: gateway.HostedPython, Code: []string{rawString(it.Code)}, ContainerID: it.ContainerID}
		if it.Status == "failed" || it.Status == "incomplete" {
			h.Error = "unavailable"
		}
		o := tool.CommandOutput{Outcome: tool.Outcome{Type: "exit", ExitCode: new(int)}}
		for _, x := range outs {
			if x.Type == "logs" {
				o.Stdout += x.Logs
			}
		}
		h.Outputs = []tool.CommandOutput{o}
		return h, nil
	}
}
