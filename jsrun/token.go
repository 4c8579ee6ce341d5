package jsrun

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Continuation tokens are signed, not encrypted: anyone holding one can read
// the ledger (host-call arguments and results). A token is
//
//	base64url(canonicalJSON(envelope)) "." base64url(HMAC-SHA256(secret, tokenDomain + body))
//
// and is bound, through the state's scope hash, to the audience, the sorted
// host-function names, the caller's continuation context and the SHA-256 of
// the source. Verification checks size, shape, the MAC against the primary
// and every verification secret (constant time), canonical encoding, exact key
// sets, expiry with bounded clock skew, and the scope, before any host effect.

const (
	tokenDomain      = "jsrun.continuation.v1\x00"
	tokenAlgorithm   = "HS256"
	tokenFormat      = "jsrun-continuation"
	tokenVersion     = 1
	stateVersion     = 1
	stateRuntime     = "jsrun-replay-v1"
	minSecretBytes   = 32
	defaultAudience  = "jsrun"
	defaultMaxAge    = time.Hour
	defaultClockSkew = 60 * time.Second
)

type envelope struct {
	Algorithm   string    `json:"algorithm"`
	Format      string    `json:"format"`
	Version     int       `json:"version"`
	IssuedAtMs  int64     `json:"issuedAtMs"`
	ExpiresAtMs int64     `json:"expiresAtMs"`
	Nonce       string    `json:"nonce"`
	State       contState `json:"state"`
}

type contState struct {
	Version      int           `json:"version"`
	Runtime      string        `json:"runtime"`
	Serde        string        `json:"serde"`
	LogicalRunID string        `json:"logicalRunId"`
	ScopeHash    string        `json:"scopeHash"`
	DateNowMs    int64         `json:"dateNowMs"`
	RandomSeed   string        `json:"randomSeed"`
	Ledger       []ledgerEntry `json:"ledger"`
	// Modules records the module loader's requests (see modules.go).
	Modules []moduleOp `json:"modules,omitempty"`
}

// ledgerEntry records one host call by request index.
type ledgerEntry struct {
	Name   string `json:"name"`
	Args   string `json:"args"`
	Status string `json:"status"` // fulfilled | rejected | interrupted
	// SettledOrder is the position of this call's answer in the sequence in
	// which answers were released to the guest (-1 while interrupted).
	SettledOrder   int          `json:"settledOrder"`
	DateNowMs      int64        `json:"dateNowMs"`
	Value          string       `json:"value"`
	Error          *ledgerError `json:"error"`
	InterruptionID string       `json:"interruptionId"`
	Payload        string       `json:"payload"`
	// Sync marks a synchronous host function's call (never interrupted;
	// its settlement order is when it returned to the guest).
	Sync bool `json:"sync,omitempty"`
}

type ledgerError struct {
	Name    string `json:"name"`
	Message string `json:"message"`
	Code    string `json:"code"`
}

const (
	statusFulfilled   = "fulfilled"
	statusRejected    = "rejected"
	statusInterrupted = "interrupted"
)

// ContinuationStore makes continuations single-use: before a resume may have
// any effect, the runner claims the token's ID (the random nonce inside the
// signed envelope, 32 hex characters) in the store, and only the first claim
// wins. Only tokens that verified are claimed, so a store never holds
// anything an attacker made up. A claim needs to be kept only while its token
// could still verify: until expiresAt (the token's expiry plus the clock
// skew); stores delete older claims by themselves.
//
// Claim records the first use of id at time at and returns nil, or, when id
// was claimed before, a *UsedError carrying the time of that first use.
// Concurrent claims of one id (from any number of goroutines or processes
// sharing the store) must let exactly one succeed. Release forgets a claim:
// the runner calls it only when the resume failed before any host function
// ran, so the token may be tried again.
//
// NewMemoryStore keeps claims in this process; jsrun/jsrunsql keeps them in
// SQLite (or another SQL database) so that they survive restarts and are
// shared between processes.
type ContinuationStore interface {
	Claim(ctx context.Context, id string, at, expiresAt time.Time) error
	Release(ctx context.Context, id string) error
}

// ErrContinuationUsed is what a *UsedError matches with errors.Is.
var ErrContinuationUsed = errors.New("jsrun: continuation already used")

