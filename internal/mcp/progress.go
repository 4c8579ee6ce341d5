package mcp

import (
	"context"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// progress streams a call's output to the client as progress
// notifications (when the call asked for them with a progress token): one
// per chunk of output, the text as the message, which command and stream
// in _meta. The sandbox's output callback must not block, so it only
// queues; a goroutine sends.
type progress struct {
	ctx   context.Context
	ss    *sdk.ServerSession
	token any

	mu   sync.Mutex
	q    []*sdk.ProgressNotificationParams
	n    float64
	wake chan struct{}
	done chan struct{}
	end  chan struct{}
}

// newProgress is nil when the request carries no progress token.
func newProgress(ctx context.Context, req *sdk.CallToolRequest) *progress {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	p := &progress{ctx: ctx, ss: req.Session, token: token, wake: make(chan struct{}, 1), done: make(chan struct{}), end: make(chan struct{})}
	go p.run()
	return p
}

func (p *progress) push(cmd, stream int, text string) {
	name := "stdout"
	if stream == 2 {
		name = "stderr"
	}
	meta := sdk.Meta{"shellgate/stream": name}
	if cmd >= 0 {
		meta["shellgate/command"] = cmd
	}
	p.mu.Lock()
	p.n++
	p.q = append(p.q, &sdk.ProgressNotificationParams{Meta: meta, ProgressToken: p.token, Progress: p.n, Message: text})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *progress) run() {
	defer close(p.done)
	for {
		select {
		case <-p.wake:
		case <-p.end:
			p.send()
			return
		}
		p.send()
	}
}

func (p *progress) send() {
	p.mu.Lock()
	q := p.q
	p.q = nil
	p.mu.Unlock()
	for _, n := range q {
		if p.ss.NotifyProgress(p.ctx, n) != nil {
			return // the client is gone or the call was cancelled
		}
	}
}

// close sends what is queued and stops, before the result is returned (a
// notification after the result would reach no one).
func (p *progress) close() {
	if p == nil {
		return
	}
	close(p.end)
	<-p.done
}

func (p *progress) execSink() func(cmd, stream int, text string) {
	if p == nil {
		return nil
	}
	return p.push
}

func (p *progress) pythonSink() func(stream int, text string) {
	if p == nil {
		return nil
	}
	return func(stream int, text string) { p.push(-1, stream, text) }
}
