// Package sandbox manages Shellgate's sandboxes: which sandbox a name
// means, and its lifecycle (create, exec, sleep, wake, destroy), on top of
// an OCI runtime (package runtime), a root filesystem image (package image),
// a disk-capped home (package home) and the in-sandbox agent (package
// agent).
//
// A sandbox is named by its caller (the gateway uses container ids). Awake,
// it is a running container; asleep, it is its home image on disk and, on
// a runtime that checkpoints (runsc) after a chosen sleep, the checkpoint
// of its running state (checkpoint.go). Any Exec on a sleeping or new
// sandbox wakes it: the checkpoint restored over the same home, or a fresh
// container over it. New sandboxes are taken from a warm pool when one is
// configured.
//
// Layout under the data directory:
//
//	images/NAME/rootfs           shared read-only root filesystems (NAME links to
//	                             the current version; see package image)
//	homes/NAME.img, NAME.lock    each sandbox's home (sparse ext4) and its owner lock
//	homes/NAME.ckpt/             a sleeping sandbox's checkpoint (checkpoint.go)
//	homes/.pool/CID.img          homes of pooled sandboxes not yet named
//	run/sandboxes/CID/           a running container: bundle, mounts, owner lock
//	run/runtime/RUNTIME/         the OCI runtime's own state
//
// # How a command runs
//
//  1. `tool.ShellArgs.Plan` validates and clamps the call.
//  2. `Manager.Exec(name, cmd)` takes the sandbox's lock. If the sandbox is asleep
//     it wakes it: takes the home's owner flock (`homes/NAME.lock`; one process
//     holds a sandbox awake at a time), creates the home image if new (or takes a
//     pooled sandbox and renames its home), mounts the writable layer (a capped
//     tmpfs), the root overlay (lower = the shared read-only image, idmapped to
//     the sandbox's host id range) and the home (loop ext4, reaching the
//     container as an idmapped bind), writes the OCI bundle and runs `RUNTIME run --detach` with the
//     agent's stdin/stdout connected to pipes the host holds.
//  3. The agent client sends one Exec frame; the agent forks `bash -lc CMD` in
//     `/workspace/home` with its own pipes, streams the first `MaxBytes` of each
//     stream back as Output frames (the rest is counted and dropped), and on exit
//     or timeout kills every other process of the sandbox with `kill(-1, SIGKILL)`
//     from PID 1 — which reaches setsid'ed and double-forked descendants — then
//     reaps and answers with a Done frame. The host times the command, by its
//     own clock, and sends a Timeout frame when its time is up (protocol
//     version 2): the agent keeps no timer, because a sandbox's clock can jump
//     — under gVisor, loaded, the agent's own 300 s timer once fired after 3 s.
//     If the agent does not answer within 10 s past the timeout, the host
//     puts the sandbox to sleep (`hostGrace`).
//  4. `tool.Output` turns bytes into at most N characters per stream (invalid
//     UTF-8 as U+FFFD) and marks truncation.
//
// Files are copied into and out of a home by the host (`sandbox/files.go`,
// `filelist.go`: `WriteFile`, `ReadFile`, `OpenFile` (streaming), `StatFile`,
// `RemoveFile`, `ListFiles`) while holding the sandbox's lock, so no command
// runs meanwhile. Paths resolve beneath an `os.Root` of the mounted home, opens
// use `O_NONBLOCK|O_NOFOLLOW`, and only regular files are served, so nothing
// the sandbox leaves there (symlinks, FIFOs, sockets, devices) can lead
// outside or block the lock; copies stop when their context ends, and an
// upload goes to a temporary file renamed into place when complete (a failed
// one leaves the old file). `ListFiles` walks with `openat(O_NOFOLLOW|
// O_DIRECTORY)` from the home's descriptor, never following a symlink, in
// lexicographic path order with a resumable cursor, bounded in depth, page
// size and entries read. None of these starts a container: a sleeping
// sandbox's home is mounted alone for the call (under its owner lock, in a
// `run/sandboxes/ID` directory that orphan cleanup knows) and unmounted after.
// An awake sandbox's home has a watch (`homewatch_linux.go`: fanotify on the
// home's own ext4 filesystem, events by file handle, so no descriptor of a
// sandbox file is opened): a command run with `Command.CheckHome` drains it
// in one read at the end of its own `Manager.Exec` (same lock, no second
// operation) and its `Result.HomeUnchanged` says nothing was written,
// created, renamed or had its attributes changed since the last check, so
// the gateway lists the home after a step only when one of its commands
// changed something (any doubt — a fresh watch, a full queue, no watch, a
// backend without one — leaves `HomeUnchanged` false: list). The listing
// reports files whose modification time is at or after the kernel's coarse
// realtime clock read before the step (`fileClock`: the clock ext4 stamps
// files with, up to a tick behind `time.Now`, which missed quick writes),
// less the versions (path, mtime) the request already knows — written by it
// through the host (uploads, editor calls) or reported by an earlier step —
// which the tick-wide clock would otherwise count again.
// Uploads carry a `trusted.shellgate.source` xattr (settable only by host
// root) so listings can tell the user's files from a command's.
//
// Warm commands never touch the runtime CLI. If the sandbox dies under a command
// (gVisor ends the whole sandbox at its memory limit), the command's result says
// so (exit 137, `Restarted`), naming the cause only when it is known (the memory
// cgroup counted an OOM kill), and the next command wakes a fresh sandbox over
// the same home. When the kernel's OOM killer ends a command on crun or runc, the
// manager sees the container's memory cgroup count it and says so in the
// command's stderr. While a command runs the agent counts its tasks (processes
// and threads) every 25 ms (every 1 ms in its first 50 ms and while many
// come and go) and once at its end; at the process limit the result
// carries `ProcessLimit` and a `shellgate:` line in stderr (best effort: a burst
// gone before either look, such as the threads of a process that exited, is
// contained but not reported).
//
// The agent is untrusted input to the host: the client (`sandbox/agent/client.go`)
// keeps at most the request's `MaxBytes` per stream whatever the agent sends, and
// a protocol violation (an oversized or unknown frame, a result that is not JSON,
// a second Ready, a frame for a command never sent, output far past the cap) ends
// the connection with `agent.ErrProtocol`; the manager stops that sandbox and
// reports it in the command's result. Output callbacks get their own copy and
// never run after `Exec` returned.
//
// # Lifecycle calls
//
// Every call on a named sandbox is an operation of the manager: it is
// registered (refused with `ErrClosed` once `Close` began) with a context that
// `Destroy` and `Close` can cancel, then takes the sandbox's lock (a channel,
// so waiting honours the context). The manager keeps an entry only for
// sandboxes awake in this process or in use by a call; `ReadFile`, `WriteFile`,
// `Sleep` and `Destroy` of a name without a home are `ErrNotFound` and leave
// nothing behind (only `Exec` and `Create` create).
//
//   - `Status` and `List` never take a sandbox's lock: they read an atomic
//     awake flag, then the home, then `/proc/locks` — a home whose owner lock
//     another Shellgate process holds is `running` there.
//   - `Destroy` cancels the command running in the sandbox and the calls waiting
//     for it (they return `ErrDestroyed`, which matches `ErrNotFound`); calls
//     made after it began wait for it, then see a new sandbox.
//   - `Close` refuses new calls, waits for those in flight (once its context
//     ends it cancels them: `ErrClosed`), then puts every sandbox to sleep, so
//     no container of the manager runs after it returns.
//   - Teardown (`runtime delete`, unmounts, removal) runs with its own bounded
//     context, detached from the caller's cancellation, and removes nothing
//     until the runtime has deleted the container; if that fails the sandbox
//     stays awake and the next wake, sleep or `Open` tries again.
//   - The image is looked up when a sandbox starts, not only at `Open`: without
//     it, the call that needs it gets the image's not-found error, and the warm
//     pool waits (checking every second) and fills once it is built or imported.
//
// # User namespaces
//
// Each sandbox has its own user namespace and its own range of host ids, so no
// two sandboxes and no host account share a host uid or gid: an escape from
// crun or runc lands as an id that owns nothing, and per-uid kernel limits
// (inotify instances, the process count) are charged per sandbox.
//
//   - Ranges. Slot N maps ids 0–65535 inside to host ids `100000 + N·65536`
//     onwards (slots overlapping `/etc/passwd`, `/etc/group`, `/etc/subuid` or
//     `/etc/subgid` are never used). A sandbox holds its slot, pooled ones too,
//     by an exclusive flock on `/run/shellgate/slots/N`, which names the
//     sandbox's directory: slots are host-wide, so no two Shellgate processes
//     hand out the same range, whether or not they share a data directory. A
//     slot is freed only after its container and mounts are gone; a crashed
//     process's slot (lock free, but its sandbox directory still there) is
//     skipped until orphan cleanup removes the sandbox.
//   - The namespace. For crun and runc the host creates it while running as
//     the slot's base id (`unshare --user` started with that credential; root
//     writes the maps `0 BASE 65536`) and pins it at `run/sandboxes/CID/userns`;
//     the spec joins it by path, through the link `/run/shellgate/userns/N`
//     (runc refuses namespace paths with a comma, which a data directory may
//     have). Its owner is then the base id, which is what
//     per-uid limits are charged to (a namespace the runtime made would be
//     owned by root and share root's counts). runc sets rlimits after joining,
//     where it lacks the right to, so it runs under `prlimit(1)` with the spec's
//     rlimits instead (they travel as a bundle annotation).
//   - runsc cannot join a namespace by path (its gofer's `setns` fails with
//     EINVAL), so its spec carries only `uidMappings`/`gidMappings` and runsc
//     creates the namespace: its sentry and gofer then run as the slot's base id
//     instead of host root with DAC_OVERRIDE. gVisor implements inotify and
//     other per-user limits in the sentry, so those were never shared.
//   - Mounts, made by the host with `open_tree`/`mount_setattr(MOUNT_ATTR_IDMAP)`
//     /`move_mount` rather than the runtimes' `idmap` options, which the
//     installed versions handle differently. The overlay's lower layer is a
//     read-only idmapped bind of the shared image (nothing is chowned; the page
//     cache stays shared); its upper and work directories belong to the base
//     id. The home's ext4 is mounted at `home` as before (the host's file API
//     works there, with on-disk ids) and reaches the container as an idmapped
//     bind, `mapped-home`: files stay 1000:1000 on disk, so a home wakes in any
//     range.
//   - Directories. The namespace's root has no DAC_OVERRIDE over host-owned
//     directories: DATA, `run/` and `run/sandboxes/` are 0711 and each sandbox
//     directory 0711; every directory above DATA must be searchable by others
//     (`Open` says so otherwise).
//   - `Config.SharedHostUser` turns all of this off: commands run as host uid
//     1000, shared by all sandboxes, and on crun/runc the agent is host root
//     with its three capabilities. It exists to measure the namespace's cost; no
//     command-line flag sets it.
//
// # Disk space
//
// Homes are sparse images, so their quotas together may exceed the disk.
// Two things keep that from reaching the host. Homes are mounted with
// `discard` and trimmed (`FITRIM`, after committing the journal) before they
// are unmounted, so what a sandbox deletes is punched out of its image —
// online discard alone loses the discards still queued at unmount. And the
// operator keeps a reserve of free space on the homes' file system
// (`Config.DiskReserve`, `--disk-reserve-mb`, default 5%): below it, creating
// a home (checked before and after `mkfs`), starting a command and copying a
// file in fail with `ErrDiskReserve`, while reads, sleep and destroy still
// work so space can be freed. A command running when the host drops below the
// reserve is not stopped; its result says so in stderr.
//
// # Crash safety
//
// `sandbox.Open` resolves the data directory once (absolute, symlinks
// followed; the CLI's `--data-dir` does the same) because the kernel's mount
// table names mount points by resolved paths. It treats every
// `run/sandboxes/CID` whose `owner.lock` it can take as orphaned (its process
// died): it deletes the container through the runtime recorded in
// `meta.json`, unmounts everything below the directory, removes it and the
// pool home if any, then frees the id slots whose sandbox is gone. Homes of
// named sandboxes are never removed by cleanup. A
// sandbox directory is removed only when the mount table shows nothing
// mounted below it (`sandbox/mounts.RemoveTree`); a failed unmount is an
// error and the directory stays. A home still busy at sleep (gVisor's gofer
// exits a few ms after `runsc delete`) is retried briefly before it is
// detached lazily, and a home image still attached to a loop device is
// waited for, never mounted a second time. When the agent's stdin closes (Shellgate died) it kills its processes
// and exits, so an orphaned sandbox stops running on its own.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/home"
	"github.com/shellgate/shellgate/sandbox/image"
	"github.com/shellgate/shellgate/sandbox/mounts"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Config configures a Manager. Zero fields take the defaults.
