package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// ErrClosed is returned for commands in flight or started after the agent's
// pipes closed: the sandbox died (for example its memory limit killed the
// whole gVisor sandbox), was stopped, or broke the protocol (ErrProtocol).
var ErrClosed = errors.New("agent: connection to sandbox closed")

// ErrProtocol marks a connection the host ended because the agent sent
// what the protocol does not allow: the agent runs inside the sandbox, so
// its frames are untrusted input. Errors that match it match ErrClosed too.
var ErrProtocol = errors.New("agent: protocol violation")

// protocolError is a violation by the agent; it ends the connection.
type protocolError struct{ msg string }

func (e *protocolError) Error() string   { return "agent: protocol violation: " + e.msg }
func (e *protocolError) Unwrap() []error { return []error{ErrProtocol, ErrClosed} }

func violation(format string, args ...any) error {
	return &protocolError{fmt.Sprintf(format, args...)}
}

// Client is the host side of one agent connection. It is safe for concurrent
// use; the agent runs commands one at a time in the order they arrive.
//
// Nothing the agent sends can make the client hold more than one frame
// (maxFrame) plus each call's MaxBytes per stream: output past a call's cap
// is dropped, and output far past it, an oversized or unknown frame, a
// result that is not JSON, a second Ready or a frame for a command never
// sent ends the connection with an error matching ErrProtocol.
type Client struct {
	r     io.Closer
	w     io.WriteCloser
	wmu   sync.Mutex
	hello Hello

	mu      sync.Mutex
	nextID  uint32
	pending map[uint32]*call
	err     error // set once the read loop ends
	done    chan struct{}
	// peers is what the agent last said of its other hosts, peersAt when
	// that changed (this host's clock).
	peers   Peers
	peersAt time.Time
}

// OutputFunc receives output as the command produces it, at most the
// request's MaxBytes per stream, in a slice of its own. It runs on the
// connection's read loop and must not block for long; it is never called
// after Exec returned.
type OutputFunc func(stream byte, data []byte)

type call struct {
	max            int      // bytes kept per stream
	stdout, stderr []byte   // what is kept
	received       [3]int64 // bytes received per stream, kept or not
	result         chan ExecResult

	onOutput OutputFunc
	cbMu     sync.Mutex // held while onOutput runs
	returned bool       // Exec returned: onOutput is not called any more

	file *fileCall // set on a file request's call
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
		return Resume(r, w, f.hello), nil
	case <-ctx.Done():
		r.Close()
		w.Close()
		return nil, fmt.Errorf("agent did not start: %w", ctx.Err())
	}
}

// Resume returns a client for an agent that has already said hello on
// another connection: one restored from a checkpoint, whose stdin and
// stdout are now r's and w's far ends. It sends nothing and waits for
// nothing; hello is what the agent said when it started.
func Resume(r io.ReadCloser, w io.WriteCloser, hello Hello) *Client {
	c := &Client{r: r, w: w, hello: hello, pending: map[uint32]*call{}, done: make(chan struct{})}
	if hello.Peers != nil && (*hello.Peers != Peers{}) {
		c.peers, c.peersAt = *hello.Peers, time.Now()
	}
	go c.readLoop(r)
	return c
}

// Hello is what the agent said when it started.
func (c *Client) Hello() Hello { return c.hello }

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err tells why the connection ended: nil while it is open, else an error
// matching ErrClosed and, when the agent broke the protocol, ErrProtocol.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the agent's stdin; the agent kills its processes and exits.
func (c *Client) Close() error { return c.w.Close() }

func (c *Client) readLoop(r io.Reader) {
	var buf []byte
	var err error
	for err == nil {
		var typ byte
		var id uint32
		var payload []byte
		typ, id, payload, err = readFrame(r, buf)
		if err != nil {
			if errors.Is(err, errFrameSize) {
				err = violation("%v", err)
			}
			break
		}
		buf = payload[:0]
		err = c.handle(typ, id, payload)
	}
	var perr *protocolError
	if !errors.As(err, &perr) {
		err = ErrClosed
	}
	// A connection that broke the protocol is ended from this side too:
	// the agent sees its stdin close and exits, and nothing more is read.
	c.r.Close()
	c.w.Close()
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	// Done first: a call that learns the connection ended finds Done
	// closed too (a caller deciding what the end means looks at it).
	close(c.done)
	for _, cl := range pending {
		close(cl.result)
	}
}

