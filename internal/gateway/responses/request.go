package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/identity"
)

// Limits on one request body. MaxBody fits a few inline images; the counts
// keep a hostile request from costing more to parse than to refuse.
const (
	MaxBody          = 32 << 20
	maxTools         = 128
	maxInputItems    = 10_000
	maxMetadata      = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

// wireRequest is the body of POST /v1/responses, as far as Shellgate reads
// it. Polymorphic fields stay raw and are decoded by shape. Fields not
// listed here are accepted and ignored (SDKs send options, like
// reasoning, that have no meaning for the gateway); of include, only
// "code_interpreter_call.outputs" has a meaning, the others are ignored.
type wireRequest struct {
	Model              string            `json:"model"`
	Instructions       *string           `json:"instructions"`
	Input              json.RawMessage   `json:"input"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxToolCalls       *int64            `json:"max_tool_calls"`
	Stream             *bool             `json:"stream"`
	SessionID          string            `json:"session_id"`
	PromptCacheKey     string            `json:"prompt_cache_key"`
	Store              *bool             `json:"store"`
	Metadata           map[string]string `json:"metadata"`
	User               string            `json:"user"`
	SafetyIdentifier   string            `json:"safety_identifier"`
	PreviousResponseID string            `json:"previous_response_id"`
	Conversation       json.RawMessage   `json:"conversation"`
	Background         *bool             `json:"background"`
	Text               *struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
	Reasoning json.RawMessage `json:"reasoning"`
	Include   []string        `json:"include"`
}

// shellKind says which item shape renders a shell step.
type shellKind int

const (
	shellNative shellKind = iota + 1 // {"type":"shell"}: shell_call + shell_call_output
	shellLocal                       // {"type":"local_shell"}: local_shell_call + local_shell_call_output
	shellRouter                      // shellgate:shell / openrouter:shell: one item of that type
)

// parsed is a validated request: what the loop needs and what the response
// echoes.
type parsed struct {
	model    string // as the client sent it
	req      *gateway.Request
	stream   bool
	maxCalls int

	// The shell tool, when the request has one.
	shell     shellKind
	shellType string // the tool's type as sent ("shell", "openrouter:shell", ...)
	shellTool int    // its index in tools
	// shellAuto: a shellgate:shell / openrouter:shell on engine auto (or
	// none), which the provider may run itself (gateway.HostAuto).
	shellAuto bool
	// The code_interpreter tool, when the request has one.
	interp     bool
	interpTool int // its index in tools
	// ciOutputs: include has "code_interpreter_call.outputs".
	ciOutputs bool
	// The programmatic_tool_calling tool, when the request has one, and
	// the function tools a program may call (programTools), the others
	// (programDenied).
	programmatic  bool
	programTool   int
	programTools  []gateway.Tool
	programDenied []string
	// programCaller is the param of the first function tool whose
	// allowed_callers include "programmatic" ("" none).
	programCaller string
	resume        *gateway.Resume // the program the input resumes
	// The request's one container, as the server tools' settings give it.
	containerParam string // the param that set it, for conflicts ("tools[0].environment")
	uploads        []gateway.Upload
	open           gateway.OpenOptions
	sel            identity.Request

	// Echoed in the response object.
	tools        []json.RawMessage
	toolChoice   json.RawMessage
	instructions *string
	temperature  float64
	topP         float64
	parallel     bool
	maxOutput    *int64
	metadata     map[string]string
	user         string
	store        bool
	cacheKey     string
	reasoning    json.RawMessage
}

// readRequest reads and validates the body. Every failure is an *apiError
// (a 4xx in OpenAI's envelope).
func readRequest(w http.ResponseWriter, r *http.Request) (*parsed, error) {
	if r.ContentLength > MaxBody {
		return nil, tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, invalid("", "Could not read the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, invalid("", "The request body is empty: send a JSON object with at least model and input.")
	}
	var wr wireRequest
	if err := decodeStrict(body, &wr); err != nil {
		return nil, err
	}
	return parse(&wr, r.Header.Get("x-session-id"))
}

func tooLarge() error {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
		Message: fmt.Sprintf("The request body is larger than %d bytes.", MaxBody)}
}

// decodeStrict decodes one JSON value into v, saying what was wrong the
// way OpenAI does ("Invalid type for 'x': ...").
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return jsonError("", err)
	}
	if dec.More() {
		return invalid("", "We could not parse the JSON body of your request: data after the JSON object.")
	}
	return nil
}

// jsonError turns a decoding error into a 400; prefix names the field the
// value came from ("tools[2]").
func jsonError(prefix string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return invalid(prefix, "We could not parse the JSON body of your request (at byte %d: %v).", se.Offset, err)
	case errors.As(err, &te):
		field := joinParam(prefix, te.Field)
		if field == "" {
			return invalid(prefix, "Invalid type: expected %s, but got %s instead.", gateway.JSONKind(te.Type.Kind().String()), article(te.Value))
		}
		return invalid(field, "Invalid type for '%s': expected %s, but got %s instead.", field, gateway.JSONKind(te.Type.Kind().String()), article(te.Value))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return invalid(prefix, "We could not parse the JSON body of your request: it ends early.")
	}
	return invalid(prefix, "We could not parse the JSON body of your request: %v", err)
}

func joinParam(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

func article(v string) string {
	switch v {
	case "array", "object", "integer":
		return "an " + v
	case "number", "string", "bool":
		return "a " + v
	}
	return v
}

var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// shellFunction is the name the model sees for every shell-like tool.
const shellFunction = "shell"

// interpFunction is the name the model sees for code_interpreter.
const interpFunction = gateway.CodeInterpreter

// sandboxed reports whether the request has a server tool, which runs in
// the request's container.
func (p *parsed) sandboxed() bool { return p.shell != 0 || p.interp }

// serverTools are the request's server tools by the function name the
// model sees.
func (p *parsed) serverTools() map[string]gateway.ServerTool {
	t := map[string]gateway.ServerTool{}
	if p.shell != 0 {
		t[shellFunction] = gateway.ShellTool{Name: shellFunction}
	}
	if p.interp {
		t[interpFunction] = gateway.InterpreterTool{Name: interpFunction}
	}
	return t
}

// hosting is which of the server tools the provider may run itself
// (gateway.Run.Hosting): the shell of OpenAI's own type and the code
// interpreter as the provider's tools, a router shell on engine auto.
func (p *parsed) hosting() map[string]gateway.Hosting {
	h := map[string]gateway.Hosting{}
	switch {
	case p.shell == shellNative:
		h[shellFunction] = gateway.HostVendor
	case p.shell == shellRouter && p.shellAuto:
		h[shellFunction] = gateway.HostAuto
	}
	if p.interp {
		h[interpFunction] = gateway.HostVendor
	}
	return h
}

func parse(w *wireRequest, headerSession string) (*parsed, error) {
	p := &parsed{
		model: w.Model, maxCalls: gateway.DefaultMaxToolCalls, temperature: 1, topP: 1, parallel: true,
		instructions: w.Instructions, metadata: w.Metadata, user: w.User, cacheKey: w.PromptCacheKey,
		reasoning: w.Reasoning, tools: w.Tools,
	}
	if strings.TrimSpace(w.Model) == "" {
		return nil, invalid("model", "Missing required parameter: 'model'.")
	}
	if w.Stream != nil {
		p.stream = *w.Stream
	}
	if w.Store != nil {
		p.store = *w.Store
	}
	if w.Background != nil && *w.Background {
		return nil, invalid("background", "background responses are not supported by Shellgate: send the request without background and read the answer (or stream it).")
	}
	if w.PreviousResponseID != "" {
		return nil, invalid("previous_response_id", "previous_response_id is not supported: Shellgate stores no responses. Send the earlier output items back in input instead.")
	}
	if len(w.Conversation) > 0 && string(w.Conversation) != "null" {
		return nil, invalid("conversation", "conversation is not supported: Shellgate stores no conversations. Send the earlier items in input instead.")
	}
	if w.Text != nil && w.Text.Format != nil && w.Text.Format.Type != "" && w.Text.Format.Type != "text" {
		return nil, invalid("text.format.type", "text.format %q is not supported by Shellgate; only plain text output is.", w.Text.Format.Type)
	}
	if len(w.Metadata) > maxMetadata {
		return nil, invalid("metadata", "Invalid 'metadata': too many properties. Expected an object with at most %d properties, but got %d instead.", maxMetadata, len(w.Metadata))
	}
	for k, v := range w.Metadata {
		if len(k) > maxMetadataKey {
			return nil, invalid("metadata", "Invalid 'metadata': a key is longer than %d characters.", maxMetadataKey)
		}
		if len(v) > maxMetadataValue {
			return nil, invalid("metadata", "Invalid 'metadata': the value of %q is longer than %d characters.", clip(k), maxMetadataValue)
		}
	}
	req := &gateway.Request{User: w.User}
	if w.Instructions != nil {
		req.System = *w.Instructions
	}
	if w.MaxOutputTokens != nil {
		if *w.MaxOutputTokens < 1 {
			return nil, invalid("max_output_tokens", "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, but got %d instead.", *w.MaxOutputTokens)
		}
		req.MaxTokens = int(min(*w.MaxOutputTokens, 1<<31-1))
		p.maxOutput = w.MaxOutputTokens
	}
	if t := w.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return nil, invalid("temperature", "Invalid 'temperature': expected a number between 0 and 2, but got %v instead.", *t)
		}
		req.Temperature, p.temperature = t, *t
	}
	if t := w.TopP; t != nil {
		if *t < 0 || *t > 1 {
			return nil, invalid("top_p", "Invalid 'top_p': expected a number between 0 and 1, but got %v instead.", *t)
		}
		req.TopP, p.topP = t, *t
	}
	if w.ParallelToolCalls != nil {
		p.parallel = *w.ParallelToolCalls
	}
	if m := w.MaxToolCalls; m != nil {
		if *m < 1 {
			return nil, invalid("max_tool_calls", "Invalid 'max_tool_calls': expected a value >= 1, but got %d instead.", *m)
		}
		// Larger budgets are clamped to the maximum (SPEC §1.5).
		p.maxCalls = int(min(*m, gateway.MaxToolCalls))
	}
	for _, inc := range w.Include {
		if inc == "code_interpreter_call.outputs" {
			p.ciOutputs = true
		}
	}
	if err := parseTools(p, req); err != nil {
		return nil, err
	}
	choice, err := parseToolChoice(w.ToolChoice, p, req)
	if err != nil {
		return nil, err
	}
	choice.DisableParallel = !p.parallel
	req.ToolChoice = choice
	p.toolChoice = w.ToolChoice
	if len(p.toolChoice) == 0 || string(p.toolChoice) == "null" {
		p.toolChoice = json.RawMessage(`"auto"`)
	}
	conv, err := parseInput(w.Input)
	if err != nil {
		return nil, err
	}
	req.Messages = conv.messages
	if conv.resume != nil && !p.programmatic {
		return nil, invalid("tools", "The input resumes the program %s: send the programmatic_tool_calling tool and the function tools of the request that made it.", clip(conv.resume.Call.ID))
	}
	p.resume = conv.resume
	if conv.system != "" {
		req.System = strings.TrimSpace(req.System + "\n\n" + conv.system)
	}
	p.sel.BodySessionID = w.SessionID
	p.sel.HeaderSessionID = headerSession
	p.sel.PromptCacheKey = w.PromptCacheKey
	p.sel.ConversationContainerIDs = conv.containerIDs
	p.req = req
	return p, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// toolHead is the part of a tool every shape has.
type toolHead struct {
	Type           string          `json:"type"`
	AllowedCallers json.RawMessage `json:"allowed_callers"`
}

type functionTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// environment is the shell tool's environment (and the router tools'
// parameters.environment).
type environment struct {
	Type          string          `json:"type"`
	ContainerID   string          `json:"container_id"`
	FileIDs       []string        `json:"file_ids"`
	MemoryLimit   string          `json:"memory_limit"`
	NetworkPolicy json.RawMessage `json:"network_policy"`
}

type shellToolWire struct {
	Environment *environment `json:"environment"`
}

type routerToolWire struct {
	Parameters *struct {
		Engine        string          `json:"engine"`
		Environment   *environment    `json:"environment"`
		NetworkPolicy json.RawMessage `json:"network_policy"`
	} `json:"parameters"`
}

func parseTools(p *parsed, req *gateway.Request) error {
	if len(p.tools) > maxTools {
		return invalid("tools", "Invalid 'tools': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", maxTools, len(p.tools))
	}
	names := map[string]bool{}
	for i, raw := range p.tools {
		param := fmt.Sprintf("tools[%d]", i)
		var h toolHead
		if err := json.Unmarshal(raw, &h); err != nil {
			return jsonError(param, err)
		}
		if h.Type != "function" && len(h.AllowedCallers) > 0 && string(h.AllowedCallers) != "null" {
			if _, prog, err := allowedCallers(h.AllowedCallers, param); err != nil {
				return err
			} else if prog {
				return invalid(param+".allowed_callers", "Invalid '%s.allowed_callers': only function tools can be called from a program on Shellgate; a %s tool is called by the model directly.", param, h.Type)
			}
		}
		switch h.Type {
		case "function":
			var f functionTool
			if err := json.Unmarshal(raw, &f); err != nil {
				return jsonError(param, err)
			}
			if !functionName.MatchString(f.Name) {
				return invalid(param+".name", "Invalid '%s.name': %q does not match '^[a-zA-Z0-9_-]{1,64}$'.", param, clip(f.Name))
			}
			if names[f.Name] {
				return invalid(param+".name", "Duplicate tool name %q in tools.", f.Name)
			}
			names[f.Name] = true
			direct, prog, err := allowedCallers(h.AllowedCallers, param)
			if err != nil {
				return err
			}
			params := f.Parameters
			if len(params) == 0 || string(params) == "null" {
				params = json.RawMessage(`{"type":"object","properties":{}}`)
			} else if bytes.TrimSpace(params)[0] != '{' {
				return invalid(param+".parameters", "Invalid type for '%s.parameters': expected an object (a JSON Schema).", param)
			}
			t := gateway.Tool{Name: f.Name, Description: f.Description, Parameters: params, Strict: f.Strict != nil && *f.Strict}
			if direct {
				req.Tools = append(req.Tools, t)
			}
			if !prog {
				p.programDenied = append(p.programDenied, f.Name)
				continue
			}
			if !gateway.ProgramCallable(f.Name) {
				return invalid(param+".name", "Invalid '%s.name': %q cannot be called from a program: a tool whose allowed_callers include \"programmatic\" needs a name that is a JavaScript identifier (letters, digits, '_'; not starting with a digit; not then, catch, finally, constructor or prototype), as programs call it as tools.NAME(...).", param, clip(f.Name))
			}
			if p.programCaller == "" {
				p.programCaller = param + ".allowed_callers"
			}
			p.programTools = append(p.programTools, t)
		case "programmatic_tool_calling":
			if p.programmatic {
				return invalid(param+".type", "Only one programmatic_tool_calling tool per request: tools[%d] is already one.", p.programTool)
			}
			p.programmatic, p.programTool = true, i
		case "shell", "local_shell", "shellgate:shell", "openrouter:shell":
			if p.shell != 0 {
				return invalid(param+".type", "Only one shell tool per request: tools[%d] is already a %q tool.", p.shellTool, p.shellType)
			}
			p.shellType, p.shellTool = h.Type, i
			if err := parseShellTool(p, h.Type, raw, param); err != nil {
				return err
			}
		case "code_interpreter":
			if p.interp {
				return invalid(param+".type", "Only one code_interpreter tool per request: tools[%d] is already one.", p.interpTool)
			}
			p.interp, p.interpTool = true, i
			if err := parseInterpreterTool(p, raw, param); err != nil {
				return err
			}
		case "shellgate:bash", "openrouter:bash":
			return invalid(param+".type", "The %s tool is available on the Messages API only (POST /v1/messages). On the Responses API use {\"type\":\"shell\"} or {\"type\":\"shellgate:shell\"}.", h.Type)
		case "":
			return invalid(param+".type", "Missing required parameter: '%s.type'.", param)
		default:
			return invalid(param+".type", "Tool type %q is not supported by Shellgate. Supported tools: function, shell, local_shell, shellgate:shell, openrouter:shell, code_interpreter and programmatic_tool_calling.", clip(h.Type))
		}
	}
	if p.shell != 0 && names[shellFunction] {
		return invalid("tools", "A function tool named %q cannot be used together with the %s tool: the model sees that tool as a function named %q.", shellFunction, p.shellType, shellFunction)
	}
	if p.interp && names[interpFunction] {
		return invalid("tools", "A function tool named %q cannot be used together with the code_interpreter tool: the model sees that tool as a function named %q.", interpFunction, interpFunction)
	}
	if p.programCaller != "" && !p.programmatic {
		return invalid(p.programCaller, "Invalid '%s': \"programmatic\" needs the programmatic_tool_calling tool: add {\"type\":\"programmatic_tool_calling\"} to tools.", p.programCaller)
	}
	if p.programmatic {
		if len(p.programTools) == 0 {
			return invalid(fmt.Sprintf("tools[%d]", p.programTool), "The programmatic_tool_calling tool needs a function tool a program may call: give one \"allowed_callers\": [\"programmatic\"] (or [\"direct\", \"programmatic\"]).")
		}
		if names[gateway.ProgramFunction] {
			return invalid("tools", "A function tool named %q cannot be used together with the programmatic_tool_calling tool: the model sees that tool as a function named %q.", gateway.ProgramFunction, gateway.ProgramFunction)
		}
	}
	return nil
}

// allowedCallers reads a tool's allowed_callers: whether the model may
// call it (direct) and whether a program may. Absent (or null) is direct
// only.
func allowedCallers(raw json.RawMessage, param string) (direct, prog bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return true, false, nil
	}
	param += ".allowed_callers"
	var in []string
	if err := json.Unmarshal(raw, &in); err != nil {
		return false, false, invalid(param, "Invalid type for '%s': expected an array of \"direct\" and \"programmatic\".", param)
	}
	if len(in) == 0 {
		return false, false, invalid(param, "Invalid '%s': empty array; name \"direct\" (the model calls the tool) and/or \"programmatic\" (a program calls it).", param)
	}
	for j, c := range in {
		switch c {
		case "direct":
			direct = true
		case "programmatic":
			prog = true
		default:
			return false, false, invalid(fmt.Sprintf("%s[%d]", param, j), "Invalid value: %q. Supported values are: 'direct' and 'programmatic'.", clip(c))
		}
	}
	return direct, prog, nil
}

// parseInterpreterTool reads code_interpreter's container: a container id
// ("cntr_…", as a container_reference) or {"type":"auto", file_ids,
// memory_limit, network_policy} (as container_auto); none is auto.
func parseInterpreterTool(p *parsed, raw json.RawMessage, param string) error {
	var t struct {
		Container json.RawMessage `json:"container"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return jsonError(param, err)
	}
	param += ".container"
	c := bytes.TrimSpace(t.Container)
	if len(c) == 0 || string(c) == "null" {
		return nil
	}
	switch c[0] {
	case '"':
		var id string
		json.Unmarshal(c, &id)
		if !identity.ValidReference(id) {
			return invalid(param, "Invalid '%s': %q is not a container id (1-%d letters, digits, '_' or '-', like cntr_…); give a container id or {\"type\": \"auto\"}.", param, clip(id), identity.MaxReference)
		}
		return useEnvironment(p, &environment{Type: "container_reference", ContainerID: id}, param)
	case '{':
		var a struct {
			Type          string          `json:"type"`
			FileIDs       []string        `json:"file_ids"`
			MemoryLimit   string          `json:"memory_limit"`
			NetworkPolicy json.RawMessage `json:"network_policy"`
		}
		if err := json.Unmarshal(c, &a); err != nil {
			return jsonError(param, err)
		}
		if a.Type != "auto" {
			return invalid(param+".type", "Invalid '%s.type': %q (expected auto).", param, clip(a.Type))
		}
		return useEnvironment(p, &environment{Type: "container_auto", FileIDs: a.FileIDs, MemoryLimit: a.MemoryLimit, NetworkPolicy: a.NetworkPolicy}, param)
	}
	return invalid(param, "Invalid type for '%s': expected a container id (a string) or an object {\"type\": \"auto\", ...}.", param)
}