type Config struct {
	DataDir string
	// Runtime is "runsc", "crun" or "runc"; empty picks the strongest one
	// that works here.
	Runtime string
	// Image names the root filesystem; default "default".
	Image string
	// Images is the image store's directory; default DATA/images.
	Images string
	// Agent is the static shellgate-agent binary; empty finds it next to
	// the executable.
	Agent  string
	Limits runtime.Limits
	// HomeBytes caps /workspace/home; default 5 GiB.
	HomeBytes int64
	// LayerBytes caps the writable layer over the image (thrown away at
	// sleep); default 1 GiB.
	LayerBytes int64
	// DiskReserve is free space on the homes' file system that homes may
	// not take: below it, creating a home, starting a command and copying
	// a file in fail with ErrDiskReserve. Default 5% of that file system;
	// negative: no reserve.
	DiskReserve int64
	// PoolSize is the number of started sandboxes kept ready for new
	// names; 0 disables the pool.
	PoolSize int
	// IdleTimeout puts a sandbox to sleep after this long without a
	// command; default 5 minutes, negative never.
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// SharedHostUser runs every sandbox without a user namespace of its
	// own: commands as host uid 1000 shared by all, and on crun and runc
	// the agent as host root with its three capabilities (the engine
	// before per-sandbox namespaces). Weaker isolation: it exists to
	// measure what the namespace costs; no command-line flag sets it.
	SharedHostUser bool
	// FilesOnlySleep keeps only the home through sleep even where the
	// runtime could checkpoint the running state (checkpoint.go). It
	// exists to measure what checkpoints cost; no command-line flag sets
	// it.
	FilesOnlySleep bool
	// Egress gives sandboxes with a network policy (Settings.Network)
	// their networks; nil makes one with the defaults at Open.
	Egress *egress.Engine
	// HomeArchive, when set, keeps a copy of every home outside this
	// node (S3: package homearchive over s3store): a sandbox's home is
	// archived when it goes to sleep (and after a file call on a sleeping
	// one), and restored from the archive when it wakes, so that any node
	// sharing the archive can wake it. nil: homes live only here.
	HomeArchive HomeArchive
}

