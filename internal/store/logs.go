package store

import (
	"context"
	"fmt"
	"time"
)

// Logs are the request logs of the workspaces that turned them on (SPEC
// §6): one record per gateway request, with its prompts, completion and
// commands kept as one JSON document (Body) beside the columns a listing
// filters on. Detections are not copied into a record: they are the
// Guardrails' rows with the same request id, counted here.
type Logs interface {
	// Settings returns the scope's settings, DefaultLogSettings when it
	// has none.
	Settings(ctx context.Context, scope Scope) (LogSettings, error)
	// PutSettings replaces them (validated: ErrInvalid).
	PutSettings(ctx context.Context, scope Scope, s LogSettings) error
	// Record stores l, assigning l.ID (NewID("log")) if empty; recording
	// the same id twice keeps the first.
	Record(ctx context.Context, l RequestLog) (RequestLog, error)
	// List returns one page of the scope's records, newest first, without
	// their Body.
	List(ctx context.Context, scope Scope, f LogFilter) (Page[RequestLog], error)
	// Get returns one record with its Body.
	Get(ctx context.Context, scope Scope, id string) (RequestLog, error)
	// Sweep deletes up to limit records, of any scope, older than their
	// scope's RetentionDays at now; it returns how many it deleted.
	Sweep(ctx context.Context, now time.Time, limit int) (int, error)
}

// LogSettings are a workspace's request-log settings.
type LogSettings struct {
	Enabled        bool
	RetentionDays  int
	MaxRecordBytes int
}

// Bounds of LogSettings.
const (
	MinRecordBytes   = 4 << 10
	MaxRecordBytes   = 16 << 20
	MaxRetentionDays = 3650
)

// DefaultLogSettings: off, 30 days, 256 KiB a record.
var DefaultLogSettings = LogSettings{RetentionDays: 30, MaxRecordBytes: 256 << 10}

// Validate checks the bounds.
func (s LogSettings) Validate() error {
	if s.RetentionDays < 1 || s.RetentionDays > MaxRetentionDays {
		return fmt.Errorf("%w: retention_days %d: want 1-%d", ErrInvalid, s.RetentionDays, MaxRetentionDays)
	}
	if s.MaxRecordBytes < MinRecordBytes || s.MaxRecordBytes > MaxRecordBytes {
		return fmt.Errorf("%w: max_record_bytes %d: want %d-%d", ErrInvalid, s.MaxRecordBytes, MinRecordBytes, MaxRecordBytes)
	}
	return nil
}

// RequestLog is one gateway request's record.
type RequestLog struct {
	ID        string // "log_" + 32 hex
	Scope     Scope
	RequestID string // the id its detections are stored under
	CreatedAt time.Time
	API       string // responses, messages, gemini, chat_completions
	Model     string // provider/model as the client named it
	Status    string // completed, failed, blocked, incomplete
	// HTTPStatus is what the client was answered (499: it went away
	// before any answer).
	HTTPStatus     int
	DurationMillis int64
	ContainerID    string
	InputTokens    int64
	OutputTokens   int64
	CostMicroUSD   int64
	ToolCalls      int64
	Truncated      bool
	UserAgent      string
	// Body is the detail as JSON (input, output, items), at most the
	// workspace's MaxRecordBytes; empty in listings.
	Body string
	// Detections counts the request's stored detections (read only).
	Detections int64
}

// LogFilter selects one page of request logs. Empty fields do not filter.
type LogFilter struct {
	API, Model, ContainerID, Status string
	Since, Until                    time.Time // Since <= CreatedAt < Until
	HasDetections                   *bool
	// After is the last id of the previous page (ErrNotFound when it is
	// not a record of the scope); Limit 1..MaxPageSize.
	After string
	Limit int
}
