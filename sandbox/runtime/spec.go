package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Config is an OCI runtime configuration (a bundle's config.json).
type Config = specs.Spec

// Paths inside every sandbox.
const (
	HomeDir = "/workspace/home"
	// DataAlias names the home too: OpenAI's hosted shell works in
	// /mnt/data, and models trained on it write there.
	DataAlias = "/mnt/data"
	// InputDir and OutputDir are $INPUT_DIR and $OUTPUT_DIR, where
	// Anthropic's code execution puts uploads and expects outputs.
	InputDir  = HomeDir + "/input"
	OutputDir = HomeDir + "/output"
	AgentPath = "/.shellgate/shellgate-agent"
	// UID and GID are the commands' user.
	UID = 1000
	GID = 1000
	// AgentUID and AgentGID are the agent's: a user of its own, so that no
	// command can signal it and the commands' process limit (per user)
	// never counts its threads.
	AgentUID = 0
	AgentGID = 0
)

// AgentTasks is the room the pids cgroup leaves the agent's own threads
// above Limits.Processes, which RLIMIT_NPROC gives the commands' user.
const AgentTasks = 64

// AgentCapabilities are the agent's only capabilities: to start each
// command as UID:GID and to kill what commands leave behind. CAP_SETPCAP
// lets it empty the bounding set at start, after which it drops it.
// Commands run with none at all.
var AgentCapabilities = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"}

// Limits are one sandbox's resources.
type Limits struct {
	CPUs        float64 // CPU time, in cores
	MemoryBytes int64   // memory (and tmpfs pages) of the whole sandbox
	Processes   int64   // processes and threads of the commands (RLIMIT_NPROC)
	TmpBytes    int64   // size of the /tmp tmpfs
	ShmBytes    int64   // size of /dev/shm
}

// DefaultLimits are SPEC §3.1's: 1 CPU, 5 GiB memory, 512 processes, and a
// capped /tmp.
func DefaultLimits() Limits {
	return Limits{CPUs: 1, MemoryBytes: 5 << 30, Processes: 512, TmpBytes: 1 << 30, ShmBytes: 64 << 20}
}

// Validate checks that every limit is usable.
func (l Limits) Validate() error {
	switch {
	case l.CPUs < 0.01 || l.CPUs > 1024:
		return fmt.Errorf("cpus %g: want 0.01 to 1024", l.CPUs)
	case l.MemoryBytes < 32<<20:
		return fmt.Errorf("memory %d MiB: at least 32 MiB", l.MemoryBytes>>20)
	case l.Processes < 16 || l.Processes > 1<<20:
		return fmt.Errorf("processes %d: want 16 to %d", l.Processes, 1<<20)
	case l.TmpBytes < 1<<20:
		return fmt.Errorf("/tmp size %d bytes: at least 1 MiB", l.TmpBytes)
	case l.ShmBytes < 1<<20:
		return fmt.Errorf("/dev/shm size %d bytes: at least 1 MiB", l.ShmBytes)
	}
	return nil
}

// SpecOptions describe one sandbox.
type SpecOptions struct {
	ID       string // container id, also its cgroup's name
	Rootfs   string // host path of the root filesystem (the overlay's merged dir)
	Home     string // host path mounted read-write at /workspace/home
	Agent    string // host path of the static agent binary
	Hostname string
	Limits   Limits
}

// Env is the whole environment of a sandbox: nothing comes from the host.
var Env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=" + HomeDir,
	// Where Anthropic's code execution puts uploads and expects outputs.
	"INPUT_DIR=" + InputDir,
	"OUTPUT_DIR=" + OutputDir,
	"USER=sandbox",
	"LOGNAME=sandbox",
	"LANG=C.UTF-8",
	"LC_ALL=C.UTF-8",
	"TERM=dumb",
	"PYTHONUNBUFFERED=1",
}

// Spec builds the configuration every runtime starts from: a read-write
// root (the overlay whose lower layer is the shared read-only image), the
// home bind mount, the agent as init (uid 0 of the sandbox with only
// AgentCapabilities and no new privileges; it runs commands as UID with no
// capabilities at all and RLIMIT_NPROC = Limits.Processes), its own PID,
// mount, IPC, UTS and network namespaces (loopback only), masked /proc and
// /sys paths, and cgroup limits.
func Spec(o SpecOptions) *Config {
	hostname := o.Hostname
	if hostname == "" {
		hostname = "sandbox"
	}
	l := o.Limits
	period := uint64(100000)
	quota := int64(l.CPUs * float64(period))
	pids := l.Processes + AgentTasks
	swap := l.MemoryBytes // memory+swap = memory: no swap
	return &Config{
		Version:  "1.0.2",
		Hostname: hostname,
		Root:     &specs.Root{Path: o.Rootfs},
		Process: &specs.Process{
			User: specs.User{UID: AgentUID, GID: AgentGID},
			Args: []string{AgentPath,
				"-uid", strconv.Itoa(UID), "-gid", strconv.Itoa(GID),
				"-nproc", strconv.FormatInt(l.Processes, 10)},
			Env: append([]string(nil), Env...),
			// The agent has no DAC override: "/" is where it can always
			// be; commands start in the directory each request names.
			Cwd: "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  AgentCapabilities,
				Effective: AgentCapabilities,
				Permitted: AgentCapabilities,
			},
			NoNewPrivileges: true,
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: 8192, Soft: 8192},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%d", l.ShmBytes)}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", l.TmpBytes)}},
			{Destination: HomeDir, Type: "bind", Source: o.Home, Options: []string{"rbind", "rw", "nosuid", "nodev"}},
			// OpenAI's hosted shell works in /mnt/data: the same home.
			{Destination: DataAlias, Type: "bind", Source: o.Home, Options: []string{"rbind", "rw", "nosuid", "nodev"}},
			{Destination: AgentPath, Type: "bind", Source: o.Agent, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			CgroupsPath: "/shellgate/" + o.ID,
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &l.MemoryBytes, Swap: &swap},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: &pids},
				Devices: []specs.LinuxDeviceCgroup{
					{Allow: false, Access: "rwm"},
				},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
				"/sys/firmware", "/sys/devices/virtual/powercap", "/sys/kernel",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
}

// WriteBundle writes spec as dir/config.json.
func WriteBundle(dir string, spec *Config) error {
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// readBundle reads dir/config.json back.
func readBundle(dir string) (*Config, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec Config
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", dir, err)
	}
	return &spec, nil
}
