package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
)

// conversation is the input translated for the upstream.
type conversation struct {
	messages []gateway.Message
	system   string // system and developer messages, in order
	// containerIDs of the replayed shell calls, oldest first (identity).
	containerIDs []string
	// resume is the program the input leaves waiting for the outputs of
	// its function calls (programmatic tool calling), nil when none.
	resume *gateway.Resume
}

// inputItem is any input item, as far as Shellgate reads it: the union of
// the fields of messages, function calls and outputs, and the shell items
// of every shape. Which fields matter depends on Type.
type inputItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Status  string          `json:"status"`

	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"` // string (function_call, router item)
	Output    json.RawMessage `json:"output"`    // string or parts (function_call_output), []CommandOutput (shell), string (local shell)

	Action      json.RawMessage `json:"action"`
	Environment *environment    `json:"environment"`
	ContainerID string          `json:"container_id"`
	Error       json.RawMessage `json:"error"`

	Code        *string         `json:"code"`        // code_interpreter_call, program
	Fingerprint string          `json:"fingerprint"` // program
	Result      json.RawMessage `json:"result"`      // program_output
	Caller      *callerField    `json:"caller"`      // function_call
	Outputs     json.RawMessage `json:"outputs"`     // code_interpreter_call: null or [logs | image]
}

// shellAction is a shell_call's action (and the router item's).
type shellAction struct {
	Commands        []string `json:"commands"`
	TimeoutMs       *int64   `json:"timeout_ms"`
	MaxOutputLength *int64   `json:"max_output_length"`
}

// localAction is a local_shell_call's action.
type localAction struct {
	Command   []string `json:"command"`
	TimeoutMs *int64   `json:"timeout_ms"`
}

// callFamily groups a call item type with the output type that answers it.
type callFamily int

const (
	famFunction callFamily = iota + 1
	famShell
	famLocalShell
	famInterp
	famProgram
)

func (f callFamily) callName() string {
	return [...]string{famFunction: "function call", famShell: "shell call", famLocalShell: "local shell call", famInterp: "code interpreter call", famProgram: "program"}[f]
}

// entry is one input item, normalized.
type entry struct {
	role   gateway.Role // of the message it joins
	part   gateway.Part
	system string // a system/developer message's text (no part)

	call   callFamily // the part is a call of this family
	output callFamily // the part is an output of this family
	callID string
}

