package gateway

// Programs: OpenAI Responses programmatic tool calling on jsrun. The model
// sees the function ProgramFunction taking {"code"}: JavaScript (an async
// function body: top-level await and return) that calls the client's
// tools as `await tools.NAME({...})`. A call interrupts the run (jsrun's
// Interrupt): the step pauses (StepResult.Paused) with the run's signed
// continuation as its State, which the frontend hands the client as the
// program item's fingerprint. The client's answers resume it
// (Resumer.Resume with Resume.State): jsrun replays the calls its ledger
// holds without repeating them, the answered ones fulfil, and the run
// goes on to more calls or its value. Nothing is kept on the server but
// the single-use claim of each continuation (jsrun.Config.Store).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/shellgate/shellgate/jsrun"
)

// ProgramFunction is the name the model sees for the program tool.
const ProgramFunction = "program"

// ProgramNamespace is the global object the program's code calls the
// client's tools on: tools.get_weather({city: "Paris"}).
const ProgramNamespace = "tools"

var jsIdent = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// ProgramCallable says whether a client tool's name can be called from a
// program: a JavaScript identifier (so tools.NAME works) that jsrun takes
// as a host function's name.
func ProgramCallable(name string) bool {
	switch name {
	case "__proto__", "constructor", "prototype", "then", "catch", "finally":
		return false
	}
	return jsIdent.MatchString(name)
}

// ProgramTool runs the model's programs on Runner.
type ProgramTool struct {
	Runner *jsrun.Runner
	// Scope is bound into every continuation (the caller's workspace): a
	// fingerprint made for one scope does not resume in another.
	Scope string
	// Tools are the client tools a program may call.
	Tools []Tool
	// Denied are the client's other tools: calling one from code throws.
	Denied []string
}

// ProgramDetail is a program step's own result, for the frontend.
type ProgramDetail struct {
	Code   string
	Result string // the value as text (and console output), or the error
	Failed bool   // the program threw, or did not run
}

func (t ProgramTool) Function() Tool {
	var b strings.Builder
	b.WriteString("Run a JavaScript program that calls the user's tools and works with their results, so that many calls and " +
		"their processing take one step. `code` is the body of an async function: use top-level `await`, and `return` the value " +
		"you want back (strings as they are, other values as JSON). Call a tool as `await " + ProgramNamespace + ".NAME({...})` " +
		"with one object holding its arguments as its input schema names them; it returns the tool's result as a string " +
		"(JSON.parse it when it is JSON) and throws an Error when the tool fails. Calls made together (Promise.all) run together. " +
		"There is no network, file system or require/import; console.log output comes back with the value. The tools:")
	for _, c := range t.Tools {
		doc := fmt.Sprintf("\n- %s.%s: %s Input schema: %s", ProgramNamespace, c.Name, c.Description, compactJSON(c.Parameters))
		if len(doc) > maxToolDoc {
			doc = doc[:maxToolDoc] + "…"
		}
		b.WriteString(doc)
	}
	return Tool{
		Name:        ProgramFunction,
		Description: b.String(),
		Parameters:  json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","description":"The JavaScript program: an async function body that calls tools.NAME({...}) and returns its result."}},"required":["code"]}`),
	}
}

// ProgramCode reads a program call's arguments: its code.
func ProgramCode(arguments string) (string, error) {
	var a struct {
		Code *string `json:"code"`
	}
	if err := decodeArgs(arguments, &a, `{"code": "..."}`); err != nil {
		return "", err
	}
	if a.Code == nil || strings.TrimSpace(*a.Code) == "" {
		return "", errors.New(`"code" is missing or empty: give the JavaScript program to run`)
	}
	return *a.Code, nil
}

func (t ProgramTool) Run(ctx context.Context, _ SandboxFunc, call ToolCall, _ func(cmd, stream int, text string)) StepResult {
	code, err := ProgramCode(call.Arguments)
	if err != nil {
		return programFailed("", "error: "+err.Error())
	}
	return t.run(ctx, jsrun.Input{Source: code}, nil)
}

// programAnswer is a client's answer as a resolution of the interrupted
// call: its output, or its error.
type programAnswer = map[string]any

// Resume answers the calls the program of rs.Call waits for and runs it
// on from rs.State, its continuation.
func (t ProgramTool) Resume(ctx context.Context, _ SandboxFunc, rs *Resume, _ func(cmd, stream int, text string)) StepResult {
	code, err := ProgramCode(rs.Call.Arguments)
	if err != nil {
		return programFailed("", "error: "+err.Error())
	}
	in := jsrun.Input{Source: code, Continuation: rs.State}
	for _, a := range rs.Answers {
		v := programAnswer{"output": a.Content}
		if a.IsError {
			v = programAnswer{"error": a.Content}
		}
		in.Resolutions = append(in.Resolutions, jsrun.Resolution{InterruptionID: a.Call, Value: v})
	}
	return t.run(ctx, in, rs)
}

