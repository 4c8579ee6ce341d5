package upstream

import (
	"encoding/json"
	"reflect"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
)

// Lean encoders of the conversation elements a tool step adds: the model's
// call and its output (Responses), the assistant turn with its tool_use and
// the user turn with its tool_result (Messages). The SDKs' param encoders
// reach these through reflection, unions and "extras" maps — most of the
// encoding cost of a step. Each encoder handles an element only when it
// holds nothing but the fields it writes (checked field by field, so an
// element with anything more — an image, a cache_control, an id — goes to
// the SDK's encoder), and writes the same bytes as the SDK, which
// TestLeanMatchesSDK checks on hostile strings.
//
// The adapters build every element themselves (responsesParams,
// messagesParams), never with the SDKs' Override or SetExtraFields, whose
// metadata the checks cannot see.

// leanResponsesItem appends the JSON of u when it is a function call or a
// function call's text output.
func leanResponsesItem(b []byte, u *responses.ResponseInputItemUnionParam) ([]byte, bool) {
	switch {
	case u.OfFunctionCall != nil:
		fc := u.OfFunctionCall
		if *u != (responses.ResponseInputItemUnionParam{OfFunctionCall: fc}) ||
			*fc != (responses.ResponseFunctionToolCallParam{Arguments: fc.Arguments, CallID: fc.CallID, Name: fc.Name, Type: fc.Type}) {
			return b, false
		}
		b = append(b, `{"arguments":`...)
		b = appendString(b, fc.Arguments)
		b = append(b, `,"call_id":`...)
		b = appendString(b, fc.CallID)
		b = append(b, `,"name":`...)
		b = appendString(b, fc.Name)
		return append(b, `,"type":"function_call"}`...), true
	case u.OfFunctionCallOutput != nil:
		o := u.OfFunctionCallOutput
		if *u != (responses.ResponseInputItemUnionParam{OfFunctionCallOutput: o}) ||
			o.Output.OfResponseFunctionCallOutputItemArray != nil || !o.Output.OfString.Valid() || !o.CallID.Valid() ||
			o.ID.Valid() || o.Name.Valid() || o.Namespace.Valid() || o.Status != "" ||
			o.Caller != (responses.ResponseInputItemFunctionCallOutputCallerUnionParam{}) {
			return b, false
		}
		return appendCallOutput(b, o.CallID.Value, o.Output.OfString.Value), true
	}
	return b, false
}

func appendCallOutput(b []byte, callID, output string) []byte {
	b = append(b, `{"output":`...)
	b = appendString(b, output)
	b = append(b, `,"call_id":`...)
	b = appendString(b, callID)
	return append(b, `,"type":"function_call_output"}`...)
}

// textResults reports whether message mi of req holds nothing but tool
// results without images: what the results writers take.
func textResults(req *gateway.Request, mi int) bool {
	parts := req.Messages[mi].Parts
	for _, p := range parts {
		if p.Kind != gateway.PartToolResult || p.Result == nil || len(p.Result.Images) > 0 {
			return false
		}
	}
	return len(parts) > 0
}

// Results writers (resultsWriter, for directTurn), one per adapter: each
// writes what its adapter's params and encoder write for a message of text
// results (the same bytes as the SDK, which TestResultsWritersMatchSDK
// checks on hostile strings).

// responsesResults writes one function_call_output item per result.
func responsesResults(b []byte, req *gateway.Request, mi int, ends []int) ([]byte, []int, bool) {
	if !textResults(req, mi) {
		return b, ends, false
	}
	for _, p := range req.Messages[mi].Parts {
		b = appendCallOutput(b, p.Result.CallID, errorText(p.Result))
		ends = append(ends, len(b))
	}
	return b, ends, true
}

// messagesResults writes a user message of tool_result blocks.
func messagesResults(b []byte, req *gateway.Request, mi int, ends []int) ([]byte, []int, bool) {
	return userResults(b, req, mi, ends, `{"content":[`, func(b []byte, r *gateway.ToolResult) []byte {
		b = append(b, `{"tool_use_id":`...)
		b = appendString(b, r.CallID)
		if r.IsError {
			b = append(b, `,"is_error":true`...)
		}
		if r.Content != "" {
			b = append(b, `,"content":[{"text":`...)
			b = appendString(b, r.Content)
			b = append(b, `,"type":"text"}]`...)
		}
		return append(b, `,"type":"tool_result"}`...)
	})
}

// geminiResults writes a user content of functionResponse parts.
func geminiResults(b []byte, req *gateway.Request, mi int, ends []int) ([]byte, []int, bool) {
	return userResults(b, req, mi, ends, `{"parts":[`, func(b []byte, r *gateway.ToolResult) []byte {
		key := "output"
		if r.IsError {
			key = "error"
		}
		return appendFunctionResponse(b, r.CallID, callName(req.Messages[:mi], r.CallID), key, r.Content)
	})
}

