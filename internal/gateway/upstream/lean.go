package upstream

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3/responses"
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
// The adapters build every element themselves (ResponsesParams,
// MessagesParams), never with the SDKs' Override or SetExtraFields, whose
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
		b = append(b, `{"output":`...)
		b = appendString(b, o.Output.OfString.Value)
		b = append(b, `,"call_id":`...)
		b = appendString(b, o.CallID.Value)
		return append(b, `,"type":"function_call_output"}`...), true
	}
	return b, false
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

// appendString appends s as a JSON string the way encoding/json writes it
// (HTML-safe: <, > and & escaped; U+2028, U+2029 escaped; invalid UTF-8
// as U+FFFD).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
