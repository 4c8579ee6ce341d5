package upstream

import (
	"encoding/json"

	"github.com/shellgate/shellgate/internal/gateway"
)

// Lean views of the upstream answers the adapters read: only the fields
// they use, under the JSON names of the official SDKs' types
// (responses.Response, openai.ChatCompletion, anthropic.Message), decoded
// with unmarshal (encoding/json's semantics). The SDKs' own decoders (apijson) keep each field's
// raw JSON and validity and cost ≈ 0.1–0.2 ms an answer — most of the
// gateway's own work in a tool step — for fields no adapter reads. Fields
// whose type varies with the item or event type are kept raw and read
// only where the type is known.

// responsesAnswer is a Responses API response object.
type responsesAnswer struct {
	ID     string `json:"id"`
	Model  string `json:"model"`
	Status string `json:"status"`
	Error  struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	IncompleteDetails struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []responsesItem `json:"output"`
	Usage  struct {
		InputTokens        int64 `json:"input_tokens"`
		OutputTokens       int64 `json:"output_tokens"`
		InputTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	} `json:"usage"`
}

// responsesItem is an output item; Content and Arguments are read for
// message and function_call items only, Action, Output, Code, Outputs and
// Status for the hosted tools' items (shell_call, shell_call_output,
// code_interpreter_call).
type responsesItem struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Content   json.RawMessage `json:"content"`
	Action    json.RawMessage `json:"action"`
	Output    json.RawMessage `json:"output"`
	Code      json.RawMessage `json:"code"`
	Outputs   json.RawMessage `json:"outputs"`
	Status    string          `json:"status"`
	// The container a hosted call ran in: a shell_call's environment
	// (container_reference), a code_interpreter_call's container_id.
	Environment struct {
		ContainerID string `json:"container_id"`
	} `json:"environment"`
	ContainerID string `json:"container_id"`
}

// responsesContent is a message item's content part.
type responsesContent struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// responsesEvent is a streamed Responses event; Delta is read for the
// text and argument delta events only.
type responsesEvent struct {
	Type     string          `json:"type"`
	ItemID   string          `json:"item_id"`
	Delta    json.RawMessage `json:"delta"`
	Item     responsesItem   `json:"item"`
	Response responsesAnswer `json:"response"`
	Code     string          `json:"code"`
	Message  string          `json:"message"`
}

// rawString is raw as a JSON string, "" when it is not one.
func rawString(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// chatAnswer is a Chat Completions response.
type chatAnswer struct {
	ID      string        `json:"id"`
	Model   string        `json:"model"`
	Choices []chatChoice  `json:"choices"`
	Usage   chatUsageJSON `json:"usage"`
}

// chatChoice is a choice of a Chat Completions response.
type chatChoice struct {
	FinishReason string                    `json:"finish_reason"`
	Message      chatMessage[chatToolCall] `json:"message"`
}

// chatMessage is a choice's message (C chatToolCall), or a streamed
// chunk's delta (C chatToolCallDelta).
type chatMessage[C any] struct {
	Content   string `json:"content"`
	Refusal   string `json:"refusal"`
	ToolCalls []C    `json:"tool_calls"`
}

// chatToolCall is a tool call of a Chat Completions message.
type chatToolCall struct {
	ID       string       `json:"id"`
	Function chatFunction `json:"function"`
}

// chatFunction is a tool call's function (or a piece of it, streamed).
type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// chatUsageJSON is Chat Completions' usage; PromptTokens is nil when the
// answer or chunk has none.
type chatUsageJSON struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    int64  `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (u *chatUsageJSON) usage() gateway.Usage {
	var in int64
	if u.PromptTokens != nil {
		in = *u.PromptTokens
	}
	return gateway.Usage{
		InputTokens:     in,
		OutputTokens:    u.CompletionTokens,
		CacheReadTokens: u.PromptTokensDetails.CachedTokens,
		ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens,
	}
}

// chatChunk is a streamed Chat Completions chunk.
type chatChunk struct {
	ID      string            `json:"id"`
	Model   string            `json:"model"`
	Usage   *chatUsageJSON    `json:"usage"`
	Choices []chatChunkChoice `json:"choices"`
}

// chatChunkChoice is a choice of a streamed chunk.
type chatChunkChoice struct {
	FinishReason string                         `json:"finish_reason"`
	Delta        chatMessage[chatToolCallDelta] `json:"delta"`
}

// chatToolCallDelta is a piece of a streamed tool call.
type chatToolCallDelta struct {
	Index    int64        `json:"index"`
	ID       string       `json:"id"`
	Function chatFunction `json:"function"`
}

// messagesAnswer is a Messages API message.
type messagesAnswer struct {
	ID         string            `json:"id"`
	Model      string            `json:"model"`
	StopReason string            `json:"stop_reason"`
	Content    []messagesBlock   `json:"content"`
	Usage      messagesUsageJSON `json:"usage"`
	Container  messagesContainer `json:"container"`
}

// messagesContainer is the container Anthropic's code execution ran in.
type messagesContainer struct {
	ID        string `json:"id"`
	ExpiresAt string `json:"expires_at"`
}

// messagesBlock is a content block of a Messages API message; ToolUseID
// and Content are read for the results of the provider's own code
// execution.
type messagesBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// messagesUsageJSON is the Messages API's usage.
type messagesUsageJSON struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	OutputTokensDetails      struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// messagesEvent is a streamed Messages event (not error events, which
// are read apart). Usage is nil when the event has none.
type messagesEvent struct {
	Type    string `json:"type"`
	Index   int64  `json:"index"`
	Message struct {
		ID    string            `json:"id"`
		Model string            `json:"model"`
		Usage messagesUsageJSON `json:"usage"`
	} `json:"message"`
	ContentBlock messagesBlock `json:"content_block"`
	Delta        struct {
		Type        string            `json:"type"`
		Text        string            `json:"text"`
		PartialJSON string            `json:"partial_json"`
		StopReason  string            `json:"stop_reason"`
		Container   messagesContainer `json:"container"`
	} `json:"delta"`
	Usage *messagesUsageJSON `json:"usage"`
}
