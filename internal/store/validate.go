package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// Limits on what a record may hold, checked by every implementation
// through the Validate methods.
const (
	MaxScopeName = 64
	MaxName      = 256
	MaxText      = 1024
)

// Validate checks that both parts are 1–64 letters, digits, '.', '_' or '-'.
func (s Scope) Validate() error {
	for _, p := range []struct{ what, v string }{{"account", s.Account}, {"workspace", s.Workspace}} {
		if !scopeName(p.v) {
			return fmt.Errorf("%w: %s %q: want 1-%d letters, digits, '.', '_' or '-'", ErrInvalid, p.what, p.v, MaxScopeName)
		}
	}
	return nil
}

func scopeName(s string) bool {
	if len(s) < 1 || len(s) > MaxScopeName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validateNamed checks a named record's scope and its name of 1–MaxName
// bytes; what says which record ("container").
func validateNamed(scope Scope, what, name string) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if len(name) < 1 || len(name) > MaxName {
		return fmt.Errorf("%w: %s name of %d bytes: want 1-%d", ErrInvalid, what, len(name), MaxName)
	}
	return nil
}

// Prepare validates a container about to be created or updated and
// normalises it: times in UTC at millisecond precision, status sleeping
// when empty (a new record has no sandbox yet), CreatedAt now when zero.
func (c *Container) Prepare(now time.Time) error {
	if err := validateNamed(c.Scope, "container", c.Name); err != nil {
		return err
	}
	if len(c.Image) > MaxText {
		return fmt.Errorf("%w: image name of %d bytes", ErrInvalid, len(c.Image))
	}
	if c.Limits.CPUMillis < 0 || c.Limits.MemoryBytes < 0 || c.Limits.Processes < 0 || c.Limits.DiskBytes < 0 {
		return fmt.Errorf("%w: negative limit in %+v", ErrInvalid, c.Limits)
	}
	if len(c.NetworkPolicy) == 0 {
		c.NetworkPolicy = nil
	} else if !json.Valid(c.NetworkPolicy) {
		return fmt.Errorf("%w: network policy is not JSON", ErrInvalid)
	}
	switch c.Status {
	case "":
		c.Status = StatusSleeping
	case StatusRunning, StatusSleeping, StatusExpired:
	default:
		return fmt.Errorf("%w: container status %q", ErrInvalid, c.Status)
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	c.CreatedAt, c.LastActiveAt, c.ExpiresAt = Truncate(c.CreatedAt), Truncate(c.LastActiveAt), Truncate(c.ExpiresAt)
	return nil
}

// Prepare validates and normalises a file record like Container.Prepare.
func (f *File) Prepare(now time.Time) error {
	if err := validateNamed(f.Scope, "file", f.Name); err != nil {
		return err
	}
	if f.Bytes < 0 {
		return fmt.Errorf("%w: file size %d", ErrInvalid, f.Bytes)
	}
	if len(f.SHA256) != 64 || !lowerHex(f.SHA256) {
		return fmt.Errorf("%w: sha256 %q: want 64 lowercase hex digits", ErrInvalid, f.SHA256)
	}
	if len(f.Purpose) > MaxText || len(f.Source) > MaxText {
		return fmt.Errorf("%w: purpose or source too long", ErrInvalid)
	}
	if f.CreatedAt.IsZero() {
		f.CreatedAt = now
	}
	f.CreatedAt = Truncate(f.CreatedAt)
	return nil
}

// Prepare validates and normalises a usage event.
func (e *UsageEvent) Prepare(now time.Time) error {
	if err := e.Scope.Validate(); err != nil {
		return err
	}
	if len(e.ID) > MaxName || len(e.ContainerID) > MaxName || len(e.Kind) > MaxText {
		return fmt.Errorf("%w: usage event field too long", ErrInvalid)
	}
	if e.MeteredMillis < 0 || e.BilledMillis < 0 || e.CostMicroUSD < 0 {
		return fmt.Errorf("%w: negative usage in %+v", ErrInvalid, *e)
	}
	if e.At.IsZero() {
		e.At = now
	}
	e.At = Truncate(e.At)
	return nil
}

// Truncate is t in UTC at millisecond precision, as stores keep it.
func Truncate(t time.Time) time.Time { return FromMillis(Millis(t)) }

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
