package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// UserNS is a sandbox's own user namespace: ids 0..Size-1 inside are host
// ids HostID..HostID+Size-1 outside, for users and groups alike.
type UserNS struct {
	HostID, Size uint32
	// Path is a namespace the host made (a pinned /proc/PID/ns/user) for
	// runtimes that join one; empty lets the runtime create it from the
	// mappings.
	Path string
}

// UseUserNS puts the container in ns: a user namespace entry (joined by
// path when ns.Path is set) and the uid and gid mappings. The runtime
// creates every other namespace of the spec inside it, owned by it.
func UseUserNS(spec *Config, ns UserNS) {
	spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: ns.Path})
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: ns.HostID, Size: ns.Size}}
	spec.Linux.UIDMappings = m
	spec.Linux.GIDMappings = append([]specs.LinuxIDMapping(nil), m...)
}

// JoinsUserNS tells whether the runtime joins a user namespace the host
// made (UserNS.Path): crun and runc do. runsc cannot (its gofer fails to
// setns into a namespace by path with EINVAL) and creates its own from the
// mappings.
func (c *cli) JoinsUserNS() bool { return c.name != "runsc" }

// rlimitsAnnotation carries the process rlimits runc applies from outside
// the container (see liftRlimits).
const rlimitsAnnotation = "run.shellgate.rlimits"

// liftRlimits moves the spec's process rlimits to an annotation for runc.
// runc 1.1 sets rlimits after joining the user namespace, where host root
// has no CAP_SYS_RESOURCE, and fails ("error setting rlimit type 7:
// operation not permitted"); runc is instead started under prlimit(1)
// with the same limits, which its init and the agent inherit.
func liftRlimits(spec *Config) {
	if spec.Process == nil || len(spec.Process.Rlimits) == 0 {
		return
	}
	b, _ := json.Marshal(spec.Process.Rlimits)
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[rlimitsAnnotation] = string(b)
	spec.Process.Rlimits = nil
}

// prlimitArgs returns the prlimit(1) command line that applies the rlimits
// liftRlimits stored in the bundle in dir, or nil when there are none.
func prlimitArgs(dir string) ([]string, error) {
	spec, err := readBundle(dir)
	if err != nil {
		return nil, err
	}
	raw := spec.Annotations[rlimitsAnnotation]
	if raw == "" {
		return nil, nil
	}
	var rl []specs.POSIXRlimit
	if err := json.Unmarshal([]byte(raw), &rl); err != nil {
		return nil, fmt.Errorf("bundle %s: annotation %s: %w", dir, rlimitsAnnotation, err)
	}
	args := []string{"prlimit"}
	for _, r := range rl {
		name, ok := strings.CutPrefix(r.Type, "RLIMIT_")
		if !ok || name == "" || strings.ContainsAny(name, "=: ") {
			return nil, fmt.Errorf("bundle %s: unknown rlimit %q", dir, r.Type)
		}
		// prlimit's options are the resource names in lower case:
		// RLIMIT_NOFILE is --nofile=SOFT:HARD.
		args = append(args, fmt.Sprintf("--%s=%d:%d", strings.ToLower(name), r.Soft, r.Hard))
	}
	return append(args, "--"), nil
}

// underRlimits runs cmd (runc's run) under prlimit when the bundle in dir
// carries lifted rlimits.
func (c *cli) underRlimits(ctx context.Context, dir string, cmd *exec.Cmd) (*exec.Cmd, error) {
	if c.name != "runc" {
		return cmd, nil
	}
	pre, err := prlimitArgs(dir)
	if err != nil || pre == nil {
		return cmd, err
	}
	return exec.CommandContext(ctx, pre[0], append(pre[1:], cmd.Args...)...), nil
}
