// Package agentbin finds or builds the shellgate-agent binary that every
// sandbox runs as its init.
package agentbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
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

// Build compiles a static agent from this module's source, once per
// process, into one directory per checkout under the temporary directory
// (replaced atomically, so sandboxes still running an older build keep it).
// Tests and benchmarks use it so that they always run the agent of the code
// under test.
func Build() (string, error) {
	buildOnce.Do(func() {
		_, src, _, _ := goruntime.Caller(0)
		sum := sha256.Sum256([]byte(src))
		dir := filepath.Join(os.TempDir(), "shellgate-agent-"+hex.EncodeToString(sum[:6]))
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		tmp, err := os.CreateTemp(dir, ".build-*")
		if err != nil {
			buildErr = err
			return
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp.Name(), "github.com/shellgate/shellgate/cmd/shellgate-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.Join(fmt.Errorf("build agent: %w", err), errors.New(string(b)))
			return
		}
		out := filepath.Join(dir, Name)
		if buildErr = os.Rename(tmp.Name(), out); buildErr == nil {
			buildPath = out
		}
	})
	return buildPath, buildErr
}
