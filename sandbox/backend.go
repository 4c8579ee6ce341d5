package sandbox

import (
	"context"
	"errors"
	"io"

	"github.com/shellgate/shellgate/sandbox/egress"
)

// Backend is what a server needs of its sandboxes: their lifecycle, their
// commands and the files of their homes, by name. *Manager (sandboxes on
// this machine) is one; package kube's Sandboxes (one pod per sandbox) is
// another. The methods mean what Manager's do; a backend that cannot do
// one returns an error matching ErrNotSupported that names it.
type Backend interface {
	// Runtime names what runs the sandboxes ("runsc", "kubernetes", ...).
	Runtime() string
	// Defaults are the settings of a sandbox that has none of its own;
	// SetSettings makes f their source from each sandbox's next start.
	Defaults() Settings
	SetSettings(f SettingsFunc)

	// Create makes the named sandbox exist; Exec runs one command in it,
	// waking or creating it first.
	Create(ctx context.Context, name string) error
	Exec(ctx context.Context, name string, cmd Command) (Result, error)
	// Status and List never wait for a command.
	Status(name string) (Status, error)
	List() ([]Info, error)
	Sleep(ctx context.Context, name string) error
	Destroy(ctx context.Context, name string) error
	// Close stops new calls and puts every awake sandbox to sleep.
	Close(ctx context.Context) error

	Files
}

// Files are the file operations on a sandbox's home (paths relative to
// /workspace/home, confined to it).
type Files interface {
	ListFiles(ctx context.Context, name string, opts ListOptions) (FileList, error)
	StatFile(ctx context.Context, name, rel string) (FileInfo, error)
	OpenFile(ctx context.Context, name, rel string, maxBytes int64) (*File, error)
	ReadFile(ctx context.Context, name, rel string, maxBytes int64) ([]byte, error)
	WriteFile(ctx context.Context, name, rel string, r io.Reader) error
	PutFile(ctx context.Context, name, rel string, r io.Reader) (FileInfo, error)
	RemoveFile(ctx context.Context, name, rel string) error
}

// Pool is a backend with a warm pool of started sandboxes (metrics).
type Pool interface {
	PoolReady() int
	PoolSize() int
	PoolStats() (hits, misses uint64)
}

// EgressEngine is a backend that runs its sandboxes' egress proxy itself
// (metrics).
type EgressEngine interface {
	Egress() (*egress.Engine, error)
}

// Describer is a backend that describes one sandbox (its disk use, the
// checkpoint of its running state) without listing them all.
type Describer interface {
	Info(name string) (Info, error)
}

// ErrNotSupported: the backend cannot do this (yet); the error names what.
var ErrNotSupported = errors.New("not supported by this sandbox backend")

var (
	_ Backend      = (*Manager)(nil)
	_ Pool         = (*Manager)(nil)
	_ EgressEngine = (*Manager)(nil)
	_ Describer    = (*Manager)(nil)
)
