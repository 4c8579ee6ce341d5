package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeAgent is a hostile agent: a goroutine on the other end of two pipes
// that writes whatever frames a test tells it to.
type fakeAgent struct {
	in  io.Reader      // frames from the host: the agent's stdin
	out *io.PipeWriter // frames to the host: the agent's stdout
}

// dialFake connects a client to a fake agent that has sent its Ready frame.
func dialFake(t *testing.T) (*Client, *fakeAgent) {
	t.Helper()
	hostR, agentW := io.Pipe()
	agentR, hostW := io.Pipe()
	f := &fakeAgent{in: agentR, out: agentW}
	go writeFrame(agentW, frameReady, 0, mustJSON(Hello{Version: ProtocolVersion, PID: 1, Files: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, hostR, hostW)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); agentW.Close() })
	return c, f
}

// next reads the next frame the host sent.
func (f *fakeAgent) next(t *testing.T) (typ byte, id uint32, payload []byte) {
	typ, id, payload, err := readFrame(f.in, nil)
	if err != nil {
		t.Errorf("fake agent: read: %v", err)
	}
	return typ, id, payload
}

// hostHungUp reports whether the host closed the agent's stdin, reading
// and dropping whatever frames it still sent.
func (f *fakeAgent) hostHungUp() bool {
	_, err := io.Copy(io.Discard, f.in)
	return err == nil
}

func output(stream byte, data string) []byte { return append([]byte{stream}, data...) }

func TestClientCapsOutputAtMaxBytes(t *testing.T) {
	c, f := dialFake(t)
	go func() {
		_, id, _ := f.next(t)
		// Twice the cap on stdout in one frame, the cap plus one in two
		// frames on stderr: the agent is not to be trusted to cap.
		writeFrame(f.out, frameOutput, id, output(Stdout, strings.Repeat("o", 200)))
		writeFrame(f.out, frameOutput, id, output(Stderr, strings.Repeat("e", 60)))
		writeFrame(f.out, frameOutput, id, output(Stderr, strings.Repeat("E", 41)))
		writeFrame(f.out, frameDone, id, mustJSON(ExecResult{StdoutBytes: 200, StderrBytes: 101}))
	}()
	var seen [3]int
	out, err := c.Exec(context.Background(), ExecRequest{Command: "x", MaxBytes: 100}, func(s byte, d []byte) { seen[s] += len(d) })
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Stdout) != strings.Repeat("o", 100) || string(out.Stderr) != strings.Repeat("e", 60)+strings.Repeat("E", 40) {
		t.Errorf("kept %d stdout and %d stderr bytes, cap 100: %q %q", len(out.Stdout), len(out.Stderr), out.Stdout, out.Stderr)
	}
	if seen[Stdout] != 100 || seen[Stderr] != 100 {
		t.Errorf("callback saw %d stdout and %d stderr bytes, cap 100", seen[Stdout], seen[Stderr])
	}
	// Without MaxBytes the cap is the agent's default.
	go func() {
		_, id, _ := f.next(t)
		writeFrame(f.out, frameOutput, id, output(Stdout, strings.Repeat("x", DefaultMaxBytes+10)))
		writeFrame(f.out, frameDone, id, mustJSON(ExecResult{}))
	}()
	out, err = c.Exec(context.Background(), ExecRequest{Command: "x"}, nil)
	if err != nil || len(out.Stdout) != DefaultMaxBytes {
		t.Errorf("default cap: kept %d bytes, want %d (%v)", len(out.Stdout), DefaultMaxBytes, err)
	}
}

