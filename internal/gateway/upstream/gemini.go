package upstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
)

// Gemini is a Gemini API upstream (POST {base}/models/{model}:generateContent,
// or :streamGenerateContent?alt=sse), the key in x-goog-api-key.
//
// Translation, with the genai SDK's types: the system prompt is
// systemInstruction; user text and images (inlineData; fileData for a URL)
// are a user content, assistant text and tool calls (functionCall with its
// id) a model content, tool results a user content of functionResponse
// parts named after their call ({"output": text}, or {"error": text} for an
// error result; images follow as inlineData parts). Gemini answers calls
// without ids on some models: the adapter then makes one (call_N). Function
// tools are functionDeclarations with parametersJsonSchema (the whole JSON
// Schema, not Gemini's OpenAPI subset); tool choice maps to
// toolConfig.functionCallingConfig (AUTO, ANY, NONE, ANY with one allowed
// name). finishReason MAX_TOKENS maps to max_tokens, SAFETY and the other
// blocking reasons to refusal, a turn with calls to tool_use, else end.
type Gemini struct {
	Endpoint
	hdr http.Header // the API key's header (keyHeader), read only
}

// NewGemini returns the adapter for e.
func NewGemini(e Endpoint) *Gemini {
	return &Gemini{Endpoint: e, hdr: keyHeader("x-goog-api-key", "", e.APIKey)}
}

// geminiRequest is the body of generateContent.
type geminiRequest struct {
	Contents          []*genai.Content        `json:"contents,omitempty"`
	SystemInstruction *genai.Content          `json:"systemInstruction,omitempty"`
	Tools             []*genai.Tool           `json:"tools,omitempty"`
	ToolConfig        *genai.ToolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *genai.GenerationConfig `json:"generationConfig,omitempty"`
}

// geminiBlob is an inline image, nil when img is by URL.
func geminiPart(img *gateway.Image) (*genai.Part, error) {
	if img.Data == "" {
		mt := img.MediaType
		if mt == "" {
			mt = "image/*"
		}
		if strings.HasPrefix(img.URL, "data:") {
			// data:image/png;base64,....
			meta, data, ok := strings.Cut(strings.TrimPrefix(img.URL, "data:"), ",")
			if ok && strings.HasSuffix(meta, ";base64") {
				return geminiInline(strings.TrimSuffix(meta, ";base64"), data)
			}
		}
		return &genai.Part{FileData: &genai.FileData{FileURI: img.URL, MIMEType: mt}}, nil
	}
	return geminiInline(img.MediaType, img.Data)
}

func geminiInline(mediaType, b64 string) (*genai.Part, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, gateway.BadRequest("image", "image data is not base64: %v", err)
	}
	return &genai.Part{InlineData: &genai.Blob{MIMEType: mediaType, Data: data}}, nil
}

// callName is the name of the call with id in msgs, the last one of that
// id ("" if none).
func callName(msgs []gateway.Message, id string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != gateway.RoleAssistant {
			continue
		}
		for _, part := range msgs[i].Parts {
			if part.Kind == gateway.PartToolCall && part.Call.ID == id {
				return part.Call.Name
			}
		}
	}
	return ""
}

