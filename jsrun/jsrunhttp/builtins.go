package jsrunhttp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/shellgate/shellgate/jsrun"
)

// builtinNamespace is where the sandbox built-ins live in the guest:
//
//	const [r] = await sandbox.exec('wc -l data.csv')  // [{stdout, stderr, exit_code, timed_out, truncated}]
//	const text = await sandbox.readFile('data.csv')    // string (UTF-8)
//	const raw = await sandbox.readFileBytes('img.png') // Uint8Array
//	await sandbox.writeFile('out.txt', 'hello')        // string, Uint8Array or ArrayBuffer
const builtinNamespace = "sandbox"

// Per-command limits of SPEC §2.
const (
	defaultTimeoutMs = 120_000
	maxTimeoutMs     = 300_000
	defaultMaxOutput = 16_384
	maxMaxOutput     = 65_536
	maxCommands      = 100
	homeDir          = "/workspace/home"
)

var allBuiltins = []string{"exec", "readFile", "readFileBytes", "writeFile"}

func (h *handler) builtins(ctx context.Context, r *http.Request, sr *SandboxRequest) (jsrun.Namespace, []string, error) {
	if h.cfg.Sandboxes == nil {
		return nil, nil, &badRequest{"built-in sandbox functions are not available on this server"}
	}
	if sr.ContainerID == "" || len(sr.ContainerID) > 40 {
		return nil, nil, &badRequest{"sandbox.container_id must be 1-40 characters"}
	}
	enabled := map[string]bool{}
	names := sr.Functions
	if len(names) == 0 {
		names = allBuiltins
	}
	for _, n := range names {
		if !contains(allBuiltins, n) {
			return nil, nil, &badRequest{fmt.Sprintf("unknown built-in %q (have %s)", n, strings.Join(allBuiltins, ", "))}
		}
		enabled[n] = true
	}
	approve := map[string]bool{}
	for _, n := range sr.RequireApproval {
		if !enabled[n] {
			return nil, nil, &badRequest{fmt.Sprintf("require_approval names %q, which is not enabled", n)}
		}
		approve[n] = true
	}
	synchronous := map[string]bool{}
	for _, n := range sr.Synchronous {
		switch {
		case !enabled[n]:
			return nil, nil, &badRequest{fmt.Sprintf("synchronous names %q, which is not enabled", n)}
		case approve[n]:
			return nil, nil, &badRequest{fmt.Sprintf("%q cannot be both synchronous and require approval: approval interrupts the run", n)}
		}
		synchronous[n] = true
	}
	sb, err := h.cfg.Sandboxes(ctx, r, sr.ContainerID)
	if err != nil {
		if errors.Is(err, ErrSandboxNotFound) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("resolving sandbox %s: %w", sr.ContainerID, err)
	}
	b := &builtins{sb: sb, approve: approve}
	ns := jsrun.Namespace{}
	for n := range enabled {
		if synchronous[n] {
			ns[n] = jsrun.Synchronous(b.wrap(n))
		} else {
			ns[n] = jsrun.Async(b.wrap(n))
		}
	}
	return ns, sortedKeys(approve), nil
}

type builtins struct {
	sb      Sandbox
	approve map[string]bool
}

// wrap adds the approval step in front of a built-in when the request asked
// for it: the first call interrupts with {"kind":"approval",...}; resolving
// it with true runs the call, anything else rejects it.
func (b *builtins) wrap(name string) jsrun.Func {
	run := map[string]jsrun.Func{
		"exec": b.exec, "readFile": b.readFile, "readFileBytes": b.readFileBytes, "writeFile": b.writeFile,
	}[name]
	return func(ctx context.Context, args []any) (any, error) {
		if b.approve[name] {
			res := jsrun.ResumeFrom(ctx)
			if res == nil {
				return nil, jsrun.Interrupt(ctx, map[string]any{"kind": "approval", "function": builtinNamespace + "." + name})
			}
			if rej, ok := res.Resolution.(*rejection); ok {
				return nil, userError(rej.err)
			}
			if res.Resolution != true {
				return nil, jsrun.NewUserError(CodeNotApproved, builtinNamespace+"."+name+" was not approved")
			}
		}
		v, err := run(ctx, args)
		return v, sandboxError(err)
	}
}

// sandboxError keeps user-facing file errors and hides the rest.
func sandboxError(err error) error {
	var ue *jsrun.UserError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return jsrun.NewUserError("ENOENT", "no such file")
	case errors.Is(err, fs.ErrPermission):
		return jsrun.NewUserError("EACCES", "permission denied")
	case errors.Is(err, fs.ErrInvalid):
		return jsrun.NewUserError("EINVAL", "invalid path or file")
	}
	return err
}

