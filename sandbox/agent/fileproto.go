package agent

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/shellgate/shellgate/sandbox/homefs"
)

// File operations on the sandbox's home, for sandboxes whose home only the
// agent can reach (a Kubernetes pod's). The agent does them as the
// commands' user, beneath the home with no symlink followed (package
// homefs, the rules of the host's own file calls), and only on regular
// files. Frames of one file request:
//
//	host → agent: File (FileRequest); for FileWrite then Data frames and
//	              an empty Data frame at the end of the bytes
//	agent → host: FileDone (FileResult); for FileRead, when it succeeded,
//	              then Data frames of exactly Info.Size bytes and an empty
//	              Data frame, or a second FileDone with the error that
//	              stopped the stream
//
// Cancel with the request's id stops a read or write in progress.
const (
	frameFile     byte = 7 // host → agent; payload: FileRequest
	frameData     byte = 8 // file bytes either way; empty: end of the bytes
	frameFileDone byte = 9 // agent → host; payload: FileResult
)

// File operations (FileRequest.Op).
const (
	FileList   = "list"
	FileStat   = "stat"
	FileRead   = "read"
	FileWrite  = "write"
	FileRemove = "remove"
)

// fileChunk is the most file bytes in one Data frame.
const fileChunk = 64 << 10

// FileRequest asks the agent for one file operation.
type FileRequest struct {
	Op string `json:"op"`
	// Home is the directory the paths are relative to.
	Home string `json:"home"`
	// Path is relative to Home (read, write, stat, remove).
	Path string `json:"path,omitempty"`
	// MaxBytes caps a read (the file must not be larger) and a write (the
	// bytes sent must not be more); 0: no cap on a write.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// The page of a list (homefs.ListOptions).
	After []byte `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
	Desc  bool   `json:"desc,omitempty"`
	// Mode is a write's permission bits (0o777 at most; 0: the default).
	Mode uint32 `json:"mode,omitempty"`
}

// FileEntry is one regular file; paths are bytes (JSON strings would
// mangle names that are not UTF-8).
type FileEntry struct {
	Path    []byte `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	// Mode is the permission bits (older agents send none).
	Mode uint32 `json:"mode,omitempty"`
}

// FileResult is the outcome of a file request.
type FileResult struct {
	Error string `json:"error,omitempty"`
	// Code classifies Error: one of the fileCode values.
	Code  string      `json:"code,omitempty"`
	Info  *FileEntry  `json:"info,omitempty"`
	Files []FileEntry `json:"files,omitempty"`
	More  bool        `json:"more,omitempty"`
	Next  []byte      `json:"next,omitempty"`
}

// Error codes of FileResult and the errors they stand for.
var fileCodes = map[string]error{
	"not_found":   homefs.ErrFileNotFound,
	"not_regular": homefs.ErrNotRegular,
	"bad_path":    homefs.ErrBadPath,
	"too_large":   homefs.ErrTooLarge,
	"too_many":    homefs.ErrTooManyFiles,
	"held":        ErrHeld,
}

// fileCode classifies err for FileResult.Code.
func fileCode(err error) string {
	for code, e := range fileCodes {
		if errors.Is(err, e) {
			return code
		}
	}
	return ""
}

// maxErrorText bounds the error text of an agent's FileResult the host
// passes on.
const maxErrorText = 512

// fileError makes the error of a FileResult: the agent's text, bounded and
// quoted when it is not printable UTF-8, wrapping the error of its code.
func fileError(res FileResult) error {
	msg := res.Error
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText] + "..."
	}
	if !utf8.ValidString(msg) || strings.ContainsFunc(msg, func(r rune) bool { return r < ' ' }) {
		msg = fmt.Sprintf("%q", msg)
	}
	if e := fileCodes[res.Code]; e != nil {
		return fmt.Errorf("agent: %s: %w", msg, e)
	}
	return fmt.Errorf("agent: %s", msg)
}