// HomeArchive keeps home images outside the node, by sandbox name. The
// image is never in use while a method runs on it.
type HomeArchive interface {
	// Archive stores the image at imagePath as name's newest version.
	Archive(ctx context.Context, name, imagePath string) error
	// Restore makes the image at imagePath (created if missing) name's
	// newest archived version; an error matching fs.ErrNotExist when
	// name was never archived, and then imagePath is untouched.
	Restore(ctx context.Context, name, imagePath string) error
	// Delete removes name's archive and whatever the archive keeps beside
	// imagePath; an error matching fs.ErrNotExist when there was none.
	Delete(ctx context.Context, name, imagePath string) error
}

// CheckpointArchive is a HomeArchive that also keeps the checkpoint of a
// sleeping sandbox's running state (checkpoint.go), so that a sandbox put
// to sleep on one node wakes on another with it. Found by type assertion;
// without it, a manager with a HomeArchive keeps files only.
type CheckpointArchive interface {
	HomeArchive
	// ArchiveCheckpoint stores the files of dir as name's checkpoint,
	// replacing any; an error matching fs.ErrNotExist when there is no
	// archive behind and the checkpoint stays on this node.
	ArchiveCheckpoint(ctx context.Context, name, dir string) error
	// RestoreCheckpoint makes dir (replaced) hold name's checkpoint; an
	// error matching fs.ErrNotExist when the archive has none, and then
	// dir is untouched.
	RestoreCheckpoint(ctx context.Context, name, dir string) error
	// DeleteCheckpoint removes name's checkpoint; none is not an error.
	DeleteCheckpoint(ctx context.Context, name string) error
}

// closeParallel is how many sandboxes Close puts to sleep at once.
const closeParallel = 4

// archiveTimeout bounds one archive or restore of a home.
const archiveTimeout = 30 * time.Minute

// Status of a named sandbox.
type Status string

const (
	Running  Status = "running"
	Sleeping Status = "sleeping"
)

var (
	// ErrNotFound: no sandbox of that name exists.
	ErrNotFound = errors.New("sandbox not found")
	// ErrBusy: another Shellgate process holds the sandbox awake.
	ErrBusy = errors.New("sandbox is in use by another shellgate process")
	// ErrBadName: the name is not 1–40 letters, digits, '_' or '-'.
	ErrBadName = errors.New("sandbox name must be 1-40 characters of letters, digits, '_' and '-'")
	// ErrClosed: the manager was closed (also returned by calls that
	// Close stopped because its context ended first).
	ErrClosed = errors.New("sandbox manager is closed")
	// ErrDestroyed: Destroy stopped this call (a command it cut short, or
	// one waiting for the sandbox). It matches ErrNotFound too.
	ErrDestroyed error = destroyedError{}
)