// UsedError reports that a continuation was claimed before: FirstUse is when.
type UsedError struct {
	FirstUse time.Time
}

func (e *UsedError) Error() string {
	return "jsrun: continuation already used: first resumed at " + formatUse(e.FirstUse)
}

// Is makes errors.Is(err, ErrContinuationUsed) true.
func (e *UsedError) Is(target error) bool { return target == ErrContinuationUsed }

func formatUse(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// MemoryStore is an in-process ContinuationStore. Its claims die with the
// process: a token issued before a restart can be resumed once more after
// it. Use it in tests and in programs whose tokens never outlive the
// process; servers and the CLI use jsrun/jsrunsql.
type MemoryStore struct {
	mu        sync.Mutex
	claims    map[string]memClaim
	lastSweep time.Time
}

type memClaim struct{ at, expires time.Time }

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{claims: map[string]memClaim{}}
}

// sweepEvery bounds how often a store deletes expired claims.
const sweepEvery = time.Minute

// Claim records the first use of id.
func (s *MemoryStore) Claim(_ context.Context, id string, at, expiresAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at.Sub(s.lastSweep) >= sweepEvery || at.Before(s.lastSweep) {
		for k, c := range s.claims {
			if at.After(c.expires) {
				delete(s.claims, k)
			}
		}
		s.lastSweep = at
	}
	if c, ok := s.claims[id]; ok {
		return &UsedError{FirstUse: c.at}
	}
	s.claims[id] = memClaim{at: at, expires: expiresAt}
	return nil
}

// Release forgets the claim of id.
func (s *MemoryStore) Release(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, id)
	return nil
}

// Len returns the number of claims held (expired ones included until the
// next sweep).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.claims)
}

// codec signs and verifies tokens.
type codec struct {
	secret    []byte
	verify    [][]byte
	maxAge    time.Duration
	skew      time.Duration
	now       func() time.Time
	maxTokens int
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func (c *codec) mac(secret []byte, body string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(tokenDomain))
	h.Write([]byte(body))
	return h.Sum(nil)
}

func canonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func (c *codec) encode(st *contState) (string, time.Time, error) {
	sc, err := c.seal(st)
	return sc.Signed, sc.ExpiresAt, err
}

// seal signs st into a new continuation.
func (c *codec) seal(st *contState) (SealedContinuation, error) {
	if len(c.secret) < minSecretBytes {
		return SealedContinuation{}, newError(CodeInvalidInput, "a continuation secret of at least %d bytes is needed to interrupt a run", minSecretBytes)
	}
	now := c.now()
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	env := envelope{
		Algorithm: tokenAlgorithm, Format: tokenFormat, Version: tokenVersion,
		IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(c.maxAge).UnixMilli(),
		Nonce: hex.EncodeToString(nonce), State: *st,
	}
	body, err := canonicalJSON(env)
	if err != nil {
		return SealedContinuation{}, newError(CodeInternal, "encoding continuation: %v", err)
	}
	b := b64(body)
	tok := b + "." + b64(c.mac(c.secret, b))
	if len(tok) > c.maxTokens {
		return SealedContinuation{}, limitError(CodeContinuationTooLarge, "maxContinuationBytes", "continuation is %d bytes, over the limit of %d", len(tok), c.maxTokens)
	}
	return SealedContinuation{Signed: tok, ID: env.Nonce, ExpiresAt: time.UnixMilli(env.ExpiresAtMs)}, nil
}

func protocolError(format string, args ...any) *Error {
	return newError(CodeProtocol, "invalid continuation: "+format, args...)
}

// decode verifies a token and returns its state. It never calls a host
// function.
func (c *codec) decode(tok string) (*contState, error) {
	env, err := c.open(tok)
	if err != nil {
		return nil, err
	}
	return &env.State, nil
}

