// Package agent is the small init process that runs as PID 1 inside every
// sandbox, and the host-side client that talks to it.
//
// The host starts a container whose only process is the agent, with the
// agent's stdin and stdout connected to pipes the host holds. Over those
// pipes the host sends exec requests and the agent answers with output
// chunks and a final result. The agent does the fork/exec, the output
// capping and the killing of the whole process tree itself, so a warm
// command costs one pipe round trip instead of a runtime CLI call.
//
// The host times each command, by its own clock, and sends a Timeout frame
// when the command's time is up: the clock a sandbox sees is not to be
// trusted with a hard limit. Under gVisor on these machines, loaded, the
// agent's 300 s timer once fired after 3 s of the host's time, and on
// another run the vDSO's clock and the clock_gettime system call's drifted
// 0.6 s apart for a moment.
//
// The wire format is a stream of frames:
//
//	type uint8 | id uint32 (big endian) | length uint32 | payload
//
// Exec and Done payloads are JSON; Output payloads are one stream byte
// (1 stdout, 2 stderr) followed by raw bytes.
//
// # File operations
//
// File operations on a pod (`sandbox/kube/files.go`, `sandbox/agent/fileproto.go`,
// `files_linux.go`, `fileclient.go`): frames File (request JSON: op list, stat,
// read, write or remove, the home, a path, a cap, a list page), Data (file bytes,
// at most 64 KiB each; empty = end) and FileDone (result JSON; paths as bytes so
// non-UTF-8 names survive). The agent runs each on a goroutine locked to a thread
// it sets to the commands' fsuid/fsgid (the thread is discarded afterwards) and
// uses `sandbox/homefs`, the same code as `sandbox.Manager`'s file calls:
// `os.Root` beneath the home, `O_NOFOLLOW|O_NONBLOCK`, regular files only, the
// bounded depth-first listing, the temp-file-and-rename write. A read announces
// its size (refused over the cap) and then sends exactly that many bytes; a write
// over its cap fails. The client checks every answer: clean paths inside the
// home, a page within its limit and strictly ordered past the cursor, sizes not
// negative, a read within the cap and exactly its announced size; anything else
// ends the connection with `agent.ErrProtocol`. A listing whose encoding would
// not fit one frame (long names) ends its page early with `More`. A file call
// holds the sandbox's lock (an open file until Close) and wakes a sleeping pod;
// it never creates a sandbox. The agent's Ready says `files: true`; an older
// agent (a pod image behind the gateway) would ignore the frames, so the client
// refuses file calls to it (`agent.ErrNoFiles`, answered 501 as not supported).
package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types.
const (
	frameReady  byte = 1 // agent → host, once at start; payload: Hello
	frameExec   byte = 2 // host → agent; payload: ExecRequest
	frameOutput byte = 3 // agent → host; payload: stream byte + data
	frameDone   byte = 4 // agent → host; payload: ExecResult
	frameCancel byte = 5 // host → agent; no payload: kill the command with this id
	// frameTimeout: host → agent, no payload: the time of the command with
	// this id is up; kill it and report it as timed out. Types 6 to 9 are
	// in tcp.go and fileproto.go.
	frameTimeout byte = 10
	// framePeers: agent → host, id 0; payload: Peers, sent when they
	// changed (only by an agent whose Hello says Peers).
	framePeers byte = 11
	// frameHold: host → agent, no payload: hold the sandbox (Client.Hold);
	// answered with a Done frame of this id. frameRelease (no payload, no
	// answer) ends the hold.
	frameHold    byte = 12
	frameRelease byte = 13
)

// Stream identifiers in Output frames.
const (
	Stdout byte = 1
	Stderr byte = 2
)

// maxFrame bounds any frame so that a corrupt or hostile peer cannot make the
// other side allocate without limit.
const maxFrame = 1 << 20

// errFrameSize is a frame larger than maxFrame.
var errFrameSize = errors.New("frame too large")

