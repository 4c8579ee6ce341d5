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
//
// # A gateway request
//
// A gateway request is one client request (`POST /v1/responses`,
// `POST /v1/messages`) that may take many upstream model calls and many
// commands. Its path:
//
//  1. The client API's frontend (`internal/gateway/responses`, `…/messages`)
//     parses the body into the API-neutral `gateway.Request` (system prompt,
//     messages of text, image, tool-call and tool-result parts, the client's
//     function tools, tool choice, sampling settings) and picks the server tools
//     the request enabled (`ServerTools`, keyed by the function name the model
//     sees: `shell`, `bash_code_execution`, …). Our own items replayed in the
//     input become an assistant tool call and its result, with the same text the
//     model read when it ran (`gateway.ShellResultText`), and never run again.
//     Once the model is resolved, the frontend calls its `gateway.Screen`, if
//     set, with the parsed `Request` — the one hook of the guardrails: the
//     server's screen (`internal/server/guard.go`) reads the workspace's
//     guardrails, runs `guard.ScanAll` over the text parts of the user
//     messages, and either redacts those texts in place, or returns a 403
//     `RequestError` that the frontend answers in its envelope before any
//     container is opened or model called. Chat Completions, which has no
//     frontend of this kind, is screened on its JSON body (`screenChat`) before
//     it is forwarded or translated.
//  2. `gateway.Execute` is the loop: `Upstream.Turn` (the adapter of the
//     model's provider, `internal/gateway/upstream`, streaming deltas when the
//     client streams), then each server-tool call in order through
//     `ServerTool.Run`, the results appended as a user message, and again —
//     until a turn has no server-tool call, a client function tool is called
//     (the loop returns it with every step before it), or `max_tool_calls`
//     (default and maximum 30) is spent: then the model is asked once more with
//     tool choice `none` (Responses) or the run stops with `StopPause`
//     (Messages' `pause_turn`). A step refused for its arguments (not JSON, 101
//     commands, …) is a result the model reads, not a failed request; a
//     container the request may not have (another workspace's, expired) fails
//     the request. While a turn's tools run, an upstream that is a
//     `gateway.Preparer` (every adapter) prepares the next turn on another
//     goroutine: it translates and encodes the model's turn into the run's
//     memo, assembles the body so far and makes the HTTP request ready (its
//     context, URL and headers; the timeout starts when it is sent). The loop
//     waits for it before the next `Turn`, which then writes only the tools'
//     results (straight from the message, no SDK params: `directTurn`) and
//     appends them: the work between the last command's end and the next
//     request shrinks to that. A server tool on engine auto whose native
//     tool the provider declares is not run here: the provider runs it, and
//     its runs come back in the turn as steps already done (native.go).
//  3. The sandbox is opened lazily, at the first step, through
//     `gateway.Sandboxes`, which `internal/server` implements for the caller's
//     workspace (`internal/server/gateway.go`): `identity.Choose` picks the
//     container (reference, session, the conversation's last container, or a
//     new one), the record is found or created, and every command, file read
//     and write holds the container like an exec call (its call lock, the
//     delete check; the record read when the container was opened is trusted
//     for a second unless this process deleted or expired a container since,
//     so steps do not re-read it). The request is billed once (kind `response`), from its
//     first command to its end, at the rate and minimums of exec calls, when
//     the loop closes the sandbox (`Sandbox.Close`, before `Execute`
//     returns, so before the frontend answers): a bill the ledger did not
//     take is `Execute`'s error (a 503 `*gateway.RequestError`), which the
//     frontend answers in its API's envelope or stream error event instead of
//     the completion.
//  4. The frontend renders `gateway.Result` (text, client calls and steps in
//     order, stop reason, summed token usage, tool-call counts, cost), or, when
//     streaming, the `Sink` events as they happen: text deltas, a step's start,
//     its command output as produced, its end.
//
// Trace broadcast: `gateway.Execute` records each upstream call's and step's
// times (and `tool.RunShell` each command's) in the `Result`, tells an
// observer carried by the request's context (`gateway.WithObserver`), and
// `internal/server/trace.go` turns the request into a span tree that
// `internal/broadcast` queues, without blocking, for each OTLP/HTTP
// destination's worker (OpenTelemetry SDK, `otlptracehttp`).
//
// `internal/gateway/gatewaytest` is an in-process scripted `Upstream` for
// frontend and loop tests; `internal/gateway/scripted` is the wire-level
// scripted model (a real HTTP server speaking the four upstream APIs) that
// whole-request tests and the demo use.
//
// Inside every sandbox `/mnt/data` is a second mount of the home (OpenAI's
// hosted shell works there), and `$INPUT_DIR` (`/workspace/home/input`,
// where Messages uploads land) and `$OUTPUT_DIR` (`/workspace/home/output`,
// made by the host through an `os.Root` when a home is mounted, never over
// something the sandbox left at that name) are set, so the habits models
// learned on the hosted tools work.
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

// AppendMerged appends m to msgs, its parts added to the last message
// when that has m's role (the frontends of APIs whose clients may send
// neighbours of one role); a message without parts is left out.
func AppendMerged(msgs []Message, m Message) []Message {
	if len(m.Parts) == 0 {
		return msgs
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == m.Role {
		msgs[n-1].Parts = append(msgs[n-1].Parts, m.Parts...)
		return msgs
	}
	return append(msgs, m)
}

// PartKind says which field of a Part is set.
type PartKind string

const (
	PartText       PartKind = "text"
	PartImage      PartKind = "image"
	PartToolCall   PartKind = "tool_call"
	PartToolResult PartKind = "tool_result"
	// PartHosted is a call the provider ran itself, with its result
	// (engine auto, native.go); only in a Turn, never sent back as such.
	PartHosted PartKind = "hosted"
)

// Part is one piece of a message: text, an image, a tool call (assistant)
// or a tool result (user).
type Part struct {
	Kind   PartKind
	Text   string
	Image  *Image
	Call   *ToolCall
	Result *ToolResult
	Hosted *HostedCall
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
	// Caller is the id of the server tool call whose code made this
	// client call (programmatic tool calling); "" for the model's own.
	Caller string
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
	// Native, when set, is the provider's own hosted tool (NativeShell,
	// …) that the adapter sends instead of this function: the provider
	// runs its calls itself (engine auto, native.go).
	Native string
	// Container, with Native, is the provider's container to run in (the
	// container the client named, when the provider runs every server
	// tool); "" for a new one.
	Container string
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
	Parts []Part // PartText, PartToolCall and PartHosted only
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
	// DeltaHosted: the part at Index is a call the provider runs itself
	// (its content comes with the Turn).
	DeltaHosted DeltaKind = "hosted"
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
