// Package agentbin finds or builds the shellgate-agent binary that every
// sandbox runs as its init.
package agentbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Name is the agent binary's file name.
const Name = "shellgate-agent"

// Find returns the agent binary: $SHELLGATE_AGENT if set, else
// shellgate-agent next to the running executable.
func Find() (string, error) {
	if p := os.Getenv("SHELLGATE_AGENT"); p != "" {
		return checkStatic(p)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(exe), Name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("sandbox agent not found at %s (build it with `make build`, or set SHELLGATE_AGENT): %w", p, err)
	}
	return checkStatic(p)
}

func checkStatic(p string) (string, error) {
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("sandbox agent: %w", err)
	}
	return filepath.Abs(p)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Build compiles a static agent from this module's source into a temporary
// directory, once per process. Tests and benchmarks use it so that they
// always run the agent of the code under test.
func Build() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "shellgate-agent-")
		if err != nil {
			buildErr = err
			return
		}
		out := filepath.Join(dir, Name)
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/shellgate/shellgate/cmd/shellgate-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.Join(fmt.Errorf("build agent: %w", err), errors.New(string(b)))
			return
		}
		buildPath = out
	})
	return buildPath, buildErr
}