// userResults writes message mi's results as one user element, open
// (`{"content":[`, `{"parts":[`) and then each result written by one.
func userResults(b []byte, req *gateway.Request, mi int, ends []int, open string, one func([]byte, *gateway.ToolResult) []byte) ([]byte, []int, bool) {
	if !textResults(req, mi) {
		return b, ends, false
	}
	b = append(b, open...)
	for i, p := range req.Messages[mi].Parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = one(b, p.Result)
	}
	b = append(b, `],"role":"user"}`...)
	return b, append(ends, len(b)), true
}

// leanMessage appends the JSON of m when it is a user or assistant turn of
// plain text, tool_use and text-only tool_result blocks.
func leanMessage(b []byte, m *anthropic.MessageParam) ([]byte, bool) {
	var blocks []anthropic.ContentBlockParamUnion
	var role string
	switch {
	case m.OfUser != nil && *m == (anthropic.MessageParam{OfUser: m.OfUser}):
		blocks, role = m.OfUser.Content, "user"
	case m.OfAssistant != nil && *m == (anthropic.MessageParam{OfAssistant: m.OfAssistant}):
		blocks, role = m.OfAssistant.Content, "assistant"
	default:
		return b, false
	}
	start := len(b)
	b = append(b, `{"content":[`...)
	for i := range blocks {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = leanBlock(b, &blocks[i]); !ok {
			return b[:start], false
		}
	}
	b = append(b, `],"role":"`...)
	b = append(b, role...)
	return append(b, `"}`...), true
}

func leanBlock(b []byte, u *anthropic.ContentBlockParamUnion) ([]byte, bool) {
	switch {
	case u.OfText != nil:
		if *u != (anthropic.ContentBlockParamUnion{OfText: u.OfText}) {
			return b, false
		}
		return leanText(b, u.OfText)
	case u.OfToolUse != nil:
		t := u.OfToolUse
		in, ok := t.Input.(json.RawMessage)
		if *u != (anthropic.ContentBlockParamUnion{OfToolUse: t}) || !ok || len(in) == 0 || !compactJSON(in) {
			return b, false
		}
		t2 := *t
		t2.Input = nil
		if t2 != (anthropic.ToolUseBlockParam{ID: t.ID, Name: t.Name, Type: t.Type}) {
			return b, false
		}
		b = append(b, `{"id":`...)
		b = appendString(b, t.ID)
		b = append(b, `,"input":`...)
		b = append(b, in...)
		b = append(b, `,"name":`...)
		b = appendString(b, t.Name)
		return append(b, `,"type":"tool_use"}`...), true
	case u.OfToolResult != nil:
		r := u.OfToolResult
		if *u != (anthropic.ContentBlockParamUnion{OfToolResult: r}) || r.ToolsetName.Valid() ||
			r.CacheControl != (anthropic.CacheControlEphemeralParam{}) {
			return b, false
		}
		start := len(b)
		b = append(b, `{"tool_use_id":`...)
		b = appendString(b, r.ToolUseID)
		if r.IsError.Valid() {
			b = append(b, `,"is_error":`...)
			if r.IsError.Value {
				b = append(b, "true"...)
			} else {
				b = append(b, "false"...)
			}
		}
		if len(r.Content) > 0 {
			b = append(b, `,"content":[`...)
			for i := range r.Content {
				c := &r.Content[i]
				if c.OfText == nil || *c != (anthropic.ToolResultBlockParamContentUnion{OfText: c.OfText}) {
					return b[:start], false
				}
				if i > 0 {
					b = append(b, ',')
				}
				var ok bool
				if b, ok = leanText(b, c.OfText); !ok {
					return b[:start], false
				}
			}
			b = append(b, ']')
		}
		return append(b, `,"type":"tool_result"}`...), true
	}
	return b, false
}

func leanText(b []byte, t *anthropic.TextBlockParam) ([]byte, bool) {
	if t.Citations != nil || t.CacheControl != (anthropic.CacheControlEphemeralParam{}) {
		return b, false
	}
	b = append(b, `{"text":`...)
	b = appendString(b, t.Text)
	return append(b, `,"type":"text"}`...), true
}