// parseInput turns input (a string, or a list of items) into the
// conversation. Replayed shell items become an assistant tool call of the
// shell function and its result, so the upstream reads them like a live
// step; nothing runs again. Every output must answer an earlier call and
// every call must have its output (OpenAI's 400s otherwise).
func parseInput(raw json.RawMessage) (*conversation, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid("input", "Missing required parameter: 'input'.")
	}
	c := &conversation{}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, jsonError("input", err)
		}
		c.messages = []gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: s}}}}
		return c, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("input", "Invalid type for 'input': expected a string or an array of input items.")
	}
	if len(items) > maxInputItems {
		return nil, invalid("input", "Invalid 'input': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", maxInputItems, len(items))
	}
	var entries []entry
	envs := map[string]string{} // shell_call call_id → its container
	var progs programReplay
	for i, rawItem := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it inputItem
		if err := json.Unmarshal(rawItem, &it); err != nil {
			return nil, jsonError(param, err)
		}
		if handled, es, err := progs.item(&it, param); handled || err != nil {
			if err != nil {
				return nil, err
			}
			entries = append(entries, es...)
			continue
		}
		es, ids, err := itemEntries(&it, param, envs)
		if err != nil {
			return nil, err
		}
		entries = append(entries, es...)
		c.containerIDs = append(c.containerIDs, ids...)
	}
	if err := checkPairs(entries); err != nil {
		return nil, err
	}
	rs, err := progs.resume()
	if err != nil {
		return nil, err
	}
	c.resume = rs
	var system []string
	for _, e := range entries {
		if e.role == "" {
			system = append(system, e.system)
			continue
		}
		n := len(c.messages)
		if n > 0 && c.messages[n-1].Role == e.role {
			c.messages[n-1].Parts = append(c.messages[n-1].Parts, e.part)
		} else {
			c.messages = append(c.messages, gateway.Message{Role: e.role, Parts: []gateway.Part{e.part}})
		}
	}
	c.system = strings.Join(system, "\n\n")
	if rs != nil {
		if err := checkResume(c.messages, rs); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkPairs enforces OpenAI's rules for replayed calls, with its messages.
func checkPairs(entries []entry) error {
	calls := map[string]callFamily{}
	answered := map[string]bool{}
	for _, e := range entries {
		switch {
		case e.call != 0:
			calls[e.callID] = e.call
		case e.output != 0:
			if f, ok := calls[e.callID]; !ok || f != e.output {
				return invalid("input", "No tool call found for %s output with call_id %s.", e.output.callName(), e.callID)
			}
			answered[e.callID] = true
		}
	}
	for _, e := range entries {
		// A program without its program_output waits for its calls'
		// outputs (programReplay.resume checks it).
		if e.call != 0 && e.call != famProgram && !answered[e.callID] {
			return invalid("input", "No tool output found for %s %s.", e.call.callName(), e.callID)
		}
	}
	return nil
}

func itemEntries(it *inputItem, param string, envs map[string]string) ([]entry, []string, error) {
	typ := it.Type
	if typ == "" && it.Role != "" {
		typ = "message"
	}
	switch typ {
	case "message":
		return messageEntries(it, param)
	case "function_call":
		if err := need(param, "call_id", it.CallID); err != nil {
			return nil, nil, err
		}
		if err := need(param, "name", it.Name); err != nil {
			return nil, nil, err
		}
		args, err := stringField(it.Arguments, param+".arguments")
		if err != nil {
			return nil, nil, err
		}
		return []entry{callEntry(famFunction, it.CallID, it.Name, args)}, nil, nil
	case "function_call_output":
		if err := need(param, "call_id", it.CallID); err != nil {
			return nil, nil, err
		}
		res, err := functionOutput(it.Output, param+".output")
		if err != nil {
			return nil, nil, err
		}
		res.CallID = it.CallID
		return []entry{outputEntry(famFunction, res)}, nil, nil
	case "shell_call":
		a, err := callAction[shellAction](it, param)
		if err != nil {
			return nil, nil, err
		}
		var ids []string
		if env := it.Environment; env != nil && env.Type == "container_reference" && env.ContainerID != "" {
			ids = append(ids, env.ContainerID)
			envs[it.CallID] = env.ContainerID
		}
		return []entry{callEntry(famShell, it.CallID, shellFunction, shellArgs(a))}, ids, nil
	case "shell_call_output":
		if err := need(param, "call_id", it.CallID); err != nil {
			return nil, nil, err
		}
		var outs []tool.CommandOutput
		if err := unmarshalField(it.Output, &outs, param+".output"); err != nil {
			return nil, nil, err
		}
		return []entry{outputEntry(famShell, shellOutputResult(it.CallID, it.Status, envs[it.CallID], outs))}, nil, nil
	case "local_shell_call":
		a, err := callAction[localAction](it, param)
		if err != nil {
			return nil, nil, err
		}
		return []entry{callEntry(famLocalShell, it.CallID, shellFunction, shellArgs(fromLocalAction(a)))}, nil, nil
	case "local_shell_call_output":
		// OpenAI names the call by id here; accept call_id too.
		id := it.CallID
		if id == "" {
			id = it.ID
		}
		if err := need(param, "id", id); err != nil {
			return nil, nil, err
		}
		out, err := stringField(it.Output, param+".output")
		if err != nil {
			return nil, nil, err
		}
		// Shellgate's own outputs are the JSON the model read, which names
		// the container.
		var ids []string
		var named struct {
			ContainerID string `json:"container_id"`
		}
		if json.Unmarshal([]byte(out), &named) == nil && named.ContainerID != "" {
			ids = append(ids, named.ContainerID)
		}
		return []entry{outputEntry(famLocalShell, &gateway.ToolResult{CallID: id, Content: out, IsError: it.Status == "incomplete"})}, ids, nil
	case "shellgate:shell", "openrouter:shell":
		return routerEntries(it, param)
	case "code_interpreter_call":
		return interpEntries(it, param)
	case "reasoning":
		// Reasoning of another model cannot be replayed to this one.
		return nil, nil, nil
	case "item_reference":
		return nil, nil, invalid(param+".type", "item_reference is not supported: Shellgate stores no items. Send the item itself.")
	case "":
		return nil, nil, invalid(param+".type", "Missing required parameter: '%s.type'.", param)
	}
	return nil, nil, invalid(param+".type", "Input item type %q is not supported by Shellgate.", clip(typ))
}

// callAction is the action of a call item (shell_call, local_shell_call),
// which must have a call_id.
func callAction[A any](it *inputItem, param string) (A, error) {
	var a A
	if err := need(param, "call_id", it.CallID); err != nil {
		return a, err
	}
	err := unmarshalField(it.Action, &a, param+".action")
	return a, err
}

func need(param, field, v string) error {
	if v == "" {
		return invalid(param+"."+field, "Missing required parameter: '%s.%s'.", param, field)
	}
	return nil
}

func unmarshalField(raw json.RawMessage, v any, param string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return invalid(param, "Missing required parameter: '%s'.", param)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return jsonError(param, err)
	}
	return nil
}

