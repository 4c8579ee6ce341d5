package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/moby/profiles/seccomp"
	"golang.org/x/sys/unix"
)

// cli drives a runc-compatible command line: runsc, crun and runc share the
// same verbs (run --detach, delete --force, list).
type cli struct {
	name  string
	root  string // --root state directory
	check sync.Once
	path  string
	err   error
	// wrap runs crun in a private mount namespace without the cgroup2
	// mount of a hybrid cgroup host, which crun refuses.
	wrap bool
}

func newCLI(name, stateRoot string) *cli {
	c := &cli{name: name, root: filepath.Join(stateRoot, name)}
	c.path, c.err = exec.LookPath(name)
	if c.err != nil {
		c.err = fmt.Errorf("%s is not installed (%s)", name, installHint(name))
	}
	c.wrap = name == "crun" && hybridCgroups()
	return c
}

func (c *cli) Name() string { return c.name }

func (c *cli) Check(ctx context.Context) error {
	c.check.Do(func() {
		if os.Geteuid() != 0 {
			c.err = errors.New("Shellgate's sandboxes need root")
			return
		}
		if c.err != nil {
			return
		}
		if c.err = os.MkdirAll(c.root, 0o700); c.err != nil {
			return
		}
		// The runtime must answer on its own state directory.
		_, c.err = c.List(ctx)
	})
	return c.err
}

func installHint(name string) string {
	if name == "runsc" {
		return "install gVisor with `go install gvisor.dev/gvisor/runsc@" + RunscVersion + "` or `make runtimes`"
	}
	return "apt-get install " + name
}

// RunscVersion is the pinned gVisor build: its systrap platform and
// --network=sandbox work on these hosts, the 2022 Debian package's do not.
const RunscVersion = "v0.0.0-20260905035102-160fafc42237"

// hybridCgroups reports a cgroup v1 host that also mounts a cgroup2
// hierarchy at /sys/fs/cgroup/unified.
func hybridCgroups() bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

func (c *cli) globalArgs(network string) []string {
	args := []string{"--root", c.root}
	if c.name == "runsc" {
		// systrap is gVisor's fast platform without KVM; the sandbox has a
		// loopback interface only (or, when its spec joins a network
		// namespace the host made, gVisor's netstack over that
		// namespace's interfaces); the writable layer is our own overlay.
		args = append(args, "--platform=systrap", "--network="+network, "--overlay2=none")
		args = append(args, runscTuning...)
	}
	return args
}

// runscTuning are systrap settings measured on these hosts (2 shared vCPUs,
// Firecracker guest, 1-CPU quota per sandbox), with warm `bash -lc true`
// and `/bin/true` through the agent, several sandboxes side by side:
//
//   - --systrap-disable-fast-path: the fast path has the sentry and the
//     stub threads spin instead of sleeping on a futex. On two shared cores
//     the spinning competes with the command itself and, because gVisor's
//     cgroup holds the sentry too, burns the sandbox's 1-CPU quota: with it
//     nearly every 100 ms period was throttled and a warm `true` had a
//     bimodal 5 ms / 40 ms distribution (p90 ≈ 40–50 ms). Without it the
//     CPU per command fell 15–25 % and p90 to 10–20 ms; `import pandas`
//     took the same time either way.
//   - --systrap-disable-syscall-patching: patching rewrites every syscall
//     instruction a new process reaches (35–70 per `bash -lc true`, each a
//     trap and a copied code page) to save the signal on later calls. Our
//     commands are mostly short-lived processes, and with the fast path off
//     a patched syscall was not measurably cheaper (dd bs=1: 20 µs per
//     syscall either way); without patching warm `true` was ~10 % faster.
//
// Neither changes isolation: both only choose how the same sentry receives
// the same syscalls.
var runscTuning = []string{"--systrap-disable-fast-path", "--systrap-disable-syscall-patching"}

func (c *cli) command(ctx context.Context, args ...string) *exec.Cmd {
	return c.commandNet(ctx, "none", args...)
}

// commandNet is command with runsc's network mode.
func (c *cli) commandNet(ctx context.Context, network string, args ...string) *exec.Cmd {
	full := append(c.globalArgs(network), args...)
	if c.wrap {
		script := `umount /sys/fs/cgroup/unified 2>/dev/null; exec "$0" "$@"`
		return exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "slave", "sh", "-c", script, c.path}, full...)...)
	}
	return exec.CommandContext(ctx, c.path, full...)
}

// seccompProfile builds the seccomp profile crun and runc sandboxes run
// under (Docker's default, adjusted to the spec's capabilities). It is a
// variable so that a test can make it fail.
var seccompProfile = seccomp.GetDefaultProfile

