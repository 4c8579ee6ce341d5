package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

func init() {
	register("exec", "run commands in a sandbox: exec [flags] -- 'CMD1' ['CMD2' ...]", runExec)
}

func runExec(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	dataDir := dataDirFlag(fs)
	name := fs.String("sandbox", "", "sandbox name (letters, digits, '_', '-'; up to 40): reuses its /workspace/home across invocations; default a new one, removed after the call")
	keep := fs.Bool("keep", false, "without --sandbox: keep the new sandbox and print its id to reuse with --sandbox")
	rtName := fs.String("runtime", "", "OCI runtime: runsc, crun or runc (default: the strongest that works here)")
	img := fs.String("image", "default", "root filesystem image")
	timeout := fs.Int64("timeout-ms", tool.DefaultTimeoutMs, fmt.Sprintf("per-command timeout in ms (max %d)", tool.MaxTimeoutMs))
	maxOut := fs.Int64("max-output", tool.DefaultMaxOutput, fmt.Sprintf("characters kept per stream per command (max %d)", tool.MaxMaxOutput))
	asJSON := fs.Bool("json", false, `print {"container_id", "output": [{"stdout","stderr","outcome"}]}`)
	verbose := fs.Bool("v", false, "log sandbox lifecycle to stderr")
	defLimits := runtime.DefaultLimits()
	cpus := fs.Float64("cpus", defLimits.CPUs, "CPU cores of the sandbox")
	memMB := fs.Int64("memory-mb", defLimits.MemoryBytes>>20, "memory of the sandbox in MiB")
	procs := fs.Int64("processes", defLimits.Processes, "processes and threads of the sandbox")
	tmpMB := fs.Int64("tmp-mb", defLimits.TmpBytes>>20, "size of /tmp in MiB")
	homeMB := fs.Int64("home-mb", 5<<10, "size of /workspace/home in MiB (applies when the home is created)")
	diskReserve := diskReserveFlag(fs)
	var copyIn []string
	fs.Func("copy-in", "copy a host file into /workspace/home before the commands: LOCAL[:DEST] (repeatable)", func(v string) error {
		copyIn = append(copyIn, v)
		return nil
	})
	setUsage(fs, "usage: shellgate exec [flags] -- 'CMD1' ['CMD2' ...]\n\nEach argument after -- is one command, run in order in its own `bash -lc` in /workspace/home.")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	setFlags := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { setFlags[f.Name] = true })
	args2 := tool.ShellArgs{Commands: fs.Args()}
	if setFlags["timeout-ms"] {
		args2.TimeoutMs = timeout
	}
	if setFlags["max-output"] {
		args2.MaxOutputLength = maxOut
	}
	plan, err := args2.Plan()
	if err != nil {
		return err
	}
	for _, n := range plan.Notes {
		fmt.Fprintln(os.Stderr, "shellgate: note:", n)
	}
	limits := runtime.Limits{CPUs: *cpus, MemoryBytes: *memMB << 20, Processes: *procs, TmpBytes: *tmpMB << 20, ShmBytes: defLimits.ShmBytes}
	if err := limits.Validate(); err != nil {
		return err
	}
	if *homeMB < 16 {
		return fmt.Errorf("--home-mb %d: at least 16", *homeMB)
	}
	if *rtName != "" {
		if _, err := runtime.New(*rtName, os.TempDir()); err != nil {
			return err
		}
	}
	id := *name
	if id == "" {
		id = newContainerID()
	} else if !sandbox.ValidName(id) {
		return fmt.Errorf("%w: %q", sandbox.ErrBadName, id)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	mgr, err := sandbox.Open(ctx, sandbox.Config{
		DataDir:     *dataDir,
		Runtime:     *rtName,
		Image:       *img,
		IdleTimeout: -1,
		Limits:      limits,
		HomeBytes:   *homeMB << 20,
		DiskReserve: diskReserve(),
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return err
	}
	anonymous := *name == ""
	var outs []tool.CommandOutput
	runErr := copyFiles(ctx, mgr, id, copyIn)
	if runErr == nil {
		outs, runErr = tool.RunShell(ctx, mgr, id, plan)
	}
	var closeErr error
	if anonymous && !*keep {
		// Nobody can name this sandbox again: remove it, even after an
		// interrupt.
		if err := mgr.Destroy(context.WithoutCancel(ctx), id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			closeErr = fmt.Errorf("remove sandbox %s: %w", id, err)
		}
	}
	closeErr = errors.Join(closeErr, mgr.Close(context.WithoutCancel(ctx)))
	if runErr != nil {
		return errors.Join(runErr, closeErr)
	}
	if closeErr != nil {
		fmt.Fprintln(os.Stderr, "shellgate: warning:", closeErr)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			ContainerID string               `json:"container_id"`
			Output      []tool.CommandOutput `json:"output"`
		}{id, outs})
	}
	last := 0
	for i, o := range outs {
		if len(outs) > 1 {
			fmt.Fprintf(os.Stderr, "$ %s\n", plan.Commands[i])
		}
		os.Stdout.WriteString(o.Stdout)
		os.Stderr.WriteString(o.Stderr)
		if o.Outcome.Type == "timeout" {
			fmt.Fprintf(os.Stderr, "[timeout after %d ms]\n", plan.TimeoutMs)
			last = 124
		} else {
			last = *o.Outcome.ExitCode
			if last != 0 || len(outs) > 1 {
				fmt.Fprintf(os.Stderr, "[exit %d]\n", last)
			}
		}
	}
	if anonymous && *keep {
		fmt.Fprintf(os.Stderr, "[container_id %s: reuse its home with --sandbox %s]\n", id, id)
	}
	if last != 0 {
		return exitError{min(last, 255)}
	}
	return nil
}

func newContainerID() string {
	var b [8]byte
	rand.Read(b[:])
	return "cntr_" + strings.ToLower(hex.EncodeToString(b[:]))
}

// copyFiles copies LOCAL[:DEST] host files into the sandbox's home; DEST
// defaults to LOCAL's base name. WriteFile does not create a sandbox: a
// new one is created for the first file.
func copyFiles(ctx context.Context, mgr *sandbox.Manager, id string, specs []string) error {
	for _, spec := range specs {
		local, dest, ok := strings.Cut(spec, ":")
		if !ok {
			dest = filepath.Base(local)
		}
		// O_NONBLOCK: a FIFO given as LOCAL must be refused, not waited on.
		f, err := os.OpenFile(local, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("--copy-in: %w", err)
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			f.Close()
			return fmt.Errorf("--copy-in %s: not a regular file", local)
		}
		err = mgr.WriteFile(ctx, id, dest, f)
		if errors.Is(err, sandbox.ErrNotFound) {
			// A new sandbox: WriteFile checks the path, then finds no
			// sandbox before reading anything.
			if err = mgr.Create(ctx, id); err == nil {
				err = mgr.WriteFile(ctx, id, dest, f)
			}
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("--copy-in: %w", err)
		}
	}
	return nil
}