func argError(msg string) error { return jsrun.NewUserError("EVAL_BAD_ARGUMENT", msg) }

func (b *builtins) exec(ctx context.Context, args []any) (any, error) {
	if len(args) == 0 {
		return nil, argError("sandbox.exec(commands, options?) needs a command or an array of commands")
	}
	var cmds []string
	switch x := args[0].(type) {
	case string:
		cmds = []string{x}
	case []any:
		for _, c := range x {
			s, ok := c.(string)
			if !ok {
				return nil, argError("sandbox.exec: every command must be a string")
			}
			cmds = append(cmds, s)
		}
	default:
		return nil, argError("sandbox.exec: commands must be a string or an array of strings")
	}
	if len(cmds) == 0 || len(cmds) > maxCommands {
		return nil, argError(fmt.Sprintf("sandbox.exec: 1 to %d commands", maxCommands))
	}
	timeout, maxOut := defaultTimeoutMs, defaultMaxOutput
	if len(args) > 1 {
		var get func(string) any
		switch opts := args[1].(type) {
		case map[string]any:
			get = func(k string) any { return opts[k] }
		case *jsrun.Object: // a runner with OrderedObjects
			get = func(k string) any { v, _ := opts.Get(k); return v }
		default:
			return nil, argError("sandbox.exec: options must be an object")
		}
		if v, ok := get("timeout_ms").(float64); ok && v > 0 {
			timeout = int(min(v, maxTimeoutMs))
		}
		if v, ok := get("max_output_length").(float64); ok && v > 0 {
			maxOut = int(min(v, maxMaxOutput))
		}
	}
	results, err := b.sb.Exec(ctx, cmds, timeout, maxOut)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(results))
	for i, r := range results {
		out[i] = jsrun.NewObject(
			"command", cmds[min(i, len(cmds)-1)], "stdout", r.Stdout, "stderr", r.Stderr,
			"exit_code", r.ExitCode, "timed_out", r.TimedOut, "truncated", r.Truncated,
		)
	}
	return out, nil
}

// homePath validates a guest path: relative to /workspace/home, or absolute
// inside it; no "..", no NUL. The Sandbox must still resolve it safely.
func homePath(p any) (string, error) {
	s, ok := p.(string)
	if !ok || s == "" {
		return "", argError("path must be a non-empty string")
	}
	if strings.ContainsRune(s, 0) || strings.Contains(s, "\\") {
		return "", argError("path contains a forbidden character")
	}
	if strings.HasPrefix(s, "/") {
		if s != homeDir && !strings.HasPrefix(s, homeDir+"/") {
			return "", argError("path must be inside " + homeDir)
		}
		s = strings.TrimPrefix(strings.TrimPrefix(s, homeDir), "/")
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == ".." {
			return "", argError("path must not contain ..")
		}
	}
	clean := path.Clean(s)
	if clean == "." || clean == "" {
		return "", argError("path names the home directory itself")
	}
	return clean, nil
}

func (b *builtins) readFile(ctx context.Context, args []any) (any, error) {
	data, err := b.read(ctx, args)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		return nil, jsrun.NewUserError("EVAL_NOT_UTF8", "file is not UTF-8 text; use sandbox.readFileBytes")
	}
	return string(data), nil
}

func (b *builtins) readFileBytes(ctx context.Context, args []any) (any, error) {
	data, err := b.read(ctx, args)
	if err != nil {
		return nil, err
	}
	return data, nil
}

func (b *builtins) read(ctx context.Context, args []any) ([]byte, error) {
	if len(args) == 0 {
		return nil, argError("a path is required")
	}
	p, err := homePath(args[0])
	if err != nil {
		return nil, err
	}
	return b.sb.ReadFile(ctx, p)
}

func (b *builtins) writeFile(ctx context.Context, args []any) (any, error) {
	if len(args) < 2 {
		return nil, argError("sandbox.writeFile(path, data) needs a path and data")
	}
	p, err := homePath(args[0])
	if err != nil {
		return nil, err
	}
	var data []byte
	switch x := args[1].(type) {
	case string:
		data = []byte(x)
	case jsrun.ArrayBuffer:
		data = x
	case *jsrun.TypedArray:
		data = x.Data
	default:
		return nil, argError("data must be a string, Uint8Array or ArrayBuffer")
	}
	if err := b.sb.WriteFile(ctx, p, data); err != nil {
		return nil, err
	}
	return jsrun.Undefined{}, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
