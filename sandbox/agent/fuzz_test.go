package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/homefs"
)

// FuzzReadFrame: readFrame, over any bytes, reads exactly the frames a
// straightforward reading of the format finds, each of which writeFrame
// writes back byte for byte; it never holds a buffer larger than the
// frame it reads (or the one it was given), refuses a frame over maxFrame
// with errFrameSize before reading its payload, and reports a stream cut
// inside a frame as io.ErrUnexpectedEOF (io.EOF only between frames).
// The corpus is in testdata/fuzz/FuzzReadFrame.
func FuzzReadFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, stream []byte, bufCap uint16) {
		r := bytes.NewReader(stream)
		buf := make([]byte, 0, int(bufCap))
		rest := stream
		for {
			typ, id, payload, err := readFrame(r, buf)
			var n uint32
			if len(rest) >= 9 {
				n = binary.BigEndian.Uint32(rest[5:9])
			}
			var want error
			switch {
			case len(rest) == 0:
				want = io.EOF
			case len(rest) < 9:
				want = io.ErrUnexpectedEOF
			case n > maxFrame:
				want = errFrameSize
			case uint64(len(rest)) < 9+uint64(n):
				want = io.ErrUnexpectedEOF
			}
			if want != nil || err != nil {
				if !errors.Is(err, want) || want == nil {
					t.Fatalf("%d bytes left (frame of %d): %v, want %v", len(rest), n, err, want)
				}
				if want == errFrameSize && r.Len() != len(rest)-9 {
					t.Fatalf("the payload of an oversized frame was read")
				}
				return
			}
			if cap(payload) > max(cap(buf), int(n)) || len(payload) != int(n) {
				t.Fatalf("a frame of %d bytes in a buffer of %d (given %d)", n, cap(payload), cap(buf))
			}
			var out bytes.Buffer
			if err := writeFrame(&out, typ, id, payload); err != nil || !bytes.Equal(out.Bytes(), rest[:9+n]) {
				t.Fatalf("frame %d/%d/%q written back as %q (%v)", typ, id, payload, out.Bytes(), err)
			}
			rest = rest[9+n:]
			buf = payload[:0]
		}
	})
}

// FuzzClient: whatever the agent sends after its Ready frame (the fuzzed
// bytes, then the end of its stdout), the host's call ends — an Exec, a
// file read, a listing or a stat — and what it hands on keeps the
// protocol's promises: output within the call's MaxBytes per stream, and
// the callback given exactly what is kept; a file read never more bytes
// than the cap nor other than the size announced when it ends cleanly;
// listed and stated paths clean paths inside the home, a page within its
// limit and in order. A call that fails fails with ErrClosed (or a file
// error the agent named); the connection ends with an error matching
// ErrClosed. The corpus is in testdata/fuzz/FuzzClient.
func FuzzClient(f *testing.F) {
	f.Fuzz(func(t *testing.T, op byte, frames []byte) {
		// Not a timing: a call that waits past this has outlived the
		// connection (a hang), which fails the target below.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		hostR, agentW := io.Pipe()
		agentR, hostW := io.Pipe()
		agentDone := make(chan struct{})
		go func() {
			defer close(agentDone)
			defer agentW.Close()
			if writeFrame(agentW, frameReady, 0, mustJSON(Hello{Version: ProtocolVersion, PID: 1, Files: true})) != nil {
				return
			}
			// The host's request first, so that the frames answer a call
			// the host made; then whatever else it sends (cancels) until
			// it closes.
			if _, _, _, err := readFrame(agentR, nil); err != nil {
				return
			}
			go io.Copy(io.Discard, agentR)
			agentW.Write(frames)
		}()
		c, err := Dial(ctx, hostR, hostW)
		if err != nil {
			t.Fatal(err)
		}
		const max = 8
		switch op % 4 {
		case 0:
			var got [3][]byte
			out, err := c.Exec(ctx, ExecRequest{Command: "x", MaxBytes: max}, func(s byte, b []byte) { got[s] = append(got[s], b...) })
			if err != nil {
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("exec: %v", err)
				}
				break
			}
			if len(out.Stdout) > max || len(out.Stderr) > max || !bytes.Equal(got[Stdout], out.Stdout) || !bytes.Equal(got[Stderr], out.Stderr) {
				t.Fatalf("exec kept %q %q, passed on %q %q", out.Stdout, out.Stderr, got[Stdout], got[Stderr])
			}
		case 1:
			info, rc, err := c.OpenFile(ctx, "/home", "a", max)
			if err != nil {
				fileErr(t, err)
				break
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if info.Path != "a" || info.Size > max || len(b) > max || (err == nil && int64(len(b)) != info.Size) {
				t.Fatalf("read %+v gave %q (%v)", info, b, err)
			}
			if err != nil {
				fileErr(t, err)
			}
		case 2:
			list, err := c.ListFiles(ctx, "/home", homefs.ListOptions{Limit: 3, After: "b"})
			if err != nil {
				fileErr(t, err)
				break
			}
			prev := "b"
			for _, fi := range list.Files {
				if clean, err := homefs.CleanRel(fi.Path); err != nil || clean != fi.Path || fi.Path <= prev || fi.Size < 0 {
					t.Fatalf("listed %+v after %q", fi, prev)
				}
				prev = fi.Path
			}
			if len(list.Files) > 3 || (!list.More && list.Next != "") {
				t.Fatalf("a page of %d files, more %v next %q", len(list.Files), list.More, list.Next)
			}
		case 3:
			info, err := c.StatFile(ctx, "/home", "a")
			if err != nil {
				fileErr(t, err)
				break
			}
			if info.Path != "a" || info.Size < 0 || info.Mode&^0o777 != 0 {
				t.Fatalf("stat gave %+v", info)
			}
		}
		c.Close()
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the connection did not end")
		}
		if err := c.Err(); !errors.Is(err, ErrClosed) {
			t.Fatalf("the connection ended with %v", err)
		}
		<-agentDone
		if ctx.Err() != nil {
			t.Fatal("a call outlived the connection")
		}
	})
}

// fileErr fails t unless err is the end of the connection or an error the
// agent named for the file (its text, bounded, after "agent: ").
func fileErr(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrClosed) && !strings.HasPrefix(err.Error(), "agent: ") {
		t.Fatalf("file call: %v", err)
	}
}