// open verifies a token and returns its envelope. It never calls a host
// function.
func (c *codec) open(tok string) (*envelope, error) {
	if len(tok) > c.maxTokens {
		return nil, protocolError("%d bytes, over the limit of %d", len(tok), c.maxTokens)
	}
	if len(c.secret) < minSecretBytes {
		return nil, newError(CodeInvalidInput, "a continuation secret of at least %d bytes is needed to resume a run", minSecretBytes)
	}
	body, sig, ok := strings.Cut(tok, ".")
	if !ok || body == "" || strings.Contains(sig, ".") {
		return nil, protocolError("malformed token")
	}
	mac, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || len(mac) != sha256.Size {
		return nil, protocolError("malformed signature")
	}
	valid := false
	for _, s := range append([][]byte{c.secret}, c.verify...) {
		if len(s) >= minSecretBytes && hmac.Equal(mac, c.mac(s, body)) {
			valid = true
		}
	}
	if !valid {
		return nil, protocolError("signature does not verify")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(body)
	if err != nil {
		return nil, protocolError("malformed body")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var env envelope
	if err := dec.Decode(&env); err != nil || dec.More() {
		return nil, protocolError("malformed envelope")
	}
	canon, err := canonicalJSON(env)
	if err != nil || !bytes.Equal(canon, raw) {
		return nil, protocolError("envelope is not canonical")
	}
	if env.Algorithm != tokenAlgorithm || env.Format != tokenFormat || env.Version != tokenVersion {
		return nil, protocolError("unsupported format")
	}
	now := c.now().UnixMilli()
	skew := c.skew.Milliseconds()
	if env.IssuedAtMs > now+skew {
		return nil, protocolError("issued in the future")
	}
	if now > env.ExpiresAtMs+skew {
		return nil, protocolError("expired")
	}
	if env.ExpiresAtMs-env.IssuedAtMs > c.maxAge.Milliseconds() || env.ExpiresAtMs < env.IssuedAtMs {
		return nil, protocolError("lifetime longer than allowed")
	}
	if !isHex(env.Nonce, 32) {
		return nil, protocolError("bad nonce")
	}
	st := &env.State
	if st.Version != stateVersion || st.Runtime != stateRuntime || (st.Serde != serdeName && st.Serde != serdeV1) {
		return nil, protocolError("unsupported state version")
	}
	if err := validateState(st); err != nil {
		return nil, err
	}
	return &env, nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// validateState checks a verified state's internal consistency, so that a
// validly signed but odd state still cannot confuse the replay.
func validateState(st *contState) error {
	if !isHex(st.LogicalRunID, 32) || !isHex(st.RandomSeed, 32) || !isHex(st.ScopeHash, 64) {
		return protocolError("bad identifiers")
	}
	orders := map[int]bool{}
	for i, e := range st.Ledger {
		switch e.Status {
		case statusFulfilled, statusRejected:
			if e.SettledOrder < 0 || e.SettledOrder >= len(st.Ledger) || orders[e.SettledOrder] {
				return protocolError("ledger entry %d has a bad settlement order", i+1)
			}
			orders[e.SettledOrder] = true
			if (e.Status == statusRejected) != (e.Error != nil) || e.InterruptionID != "" || e.Payload != "" {
				return protocolError("ledger entry %d is inconsistent", i+1)
			}
		case statusInterrupted:
			if e.Sync || e.SettledOrder != -1 || e.Error != nil || e.Value != "" || e.InterruptionID != interruptionID(i+1) {
				return protocolError("ledger entry %d is inconsistent", i+1)
			}
		default:
			return protocolError("ledger entry %d has an unknown status", i+1)
		}
	}
	for i := range len(orders) {
		if !orders[i] {
			return protocolError("ledger settlement orders are not contiguous")
		}
	}
	return nil
}

func interruptionID(requestIndex int) string { return fmt.Sprintf("interrupt-%d", requestIndex) }

// scopeHash binds a continuation to everything a resume must repeat.
func scopeHash(audience string, names []string, contextWire string, lang Language, source string, modules string) string {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	srcSum := sha256.Sum256([]byte(source))
	if lang == LanguageJavaScript {
		lang = "" // the same scope as before languages existed
	}
	b, _ := canonicalJSON(struct {
		Audience string   `json:"audience"`
		Names    []string `json:"bindingManifest"`
		Context  string   `json:"continuationContext"`
		Source   string   `json:"sourceSha256"`
		Language Language `json:"language,omitempty"`
		Modules  string   `json:"modules,omitempty"`
	}{audience, sorted, contextWire, hex.EncodeToString(srcSum[:]), lang, modules})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