// geminiParams translates req into a generateContent body, with the
// messages from from on; tail[i] is the first message that content i is
// made of.
func geminiParams(req *gateway.Request, from int) (*geminiRequest, []int, error) {
	p := &geminiRequest{}
	if req.System != "" {
		p.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: req.System}}}
	}
	var tail []int
	for mi, m := range req.Messages[from:] {
		mi += from
		c := &genai.Content{Role: genai.RoleUser}
		switch m.Role {
		case gateway.RoleUser:
			var images []*genai.Part
			for _, part := range m.Parts {
				switch part.Kind {
				case gateway.PartToolResult:
					r := part.Result
					resp := map[string]any{"output": r.Content}
					if r.IsError {
						resp = map[string]any{"error": r.Content}
					}
					c.Parts = append(c.Parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: r.CallID, Name: callName(req.Messages[:mi], r.CallID), Response: resp}})
					for i := range r.Images {
						ip, err := geminiPart(&r.Images[i])
						if err != nil {
							return nil, nil, err
						}
						images = append(images, ip)
					}
				case gateway.PartText:
					if part.Text != "" {
						c.Parts = append(c.Parts, &genai.Part{Text: part.Text})
					}
				case gateway.PartImage:
					ip, err := geminiPart(part.Image)
					if err != nil {
						return nil, nil, err
					}
					c.Parts = append(c.Parts, ip)
				}
			}
			c.Parts = append(c.Parts, images...)
		case gateway.RoleAssistant:
			c.Role = genai.RoleModel
			for _, part := range m.Parts {
				switch part.Kind {
				case gateway.PartText:
					if part.Text != "" {
						c.Parts = append(c.Parts, &genai.Part{Text: part.Text})
					}
				case gateway.PartToolCall:
					args, err := argsObject(part.Call.Arguments)
					if err != nil {
						// Gemini's calls carry an object: arguments that
						// were not one go back as the text the model wrote.
						args = map[string]any{"_raw_arguments": part.Call.Arguments}
					}
					c.Parts = append(c.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: part.Call.ID, Name: part.Call.Name, Args: args}})
				}
			}
		default:
			return nil, nil, gateway.BadRequest("messages", "unknown role %q", m.Role)
		}
		if len(c.Parts) == 0 {
			continue
		}
		if n := len(p.Contents); n > 0 && p.Contents[n-1].Role == c.Role {
			p.Contents[n-1].Parts = append(p.Contents[n-1].Parts, c.Parts...)
			continue
		}
		p.Contents = append(p.Contents, c)
		tail = append(tail, mi)
	}
	if len(req.Tools) > 0 {
		t := &genai.Tool{}
		for _, tool := range toolsToEncode(req, gateway.APIGemini) {
			if tool.Native == gateway.NativeCodeExecution {
				p.Tools = append(p.Tools, &genai.Tool{CodeExecution: &genai.ToolCodeExecution{}})
				continue
			}
			s, err := schema(tool.Parameters)
			if err != nil {
				return nil, nil, gateway.BadRequest("tools", "tool %s: %v", tool.Name, err)
			}
			t.FunctionDeclarations = append(t.FunctionDeclarations, &genai.FunctionDeclaration{Name: tool.Name, Description: tool.Description, ParametersJsonSchema: s})
		}
		if len(t.FunctionDeclarations) > 0 {
			p.Tools = append(p.Tools, t)
		}
		var fc *genai.FunctionCallingConfig
		switch req.ToolChoice.Mode {
		case gateway.ChoiceNone:
			fc = &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeNone}
		case gateway.ChoiceRequired:
			fc = &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAny}
		case gateway.ChoiceTool:
			// Gemini's code execution cannot be forced: the choice of it is
			// left to the model.
			if nativeChoice(req) == "" {
				fc = &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAny, AllowedFunctionNames: []string{req.ToolChoice.Name}}
			}
		}
		functions := slices.ContainsFunc(req.Tools, func(t gateway.Tool) bool { return t.Native == "" })
		if fc != nil && (functions || fc.Mode == genai.FunctionCallingConfigModeNone) {
			// (ANY with no function to call, only the code execution, is
			// not a choice Gemini takes.)
			p.ToolConfig = &genai.ToolConfig{FunctionCallingConfig: fc}
		}
	}
	g := &genai.GenerationConfig{StopSequences: req.Stop}
	if req.MaxTokens > 0 {
		g.MaxOutputTokens = int32(min(req.MaxTokens, 1<<31-1))
	}
	if req.Temperature != nil {
		t := float32(*req.Temperature)
		g.Temperature = &t
	}
	if req.TopP != nil {
		t := float32(*req.TopP)
		g.TopP = &t
	}
	if g.MaxOutputTokens > 0 || g.Temperature != nil || g.TopP != nil || len(g.StopSequences) > 0 {
		p.GenerationConfig = g
	}
	return p, tail, nil
}

// geminiBody is the request body of req (streaming is in the URL, not
// the body).
func geminiBody(req *gateway.Request, stream bool) ([]byte, error) {
	// Streaming is in the URL, not in the body (Top).
	if body, ok := directTurn(req, gateway.APIGemini, false, "contents", true, geminiResults); ok {
		return body, nil
	}
	p, from, tail, err := mergedParams(req, gateway.APIGemini, geminiParams)
	if err != nil {
		return nil, err
	}
	return encodeBody(req, gateway.APIGemini, false, p, "contents", &p.Contents, &p.Tools, from, tail, leanGeminiContent)
}

// geminiTurn is the text and calls of answers (one, or a stream's chunks
// in order) as a Turn; onDelta, when set, gets each piece as it is read.
type geminiTurn struct {
	t        gateway.Turn
	text     int // index of the open text part, -1 when none
	calls    int
	finish   genai.FinishReason
	onDelta  func(gateway.Delta)
	texts    []*strings.Builder
	gotFirst bool
	// code is the provider's code run that waits for its result; codes
	// counts them.
	code  *gateway.HostedCall
	codes int
}

func newGeminiTurn(onDelta func(gateway.Delta)) *geminiTurn {
	return &geminiTurn{text: -1, onDelta: onDelta}
}

