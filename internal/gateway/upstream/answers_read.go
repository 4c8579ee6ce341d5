package upstream

import (
	"github.com/shellgate/shellgate/internal/jsonr"
)

// Readers of the answers' and stream events' lean views without reflection
// (jsonr). A tool step decodes one answer right after its thread wakes
// from waiting on the model, and there encoding/json's reflective decoder
// costs 5–10 times its warm time: much of it is the type metadata and
// code it walks. The readers write exactly what unmarshal would, or fail
// and leave the answer to unmarshal (decodeAnswer);
// FuzzAnswerReadersMatchUnmarshal checks both halves of that.

// answerReader is a lean view that can read itself.
type answerReader interface {
	read(r *jsonr.Reader) bool
	reset()
}

// decodeAnswer decodes data into v: with v's reader when v has one and
// the reader takes data, else with unmarshal.
func decodeAnswer(data []byte, v any) error {
	if a, ok := v.(answerReader); ok {
		if jsonr.Decode(data, a.read) {
			return nil
		}
		a.reset()
	}
	return unmarshal(data, v)
}

var (
	responsesAnswerNames = []string{"id", "model", "status", "error", "incomplete_details", "output", "usage"}
	responsesItemNames   = []string{"type", "id", "call_id", "name", "arguments", "content", "action", "output", "code", "outputs", "status", "environment", "container_id"}
	containerIDNames     = []string{"container_id"}
	responsesUsageNames  = []string{"input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details"}
	codeMessageNames     = []string{"code", "message"}
	reasonNames          = []string{"reason"}
	cachedTokensNames    = []string{"cached_tokens"}
	reasoningTokensNames = []string{"reasoning_tokens"}
)

func (a *responsesAnswer) reset() { *a = responsesAnswer{} }

func (a *responsesAnswer) read(r *jsonr.Reader) bool {
	return r.Object(responsesAnswerNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&a.ID)
		case 1:
			return r.Str(&a.Model)
		case 2:
			return r.Str(&a.Status)
		case 3:
			return r.Strs(codeMessageNames, &a.Error.Code, &a.Error.Message)
		case 4:
			return r.Strs(reasonNames, &a.IncompleteDetails.Reason)
		case 5:
			return jsonr.Slice(r, &a.Output, func(it *responsesItem) bool { return it.read(r) })
		default:
			u := &a.Usage
			return r.Object(responsesUsageNames, func(k int) bool {
				switch k {
				case 0:
					return r.Int(&u.InputTokens, 64)
				case 1:
					return r.Int(&u.OutputTokens, 64)
				case 2:
					return r.Object(cachedTokensNames, func(int) bool { return r.Int(&u.InputTokensDetails.CachedTokens, 64) })
				default:
					return r.Object(reasoningTokensNames, func(int) bool { return r.Int(&u.OutputTokensDetails.ReasoningTokens, 64) })
				}
			})
		}
	})
}

func (it *responsesItem) read(r *jsonr.Reader) bool {
	return r.Object(responsesItemNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&it.Type)
		case 1:
			return r.Str(&it.ID)
		case 2:
			return r.Str(&it.CallID)
		case 3:
			return r.Str(&it.Name)
		case 4:
			return r.Raw(&it.Arguments)
		case 5:
			return r.Raw(&it.Content)
		case 6:
			return r.Raw(&it.Action)
		case 7:
			return r.Raw(&it.Output)
		case 8:
			return r.Raw(&it.Code)
		case 9:
			return r.Raw(&it.Outputs)
		case 10:
			return r.Str(&it.Status)
		case 11:
			return r.Strs(containerIDNames, &it.Environment.ContainerID)
		default:
			return r.Str(&it.ContainerID)
		}
	})
}

var (
	chatAnswerNames   = []string{"id", "model", "choices", "usage"}
	chatChoiceNames   = []string{"finish_reason", "message"}
	chatMessageNames  = []string{"content", "refusal", "tool_calls"}
	chatToolCallNames = []string{"id", "function"}
	chatFunctionNames = []string{"name", "arguments"}
	chatUsageNames    = []string{"prompt_tokens", "completion_tokens", "prompt_tokens_details", "completion_tokens_details"}
)

func (a *chatAnswer) reset() { *a = chatAnswer{} }

func (a *chatAnswer) read(r *jsonr.Reader) bool {
	return r.Object(chatAnswerNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&a.ID)
		case 1:
			return r.Str(&a.Model)
		case 2:
			return jsonr.Slice(r, &a.Choices, func(ch *chatChoice) bool {
				return r.Object(chatChoiceNames, func(k int) bool {
					if k == 0 {
						return r.Str(&ch.FinishReason)
					}
					return ch.Message.read(r, func(tc *chatToolCall) bool {
						return r.Object(chatToolCallNames, func(k int) bool {
							if k == 0 {
								return r.Str(&tc.ID)
							}
							return tc.Function.read(r)
						})
					})
				})
			})
		default:
			return a.Usage.read(r)
		}
	})
}

