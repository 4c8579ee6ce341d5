package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/store"
)

// Request logs (SPEC §6), a workspace's opt-in: GET/PUT /api/v1/logging
// turn them on; then every gateway request of the workspace (Responses,
// Messages, Gemini, Chat Completions) is recorded when it ends, however
// it ends (completed, failed, blocked by a guardrail, the client gone):
// its prompts as the client sent them (the system prompt marked), the
// completion, every command with its output and outcome, tokens, cost,
// container, HTTP status and duration, and its guardrail detections
// (stored apart under the same request id, joined when read). Request
// headers are never stored but the User-Agent: keys in Authorization,
// x-api-key or x-goog-api-key never reach the database.
//
// Recording is off the client's path: the handler hands what it saw to a
// bounded queue when it returns, and one writer goroutine shapes the
// record (truncating it to the workspace's max_record_bytes, each cut
// marked) and stores it. A full queue drops the record and counts it in
// shellgate_request_logs_total{result="dropped"}. The retention sweep
// (SweepLogs, with the container sweep) deletes records older than the
// workspace's retention_days.

// logQueueSize bounds the records waiting for the writer.
const logQueueSize = 1024

// loggingBody is GET/PUT /api/v1/logging.
type loggingBody struct {
	Enabled        *bool `json:"enabled"`
	RetentionDays  *int  `json:"retention_days"`
	MaxRecordBytes *int  `json:"max_record_bytes"`
}

func (s *Server) logRoutes() {
	s.handle("GET /api/v1/logging", maxEmptyBody, true, s.getLogging)
	s.handle("PUT /api/v1/logging", maxCreateBody, true, s.putLogging)
	s.handle("GET /api/v1/logs", maxEmptyBody, true, s.listLogs)
	s.handle("GET /api/v1/logs/{id}", maxEmptyBody, true, s.getLog)
}

func settingsBody(st store.LogSettings) map[string]any {
	return map[string]any{"enabled": st.Enabled, "retention_days": st.RetentionDays, "max_record_bytes": st.MaxRecordBytes}
}

func (s *Server) noLogs() error {
	return errorf(http.StatusNotFound, "request logs are not available on this server")
}

func (s *Server) getLogging(w http.ResponseWriter, r *http.Request, p Principal) error {
	if s.cfg.Logs == nil {
		return s.noLogs()
	}
	st, err := s.cfg.Logs.Settings(r.Context(), scope(p))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, settingsBody(st))
	return nil
}

func (s *Server) putLogging(w http.ResponseWriter, r *http.Request, p Principal) error {
	if s.cfg.Logs == nil {
		return s.noLogs()
	}
	var body loggingBody
	if err := decodeJSON(r, &body, false); err != nil {
		return err
	}
	st, err := s.cfg.Logs.Settings(r.Context(), scope(p))
	if err != nil {
		return err
	}
	if body.Enabled != nil {
		st.Enabled = *body.Enabled
	}
	if body.RetentionDays != nil {
		st.RetentionDays = *body.RetentionDays
	}
	if body.MaxRecordBytes != nil {
		st.MaxRecordBytes = *body.MaxRecordBytes
	}
	if st.RetentionDays < 1 || st.RetentionDays > store.MaxRetentionDays {
		return errorf(http.StatusBadRequest, "retention_days: %d: want a whole number of days, 1-%d", st.RetentionDays, store.MaxRetentionDays).withParam("retention_days")
	}
	if st.MaxRecordBytes < store.MinRecordBytes || st.MaxRecordBytes > store.MaxRecordBytes {
		return errorf(http.StatusBadRequest, "max_record_bytes: %d: want %d-%d", st.MaxRecordBytes, store.MinRecordBytes, store.MaxRecordBytes).withParam("max_record_bytes")
	}
	if err := s.cfg.Logs.PutSettings(r.Context(), scope(p), st); err != nil {
		return err
	}
	s.logging.put(p, st, time.Now())
	writeJSON(w, http.StatusOK, settingsBody(st))
	return nil
}

