package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/shellgate/shellgate/internal/gateway"
)

// streamer is the gateway.Sink of a streamed request: it writes the run as
// Server-Sent Events in the Responses grammar as it happens, every event
// with the next sequence_number, and keeps each finished item at its
// output_index so that response.completed carries exactly the items the
// output_item.done events carried.
//
// A shell step (native shape) is written in the order the live API uses
// (wire-formats §7.1): the shell_call added in_progress with no commands,
// per command shell_call_command.added/delta/done, the shell_call done;
// then the shell_call_output added (completed, empty output), its
// shell_call_output_content.delta events while the commands run, one
// shell_call_output_content.done per command when the step ends, and the
// output item done.
type streamer struct {
	w http.ResponseWriter
	m *meta

	mu     sync.Mutex // StepOutput comes from the sandbox's output goroutine
	seq    int64
	broken bool       // a write failed: the client is gone
	items  []itemSlot // by output_index
	text   *textState // the message being streamed, if any
	steps  map[*gateway.Step]*stepState
	cites  citer // files of code_interpreter steps the next message cites
	buf    bytes.Buffer
}

type itemSlot struct {
	done json.RawMessage // the item as output_item.done carried it; nil while open
}

type textState struct {
	index int
	id    string
}

type stepState struct {
	interp bool // a code_interpreter step (callID, callIdx: its item)
	// program: a program step (callID, callIdx: its program item, open
	// while progOpen; a resumed step has none until it pauses again).
	program  bool
	progOpen bool
	view     stepView
	callIdx  int
	callID   string
	outIdx   int
	outID    string
	done     bool
}

var _ gateway.Sink = (*streamer)(nil)

func newStreamer(w http.ResponseWriter, m *meta) *streamer {
	return &streamer{w: w, m: m, steps: map[*gateway.Step]*stepState{}}
}

// event is one event's fields besides type and sequence_number.
type event map[string]any

func (s *streamer) emit(typ string, ev event) {
	if s.broken {
		return
	}
	ev["type"] = typ
	ev["sequence_number"] = s.seq
	s.seq++
	s.buf.Reset()
	fmt.Fprintf(&s.buf, "event: %s\ndata: %s\n\n", typ, raw(ev))
	s.write()
}

// write sends the event in s.buf and flushes it.
func (s *streamer) write() {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		s.broken = true
		return
	}
	if err := http.NewResponseController(s.w).Flush(); err != nil {
		s.broken = true
	}
}

// emitResponse is emit(typ, event{"response": r}) (the same bytes: a
// map's keys are written sorted) with r encoded by encodeResponse, so
// that the items are not encoded a second time.
func (s *streamer) emitResponse(typ string, r *response) {
	if s.broken {
		return
	}
	seq := s.seq
	s.seq++
	s.buf.Reset()
	fmt.Fprintf(&s.buf, "event: %s\ndata: {\"response\":%s,\"sequence_number\":%d,\"type\":%s}\n\n", typ, encodeResponse(r), seq, raw(typ))
	s.write()
}

// start sends the headers, response.created and response.in_progress.
func (s *streamer) start() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m.response("in_progress", nil, nil, nil)
	s.emit("response.created", event{"response": r})
	s.emit("response.in_progress", event{"response": r})
}

// add opens a new item slot and returns its output_index.
func (s *streamer) add(item any) int {
	s.items = append(s.items, itemSlot{})
	i := len(s.items) - 1
	s.emit("response.output_item.added", event{"output_index": i, "item": item})
	return i
}

func (s *streamer) finish(i int, item any) {
	b := raw(item)
	s.items[i].done = b
	s.emit("response.output_item.done", event{"output_index": i, "item": b})
}

func (s *streamer) openText() *textState {
	if s.text == nil {
		id := newID(prefixMessage)
		i := s.add(newMessage(id, "in_progress"))
		s.text = &textState{index: i, id: id}
		s.emit("response.content_part.added", event{"item_id": id, "output_index": i, "content_index": 0, "part": newOutputText("")})
	}
	return s.text
}

func (s *streamer) TextDelta(text string) {
	if text == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.openText()
	s.emit("response.output_text.delta", event{"item_id": t.id, "output_index": t.index, "content_index": 0, "delta": text, "logprobs": []any{}})
}

func (s *streamer) TextDone(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.text == nil && text == "" {
		return
	}
	t := s.openText()
	anns := s.cites.cite(text, s.m.containerID)
	for k, a := range anns {
		s.emit("response.output_text.annotation.added", event{"item_id": t.id, "output_index": t.index, "content_index": 0, "annotation_index": k, "annotation": a})
	}
	s.emit("response.output_text.done", event{"item_id": t.id, "output_index": t.index, "content_index": 0, "text": text, "logprobs": []any{}})
	s.emit("response.content_part.done", event{"item_id": t.id, "output_index": t.index, "content_index": 0, "part": newOutputText(text, anns...)})
	s.finish(t.index, newMessage(t.id, "completed", newOutputText(text, anns...)))
	s.text = nil
}

func (s *streamer) ClientCall(c gateway.ToolCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Caller != "" {
		s.programPaused(c.Caller)
	}
	id := newID(prefixFunction)
	item := functionCall(id, "in_progress", c, "")
	i := s.add(item)
	s.emit("response.function_call_arguments.delta", event{"item_id": id, "output_index": i, "delta": c.Arguments})
	s.emit("response.function_call_arguments.done", event{"item_id": id, "output_index": i, "arguments": c.Arguments, "name": c.Name})
	item.Status, item.Arguments = "completed", c.Arguments
	s.finish(i, item)
}

