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

// built holds one build per command, made once per process.
var built sync.Map // package path -> func() (string, error)

// Build compiles a static agent from this module's source, once per
// process, into one directory per checkout under the temporary directory
// (replaced atomically, so sandboxes still running an older build keep it).
// Tests and benchmarks use it so that they always run the agent of the code
// under test.
func Build() (string, error) { return BuildCommand("shellgate-agent", Name) }

// BuildCommand is Build for any command of this module (cmd/<dir>), whose
// binary is name in the same directory: tests that run the shellgate CLI
// build it once per process instead of once per test (a link of the CLI
// takes seconds).
func BuildCommand(dir, name string) (string, error) {
	pkg := "github.com/shellgate/shellgate/cmd/" + dir
	f, _ := built.LoadOrStore(pkg, sync.OnceValues(func() (string, error) { return build(pkg, name) }))
	return f.(func() (string, error))()
}

func build(pkg, name string) (string, error) {
	_, src, _, _ := goruntime.Caller(0)
	sum := sha256.Sum256([]byte(src))
	dir := filepath.Join(os.TempDir(), "shellgate-agent-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp.Name(), pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", errors.Join(fmt.Errorf("build %s: %w", name, err), errors.New(string(b)))
	}
	out := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}