// stringField reads a JSON string (absent or null: "").
func stringField(raw json.RawMessage, param string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", invalid(param, "Invalid type for '%s': expected a string.", param)
	}
	return s, nil
}

func callEntry(f callFamily, id, name, args string) entry {
	return entry{role: gateway.RoleAssistant, call: f, callID: id,
		part: gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: id, Name: name, Arguments: args}}}
}

func outputEntry(f callFamily, res *gateway.ToolResult) entry {
	return entry{role: gateway.RoleUser, output: f, callID: res.CallID, part: gateway.Part{Kind: gateway.PartToolResult, Result: res}}
}

// shellArgs writes a replayed call's arguments as the model writes them.
func shellArgs(a shellAction) string {
	if a.Commands == nil {
		a.Commands = []string{}
	}
	b, _ := json.Marshal(tool.ShellArgs{Commands: a.Commands, TimeoutMs: a.TimeoutMs, MaxOutputLength: a.MaxOutputLength})
	return string(b)
}

// fromLocalAction reads a local_shell_call's argv back as the commands the
// model wrote: ["bash","-lc",X] is the command X (how Shellgate renders
// them); any other argv is shell-quoted into one command.
func fromLocalAction(a localAction) shellAction {
	s := shellAction{TimeoutMs: a.TimeoutMs}
	if len(a.Command) == 3 && a.Command[0] == "bash" && a.Command[1] == "-lc" {
		s.Commands = []string{a.Command[2]}
	} else if len(a.Command) > 0 {
		q := make([]string, len(a.Command))
		for i, w := range a.Command {
			q[i] = shellQuote(w)
		}
		s.Commands = []string{strings.Join(q, " ")}
	}
	return s
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellOutputResult is the tool result of a replayed shell step: the text
// the model read when it ran. A step Shellgate refused (status incomplete)
// carries the error text the model read in its stderr.
func shellOutputResult(callID, status, containerID string, outs []tool.CommandOutput) *gateway.ToolResult {
	if status == "incomplete" || status == "failed" {
		var msg []string
		for _, o := range outs {
			if o.Stderr != "" {
				msg = append(msg, o.Stderr)
			}
		}
		if len(msg) > 0 {
			return &gateway.ToolResult{CallID: callID, Content: strings.Join(msg, "\n"), IsError: true}
		}
	}
	return &gateway.ToolResult{CallID: callID, Content: gateway.ShellResultText(containerID, outs, nil)}
}

// routerEntries replays a shellgate:shell / openrouter:shell item, which
// holds the call and its output together.
func routerEntries(it *inputItem, param string) ([]entry, []string, error) {
	if err := need(param, "call_id", it.CallID); err != nil {
		return nil, nil, err
	}
	args, err := stringField(it.Arguments, param+".arguments")
	if err != nil {
		return nil, nil, err
	}
	if args == "" && len(it.Action) > 0 && string(it.Action) != "null" {
		var a shellAction
		if err := unmarshalField(it.Action, &a, param+".action"); err != nil {
			return nil, nil, err
		}
		args = shellArgs(a)
	}
	if args == "" {
		return nil, nil, invalid(param+".arguments", "Missing required parameter: '%s.arguments' (or '%s.action').", param, param)
	}
	var ids []string
	if it.ContainerID != "" {
		ids = append(ids, it.ContainerID)
	}
	call := callEntry(famShell, it.CallID, shellFunction, args)
	errText, err := stringField(it.Error, param+".error")
	if err != nil {
		return nil, nil, err
	}
	var res *gateway.ToolResult
	switch {
	case errText != "":
		res = &gateway.ToolResult{CallID: it.CallID, Content: errText, IsError: true}
	case len(it.Output) > 0 && string(it.Output) != "null":
		var outs []tool.CommandOutput
		if err := unmarshalField(it.Output, &outs, param+".output"); err != nil {
			return nil, nil, err
		}
		res = shellOutputResult(it.CallID, it.Status, it.ContainerID, outs)
	default:
		return nil, nil, invalid("input", "No tool output found for shell call %s.", it.CallID)
	}
	return []entry{call, outputEntry(famShell, res)}, ids, nil
}

// interpEntries replays a code_interpreter_call item, which holds the
// call and its output together: the model reads its call of the
// code_interpreter function (the item's id as the call id) and, as its
// result, the item's logs as stdout. The stdout/stderr split and the
// files the call wrote are not in the item, so the text is close to, not
// the same as, what the model read when the call ran. A failed call's
// logs are the error it read.
func interpEntries(it *inputItem, param string) ([]entry, []string, error) {
	if err := need(param, "id", it.ID); err != nil {
		return nil, nil, err
	}
	code := ""
	if it.Code != nil {
		code = *it.Code
	}
	args := gateway.CodeExecText(map[string]string{"code": code})
	var outs []struct {
		Type string `json:"type"`
		Logs string `json:"logs"`
	}
	known := len(it.Outputs) > 0 && string(it.Outputs) != "null"
	if known {
		if err := json.Unmarshal(it.Outputs, &outs); err != nil {
			return nil, nil, invalid(param+".outputs", "Invalid type for '%s.outputs': expected null or an array of logs and image outputs.", param)
		}
	}
	var logs strings.Builder
	for _, o := range outs {
		if o.Type == "logs" {
			logs.WriteString(o.Logs)
		}
	}
	res := &gateway.ToolResult{CallID: it.ID}
	switch {
	case it.Status == "failed" && logs.Len() > 0:
		res.Content, res.IsError = logs.String(), true
	case !known:
		res.Content = gateway.InterpreterResultText("", "shellgate: the output of this call is not available (it was replayed without outputs; include code_interpreter_call.outputs to keep them)\n", nil)
	default:
		res.Content = gateway.InterpreterResultText(logs.String(), "", nil)
	}
	var ids []string
	if it.ContainerID != "" {
		ids = append(ids, it.ContainerID)
	}
	return []entry{callEntry(famInterp, it.ID, interpFunction, args), outputEntry(famInterp, res)}, ids, nil
}

// contentPart is a part of a message's content or of a function output.
type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL string `json:"image_url"`
	FileID   string `json:"file_id"`
}