func (c *cli) Adjust(spec *Config) error {
	switch c.name {
	case "runsc":
		// gVisor applies cgroups to the whole sandbox and a pids limit
		// crashes it: the commands' RLIMIT_NPROC (set by the agent, per
		// user of the sandbox's own kernel) is the limit, the cgroup only
		// a high backstop.
		backstop := int64(16384)
		spec.Linux.Resources.Pids.Limit = &backstop
	default:
		// Fail closed: crun and runc sandboxes never start without their
		// syscall filter.
		p, err := seccompProfile(spec)
		if err == nil && (p == nil || len(p.Syscalls) == 0) {
			err = errors.New("the profile is empty")
		}
		if err != nil {
			return fmt.Errorf("%s: cannot build the seccomp profile, refusing to start a sandbox without it: %w", c.name, err)
		}
		spec.Linux.Seccomp = p
	}
	if c.name == "runc" {
		liftRlimits(spec)
	}
	return nil
}

// requireSeccomp refuses a bundle whose config.json has no seccomp
// profile: the last check before crun or runc starts a container, whoever
// built the bundle.
func requireSeccomp(name, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	// Only what the check needs: the rules stay undecoded.
	var spec struct {
		Linux *struct {
			Seccomp *struct {
				Syscalls []json.RawMessage `json:"syscalls"`
			} `json:"seccomp"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: bundle %s: %w", name, dir, err)
	}
	if spec.Linux == nil || spec.Linux.Seccomp == nil || len(spec.Linux.Seccomp.Syscalls) == 0 {
		return fmt.Errorf("%s: bundle %s has no seccomp profile: refusing to start it", name, dir)
	}
	return nil
}

func (c *cli) Start(ctx context.Context, id, dir string, stdio Stdio) error {
	return c.launch(ctx, id, dir, stdio, nil, "run")
}

// launch runs `[GLOBAL] VERB [ARGS] --bundle DIR --detach ID` (run, or
// runsc's restore) with the container's init on stdio.
func (c *cli) launch(ctx context.Context, id, dir string, stdio Stdio, global []string, verb ...string) error {
	if err := c.Check(ctx); err != nil {
		return err
	}
	if c.name != "runsc" {
		if err := requireSeccomp(c.name, dir); err != nil {
			return err
		}
	}
	network := "none"
	if c.name == "runsc" {
		joins, err := joinsNetNS(dir)
		if err != nil {
			return err
		}
		if joins {
			network = "sandbox"
		}
	}
	args := append(append(global, verb...), "--bundle", dir, "--detach", id)
	cmd, err := c.underRlimits(ctx, dir, c.commandNet(ctx, network, args...))
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout = stdio.In, stdio.Out
	// The CLI's own errors go to stderr, and so do the agent's later: a
	// log file in the bundle keeps both for error messages.
	logPath := filepath.Join(dir, "init.log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stderr = log
	err = cmd.Run()
	log.Close()
	if err != nil {
		return fmt.Errorf("%s %s %s: %w: %s", c.name, verb[0], id, err, tail(logPath, 2048))
	}
	return nil
}

// runsc is gVisor's CLI, which can also checkpoint and restore a whole
// sandbox (Checkpointer).
type runsc struct{ *cli }

func (r runsc) Checkpoint(ctx context.Context, id, imageDir string) error {
	if out, err := r.command(ctx, "checkpoint", "--image-path", imageDir, id).CombinedOutput(); err != nil {
		return fmt.Errorf("runsc checkpoint %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Restore restores with runsc's spec validation reduced to warnings: the
// sandbox wakes in whatever id range (uidMappings) and network namespace
// are free now, which its strict check refuses although gVisor does not
// depend on either — ids inside stay 0–65535 (the gofer works within the
// namespace), and the netstack takes the new namespace's interfaces and
// routes. Everything else of the bundle is built by the same code as
// before; the Manager checks the runtime and the image version itself.
func (r runsc) Restore(ctx context.Context, id, dir, imageDir string, stdio Stdio) error {
	return r.launch(ctx, id, dir, stdio, []string{"--restore-spec-validation=warning"}, "restore", "--image-path", imageDir)
}

// joinsNetNS reports whether the bundle in dir joins a network namespace by
// path: one the host made and gave a veth, which gVisor's netstack takes
// over with --network=sandbox.
func joinsNetNS(dir string) (bool, error) {
	spec, err := readBundle(dir)
	if err != nil {
		return false, err
	}
	if spec.Linux == nil {
		return false, nil
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			return true, nil
		}
	}
	return false, nil
}

// tail returns at most the last n bytes of a file, trimmed.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(-n, 2)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return strings.TrimSpace(string(b[:k]))
}

func (c *cli) Delete(ctx context.Context, id string) error {
	out, err := c.command(ctx, "delete", "--force", id).CombinedOutput()
	if err != nil {
		msg := string(out)
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not exist") || strings.Contains(msg, "not found") {
			return nil
		}
		return fmt.Errorf("%s delete %s: %w: %s", c.name, id, err, strings.TrimSpace(msg))
	}
	return nil
}

func (c *cli) List(ctx context.Context) ([]string, error) {
	out, err := c.command(ctx, "list", "--quiet").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%s list: %w: %s", c.name, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s list: %w", c.name, err)
	}
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if id := strings.TrimSpace(sc.Text()); id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
