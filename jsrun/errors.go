package jsrun

import (
	"errors"
	"fmt"
)

// Code is a typed error code. Every failure of a run is an *Error with one of
// these codes (or, for an uncaught guest error, the guest's own code).
type Code string

// Error codes. They follow the Run SDK's RUN_* names where one exists.
const (
	// CodeUserSourceError is an uncaught error of the guest's own code: a
	// value it threw, a syntax error, a dynamic-code attempt. A string code
	// the guest gave its error is kept in Error.GuestCode, never in Code.
	CodeUserSourceError Code = "RUN_USER_SOURCE_ERROR"
	// CodeGuestError is the old name of CodeUserSourceError.
	//
	// Deprecated: use CodeUserSourceError.
	CodeGuestError = CodeUserSourceError
	// CodeTimeout: the wall-clock limit passed, or the guest awaits something
	// that can never settle (no host call in flight and nothing queued).
	CodeTimeout Code = "RUN_TIMEOUT"
	// CodeAborted: the caller's context was cancelled.
	CodeAborted Code = "RUN_ABORTED"
	// CodeSourceTooLarge: the source is over Limits.MaxSourceBytes.
	CodeSourceTooLarge Code = "RUN_SOURCE_TOO_LARGE"
	// CodeResultTooLarge: the serialized result is over Limits.MaxResultBytes.
	CodeResultTooLarge Code = "RUN_RESULT_TOO_LARGE"
	// CodeMemoryLimit: the guest ran out of its memory limit.
	CodeMemoryLimit Code = "RUN_MEMORY_LIMIT"
	// CodeStackOverflow: the guest went past its stack limit.
	CodeStackOverflow Code = "RUN_STACK_OVERFLOW"
	// CodeBridgeLimit: too many host calls, too many in flight, or host-call
	// arguments, results, payloads or resolutions over their byte limits.
	CodeBridgeLimit Code = "RUN_BRIDGE_LIMIT"
	// CodeHostFunction: a host function failed (message hidden unless the host
	// returned a *UserError), or the guest called an unknown function.
	CodeHostFunction Code = "RUN_HOST_FUNCTION_ERROR"
	// CodeSerialization: a value could not be serialized (function, symbol,
	// class instance, promise, ...); the message names its path.
	CodeSerialization Code = "RUN_SERIALIZATION_ERROR"
	// CodeProtocol: bad, tampered, expired or mismatched continuation; wrong
	// resolutions; replay divergence.
	CodeProtocol Code = "RUN_PROTOCOL_ERROR"
	// CodeContinuationUsed: the continuation was resumed before (each token
	// resumes once); Details["first_used_at"] is when, in RFC 3339 UTC.
	CodeContinuationUsed Code = "RUN_CONTINUATION_USED"
	// CodeConcurrencyLimit: the runner is at Config.MaxConcurrentRuns.
	CodeConcurrencyLimit Code = "RUN_CONCURRENCY_LIMIT"
	// CodeDetachedRequest: the guest returned while host calls were in flight.
	CodeDetachedRequest Code = "RUN_DETACHED_BRIDGE_REQUEST"
	// CodeContinuationTooLarge: the continuation would exceed
	// Limits.MaxContinuationBytes.
	CodeContinuationTooLarge Code = "RUN_CONTINUATION_TOO_LARGE"
	// CodeInvalidInput: the input itself is invalid (bad names, bad limits).
	CodeInvalidInput Code = "RUN_INVALID_INPUT"
	// CodeInternal: a failure of the engine itself.
	CodeInternal Code = "RUN_INTERNAL_ERROR"
)

// Error is the error every failed run returns. Guest reports whether it is an
// uncaught error of the guest program (Name, Message and a Stack mapped to the
// source's lines come from the guest); otherwise it is a runtime failure.
type Error struct {
	Code    Code
	Name    string
	Message string
	Stack   string
	Guest   bool
	// GuestCode is the string `code` property of an uncaught error the
	// guest made itself (Code is then RUN_USER_SOURCE_ERROR), exactly as the
	// guest set it: it names the guest's own condition and is never taken
	// for a runtime code, even when it looks like one ("RUN_TIMEOUT").
	GuestCode string
	// Details holds machine-readable extras, e.g. {"limit": "maxBridgeRequests"}.
	Details map[string]any
	// Console is what the guest logged before the failure (as
	// Result.Console), when it got that far.
	Console          string
	ConsoleTruncated bool
	cause            error
}

func (e *Error) Error() string {
	if e.Guest {
		return fmt.Sprintf("jsrun: %s: %s: %s", e.Code, e.Name, e.Message)
	}
	return fmt.Sprintf("jsrun: %s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.cause }

// ErrorCode returns the code of err if it is (or wraps) an *Error, else "".
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Name: "RunError", Message: fmt.Sprintf(format, args...)}
}

func limitError(code Code, limit string, format string, args ...any) *Error {
	e := newError(code, format, args...)
	e.Details = map[string]any{"limit": limit}
	return e
}

// UserError is a deliberate, user-facing host-function failure: the guest
// sees its name, message and code. Any other error a host function returns
// reaches the guest as Error{message: "Host function failed.", code:
// RUN_HOST_FUNCTION_ERROR}, so internal details never leak into the guest.
type UserError struct {
	Name    string // default "Error"
	Message string
	Code    string // default "RUN_HOST_FUNCTION_ERROR"
}

func (e *UserError) Error() string { return e.Message }

// NewUserError returns a user-facing host-function error.
func NewUserError(code, message string) *UserError {
	return &UserError{Name: "Error", Message: message, Code: code}
}
