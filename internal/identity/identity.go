// Package identity decides which container a gateway request runs in
// (SPEC §3.3). It is pure: the gateway extracts the candidate identifiers
// from the request and the replayed conversation, Choose picks one, and the
// sandbox layer resolves the result within the caller's workspace.
//
// The rules, in order:
//
//  1. environment.container_reference.container_id, when sent, names exactly
//     that container: 1–40 letters, digits, '_' or '-', never truncated. A
//     reference outside that is an error, not a fallback, so that commands
//     never run in a container the caller did not name.
//  2. A session identifier: session_id from the body, else the x-session-id
//     header, else prompt_cache_key. Each is used only if it consists of
//     letters, digits, '_' and '-'; one with any other character is ignored
//     as if it had not been sent, and the next source is tried. When it is
//     longer than 20 characters only its last 20 are used, so two long
//     identifiers with the same 20-character ending share a container.
//  3. The most recent container_id found in the replayed conversation
//     (ids that could not name a container are skipped).
//  4. Otherwise a new container for this request.
//
// For example, a request with session_id "user-42/chat" (ignored: it has a
// '/') and x-session-id "conversation-0123456789abcdefghij" (33 characters)
// runs in the container "0123456789abcdefghij".
//
// # Identity and metering
//
//   - `internal/identity.Choose` picks the container of a gateway request
//     (container_reference, session_id / x-session-id / prompt_cache_key, the
//     conversation's last container_id, or new); `internal/metering` is the
//     billing arithmetic (started milliseconds, started micro-dollars, the 30 s
//     minimum for new or woken containers).
package identity

import (
	"errors"
	"fmt"
)

// MaxSessionKey is how many trailing characters of a session identifier
// name its container.
const MaxSessionKey = 20

// MaxReference is the longest container reference.
const MaxReference = 40

// ErrBadReference is returned for a container reference that cannot name a
// container.
var ErrBadReference = errors.New("container_reference.container_id must be 1-40 letters, digits, '_' or '-'")

// Request holds what a request says about its container. Empty strings
// mean "not sent".
type Request struct {
	ContainerReference string // environment.container_reference.container_id
	BodySessionID      string // session_id in the request body
	HeaderSessionID    string // x-session-id header
	PromptCacheKey     string // prompt_cache_key in the request body
	// ConversationContainerIDs are the container_id values of the replayed
	// conversation's earlier tool results, oldest first.
	ConversationContainerIDs []string
}

// Source says which rule chose the container.
type Source string

const (
	FromReference      Source = "container_reference"
	FromBodySession    Source = "session_id"
	FromHeaderSession  Source = "x-session-id"
	FromPromptCacheKey Source = "prompt_cache_key"
	FromConversation   Source = "conversation"
	FromNew            Source = "new"
)

// Choice is the container a request runs in: Key is the id or name that
// the sandbox layer resolves within the caller's workspace (empty when
// Source is FromNew: make a new container). Source lets the caller treat
// the rules differently, e.g. make a session's container on first use.
type Choice struct {
	Key    string
	Source Source
}

// New reports whether the request gets a new container.
func (c Choice) New() bool { return c.Source == FromNew }

// Choose applies the rules of the package comment to r.
func Choose(r Request) (Choice, error) {
	if r.ContainerReference != "" {
		if !ValidReference(r.ContainerReference) {
			return Choice{}, fmt.Errorf("%w (got %d characters: %q)", ErrBadReference, len(r.ContainerReference), clip(r.ContainerReference))
		}
		return Choice{Key: r.ContainerReference, Source: FromReference}, nil
	}
	for _, s := range []struct {
		v   string
		src Source
	}{
		{r.BodySessionID, FromBodySession},
		{r.HeaderSessionID, FromHeaderSession},
		{r.PromptCacheKey, FromPromptCacheKey},
	} {
		if s.v != "" && allowed(s.v) {
			return Choice{Key: SessionKey(s.v), Source: s.src}, nil
		}
	}
	for i := len(r.ConversationContainerIDs) - 1; i >= 0; i-- {
		if id := r.ConversationContainerIDs[i]; ValidReference(id) {
			return Choice{Key: id, Source: FromConversation}, nil
		}
	}
	return Choice{Source: FromNew}, nil
}

// SessionKey returns the container key of a valid session identifier: its
// last MaxSessionKey characters.
func SessionKey(id string) string {
	if len(id) > MaxSessionKey {
		return id[len(id)-MaxSessionKey:]
	}
	return id
}

// ValidReference reports whether s can name a container: 1 to
// MaxReference letters, digits, '_' or '-'.
func ValidReference(s string) bool {
	return len(s) >= 1 && len(s) <= MaxReference && allowed(s)
}

// allowed reports whether s is made only of ASCII letters, digits, '_'
// and '-'. (Only ASCII, so bytes are characters and SessionKey may slice.)
func allowed(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// clip keeps error messages short when a reference is huge.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
