package messages

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
)

// streamer is the loop's Sink for "stream": true: Anthropic's events
// (wire-formats §3.6, §7.2). message_start waits for the first thing to
// say, so a request that fails before anything happened (an upstream
// error on the first turn) is answered with its own status instead of a
// stream. Command output does not stream: Anthropic's result blocks have
// no delta, so a step's result comes whole when its command ends.
//
// While the stream is open a ping event goes out whenever nothing else did
// for PingInterval, so that proxies keep a stream open through a long
// silent command.
type streamer struct {
	w        http.ResponseWriter
	rd       *renderer
	started  bool
	index    int  // the next block's index
	textOpen bool // the block at index is a text block being streamed

	mu       sync.Mutex // orders writes: the loop's events and the pinger's
	last     time.Time  // the last write
	stopPing chan struct{}
	pinger   sync.WaitGroup
}

// PingInterval is how long a stream stays silent before a ping event.
var PingInterval = 15 * time.Second

var _ gateway.Sink = (*streamer)(nil)

func (s *streamer) event(name string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(name, marshal(v))
}

func (s *streamer) write(name string, data []byte) {
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	s.last = time.Now()
}

func (s *streamer) ping() {
	defer s.pinger.Done()
	t := time.NewTicker(PingInterval / 4)
	defer t.Stop()
	for {
		select {
		case <-s.stopPing:
			return
		case now := <-t.C:
			s.mu.Lock()
			if now.Sub(s.last) >= PingInterval {
				s.write("ping", []byte(`{"type":"ping"}`))
			}
			s.mu.Unlock()
		}
	}
}

// stop ends the pinger; the stream writes nothing more after it.
func (s *streamer) stop() {
	if s.stopPing != nil {
		close(s.stopPing)
		s.pinger.Wait()
		s.stopPing = nil
	}
}

func (s *streamer) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.event("message_start", map[string]any{"type": "message_start", "message": &message{
		ID: s.rd.id, Type: "message", Role: "assistant", Model: s.rd.model, Content: []any{}}})
	s.stopPing = make(chan struct{})
	s.pinger.Add(1)
	go s.ping()
}

func (s *streamer) blockStart(block any) {
	s.event("content_block_start", map[string]any{"type": "content_block_start", "index": s.index, "content_block": block})
}

func (s *streamer) delta(delta any) {
	s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.index, "delta": delta})
}

func (s *streamer) blockStop() {
	s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.index})
	s.index++
}

func (s *streamer) closeText() {
	if s.textOpen {
		s.textOpen = false
		s.blockStop()
	}
}

func (s *streamer) TextDelta(text string) {
	if text == "" {
		return
	}
	s.start()
	if !s.textOpen {
		s.textOpen = true
		s.blockStart(textBlock{Type: "text", Text: ""})
	}
	s.delta(map[string]string{"type": "text_delta", "text": text})
}

func (s *streamer) TextDone(string) { s.closeText() }

// use streams a tool_use or server_tool_use block: input {} first, then
// the whole input as input_json_delta (the first one empty, as the API
// sends it).
func (s *streamer) use(b useBlock) {
	s.start()
	s.closeText()
	input := b.Input
	b.Input = []byte(`{}`)
	s.blockStart(b)
	s.delta(map[string]string{"type": "input_json_delta", "partial_json": ""})
	s.delta(map[string]string{"type": "input_json_delta", "partial_json": string(input)})
	s.blockStop()
}

func (s *streamer) ClientCall(c gateway.ToolCall) { s.use(s.rd.clientCall(&c)) }

func (s *streamer) StepStart(st *gateway.Step) {
	u, _ := s.rd.step(st)
	if st.Resumed {
		// Shown in the response that paused it.
		return
	}
	s.use(u)
}

func (s *streamer) StepOutput(*gateway.Step, int, int, string) {}

func (s *streamer) StepDone(st *gateway.Step) {
	s.start()
	_, r := s.rd.step(st)
	s.blockStart(r)
	s.blockStop()
}

// finish ends the stream: message_delta with the stop reason, the
// container and the whole usage, then message_stop.
func (s *streamer) finish(res *gateway.Result) {
	s.start()
	s.closeText()
	m := s.rd.message(res)
	delta := map[string]any{"stop_reason": m.StopReason, "stop_sequence": m.StopSequence, "stop_details": nil}
	if m.Container != nil {
		delta["container"] = m.Container
	}
	s.event("message_delta", map[string]any{"type": "message_delta", "delta": delta, "usage": m.Usage})
	s.event("message_stop", map[string]any{"type": "message_stop"})
}