func (t ProgramTool) run(ctx context.Context, in jsrun.Input, rs *Resume) StepResult {
	if t.Runner == nil {
		return programFailed(in.Source, "error: programs are not enabled on this server")
	}
	ns := jsrun.Namespace{}
	for _, c := range t.Tools {
		ns[c.Name] = jsrun.Async(clientFunction)
	}
	for _, name := range t.Denied {
		if ProgramCallable(name) && ns[name].Fn == nil {
			msg := fmt.Sprintf("the tool %s cannot be called from a program: its allowed_callers do not include \"programmatic\"", name)
			ns[name] = jsrun.Sync(func(context.Context, []any) (any, error) {
				return nil, &jsrun.UserError{Name: "ToolError", Message: msg, Code: "TOOL_NOT_PROGRAMMATIC"}
			})
		}
	}
	in.HostFunctions = map[string]jsrun.Namespace{ProgramNamespace: ns}
	in.Context = map[string]any{"purpose": "responses program", "scope": t.Scope}
	res, err := t.Runner.Run(ctx, in)
	if err != nil {
		var je *jsrun.Error
		if rs != nil && errors.As(err, &je) && (je.Code == jsrun.CodeProtocol || je.Code == jsrun.CodeContinuationUsed) {
			// The fingerprint (or what it is bound to: the code, the
			// tools, the caller) is not one this server made for this
			// program, or it was used before.
			msg := fmt.Sprintf("the fingerprint of program %s cannot resume it: %s (send the program item exactly as the response that paused it gave it, with the same code and tools, once)", rs.Call.ID, je.Message)
			return StepResult{Fatal: &RequestError{Status: 400, Param: "input", Message: msg, Code: "invalid_fingerprint"}}
		}
		if ctx.Err() != nil {
			return programFailed(in.Source, "error: the program was cancelled")
		}
		return programFailed(in.Source, programError(err))
	}
	if res.Status == jsrun.StatusInterrupted {
		st := StepResult{State: res.Continuation, Detail: &ProgramDetail{Code: in.Source}}
		for _, it := range res.Interruptions {
			name := strings.TrimPrefix(it.HostFunctionName, ProgramNamespace+".")
			args, _ := it.Payload.(string)
			st.Paused = append(st.Paused, ToolCall{ID: it.ID, Name: name, Arguments: args})
		}
		return st
	}
	text := valueText(res.Value)
	if res.Console != "" {
		text += "\n\nconsole:\n" + res.Console
	}
	return StepResult{Content: text, Detail: &ProgramDetail{Code: in.Source, Result: text}}
}

func programFailed(code, text string) StepResult {
	return StepResult{Content: text, IsError: true, Detail: &ProgramDetail{Code: code, Result: text, Failed: true}}
}

// programError is what the model reads for a program that failed.
func programError(err error) string {
	var je *jsrun.Error
	if !errors.As(err, &je) {
		return "error: the program failed"
	}
	msg := "error: "
	if je.Guest {
		msg += je.Name + ": " + je.Message
		if je.Stack != "" {
			msg += "\n" + je.Stack
		}
	} else {
		msg += string(je.Code) + ": " + je.Message
	}
	if je.Console != "" {
		msg += "\n\nconsole:\n" + je.Console
	}
	return msg
}

// clientFunction is a client tool in a program: a call interrupts the run
// with the call's arguments as JSON; resumed, it returns the client's
// output or throws its error.
func clientFunction(ctx context.Context, args []any) (any, error) {
	if r := jsrun.ResumeFrom(ctx); r != nil {
		a, _ := r.Resolution.(programAnswer)
		if e, ok := a["error"].(string); ok {
			return nil, &jsrun.UserError{Name: "ToolError", Message: "the tool reported an error: " + e, Code: "TOOL_ERROR"}
		}
		out, _ := a["output"].(string)
		return out, nil
	}
	var input any = map[string]any{}
	switch {
	case len(args) > 1:
		return nil, &jsrun.UserError{Name: "TypeError", Message: "a tool takes one argument: an object with its input", Code: "TOOL_BAD_INPUT"}
	case len(args) == 1:
		if _, isUndef := args[0].(jsrun.Undefined); !isUndef {
			input = args[0]
		}
	}
	switch input.(type) {
	case map[string]any, *jsrun.Object, jsrun.NullProto:
	default:
		return nil, &jsrun.UserError{Name: "TypeError", Message: "a tool takes one argument: an object with its input", Code: "TOOL_BAD_INPUT"}
	}
	var b bytes.Buffer
	writeJSONValue(&b, input)
	return nil, jsrun.Interrupt(ctx, b.String())
}

// valueText is a program's value as text: a string as it is, undefined
// as "", anything else as JSON.
func valueText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case jsrun.Undefined:
		return ""
	}
	var b bytes.Buffer
	writeJSONValue(&b, v)
	return b.String()
}

// writeJSONValue writes a jsrun value as JSON.stringify would, near
// enough: undefined and non-finite numbers are null, objects keep their
// order, values JSON has no form for are their text.
func writeJSONValue(b *bytes.Buffer, v any) {
	str := func(s string) {
		enc, _ := json.Marshal(s)
		b.Write(enc)
	}
	obj := func(keys []string, get func(int) any) {
		b.WriteByte('{')
		n := 0
		for i, k := range keys {
			if _, u := get(i).(jsrun.Undefined); u {
				continue
			}
			if n > 0 {
				b.WriteByte(',')
			}
			n++
			str(k)
			b.WriteByte(':')
			writeJSONValue(b, get(i))
		}
		b.WriteByte('}')
	}
	switch x := v.(type) {
	case nil, jsrun.Undefined:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			b.WriteString("null")
			return
		}
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case string:
		str(x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONValue(b, e)
		}
		b.WriteByte(']')
	case *jsrun.Object:
		obj(x.Keys, func(i int) any { return x.Values[i] })
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		obj(keys, func(i int) any { return x[keys[i]] })
	case jsrun.NullProto:
		writeJSONValue(b, map[string]any(x))
	default:
		if enc, err := json.Marshal(x); err == nil {
			b.Write(enc)
			return
		}
		str(fmt.Sprint(x))
	}
}