type destroyedError struct{}

func (destroyedError) Error() string        { return "sandbox was destroyed" }
func (destroyedError) Is(target error) bool { return target == ErrNotFound }

// ValidName reports whether name can name a sandbox: 1 to 40 ASCII
// letters, digits, "_" and "-" (^[A-Za-z0-9_-]{1,40}$, checked without
// the regexp engine: every sandbox call checks a name).
func ValidName(name string) bool {
	if len(name) < 1 || len(name) > 40 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Manager runs the sandboxes of one data directory. Several processes may
// share a data directory: a sandbox is awake in at most one of them.
type Manager struct {
	cfg Config
	rt  runtime.Runtime
	// images holds cfg.Image; each container leases the version that is
	// current when it starts.
	images *image.Store
	log    *slog.Logger
	dirs   dirs
	agent  string
	// agentSum names this agent build in the agent tmpfs.
	agentSum string
	// hostIDs are ids of host accounts that no sandbox's range may cover.
	hostIDs hostIDs
	// egress makes the networks of sandboxes with a policy (egressErr:
	// why this host cannot; network_linux.go).
	egress    *egress.Engine
	egressErr error

	mu     sync.Mutex
	boxes  map[string]*box // awake or in use (box.go)
	ops    map[*op]struct{}
	closed bool
	// inflight counts ops; Close waits for it.
	inflight sync.WaitGroup

	pool chan *instance
	// pstats counts pool hits and misses (settings.go).
	pstats poolStats
	// settingsFn gives each sandbox's own settings when it starts (nil:
	// the defaults for all).
	settingsFn atomic.Pointer[SettingsFunc]
	// stop and bgCtx end the background goroutines (pool, idle sleep).
	stop     chan struct{}
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

type dirs struct{ homes, pool, run, runtimeState string }

// Open prepares the data directory, removes what a crashed Shellgate left
// (containers, mounts, half-made pool homes; never a named home), and
// starts the warm pool.
func Open(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("sandbox: no data directory")
	}
	if cfg.Image == "" {
		cfg.Image = "default"
	}
	if cfg.Limits == (runtime.Limits{}) {
		cfg.Limits = runtime.DefaultLimits()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox limits: %w", err)
	}
	if cfg.HomeBytes == 0 {
		cfg.HomeBytes = 5 << 30
	}
	if cfg.LayerBytes == 0 {
		cfg.LayerBytes = 1 << 30
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Resolve the data directory once, here: the mount table names mount
	// points by resolved paths, and cleanup that looked for mounts below a
	// symlinked path would find none and delete a mounted home's files.
	data, err := ResolveDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = data
	m := &Manager{
		cfg:   cfg,
		log:   cfg.Logger,
		boxes: map[string]*box{},
		ops:   map[*op]struct{}{},
		stop:  make(chan struct{}),
		dirs: dirs{
			homes:        filepath.Join(data, "homes"),
			pool:         filepath.Join(data, "homes", ".pool"),
			run:          filepath.Join(data, "run", "sandboxes"),
			runtimeState: filepath.Join(data, "run", "runtime"),
		},
	}
	for _, d := range []*string{&m.dirs.homes, &m.dirs.pool, &m.dirs.run, &m.dirs.runtimeState} {
		if err := os.MkdirAll(*d, 0o700); err != nil {
			return nil, err
		}
		// A subdirectory may itself be a symlink (homes on another disk).
		if *d, err = mounts.Resolve(*d); err != nil {
			return nil, err
		}
	}
	if m.cfg.DiskReserve == 0 {
		size, _, err := diskSpace(m.dirs.homes)
		if err != nil {
			return nil, err
		}
		m.cfg.DiskReserve = size / defaultReserveFraction
	}
	if err := m.prepareUserNS(); err != nil {
		return nil, err
	}
	if cfg.Runtime == "" {
		rt, why, err := runtime.Best(ctx, m.dirs.runtimeState)
		if err != nil {
			return nil, err
		}
		for _, w := range why {
			m.log.Info("runtime passed over", "reason", w)
		}
		m.rt = rt
	} else {
		rt, err := runtime.New(cfg.Runtime, m.dirs.runtimeState)
		if err != nil {
			return nil, err
		}
		if err := rt.Check(ctx); err != nil {
			return nil, fmt.Errorf("runtime %s does not work here: %w", cfg.Runtime, err)
		}
		m.rt = rt
	}
	if cfg.Images == "" {
		cfg.Images = filepath.Join(data, "images")
	}
	// A missing image is reported when a sandbox must start, so that
	// listing and removing sandboxes works without one.
	if m.images, err = image.Open(cfg.Images); err != nil {
		return nil, err
	}
	if m.agent = cfg.Agent; m.agent == "" {
		if m.agent, err = agentbin.Find(); err != nil {
			return nil, err
		}
	}
	if m.agentSum, err = hashAgent(m.agent); err != nil {
		return nil, err
	}
	m.openEgress()
	if err := m.cleanOrphans(ctx); err != nil {
		return nil, fmt.Errorf("clean up after a previous run: %w", err)
	}
	m.bgCtx, m.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.PoolSize > 0 {
		m.pool = make(chan *instance, cfg.PoolSize)
		m.bg.Add(1)
		go m.fillPool()
	}
	if cfg.IdleTimeout > 0 {
		m.bg.Add(1)
		go m.sleepIdle()
	}
	return m, nil
}

// Tracked is the number of sandboxes this manager keeps state for: those
// awake in this process and those a call is using. A name that was only
// asked about (or destroyed) is not kept.
func (m *Manager) Tracked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.boxes)
}

// ResolveDataDir returns the data directory dir as Shellgate uses it:
// absolute, with every symlink resolved (it need not exist yet). Open does
// this itself; callers that derive paths from a data directory should too.
func ResolveDataDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("sandbox: no data directory")
	}
	r, err := mounts.Resolve(dir)
	if err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	return r, nil
}

