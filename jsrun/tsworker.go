package jsrun

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"sync"
	"time"

	"github.com/evanw/esbuild/pkg/api"
)

// esbuild's transform runs in a resident child process: its parser,
// visitor and printer recurse once per level of nesting with no limit, and
// a Go stack overflow is not a panic but the end of the process. In the
// child, a source that overflows (or outgrows the child's stack and memory
// caps, or its time) ends the child, which is restarted for the next
// source; the caller gets an error. tsNestingDepth still refuses the known
// deep shapes first, with a clearer message and without a restart.
//
// The child is this same executable: the package's init serves the
// transform instead of running main when tsWorkerEnv is set, so any binary
// that links jsrun (shellgate, a test binary, an application) is its own
// worker. When the executable cannot be started, the transform runs in
// the process, guarded by the nesting scan alone (tsInProcess reports it).

const tsWorkerEnv = "JSRUN_TS_WORKER"

// Caps of the worker: its stack (esbuild needs about 1 KB per level; the
// scan allows 500 levels), its heap and how long one transform may take.
const (
	tsWorkerStack  = 64 << 20
	tsWorkerMemory = 512 << 20
	// tsMaxTransform bounds one transform whatever the run's time limit.
	tsMaxTransform = 10 * time.Second
)

func init() {
	if os.Getenv(tsWorkerEnv) != "1" {
		return
	}
	debug.SetMaxStack(tsWorkerStack)
	debug.SetMemoryLimit(tsWorkerMemory)
	err := serveTSWorker(os.Stdin, os.Stdout)
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, "jsrun typescript worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// tsReply is the worker's answer to one source.
type tsReply struct {
	Code string `json:"code"`
	Map  []byte `json:"map,omitempty"`
	Err  *struct {
		Text string `json:"text"`
		Line int    `json:"line"`
		Col  int    `json:"col"`
	} `json:"err,omitempty"`
}

// serveTSWorker answers length-prefixed sources with length-prefixed JSON
// replies until its input ends.
func serveTSWorker(in io.Reader, out io.Writer) error {
	r, w := bufio.NewReader(in), bufio.NewWriter(out)
	for {
		src, err := readTSFrame(r, maxTSFrame)
		if err != nil {
			return err
		}
		b, err := json.Marshal(esbuildTransform(string(src)))
		if err != nil {
			return err
		}
		if err := writeTSFrame(w, b); err != nil {
			return err
		}
	}
}

// maxTSFrame bounds a frame either way: a source is at most the largest
// SourceBytes limit, a reply its code and map.
const maxTSFrame = 256 << 20

func readTSFrame(r io.Reader, max uint32) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > max {
		return nil, fmt.Errorf("frame of %d bytes, over %d", size, max)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func writeTSFrame(w *bufio.Writer, b []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	w.Write(n[:])
	w.Write(b)
	return w.Flush()
}

// esbuildTransform strips the types of the wrapped source (what
// transformTypeScript gives it); positions in Err are esbuild's (line
// 1-based, column 0-based).
func esbuildTransform(wrapped string) tsReply {
	res := api.Transform(wrapped, api.TransformOptions{
		Loader:         api.LoaderTS,
		Target:         api.ESNext,
		Charset:        api.CharsetUTF8,
		Sourcemap:      api.SourceMapExternal,
		SourcesContent: api.SourcesContentExclude,
		Sourcefile:     "source.ts",
		LogLevel:       api.LogLevelSilent,
	})
	var rep tsReply
	if len(res.Errors) > 0 {
		m := res.Errors[0]
		rep.Err = &struct {
			Text string `json:"text"`
			Line int    `json:"line"`
			Col  int    `json:"col"`
		}{Text: m.Text}
		if m.Location != nil {
			rep.Err.Line, rep.Err.Col = m.Location.Line, m.Location.Column
		}
		return rep
	}
	rep.Code, rep.Map = string(res.Code), res.Map
	return rep
}

// errTSWorkerCrashed: the child ended while transforming a source.
var errTSWorkerCrashed = errors.New("the TypeScript transform process ended on this source")

// tsWorker is the resident child; one transform at a time (the transforms
// of recent sources are cached, so few reach it).
type tsWorker struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  *bufio.Writer
	inc io.Closer
	out *bufio.Reader
	// broken: the executable cannot be started; transforms run in process.
	broken bool
	starts int // how many children were started (tests count restarts)
}

var tsw tsWorker

// tsInProcess reports whether transforms run in this process (no worker).
func tsInProcess() bool {
	tsw.mu.Lock()
	defer tsw.mu.Unlock()
	if tsw.cmd == nil && !tsw.broken {
		tsw.start()
	}
	return tsw.broken
}

func (w *tsWorker) start() {
	exe, err := os.Executable()
	if err != nil {
		w.broken = true
		return
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{tsWorkerEnv + "=1", "GOMAXPROCS=1", "GOTRACEBACK=none"}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		w.broken = true
		return
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.broken = true
		return
	}
	if err := cmd.Start(); err != nil {
		w.broken = true
		return
	}
	w.cmd, w.in, w.inc, w.out = cmd, bufio.NewWriter(stdin), stdin, bufio.NewReader(stdout)
	w.starts++
}

// stop kills the child and reaps it.
func (w *tsWorker) stop() {
	if w.cmd == nil {
		return
	}
	_ = w.cmd.Process.Kill()
	_ = w.inc.Close()
	_ = w.cmd.Wait()
	w.cmd = nil
}

// transform sends the wrapped source to the child and waits for its reply,
// at most timeout (the child is killed then, and on any failure).
func (w *tsWorker) transform(ctx context.Context, wrapped string, timeout time.Duration) (tsReply, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil && !w.broken {
		w.start()
	}
	if w.broken {
		return esbuildTransform(wrapped), nil
	}
	type answer struct {
		rep tsReply
		err error
	}
	done := make(chan answer, 1)
	in, out := w.in, w.out
	go func() {
		if err := writeTSFrame(in, []byte(wrapped)); err != nil {
			done <- answer{err: err}
			return
		}
		b, err := readTSFrame(out, maxTSFrame)
		if err != nil {
			done <- answer{err: err}
			return
		}
		var rep tsReply
		err = json.Unmarshal(b, &rep)
		done <- answer{rep, err}
	}()
	t := time.NewTimer(min(timeout, tsMaxTransform))
	defer t.Stop()
	select {
	case a := <-done:
		if a.err != nil {
			w.stop()
			return tsReply{}, fmt.Errorf("%w: %v", errTSWorkerCrashed, a.err)
		}
		return a.rep, nil
	case <-t.C:
		w.stop()
		<-done
		return tsReply{}, errTSTimeout
	case <-ctx.Done():
		w.stop()
		<-done
		return tsReply{}, ctx.Err()
	}
}

var errTSTimeout = errors.New("stripping the TypeScript types took too long")
