package scripted

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"time"
)

// OpenAI Responses (POST /v1/responses).

type responsesRequest struct {
	Model        *string         `json:"model"`
	Input        json.RawMessage `json:"input"`
	Instructions *string         `json:"instructions"`
	Stream       bool            `json:"stream"`
	Tools        []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Parameters  json.RawMessage `json:"parameters"`
		Environment *struct {
			ContainerID string `json:"container_id"`
		} `json:"environment"`
		Container json.RawMessage `json:"container"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesContent is the text of a message's or an output's content (a
// string or a list of parts), after checking the part types.
func responsesContent(where string, raw json.RawMessage, output bool) (string, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type     string  `json:"type"`
		Text     string  `json:"text"`
		Refusal  string  `json:"refusal"`
		ImageURL *string `json:"image_url"`
		FileID   *string `json:"file_id"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest("Invalid type for '%s': expected a string or an array of content parts.", where)
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text":
			b.WriteString(p.Text)
		case "refusal":
			b.WriteString(p.Refusal)
		case "input_image":
			if (p.ImageURL == nil || *p.ImageURL == "") && (p.FileID == nil || *p.FileID == "") {
				return "", badRequest("Invalid '%s[%d]': input_image needs image_url or file_id.", where, j)
			}
		case "input_file":
		default:
			return "", badRequest("Invalid value: '%s'. Supported values are: 'input_text', 'input_image', 'input_file', 'output_text' and 'refusal'. ('%s[%d].type')", p.Type, where, j)
		}
	}
	return b.String(), nil
}

