package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/jsontest"
)

var bodies = map[string]func(*gateway.Request, bool) ([]byte, error){
	gateway.APIChat: chatBody, gateway.APIResponses: responsesBody, gateway.APIMessages: messagesBody, gateway.APIGemini: geminiBody,
}

var (
	preparerEndpoint = Endpoint{BaseURL: "http://127.0.0.1:9/v1"} // never called
	preparers        = map[string]gateway.Preparer{
		gateway.APIChat: NewChat(preparerEndpoint), gateway.APIResponses: NewResponses(preparerEndpoint),
		gateway.APIMessages: NewMessages(preparerEndpoint), gateway.APIGemini: NewGemini(preparerEndpoint),
	}
	// paths are the calls' paths of the test's requests (model "m").
	paths = map[string]func(stream bool) string{
		gateway.APIChat:      func(bool) string { return "/chat/completions" },
		gateway.APIResponses: func(bool) string { return "/responses" },
		gateway.APIMessages:  func(bool) string { return "/messages" }, // the base's /v1 not doubled
		gateway.APIGemini: func(stream bool) string {
			if stream {
				return "/models/m:streamGenerateContent?alt=sse"
			}
			return "/models/m:generateContent"
		},
	}
)

// TestEncodeMemo grows a conversation as a run does — text, images, two
// user messages in a row (which Messages merges), tool calls and results
// with images and errors, a user message after results, an empty message
// between two assistant turns (which Messages and Gemini merge), streamed
// and not, tool choice changed for the last turn — and checks that every
// turn's memoised body is the same JSON value as the whole request
// encoded afresh, with and without the adapter's Prepare called after each
// assistant turn (as the loop does while the tools run).
func TestEncodeMemo(t *testing.T) {
	img := &gateway.Image{MediaType: "image/png", Data: "aGVsbG8="}
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			for _, prep := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/stream=%v/prepare=%v", api, stream, prep), func(t *testing.T) {
					testEncodeMemo(t, api, stream, prep, img)
				})
			}
		}
	}
}

func testEncodeMemo(t *testing.T, api string, stream, prep bool, img *gateway.Image) {
	req := &gateway.Request{Model: "m", System: "sys", MaxTokens: 100, Encoded: &gateway.Encoded{},
		Tools: []gateway.Tool{gateway.ShellFunction("shell"), gateway.BashFunction("bash")}}
	steps := [][]gateway.Message{
		{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "hi"}, {Kind: gateway.PartImage, Image: img}}}},
		{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "and this"}}}},
	}
	call := func(id string) gateway.Message {
		return gateway.Message{Role: gateway.RoleAssistant, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "let me"}, {Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: id, Name: "shell", Arguments: `{"commands":["ls"]}`}}}}
	}
	for i := range 4 {
		id := fmt.Sprintf("call_%d", i)
		res := &gateway.ToolResult{CallID: id, Content: "out", IsError: i == 2}
		if i == 1 {
			res.Images = []gateway.Image{*img}
		}
		steps = append(steps, []gateway.Message{
			call(id),
			{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult, Result: res}}},
		})
	}
	steps = append(steps,
		// A user message right after tool results: Messages and
		// Gemini merge it into the results' element, which the
		// memo rebuilds from its first message.
		[]gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "go on"}}}},
		// An assistant turn, an empty user message (no element on
		// Messages and Gemini) and another assistant turn, which
		// they then merge into the first.
		[]gateway.Message{{Role: gateway.RoleAssistant, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "ok"}}}},
		[]gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText}}}},
		[]gateway.Message{call("call_9"), {Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "call_9", Content: "nine"}}}}},
	)
	for i, add := range steps {
		var prefix []byte // what Prepare assembled
		for _, m := range add {
			req.Messages = append(req.Messages, m)
			if prep && m.Role == gateway.RoleAssistant && len(add) > 1 {
				preparers[api].Prepare(context.Background(), req, stream)
				if req.Encoded.Msgs != len(req.Messages) {
					t.Fatalf("turn %d: Prepare left a memo of %d messages, want %d", i, req.Encoded.Msgs, len(req.Messages))
				}
				prefix = req.Encoded.Prefix
				if len(prefix) == 0 {
					t.Fatalf("turn %d: Prepare assembled no body prefix", i)
				}
				r := readyOf(req)
				if want := "http://127.0.0.1:9/v1" + paths[api](stream); r == nil || r.req.URL.String() != want || r.req.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("turn %d: Prepare made ready %+v, want a POST to %s", i, r, want)
				}
				r.Discard()
				if context.Cause(r.c.ctx) != context.Canceled {
					t.Fatalf("turn %d: the discarded exchange's context was not cancelled", i)
				}
			}
		}
		if i == len(steps)-1 {
			req.ToolChoice = gateway.ToolChoice{Mode: gateway.ChoiceNone}
		}
		var before *gateway.Encoded                              // the memo before the turn, when its body is a direct one
		if prep && len(add) > 1 && i != 3 && i != len(steps)-1 { // turn 3's results hold an image; the last changes the tool choice
			before = cloneMemo(req.Encoded)
		}
		got, err := bodies[api](req, stream)
		if err != nil {
			t.Fatal(err)
		}
		if before != nil {
			// The turn after Prepare adds only text results: its body is
			// written straight from them (directTurn), the same bytes.
			again := *req
			again.Encoded = before
			direct, ok := directTurn(&again, api, stream && api != gateway.APIGemini, elemsKeys[api], api == gateway.APIMessages || api == gateway.APIGemini, resultsWriters[api])
			if !ok || string(direct) != string(got) {
				t.Fatalf("turn %d: the direct body (taken %v) differs\n got %s\nwant %s", i, ok, direct, got)
			}
		}
		if len(prefix) > 0 && &got[0] != &prefix[0] {
			t.Fatalf("turn %d: the body was not appended to what Prepare assembled", i)
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
		if req.Encoded.Msgs != len(req.Messages) {
			t.Fatalf("turn %d: the memo holds %d messages, want %d", i, req.Encoded.Msgs, len(req.Messages))
		}
	}
	if len(req.Encoded.Elems) == 0 || req.Encoded.Tools == nil {
		t.Fatalf("the memo was not used: %+v", req.Encoded)
	}
	if req.Encoded.From == 0 {
		t.Fatalf("the adapter translated the whole conversation every turn: %+v", req.Encoded)
	}
}

