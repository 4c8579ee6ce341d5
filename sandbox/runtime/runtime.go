// Package runtime turns a sandbox description into an OCI bundle and drives
// an OCI runtime CLI (gVisor runsc, crun or runc) to run it.
//
// Every runtime shares one code path: Spec builds the bundle's config.json,
// and a Runtime starts, lists and deletes containers from bundles. The
// container's only process is the Shellgate agent, connected to the host
// through the stdio pipes given to Start; commands never go through the
// runtime CLI after the container started.
//
// # Isolation
//
// Every runtime runs the same bundle: read-write overlay root over the read-only
// image, the home bind-mounted, the agent bind-mounted read-only at
// `/.shellgate/shellgate-agent` from the agent tmpfs, no new
// privileges, its own user namespace (below), new PID/mount/IPC/UTS/network
// namespaces (loopback only, or a veth under an allowlist: below), masked
// and read-only `/proc` and `/sys` paths, cgroup memory (no swap), CPU quota and
// pids limits, capped `/tmp` and `/dev/shm`. The agent runs as uid/gid 0 of the
// sandbox with only CAP_SETUID, CAP_SETGID and CAP_KILL (and CAP_SETPCAP until it
// has emptied the bounding set at start); it starts every command as uid/gid 1000
// (`-uid`/`-gid`), so commands have no capabilities at all, cannot signal, ptrace
// or read the agent (which is also non-dumpable and drops every signal but
// SIGCHLD), and `id` prints 1000. The process limit is the commands' user's
// `RLIMIT_NPROC` (`-nproc`, set by the agent on itself and inherited), counted
// per user: the agent's own threads never compete with the workload. The pids
// cgroup is that limit plus `runtime.AgentTasks` of room for the agent. Without
// a user namespace uid 1000's count is shared with every sandbox and host process
// of that uid. Per runtime (`Runtime.Adjust`):
// crun and runc get Docker's default seccomp profile (`moby/profiles/seccomp`),
// and fail closed: if the profile cannot be built `Adjust` returns an error, and
// `Start` refuses a crun/runc bundle without one, so no such sandbox starts;
// runsc (systrap, `--network=none`, `--overlay2=none`) replaces the pids limit
// with a high backstop, since a pids cgroup limit crashes a gVisor sandbox
// (gVisor counts `RLIMIT_NPROC` per user of its own kernel, threads included). crun on a hybrid cgroup host runs in a private mount namespace
// without the cgroup2 mount, which it refuses.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// Runtime is one OCI runtime on this host.
//
// Example:
//
//	rt, _ := runtime.New("crun", "/var/lib/shellgate/run/runtime")
//	spec := runtime.Spec(runtime.SpecOptions{Rootfs: merged, Home: home, Agent: agentPath, Limits: runtime.DefaultLimits()})
//	if err := rt.Adjust(spec); err != nil { ... } // never start without it
//	runtime.WriteBundle(bundleDir, spec)
//	err := rt.Start(ctx, "sbx-1", bundleDir, runtime.Stdio{In: r, Out: w})
//	...
//	rt.Delete(ctx, "sbx-1")
type Runtime interface {
	// Name is "runsc", "crun" or "runc".
	Name() string
	// Check tells whether the runtime can run sandboxes here; the error
	// says why not.
	Check(ctx context.Context) error
	// Adjust makes the runtime's own changes to a spec built by Spec
	// (seccomp for crun and runc; process limits in gVisor's way). An
	// error means the spec is not safe to run: the sandbox must not start
	// (crun and runc also refuse, in Start, a bundle without seccomp).
	Adjust(spec *Config) error
	// JoinsUserNS tells whether the runtime joins a user namespace made by
	// the host (UserNS.Path) rather than creating one from the mappings.
	JoinsUserNS() bool
	// Start creates and starts container id from the bundle in dir and
	// returns once the container runs. Its init gets stdio.
	Start(ctx context.Context, id, dir string, stdio Stdio) error
	// Delete kills container id and removes its runtime state; deleting a
	// container that does not exist is not an error.
	Delete(ctx context.Context, id string) error
	// List returns the ids of the containers in this runtime's state.
	List(ctx context.Context) ([]string, error)
}

// Checkpointer is a Runtime that can save a running container whole —
// its processes, their memory and open files, its own kernel's state — to
// a directory and later start a container from that image (gVisor's runsc:
// `runsc checkpoint`, `runsc restore`). Found by type assertion.
//
//	if cp, ok := rt.(runtime.Checkpointer); ok {
//		err := cp.Checkpoint(ctx, "sbx-1", imageDir) // sbx-1 stops; Delete it
//		...
//		err = cp.Restore(ctx, "sbx-2", bundleDir, imageDir, stdio)
//	}
//
// The restored container's init gets the new stdio in place of the old;
// its bundle must mount the same things at the same places (the mount
// sources may move), over the same root filesystem.
type Checkpointer interface {
	Runtime
	// Checkpoint writes container id's image into imageDir (which must
	// exist); the container stops, and must still be deleted.
	Checkpoint(ctx context.Context, id, imageDir string) error
	// Restore starts container id from the bundle in dir and the image
	// in imageDir, like Start.
	Restore(ctx context.Context, id, dir, imageDir string, stdio Stdio) error
}

// Stdio are the files the container's init gets as stdin and stdout. Its
// stderr, shared with the runtime CLI's own messages, goes to init.log in
// the bundle directory.
type Stdio struct {
	In, Out *os.File
}

// Names lists the supported runtimes from the strongest isolation to the
// fastest.
var Names = []string{"runsc", "crun", "runc"}

// ErrUnknown is returned by New for a runtime name Shellgate does not know.
var ErrUnknown = errors.New("unknown runtime")

// New returns the named runtime keeping its state under stateRoot/NAME.
func New(name, stateRoot string) (Runtime, error) {
	switch name {
	case "runsc":
		return runsc{newCLI(name, stateRoot)}, nil
	case "crun", "runc":
		return newCLI(name, stateRoot), nil
	}
	return nil, fmt.Errorf("%w %q: want one of runsc, crun, runc", ErrUnknown, name)
}

// Best returns the first runtime of Names that works here, with the reasons
// the stronger ones were passed over.
func Best(ctx context.Context, stateRoot string) (Runtime, []error, error) {
	var why []error
	for _, n := range Names {
		rt, _ := New(n, stateRoot)
		if err := rt.Check(ctx); err != nil {
			why = append(why, fmt.Errorf("%s: %w", n, err))
			continue
		}
		return rt, why, nil
	}
	return nil, why, fmt.Errorf("no OCI runtime works on this host: %w", errors.Join(why...))
}
