package responses

// Programmatic tool calling: with {"type":"programmatic_tool_calling"} in
// tools, the function tools whose allowed_callers include "programmatic"
// can be called from JavaScript the model writes (gateway.ProgramTool on
// jsrun: the model sees the function "program" taking {"code"} and calls
// a tool as `await tools.NAME({...})`). A step is a program item (call_id,
// code, fingerprint); a tool call its code makes pauses it: the response
// ends (status completed) with the program item, whose fingerprint is the
// run's signed continuation, and a function_call with caller {"type":
// "program", "caller_id": <the program's call_id>} for each call waiting.
// The client's next request replays the items with a function_call_output
// for each call; the program resumes from the fingerprint (its earlier
// calls replayed from the continuation's ledger, not made again) to more
// calls — a new program item with a new fingerprint and its function_calls
// — or to its end, a program_output (result, status completed or
// incomplete) that the model reads next. Calls made by programs and their
// outputs are the client's business: the model never sees them.
//
// A function_call made by a program has the call_id <program call_id>.<the
// run's interruption id> ("call_abc.interrupt-1"), which names the
// interruption it answers on resume.

import (
	"encoding/json"
	"strings"

	"github.com/shellgate/shellgate/internal/gateway"
)

const (
	prefixProgram    = "prog_"
	prefixProgramOut = "progo_"
)

// programItem is the program output (and input) item.
type programItem struct {
	ID          string `json:"id"`
	Type        string `json:"type"` // program
	CallID      string `json:"call_id"`
	Code        string `json:"code"`
	Fingerprint string `json:"fingerprint"`
}

// programOutputItem is the program_output item.
type programOutputItem struct {
	ID     string `json:"id"`
	Type   string `json:"type"` // program_output
	CallID string `json:"call_id"`
	Result string `json:"result"`
	Status string `json:"status"` // completed | incomplete
}

// callerField is a tool call's caller.
type callerField struct {
	Type     string `json:"type"` // direct | program
	CallerID string `json:"caller_id,omitempty"`
}

func isProgram(step *gateway.Step) bool { return step.Call.Name == gateway.ProgramFunction }

// programCallID is the call_id of a function_call a program made.
func programCallID(c gateway.ToolCall) string { return c.Caller + "." + c.ID }

func newProgramItem(id string, step *gateway.Step) programItem {
	code, _ := gateway.ProgramCode(step.Call.Arguments)
	if d, ok := step.Result.Detail.(*gateway.ProgramDetail); ok && d.Code != "" {
		code = d.Code
	}
	return programItem{ID: id, Type: "program", CallID: step.Call.ID, Code: code, Fingerprint: step.Result.State}
}

func newProgramOutput(id string, step *gateway.Step) programOutputItem {
	status := "completed"
	if step.Result.IsError {
		status = "incomplete"
	}
	return programOutputItem{ID: id, Type: "program_output", CallID: step.Call.ID, Result: step.Result.Content, Status: status}
}

// programItems are a finished program step's items: the program item
// (unless an earlier response showed it and the step did not pause again)
// and, when it ended, its program_output.
func programItems(step *gateway.Step) []json.RawMessage {
	var out []json.RawMessage
	if !step.Resumed || step.Result.Paused != nil {
		out = append(out, raw(newProgramItem(newID(prefixProgram), step)))
	}
	if step.Result.Paused == nil {
		out = append(out, raw(newProgramOutput(newID(prefixProgramOut), step)))
	}
	return out
}

// functionCall is a client function call item.
func functionCall(id, status string, c gateway.ToolCall, args string) functionCallItem {
	it := functionCallItem{ID: id, Type: "function_call", Status: status, Arguments: args, CallID: c.ID, Name: c.Name}
	if c.Caller != "" {
		it.CallID = programCallID(c)
		it.Caller = &callerField{Type: "program", CallerID: c.Caller}
	}
	return it
}

// replayedProgram is a program of the input.
type replayedProgram struct {
	param       string // its latest program item
	code        string
	fingerprint string
	done        bool     // a program_output answers it
	pending     []string // call_ids of the function_calls after its latest program item
}

// programCall is a function_call a program made, replayed.
type programCall struct {
	caller string
	token  string
	answer *gateway.ToolResult
}

// programReplay reads the input's program items, the function calls the
// programs made and their outputs. None of them reaches the model but
// the program call and its program_output.
type programReplay struct {
	progs map[string]*replayedProgram
	calls map[string]*programCall
}