// geminiAnswer is a generateContent answer (or a streamed chunk): the
// fields geminiTurn reads, under genai.GenerateContentResponse's JSON
// names and types, decoded with encoding/json (see answers.go). The SDK's
// type decodes every field of every candidate and part (safety ratings,
// thought signatures, times) and, through its UnmarshalJSON, validates
// the whole answer twice. Elements are values, not pointers: a null
// candidate or part reads as an empty one.
type geminiAnswer struct {
	ResponseID     string                `json:"responseId"`
	ModelVersion   string                `json:"modelVersion"`
	Candidates     []geminiCandidate     `json:"candidates"`
	PromptFeedback *geminiPromptFeedback `json:"promptFeedback"`
	UsageMetadata  *geminiUsage          `json:"usageMetadata"`
}

type geminiPromptFeedback struct {
	BlockReason genai.BlockedReason `json:"blockReason"`
}

type geminiUsage struct {
	CachedContentTokenCount int32 `json:"cachedContentTokenCount"`
	CandidatesTokenCount    int32 `json:"candidatesTokenCount"`
	PromptTokenCount        int32 `json:"promptTokenCount"`
	ThoughtsTokenCount      int32 `json:"thoughtsTokenCount"`
}

type geminiCandidate struct {
	FinishReason genai.FinishReason `json:"finishReason"`
	Content      *geminiContent     `json:"content"`
}

type geminiContent struct {
	Parts []geminiAnswerPart `json:"parts"`
}

type geminiAnswerPart struct {
	Thought             bool              `json:"thought"`
	Text                string            `json:"text"`
	FunctionCall        *geminiCall       `json:"functionCall"`
	ExecutableCode      *geminiCode       `json:"executableCode"`
	CodeExecutionResult *geminiCodeResult `json:"codeExecutionResult"`
}

// geminiCode and geminiCodeResult are the parts of Gemini's own code
// execution (the codeExecution tool).
type geminiCode struct {
	Language string `json:"language"`
	Code     string `json:"code"`
}

type geminiCodeResult struct {
	Outcome string `json:"outcome"`
	Output  string `json:"output"`
}

type geminiCall struct {
	ID   string         `json:"id"`
	Args map[string]any `json:"args"`
	Name string         `json:"name"`
}

func (g *geminiTurn) add(r *geminiAnswer) error {
	if !g.gotFirst {
		g.gotFirst = true
		g.t.ID, g.t.Model = r.ResponseID, r.ModelVersion
	}
	if u := r.UsageMetadata; u != nil {
		g.t.Usage = gateway.Usage{
			InputTokens:     int64(u.PromptTokenCount),
			OutputTokens:    int64(u.CandidatesTokenCount + u.ThoughtsTokenCount),
			CacheReadTokens: int64(u.CachedContentTokenCount),
			ReasoningTokens: int64(u.ThoughtsTokenCount),
		}
	}
	if len(r.Candidates) == 0 {
		if pf := r.PromptFeedback; pf != nil && pf.BlockReason != "" {
			g.finish = genai.FinishReasonSafety
		}
		return nil
	}
	c := r.Candidates[0]
	if c.FinishReason != "" {
		g.finish = c.FinishReason
	}
	if c.Content == nil {
		return nil
	}
	for i := range c.Content.Parts {
		p := &c.Content.Parts[i]
		switch {
		case p.Thought:
			// Thought summaries are not the answer.
		case p.FunctionCall != nil:
			g.text = -1
			fc := p.FunctionCall
			id := fc.ID
			if id == "" {
				id = fmt.Sprintf("call_%d", g.calls)
			}
			g.calls++
			args, err := marshalArgs(fc.Args)
			if err != nil || fc.Args == nil {
				args = []byte("{}")
			}
			call := &gateway.ToolCall{ID: id, Name: fc.Name, Arguments: string(args)}
			i := len(g.t.Parts)
			g.t.Parts = append(g.t.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: call})
			g.texts = append(g.texts, nil)
			if g.onDelta != nil {
				g.onDelta(gateway.Delta{Kind: gateway.DeltaCallStart, Index: i, Call: &gateway.ToolCall{ID: id, Name: fc.Name}})
				g.onDelta(gateway.Delta{Kind: gateway.DeltaCallArgs, Index: i, Text: call.Arguments})
			}
		case p.ExecutableCode != nil:
			g.text = -1
			g.code = &gateway.HostedCall{ID: fmt.Sprintf("code_%d", g.codes), Tool: gateway.NativeCodeExecution, Kind: gateway.HostedPython,
				Code: []string{p.ExecutableCode.Code}}
			g.codes++
			i := len(g.t.Parts)
			g.t.Parts = append(g.t.Parts, gateway.Part{Kind: gateway.PartHosted, Hosted: g.code})
			g.texts = append(g.texts, nil)
			if g.onDelta != nil {
				g.onDelta(gateway.Delta{Kind: gateway.DeltaHosted, Index: i})
			}
		case p.CodeExecutionResult != nil:
			g.text = -1
			if g.code != nil {
				g.code.Outputs = []tool.CommandOutput{geminiOutput(p.CodeExecutionResult)}
				g.code = nil
			}
		case p.Text != "":
			if g.text < 0 {
				g.text = len(g.t.Parts)
				g.t.Parts = append(g.t.Parts, gateway.Part{Kind: gateway.PartText})
				g.texts = append(g.texts, &strings.Builder{})
			}
			g.texts[g.text].WriteString(p.Text)
			if g.onDelta != nil {
				g.onDelta(gateway.Delta{Kind: gateway.DeltaText, Index: g.text, Text: p.Text})
			}
		}
	}
	return nil
}