func parseShellTool(p *parsed, typ string, raw json.RawMessage, param string) error {
	var env *environment
	switch typ {
	case "shell":
		p.shell = shellNative
		var t shellToolWire
		if err := json.Unmarshal(raw, &t); err != nil {
			return jsonError(param, err)
		}
		env = t.Environment
		param += ".environment"
	case "local_shell":
		p.shell = shellLocal
		return nil
	default:
		p.shell = shellRouter
		var t routerToolWire
		if err := json.Unmarshal(raw, &t); err != nil {
			return jsonError(param, err)
		}
		p.shellAuto = t.Parameters == nil || t.Parameters.Engine == "" || t.Parameters.Engine == "auto"
		if t.Parameters != nil {
			switch t.Parameters.Engine {
			case "", "auto", "shellgate", "openrouter":
			default:
				return invalid(param+".parameters.engine", "Invalid '%s.parameters.engine': %q (expected auto, shellgate or openrouter).", param, clip(t.Parameters.Engine))
			}
			env = t.Parameters.Environment
			if len(t.Parameters.NetworkPolicy) > 0 && string(t.Parameters.NetworkPolicy) != "null" {
				if env == nil {
					env = &environment{Type: "container_auto"}
				}
				if len(env.NetworkPolicy) == 0 {
					env.NetworkPolicy = t.Parameters.NetworkPolicy
				}
			}
		}
		param += ".parameters.environment"
	}
	return useEnvironment(p, env, param)
}