func TestClientEndsConnectionOnProtocolViolation(t *testing.T) {
	header := func(typ byte, id, n uint32) []byte {
		b := make([]byte, 9)
		b[0] = typ
		binary.BigEndian.PutUint32(b[1:5], id)
		binary.BigEndian.PutUint32(b[5:9], n)
		return b
	}
	cases := []struct {
		name string
		send func(f *fakeAgent, id uint32)
	}{
		{"01 oversized frame", func(f *fakeAgent, id uint32) { f.out.Write(header(frameOutput, id, maxFrame+1)) }},
		{"02 done with bad JSON", func(f *fakeAgent, id uint32) { writeFrame(f.out, frameDone, id, []byte("{not json")) }},
		{"03 unknown frame type", func(f *fakeAgent, id uint32) { writeFrame(f.out, 77, id, []byte("x")) }},
		{"04 second ready", func(f *fakeAgent, id uint32) {
			writeFrame(f.out, frameReady, 0, mustJSON(Hello{Version: ProtocolVersion}))
		}},
		{"05 frame for an id never issued", func(f *fakeAgent, id uint32) { writeFrame(f.out, frameOutput, id+1000, output(Stdout, "x")) }},
		{"06 frame for id 0", func(f *fakeAgent, id uint32) { writeFrame(f.out, frameDone, 0, mustJSON(ExecResult{})) }},
		{"07 output without a stream", func(f *fakeAgent, id uint32) { writeFrame(f.out, frameOutput, id, nil) }},
		{"08 output on an unknown stream", func(f *fakeAgent, id uint32) { writeFrame(f.out, frameOutput, id, output(9, "x")) }},
		{"09 a request frame from the agent", func(f *fakeAgent, id uint32) { writeFrame(f.out, frameExec, id, []byte("{}")) }},
		{"10 peers from an agent whose hello did not offer them", func(f *fakeAgent, id uint32) {
			writeFrame(f.out, framePeers, 0, mustJSON(Peers{Hosts: 1, Busy: true}))
		}},
		{"11 output far beyond the cap", func(f *fakeAgent, id uint32) {
			chunk := output(Stdout, strings.Repeat("y", maxFrame-1))
			for i := 0; i < 4; i++ {
				if writeFrame(f.out, frameOutput, id, chunk) != nil {
					return // the host hung up, as it should
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, f := dialFake(t)
			hungUp := make(chan bool, 1)
			go func() {
				_, id, _ := f.next(t)
				tc.send(f, id)
				hungUp <- f.hostHungUp()
			}()
			// The deadline only keeps a client that ignores the violation
			// from hanging the test.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.Exec(ctx, ExecRequest{Command: "x", MaxBytes: 10}, nil)
			if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrClosed) {
				t.Fatalf("Exec error %v, want a protocol violation", err)
			}
			<-c.Done()
			if !errors.Is(c.Err(), ErrProtocol) {
				t.Errorf("Err() = %v", c.Err())
			}
			if !<-hungUp {
				t.Error("the host did not close the agent's stdin")
			}
			if _, err := c.Exec(context.Background(), ExecRequest{Command: "y"}, nil); !errors.Is(err, ErrProtocol) {
				t.Errorf("Exec after the violation: %v", err)
			}
		})
	}
}

// TestClientMemoryIsBounded floods the client with output for a command it
// canceled and for a live one: the host holds one frame at a time and the
// cap, never the flood.
func TestClientMemoryIsBounded(t *testing.T) {
	c, f := dialFake(t)
	const flood = 64 // frames of 1 MiB
	// Frames encoded once, so that the fake agent allocates nothing while
	// it floods: what the test measures is the client.
	encode := func(id uint32) []byte {
		var b bytes.Buffer
		writeFrame(&b, frameOutput, id, output(Stdout, strings.Repeat("z", maxFrame-1)))
		return b.Bytes()
	}
	first, second := encode(1), encode(2)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		_, id, _ := f.next(t)
		close(started)
		f.next(t) // the cancel
		for i := 0; i < flood; i++ {
			f.out.Write(first)
		}
		writeFrame(f.out, frameDone, id, mustJSON(ExecResult{}))
		_, id2, _ := f.next(t)
		f.out.Write(second)
		writeFrame(f.out, frameDone, id2, mustJSON(ExecResult{}))
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() { <-started; cancel() }()
	if _, err := c.Exec(ctx, ExecRequest{Command: "x", MaxBytes: 1000}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Exec: %v", err)
	}
	out, err := c.Exec(context.Background(), ExecRequest{Command: "y", MaxBytes: 1000}, nil)
	if err != nil || len(out.Stdout) != 1000 {
		t.Fatalf("second Exec: %d bytes, %v", len(out.Stdout), err)
	}
	runtime.ReadMemStats(&after)
	// The flood is 65 MiB; reading it frame by frame into one reused
	// buffer allocates a few MiB at most.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("the client allocated %d MiB for %d MiB of output", grew>>20, flood+1)
	}
}

// TestClientCallbackGetsItsOwnCopy: the read loop reuses its buffer, so a
// callback that keeps the slices it is given must still see each chunk
// as it was sent.
func TestClientCallbackGetsItsOwnCopy(t *testing.T) {
	c, f := dialFake(t)
	go func() {
		_, id, _ := f.next(t)
		for _, s := range []string{"first chunk\n", "second one\n", "3rd\n"} {
			writeFrame(f.out, frameOutput, id, output(Stdout, s))
		}
		writeFrame(f.out, frameDone, id, mustJSON(ExecResult{}))
	}()
	var kept [][]byte
	out, err := c.Exec(context.Background(), ExecRequest{Command: "x", MaxBytes: 1000}, func(_ byte, d []byte) { kept = append(kept, d) })
	if err != nil {
		t.Fatal(err)
	}
	if got := string(bytes.Join(kept, nil)); got != "first chunk\nsecond one\n3rd\n" || string(out.Stdout) != got {
		t.Errorf("callback slices now read %q, stdout %q", got, out.Stdout)
	}
}