// geminiOutput is a codeExecutionResult as a command's output: the
// output is stdout, or stderr when the code failed.
func geminiOutput(r *geminiCodeResult) tool.CommandOutput {
	switch r.Outcome {
	case string(genai.OutcomeOK):
		return tool.CommandOutput{Stdout: r.Output, Outcome: tool.Outcome{Type: "exit", ExitCode: new(int)}}
	case string(genai.OutcomeDeadlineExceeded):
		return tool.CommandOutput{Stderr: r.Output, Outcome: tool.Outcome{Type: "timeout"}}
	default:
		one := 1
		return tool.CommandOutput{Stderr: r.Output, Outcome: tool.Outcome{Type: "exit", ExitCode: &one}}
	}
}

func (g *geminiTurn) done() *gateway.Turn {
	for i := range g.t.Parts {
		if g.t.Parts[i].Kind == gateway.PartText {
			g.t.Parts[i].Text = g.texts[i].String()
		}
	}
	switch g.finish {
	case genai.FinishReasonMaxTokens:
		g.t.Stop = gateway.StopMaxTokens
	case "", genai.FinishReasonStop, genai.FinishReasonUnspecified:
		g.t.Stop = gateway.StopEnd
		if g.calls > 0 {
			g.t.Stop = gateway.StopToolUse
		}
	default: // SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, ...
		g.t.Stop = gateway.StopRefusal
		if g.calls > 0 && g.finish == genai.FinishReasonMalformedFunctionCall {
			g.t.Stop = gateway.StopToolUse
		}
	}
	return &g.t
}

// geminiPath is the path of a call to model, streamed or not.
func geminiPath(model string, stream bool) string {
	if stream {
		return "/models/" + url.PathEscape(model) + ":streamGenerateContent?alt=sse"
	}
	return "/models/" + url.PathEscape(model) + ":generateContent"
}

// Turn implements gateway.Upstream.
func (c *Gemini) Turn(ctx context.Context, req *gateway.Request, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	return turn(ctx, &c.Endpoint, req, onDelta, geminiBody, geminiPath(req.Model, onDelta != nil), c.hdr, geminiWhole, geminiStream)
}

// geminiWhole is a non-streamed answer as a Turn.
func geminiWhole(r *geminiAnswer) (*gateway.Turn, error) {
	g := newGeminiTurn(nil)
	if err := g.add(r); err != nil {
		return nil, err
	}
	return g.done(), nil
}

// geminiStream reads a streamed answer, its chunks in order, calling
// onDelta as parts arrive.
func geminiStream(ctx context.Context, call *call, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	g := newGeminiTurn(onDelta)
	sr := newSSEReader(call)
	for {
		ev, err := sr.next(ctx)
		if err == io.EOF {
			if !g.gotFirst {
				return nil, truncated("a chunk")
			}
			return g.done(), nil
		}
		if err != nil {
			return nil, err
		}
		if ue := streamError(ev.data); ue != nil {
			return nil, ue
		}
		var r geminiAnswer
		if err := unmarshal(ev.data, &r); err != nil {
			return nil, badAnswer(err)
		}
		if err := g.add(&r); err != nil {
			return nil, err
		}
	}
}

// argsObject is a call's arguments as the object Gemini's calls carry,
// as unmarshal decodes them into a map.
func argsObject(raw string) (map[string]any, error) {
	var args map[string]any
	err := unmarshal([]byte(raw), &args)
	return args, err
}

// marshalArgs is json.Marshal of a call's arguments.
func marshalArgs(args map[string]any) ([]byte, error) { return json.Marshal(args) }