func parseResponses(raw []byte) (*conversation, error) {
	var req responsesRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, badRequest("We could not parse the JSON body of your request: %v", err)
	}
	if req.Model == nil || *req.Model == "" {
		return nil, &apiError{status: 400, typ: "invalid_request_error", param: "model", msg: "Missing required parameter: 'model'."}
	}
	c := &conversation{Model: *req.Model, Stream: req.Stream}
	names := map[string]bool{}
	for i, t := range req.Tools {
		if t.Type == "function" {
			if !functionName.MatchString(t.Name) {
				return nil, badRequest("Invalid 'tools[%d].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
			}
			if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && p[0] != '{' && string(p) != "null" {
				return nil, badRequest("Invalid type for 'tools[%d].parameters': expected an object.", i)
			}
			names[t.Name] = true
		}
		if t.Type == "" {
			return nil, badRequest("Missing required parameter: 'tools[%d].type'.", i)
		}
		switch t.Type {
		case "shell":
			c.Hosted = append([]string{"shell"}, c.Hosted...) // the shell first
			if t.Environment != nil && t.Environment.ContainerID != "" {
				c.HostedContainer = t.Environment.ContainerID
			}
		case "code_interpreter":
			c.Hosted = append(c.Hosted, t.Type)
			var id string
			if json.Unmarshal(t.Container, &id) == nil && id != "" {
				c.HostedContainer = id
			}
		}
		c.Tools = append(c.Tools, t.Name)
	}
	if tc := bytes.TrimSpace(req.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		err := checkToolChoice(tc, func() error {
			var named struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if json.Unmarshal(tc, &named) != nil || named.Type == "" {
				return badRequest("Invalid 'tool_choice'.")
			}
			if named.Type == "function" && !names[named.Name] {
				return badRequest("Tool choice 'function' not found in 'tools' parameter.")
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	in := bytes.TrimSpace(req.Input)
	if len(in) == 0 || string(in) == "null" {
		return nil, &apiError{status: 400, typ: "invalid_request_error", param: "input", msg: "Missing required parameter: 'input'."}
	}
	var s string
	if json.Unmarshal(in, &s) == nil {
		c.LastUserText = s
		return c, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(in, &items); err != nil {
		return nil, &apiError{status: 400, typ: "invalid_request_error", param: "input", msg: "Invalid type for 'input': expected a string or an array of input items."}
	}
	calls := map[string]bool{}    // call ids seen
	answered := map[string]bool{} // call ids with an output
	var order []string
	inAssistant := false
	for i, it := range items {
		where := "input[" + itoa(i) + "]"
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		assistantSide := false
		switch typ {
		case "message":
			text, err := responsesContent(where+".content", it.Content, false)
			if err != nil {
				return nil, err
			}
			switch it.Role {
			case "user":
				c.LastUserText = text
			case "assistant":
				assistantSide = true
			case "system", "developer":
			default:
				return nil, badRequest("Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'. ('%s.role')", it.Role, where)
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, badRequest("Missing required parameter: '%s.call_id' / '%s.name'.", where, where)
			}
			if a := bytes.TrimSpace(it.Arguments); len(a) == 0 || a[0] != '"' {
				return nil, badRequest("Invalid type for '%s.arguments': expected a string.", where)
			}
			assistantSide = true
			calls[it.CallID] = true
			order = append(order, it.CallID)
		case "function_call_output":
			if !calls[it.CallID] {
				return nil, &apiError{status: 400, typ: "invalid_request_error", param: "input", msg: "No tool call found for function call output with call_id " + it.CallID + "."}
			}
			text, err := responsesContent(where+".output", it.Output, true)
			if err != nil {
				return nil, err
			}
			answered[it.CallID] = true
			c.ToolResults = append(c.ToolResults, text)
		case "reasoning":
			assistantSide = true
		default:
			// Other item kinds (hosted tool calls and their outputs) are
			// accepted as they are; calls count as the assistant's.
			assistantSide = strings.HasSuffix(typ, "_call")
			if strings.HasSuffix(typ, "_call_output") {
				c.ToolResults = append(c.ToolResults, string(it.Output))
			}
		}
		if assistantSide && !inAssistant {
			c.AssistantTurns++
		}
		inAssistant = assistantSide
	}
	for _, id := range order {
		if !answered[id] {
			return nil, &apiError{status: 400, typ: "invalid_request_error", param: "input", msg: "No tool output found for function call " + id + "."}
		}
	}
	return c, nil
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func responsesUsage(u Usage) map[string]any {
	return map[string]any{
		"input_tokens":          u.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CacheReadTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
		"total_tokens":          u.InputTokens + u.OutputTokens,
	}
}

// responsesItems are the output items of the answer, completed, with
// their ids chosen once (the stream and the final object agree).
func responsesItems(a *answer) []map[string]any {
	var out []map[string]any
	for _, h := range a.hosted {
		if a.hostedTool == "code_interpreter" {
			status, outputs := "completed", []any{map[string]any{"type": "logs", "logs": h.Stdout + h.Stderr}}
			if h.Error != "" {
				status, outputs = "failed", []any{}
			}
			out = append(out, map[string]any{"id": newID("ci_"), "type": "code_interpreter_call", "status": status,
				"code": h.Code, "container_id": hostedContainer(a, "cntr_scripted"), "outputs": outputs})
			continue
		}
		out = append(out, map[string]any{"id": newID("sh_"), "type": "shell_call", "status": "completed", "call_id": h.ID,
			"action":      map[string]any{"commands": []any{h.Code}, "timeout_ms": nil, "max_output_length": nil},
			"environment": map[string]any{"type": "container_reference", "container_id": hostedContainer(a, "cntr_scripted")}},
			map[string]any{"id": newID("sho_"), "type": "shell_call_output", "status": "completed", "call_id": h.ID, "max_output_length": nil,
				"output": []any{shellOutput(h)}})
	}
	if a.text != "" {
		part := map[string]any{"type": "output_text", "text": a.text, "annotations": []any{}, "logprobs": []any{}}
		if a.turn.stop() == "refusal" {
			part = map[string]any{"type": "refusal", "refusal": a.text}
		}
		out = append(out, map[string]any{"id": newID("msg_"), "type": "message", "status": "completed", "role": "assistant",
			"content": []any{part}})
	}
	for _, c := range a.calls {
		id := c.id
		if id == "" {
			id = newID("call_")
		}
		out = append(out, map[string]any{"id": newID("fc_"), "type": "function_call", "status": "completed",
			"call_id": id, "name": c.name, "arguments": c.args})
	}
	return out
}

// hostedContainer is the container the answer's hosted runs ran in: the
// one the request named, else a new one, named fresh.
func hostedContainer(a *answer, fresh string) string {
	if a.conv.HostedContainer != "" {
		return a.conv.HostedContainer
	}
	return fresh
}

// shellOutput is h's run as a shell_call_output's output entry.
func shellOutput(h HostedRun) map[string]any {
	return map[string]any{"stdout": h.Stdout, "stderr": h.Stderr, "outcome": map[string]any{"type": "exit", "exit_code": h.ExitCode}}
}

func responseObject(a *answer, status string) map[string]any {
	return responseWith(a, newID("resp_"), time.Now().Unix(), responsesItems(a), status)
}

func responseWith(a *answer, id string, created int64, items []map[string]any, status string) map[string]any {
	var incomplete any
	if status == "completed" && a.turn.stop() == "max_tokens" {
		status = "incomplete"
	}
	if status == "incomplete" {
		incomplete = map[string]any{"reason": "max_output_tokens"}
	}
	output := make([]any, 0, len(items))
	for _, it := range items {
		output = append(output, it)
	}
	var usage any
	if status != "in_progress" {
		usage = responsesUsage(a.turn.Usage)
	}
	return map[string]any{
		"id": id, "object": "response", "created_at": created, "status": status, "background": false,
		"error": nil, "incomplete_details": incomplete, "instructions": nil, "max_output_tokens": nil,
		"model": a.model, "output": output, "parallel_tool_calls": true, "previous_response_id": nil,
		"reasoning": map[string]any{"effort": nil, "summary": nil}, "store": false, "temperature": 1.0,
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": "auto", "tools": []any{},
		"top_p": 1.0, "truncation": "disabled", "usage": usage, "user": nil, "metadata": map[string]any{},
	}
}

func streamResponses(s *sse, a *answer) {
	seq := 0
	ev := func(name string, v map[string]any) {
		v["type"] = name
		v["sequence_number"] = seq
		seq++
		s.event(name, v)
	}
	id, created := newID("resp_"), time.Now().Unix()
	items := responsesItems(a)
	ev("response.created", map[string]any{"response": responseWith(a, id, created, nil, "in_progress")})
	ev("response.in_progress", map[string]any{"response": responseWith(a, id, created, nil, "in_progress")})
	for i, it := range items {
		switch it["type"] {
		case "message":
			part := it["content"].([]any)[0].(map[string]any)
			ev("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"id": it["id"], "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
			if part["type"] == "refusal" {
				ev("response.content_part.added", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0,
					"part": map[string]any{"type": "refusal", "refusal": ""}})
				for _, p := range chunks(a.text, 16) {
					ev("response.refusal.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "delta": p})
				}
				ev("response.refusal.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "refusal": a.text})
			} else {
				ev("response.content_part.added", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0,
					"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}})
				for _, p := range chunks(a.text, 16) {
					ev("response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "delta": p, "logprobs": []any{}})
				}
				ev("response.output_text.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "text": a.text, "logprobs": []any{}})
			}
			ev("response.content_part.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "part": part})
		case "function_call":
			ev("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"id": it["id"], "type": "function_call", "status": "in_progress", "call_id": it["call_id"], "name": it["name"], "arguments": ""}})
			args := it["arguments"].(string)
			for _, p := range argChunks(args) {
				ev("response.function_call_arguments.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": p})
			}
			ev("response.function_call_arguments.done", map[string]any{"item_id": it["id"], "output_index": i, "arguments": args, "name": it["name"]})
		case "shell_call":
			added := maps.Clone(it)
			added["status"] = "in_progress"
			added["action"] = map[string]any{"commands": []any{}, "timeout_ms": nil, "max_output_length": nil}
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for j, c := range it["action"].(map[string]any)["commands"].([]any) {
				ev("response.shell_call_command.added", map[string]any{"output_index": i, "command_index": j, "command": ""})
				for _, p := range chunks(c.(string), 16) {
					ev("response.shell_call_command.delta", map[string]any{"output_index": i, "command_index": j, "delta": p})
				}
				ev("response.shell_call_command.done", map[string]any{"output_index": i, "command_index": j, "command": c})
			}
		case "shell_call_output":
			added := maps.Clone(it)
			added["output"] = []any{}
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for j, o := range it["output"].([]any) {
				o := o.(map[string]any)
				ev("response.shell_call_output_content.delta", map[string]any{"item_id": it["id"], "output_index": i, "command_index": j,
					"delta": map[string]any{"stdout": o["stdout"], "stderr": o["stderr"]}})
				ev("response.shell_call_output_content.done", map[string]any{"item_id": it["id"], "output_index": i, "command_index": j, "output": []any{o}})
			}
		case "code_interpreter_call":
			added := maps.Clone(it)
			added["status"], added["code"], added["outputs"] = "in_progress", "", nil
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			ev("response.code_interpreter_call.in_progress", map[string]any{"item_id": it["id"], "output_index": i})
			for _, p := range chunks(it["code"].(string), 16) {
				ev("response.code_interpreter_call_code.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": p})
			}
			ev("response.code_interpreter_call_code.done", map[string]any{"item_id": it["id"], "output_index": i, "code": it["code"]})
			ev("response.code_interpreter_call.interpreting", map[string]any{"item_id": it["id"], "output_index": i})
			ev("response.code_interpreter_call.completed", map[string]any{"item_id": it["id"], "output_index": i})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	final := responseWith(a, id, created, items, "completed")
	if final["status"] == "incomplete" {
		ev("response.incomplete", map[string]any{"response": final})
	} else {
		ev("response.completed", map[string]any{"response": final})
	}
}