// read reads m, each tool call with call.
func (m *chatMessage[C]) read(r *jsonr.Reader, call func(*C) bool) bool {
	return r.Object(chatMessageNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&m.Content)
		case 1:
			return r.Str(&m.Refusal)
		default:
			return jsonr.Slice(r, &m.ToolCalls, call)
		}
	})
}

func (f *chatFunction) read(r *jsonr.Reader) bool {
	return r.Strs(chatFunctionNames, &f.Name, &f.Arguments)
}

func (u *chatUsageJSON) read(r *jsonr.Reader) bool {
	return r.Object(chatUsageNames, func(k int) bool {
		switch k {
		case 0:
			return jsonr.Ptr(r, &u.PromptTokens, r.Int64)
		case 1:
			return r.Int(&u.CompletionTokens, 64)
		case 2:
			return r.Object(cachedTokensNames, func(int) bool { return r.Int(&u.PromptTokensDetails.CachedTokens, 64) })
		default:
			return r.Object(reasoningTokensNames, func(int) bool { return r.Int(&u.CompletionTokensDetails.ReasoningTokens, 64) })
		}
	})
}

var (
	messagesAnswerNames = []string{"id", "model", "stop_reason", "content", "usage", "container"}
	containerNames      = []string{"id", "expires_at"}
	messagesBlockNames  = []string{"type", "text", "id", "name", "input", "tool_use_id", "content"}
	messagesUsageNames  = []string{"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens_details"}
	thinkingTokensNames = []string{"thinking_tokens"}
)

func (a *messagesAnswer) reset() { *a = messagesAnswer{} }

func (c *messagesContainer) read(r *jsonr.Reader) bool {
	return r.Strs(containerNames, &c.ID, &c.ExpiresAt)
}

func (b *messagesBlock) read(r *jsonr.Reader) bool {
	return r.Object(messagesBlockNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&b.Type)
		case 1:
			return r.Str(&b.Text)
		case 2:
			return r.Str(&b.ID)
		case 3:
			return r.Str(&b.Name)
		case 4:
			return r.Raw(&b.Input)
		case 5:
			return r.Str(&b.ToolUseID)
		default:
			return r.Raw(&b.Content)
		}
	})
}

func (a *messagesAnswer) read(r *jsonr.Reader) bool {
	return r.Object(messagesAnswerNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&a.ID)
		case 1:
			return r.Str(&a.Model)
		case 2:
			return r.Str(&a.StopReason)
		case 3:
			return jsonr.Slice(r, &a.Content, func(b *messagesBlock) bool { return b.read(r) })
		case 4:
			return a.Usage.read(r)
		default:
			return a.Container.read(r)
		}
	})
}

func (u *messagesUsageJSON) read(r *jsonr.Reader) bool {
	return r.Object(messagesUsageNames, func(k int) bool {
		switch k {
		case 0:
			return r.Int64(&u.InputTokens)
		case 1:
			return r.Int64(&u.OutputTokens)
		case 2:
			return r.Int64(&u.CacheReadInputTokens)
		case 3:
			return r.Int64(&u.CacheCreationInputTokens)
		default:
			return r.Object(thinkingTokensNames, func(int) bool { return r.Int64(&u.OutputTokensDetails.ThinkingTokens) })
		}
	})
}

// The streamed events' readers.

var (
	responsesEventNames  = []string{"type", "item_id", "delta", "item", "response", "code", "message"}
	chatChunkNames       = []string{"id", "model", "usage", "choices"}
	chatChunkChoiceNames = []string{"finish_reason", "delta"}
	chatCallDeltaNames   = []string{"index", "id", "function"}
	messagesEventNames   = []string{"type", "index", "message", "content_block", "delta", "usage"}
	messagesStartNames   = []string{"id", "model", "usage"}
	messagesDeltaNames   = []string{"type", "text", "partial_json", "stop_reason", "container"}
)

func (e *responsesEvent) reset() { *e = responsesEvent{} }

func (e *responsesEvent) read(r *jsonr.Reader) bool {
	return r.Object(responsesEventNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&e.Type)
		case 1:
			return r.Str(&e.ItemID)
		case 2:
			return r.Raw(&e.Delta)
		case 3:
			return e.Item.read(r)
		case 4:
			return e.Response.read(r)
		case 5:
			return r.Str(&e.Code)
		default:
			return r.Str(&e.Message)
		}
	})
}

func (c *chatChunk) reset() { *c = chatChunk{} }

func (c *chatChunk) read(r *jsonr.Reader) bool {
	return r.Object(chatChunkNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&c.ID)
		case 1:
			return r.Str(&c.Model)
		case 2:
			return jsonr.Ptr(r, &c.Usage, func(u *chatUsageJSON) bool { return u.read(r) })
		default:
			return jsonr.Slice(r, &c.Choices, func(ch *chatChunkChoice) bool {
				return r.Object(chatChunkChoiceNames, func(k int) bool {
					if k == 0 {
						return r.Str(&ch.FinishReason)
					}
					return ch.Delta.read(r, func(tc *chatToolCallDelta) bool {
						return r.Object(chatCallDeltaNames, func(k int) bool {
							switch k {
							case 0:
								return r.Int64(&tc.Index)
							case 1:
								return r.Str(&tc.ID)
							default:
								return tc.Function.read(r)
							}
						})
					})
				})
			})
		}
	})
}