// programPaused finishes the program item of the program step whose call
// id is caller, now that its pause gave the fingerprint (a resumed step
// that paused again gets a new program item).
func (s *streamer) programPaused(caller string) {
	for step, st := range s.steps {
		if !st.program || step.Call.ID != caller {
			continue
		}
		if st.progOpen {
			s.finish(st.callIdx, newProgramItem(st.callID, step))
			st.progOpen = false
		} else if st.callID == "" {
			st.callID = newID(prefixProgram)
			item := newProgramItem(st.callID, step)
			st.callIdx = s.add(item)
			s.finish(st.callIdx, item)
		}
		return
	}
}

func (s *streamer) StepStart(step *gateway.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isInterp(step) {
		s.interpStart(step)
		return
	}
	if isProgram(step) {
		st := &stepState{program: true}
		s.steps[step] = st
		if !step.Resumed {
			st.callID, st.progOpen = newID(prefixProgram), true
			st.callIdx = s.add(newProgramItem(st.callID, step))
		}
		return
	}
	st := &stepState{view: viewCall(step.Call)}
	s.steps[step] = st
	v, cid := st.view, s.m.containerOf(step)
	switch s.m.p.shell {
	case shellNative:
		st.callID = newID(prefixShell)
		pending := v
		pending.action = shellActionOut{Commands: []string{}}
		st.callIdx = s.add(shellCall(st.callID, "in_progress", pending, cid))
		for k, c := range v.action.Commands {
			s.emit("response.shell_call_command.added", event{"output_index": st.callIdx, "command_index": k, "command": ""})
			s.emit("response.shell_call_command.delta", event{"output_index": st.callIdx, "command_index": k, "delta": c})
			s.emit("response.shell_call_command.done", event{"output_index": st.callIdx, "command_index": k, "command": c})
		}
		s.finish(st.callIdx, shellCall(st.callID, "completed", v, cid))
		st.outID = newID(prefixShellOut)
		st.outIdx = s.add(shellOutput(st.outID, "completed", v, nil))
	case shellLocal:
		st.callID = newID(prefixLocal)
		st.callIdx = s.add(localCall(st.callID, "in_progress", v))
		s.finish(st.callIdx, localCall(st.callID, "completed", v))
	default:
		st.callID = newID(prefixRouter)
		st.callIdx = s.add(router(s.m.p.shellType, st.callID, "in_progress", v, cid))
	}
}

func (s *streamer) StepOutput(step *gateway.Step, cmd, stream int, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.steps[step]
	if st == nil || st.done || st.interp || s.m.p.shell != shellNative {
		return
	}
	key := "stdout"
	if stream == 2 {
		key = "stderr"
	}
	s.emit("response.shell_call_output_content.delta", event{"item_id": st.outID, "output_index": st.outIdx, "command_index": cmd, "delta": map[string]string{key: text}})
}

func (s *streamer) StepDone(step *gateway.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.steps[step]
	if st == nil {
		return
	}
	st.done = true
	if st.program {
		if st.progOpen {
			s.finish(st.callIdx, newProgramItem(st.callID, step))
			st.progOpen = false
		}
		item := newProgramOutput(newID(prefixProgramOut), step)
		s.finish(s.add(item), item)
		return
	}
	if st.interp {
		s.emit("response.code_interpreter_call.completed", event{"item_id": st.callID, "output_index": st.callIdx})
		s.finish(st.callIdx, s.m.interpDone(st.callID, step))
		s.cites.add(step)
		return
	}
	v := viewStep(step)
	switch s.m.p.shell {
	case shellNative:
		outs := v.shownOutputs()
		for k, o := range outs {
			s.emit("response.shell_call_output_content.done", event{"item_id": st.outID, "output_index": st.outIdx, "command_index": k, "output": []any{o}})
		}
		s.finish(st.outIdx, shellOutput(st.outID, v.outputStatus(), v, outs))
	case shellLocal:
		item := localOutput(v, step.Result.Content)
		i := s.add(item)
		s.finish(i, item)
	default:
		s.finish(st.callIdx, router(s.m.p.shellType, st.callID, "completed", v, s.m.containerOf(step)))
	}
}

// interpStart shows a code_interpreter call about to run: the item added,
// its code, and interpreting.
func (s *streamer) interpStart(step *gateway.Step) {
	st := &stepState{interp: true, callID: newID(prefixInterp)}
	s.steps[step] = st
	st.callIdx = s.add(s.m.interpPending(st.callID, step))
	ev := func() event { return event{"item_id": st.callID, "output_index": st.callIdx} }
	s.emit("response.code_interpreter_call.in_progress", ev())
	code := interpCode(step)
	if code != "" {
		e := ev()
		e["delta"] = code
		s.emit("response.code_interpreter_call_code.delta", e)
	}
	e := ev()
	e["code"] = code
	s.emit("response.code_interpreter_call_code.done", e)
	s.emit("response.code_interpreter_call.interpreting", ev())
}

// output is the finished items in output_index order.
func (s *streamer) output() []json.RawMessage {
	out := []json.RawMessage{}
	for _, it := range s.items {
		if it.done != nil {
			out = append(out, it.done)
		}
	}
	return out
}

// complete ends the stream with response.completed (or the incomplete
// status the run ended with).
func (s *streamer) complete(res *gateway.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m.response("completed", s.output(), res, nil)
	typ := "response.completed"
	if r.Status == "incomplete" {
		typ = "response.incomplete"
	}
	s.emitResponse(typ, r)
}

// fail ends the stream with response.failed, the error in the response.
func (s *streamer) fail(e *apiError, res *gateway.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitResponse("response.failed", s.m.response("failed", s.output(), res, e))
}
