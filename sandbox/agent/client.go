package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrClosed is returned for commands in flight or started after the agent's
// pipes closed: the sandbox died (for example its memory limit killed the
// whole gVisor sandbox) or was stopped.
var ErrClosed = errors.New("agent: connection to sandbox closed")

// Client is the host side of one agent connection. It is safe for concurrent
// use; the agent runs commands one at a time in the order they arrive.
type Client struct {
	w     io.WriteCloser
	wmu   sync.Mutex
	hello Hello

	mu      sync.Mutex
	nextID  uint32
	pending map[uint32]*call
	err     error // set once the read loop ends
	done    chan struct{}
}

// OutputFunc receives output as the command produces it. It must not block
// for long: it runs on the connection's read loop.
type OutputFunc func(stream byte, data []byte)

type call struct {
	stdout, stderr bytes.Buffer
	onOutput       OutputFunc
	result         chan ExecResult
}

// Dial waits for the agent's Ready frame on r and returns a client. r and w
// are the host ends of the agent's stdout and stdin.
func Dial(ctx context.Context, r io.ReadCloser, w io.WriteCloser) (*Client, error) {
	type first struct {
		hello Hello
		err   error
	}
	ch := make(chan first, 1)
	go func() {
		typ, _, payload, err := readFrame(r, nil)
		if err == nil && typ != frameReady {
			err = fmt.Errorf("agent: expected ready frame, got type %d", typ)
		}
		var h Hello
		if err == nil {
			err = json.Unmarshal(payload, &h)
		}
		if err == nil && h.Version != ProtocolVersion {
			err = fmt.Errorf("agent: protocol version %d, want %d", h.Version, ProtocolVersion)
		}
		ch <- first{h, err}
	}()
	select {
	case f := <-ch:
		if f.err != nil {
			r.Close()
			w.Close()
			return nil, fmt.Errorf("agent did not start: %w", f.err)
		}
		c := &Client{w: w, hello: f.hello, pending: map[uint32]*call{}, done: make(chan struct{})}
		go c.readLoop(r)
		return c, nil
	case <-ctx.Done():
		r.Close()
		w.Close()
		return nil, fmt.Errorf("agent did not start: %w", ctx.Err())
	}
}

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close closes the agent's stdin; the agent kills its processes and exits.
func (c *Client) Close() error { return c.w.Close() }

func (c *Client) readLoop(r io.ReadCloser) {
	defer r.Close()
	var buf []byte
	var err error
	for {
		var typ byte
		var id uint32
		var payload []byte
		typ, id, payload, err = readFrame(r, buf)
		if err != nil {
			break
		}
		buf = payload[:0]
		c.mu.Lock()
		cl := c.pending[id]
		c.mu.Unlock()
		if cl == nil {
			continue
		}
		switch typ {
		case frameOutput:
			if len(payload) < 1 {
				continue
			}
			stream, data := payload[0], payload[1:]
			if cl.onOutput != nil {
				cl.onOutput(stream, data)
			}
			if stream == Stderr {
				cl.stderr.Write(data)
			} else {
				cl.stdout.Write(data)
			}
		case frameDone:
			var res ExecResult
			if jerr := json.Unmarshal(payload, &res); jerr != nil {
				res = ExecResult{ExitCode: -1, Error: "agent: bad result: " + jerr.Error()}
			}
			c.mu.Lock()
			delete(c.pending, id)
			c.mu.Unlock()
			cl.result <- res
		}
	}
	c.mu.Lock()
	c.err = ErrClosed
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, cl := range pending {
		close(cl.result)
	}
	close(c.done)
}

// Output is what one command printed, capped at the request's MaxBytes per
// stream, and how it ended.
type Output struct {
	Stdout, Stderr []byte
	ExecResult
}

// Exec runs one command and waits for it. When ctx ends first the command's
// process tree is killed and ctx's error returned.
func (c *Client) Exec(ctx context.Context, req ExecRequest, onOutput OutputFunc) (Output, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return Output{}, err
	}
	cl := &call{onOutput: onOutput, result: make(chan ExecResult, 1)}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return Output{}, c.err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cl
	c.mu.Unlock()

	if err := c.send(frameExec, id, payload); err != nil {
		c.forget(id)
		return Output{}, fmt.Errorf("%w: %v", ErrClosed, err)
	}
	select {
	case res, ok := <-cl.result:
		if !ok {
			return Output{}, ErrClosed
		}
		return Output{Stdout: cl.stdout.Bytes(), Stderr: cl.stderr.Bytes(), ExecResult: res}, nil
	case <-ctx.Done():
		c.send(frameCancel, id)
		c.forget(id)
		return Output{}, ctx.Err()
	}
}

func (c *Client) forget(id uint32) {
	c.mu.Lock()
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

func (c *Client) send(typ byte, id uint32, payload ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return writeFrame(c.w, typ, id, payload...)
}