// useEnvironment applies a server tool's container settings to the
// request's one container (nil: no settings). The shell and
// code_interpreter share it: settings of both must agree.
func useEnvironment(p *parsed, env *environment, param string) error {
	if env == nil {
		return nil
	}
	conflict := func(what string) error {
		return invalid(param, "%s and %s set different %s: the request's server tools share one container, so give it once (or the same on both).", p.containerParam, param, what)
	}
	switch env.Type {
	case "", "container_auto":
		switch env.MemoryLimit {
		case "", "1g", "4g", "16g", "64g":
		default:
			return invalid(param+".memory_limit", "Invalid '%s.memory_limit': %q (expected one of 1g, 4g, 16g, 64g).", param, clip(env.MemoryLimit))
		}
		if env.MemoryLimit != "" {
			if p.open.MemoryLimit != "" && p.open.MemoryLimit != env.MemoryLimit {
				return conflict("memory limits")
			}
			p.open.MemoryLimit = env.MemoryLimit
		}
		if err := checkNetworkPolicy(env.NetworkPolicy, param+".network_policy"); err != nil {
			return err
		}
		if len(env.NetworkPolicy) > 0 && string(env.NetworkPolicy) != "null" {
			if p.open.NetworkPolicy != nil && !bytes.Equal(p.open.NetworkPolicy, env.NetworkPolicy) {
				return conflict("network policies")
			}
			p.open.NetworkPolicy = env.NetworkPolicy
		}
		if len(p.uploads)+len(env.FileIDs) > maxFileIDs {
			return invalid(param+".file_ids", "Invalid '%s.file_ids': at most %d files per request.", param, maxFileIDs)
		}
		for _, id := range env.FileIDs {
			if id == "" {
				return invalid(param+".file_ids", "Invalid '%s.file_ids': an empty file id.", param)
			}
			p.uploads = append(p.uploads, gateway.Upload{FileID: id})
		}
	case "container_reference":
		if env.ContainerID == "" {
			return invalid(param+".container_id", "Missing required parameter: '%s.container_id'.", param)
		}
		if p.sel.ContainerReference != "" && p.sel.ContainerReference != env.ContainerID {
			return conflict("containers")
		}
		p.sel.ContainerReference = env.ContainerID
	case "local":
		return invalid(param+".type", "A local shell environment runs on the client; Shellgate runs shell calls in its own sandbox. Use container_auto or container_reference, or a function tool for a client-side shell.")
	default:
		return invalid(param+".type", "Invalid '%s.type': %q (expected container_auto or container_reference).", param, clip(env.Type))
	}
	if p.containerParam == "" {
		p.containerParam = param
	}
	return nil
}