// Hello is the agent's first frame: it is ready to run commands.
type Hello struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
	// Files: the agent serves file requests (fileproto.go). An older
	// agent (a pod image behind the gateway) leaves it unset and would
	// ignore them, so the client refuses them with ErrNoFiles instead.
	Files bool `json:"files,omitempty"`
	// Resident: the agent starts resident processes (ExecRequest.Resident).
	// An older agent would run one as a command and kill it at its end, so
	// the client refuses them with ErrNoResident instead.
	Resident bool `json:"resident,omitempty"`
	// Peers is what the agent tells of the other hosts it serves as this
	// one connects; set by an agent that then tells of them whenever they
	// change (framePeers). An older agent never does, and the client
	// refuses them from one whose Hello has none.
	Peers *Peers `json:"peers,omitempty"`
}

// Peers is what the agent tells one host of the other hosts it serves
// (the other gateway replicas connected to a pod): how many there are and
// whether one of them has a command running or a file request in
// progress. A gateway uses them to leave alone a pod another replica
// still uses (idle sleep, shutdown).
type Peers struct {
	Hosts int  `json:"hosts"`
	Busy  bool `json:"busy"`
}

// ProtocolVersion is bumped on any incompatible change of the frames.
// Version 2: the host times commands (frameTimeout); a version 1 agent
// timed them by its own clock. Version 3: the network mode serves every
// host at once (Peers, Hold); a version 2 agent served the newest alone,
// closing the one before, which a version 3 gateway would take for a
// lost pod.
const ProtocolVersion = 3

// ExecRequest asks the agent to run one command.
type ExecRequest struct {
	// Shell and the command: the agent runs append(Shell, Command).
	Shell   []string `json:"shell"`
	Command string   `json:"command"`
	// Dir is the working directory.
	Dir string `json:"dir"`
	// TimeoutMs kills the whole process tree after this long (0: no
	// limit). The client times it and sends a Timeout frame; the agent is
	// not told and keeps no timer of its own.
	TimeoutMs int64 `json:"-"`
	// MaxBytes is the number of bytes kept per stream; the rest is read and
	// counted but dropped. 0 or less: DefaultMaxBytes.
	MaxBytes int `json:"max_bytes"`
	// Resident starts the command as the sandbox's resident process (a
	// language kernel): it outlives the request, which is answered as soon
	// as it has started, and the kill of what each command leaves behind
	// spares it and its descendants. Its stdin, stdout and stderr are
	// /dev/null. Starting a resident kills the one before it, with its
	// descendants; when the host goes away it dies with everything else.
	Resident bool `json:"resident,omitempty"`
}

// DefaultMaxBytes is the bytes kept per stream of a request without
// MaxBytes.
const DefaultMaxBytes = 64 << 10

// ExecResult is the outcome of one command.
type ExecResult struct {
	ExitCode int  `json:"exit_code"`
	Signal   int  `json:"signal,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
	Canceled bool `json:"canceled,omitempty"`
	// StdoutBytes and StderrBytes count everything the command wrote,
	// including what was dropped past MaxBytes.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// ProcessLimit is set when the command's processes and threads were
	// seen at (within one of) their limit, Options.Processes: a fork or a
	// new thread past it failed with EAGAIN.
	ProcessLimit bool `json:"process_limit,omitempty"`
	// Error is set when the command could not be started at all.
	Error string `json:"error,omitempty"`
	// Held: the command did not run, as another host holds the sandbox
	// (Client.Hold); the client returns ErrHeld.
	Held bool `json:"held,omitempty"`
}

func writeFrame(w io.Writer, typ byte, id uint32, payload ...[]byte) error {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	if n > maxFrame {
		return fmt.Errorf("agent: frame of %d bytes exceeds %d", n, maxFrame)
	}
	buf := make([]byte, 9, 9+n)
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:5], id)
	binary.BigEndian.PutUint32(buf[5:9], uint32(n))
	for _, p := range payload {
		buf = append(buf, p...)
	}
	_, err := w.Write(buf)
	return err
}

// readFrame reads one frame; buf is reused when large enough.
func readFrame(r io.Reader, buf []byte) (typ byte, id uint32, payload []byte, err error) {
	var hdr [9]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[5:9])
	if n > maxFrame {
		return 0, 0, nil, fmt.Errorf("agent: %w: %d bytes, at most %d", errFrameSize, n, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	payload = buf[:n]
	if _, err = io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	return hdr[0], binary.BigEndian.Uint32(hdr[1:5]), payload, nil
}
