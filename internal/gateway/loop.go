package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/identity"
)

// Tool-call budget of one request (SPEC §1.5): max_tool_calls defaults to
// 30 and larger values are clamped to 30.
const (
	DefaultMaxToolCalls = 30
	MaxToolCalls        = 30
)

// MaxServerToolImages is how many images of server-tool results (a Python
// call's figures, new or replayed) one request keeps in the conversation it
// sends the model: those of the latest results. Each call returns at most
// tool.MaxPythonImages of 1 MiB, but a request runs up to 30 of them and
// every upstream call resends the whole conversation. The images of older
// results are replaced by a note in their text (ImagesDroppedNote).
const MaxServerToolImages = 8

// ImagesDroppedNote ends the text of a result whose images were left out.
const ImagesDroppedNote = "\n[shellgate: the %d image(s) of this result are no longer shown: a request keeps only the images of its latest tool results, at most %d]"

// BudgetMode says what the loop does when max_tool_calls is spent and the
// model still wants tools.
type BudgetMode int

const (
	// FinalAnswer asks the model once more with tool_choice none (Responses).
	FinalAnswer BudgetMode = iota
	// Pause stops with StopPause (Messages' pause_turn): the client resends
	// the conversation to continue.
	Pause
)

// Run is one client request for the loop.
type Run struct {
	Model   Model
	Request *Request // the conversation and the client's own tools
	// ServerTools by the function name the model sees; the loop adds their
	// functions to Request.Tools.
	ServerTools map[string]ServerTool
	// Hosting lists the server tools (by name) the client let the
	// provider run itself where it can (engine auto, native.go); the
	// others always run in the sandbox.
	Hosting      map[string]Hosting
	Sandboxes    Sandboxes
	Select       identity.Request
	Open         OpenOptions
	Uploads      []Upload // copied into the container when it is opened
	MaxToolCalls int      // 0: DefaultMaxToolCalls
	Budget       BudgetMode
	Sink         Sink // nil: not streamed
	// Resume, when set, continues a server tool call paused on a client
	// tool call in an earlier request (programmatic tool calling) before
	// the model is asked anything: Request.Messages end with the
	// assistant turn holding Resume.Call, and maybe a user message with the
	// client's other content (results of its direct tool calls, text),
	// which then follows the resumed call's result.
	Resume *Resume
}

// Resume is a paused server tool call and the client's answers to the
// client tool calls its code made.
type Resume struct {
	Call    ToolCall // the server tool call, as the conversation holds it
	Answers []ToolAnswer
	// State is the paused step's StepResult.State as the client handed it
	// back (a program's fingerprint); "" for a tool that keeps its state
	// itself (the Python kernel).
	State string
}

// Upload is a workspace file to copy into the container before its first
// command (Responses environment.file_ids, Messages container_upload).
type Upload struct {
	FileID string
	Dir    string // relative to the home; "" for the home itself
}

// Sink receives a run's progress as it happens, for streaming frontends.
// Calls come from the loop's goroutine, in order; a Sink must not block
// for long (it writes to the client).
type Sink interface {
	// TextDelta is more assistant text; a new text item starts when the
	// previous item was not text or after TextDone.
	TextDelta(text string)
	// TextDone ends the current text item with its full text.
	TextDone(text string)
	// ClientCall is a call of a client function tool (complete).
	ClientCall(call ToolCall)
	// StepStart: a server tool call is about to run (arguments complete).
	StepStart(s *Step)
	// StepOutput is command output of the running step.
	StepOutput(s *Step, cmd, stream int, text string)
	// StepDone: the step's result is known.
	StepDone(s *Step)
}

// ItemKind says which field of an Item is set.
type ItemKind int

const (
	ItemText ItemKind = iota
	ItemClientCall
	ItemStep
)

// Item is one output of the run, in order.
type Item struct {
	Kind ItemKind
	Text string
	Call *ToolCall
	Step *Step // the step; for a client call made by code, the step whose code made it
}