// handle checks one frame from the agent and routes it to its call.
func (c *Client) handle(typ byte, id uint32, payload []byte) error {
	switch typ {
	case frameOutput, frameDone, frameData, frameFileDone:
	case framePeers:
		return c.notePeers(id, payload)
	case frameReady:
		return violation("a second ready frame")
	default:
		return violation("unknown frame type %d", typ)
	}
	c.mu.Lock()
	issued := id != 0 && id <= c.nextID
	cl := c.pending[id]
	c.mu.Unlock()
	if !issued {
		return violation("frame type %d for command %d, which was never sent", typ, id)
	}
	if cl != nil && (cl.file != nil) != (typ == frameData || typ == frameFileDone) {
		return violation("frame type %d for request %d of the other kind", typ, id)
	}
	if typ == frameData || typ == frameFileDone {
		if cl == nil {
			return nil // canceled
		}
		return c.fileFrame(id, cl.file, typ, payload)
	}
	if typ == frameDone {
		var res ExecResult
		if err := json.Unmarshal(payload, &res); err != nil {
			return violation("result of command %d is not valid JSON: %v", id, err)
		}
		if cl == nil {
			return nil // canceled: nobody waits for it
		}
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		cl.result <- res
		return nil
	}
	if len(payload) < 1 || (payload[0] != Stdout && payload[0] != Stderr) {
		return violation("output frame of command %d names no stream", id)
	}
	if cl == nil {
		return nil // canceled
	}
	return cl.output(id, payload[0], payload[1:])
}

// notePeers takes a Peers frame.
func (c *Client) notePeers(id uint32, payload []byte) error {
	if c.hello.Peers == nil {
		return violation("unknown frame type %d", framePeers)
	}
	var p Peers
	if err := json.Unmarshal(payload, &p); err != nil || id != 0 || p.Hosts < 0 {
		return violation("a peers frame of id %d that is not valid (%q)", id, payload)
	}
	c.mu.Lock()
	if p != c.peers {
		c.peers, c.peersAt = p, time.Now()
	}
	c.mu.Unlock()
	return nil
}

// ErrHeld: another host holds the sandbox (Hold), which it does to put
// the sandbox to sleep; a command or file request meanwhile is refused
// with it, without having run.
var ErrHeld = errors.New("agent: another host holds the sandbox (it is being put to sleep)")