const maxFileIDs = 100

// checkNetworkPolicy validates the shape of a network policy; the sandbox
// layer enforces it.
func checkNetworkPolicy(raw json.RawMessage, param string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var np struct {
		Type           string   `json:"type"`
		AllowedDomains []string `json:"allowed_domains"`
	}
	if err := json.Unmarshal(raw, &np); err != nil {
		return jsonError(param, err)
	}
	switch np.Type {
	case "disabled":
	case "allowlist":
		if len(np.AllowedDomains) == 0 || len(np.AllowedDomains) > 50 {
			return invalid(param+".allowed_domains", "Invalid '%s.allowed_domains': give 1 to 50 host names or patterns.", param)
		}
	default:
		return invalid(param+".type", "Invalid '%s.type': %q (expected disabled or allowlist).", param, clip(np.Type))
	}
	return nil
}

// parseToolChoice maps tool_choice to the neutral choice: "auto", "none",
// "required", {"type":"function","name"} or a hosted shell type (which
// forces the shell function).
func parseToolChoice(raw json.RawMessage, p *parsed, req *gateway.Request) (gateway.ToolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return gateway.ToolChoice{Mode: gateway.ChoiceAuto}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto":
			return gateway.ToolChoice{Mode: gateway.ChoiceAuto}, nil
		case "none":
			return gateway.ToolChoice{Mode: gateway.ChoiceNone}, nil
		case "required":
			if len(req.Tools) == 0 && !p.sandboxed() {
				return gateway.ToolChoice{}, invalid("tool_choice", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
			}
			return gateway.ToolChoice{Mode: gateway.ChoiceRequired}, nil
		}
		return gateway.ToolChoice{}, invalid("tool_choice", "Invalid value for 'tool_choice': %q (expected none, auto, required or an object).", clip(s))
	}
	var o struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return gateway.ToolChoice{}, jsonError("tool_choice", err)
	}
	switch o.Type {
	case "function":
		for _, t := range req.Tools {
			if t.Name == o.Name {
				return gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: o.Name}, nil
			}
		}
		return gateway.ToolChoice{}, invalid("tool_choice.name", "Tool choice %q not found in 'tools' parameter.", clip(o.Name))
	case "shell", "local_shell", "shellgate:shell", "openrouter:shell":
		if p.shell == 0 || o.Type != p.shellType {
			return gateway.ToolChoice{}, invalid("tool_choice.type", "Tool choice %q not found in 'tools' parameter.", clip(o.Type))
		}
		return gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: shellFunction}, nil
	case "code_interpreter":
		if !p.interp {
			return gateway.ToolChoice{}, invalid("tool_choice.type", "Tool choice %q not found in 'tools' parameter.", clip(o.Type))
		}
		return gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: interpFunction}, nil
	case "programmatic_tool_calling":
		if !p.programmatic {
			return gateway.ToolChoice{}, invalid("tool_choice.type", "Tool choice %q not found in 'tools' parameter.", clip(o.Type))
		}
		return gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: gateway.ProgramFunction}, nil
	}
	return gateway.ToolChoice{}, invalid("tool_choice.type", "tool_choice of type %q is not supported by Shellgate (use none, auto, required, a function, the shell tool or code_interpreter).", clip(o.Type))
}
