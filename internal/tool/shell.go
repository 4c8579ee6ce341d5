// Package tool implements the server tools the model calls: validation and
// limits of their arguments, running them in the caller's sandbox, and the
// API-neutral shape of their results.
package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dustin/go-humanize"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/shellgate/shellgate/sandbox"
)

// Limits of one shell call (SPEC §2).
const (
	MaxCommands      = 100
	DefaultTimeoutMs = 120_000
	MaxTimeoutMs     = 300_000
	DefaultMaxOutput = 16_384
	MaxMaxOutput     = 65_536
)

// ShellArgs are the arguments a model writes for the shell tool.
type ShellArgs struct {
	Commands        []string `json:"commands"`
	TimeoutMs       *int64   `json:"timeout_ms,omitempty"`
	MaxOutputLength *int64   `json:"max_output_length,omitempty"`
}

// ErrInvalid marks arguments the caller must fix; the message says how.
var ErrInvalid = errors.New("invalid shell call")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// ParseShellArgs decodes a model's JSON arguments: the first JSON value of
// raw (text after it is ignored).
func ParseShellArgs(raw []byte) (ShellArgs, error) {
	var a ShellArgs
	// In one pass with encoding/json's semantics (the encoding/json/v2
	// module's v1 API, without encoding/json's separate validating scan
	// and a Decoder's buffer); anything else (trailing text, an error)
	// takes encoding/json's Decoder path, whose results and errors these
	// are (TestParseShellArgsMatchesDecoder).
	if jsonv1.Unmarshal(raw, &a) == nil {
		return a, nil
	}
	a = ShellArgs{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&a); err != nil {
		return ShellArgs{}, invalid("arguments are not a JSON object of the form {\"commands\": [\"...\"], \"timeout_ms\": N, \"max_output_length\": N}: %v", err)
	}
	return a, nil
}

// Plan is a validated shell call with its limits resolved.
type Plan struct {
	Commands        []string
	TimeoutMs       int64
	MaxOutputLength int
	// Notes say what was adjusted (a clamped limit), for logs and users.
	Notes []string
}

// Plan validates the call: 1–100 commands, positive limits; a timeout above
// 300,000 ms or an output cap above 65,536 is clamped to that maximum.
func (a ShellArgs) Plan() (Plan, error) {
	p := Plan{Commands: a.Commands, TimeoutMs: DefaultTimeoutMs, MaxOutputLength: DefaultMaxOutput}
	switch n := len(a.Commands); {
	case n == 0:
		return Plan{}, invalid("commands is empty: give 1 to %d commands", MaxCommands)
	case n > MaxCommands:
		return Plan{}, invalid("%d commands in one call: at most %d are allowed", n, MaxCommands)
	}
	for i, c := range a.Commands {
		if strings.TrimSpace(c) == "" {
			return Plan{}, invalid("command %d is empty", i+1)
		}
	}
	var err error
	p.TimeoutMs, p.MaxOutputLength, err = limits(a.TimeoutMs, a.MaxOutputLength, &p.Notes)
	if err != nil {
		return Plan{}, err
	}
	return p, nil
}

// limits resolves a call's timeout_ms and max_output_length: the defaults
// when absent, clamped to their maxima with a note, refused when not
// positive.
func limits(timeoutMs, maxOutput *int64, notes *[]string) (int64, int, error) {
	t, l := int64(DefaultTimeoutMs), int64(DefaultMaxOutput)
	var err error
	if timeoutMs != nil {
		if t, err = clamp("timeout_ms", *timeoutMs, MaxTimeoutMs, "milliseconds", notes); err != nil {
			return 0, 0, err
		}
	}
	if maxOutput != nil {
		if l, err = clamp("max_output_length", *maxOutput, MaxMaxOutput, "characters", notes); err != nil {
			return 0, 0, err
		}
	}
	return t, int(l), nil
}

// clamp accepts a positive limit, lowering one above max to max with a note.
func clamp(name string, v, max int64, unit string, notes *[]string) (int64, error) {
	if v <= 0 {
		return 0, invalid("%s must be a positive number of %s, got %d", name, unit, v)
	}
	if v > max {
		*notes = append(*notes, fmt.Sprintf("%s %d clamped to the maximum %d", name, v, max))
		return max, nil
	}
	return v, nil
}