// compactJSON reports whether raw JSON has no whitespace outside strings,
// so that it can be copied as the encoders would write it (they compact
// a json.RawMessage).
func compactJSON(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// leanGeminiContent appends the JSON of c when it is a content of text,
// functionCall and text-only functionResponse parts (the model's call and
// its result). genai's types hold maps and slices, so they are not
// comparable: the check that a value holds nothing but the written fields
// looks at every other field by reflection (onlyFields), which also
// covers fields a newer genai adds.
func leanGeminiContent(b []byte, c **genai.Content) ([]byte, bool) {
	if *c == nil || len((*c).Parts) == 0 || !onlyFields(*c, geminiContentFields) {
		return b, false
	}
	start := len(b)
	b = append(b, `{"parts":[`...)
	for i, p := range (*c).Parts {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = leanGeminiPart(b, p); !ok {
			return b[:start], false
		}
	}
	b = append(b, ']')
	if (*c).Role != "" {
		b = append(b, `,"role":`...)
		b = appendString(b, (*c).Role)
	}
	return append(b, '}'), true
}

func leanGeminiPart(b []byte, p *genai.Part) ([]byte, bool) {
	switch {
	case p == nil:
		return b, false
	case p.FunctionCall != nil:
		fc := p.FunctionCall
		if !onlyFields(p, geminiCallPartFields) || !onlyFields(fc, geminiCallFields) {
			return b, false
		}
		b = append(b, `{"functionCall":{`...)
		sep := false
		if fc.ID != "" {
			b = append(b, `"id":`...)
			b = appendString(b, fc.ID)
			sep = true
		}
		if len(fc.Args) > 0 {
			args, err := marshalArgs(fc.Args) // as the SDK's encoder writes a map
			if err != nil {
				return b, false
			}
			if sep {
				b = append(b, ',')
			}
			b = append(b, `"args":`...)
			b = append(b, args...)
			sep = true
		}
		if fc.Name != "" {
			if sep {
				b = append(b, ',')
			}
			b = append(b, `"name":`...)
			b = appendString(b, fc.Name)
		}
		return append(b, `}}`...), true
	case p.FunctionResponse != nil:
		fr := p.FunctionResponse
		if !onlyFields(p, geminiResponsePartFields) || !onlyFields(fr, geminiResponseFields) || len(fr.Response) != 1 {
			return b, false
		}
		var key, text string
		for k, v := range fr.Response {
			s, ok := v.(string)
			if !ok || (k != "output" && k != "error") {
				return b, false
			}
			key, text = k, s
		}
		return appendFunctionResponse(b, fr.ID, fr.Name, key, text), true
	default:
		if p.Text == "" || !onlyFields(p, geminiTextPartFields) {
			return b, false
		}
		b = append(b, `{"text":`...)
		b = appendString(b, p.Text)
		return append(b, '}'), true
	}
}

// appendFunctionResponse writes a functionResponse part whose response is
// {key: text} (key is "output" or "error": no escaping needed); id and name
// are left out when empty.
func appendFunctionResponse(b []byte, id, name, key, text string) []byte {
	b = append(b, `{"functionResponse":{`...)
	if id != "" {
		b = append(b, `"id":`...)
		b = appendString(b, id)
		b = append(b, ',')
	}
	if name != "" {
		b = append(b, `"name":`...)
		b = appendString(b, name)
		b = append(b, ',')
	}
	b = append(b, `"response":{"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	b = appendString(b, text)
	return append(b, `}}}`...)
}

// Field sets of onlyFields: the fields the lean Gemini encoder writes.
var (
	geminiContentFields      = fieldSet[genai.Content]("Parts", "Role")
	geminiCallPartFields     = fieldSet[genai.Part]("FunctionCall")
	geminiResponsePartFields = fieldSet[genai.Part]("FunctionResponse")
	geminiTextPartFields     = fieldSet[genai.Part]("Text")
	geminiCallFields         = fieldSet[genai.FunctionCall]("ID", "Args", "Name")
	geminiResponseFields     = fieldSet[genai.FunctionResponse]("ID", "Name", "Response")
)

// fieldSet is which fields of struct T are named; it panics on a name T
// does not have (a renamed field must not pass unchecked).
func fieldSet[T any](names ...string) []bool {
	t := reflect.TypeFor[T]()
	set := make([]bool, t.NumField())
	for _, n := range names {
		f, ok := t.FieldByName(n)
		if !ok || len(f.Index) != 1 {
			panic("upstream: " + t.String() + " has no field " + n)
		}
		set[f.Index[0]] = true
	}
	return set
}

// onlyFields reports whether every field of *v outside set is zero.
func onlyFields[T any](v *T, set []bool) bool {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		if !set[i] && !rv.Field(i).IsZero() {
			return false
		}
	}
	return true
}

// chatResults writes one tool message per result.
func chatResults(b []byte, req *gateway.Request, mi int, ends []int) ([]byte, []int, bool) {
	if !textResults(req, mi) {
		return b, ends, false
	}
	for _, p := range req.Messages[mi].Parts {
		b = append(b, `{"content":`...)
		b = appendString(b, errorText(p.Result))
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, p.Result.CallID)
		b = append(b, `,"role":"tool"}`...)
		ends = append(ends, len(b))
	}
	return b, ends, true
}

// appendString appends s as json.Marshal writes it, as the SDKs' encoders
// do for a string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