// Runtime is the name of the OCI runtime in use.
func (m *Manager) Runtime() string { return m.rt.Name() }

// Image is the root filesystem new sandboxes start from (the image's
// current version), or the error that says why it is missing. Running
// sandboxes keep the version they started from until they sleep.
func (m *Manager) Image() (*image.Image, error) { return m.image() }

// image looks the configured image up in the store on every call: an image
// built or imported after Open is picked up without a restart, and a
// rebuild is what new sandboxes start from.
func (m *Manager) image() (*image.Image, error) { return m.images.Get(m.cfg.Image) }

// Command is one command to run in a sandbox.
type Command struct {
	Command   string
	TimeoutMs int64
	// MaxBytes is kept per stream; the rest is counted and dropped.
	MaxBytes int
	// OnOutput, if set, sees output as it is produced.
	OnOutput agent.OutputFunc
	// CheckHome asks whether the home may have changed since the previous
	// check (Result.HomeUnchanged): the home's watch is drained after the
	// command, in the same call, so a caller can skip listing the home
	// after a command that wrote nothing. Without it the watch is left as
	// it is: the next check still sees this command's writes.
	CheckHome bool
	// Resident starts the command as the sandbox's resident process (a
	// language kernel, see agent.ExecRequest.Resident): it keeps running
	// after the call, which returns once it has started (exit code 0), and
	// until the sandbox sleeps (without a checkpoint) or the next resident
	// starts. TimeoutMs and
	// MaxBytes do not apply; its output is discarded.
	Resident bool
}

// Result is one command's output and outcome.
type Result struct {
	Stdout, Stderr           []byte
	StdoutBytes, StderrBytes int64 // everything written, kept or not
	ExitCode                 int
	TimedOut                 bool
	// OOMKilled is set when the kernel's out-of-memory killer ended the
	// command at the sandbox's memory limit (crun, runc; under gVisor the
	// whole sandbox stops instead, see Restarted).
	OOMKilled bool
	// ProcessLimit is set when the command's processes and threads were
	// seen at the sandbox's process limit (Limits.Processes): forks past it
	// failed with EAGAIN inside the command, the sandbox itself is
	// unaffected. The agent looks every 25 ms (1 ms at the start and while
	// many tasks come and go) and when the command ends,
	// so a burst that is gone by then (threads of a process that exited)
	// can go unreported.
	ProcessLimit bool
	// Notes are Shellgate's own lines about the command (a limit it
	// reached, the sandbox stopped under it), each ending in a newline.
	// They follow Stderr and are never cut by an output cap.
	Notes []byte
	// Restarted is set when the sandbox itself died during the command
	// (for example gVisor ends the whole sandbox when its memory limit is
	// hit) or its agent broke the protocol. The home is intact; the next
	// command runs in a fresh sandbox. Stderr says why when that is known.
	Restarted bool
	// HomeUnchanged is set, for a Command with CheckHome, only when the
	// sandbox stayed awake and its home's watch (fanotify on the home's
	// filesystem) saw no write, close after writing, creation, rename or
	// attribute change since the previous check, by this command or
	// anything else (a file upload). Its zero value means "changed or
	// unknown": every doubt (no watch, the first check after a wake, an
	// overflowing queue, a restarted sandbox, a backend without a watch)
	// leaves it false, and the caller lists the home. Writes through a
	// shared mapping that is never closed are not seen (mmap writers close
	// their files when their process ends).
	HomeUnchanged bool
}

// hostGrace is how long past a command's own timeout the host waits for the
// agent before it gives up on the sandbox.
const hostGrace = 10 * time.Second

// Exec runs one command in the named sandbox, waking or creating it first.
// Destroy of the sandbox cuts the command short (ErrDestroyed), and so does
// Close once its context ends (ErrClosed).
func (m *Manager) Exec(ctx context.Context, name string, cmd Command) (Result, error) {
	var res Result
	err := m.withBox(ctx, name, func(ctx context.Context, b *box) (err error) {
		res, err = m.execLocked(ctx, b, cmd)
		return err
	})
	return res, err
}