// TestClientNoCallbackAfterExecReturned: output the agent still sends for
// a command whose context ended is never passed to its callback.
func TestClientNoCallbackAfterExecReturned(t *testing.T) {
	c, f := dialFake(t)
	var returned, late atomic.Bool
	var calls atomic.Int32
	first := make(chan struct{})
	var once sync.Once
	cb := func(_ byte, d []byte) {
		calls.Add(1)
		if returned.Load() {
			late.Store(true)
		}
		once.Do(func() { close(first) })
	}
	go func() {
		_, id, _ := f.next(t)
		writeFrame(f.out, frameOutput, id, output(Stdout, "before\n"))
		f.next(t) // the host's cancel: it gave up on the command
		for i := 0; i < 100; i++ {
			writeFrame(f.out, frameOutput, id, output(Stdout, "after\n"))
		}
		writeFrame(f.out, frameDone, id, mustJSON(ExecResult{Canceled: true}))
		_, id2, _ := f.next(t)
		writeFrame(f.out, frameDone, id2, mustJSON(ExecResult{}))
	}()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-first; cancel() }()
	if _, err := c.Exec(ctx, ExecRequest{Command: "x", MaxBytes: 1 << 20}, cb); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec: %v", err)
	}
	returned.Store(true)
	// The next command's result comes after every frame of the first.
	if _, err := c.Exec(context.Background(), ExecRequest{Command: "y"}, nil); err != nil {
		t.Fatal(err)
	}
	if late.Load() || calls.Load() != 1 {
		t.Errorf("callback ran %d times, after Exec returned: %v", calls.Load(), late.Load())
	}
}

// TestClientTimesCommands: the host's clock times a command. The request
// does not carry the timeout, so the agent keeps no timer it could be
// fooled by; the client sends a Timeout frame for the command once its
// time is up, and none for a command that ended before.
func TestClientTimesCommands(t *testing.T) {
	c, f := dialFake(t)
	type frame struct {
		typ byte
		id  uint32
	}
	frames := make(chan frame, 4) // what the host sent
	go func() {
		defer close(frames)
		for {
			typ, id, payload, err := readFrame(f.in, nil)
			if err != nil {
				return
			}
			if typ == frameExec && strings.Contains(string(payload), "timeout") {
				t.Errorf("the request tells the agent its timeout: %s", payload)
			}
			frames <- frame{typ, id}
		}
	}()
	next := func(want byte) uint32 {
		t.Helper()
		select {
		case fr := <-frames:
			if fr.typ != want {
				t.Errorf("host sent frame type %d, want %d", fr.typ, want)
			}
			return fr.id
		case <-time.After(10 * time.Second):
			t.Errorf("no frame of type %d from the host", want)
			return 0
		}
	}

	done := make(chan Output, 1)
	go func() {
		out, err := c.Exec(context.Background(), ExecRequest{Command: "sleep 1000", TimeoutMs: 250}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	id := next(frameExec)
	if got := next(frameTimeout); got != id {
		t.Fatalf("Timeout frame for %d, the command is %d", got, id)
	}
	writeFrame(f.out, frameDone, id, mustJSON(ExecResult{ExitCode: 137, TimedOut: true}))
	if out := <-done; !out.TimedOut {
		t.Errorf("result %+v, want timed out", out.ExecResult)
	}

	// A command that ends in time: its timer is stopped, no frame follows
	// (its time, 1 s, is ample for the answer's few hand-offs even under
	// -race on a loaded machine; the wait for a stray frame outlasts it).
	go func() {
		writeFrame(f.out, frameDone, next(frameExec), mustJSON(ExecResult{}))
	}()
	if out, err := c.Exec(context.Background(), ExecRequest{Command: "true", TimeoutMs: 1000}, nil); err != nil || out.TimedOut {
		t.Fatalf("quick command: %+v, %v", out, err)
	}
	select {
	case fr := <-frames:
		t.Errorf("after a command that ended in time the host sent frame type %d for %d", fr.typ, fr.id)
	case <-time.After(1500 * time.Millisecond):
	}
}