// item takes it when it is one of programmatic tool calling's items:
// handled says so, and entries are what the model sees of it.
func (r *programReplay) item(it *inputItem, param string) (handled bool, es []entry, err error) {
	if r.progs == nil {
		r.progs, r.calls = map[string]*replayedProgram{}, map[string]*programCall{}
	}
	switch it.Type {
	case "program":
		if err := need(param, "call_id", it.CallID); err != nil {
			return true, nil, err
		}
		if it.Code == nil {
			return true, nil, invalid(param+".code", "Missing required parameter: '%s.code'.", param)
		}
		if err := need(param, "fingerprint", it.Fingerprint); err != nil {
			return true, nil, err
		}
		if p, ok := r.progs[it.CallID]; ok {
			// The program paused again: its latest fingerprint counts.
			if p.done {
				return true, nil, invalid(param, "The program %s has its program_output before this program item: send its items in the order the responses gave them.", clip(it.CallID))
			}
			if *it.Code != p.code {
				return true, nil, invalid(param+".code", "Invalid '%s.code': the program %s has other code in an earlier program item; a program's code does not change.", param, clip(it.CallID))
			}
			p.param, p.fingerprint, p.pending = param, it.Fingerprint, nil
			return true, nil, nil
		}
		r.progs[it.CallID] = &replayedProgram{param: param, code: *it.Code, fingerprint: it.Fingerprint}
		args, _ := json.Marshal(map[string]string{"code": *it.Code})
		return true, []entry{callEntry(famProgram, it.CallID, gateway.ProgramFunction, string(args))}, nil
	case "program_output":
		if err := need(param, "call_id", it.CallID); err != nil {
			return true, nil, err
		}
		p, ok := r.progs[it.CallID]
		if !ok || p.done {
			return true, nil, invalid("input", "No program found for program_output with call_id %s.", clip(it.CallID))
		}
		p.done = true
		var result string
		if len(it.Result) > 0 && string(it.Result) != "null" {
			if err := json.Unmarshal(it.Result, &result); err != nil {
				return true, nil, invalid(param+".result", "Invalid type for '%s.result': expected a string.", param)
			}
		}
		return true, []entry{outputEntry(famProgram, &gateway.ToolResult{CallID: it.CallID, Content: result, IsError: it.Status == "incomplete"})}, nil
	case "function_call":
		if it.Caller == nil || it.Caller.Type == "direct" || it.Caller.Type == "" {
			return false, nil, nil
		}
		if it.Caller.Type != "program" {
			return true, nil, invalid(param+".caller.type", "Invalid value: %q. Supported values are: 'direct' and 'program'.", clip(it.Caller.Type))
		}
		p, ok := r.progs[it.Caller.CallerID]
		if !ok || p.done {
			return true, nil, invalid(param+".caller.caller_id", "Invalid '%s.caller.caller_id': %q names no program item before it that waits for its calls.", param, clip(it.Caller.CallerID))
		}
		token, ok := strings.CutPrefix(it.CallID, it.Caller.CallerID+".")
		if !ok || token == "" {
			return true, nil, invalid(param+".call_id", "Invalid '%s.call_id': %q is not the call_id of a function call Shellgate's program %s made (%s.<interruption>).", param, clip(it.CallID), clip(it.Caller.CallerID), clip(it.Caller.CallerID))
		}
		if _, dup := r.calls[it.CallID]; dup {
			return true, nil, invalid(param+".call_id", "Duplicate function call %s in input.", clip(it.CallID))
		}
		r.calls[it.CallID] = &programCall{caller: it.Caller.CallerID, token: token}
		p.pending = append(p.pending, it.CallID)
		return true, nil, nil
	case "function_call_output":
		c, ok := r.calls[it.CallID]
		if !ok {
			return false, nil, nil
		}
		res, err := functionOutput(it.Output, param+".output")
		if err != nil {
			return true, nil, err
		}
		res.CallID = it.CallID
		c.answer = res
		return true, nil, nil
	}
	return false, nil, nil
}

// resume is the program the input leaves waiting for its calls' outputs,
// as the run's Resume (nil when there is none).
func (r *programReplay) resume() (*gateway.Resume, error) {
	var open []string
	for id, p := range r.progs {
		if !p.done {
			open = append(open, id)
		}
	}
	if len(open) == 0 {
		return nil, nil
	}
	if len(open) > 1 {
		return nil, invalid("input", "No program_output found for programs %s and %s: at most one program may wait for its function calls, the last one.", clip(open[0]), clip(open[1]))
	}
	id := open[0]
	p := r.progs[id]
	if len(p.pending) == 0 {
		return nil, invalid("input", "No program_output found for program %s, and no function call of it follows its latest program item (%s).", clip(id), p.param)
	}
	args, _ := json.Marshal(map[string]string{"code": p.code})
	rs := &gateway.Resume{Call: gateway.ToolCall{ID: id, Name: gateway.ProgramFunction, Arguments: string(args)}, State: p.fingerprint}
	for _, cid := range p.pending {
		c := r.calls[cid]
		if c.answer == nil {
			return nil, invalid("input", "No tool output found for function call %s (called by program %s): send a function_call_output for each function call the program made.", clip(cid), clip(id))
		}
		rs.Answers = append(rs.Answers, gateway.ToolAnswer{Call: c.token, Content: c.answer.Content})
	}
	return rs, nil
}

// checkResume says whether the conversation can resume rs's program: its
// call must be in the last assistant message.
func checkResume(msgs []gateway.Message, rs *gateway.Resume) error {
	n := len(msgs)
	if n > 0 && msgs[n-1].Role == gateway.RoleUser {
		n--
	}
	if n > 0 && msgs[n-1].Role == gateway.RoleAssistant {
		for _, pt := range msgs[n-1].Parts {
			if pt.Kind == gateway.PartToolCall && pt.Call != nil && pt.Call.ID == rs.Call.ID {
				return nil
			}
		}
	}
	return invalid("input", "The program %s waits for its function calls: the input must end with the items of the response that paused it (its program item and function calls) and their function_call_outputs.", clip(rs.Call.ID))
}
