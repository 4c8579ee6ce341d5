package tool

import (
	"bytes"
	"context"
	"errors"

	"github.com/shellgate/shellgate/jsrun/jsrunhttp"
	"github.com/shellgate/shellgate/sandbox"
)

// MaxEvalFileBytes caps a file the eval built-ins read: the host-function
// output limit of a run.
const MaxEvalFileBytes = 4 << 20

// EvalSandbox is one named sandbox as the JavaScript eval's built-ins see it
// (jsrunhttp.Sandbox): commands go through the same validation and limits
// as the shell tool, files through the manager's path-safe copies.
type EvalSandbox struct {
	Manager sandbox.Backend // *sandbox.Manager or another backend
	Name    string
	// Executor, if set, runs the commands instead of Manager: the server
	// passes the executor of its exec route, which meters and observes
	// each command. Files always go through Manager.
	Executor Executor
}

var _ jsrunhttp.Sandbox = EvalSandbox{}

// TimeoutExitCode stands for a command that timed out where an exit code is
// required, as timeout(1) does.
const TimeoutExitCode = 124

func (s EvalSandbox) Exec(ctx context.Context, commands []string, timeoutMs, maxOutput int) ([]jsrunhttp.CommandResult, error) {
	t, o := int64(timeoutMs), int64(maxOutput)
	args := ShellArgs{Commands: commands}
	if t > 0 {
		args.TimeoutMs = &t
	}
	if o > 0 {
		args.MaxOutputLength = &o
	}
	p, err := args.Plan()
	if err != nil {
		return nil, err
	}
	var ex Executor = s.Manager
	if s.Executor != nil {
		ex = s.Executor
	}
	outs, err := RunShell(ctx, ex, s.Name, p)
	if err != nil {
		return nil, err
	}
	res := make([]jsrunhttp.CommandResult, len(outs))
	for i, out := range outs {
		r := jsrunhttp.CommandResult{Stdout: out.Stdout, Stderr: out.Stderr, Truncated: out.Truncated, TimedOut: out.Outcome.Type == "timeout"}
		if r.TimedOut {
			r.ExitCode = TimeoutExitCode
		} else {
			r.ExitCode = *out.Outcome.ExitCode
		}
		res[i] = r
	}
	return res, nil
}

func (s EvalSandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return s.Manager.ReadFile(ctx, s.Name, path, MaxEvalFileBytes)
}

// WriteFile creates the sandbox if it does not exist yet, as Exec does: the
// sandbox is the caller's own, named by the request.
func (s EvalSandbox) WriteFile(ctx context.Context, path string, data []byte) error {
	err := s.Manager.WriteFile(ctx, s.Name, path, bytes.NewReader(data))
	if errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrDestroyed) {
		if err := s.Manager.Create(ctx, s.Name); err != nil {
			return err
		}
		err = s.Manager.WriteFile(ctx, s.Name, path, bytes.NewReader(data))
	}
	return err
}