// Step is one server tool call and its result.
type Step struct {
	Call   ToolCall
	Tool   ServerTool
	Result StepResult
	Index  int // 0-based among the run's steps
	// Start and End bound the step's run (equal for a step that did not
	// run: the budget was spent).
	Start, End time.Time
	// Resumed says the step was started by an earlier request (Run.Resume):
	// its call was shown then, its result is this run's.
	Resumed bool
	// Native says the provider ran the call with its own hosted tool
	// (native.go): Result is what it reported, nothing ran here.
	Native bool
}

// UpstreamCall is one call of the run to the upstream model, for traces.
type UpstreamCall struct {
	Start, End time.Time
	ID         string // the upstream's response id
	Model      string // as the upstream named it
	Stop       StopReason
	Usage      Usage
	Err        error // the call failed: an *UpstreamError, or ctx's error
}

// Result is a finished run.
type Result struct {
	Items       []Item
	Stop        StopReason
	Usage       Usage
	Model       string // as the upstream named it in its last turn
	ContainerID string // "" when no sandbox was opened
	ExpiresAt   time.Time
	// ToolCallsRequested counts the server tool calls the model made,
	// ToolCallsExecuted those that ran in the sandbox.
	ToolCallsRequested int
	ToolCallsExecuted  int
	// ToolCallsNative counts the calls the provider ran itself (of
	// ToolCallsRequested; native.go); NativeContainer is the provider's
	// container they ran in, when it said.
	ToolCallsNative int
	NativeContainer Container
	CostMicroUSD    int64
	UpstreamCalls   int
	// Calls are the upstream calls in order, a failed one included.
	Calls []UpstreamCall
}

// Observer sees a run when Execute returns: its request (whose Messages
// then end with the run's own turns), its result (cost included, and what
// was done before an error) and its error. The server's request logs and
// trace broadcast set one each on the request's context (WithObserver); it
// runs on the request's goroutine after the sandbox session is closed, so
// it must be quick, and must not keep res's items beyond the call unless
// it copies them.
type Observer func(run *Run, res *Result, err error)

type observerKey struct{}

// WithObserver returns ctx with obs, which Execute calls when it returns,
// after any observer ctx already had.
func WithObserver(ctx context.Context, obs Observer) context.Context {
	if prev, ok := ctx.Value(observerKey{}).(Observer); ok && prev != nil {
		next := obs
		obs = func(run *Run, res *Result, err error) {
			prev(run, res, err)
			next(run, res, err)
		}
	}
	return context.WithValue(ctx, observerKey{}, obs)
}

// Execute runs the loop: upstream turn, server tool calls, repeat, until
// the model answers, calls a client tool, or the budget ends it. The
// request's sandbox session is closed (and billed) before Execute returns,
// so before the frontend answers: a bill the ledger did not take is
// Execute's error (when the run had none), and the frontend answers it
// instead of the completion. On error the Result holds what was done
// before it.
func Execute(ctx context.Context, run *Run) (*Result, error) {
	res, err := execute(ctx, run)
	if obs, ok := ctx.Value(observerKey{}).(Observer); ok && obs != nil {
		obs(run, res, err)
	}
	return res, err
}

// Serve is Execute for a frontend's handler: done gets the result, failed
// the error, unless ctx ended (the client went away: no one is left to
// answer).
func Serve(ctx context.Context, run *Run, done func(*Result), failed func(error)) {
	res, err := Execute(ctx, run)
	if err != nil {
		if ctx.Err() == nil {
			failed(err)
		}
		return
	}
	done(res)
}