var (
	elemsKeys      = map[string]string{gateway.APIChat: "messages", gateway.APIResponses: "input", gateway.APIMessages: "messages", gateway.APIGemini: "contents"}
	resultsWriters = map[string]resultsWriter{gateway.APIChat: chatResults, gateway.APIResponses: responsesResults, gateway.APIMessages: messagesResults, gateway.APIGemini: geminiResults}
)

// cloneMemo is a copy of m that shares no memory it writes to.
func cloneMemo(m *gateway.Encoded) *gateway.Encoded {
	c := *m
	c.Elems = slices.Clone(m.Elems)
	if m.Prefix != nil {
		c.Prefix = append(make([]byte, 0, cap(m.Prefix)), m.Prefix...)
	}
	c.Next = nil
	return &c
}

// TestResultsWritersMatchSDK: the results writers write the same bytes as
// the adapter's params encoded by the SDK, for hostile strings, results
// with and without errors and content, and refuse what they do not take.
func TestResultsWritersMatchSDK(t *testing.T) {
	sdkElems := map[string]func(req *gateway.Request, from int) ([]any, error){
		gateway.APIChat: func(req *gateway.Request, from int) ([]any, error) {
			p, _, err := chatParams(req, from)
			return anys(p.Messages), err
		},
		gateway.APIResponses: func(req *gateway.Request, from int) ([]any, error) {
			p, _, err := responsesParams(req, from)
			return anys(p.Input.OfInputItemList), err
		},
		gateway.APIMessages: func(req *gateway.Request, from int) ([]any, error) {
			p, _, err := messagesParams(req, from)
			return anys(p.Messages), err
		},
		gateway.APIGemini: func(req *gateway.Request, from int) ([]any, error) {
			p, _, err := geminiParams(req, from)
			if err != nil {
				return nil, err
			}
			return anys(p.Contents), nil
		},
	}
	for _, api := range apis {
		write := resultsWriters[api]
		for i, s := range append(jsontest.Strings(), "") {
			req := &gateway.Request{Messages: []gateway.Message{userText("q"), {Role: gateway.RoleAssistant, Parts: []gateway.Part{
				{Kind: gateway.PartText, Text: "let me"},
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: s, Name: "n" + s, Arguments: `{}`}},
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "c2", Name: "shell", Arguments: `{}`}}}},
				{Role: gateway.RoleUser, Parts: []gateway.Part{
					{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: s, Content: s, IsError: i%2 == 0}},
					{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "c2", Content: "", IsError: i%3 == 0}},
					{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "unknown", Content: "error: " + s, IsError: true}}}}}}
			want, err := sdkElems[api](req, 2)
			if err != nil {
				t.Fatal(err)
			}
			got, ends, ok := write([]byte("prefix"), req, 2, nil)
			if !ok || len(ends) != len(want) {
				t.Fatalf("%s %q: the writer took it = %v with %d elements, want %d", api, s, ok, len(ends), len(want))
			}
			start := len("prefix")
			for k, end := range ends {
				w, err := json.Marshal(want[k])
				if err != nil {
					t.Fatal(err)
				}
				if string(got[start:end]) != string(w) {
					t.Fatalf("%s %q: element %d differs from the SDK's\n got %s\nwant %s", api, s, k, got[start:end], w)
				}
				start = end
			}
			if start != len(got) {
				t.Fatalf("%s: bytes after the last element: %q", api, got[start:])
			}
		}
		// What the writers do not take: left to the params and the SDK.
		img := gateway.Image{MediaType: "image/png", Data: "aGk="}
		for _, parts := range [][]gateway.Part{
			nil,
			{{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "c", Content: "x", Images: []gateway.Image{img}}}},
			{{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "c", Content: "x"}}, {Kind: gateway.PartText, Text: "and"}},
			{{Kind: gateway.PartImage, Image: &img}},
		} {
			req := &gateway.Request{Messages: []gateway.Message{{Role: gateway.RoleUser, Parts: parts}}}
			if got, ends, ok := write([]byte("prefix"), req, 0, nil); ok || string(got) != "prefix" || len(ends) != 0 {
				t.Fatalf("%s: the writer took %+v: %q", api, parts, got)
			}
		}
	}
}

