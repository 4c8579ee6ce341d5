// Package gateway is the API-neutral heart of Shellgate's model gateway:
// one conversation model that every client API (Responses, Messages) and
// every upstream API (Chat Completions, Responses, Messages) translates to
// and from, the request loop that forwards a conversation to the upstream
// model and runs the model's server-tool calls in the caller's sandbox until
// the model answers, and the server tools themselves.
//
// The data path reads top to bottom:
//
//	internal/gateway/responses, internal/gateway/messages   client wire formats
//	        │  parse the request into a Request + server tools; render Result / Sink events
//	        ▼
//	internal/gateway (Loop)                                 API-neutral loop
//	        │  Upstream.Turn ... ServerTool.Run ... Upstream.Turn
//	        ├── internal/gateway/upstream                   upstream wire formats
//	        ▼
//	Sandbox (implemented by internal/server)                 the caller's container
//	        ▼
//	internal/tool → sandbox.Manager
package gateway

import "encoding/json"

// Role of a message in the conversation.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one turn of the conversation. Tool results are parts of a
// user message (Anthropic's convention); upstream adapters that want a
// separate "tool" message (Chat Completions) split them out.
type Message struct {
	Role  Role
	Parts []Part
}

// PartKind says which field of a Part is set.
type PartKind string

const (
	PartText       PartKind = "text"
	PartImage      PartKind = "image"
	PartToolCall   PartKind = "tool_call"
	PartToolResult PartKind = "tool_result"
)

// Part is one piece of a message: text, an image, a tool call (assistant)
// or a tool result (user).
type Part struct {
	Kind   PartKind
	Text   string
	Image  *Image
	Call   *ToolCall
	Result *ToolResult
}

// Image is an image given to the model, either inline (MediaType + Data,
// base64 as the APIs carry it) or by URL.
type Image struct {
	MediaType string // "image/png", ...
	Data      string // base64, when inline
	URL       string // when by reference (http(s) or data: URL)
}

// ToolCall is a call the model made. Arguments is the JSON text the model
// wrote (it may be invalid JSON: the tool reports that to the model).
type ToolCall struct {
	ID        string // the call id as the conversation knows it ("call_…", "toolu_…")
	Name      string
	Arguments string
}

// ToolResult answers the ToolCall with the same id.
type ToolResult struct {
	CallID  string
	Content string // what the model reads
	IsError bool
	Images  []Image // images in the result, where the APIs carry them
}

// Tool is a function tool as the upstream model sees it.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema of the arguments object
	Strict      bool
}

// ToolChoice modes.
const (
	ChoiceAuto     = "auto"
	ChoiceNone     = "none"
	ChoiceRequired = "required" // "any" on Messages
	ChoiceTool     = "tool"     // exactly the tool named Name
)

// ToolChoice constrains the model's use of tools. The zero value is auto.
type ToolChoice struct {
	Mode string
	Name string // with ChoiceTool
	// DisableParallel asks for at most one tool call per turn, where the
	// upstream API can say so.
	DisableParallel bool
}

// Request is one upstream call: the conversation so far and what the model
// may do next. Model is the upstream's own model name (the provider prefix
// already removed).
type Request struct {
	Model       string
	System      string
	Messages    []Message
	Tools       []Tool
	ToolChoice  ToolChoice
	MaxTokens   int      // 0: the upstream's default (Messages requires one: adapters pick 4096)
	Temperature *float64 // nil: not sent
	TopP        *float64
	Stop        []string
	// User is an end-user identifier passed on where the upstream has one.
	User string
	// Encoded, when set, lets the upstream adapter keep what it encoded
	// between the turns of one run, so each turn encodes only the new
	// messages (a run's conversation grows by a few items a turn; encoding
	// it whole every turn through the SDKs' reflection-based encoders cost
	// ≈ 0.2 ms a turn). Execute sets it: it only ever appends to Messages,
	// never changes Tools after the first turn and changes no other field
	// but ToolChoice, which is what makes the memo valid. Leave it nil when
	// a Request may change otherwise.
	Encoded *Encoded
}

// Encoded is an upstream adapter's memo of one run's request body: the
// JSON of each element of the upstream's conversation array and of its
// tools array. Only the adapter reads or writes its fields.
type Encoded struct {
	Flavour string   // the adapter that filled it; another one starts afresh
	Elems   [][]byte // the conversation array's elements, in order
	Tools   []byte   // the tools array; nil until encoded
	NTools  int      // len(Request.Tools) that Tools encodes
	Top     []byte   // the other fields, as a JSON object
	TopKey  TopKey   // what Top was encoded for
	// Msgs is how many of Request.Messages Elems is made of: an adapter
	// translates only the messages after them, not the whole conversation
	// every turn (memoFrom). From is the index of the first message of the
	// last element, which is Elems[Base]: when the first new message
	// belongs to that element (Messages and Gemini merge consecutive turns
	// of one role), the adapter translates from there and rebuilds it.
	Msgs, From, Base int
	// Prefix is the body Prepare assembled, cut after the conversation's
	// first PrefixElems elements, with room to spare: the next Turn
	// appends the rest to it instead of copying them all again.
	Prefix      []byte
	PrefixElems int
	// Next is what the adapter's Prepare made ready for the next Turn
	// beyond the conversation (its HTTP exchange); that Turn takes it.
	// Execute discards it when the run ends without one.
	Next interface{ Discard() }
}

// TopKey is what an Encoded's Top depends on of what the loop changes.
type TopKey struct {
	ToolChoice ToolChoice
	Stream     bool
}

// StopReason says why a turn ended, in the neutral vocabulary; each API
// maps to and from its own.
type StopReason string

const (
	StopEnd       StopReason = "end"        // the model finished (end_turn, stop, completed)
	StopMaxTokens StopReason = "max_tokens" // cut at the token limit (length, incomplete)
	StopToolUse   StopReason = "tool_use"   // the model called tools
	StopSequence  StopReason = "stop_sequence"
	StopRefusal   StopReason = "refusal" // refusal, content_filter
	StopPause     StopReason = "pause"   // Messages' pause_turn: the loop's budget was spent
)

// Usage counts tokens. Adapters fill what their API reports.
type Usage struct {
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64 // of InputTokens, read from a prompt cache
	CacheWriteTokens int64 // of InputTokens, written to a prompt cache
	ReasoningTokens  int64 // of OutputTokens
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CacheWriteTokens += o.CacheWriteTokens
	u.ReasoningTokens += o.ReasoningTokens
}

// Turn is the upstream's answer to one Request: assistant parts (text and
// tool calls, in order), why it stopped, and its token usage.
type Turn struct {
	ID    string // the upstream's response id, for logs
	Model string // the model the upstream says answered
	Parts []Part // PartText and PartToolCall only
	Stop  StopReason
	Usage Usage
}

// DeltaKind says what a Delta carries.
type DeltaKind string

const (
	// DeltaText: Text is more of the text part at Index.
	DeltaText DeltaKind = "text"
	// DeltaCallStart: the part at Index is a tool call with Call.ID and
	// Call.Name (Arguments empty).
	DeltaCallStart DeltaKind = "call_start"
	// DeltaCallArgs: Text is more of the arguments of the call at Index.
	DeltaCallArgs DeltaKind = "call_args"
)

// Delta is a piece of a turn as it streams from the upstream. Index is the
// position of the part in Turn.Parts; parts start in order and a part's
// deltas are contiguous or interleaved only with later parts' starts.
type Delta struct {
	Kind  DeltaKind
	Index int
	Text  string
	Call  *ToolCall
}