func (s *Server) loggingOf(ctx context.Context, p Principal) (store.LogSettings, error) {
	return s.logging.get(p, func() (store.LogSettings, error) { return s.cfg.Logs.Settings(ctx, scope(p)) })
}

// reqLog is what one gateway request's handler saw, for its record. The
// handler's goroutine fills it; the writer reads it after the handler
// returned (the queue orders the two).
type reqLog struct {
	id       string
	p        Principal
	api      string
	settings store.LogSettings
	start    time.Time
	ua       string

	model   string
	input   []logMessage
	blocked bool
	run     *gateway.Run
	res     *gateway.Result
	err     error
	// chat pass-through: the request body and the answer as sent
	chatBody []byte
	chatOut  *teeWriter

	mu    sync.Mutex
	execs []execTiming // each command through the gateway's sandbox, in order

	end    time.Time
	status int
	gone   bool
	// proxied: another node served the request and logs it (routing.go)
	proxied bool
}

type execTiming struct {
	command string
	took    time.Duration
}

type reqLogKey struct{}

func reqLogFrom(ctx context.Context) *reqLog {
	rl, _ := ctx.Value(reqLogKey{}).(*reqLog)
	return rl
}

func (rl *reqLog) timed(command string, took time.Duration) {
	rl.mu.Lock()
	rl.execs = append(rl.execs, execTiming{command, took})
	rl.mu.Unlock()
}

// logged runs h for one gateway request of p on api and, when p's
// workspace logs requests, queues its record once h returned. rl is nil
// when the request is not logged.
func (s *Server) logged(w http.ResponseWriter, r *http.Request, p Principal, api string, h func(w http.ResponseWriter, r *http.Request, rl *reqLog)) {
	if s.cfg.Logs == nil {
		h(w, r, nil)
		return
	}
	st, err := s.loggingOf(r.Context(), p)
	if err != nil {
		s.log.ErrorContext(r.Context(), "reading the workspace's log settings failed: the request is not logged", "err", err)
	}
	if err != nil || !st.Enabled {
		h(w, r, nil)
		return
	}
	rl := &reqLog{id: store.NewID("req"), p: p, api: api, settings: st, start: time.Now(), ua: r.UserAgent()}
	s.logWG.add(1) // done when the record is written or dropped: flushLogs waits for requests in flight too
	w.Header().Set("Shellgate-Request-Id", rl.id)
	ctx := context.WithValue(r.Context(), reqLogKey{}, rl)
	ctx = gateway.WithObserver(ctx, func(run *gateway.Run, res *gateway.Result, err error) {
		rl.run, rl.res, rl.err = run, res, err
	})
	h(w, r.WithContext(ctx), rl)
	if rl.proxied {
		s.logWG.add(-1)
		return
	}
	rl.end = time.Now()
	if w.Header().Get("Content-Length") != "" {
		// The answer is whole: send it now, before its record takes the
		// CPU (without a length, a flush would turn it into chunks).
		http.NewResponseController(w).Flush()
	}
	rl.gone = r.Context().Err() != nil && !rl.whole()
	if rec, ok := w.(*recorder); ok {
		rl.status = rec.status
	}
	s.enqueueLog(rl)
}

// whole reports whether the answer was complete: a client that hangs up
// as soon as it has the last byte it needs (an SSE client at [DONE]) may
// cancel the request's context before the record is taken, and has not
// left early.
func (rl *reqLog) whole() bool {
	if rl.chatOut != nil {
		return rl.chatOut.whole()
	}
	return rl.res != nil && rl.err == nil
}

// models is m seen through the request's log: the model the client named.
func (rl *reqLog) models(m gateway.Models) gateway.Models {
	if rl == nil || m == nil {
		return m
	}
	return loggedModels{Models: m, rl: rl}
}

type loggedModels struct {
	gateway.Models
	rl *reqLog
}

func (l loggedModels) Resolve(name string) (gateway.Model, error) {
	l.rl.model = name
	return l.Models.Resolve(name)
}

// screen wraps the request's guardrail screen: the input is taken as the
// client sent it, before a redaction.
func (rl *reqLog) screen(next gateway.Screen) gateway.Screen {
	if rl == nil {
		return next
	}
	return func(ctx context.Context, req *gateway.Request) error {
		rl.input = inputOf(req)
		if next == nil {
			return nil
		}
		return next(ctx, req)
	}
}