// Hold asks the agent to serve this connection alone from now until it
// ends: it returns once no other host (another gateway replica) has a
// command running or a file request in progress, and from then on their
// commands and file requests fail with ErrHeld, not run. A host holds
// the sandbox to archive its home before the pod is deleted, so that
// nothing another host does meanwhile is lost with the pod; it ends the
// hold with Release (or by closing the connection). An agent that serves
// one host at a time (its Hello has no Peers) has nothing to hold: nil at
// once. Another host's hold is ErrHeld.
func (c *Client) Hold(ctx context.Context) error {
	if c.hello.Peers == nil {
		return nil
	}
	cl := &call{result: make(chan ExecResult, 1)}
	id, err := c.start(frameHold, cl, nil)
	if err != nil {
		return err
	}
	select {
	case res, ok := <-cl.result:
		switch {
		case !ok:
			return c.Err()
		case res.Error != "":
			return ErrHeld
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return ctx.Err()
	}
}

// Release ends this connection's hold (Hold), if it has one.
func (c *Client) Release() error {
	if c.hello.Peers == nil {
		return nil
	}
	return c.send(frameRelease, 0)
}

// Peers tells what the agent last said of the other hosts it serves, and
// when that changed by this host's clock (zero when it never said): while
// Busy another host's command or file request is in progress, and the
// time is when one last began or ended, or a host came or went.
func (c *Client) Peers() (Peers, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peers, c.peersAt
}

// output keeps the head of one stream up to the call's cap and passes a
// copy to the call's callback.
func (cl *call) output(id uint32, stream byte, data []byte) error {
	cl.received[stream] += int64(len(data))
	// The agent never sends past the cap; one frame of slack before
	// calling it a violation.
	if cl.received[stream] > int64(cl.max)+maxFrame {
		return violation("command %d sent %d bytes on stream %d, cap %d", id, cl.received[stream], stream, cl.max)
	}
	kept := &cl.stdout
	if stream == Stderr {
		kept = &cl.stderr
	}
	data = data[:min(len(data), cl.max-len(*kept))]
	if len(data) == 0 {
		return nil
	}
	*kept = append(*kept, data...)
	if cl.onOutput != nil {
		own := bytes.Clone(data)
		cl.cbMu.Lock()
		if !cl.returned {
			cl.onOutput(stream, own)
		}
		cl.cbMu.Unlock()
	}
	return nil
}

// Output is what one command printed, capped at the request's MaxBytes per
// stream, and how it ended.
type Output struct {
	Stdout, Stderr []byte
	ExecResult
}

// ErrNoResident: the agent is too old to start resident processes.
var ErrNoResident = errors.New("agent: the sandbox's agent does not start resident processes (an older version)")

// Exec runs one command and waits for it. When req.TimeoutMs passes first,
// by the host's clock, the agent kills the command's process tree and
// reports it timed out. When ctx ends first the command's process tree is
// killed and ctx's error returned. When the connection
// ends first the error matches ErrClosed (and ErrProtocol if the agent
// broke the protocol).
func (c *Client) Exec(ctx context.Context, req ExecRequest, onOutput OutputFunc) (Output, error) {
	if req.Resident && !c.hello.Resident {
		return Output{}, ErrNoResident
	}
	if req.MaxBytes <= 0 {
		req.MaxBytes = DefaultMaxBytes
	}
	payload, err := json.Marshal(req)
	if err != nil {
		return Output{}, err
	}
	cl := &call{max: req.MaxBytes, onOutput: onOutput, result: make(chan ExecResult, 1)}
	// No callback after this returns, however it returns.
	defer func() {
		cl.cbMu.Lock()
		cl.returned = true
		cl.cbMu.Unlock()
	}()
	id, err := c.start(frameExec, cl, payload)
	if err != nil {
		return Output{}, err
	}
	if req.TimeoutMs > 0 {
		// The host's clock times the command (see the package comment).
		// A send that finds the connection gone fails, and the caller's
		// own deadline ends the wait.
		t := time.AfterFunc(time.Duration(req.TimeoutMs)*time.Millisecond, func() { c.send(frameTimeout, id) })
		defer t.Stop()
	}
	select {
	case res, ok := <-cl.result:
		switch {
		case !ok:
			return Output{}, c.Err()
		case res.Held:
			return Output{}, ErrHeld
		}
		return Output{Stdout: cl.stdout, Stderr: cl.stderr, ExecResult: res}, nil
	case <-ctx.Done():
		c.forget(id)
		c.send(frameCancel, id)
		return Output{}, ctx.Err()
	}
}

// ErrUnsent marks the error of a request that never reached the agent:
// the connection had ended before it was sent, so it did not run and may
// be made again on a new connection. Errors that match it match ErrClosed
// too.
var ErrUnsent = errors.New("agent: the request was not sent")

// start registers cl under a new id and sends its first frame.
func (c *Client) start(typ byte, cl *call, payload []byte) (uint32, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, fmt.Errorf("%w (%w)", err, ErrUnsent)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cl
	c.mu.Unlock()
	if err := c.send(typ, id, payload); err != nil {
		c.forget(id)
		if cerr := c.Err(); cerr != nil {
			return 0, fmt.Errorf("%w (%w)", cerr, ErrUnsent)
		}
		return 0, fmt.Errorf("%w: %w: %v", ErrClosed, ErrUnsent, err)
	}
	return id, nil
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