func (e *messagesEvent) reset() { *e = messagesEvent{} }

func (e *messagesEvent) read(r *jsonr.Reader) bool {
	return r.Object(messagesEventNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&e.Type)
		case 1:
			return r.Int64(&e.Index)
		case 2:
			m := &e.Message
			return r.Object(messagesStartNames, func(k int) bool {
				switch k {
				case 0:
					return r.Str(&m.ID)
				case 1:
					return r.Str(&m.Model)
				default:
					return m.Usage.read(r)
				}
			})
		case 3:
			return e.ContentBlock.read(r)
		case 4:
			d := &e.Delta
			return r.Object(messagesDeltaNames, func(k int) bool {
				switch k {
				case 0:
					return r.Str(&d.Type)
				case 1:
					return r.Str(&d.Text)
				case 2:
					return r.Str(&d.PartialJSON)
				case 3:
					return r.Str(&d.StopReason)
				default:
					return d.Container.read(r)
				}
			})
		default:
			return jsonr.Ptr(r, &e.Usage, func(u *messagesUsageJSON) bool { return u.read(r) })
		}
	})
}

var (
	geminiAnswerNames    = []string{"responseId", "modelVersion", "candidates", "promptFeedback", "usageMetadata"}
	geminiCandidateNames = []string{"finishReason", "content"}
	geminiContentNames   = []string{"parts"}
	geminiPartNames      = []string{"thought", "text", "functionCall", "executableCode", "codeExecutionResult"}
	geminiCodeNames      = []string{"language", "code"}
	geminiResultNames    = []string{"outcome", "output"}
	geminiCallNames      = []string{"id", "args", "name"}
	blockReasonNames     = []string{"blockReason"}
	geminiUsageNames     = []string{"cachedContentTokenCount", "candidatesTokenCount", "promptTokenCount", "thoughtsTokenCount"}
)

func (a *geminiAnswer) reset() { *a = geminiAnswer{} }

func (a *geminiAnswer) read(r *jsonr.Reader) bool {
	return r.Object(geminiAnswerNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&a.ResponseID)
		case 1:
			return r.Str(&a.ModelVersion)
		case 2:
			return jsonr.Slice(r, &a.Candidates, func(c *geminiCandidate) bool { return c.read(r) })
		case 3:
			return jsonr.Ptr(r, &a.PromptFeedback, func(pf *geminiPromptFeedback) bool {
				return r.Strs(blockReasonNames, (*string)(&pf.BlockReason))
			})
		default:
			return jsonr.Ptr(r, &a.UsageMetadata, func(u *geminiUsage) bool {
				return r.Object(geminiUsageNames, func(k int) bool {
					switch k {
					case 0:
						return r.Int32(&u.CachedContentTokenCount)
					case 1:
						return r.Int32(&u.CandidatesTokenCount)
					case 2:
						return r.Int32(&u.PromptTokenCount)
					default:
						return r.Int32(&u.ThoughtsTokenCount)
					}
				})
			})
		}
	})
}

func (c *geminiCandidate) read(r *jsonr.Reader) bool {
	return r.Object(geminiCandidateNames, func(k int) bool {
		if k == 0 {
			return r.Str((*string)(&c.FinishReason))
		}
		return jsonr.Ptr(r, &c.Content, func(ct *geminiContent) bool {
			return r.Object(geminiContentNames, func(int) bool {
				return jsonr.Slice(r, &ct.Parts, func(p *geminiAnswerPart) bool { return p.read(r) })
			})
		})
	})
}

func (p *geminiAnswerPart) read(r *jsonr.Reader) bool {
	return r.Object(geminiPartNames, func(k int) bool {
		switch k {
		case 0:
			return r.Bool(&p.Thought)
		case 1:
			return r.Str(&p.Text)
		case 3:
			return jsonr.Ptr(r, &p.ExecutableCode, func(c *geminiCode) bool { return r.Strs(geminiCodeNames, &c.Language, &c.Code) })
		case 4:
			return jsonr.Ptr(r, &p.CodeExecutionResult, func(c *geminiCodeResult) bool { return r.Strs(geminiResultNames, &c.Outcome, &c.Output) })
		default:
			return jsonr.Ptr(r, &p.FunctionCall, func(fc *geminiCall) bool {
				return r.Object(geminiCallNames, func(k int) bool {
					switch k {
					case 0:
						return r.Str(&fc.ID)
					case 1:
						if r.Null() {
							fc.Args = nil
							return true
						}
						fc.Args = map[string]any{}
						return r.Map(fc.Args)
					default:
						return r.Str(&fc.Name)
					}
				})
			})
		}
	})
}
