package scripted

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gemini"
)

// geminiStatus is the status word of an HTTP status in Google's envelope.
var geminiStatus = gemini.StatusWord

// Gemini API (POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent?alt=sse, SSE data lines of whole
// GenerateContentResponse chunks).

type geminiPart struct {
	Text         *string `json:"text"`
	FunctionCall *struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
	FunctionResponse *struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
	InlineData *struct {
		MIMEType string `json:"mimeType"`
		Data     string `json:"data"`
	} `json:"inlineData"`
	FileData *struct {
		FileURI string `json:"fileUri"`
	} `json:"fileData"`
}

type geminiRequest struct {
	Contents []struct {
		Role  string       `json:"role"`
		Parts []geminiPart `json:"parts"`
	} `json:"contents"`
	SystemInstruction *struct {
		Parts []geminiPart `json:"parts"`
	} `json:"systemInstruction"`
	Tools []struct {
		CodeExecution        *struct{} `json:"codeExecution"`
		FunctionDeclarations []struct {
			Name                 string          `json:"name"`
			Parameters           json.RawMessage `json:"parameters"`
			ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	ToolConfig *struct {
		FunctionCallingConfig *struct {
			Mode                 string   `json:"mode"`
			AllowedFunctionNames []string `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
	} `json:"toolConfig"`
}

func gbad(format string, a ...any) *apiError {
	return &apiError{status: 400, typ: "INVALID_ARGUMENT", msg: fmt.Sprintf(format, a...)}
}

// parseGemini reads a request whose URL path ended in rest
// ("MODEL:generateContent" or "MODEL:streamGenerateContent").
func parseGemini(raw []byte, rest string) (*conversation, error) {
	model, method, ok := strings.Cut(rest, ":")
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		model, method, ok = rest[:i], rest[i+1:], true
	}
	if !ok || model == "" || (method != "generateContent" && method != "streamGenerateContent") {
		return nil, &apiError{status: 404, typ: "NOT_FOUND", msg: fmt.Sprintf("unknown method %q", rest)}
	}
	var req geminiRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, gbad("Invalid JSON payload received. %v", err)
	}
	if len(req.Contents) == 0 {
		return nil, gbad("* GenerateContentRequest.contents: contents is not specified")
	}
	c := &conversation{Model: model, Stream: method == "streamGenerateContent"}
	names := map[string]bool{}
	for i, t := range req.Tools {
		if t.CodeExecution != nil && !contains(c.Hosted, "code_execution") {
			c.Hosted = append(c.Hosted, "code_execution")
		}
		for j, d := range t.FunctionDeclarations {
			if !toolName.MatchString(d.Name) {
				return nil, gbad("* GenerateContentRequest.tools[%d].function_declarations[%d].name: Invalid function name.", i, j)
			}
			if len(d.Parameters) > 0 && len(d.ParametersJSONSchema) > 0 {
				return nil, gbad("* GenerateContentRequest.tools[%d].function_declarations[%d]: parameters and parameters_json_schema are mutually exclusive", i, j)
			}
			names[d.Name] = true
			c.Tools = append(c.Tools, d.Name)
		}
	}
	if tc := req.ToolConfig; tc != nil && tc.FunctionCallingConfig != nil {
		switch tc.FunctionCallingConfig.Mode {
		case "", "AUTO", "ANY", "NONE", "VALIDATED":
		default:
			return nil, gbad("Invalid value at 'tool_config.function_calling_config.mode' (%s)", tc.FunctionCallingConfig.Mode)
		}
		for _, n := range tc.FunctionCallingConfig.AllowedFunctionNames {
			if !names[n] {
				return nil, gbad("* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: %s is not a declared function", n)
			}
		}
	}
	var pending []string // the names of the previous model content's calls
	for i, m := range req.Contents {
		if m.Role != "user" && m.Role != "model" {
			return nil, gbad("* GenerateContentRequest.contents[%d].role: Please use a valid role: user, model.", i)
		}
		if len(m.Parts) == 0 {
			return nil, gbad("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.", i)
		}
		switch m.Role {
		case "model":
			c.AssistantTurns++
			pending = nil
			for _, p := range m.Parts {
				if p.FunctionCall != nil {
					pending = append(pending, p.FunctionCall.Name)
				}
			}
		case "user":
			var answered int
			for j, p := range m.Parts {
				switch {
				case p.FunctionResponse != nil:
					fr := p.FunctionResponse
					if !contains(pending, fr.Name) {
						return nil, gbad("* GenerateContentRequest.contents[%d].parts[%d].function_response.name: %q answers no function call of the previous turn", i, j, fr.Name)
					}
					answered++
					var resp map[string]any
					if json.Unmarshal(fr.Response, &resp) != nil {
						return nil, gbad("* GenerateContentRequest.contents[%d].parts[%d].function_response.response: must be an object", i, j)
					}
					out, _ := resp["output"].(string)
					if e, ok := resp["error"].(string); ok {
						out = e
					}
					c.ToolResults = append(c.ToolResults, out)
				case p.Text != nil:
					c.LastUserText = *p.Text
				}
			}
			if len(pending) > 0 && answered != len(pending) {
				return nil, gbad("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
			}
			pending = nil
		}
	}
	return c, nil
}

// geminiFinish is the answer's stop reason in Gemini's words (the
// script's stop is in the gateway's).
func geminiFinish(a *answer) string {
	return string(gemini.FinishReason(gateway.StopReason(a.turn.stop())))
}

func geminiUsage(u Usage) map[string]any {
	return map[string]any{"promptTokenCount": u.InputTokens, "candidatesTokenCount": u.OutputTokens - u.ReasoningTokens,
		"cachedContentTokenCount": u.CacheReadTokens, "thoughtsTokenCount": u.ReasoningTokens, "totalTokenCount": u.InputTokens + u.OutputTokens}
}

// geminiCallParts are the answer's calls as functionCall parts (args an
// object: arguments that are not one are sent as {"_raw": text}).
func geminiCallParts(a *answer) []any {
	var out []any
	for _, c := range a.calls {
		args := toolInput(c.args)
		if len(args) == 0 || args[0] != '{' {
			args, _ = json.Marshal(map[string]string{"_raw": c.args})
		}
		fc := map[string]any{"name": c.name, "args": args}
		if c.id != "" {
			fc["id"] = c.id
		}
		out = append(out, map[string]any{"functionCall": fc})
	}
	return out
}

func geminiChunk(a *answer, parts []any, finish bool, responseID string) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
	v := map[string]any{"candidates": []any{cand}, "modelVersion": a.model, "responseId": responseID}
	if finish {
		cand["finishReason"] = geminiFinish(a)
		v["usageMetadata"] = geminiUsage(a.turn.Usage)
	}
	return v
}

// geminiHostedParts are the answer's runs of Gemini's code execution: an
// executableCode and a codeExecutionResult part each.
func geminiHostedParts(a *answer) []any {
	var out []any
	for _, h := range a.hosted {
		outcome, output := "OUTCOME_OK", h.Stdout+h.Stderr
		if h.Error != "" || h.ExitCode != 0 {
			outcome = "OUTCOME_FAILED"
		}
		out = append(out, map[string]any{"executableCode": map[string]any{"language": "PYTHON", "code": h.Code}},
			map[string]any{"codeExecutionResult": map[string]any{"outcome": outcome, "output": output}})
	}
	return out
}

func geminiObject(a *answer) map[string]any {
	parts := geminiHostedParts(a)
	if a.text != "" {
		parts = append(parts, map[string]any{"text": a.text})
	}
	parts = append(parts, geminiCallParts(a)...)
	if parts == nil {
		parts = []any{}
	}
	return geminiChunk(a, parts, true, newID(""))
}

func streamGemini(s *sse, a *answer) {
	id := newID("")
	if hosted := geminiHostedParts(a); len(hosted) > 0 {
		s.event("", geminiChunk(a, hosted, false, id))
	}
	pieces := chunks(a.text, 16)
	calls := geminiCallParts(a)
	for i, p := range pieces {
		last := i == len(pieces)-1 && len(calls) == 0
		s.event("", geminiChunk(a, []any{map[string]any{"text": p}}, last, id))
	}
	if len(calls) > 0 || len(pieces) == 0 {
		if calls == nil {
			calls = []any{}
		}
		s.event("", geminiChunk(a, calls, true, id))
	}
}
