package messages

// Programmatic tool calling: client tools whose allowed_callers name the
// request's code execution tool version are async functions in the code
// of its Python tool (code_execution, gateway.CodeTool with Programmatic).
// A call pauses the execution in the container's kernel; the response
// ends with the code_execution server_tool_use and the client's tool_use,
// whose caller {"type": <version>, "tool_id": <server_tool_use id>} says
// the code made it, and stop_reason "tool_use". The client's next request
// ends with that assistant content and a user tool_result for the call:
// parse finds the paused server_tool_use (the one left without a result)
// and the loop resumes it (gateway.Run.Resume) in the container the
// request names. Calls made by code and their results are the client's
// business: the model never sees them, only the code_execution_tool_result
// that ends the execution.

import (
	"regexp"
	"slices"
	"strings"

	"github.com/shellgate/shellgate/internal/gateway"
)

var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// pyKeywords are Python's keywords (and soft keywords that cannot name a
// function called as name(...) without confusion).
var pyKeywords = map[string]bool{"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true, "else": true, "except": true,
	"finally": true, "for": true, "from": true, "global": true, "if": true, "import": true, "in": true, "is": true, "lambda": true,
	"nonlocal": true, "not": true, "or": true, "pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true}

// codeCallers are the allowed_callers naming a code execution version.
var codeCallers = []string{"code_execution_20250825", "code_execution_20260120", "code_execution_20260521"}

// customTool is a client tool as declared, for programmaticTools.
type customTool struct {
	i    int
	tool gateway.Tool
	code string // the code execution version allowed to call it; "" none
}

// progCall is a client tool_use made by code, on replay.
type progCall struct {
	exec  string // the id of the server_tool_use whose code made it
	token string // the kernel's token for the call (the id without toolu_)
	msg   int    // index of the message holding it
	order int    // its place among the conversation's calls made by code
}

// progID is the id of a tool_use made by code: toolu_ and the kernel's
// token for the call.
var progID = regexp.MustCompile(`^toolu_([0-9a-f]{24})$`)

// allowedCallers reads a custom tool's allowed_callers: whether the model
// may call it, and which code execution version's code may.
func allowedCallers(i int, in []string) (direct bool, code string, err error) {
	if in == nil {
		return true, "", nil
	}
	if len(in) == 0 {
		return false, "", badRequest("tools.%d.allowed_callers: empty; name \"direct\" (the model calls it) and/or a code execution version (code calls it)", i)
	}
	for j, c := range in {
		switch {
		case c == "direct":
			direct = true
		case slices.Contains(codeCallers, c):
			if code != "" && code != c {
				return false, "", badRequest("tools.%d.allowed_callers.%d: %q and %q: one request has one code execution tool", i, j, code, c)
			}
			code = c
		default:
			return false, "", badRequest("tools.%d.allowed_callers.%d: %q is not one of direct, %s", i, j, clip(c), strings.Join(codeCallers, ", "))
		}
	}
	return direct, code, nil
}

// programmaticTools adds the Python code_execution tool whose code calls
// the client tools that allow it.
func (p *parsed) programmaticTools(claim func(int, string) error, addServer func(int, string, gateway.ServerTool, toolKind) error) error {
	var prog gateway.Programmatic
	for _, c := range p.custom {
		switch {
		case c.code == "":
			prog.Denied = append(prog.Denied, c.tool.Name)
		case p.codeExec == "":
			return badRequest("tools.%d.allowed_callers: %s names a code execution tool the request does not have; add {\"type\":%q,\"name\":\"code_execution\"} to tools", c.i, c.code, c.code)
		case c.code != p.codeExec:
			return badRequest("tools.%d.allowed_callers: %s is not the request's code execution tool, %s", c.i, c.code, p.codeExec)
		case !pyIdent.MatchString(c.tool.Name) || pyKeywords[c.tool.Name]:
			return badRequest("tools.%d.name: %q cannot be called from code: a tool callable from code needs a name that is a Python identifier (letters, digits, '_', not a keyword)", c.i, c.tool.Name)
		default:
			prog.Tools = append(prog.Tools, c.tool)
		}
	}
	if len(prog.Tools) == 0 {
		return nil
	}
	prog.Caller = p.codeExec
	return addServer(p.codeExecAt, gateway.CodeExecution, gateway.CodeTool{Programmatic: &prog}, toolKind{kind: "codeexec", typ: p.codeExec})
}

// programmaticUse takes a replayed tool_use made by code: it is recorded,
// not shown to the model.
func (p *parsed) programmaticUse(where string, i int, b block) error {
	if !slices.Contains(codeCallers, b.Caller.Type) {
		return badRequest("%s.caller.type: %q is not direct or one of %s", where, clip(b.Caller.Type), strings.Join(codeCallers, ", "))
	}
	if _, ok := p.execCalls[b.Caller.ToolID]; !ok {
		return badRequest("%s.caller.tool_id: %q names no code_execution server_tool_use before it", where, clip(b.Caller.ToolID))
	}
	m := progID.FindStringSubmatch(b.ID)
	if m == nil {
		return badRequest("%s.id: %q is not the id of a tool call made by Shellgate's code execution (toolu_ and 24 hex digits)", where, clip(b.ID))
	}
	if _, dup := p.prog[b.ID]; dup {
		return badRequest("%s.id: tool_use id %q is used twice", where, clip(b.ID))
	}
	p.prog[b.ID] = progCall{exec: b.Caller.ToolID, token: m[1], msg: i, order: len(p.prog)}
	return nil
}

// resumeCall finds the server tool call left open, which must be a
// code execution paused on client tool calls answered in the last
// message, and makes it the run's Resume. open are the server_tool_use
// ids without a result block; msgs the conversation as the model will
// see it.
func (p *parsed) resumeCall(open map[string]string, last int, msgs []gateway.Message) ([]gateway.Message, error) {
	if len(open) == 0 {
		return msgs, nil
	}
	// The client calls made by code in the last assistant message, in
	// order, and the execution that waits for them.
	var paused []string
	for id, pc := range p.prog {
		if _, ok := open[pc.exec]; ok && pc.msg == last-1 {
			paused = append(paused, id)
		}
	}
	slices.SortFunc(paused, func(a, b string) int { return p.prog[a].order - p.prog[b].order })
	exec := ""
	if len(paused) > 0 {
		exec = p.prog[paused[0]].exec
	}
	for id := range open {
		if id == exec {
			continue
		}
		for tu, pc := range p.prog {
			if pc.exec == id {
				return nil, badRequest("messages: the code of server_tool_use %q waits for the result of tool_use %q: the request must end with the assistant message holding that tool_use and a user message with its tool_result", clip(id), clip(tu))
			}
		}
		return nil, badRequest("messages: server_tool_use %q has no result block after it", clip(id))
	}
	rs := &gateway.Resume{Call: *p.execCalls[exec]}
	for _, id := range paused {
		ans, ok := p.answers[id]
		if !ok || p.answerMsg[id] != last {
			return nil, badRequest("messages.%d: tool_use %q (called by the code of server_tool_use %q) needs its tool_result in the last user message", last, clip(id), clip(exec))
		}
		rs.Answers = append(rs.Answers, gateway.ToolAnswer{Call: p.prog[id].token, Content: ans.Content, IsError: ans.IsError})
	}
	if ct, ok := p.run.ServerTools[gateway.CodeExecution].(gateway.CodeTool); !ok || ct.Programmatic == nil {
		return nil, badRequest("tools: the conversation resumes code that calls client tools; send the tools of the request that made the call (with their allowed_callers) and its code execution tool")
	}
	sel := p.run.Select
	if sel.ContainerReference == "" && sel.BodySessionID == "" && sel.HeaderSessionID == "" {
		// Anthropic's words, then which call waits.
		return nil, badRequest("container_id is required when there are pending tool uses generated by code execution with tools: send \"container\" with the container id of the response that made the call (the code of server_tool_use %q waits for tool_use %q in that container)", clip(exec), clip(paused[0]))
	}
	// The client's other content of its last message stays in the
	// conversation (screened with it); the loop puts it after the result.
	n := len(msgs)
	if n > 0 && msgs[n-1].Role == gateway.RoleUser {
		n--
	}
	if n == 0 || msgs[n-1].Role != gateway.RoleAssistant || !holdsCall(msgs[n-1], exec) {
		return nil, badRequest("messages: the code_execution server_tool_use %q must be in the last assistant message, followed only by the tool_use blocks its code made", clip(exec))
	}
	p.run.Resume = rs
	return msgs, nil
}

func holdsCall(m gateway.Message, id string) bool {
	for _, pt := range m.Parts {
		if pt.Kind == gateway.PartToolCall && pt.Call != nil && pt.Call.ID == id {
			return true
		}
	}
	return false
}