func anys[S ~[]E, E any](s S) []any {
	out := make([]any, len(s))
	for i := range s {
		out[i] = s[i]
	}
	return out
}

// TestPreparedTurn: a Turn after Prepare sends the exchange Prepare made
// ready — with the adapter's headers, the whole body and its length, its
// deadline counted from when it is sent, not from Prepare — and the same
// request as without Prepare; an exchange readied for another ctx is
// discarded, not sent.
func TestPreparedTurn(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Models: map[string][]scripted.Turn{
		"m": {{Text: "unused"}, {Text: "done", Delay: scripted.Duration(100 * time.Millisecond)}}, // the conversation holds turn 0
	}})
	defer srv.Close()
	call := &gateway.ToolCall{ID: "call_1", Name: "shell", Arguments: `{"commands":["ls"]}`}
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			srv.Reset()
			up := adapter(api, srv.URL, 800*time.Millisecond) // the answer's 100 ms and ample margin, under -race too
			req := &gateway.Request{Model: "m", Encoded: &gateway.Encoded{}, Tools: []gateway.Tool{gateway.ShellFunction("shell")},
				Messages: []gateway.Message{userText("hi"), {Role: gateway.RoleAssistant, Parts: []gateway.Part{{Kind: gateway.PartToolCall, Call: call}}}}}
			ctx := context.Background()
			up.(gateway.Preparer).Prepare(ctx, req, stream)
			r, _ := req.Encoded.Next.(*readied)
			if r == nil {
				t.Fatalf("%s stream=%v: Prepare made no exchange ready", api, stream)
			}
			time.Sleep(900 * time.Millisecond) // the tools run: longer than the timeout
			req.Messages = append(req.Messages, gateway.Message{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult,
				Result: &gateway.ToolResult{CallID: "call_1", Content: "a.csv"}}}})
			turn, err := collect(t, up, req, stream)
			if err != nil || len(turn.Parts) != 1 || turn.Parts[0].Text != "done" {
				t.Fatalf("%s stream=%v: %+v, %v", api, stream, turn, err)
			}
			if req.Encoded.Next != nil || context.Cause(r.c.ctx) != context.Canceled {
				t.Fatalf("%s stream=%v: the readied exchange was not taken and closed", api, stream)
			}
			got := srv.Last()
			plain := *req
			plain.Encoded = nil
			want, err := bodies[api](&plain, stream)
			if err != nil {
				t.Fatal(err)
			}
			var w map[string]any
			json.Unmarshal(want, &w)
			if !reflect.DeepEqual(got.Body, w) || got.Header.Get("Content-Length") != strconv.Itoa(len(got.Raw)) || got.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%s stream=%v: the upstream got %s\n%s\nwant %s", api, stream, got.Header, got.Raw, want)
			}
			if key := got.Header.Get("Authorization") + got.Header.Get("x-api-key") + got.Header.Get("x-goog-api-key"); !strings.Contains(key, "sk-test") {
				t.Fatalf("%s stream=%v: no API key in %s", api, stream, got.Header)
			}
		}
	}
	// Readied for another ctx (or another path): post discards it and
	// sends a new exchange.
	e := &Endpoint{BaseURL: srv.URL + "/v1", Timeout: time.Second}
	srv.Reset()
	r := e.ready(context.Background(), responsesPath, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := e.post(ctx, responsesPath, []byte(`{"model":"m","input":"hi"}`), nil, r)
	if err != nil {
		t.Fatal(err)
	}
	c.close()
	if c == r.c || context.Cause(r.c.ctx) != context.Canceled {
		t.Fatal("an exchange readied for another ctx was sent, or not discarded")
	}
}