// Outcome is how a command ended: {"type":"exit","exit_code":N} or
// {"type":"timeout"}.
type Outcome struct {
	Type     string `json:"type"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

// CommandOutput is one command's result, in the shape every API uses.
type CommandOutput struct {
	Stdout  string  `json:"stdout"`
	Stderr  string  `json:"stderr"`
	Outcome Outcome `json:"outcome"`
	// Truncated is set when either stream was cut (the text says so too).
	Truncated bool `json:"-"`
	// Start and End bound the command's run (RunShell sets them; traces).
	Start, End time.Time `json:"-"`
}

// Executor runs one command in a named sandbox; every sandbox.Backend
// (*sandbox.Manager, ...) is one.
type Executor interface {
	Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error)
}

// RunShell runs the plan's commands in order, each in its own shell, in the
// named sandbox. It stops early only when the sandbox cannot be reached at
// all or ctx ends.
func RunShell(ctx context.Context, ex Executor, name string, p Plan) ([]CommandOutput, error) {
	out := make([]CommandOutput, 0, len(p.Commands))
	for _, c := range p.Commands {
		start := time.Now()
		res, err := ex.Exec(ctx, name, sandbox.Command{
			Command:   c,
			TimeoutMs: p.TimeoutMs,
			// A character takes at most 4 bytes of UTF-8.
			MaxBytes: 4 * p.MaxOutputLength,
		})
		if err != nil {
			return out, err
		}
		o := Output(res, p.MaxOutputLength)
		o.Start, o.End = start, time.Now()
		out = append(out, o)
	}
	return out, nil
}

// Output shapes a sandbox result: text capped at maxChars characters per
// stream (invalid UTF-8 shown as U+FFFD) with the truncation marked, and
// the sandbox's notes after stderr, whole.
func Output(r sandbox.Result, maxChars int) CommandOutput {
	var cutOut, cutErr bool
	o := CommandOutput{}
	o.Stdout, cutOut = capText(r.Stdout, r.StdoutBytes, maxChars)
	o.Stderr, cutErr = capText(r.Stderr, r.StderrBytes, maxChars)
	if len(r.Notes) > 0 {
		// Shellgate's own word on the command comes after the cap: a
		// flood of "can't fork" must not hide that a limit was reached.
		if o.Stderr != "" && !strings.HasSuffix(o.Stderr, "\n") {
			o.Stderr += "\n"
		}
		o.Stderr += string(r.Notes)
	}
	o.Truncated = cutOut || cutErr
	if r.TimedOut {
		o.Outcome = Outcome{Type: "timeout"}
	} else {
		code := r.ExitCode
		o.Outcome = Outcome{Type: "exit", ExitCode: &code}
	}
	return o
}

// TruncationMarker starts the line appended to output that was cut.
const TruncationMarker = "\n[shellgate: output truncated"

func capText(b []byte, total int64, maxChars int) (string, bool) {
	cut := total > int64(len(b))
	if cut {
		// The agent's byte cap may split the last character.
		for k := 1; k <= utf8.UTFMax && k <= len(b); k++ {
			if utf8.RuneStart(b[len(b)-k]) {
				if !utf8.FullRune(b[len(b)-k:]) {
					b = b[:len(b)-k]
				}
				break
			}
		}
	}
	var sb strings.Builder
	sb.Grow(min(len(b), 4*maxChars) + 64)
	i, n := 0, 0
	for i < len(b) && n < maxChars {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			sb.WriteRune(utf8.RuneError)
			size = 1
		} else {
			sb.Write(b[i : i+size])
		}
		i += size
		n++
	}
	if i < len(b) || cut {
		total = max(total, int64(len(b)))
		fmt.Fprintf(&sb, "%s: showing the first %d characters of %s]", TruncationMarker, n, humanize.IBytes(uint64(total)))
		return sb.String(), true
	}
	return sb.String(), false
}