func execute(ctx context.Context, run *Run) (res *Result, err error) {
	max := run.MaxToolCalls
	if max <= 0 || max > MaxToolCalls {
		max = DefaultMaxToolCalls
	}
	req := run.Request
	req.Encoded = &Encoded{}
	hosted := run.HostedTools()
	// A container the client named is the provider's when the provider
	// runs every server tool (a frontend opens none then).
	var container string
	if len(hosted) == len(run.ServerTools) {
		container = run.Select.ContainerReference
	}
	for _, name := range slices.Sorted(maps.Keys(run.ServerTools)) {
		if n, ok := hosted[name]; ok {
			if !slices.ContainsFunc(req.Tools, func(t Tool) bool { return t.Native == n }) {
				req.Tools = append(req.Tools, Tool{Name: n, Native: n, Container: container})
			}
			continue
		}
		req.Tools = append(req.Tools, run.ServerTools[name].Function())
	}
	if n, ok := hosted[req.ToolChoice.Name]; ok && req.ToolChoice.Mode == ChoiceTool {
		// The client chose its tool: the provider's own one it became.
		req.ToolChoice.Name = n
	}
	res = &Result{}
	box := &lazyBox{run: run}
	defer func() {
		if box.sb != nil {
			// Billed before the answer: a bill the ledger did not take
			// fails the request (unless it failed already).
			cerr := box.sb.Close()
			res.CostMicroUSD = box.sb.Cost() // what Close billed
			if cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	// figures are the results of server-tool calls that carry images,
	// oldest first (boundImages).
	figures := serverToolImages(req.Messages, run.ServerTools)
	boundImages(figures, MaxServerToolImages)
	finalTurn := false
	// prepared is closed when the Preparer's work on the conversation
	// (started while the tools run) is done; nil when none is running.
	var prepared chan struct{}
	waitPrepared := func() {
		if prepared != nil {
			<-prepared
			prepared = nil
		}
	}
	defer func() {
		waitPrepared()
		if req.Encoded.Next != nil {
			req.Encoded.Next.Discard()
			req.Encoded.Next = nil
		}
	}()
	if run.Resume != nil {
		if done, err := resume(ctx, run, res, box); done || err != nil {
			return res, err
		}
	}
	for {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		start := time.Now()
		turn, streamed, err := turnOnce(ctx, run, req)
		call := UpstreamCall{Start: start, End: time.Now(), Err: err}
		if turn != nil {
			call.ID, call.Model, call.Stop, call.Usage = turn.ID, turn.Model, turn.Stop, turn.Usage
		}
		res.Calls = append(res.Calls, call)
		if err != nil {
			return res, err
		}
		res.UpstreamCalls++
		res.Usage.Add(turn.Usage)
		res.Model = turn.Model
		res.Stop = turn.Stop
		// The provider's own runs are steps already done (native.go); the
		// model reads them next as calls and results.
		var nativeSteps map[*HostedCall]*Step
		var nativeResults []Part
		parts := turn.Parts
		for _, p := range turn.Parts {
			if p.Kind == PartHosted {
				if nativeSteps == nil {
					nativeSteps = map[*HostedCall]*Step{}
				}
				nativeSteps[p.Hosted] = hostedStep(run, hosted, p.Hosted)
			}
		}
		if nativeSteps != nil {
			parts, nativeResults = asCalls(turn.Parts, nativeSteps)
		}
		req.Messages = append(req.Messages, Message{Role: RoleAssistant, Parts: parts})
		if pr, ok := run.Model.Upstream.(Preparer); ok && !finalTurn && runsTools(run, turn) {
			prepared = make(chan struct{})
			snap := *req // the loop appends to req.Messages only after waitPrepared
			go func(done chan struct{}) {
				defer close(done)
				pr.Prepare(ctx, &snap, run.Sink != nil)
			}(prepared)
		}

		var results []Part
		clientCalls := 0
		paused := false
		for i, p := range turn.Parts {
			switch p.Kind {
			case PartText:
				res.Items = append(res.Items, Item{Kind: ItemText, Text: p.Text})
				if run.Sink != nil && !streamed[i] && p.Text != "" {
					// Text after a tool call (or from an upstream that
					// did not stream it) goes out in its place.
					run.Sink.TextDelta(p.Text)
					run.Sink.TextDone(p.Text)
				}
			case PartHosted:
				step := nativeSteps[p.Hosted]
				if step == nil {
					continue
				}
				step.Index = stepCount(res)
				step.Start = time.Now()
				step.End = step.Start
				res.ToolCallsRequested++
				res.ToolCallsNative++
				if p.Hosted.ContainerID != "" {
					res.NativeContainer = Container{ID: p.Hosted.ContainerID, ExpiresAt: p.Hosted.ContainerExpiresAt}
				}
				res.Items = append(res.Items, Item{Kind: ItemStep, Step: step})
				if run.Sink != nil {
					run.Sink.StepStart(step)
					run.Sink.StepDone(step)
				}
			case PartToolCall:
				st, isServer := run.ServerTools[p.Call.Name]
				if !isServer {
					clientCalls++
					c := *p.Call
					res.Items = append(res.Items, Item{Kind: ItemClientCall, Call: &c})
					if run.Sink != nil {
						run.Sink.ClientCall(c)
					}
					continue
				}
				res.ToolCallsRequested++
				if finalTurn {
					// The model was told no tools; it is not run, and the
					// conversation ends here.
					continue
				}
				step := &Step{Call: *p.Call, Tool: st, Index: stepCount(res)}
				res.Items = append(res.Items, Item{Kind: ItemStep, Step: step})
				if run.Sink != nil {
					run.Sink.StepStart(step)
				}
				step.Start = time.Now()
				if step.Index >= max {
					step.Result = StepResult{IsError: true, Content: fmt.Sprintf("error: not run: this request's limit of %d tool calls (max_tool_calls) is spent; answer with what you have", max),
						Detail: &ShellDetail{Error: "max_tool_calls reached", ErrorCode: "too_many_requests"}}
					step.End = step.Start
				} else {
					runStep(run, res, step, func(onOut func(cmd, stream int, text string)) StepResult {
						return st.Run(ctx, box.get, step.Call, onOut)
					})
					if box.fatal != nil {
						// The request named a container it cannot have
						// (another workspace's, expired): the request fails,
						// the model is not asked to work around it.
						return res, box.fatal
					}
				}
				if step.Result.Paused != nil {
					// The code waits for a client tool: the client
					// answers it in its next request (Run.Resume).
					pauseStep(run, res, step)
					paused = true
					continue
				}
				if run.Sink != nil {
					run.Sink.StepDone(step)
				}
				r := step.toolResult()
				results = append(results, Part{Kind: PartToolResult, Result: r})
				if len(r.Images) > 0 {
					figures = append(figures, r)
				}
			}
		}
		if box.sb != nil {
			res.ContainerID, res.ExpiresAt = box.sb.ContainerID(), box.sb.ExpiresAt()
		}
		// A provider that paused its own long tool run (Anthropic's
		// pause_turn) continues when asked again; a client that knows no
		// pause (Budget FinalAnswer) is not told of it.
		goOn := turn.Stop == StopPause && len(nativeResults) > 0 && run.Budget == FinalAnswer && !finalTurn && clientCalls == 0 && !paused
		if (finalTurn || len(results) == 0 || clientCalls > 0 || paused) && !goOn {
			if clientCalls > 0 || paused {
				res.Stop = StopToolUse
			} else if finalTurn || len(results) > 0 {
				res.Stop = StopEnd
			}
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, nil
		}
		waitPrepared()
		if boundImages(figures, MaxServerToolImages) {
			// Results already sent changed: the adapter's memo of the
			// conversation no longer matches it (Request.Encoded).
			if req.Encoded.Next != nil {
				req.Encoded.Next.Discard()
			}
			*req.Encoded = Encoded{}
		}
		req.Messages = append(req.Messages, Message{Role: RoleUser, Parts: append(nativeResults, results...)})
		if stepCount(res) >= max {
			if run.Budget == Pause {
				res.Stop = StopPause
				return res, nil
			}
			finalTurn = true
			req.ToolChoice = ToolChoice{Mode: ChoiceNone}
		}
	}
}

// runStep runs step through do, which gets the sink's output callback
// (nil when not streamed), and counts it executed when it was.
func runStep(run *Run, res *Result, step *Step, do func(onOut func(cmd, stream int, text string)) StepResult) {
	var onOut func(cmd, stream int, text string)
	if run.Sink != nil {
		onOut = func(cmd, stream int, text string) { run.Sink.StepOutput(step, cmd, stream, text) }
	}
	step.Result = do(onOut)
	step.End = time.Now()
	if step.Result.Executed {
		res.ToolCallsExecuted++
	}
}

// toolResult is what the model reads of the step: its result, answering
// its call.
func (s *Step) toolResult() *ToolResult {
	return &ToolResult{CallID: s.Call.ID, Content: s.Result.Content, IsError: s.Result.IsError, Images: s.Result.Images}
}

// pauseStep ends step, paused on client tool calls its code made: the
// calls go to the client.
func pauseStep(run *Run, res *Result, step *Step) {
	for _, c := range step.Result.Paused {
		c.Caller = step.Call.ID
		res.Items = append(res.Items, Item{Kind: ItemClientCall, Call: &c, Step: step})
		if run.Sink != nil {
			run.Sink.ClientCall(c)
		}
	}
}

// resume runs run.Resume's step on with the client's answer. done says
// the run ends there (the code called a client tool again); else the
// step's result ends the conversation and the model is asked next.
func resume(ctx context.Context, run *Run, res *Result, box *lazyBox) (done bool, err error) {
	rs, req := run.Resume, run.Request
	st := run.ServerTools[rs.Call.Name]
	r, ok := st.(Resumer)
	if !ok {
		return true, &RequestError{Status: 400, Message: fmt.Sprintf("the tool call %s cannot be resumed: %s is not a tool whose code calls client tools in this request", rs.Call.ID, rs.Call.Name)}
	}
	res.ToolCallsRequested++
	step := &Step{Call: rs.Call, Tool: st, Resumed: true, Start: time.Now()}
	res.Items = append(res.Items, Item{Kind: ItemStep, Step: step})
	if run.Sink != nil {
		run.Sink.StepStart(step)
	}
	runStep(run, res, step, func(onOut func(cmd, stream int, text string)) StepResult {
		return r.Resume(ctx, box.get, rs, onOut)
	})
	if box.fatal != nil {
		return true, box.fatal
	}
	if step.Result.Fatal != nil {
		// The client's resume is refused (a state that does not verify):
		// the request fails, nothing ran.
		return true, step.Result.Fatal
	}
	if box.sb != nil {
		res.ContainerID, res.ExpiresAt = box.sb.ContainerID(), box.sb.ExpiresAt()
	}
	if step.Result.Paused != nil {
		pauseStep(run, res, step)
		res.Stop = StopToolUse
		return true, ctx.Err()
	}
	if run.Sink != nil {
		run.Sink.StepDone(step)
	}
	r2 := step.toolResult()
	var rest []Part
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == RoleUser {
		rest, req.Messages = req.Messages[n-1].Parts, req.Messages[:n-1]
	}
	req.Messages = append(req.Messages, Message{Role: RoleUser, Parts: append([]Part{{Kind: PartToolResult, Result: r2}}, rest...)})
	return false, nil
}

// serverToolImages are the results in msgs, oldest first, that answer a
// call of one of tools and carry images (a replayed code run's figures).
func serverToolImages(msgs []Message, tools map[string]ServerTool) []*ToolResult {
	var out []*ToolResult
	calls := map[string]bool{}
	for _, m := range msgs {
		for _, p := range m.Parts {
			switch {
			case p.Kind == PartToolCall && p.Call != nil:
				if _, ok := tools[p.Call.Name]; ok {
					calls[p.Call.ID] = true
				}
			case p.Kind == PartToolResult && p.Result != nil && len(p.Result.Images) > 0 && calls[p.Result.CallID]:
				out = append(out, p.Result)
			}
		}
	}
	return out
}

// boundImages keeps the images of the latest results (oldest first) up to
// max in all, and leaves out those of every older result, whose text then
// says so; it reports whether it left any out. A result keeps all its
// images or none, so each is noted once.
func boundImages(results []*ToolResult, max int) (changed bool) {
	n := 0
	for i := len(results) - 1; i >= 0; i-- {
		r := results[i]
		if len(r.Images) == 0 {
			continue
		}
		if n+len(r.Images) <= max && n >= 0 {
			n += len(r.Images)
			continue
		}
		n = -1 // older results keep none either
		r.Content += fmt.Sprintf(ImagesDroppedNote, len(r.Images), max)
		r.Images = nil
		changed = true
	}
	return changed
}

// turnOnce calls the upstream, forwarding text deltas to the sink until
// the turn's first tool call starts: text after a call is held back so the
// sink sees the turn's parts in order (Execute sends it after the call).
// streamed says which parts went out as deltas.
func turnOnce(ctx context.Context, run *Run, req *Request) (*Turn, map[int]bool, error) {
	var onDelta func(Delta)
	var text string
	open := -1
	var streamed map[int]bool // nil (reads as all false) when not streamed
	callSeen := false
	if run.Sink != nil {
		streamed = map[int]bool{}
		onDelta = func(d Delta) {
			if d.Kind != DeltaText {
				callSeen = true
				if open >= 0 {
					run.Sink.TextDone(text)
					open, text = -1, ""
				}
				return
			}
			if callSeen {
				return
			}
			if open >= 0 && d.Index != open {
				run.Sink.TextDone(text)
				text = ""
			}
			open = d.Index
			streamed[d.Index] = true
			text += d.Text
			run.Sink.TextDelta(d.Text)
		}
	}
	turn, err := run.Model.Upstream.Turn(ctx, req, onDelta)
	if open >= 0 {
		run.Sink.TextDone(text)
	}
	return turn, streamed, err
}

// runsTools reports whether turn calls a server tool and no client tool:
// whether the run goes on with another turn after running the tools.
func runsTools(run *Run, turn *Turn) bool {
	server := false
	for _, p := range turn.Parts {
		if p.Kind != PartToolCall {
			continue
		}
		if _, ok := run.ServerTools[p.Call.Name]; !ok {
			return false
		}
		server = true
	}
	return server
}

func stepCount(res *Result) int {
	n := 0
	for _, it := range res.Items {
		if it.Kind == ItemStep {
			n++
		}
	}
	return n
}

// lazyBox opens the run's sandbox on first use and copies the uploads in.
type lazyBox struct {
	run   *Run
	mu    sync.Mutex
	sb    Sandbox
	err   error
	fatal error // Open refused the request's container: a *RequestError
}

func (b *lazyBox) get(ctx context.Context) (Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sb != nil || b.err != nil {
		return b.sb, b.err
	}
	sb, err := b.run.Sandboxes.Open(ctx, b.run.Select, b.run.Open)
	if err != nil {
		if re := (*RequestError)(nil); errors.As(err, &re) {
			b.fatal = err
		}
		return nil, err // not cached: a later step may try again
	}
	b.sb = sb
	for _, u := range b.run.Uploads {
		if _, err := sb.CopyIn(ctx, u.FileID, u.Dir); err != nil {
			b.err = fmt.Errorf("copying file %s into the container: %w", u.FileID, err)
			return nil, b.err
		}
	}
	return sb, nil
}
