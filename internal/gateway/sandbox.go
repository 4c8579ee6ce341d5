package gateway

import (
	"context"
	"io"
	"time"

	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/internal/tool"
)

// Sandboxes opens the caller's container for one gateway request. The
// server implements it, bound to the caller's workspace (tenancy, records,
// the call lock per container, metering).
type Sandboxes interface {
	// Open resolves sel (identity.Choose) to a container of the caller's
	// workspace, creating it if it is new, and returns a session on it.
	// Open does not start the sandbox: the first command or file copy does.
	// A reference to a container that does not exist is a *RequestError
	// (404); an expired one too (410), naming it.
	Open(ctx context.Context, sel identity.Request, opts OpenOptions) (Sandbox, error)
	// StatFile returns the caller's workspace file fileID (a *RequestError
	// 404 when it is not one), for frontends that must name an upload's
	// path to the model before the container is opened.
	StatFile(ctx context.Context, fileID string) (FileInfo, error)
}

// FileInfo describes a workspace file.
type FileInfo struct {
	ID    string
	Name  string // the file name as uploaded (a base name)
	Bytes int64
}

// OpenOptions are the settings a request gives for a container it creates
// (ignored for an existing one, whose settings were fixed at creation).
type OpenOptions struct {
	MemoryLimit   string // OpenAI's "1g" | "4g" | "16g" | "64g"; empty: default
	NetworkPolicy []byte // JSON as the request sent it; nil: none
}

// Sandbox is one request's session on a container. Every method holds the
// container like an exec call (one call at a time per container).
type Sandbox interface {
	// ContainerID is the id results carry ("cntr_…"), reusable as a
	// container_reference.
	ContainerID() string
	// ExpiresAt is when the container's files expire if unused from now.
	ExpiresAt() time.Time
	// Exec runs p's commands in order, each in its own bash -lc in
	// /workspace/home. onOutput, when not nil, gets output as it is
	// produced (stream 1 stdout, 2 stderr; valid UTF-8 chunks). It returns
	// one output per command that ran, and Changed: the files of the home
	// the call created or modified, most recent first, at most 10.
	Exec(ctx context.Context, p tool.Plan, onOutput func(cmd, stream int, text string)) (ExecResult, error)
	// Python runs c on the container's Python kernel (tool.RunPython),
	// starting it on the first call: variables and imports persist from
	// call to call until the container sleeps or the kernel dies.
	// onOutput, when not nil, gets the code's stdout (1) and stderr (2) as
	// produced. Changed lists the files of the home the call created or
	// modified, as for Exec.
	Python(ctx context.Context, c tool.PythonCall, onOutput func(stream int, text string)) (PythonResult, error)
	// ReadFile reads a regular file beneath the home (path relative to
	// /workspace/home, or absolute under /workspace/home or /mnt/data), at
	// most maxBytes (ErrTooLarge beyond).
	ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error)
	// WriteFile creates or replaces a regular file beneath the home.
	WriteFile(ctx context.Context, path string, r io.Reader) error
	// CopyIn copies the workspace file fileID into the home under dir
	// (relative; "" for the home itself) and returns the path it wrote,
	// relative to the home. An unknown file is a *RequestError (404).
	CopyIn(ctx context.Context, fileID, dir string) (string, error)
	// Promote copies a file of the home into the workspace's durable files
	// (for Messages' bash_code_execution_output file ids) and returns its id.
	Promote(ctx context.Context, path string) (string, error)
	// Cost is the request's sandbox cost so far, in micro-dollars, as it
	// will be billed if the request ended now; after Close, what Close
	// billed.
	Cost() int64
	// Close ends the session and records its bill in the usage ledger.
	// A bill it could not record is an error (a 503 *RequestError): the
	// request must not be answered as complete. Closing again does nothing.
	Close() error
}

// ExecResult is what a shell call produced.
type ExecResult struct {
	Outputs []tool.CommandOutput
	Changed []ChangedFile
}

// PythonResult is what a Python call produced.
type PythonResult struct {
	Output  tool.PythonOutput
	Changed []ChangedFile
}

// ChangedFile is a file of the home created or modified by a call.
type ChangedFile struct {
	ID      string // the container file id ("cfile_…") for the files API
	Path    string // relative to /workspace/home
	Bytes   int64
	ModTime time.Time
}