// logMessage is one input message of a record.
type logMessage struct {
	Role string `json:"role"`
	Text string `json:"text"`
}

// logItem is one output item: an assistant message or a command.
type logItem struct {
	Type       string `json:"type"`
	Role       string `json:"role,omitempty"`
	Text       string `json:"text,omitempty"`
	CallID     string `json:"call_id,omitempty"`
	Command    string `json:"command,omitempty"`
	Stdout     string `json:"stdout,omitempty"`
	Stderr     string `json:"stderr,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	DurationMs *int64 `json:"duration_ms,omitempty"`
	// Native: the provider ran it with its own hosted tool (engine auto).
	Native bool `json:"native,omitempty"`
}

// logDetail is a record's body.
type logDetail struct {
	Input  []logMessage `json:"input"`
	Output string       `json:"output"`
	Items  []logItem    `json:"items"`
	Error  string       `json:"error,omitempty"`
}

func inputOf(req *gateway.Request) []logMessage {
	var out []logMessage
	if req.System != "" {
		out = append(out, logMessage{Role: "system", Text: req.System})
	}
	for _, m := range req.Messages {
		var texts []string
		role := string(m.Role)
		for _, p := range m.Parts {
			switch p.Kind {
			case gateway.PartText:
				texts = append(texts, p.Text)
			case gateway.PartImage:
				texts = append(texts, "[image]")
			case gateway.PartToolCall:
				texts = append(texts, fmt.Sprintf("[tool call %s %s: %s]", p.Call.ID, p.Call.Name, p.Call.Arguments))
			case gateway.PartToolResult:
				role = "tool"
				texts = append(texts, p.Result.Content)
			}
		}
		out = append(out, logMessage{Role: role, Text: strings.Join(texts, "\n")})
	}
	return out
}

// enqueueLog hands rl to the writer without waiting; a full queue drops
// it. The writer runs while the queue has records and ends when it is
// empty (the next record starts another).
func (s *Server) enqueueLog(rl *reqLog) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.logQ == nil {
		s.logQ = make(chan *reqLog, logQueueSize)
	}
	select {
	case s.logQ <- rl:
	default:
		s.logWG.add(-1)
		s.metrics.requestLogs.WithLabelValues("dropped").Inc()
		return
	}
	if !s.logWriting {
		s.logWriting = true
		go s.logWriter()
	}
}

func (s *Server) logWriter() {
	for {
		s.logMu.Lock()
		var rl *reqLog
		select {
		case rl = <-s.logQ:
		default:
			s.logWriting = false
		}
		s.logMu.Unlock()
		if rl == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := s.cfg.Logs.Record(ctx, s.shapeLog(rl))
		cancel()
		if err != nil {
			s.log.Error("recording a request log failed", "request", rl.id, "err", err)
			s.metrics.requestLogs.WithLabelValues("failed").Inc()
		} else {
			s.metrics.requestLogs.WithLabelValues("written").Inc()
		}
		s.logWG.add(-1)
	}
}

// flushLogs waits until the record of every logged request that began is
// written or dropped (tests; shutdown, once no request runs).
func (s *Server) flushLogs() { s.logWG.wait() }

// pending counts the records not written yet; wait returns when there are
// none. Unlike a sync.WaitGroup, a request may start (add) while a flush
// waits: the flush then waits for it too.
type pending struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

func (p *pending) add(d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += d
	if p.n == 0 && p.cond != nil {
		p.cond.Broadcast()
	}
}

func (p *pending) wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cond == nil {
		p.cond = sync.NewCond(&p.mu)
	}
	for p.n > 0 {
		p.cond.Wait()
	}
}

// shapeLog builds rl's record.
func (s *Server) shapeLog(rl *reqLog) store.RequestLog {
	rec := store.RequestLog{Scope: scope(rl.p), RequestID: rl.id, CreatedAt: rl.start, API: rl.api, Model: truncate(rl.model, 256),
		HTTPStatus: rl.status, DurationMillis: rl.end.Sub(rl.start).Milliseconds(), UserAgent: truncate(rl.ua, 256)}
	d := logDetail{Input: rl.input, Items: []logItem{}}
	if rl.chatBody != nil {
		s.shapeChat(rl, &rec, &d)
	}
	incomplete := false
	if res := rl.res; res != nil {
		if rec.Model == "" && rl.run != nil {
			rec.Model = truncate(rl.run.Model.Provider+"/"+rl.run.Model.Name, 256)
		}
		rec.ContainerID, rec.InputTokens, rec.OutputTokens, rec.CostMicroUSD = res.ContainerID, res.Usage.InputTokens, res.Usage.OutputTokens, res.CostMicroUSD
		rec.ToolCalls = int64(res.ToolCallsRequested)
		d.Items, d.Output = rl.items(res)
		incomplete = res.Stop == gateway.StopMaxTokens || res.Stop == gateway.StopPause
	}
	if rl.err != nil {
		d.Error = "internal error"
		if re := (*gateway.RequestError)(nil); errors.As(rl.err, &re) {
			d.Error = re.Message
		} else if ue, ok := gateway.AsUpstreamError(rl.err); ok {
			d.Error = fmt.Sprintf("upstream %d: %s", ue.Status, ue.Message)
		} else if errors.Is(rl.err, context.Canceled) {
			d.Error = "the client went away"
		}
	}
	if rec.HTTPStatus == 0 {
		rec.HTTPStatus = http.StatusOK
		if rl.gone {
			rec.HTTPStatus = 499 // nothing was answered: the client went away first
		}
	}
	switch {
	case rl.blocked:
		rec.Status = "blocked"
	case rl.gone && (rl.err == nil || errors.Is(rl.err, context.Canceled)):
		// The client left first. (One that left after reading a
		// stream's error event, which ends the stream, failed.)
		rec.Status = "incomplete"
	case rl.err != nil || rec.HTTPStatus >= 400:
		rec.Status = "failed"
	case incomplete:
		rec.Status = "incomplete"
	default:
		rec.Status = "completed"
	}
	rec.Body, rec.Truncated = capDetail(d, rl.settings.MaxRecordBytes-recordOverhead(rec))
	return rec
}

// recordOverhead is what a record's columns take besides its body, for
// the cap (which covers the whole record).
func recordOverhead(r store.RequestLog) int {
	return 256 + len(r.Model) + len(r.UserAgent) + len(r.ContainerID) + len(r.RequestID)
}

// items are the run's output items and its final text (the text after its
// last tool call). Commands get their durations from the sandbox calls
// timed in order.
func (rl *reqLog) items(res *gateway.Result) ([]logItem, string) {
	items := []logItem{}
	var final []string
	execs := rl.execs
	took := func(cmd string) *int64 {
		for i, e := range execs {
			if e.command == cmd {
				execs = execs[i+1:]
				ms := e.took.Milliseconds()
				return &ms
			}
		}
		return nil
	}
	for _, it := range res.Items {
		switch it.Kind {
		case gateway.ItemText:
			items = append(items, logItem{Type: "message", Role: "assistant", Text: it.Text})
			final = append(final, it.Text)
		case gateway.ItemClientCall:
			final = nil
		case gateway.ItemStep:
			final = nil
			if !it.Step.Native {
				items = append(items, stepItems(it.Step, took)...)
				continue
			}
			// The provider ran it: nothing here timed it.
			for _, li := range stepItems(it.Step, func(string) *int64 { return nil }) {
				li.Native, li.DurationMs = true, nil
				items = append(items, li)
			}
		}
	}
	return items, strings.Join(final, "\n")
}

// stepItems are a server tool call's commands.
func stepItems(st *gateway.Step, took func(string) *int64) []logItem {
	id := st.Call.ID
	switch d := st.Result.Detail.(type) {
	case *gateway.ShellDetail:
		if d.Error != "" || len(d.Plan.Commands) == 0 && len(d.Outputs) == 0 {
			cmd := strings.Join(d.Args.Commands, "\n")
			if cmd == "" {
				cmd = st.Call.Arguments
			}
			return []logItem{{Type: "command", CallID: id, Command: cmd, Stderr: d.Error, Outcome: "error"}}
		}
		var out []logItem
		for i, c := range d.Plan.Commands {
			it := logItem{Type: "command", CallID: id, Command: c, Outcome: "not_run"}
			if i < len(d.Outputs) {
				o := d.Outputs[i]
				it.Stdout, it.Stderr, it.Outcome, it.ExitCode = o.Stdout, o.Stderr, o.Outcome.Type, o.Outcome.ExitCode
				it.DurationMs = took(c)
			}
			out = append(out, it)
		}
		return out
	case *gateway.CodeExecDetail:
		var args struct {
			Command string `json:"command"`
			Code    string `json:"code"`
		}
		json.Unmarshal([]byte(st.Call.Arguments), &args)
		it := logItem{Type: "command", CallID: id, Command: st.Call.Name + ": " + st.Call.Arguments, Stdout: st.Result.Content, Outcome: "exit"}
		if br, ok := d.Content.(*gateway.BashResult); ok {
			cmd := args.Command
			if cmd == "" {
				cmd = args.Code
			}
			code := br.ReturnCode
			it.Command, it.Stdout, it.Stderr, it.ExitCode = cmd, br.Stdout, br.Stderr, &code
			it.DurationMs = took(cmd)
		} else if st.Result.IsError {
			it.Outcome = "error"
		}
		return []logItem{it}
	case *gateway.InterpreterDetail:
		// The code is the command; the kernel call is not timed per
		// command, so the step's time is the duration.
		it := logItem{Type: "command", CallID: id, Command: d.Code, Stderr: d.Error, Outcome: "error"}
		if it.Command == "" {
			it.Command = st.Call.Name + ": " + st.Call.Arguments
		}
		if d.Ran {
			ms := st.End.Sub(st.Start).Milliseconds()
			it.Stdout, it.Stderr = gateway.PythonStdout(d.Output), gateway.PythonStderr(d.Output)
			it.Outcome, it.ExitCode, it.DurationMs = d.Output.Outcome.Type, d.Output.Outcome.ExitCode, &ms
		}
		return []logItem{it}
	}
	outcome := "exit"
	if st.Result.IsError {
		outcome = "error"
	}
	return []logItem{{Type: "command", CallID: id, Command: st.Call.Name + ": " + st.Call.Arguments, Stdout: st.Result.Content, Outcome: outcome}}
}

// truncMarker is how a cut field ends.
func truncMarker(cut int) string { return fmt.Sprintf("…[shellgate: truncated %d bytes]", cut) }

// truncate cuts s to about n bytes at a character boundary, marked.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := n - len(truncMarker(len(s)))
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + truncMarker(len(s)-keep)
}

func encodeDetail(d *logDetail) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(d)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// capDetail encodes d in at most max bytes: when it is larger, every text
// field longer than a common limit is cut to it (marked), the largest
// limit that fits; when even empty fields do not fit, the oldest input
// messages and the last items are dropped, half at a time (a marker says
// how many).
func capDetail(d logDetail, max int) (string, bool) {
	if b := encodeDetail(&d); len(b) <= max {
		return string(b), false
	}
	keepIn, keepItems := len(d.Input), len(d.Items)
	for {
		c := logDetail{Output: d.Output, Error: d.Error, Input: make([]logMessage, 0, keepIn+1), Items: make([]logItem, 0, keepItems+1)}
		firstIn := 0
		if dropped := len(d.Input) - keepIn; dropped > 0 {
			c.Input = append(c.Input, logMessage{Role: "system", Text: fmt.Sprintf("[shellgate: %d earlier messages truncated]", dropped)})
			firstIn = 1
		}
		c.Input = append(c.Input, d.Input[len(d.Input)-keepIn:]...)
		c.Items = append(c.Items, d.Items[:keepItems]...)
		if dropped := len(d.Items) - keepItems; dropped > 0 {
			c.Items = append(c.Items, logItem{Type: "message", Role: "assistant", Text: fmt.Sprintf("[shellgate: %d more items truncated]", dropped)})
		}
		if b, ok := fitFields(&c, c.Input[firstIn:], c.Items[:keepItems], max); ok {
			return b, true
		}
		if keepIn == 0 && keepItems == 0 {
			// Not even a bare record fits (max is below what the
			// settings' minimum allows): the bare record.
			return string(encodeDetail(&logDetail{Input: []logMessage{}, Items: []logItem{}})), true
		}
		keepIn, keepItems = keepIn/2, keepItems/2
	}
}

// fitFields cuts c's text fields (those of in and items, its output and
// error) to the largest common limit at which c encodes in max bytes; false
// when even cutting them all to nothing is too large.
func fitFields(c *logDetail, in []logMessage, items []logItem, max int) (string, bool) {
	var ptrs []*string
	add := func(p *string) {
		if *p != "" {
			ptrs = append(ptrs, p)
		}
	}
	for i := range in {
		add(&in[i].Text)
	}
	add(&c.Output)
	add(&c.Error)
	for i := range items {
		add(&items[i].Text)
		add(&items[i].Command)
		add(&items[i].Stdout)
		add(&items[i].Stderr)
	}
	orig := make([]string, len(ptrs))
	longest := 0
	for i, p := range ptrs {
		orig[i] = *p
		longest = max2(longest, len(*p))
	}
	fits := func(limit int) ([]byte, bool) {
		for i, p := range ptrs {
			*p = truncate(orig[i], limit)
		}
		b := encodeDetail(c)
		return b, len(b) <= max
	}
	best, ok := fits(0)
	if !ok {
		return "", false
	}
	lo, hi := 0, longest // fits(lo); the largest that fits is in [lo, hi)
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if b, ok := fits(mid); ok {
			lo, best = mid, b
		} else {
			hi = mid
		}
	}
	return string(best), true
}

func max2(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// teeWriter keeps the first max bytes a Chat Completions answer wrote,
// for its record.
type teeWriter struct {
	http.ResponseWriter
	buf    bytes.Buffer
	max    int
	over   bool
	tail   []byte // the last bytes written, whatever the cap
	wrote  bool
	broken bool // a write failed
}

func (t *teeWriter) Write(b []byte) (int, error) {
	if room := t.max - t.buf.Len(); room > 0 {
		t.buf.Write(b[:min(room, len(b))])
	}
	if t.buf.Len()+len(b) > t.max {
		t.over = true
	}
	n, err := t.ResponseWriter.Write(b)
	t.wrote, t.broken = true, t.broken || err != nil
	t.tail = append(t.tail, b[:n]...)
	t.tail = t.tail[max(0, len(t.tail)-len(sseDone)):]
	return n, err
}

const sseDone = "data: [DONE]\n\n"

// whole: the answer was written to its end, a stream up to its [DONE].
func (t *teeWriter) whole() bool {
	if !t.wrote || t.broken {
		return false
	}
	return !strings.HasPrefix(t.Header().Get("Content-Type"), "text/event-stream") || string(t.tail) == sseDone
}

func (t *teeWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// shapeChat fills a Chat Completions record from the body the client sent
// and the answer (JSON or an event stream) it got.
func (s *Server) shapeChat(rl *reqLog, rec *store.RequestLog, d *logDetail) {
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(rl.chatBody, &body)
	for _, m := range body.Messages {
		role := m.Role
		switch role {
		case "developer":
			role = "system"
		case "system", "user", "assistant", "tool":
		default:
			role = "user"
		}
		var text string
		if json.Unmarshal(m.Content, &text) != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			json.Unmarshal(m.Content, &parts)
			var ts []string
			for _, p := range parts {
				if p.Type == "text" {
					ts = append(ts, p.Text)
				} else {
					ts = append(ts, "["+p.Type+"]")
				}
			}
			text = strings.Join(ts, "\n")
		}
		d.Input = append(d.Input, logMessage{Role: role, Text: text})
	}
	if rl.chatOut == nil {
		return
	}
	type choice struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	}
	type answer struct {
		Choices []choice `json:"choices"`
		Usage   *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	var text strings.Builder
	use := func(a answer) {
		for _, c := range a.Choices {
			text.WriteString(c.Message.Content)
			text.WriteString(c.Delta.Content)
		}
		if a.Usage != nil {
			rec.InputTokens, rec.OutputTokens = a.Usage.PromptTokens, a.Usage.CompletionTokens
		}
		if a.Error != nil {
			d.Error = a.Error.Message
		}
	}
	out := rl.chatOut.buf.Bytes()
	if strings.HasPrefix(rl.chatOut.Header().Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, len(out)+1)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var a answer
			if json.Unmarshal([]byte(data), &a) == nil {
				use(a)
			}
		}
	} else {
		var a answer
		if json.Unmarshal(out, &a) == nil {
			use(a)
		}
	}
	d.Output = text.String()
	if rl.chatOut.over {
		d.Output += "…[shellgate: the answer was longer than the log keeps]"
	}
	if d.Output != "" {
		d.Items = append(d.Items, logItem{Type: "message", Role: "assistant", Text: d.Output})
	}
}

// SweepLogs deletes the request logs past their workspace's retention at
// the server's clock; Run calls it with the container sweep, tests call
// it directly.
func (s *Server) SweepLogs(ctx context.Context) (int, error) {
	if s.cfg.Logs == nil {
		return 0, nil
	}
	total := 0
	for {
		n, err := s.cfg.Logs.Sweep(ctx, s.now(), 1000)
		total += n
		if err != nil || n < 1000 {
			return total, err
		}
	}
}

// logSummary is a record as GET /api/v1/logs lists it.
type logSummary struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	RequestID   string  `json:"request_id"`
	CreatedAt   int64   `json:"created_at"`
	API         string  `json:"api"`
	Model       string  `json:"model"`
	Status      string  `json:"status"`
	HTTPStatus  int     `json:"http_status"`
	DurationMs  int64   `json:"duration_ms"`
	ContainerID *string `json:"container_id"`
	Usage       struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
	CostMicroUSD int64 `json:"cost_micro_usd"`
	ToolCalls    int64 `json:"tool_calls"`
	Detections   int64 `json:"detections"`
	Truncated    bool  `json:"truncated"`
}

func summaryOf(l store.RequestLog) logSummary {
	s := logSummary{ID: l.ID, Object: "request_log", RequestID: l.RequestID, CreatedAt: l.CreatedAt.Unix(), API: l.API, Model: l.Model,
		Status: l.Status, HTTPStatus: l.HTTPStatus, DurationMs: l.DurationMillis, CostMicroUSD: l.CostMicroUSD, ToolCalls: l.ToolCalls,
		Detections: l.Detections, Truncated: l.Truncated}
	if l.ContainerID != "" {
		s.ContainerID = &l.ContainerID
	}
	s.Usage.InputTokens, s.Usage.OutputTokens = l.InputTokens, l.OutputTokens
	return s
}

// logAPIs and logStatuses are the filters' values.
var (
	logAPIs     = []string{"responses", "messages", "gemini", "chat_completions"}
	logStatuses = []string{"completed", "failed", "blocked", "incomplete"}
)

func oneOf(v string, set []string) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}

func (s *Server) listLogs(w http.ResponseWriter, r *http.Request, p Principal) error {
	if s.cfg.Logs == nil {
		return s.noLogs()
	}
	q := r.URL.Query()
	for k := range q {
		if !oneOf(k, []string{"api", "model", "container_id", "status", "since", "until", "has_detections", "limit", "after"}) {
			return errorf(http.StatusBadRequest, "unknown query parameter %q: the filters are api, model, container_id, status, since, until, has_detections, limit and after", k).withParam(k)
		}
		if len(q[k]) > 1 {
			return errorf(http.StatusBadRequest, "query parameter %q given %d times: give it once", k, len(q[k])).withParam(k)
		}
	}
	f := store.LogFilter{API: q.Get("api"), Model: q.Get("model"), ContainerID: q.Get("container_id"), Status: q.Get("status"), After: q.Get("after"), Limit: 20}
	if f.API != "" && !oneOf(f.API, logAPIs) {
		return errorf(http.StatusBadRequest, "api %q: want one of %s", f.API, strings.Join(logAPIs, ", ")).withParam("api")
	}
	if f.Status != "" && !oneOf(f.Status, logStatuses) {
		return errorf(http.StatusBadRequest, "status %q: want one of %s", f.Status, strings.Join(logStatuses, ", ")).withParam("status")
	}
	if len(f.Model) > 512 || len(f.ContainerID) > 256 || len(f.After) > 256 {
		return errorf(http.StatusBadRequest, "a filter value is too long")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return errorf(http.StatusBadRequest, "limit %q: want a whole number 1-100", v).withParam("limit")
		}
		f.Limit = n
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
		add  int64
	}{{"since", &f.Since, 0}, {"until", &f.Until, 1}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 1<<40 {
			return errorf(http.StatusBadRequest, "%s %q: want unix seconds", t.name, v).withParam(t.name)
		}
		*t.dst = time.Unix(n+t.add, 0) // until is inclusive: before the next second
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return errorf(http.StatusBadRequest, "since is after until").withParam("since")
	}
	if v := q.Get("has_detections"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errorf(http.StatusBadRequest, "has_detections %q: want true or false", v).withParam("has_detections")
		}
		f.HasDetections = &b
	}
	page, err := s.cfg.Logs.List(r.Context(), scope(p), f)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusBadRequest, "after %q: no request log of this workspace has that id", f.After).withParam("after")
	}
	if err != nil {
		return err
	}
	data := make([]logSummary, 0, len(page.Items))
	for _, l := range page.Items {
		data = append(data, summaryOf(l))
	}
	var last *string
	if n := len(data); n > 0 {
		last = &data[n-1].ID
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "has_more": page.HasMore, "last_id": last})
	return nil
}

// logDetection is a detection as a record shows it.
type logDetection struct {
	Rule      string `json:"rule"`
	Technique string `json:"technique"`
	Action    string `json:"action"`
	Guardrail string `json:"guardrail"`
	Location  string `json:"location"`
	Excerpt   string `json:"excerpt"`
}

func (s *Server) getLog(w http.ResponseWriter, r *http.Request, p Principal) error {
	if s.cfg.Logs == nil {
		return s.noLogs()
	}
	id := r.PathValue("id")
	l, err := s.cfg.Logs.Get(r.Context(), scope(p), id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "no request log %q in this workspace", id)
	}
	if err != nil {
		return err
	}
	var d logDetail
	if err := json.Unmarshal([]byte(l.Body), &d); err != nil {
		return fmt.Errorf("request log %s: its body: %w", l.ID, err)
	}
	if d.Input == nil {
		d.Input = []logMessage{}
	}
	if d.Items == nil {
		d.Items = []logItem{}
	}
	dets := []logDetection{}
	if s.cfg.Guardrails != nil && l.Detections > 0 {
		ds, err := s.cfg.Guardrails.Detections(r.Context(), scope(p), l.RequestID)
		if err != nil {
			return err
		}
		for _, d := range ds {
			dets = append(dets, logDetection{Rule: d.Rule, Technique: d.Technique, Action: d.Action, Guardrail: d.Guardrail, Location: d.Location, Excerpt: d.Excerpt})
		}
	}
	writeJSON(w, http.StatusOK, logRecord{summaryOf(l), d.Input, d.Output, d.Items, d.Error, dets})
	return nil
}

// logRecord is GET /api/v1/logs/{id}: the summary and the whole exchange.
type logRecord struct {
	logSummary
	Input      []logMessage   `json:"input"`
	Output     string         `json:"output"`
	Items      []logItem      `json:"items"`
	Error      string         `json:"error,omitempty"`
	Detections []logDetection `json:"detections"`
}

// logMetrics counts the records: written, dropped (queue full), failed.
func logMetrics() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellgate_request_logs_total",
		Help: "Request-log records by result: written, dropped (the writer's queue was full), failed (the store refused).",
	}, []string{"result"})
}

// withParam names the parameter an error is about.
func (e *apiError) withParam(p string) *apiError {
	e.param = p
	return e
}