func (m *Manager) execLocked(ctx context.Context, b *box, cmd Command) (Result, error) {
	if err := m.checkReserve("sandbox " + b.name); err != nil {
		return Result{}, err
	}
	if err := m.wakeLocked(ctx, b, true); err != nil {
		return Result{}, err
	}
	b.lastUsed = time.Now()
	defer func() { b.lastUsed = time.Now() }()

	hostCtx, cancel := ctx, context.CancelFunc(func() {})
	if cmd.TimeoutMs > 0 {
		hostCtx, cancel = context.WithTimeout(ctx, time.Duration(cmd.TimeoutMs)*time.Millisecond+hostGrace)
	}
	defer cancel()
	inst := b.inst
	out, err := inst.client.Exec(hostCtx, agent.ExecRequest{
		Shell:     inst.img.Shell,
		Command:   cmd.Command,
		Dir:       runtime.HomeDir,
		TimeoutMs: cmd.TimeoutMs,
		MaxBytes:  cmd.MaxBytes,
		Resident:  cmd.Resident,
	}, cmd.OnOutput)
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrClosed):
		// The sandbox died under the command, or its agent broke the
		// protocol and the connection was dropped. Report it as the
		// command's result, naming the cause only when it is known; the
		// next command wakes a fresh sandbox.
		res := Result{ExitCode: 137, Restarted: true}
		var why string
		switch {
		case errors.Is(err, agent.ErrProtocol):
			why = "the sandbox's agent sent invalid data, so the sandbox was stopped"
		case inst.newOOMKill():
			res.OOMKilled = true
			why = fmt.Sprintf("the sandbox reached its memory limit (%d MiB) and was stopped", inst.limits.MemoryBytes>>20)
		default:
			why = "the sandbox stopped during this command (cause unknown)"
		}
		m.log.Warn("sandbox died during a command", "sandbox", b.name, "container", inst.cid, "err", err, "cause", why, "init_log", readTail(filepath.Join(inst.dir, "init.log")))
		m.sleepLocked(ctx, b)
		res.Stderr = []byte("shellgate: " + why + "; files in /workspace/home are kept and the next command runs in a fresh sandbox\n")
		return res, nil
	case ctx.Err() == nil && hostCtx.Err() != nil:
		// The agent did not end the command in time: give up on this
		// sandbox rather than on the caller.
		m.log.Warn("agent missed a command timeout", "sandbox", b.name, "container", inst.cid)
		m.sleepLocked(ctx, b)
		return Result{ExitCode: -1, TimedOut: true, Restarted: true,
			Notes: fmt.Appendf(nil, "shellgate: the command was still running %s after its timeout (a process limit or memory pressure can keep the sandbox from ending it), so the sandbox was stopped; files in /workspace/home are kept and the next command runs in a fresh sandbox\n", hostGrace)}, nil
	default:
		// The caller's context ended, or Destroy or Close stopped the
		// command: the agent kills it.
		return Result{}, err
	}
	res := Result{
		Stdout: out.Stdout, Stderr: out.Stderr,
		StdoutBytes: out.StdoutBytes, StderrBytes: out.StderrBytes,
		ExitCode: out.ExitCode, TimedOut: out.TimedOut,
	}
	if out.Error != "" {
		res.Notes = append(res.Notes, "shellgate: "+out.Error+"\n"...)
	}
	if out.Signal == 9 && !out.TimedOut && inst.newOOMKill() {
		res.OOMKilled = true
		res.Notes = append(res.Notes, fmt.Sprintf("shellgate: killed by the out-of-memory killer: the sandbox's memory limit is %d MiB\n", inst.limits.MemoryBytes>>20)...)
	}
	if out.ProcessLimit {
		res.ProcessLimit = true
		res.Notes = append(res.Notes, fmt.Sprintf("shellgate: the command reached the sandbox's process limit (%d processes and threads); creating more failed with EAGAIN\n", inst.limits.Processes)...)
	}
	if err := m.checkReserve("sandbox " + b.name); errors.Is(err, ErrDiskReserve) {
		res.Notes = append(res.Notes, "shellgate: the host's free disk space fell below its reserve during this command; files written are kept, but further commands and file copies into sandboxes are refused until space is freed\n"...)
	}
	if cmd.CheckHome {
		res.HomeUnchanged = !inst.watch.changed()
	}
	if b.lostState != "" {
		res.Notes = append(res.Notes, lostNote(b.lostState)...)
		b.lostState = ""
	}
	return res, nil
}

// Create makes the named sandbox exist and be awake (a no-op when it is).
func (m *Manager) Create(ctx context.Context, name string) error {
	return m.withBox(ctx, name, func(ctx context.Context, b *box) error { return m.wakeLocked(ctx, b, true) })
}

// Sleep stops the named sandbox's processes and drops its writable layer;
// its home stays. Where the runtime can, the sandbox is checkpointed first
// and the next wake restores its processes (checkpoint.go). Sleeping a
// sleeping sandbox is a no-op; an unknown name is ErrNotFound. Sleep waits
// for a running command (as long as ctx allows); once it has the sandbox,
// the teardown runs to its end even if ctx ends.
func (m *Manager) Sleep(ctx context.Context, name string) error {
	return m.withBox(ctx, name, func(ctx context.Context, b *box) error {
		if b.inst == nil {
			return m.statHome(b.name)
		}
		return m.parkLocked(ctx, b)
	})
}

// Destroy stops the named sandbox and deletes its home; an unknown name is
// ErrNotFound. A running command is cut short (its Exec returns
// ErrDestroyed), and so are calls waiting for the sandbox; calls made after
// Destroy began wait for it and then see a new sandbox (Exec, Create) or
// ErrNotFound. Destroy runs to its end even if ctx ends.
func (m *Manager) Destroy(ctx context.Context, name string) error {
	if !ValidName(name) {
		return fmt.Errorf("%w: %q", ErrBadName, name)
	}
	var b *box
	for b == nil {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return ErrClosed
		}
		b = m.boxes[name]
		if b != nil && b.destroying != nil {
			wait := b.destroying
			m.mu.Unlock()
			// Another Destroy of this name: wait for its outcome.
			<-wait
			b = nil
			continue
		}
		if b == nil {
			b = newBox(name)
			m.boxes[name] = b
		}
		b.destroying = make(chan struct{})
		b.refs++
		m.inflight.Add(1)
		cause := fmt.Errorf("%w: %s", ErrDestroyed, name)
		for o := range m.ops {
			if o.box == b {
				o.cancel(cause)
			}
		}
		m.mu.Unlock()
	}
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	err := b.lockCtx(ctx)
	if err == nil {
		err = m.destroyLocked(ctx, b)
		b.unlock()
	}
	m.mu.Lock()
	close(b.destroying)
	b.destroying = nil
	b.refs--
	if err == nil && m.boxes[name] == b {
		// Ops cut short by this Destroy still hold b; new ones start over.
		delete(m.boxes, name)
	}
	m.forgetLocked(b)
	m.mu.Unlock()
	m.inflight.Done()
	return err
}