func messageEntries(it *inputItem, param string) ([]entry, []string, error) {
	var role gateway.Role
	switch it.Role {
	case "user":
		role = gateway.RoleUser
	case "assistant":
		role = gateway.RoleAssistant
	case "system", "developer":
	case "":
		return nil, nil, invalid(param+".role", "Missing required parameter: '%s.role'.", param)
	default:
		return nil, nil, invalid(param+".role", "Invalid value: %q. Supported values are: 'user', 'assistant', 'system', and 'developer'.", clip(it.Role))
	}
	parts, err := contentParts(it.Content, param+".content", role == gateway.RoleUser)
	if err != nil {
		return nil, nil, err
	}
	if role == "" {
		var text []string
		for _, p := range parts {
			if p.Kind != gateway.PartText {
				return nil, nil, invalid(param+".content", "A %s message may hold text only.", it.Role)
			}
			text = append(text, p.Text)
		}
		return []entry{{system: strings.Join(text, "\n")}}, nil, nil
	}
	var es []entry
	for _, p := range parts {
		es = append(es, entry{role: role, part: p})
	}
	return es, nil, nil
}

// contentParts reads content: a string, or a list of input_text /
// output_text / refusal / input_image parts (images only when images is
// set).
func contentParts(raw json.RawMessage, param string, images bool) ([]gateway.Part, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid(param, "Missing required parameter: '%s'.", param)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, jsonError(param, err)
		}
		return []gateway.Part{{Kind: gateway.PartText, Text: s}}, nil
	}
	var ps []contentPart
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, invalid(param, "Invalid type for '%s': expected a string or an array of content parts.", param)
	}
	var out []gateway.Part
	for i, p := range ps {
		pp := fmt.Sprintf("%s[%d]", param, i)
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, gateway.Part{Kind: gateway.PartText, Text: p.Text})
		case "refusal":
			out = append(out, gateway.Part{Kind: gateway.PartText, Text: p.Refusal})
		case "input_image":
			if !images {
				return nil, invalid(pp+".type", "input_image is allowed in user messages and function outputs only.")
			}
			img, err := imagePart(p, pp)
			if err != nil {
				return nil, err
			}
			out = append(out, gateway.Part{Kind: gateway.PartImage, Image: img})
		default:
			return nil, invalid(pp+".type", "Content part type %q is not supported by Shellgate (use input_text, output_text or input_image).", clip(p.Type))
		}
	}
	return out, nil
}