func (m *Manager) destroyLocked(ctx context.Context, b *box) error {
	name := b.name
	ar := m.cfg.HomeArchive
	if b.inst == nil && ar == nil {
		if err := m.statHome(name); err != nil {
			return err
		}
	}
	if err := m.stopLocked(ctx, b); err != nil {
		return err
	}
	unlock, err := m.lockHome(name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := m.removeCheckpoint(name); err != nil {
		return err
	}
	archived := false
	if ar != nil {
		err := ar.Delete(ctx, name, m.homePath(name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete the archive of %s: %w", name, err)
		}
		archived = err == nil
	}
	err = os.Remove(m.homePath(name))
	if errors.Is(err, os.ErrNotExist) && !archived {
		os.Remove(m.homeLockPath(name))
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// lockHome checks that the file it locked is still the one at the
	// path, so removing it while held is safe.
	os.Remove(m.homeLockPath(name))
	return nil
}

// statHome is nil when the named home exists, else ErrNotFound.
func (m *Manager) statHome(name string) error {
	if _, err := os.Stat(m.homePath(name)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return err
	}
	return nil
}

// Status tells whether the named sandbox is awake (in this process, or in
// another one that holds its home's owner lock) or asleep; ErrNotFound when
// it has no home. It never waits for a command.
func (m *Manager) Status(name string) (Status, error) {
	if !ValidName(name) {
		return "", ErrBadName
	}
	held, _ := heldFlocks()
	return m.status(name, held)
}

// status is Status with /proc/locks read once by the caller.
func (m *Manager) status(name string, held map[string]bool) (Status, error) {
	m.mu.Lock()
	b := m.boxes[name]
	m.mu.Unlock()
	if b != nil && b.awake.Load() {
		return Running, nil
	}
	if err := m.statHome(name); err != nil {
		return "", err
	}
	if b != nil && b.homeOnly.Load() {
		// Its owner lock is ours, held for a file call, not a container.
		return Sleeping, nil
	}
	if held[m.homeLockKey(name)] {
		return Running, nil
	}
	return Sleeping, nil
}

// Info describes one sandbox of the data directory.
type Info struct {
	Name   string
	Status Status
	// DiskBytes is what the home takes on the host's disk (the image is
	// sparse), its checkpoint included; QuotaBytes is the home's size, the
	// most it can hold.
	DiskBytes, QuotaBytes int64
	// CheckpointBytes is what the checkpoint of a sleeping sandbox's
	// running state takes on disk (part of DiskBytes; 0 without one).
	CheckpointBytes int64
	// LastUsed is when its home was last written.
	LastUsed time.Time
}

// List returns every sandbox with a home in the data directory, by name.
// Like Status, it never waits for a command.
func (m *Manager) List() ([]Info, error) {
	entries, err := os.ReadDir(m.dirs.homes)
	if err != nil {
		return nil, err
	}
	held, _ := heldFlocks()
	var out []Info
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok || !ValidName(name) || !e.Type().IsRegular() {
			continue
		}
		if inf, err := m.info(name, held); err == nil {
			out = append(out, inf)
		} // else destroyed meanwhile
	}
	return out, nil
}

// Info describes the named sandbox as List does; ErrNotFound when it has
// no home. Like Status, it never waits for a command.
func (m *Manager) Info(name string) (Info, error) {
	if !ValidName(name) {
		return Info{}, ErrBadName
	}
	held, _ := heldFlocks()
	return m.info(name, held)
}

// info is Info with /proc/locks read once by the caller.
func (m *Manager) info(name string, held map[string]bool) (Info, error) {
	st, err := m.status(name, held)
	if err != nil {
		return Info{}, err
	}
	fi, err := os.Stat(m.homePath(name))
	if err != nil {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	inf := Info{Name: name, Status: st, QuotaBytes: fi.Size(), LastUsed: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		inf.DiskBytes = sys.Blocks * 512
	}
	if st == Sleeping {
		inf.CheckpointBytes = dirBytes(m.ckptPath(name))
		inf.DiskBytes += inf.CheckpointBytes
	}
	return inf, nil
}

// Close stops new calls (they return ErrClosed), waits for the calls in
// flight — until ctx ends, then it stops them (they return ErrClosed) —
// and puts every awake sandbox to sleep (checkpointing those it can, a few
// at a time) and empties the pool. No container
// of this manager runs after Close returns. The teardown runs to its end
// even if ctx has ended.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	m.bgCancel()
	m.bg.Wait()

	idle := make(chan struct{})
	go func() {
		m.inflight.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
		m.mu.Lock()
		for o := range m.ops {
			o.cancel(ErrClosed)
		}
		m.mu.Unlock()
		<-idle
	}

	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	m.mu.Lock()
	boxes := make([]*box, 0, len(m.boxes))
	for _, b := range m.boxes {
		boxes = append(boxes, b)
	}
	m.mu.Unlock()
	// A few at a time: a checkpoint (checkpoint.go) takes about a second
	// per GiB of the sandbox's memory, mostly writing it to disk.
	var errs []error
	var errMu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, closeParallel)
	for _, b := range boxes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := b.lockCtx(ctx)
			if err != nil {
				err = fmt.Errorf("sandbox %s: %w", b.name, err)
			} else {
				err = m.parkLocked(ctx, b)
				b.unlock()
			}
			errMu.Lock()
			errs = append(errs, err)
			errMu.Unlock()
		}()
	}
	wg.Wait()
	if m.pool != nil {
		for {
			select {
			case inst := <-m.pool:
				errs = append(errs, m.stopInstance(ctx, inst), os.Remove(inst.home))
				continue
			default:
			}
			break
		}
	}
	errs = append(errs, m.dropRuntimeMounts(ctx), m.dropAgentTmpfs())
	return errors.Join(errs...)
}

func (m *Manager) homePath(name string) string { return filepath.Join(m.dirs.homes, name+".img") }