// imagePart reads an input_image: a data: URL (inline) or an http(s) URL.
func imagePart(p contentPart, param string) (*gateway.Image, error) {
	if p.FileID != "" && p.ImageURL == "" {
		return nil, invalid(param+".file_id", "input_image.file_id is not supported by Shellgate; send the image as image_url (a data: or https: URL).")
	}
	u := p.ImageURL
	switch {
	case strings.HasPrefix(u, "data:"):
		meta, data, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
		mediaType, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isB64 || !strings.HasPrefix(mediaType, "image/") || data == "" {
			return nil, invalid(param+".image_url", "Invalid image_url: a data URL must look like data:image/png;base64,....")
		}
		return &gateway.Image{MediaType: mediaType, Data: data}, nil
	case strings.HasPrefix(u, "https://"), strings.HasPrefix(u, "http://"):
		return &gateway.Image{URL: u}, nil
	case u == "":
		return nil, invalid(param+".image_url", "Missing required parameter: '%s.image_url'.", param)
	}
	return nil, invalid(param+".image_url", "Invalid image_url: expected a data: or http(s): URL.")
}

// functionOutput reads a function_call_output's output: a string, or parts
// (text and images).
func functionOutput(raw json.RawMessage, param string) (*gateway.ToolResult, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid(param, "Missing required parameter: '%s'.", param)
	}
	parts, err := contentParts(raw, param, true)
	if err != nil {
		return nil, err
	}
	res := &gateway.ToolResult{}
	var text []string
	for _, p := range parts {
		if p.Kind == gateway.PartImage {
			res.Images = append(res.Images, *p.Image)
		} else {
			text = append(text, p.Text)
		}
	}
	res.Content = strings.Join(text, "")
	return res, nil
}