// wakeLocked starts the box's container if it is asleep. A new name takes a
// pooled sandbox when there is one; without create, a name with no home is
// ErrNotFound and nothing is made for it.
func (m *Manager) wakeLocked(ctx context.Context, b *box, create bool) error {
	if b.inst != nil {
		select {
		case <-b.inst.client.Done():
			// Died while idle (killed from outside): start afresh.
			if err := m.sleepLocked(ctx, b); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	home := m.homePath(b.name)
	if !create && m.cfg.HomeArchive == nil {
		// Before lockHome, which would leave a lock file for the name.
		if err := m.statHome(b.name); err != nil {
			return err
		}
	}
	unlock, err := m.lockHome(b.name)
	if err != nil {
		return err
	}
	if err := m.restoreLocked(ctx, b.name, create); err != nil {
		unlock()
		return err
	}
	_, statErr := os.Stat(home)
	isNew := errors.Is(statErr, os.ErrNotExist)
	if isNew && !create {
		unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, b.name)
	}
	if _, err := m.image(); err != nil {
		unlock()
		return err
	}
	set, err := m.settingsFor(ctx, b.name)
	if err != nil {
		unlock()
		return err
	}
	var inst *instance
	if isNew {
		// Pooled sandboxes run on the defaults: only a sandbox with those
		// can take one.
		if set == m.Defaults() {
			inst = m.fromPool()
		}
		if inst != nil {
			m.pstats.hits.Add(1)
		} else {
			m.pstats.misses.Add(1)
		}
		if inst != nil {
			if err := os.Rename(inst.home, home); err != nil {
				m.stopInstance(ctx, inst)
				unlock()
				return err
			}
			inst.home = home
		} else if err := m.newHome(home, set.HomeBytes); err != nil {
			unlock()
			return err
		}
	}
	if inst == nil && !isNew {
		lost := m.fetchCheckpoint(ctx, b.name)
		if lost == "" {
			inst, lost = m.restoreInstance(ctx, b.name, home, set)
		} else {
			m.removeCheckpoint(b.name)
		}
		if lost != "" {
			b.lostState = lost
		}
	}
	if inst == nil {
		if inst, err = m.startInstance(ctx, newID(), home, set.Limits, set.Network, nil); err != nil {
			unlock()
			return err
		}
	}
	if inst.net != nil {
		inst.net.SetID(b.name) // its records name the sandbox
	}
	b.setInst(inst)
	b.lockRelease = unlock
	m.log.Debug("sandbox awake", "sandbox", b.name, "container", inst.cid)
	return nil
}

// newHome creates a home image unless that would leave the host below the
// disk reserve (checked before, and after, since mkfs takes space too).
func (m *Manager) newHome(path string, size int64) error {
	if err := m.checkReserve("create home"); err != nil {
		return err
	}
	if err := home.Create(path, size, runtime.UID, runtime.GID); err != nil {
		return err
	}
	if err := m.checkReserve("create home"); err != nil {
		return errors.Join(err, os.Remove(path))
	}
	return nil
}

// sleepLocked stops the box's container and, with a HomeArchive, archives
// its home. If the container cannot be deleted the box stays awake
// (holding its home) and the error says why; the next wake or sleep tries
// again. If the archive fails the sandbox is asleep, its home is kept
// here, and the error says that the archive is behind.
func (m *Manager) sleepLocked(ctx context.Context, b *box) error {
	if b.inst == nil {
		return nil
	}
	return m.stopAndArchive(ctx, b, m.cfg.HomeArchive != nil)
}

// stopLocked is sleepLocked without the archive (for Destroy).
func (m *Manager) stopLocked(ctx context.Context, b *box) error {
	if b.inst == nil {
		return nil
	}
	return m.stopAndArchive(ctx, b, false)
}

func (m *Manager) stopAndArchive(ctx context.Context, b *box, archive bool) error {
	if err := m.stopInstance(ctx, b.inst); err != nil {
		return err
	}
	b.setInst(nil)
	var err error
	if archive {
		// The checkpoint first: archiving the home may hand the sandbox
		// to other nodes.
		m.archiveCheckpoint(ctx, b.name)
		err = m.archiveHome(ctx, b.name)
	}
	if b.lockRelease != nil {
		b.lockRelease()
		b.lockRelease = nil
	}
	m.log.Debug("sandbox asleep", "sandbox", b.name)
	return err
}

// archiveHome archives the named home (its owner lock held, unmounted).
// It runs to its end even if ctx ends: a sleep cut short would leave the
// archive behind the home.
func (m *Manager) archiveHome(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), archiveTimeout)
	defer cancel()
	start := time.Now()
	if err := m.cfg.HomeArchive.Archive(ctx, name, m.homePath(name)); err != nil {
		m.log.Warn("archive home", "sandbox", name, "err", err)
		return fmt.Errorf("sandbox %s is asleep but its home was not archived (kept on this node): %w", name, err)
	}
	m.log.Debug("home archived", "sandbox", name, "took", time.Since(start))
	return nil
}

// restoreLocked brings the named home (its owner lock held) up to date
// from the HomeArchive, if there is one. A name that was never archived
// keeps its local home; with neither, it is ErrNotFound unless create.
func (m *Manager) restoreLocked(ctx context.Context, name string, create bool) error {
	ar := m.cfg.HomeArchive
	if ar == nil {
		return nil
	}
	start := time.Now()
	err := ar.Restore(ctx, name, m.homePath(name))
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			if serr := m.statHome(name); serr != nil {
				// lockHome checks that the file it locked is still the
				// one at the path, so removing it while held is safe.
				os.Remove(m.homeLockPath(name))
				return serr
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("wake %s: restoring its home from the archive: %w", name, err)
	}
	m.log.Debug("home restored", "sandbox", name, "took", time.Since(start))
	return nil
}

// sleepIdle puts sandboxes to sleep once idle for IdleTimeout.
func (m *Manager) sleepIdle() {
	defer m.bg.Done()
	every := min(m.cfg.IdleTimeout/4, 30*time.Second)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		boxes := make([]*box, 0, len(m.boxes))
		for _, b := range m.boxes {
			boxes = append(boxes, b)
		}
		m.mu.Unlock()
		for _, b := range boxes {
			if !b.tryLock() {
				continue // a command is running: not idle
			}
			if b.inst != nil && time.Since(b.lastUsed) >= m.cfg.IdleTimeout {
				if err := m.parkLocked(m.bgCtx, b); err != nil {
					m.log.Warn("idle sleep", "sandbox", b.name, "err", err)
				}
			}
			b.unlock()
			m.mu.Lock()
			m.forgetLocked(b)
			m.mu.Unlock()
		}
	}
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "sg-" + hex.EncodeToString(b[:])
}
