package jsrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Runner.
type Config struct {
	// Secret signs continuation tokens: at least 32 bytes. Only needed once
	// a run interrupts or resumes.
	Secret []byte
	// VerificationSecrets are also accepted when verifying (key rotation:
	// put the retired primary here).
	VerificationSecrets [][]byte
	// Audience binds tokens to this runner's purpose (1-512 bytes, default
	// "jsrun"): a token minted for one audience fails in another.
	Audience string
	// MaxAge is a token's lifetime (default 1 h); ClockSkew the tolerance of
	// the expiry and issue-time checks (default 60 s).
	MaxAge    time.Duration
	ClockSkew time.Duration
	// Store makes continuations single-use (see ContinuationStore): a
	// token resumes at most once. It is required together with Secret:
	// choose NewMemoryStore (claims die with the process) or a durable
	// store from jsrun/jsrunsql explicitly.
	Store ContinuationStore
	// Codec turns signed continuations into the tokens callers hold and
	// back (see ContinuationCodec): e.g. NewEncryptedCodec, or a store that
	// hands out references. nil: the token is the signed continuation.
	Codec ContinuationCodec
	// Limits are the operator's limits (zero fields: DefaultLimits). A run's
	// Input.Limits can lower them, never raise them.
	Limits Limits
	// MaxConcurrentRuns caps runs in progress; 0 means no cap. A run over
	// the cap fails at once with RUN_CONCURRENCY_LIMIT (no queue).
	MaxConcurrentRuns int
	// Prewarm keeps this many hardened, never-used contexts ready, prepared
	// by a background goroutine, so a run skips the ~1.5 ms of hardening
	// when one is ready (it never waits for one). Every run still gets a
	// context of its own. The goroutine also closes used contexts, and lets
	// runs in progress finish (up to 2 ms) before each piece of background
	// work. 0 (the default) disables it; call Close to stop it.
	Prewarm int
	// OrderedObjects makes plain objects reach Go (host-function arguments,
	// results, payloads) as *Object, keys in the guest's order, instead of
	// map[string]any.
	OrderedObjects bool
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Logger receives host-function failures whose message is hidden from
	// the guest; default slog.Default().
	Logger *slog.Logger
}

// Input is one invocation.
type Input struct {
	// Source is the body of an async function: top-level await and return.
	Source string
	// Language is the language of Source: JavaScript ("" or
	// LanguageJavaScript) or LanguageTypeScript (types stripped, error
	// positions in the TypeScript).
	Language Language
	// HostFunctions lists the host functions by namespace: the guest calls
	// HostFunctions["tools"]["sum"] as tools.sum(...).
	HostFunctions map[string]Namespace
	// Limits lower the runner's limits per field (zero: the runner's). A
	// value above the runner's limit gets the runner's limit.
	Limits Limits
	// Continuation and Resolutions resume an interrupted run: the same
	// Source, host-function names and Context must be given again.
	Continuation string
	Resolutions  []Resolution
	// Context is bound into the continuation (any serializable value, e.g.
	// the tenant and user): a resume with another context fails.
	Context any
	// SourceType is SourceFunctionBody or SourceModule; "" means a module
	// when ModuleLoader is set (as in the Run SDK), else a function body.
	SourceType SourceType
	// ModuleLoader serves the modules the run imports (static imports of a
	// module source, import() from either). nil: every import fails.
	ModuleLoader ModuleLoader
}

// Resolution answers one pending interruption.
type Resolution struct {
	InterruptionID string
	Value          any
}

// Status of a Result.
type Status string

// Result statuses.
const (
	StatusCompleted   Status = "completed"
	StatusInterrupted Status = "interrupted"
)

// Result of a run that did not fail.
type Result struct {
	Status Status
	// Value is the completed value (see values.go for the Go types).
	Value any
	// Interruptions and Continuation are set when Status is interrupted.
	Interruptions []Interruption
	Continuation  string
	// ContinuationExpiresAt is when Continuation stops verifying.
	ContinuationExpiresAt time.Time
	// Console is the captured console output (console.warn/error lines are
	// prefixed "[stderr] "), capped at Limits.ConsoleBytes.
	Console          string
	ConsoleTruncated bool
}

// Interruption is one paused host call.
type Interruption struct {
	ID               string
	HostFunctionName string
	Arguments        []any
	Payload          any
}

// Runner runs guest JavaScript. It is safe for concurrent use.
type Runner struct {
	cfg         Config
	limits      Limits
	codec       *codec
	active      atomic.Int64
	invocations atomic.Int64
	log         *slog.Logger

	// running counts runs in progress: the prewarm goroutine lets them
	// finish before it spends a core on background work.
	running   atomic.Int64
	pool      chan *hardened
	retired   chan *hardened
	retireMu  sync.Mutex
	closed    bool
	stop      chan struct{}
	poolDone  chan struct{}
	closeOnce sync.Once
}

// Limits are the runner's limits: Config.Limits with the defaults filled
// in, the most any run gets (a request may only lower them).
func (r *Runner) Limits() Limits { return r.limits }

// NewRunner validates cfg and returns a Runner.
func NewRunner(cfg Config) (*Runner, error) {
	if cfg.Secret != nil && len(cfg.Secret) < minSecretBytes {
		return nil, fmt.Errorf("jsrun: continuation secret must be at least %d bytes, got %d", minSecretBytes, len(cfg.Secret))
	}
	for i, s := range cfg.VerificationSecrets {
		if len(s) < minSecretBytes {
			return nil, fmt.Errorf("jsrun: verification secret %d must be at least %d bytes", i, minSecretBytes)
		}
	}
	if cfg.Secret != nil && cfg.Store == nil {
		return nil, fmt.Errorf("jsrun: a continuation secret needs a Config.Store so that each continuation resumes at most once (jsrun.NewMemoryStore() within one process, jsrun/jsrunsql to survive restarts)")
	}
	if cfg.Audience == "" {
		cfg.Audience = defaultAudience
	}
	if len(cfg.Audience) > 512 {
		return nil, fmt.Errorf("jsrun: audience must be 1-512 bytes")
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = defaultMaxAge
	}
	if cfg.ClockSkew <= 0 {
		cfg.ClockSkew = defaultClockSkew
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Limits.validate(); err != nil {
		return nil, err
	}
	limits := cfg.Limits.merge(DefaultLimits)
	r := &Runner{
		cfg:    cfg,
		limits: limits,
		log:    cfg.Logger,
		codec: &codec{secret: cfg.Secret, verify: cfg.VerificationSecrets, maxAge: cfg.MaxAge,
			skew: cfg.ClockSkew, now: cfg.Now, maxTokens: limits.ContinuationBytes},
	}
	if cfg.Prewarm > 0 {
		r.pool = make(chan *hardened, cfg.Prewarm)
		r.retired = make(chan *hardened, retiredQueue)
		r.stop = make(chan struct{})
		r.poolDone = make(chan struct{})
		go r.prewarm()
	}
	return r, nil
}

var (
	defaultRunnerOnce sync.Once
	defaultRunner     *Runner
	defaultRunnerErr  error
)

// Run runs in with a process-wide default Runner whose continuation secret
// comes from the SHELLGATE_CONTINUATION_SECRET environment variable (needed
// only once a run interrupts or resumes). Calling it opts in to an in-memory
// single-use store: each continuation resumes at most once in this process,
// but the process forgets its claims when it exits. Build a Runner with a
// jsrun/jsrunsql store when tokens can outlive the process.
func Run(ctx context.Context, in Input) (*Result, error) {
	defaultRunnerOnce.Do(func() {
		cfg := Config{}
		if s := os.Getenv("SHELLGATE_CONTINUATION_SECRET"); s != "" {
			cfg.Secret = []byte(s)
			cfg.Store = NewMemoryStore()
		}
		defaultRunner, defaultRunnerErr = NewRunner(cfg)
	})
	if defaultRunnerErr != nil {
		return nil, newError(CodeInvalidInput, "%v", defaultRunnerErr)
	}
	return defaultRunner.Run(ctx, in)
}

var reservedGlobals = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`AggregateError Array ArrayBuffer Atomics BigInt BigInt64Array BigUint64Array
		Boolean DataView Date Error EvalError FinalizationRegistry Float16Array Float32Array Float64Array Function
		Infinity Int16Array Int32Array Int8Array InternalError Iterator JSON Map Math NaN Number Object Promise Proxy
		RangeError ReferenceError Reflect RegExp Set SharedArrayBuffer String Symbol SyntaxError TypeError URIError
		Uint16Array Uint32Array Uint8Array Uint8ClampedArray WeakMap WeakRef WeakSet decodeURI decodeURIComponent
		encodeURI encodeURIComponent escape eval globalThis isFinite isNaN parseFloat parseInt undefined unescape
		console print require module exports process import fetch setTimeout setInterval queueMicrotask
		structuredClone atob btoa crypto performance arguments`) {
		reservedGlobals[n] = true
	}
}

var identRe = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// bindingNames validates the host functions and returns their sorted
// qualified names.
func bindingNames(hf map[string]Namespace) ([]string, error) {
	var names []string
	for ns, fns := range hf {
		if !identRe.MatchString(ns) || reservedGlobals[ns] || strings.HasPrefix(ns, "__") || strings.HasPrefix(ns, "jsrun$") {
			return nil, newError(CodeInvalidInput, "invalid host namespace name %q", ns)
		}
		for fn, h := range fns {
			switch fn {
			case "__proto__", "constructor", "prototype", "then", "catch", "finally":
				return nil, newError(CodeInvalidInput, "invalid host function name %s.%s", ns, fn)
			}
			if !identRe.MatchString(fn) {
				return nil, newError(CodeInvalidInput, "invalid host function name %s.%q", ns, fn)
			}
			if h.Fn == nil {
				return nil, newError(CodeInvalidInput, "host function %s.%s is nil", ns, fn)
			}
			if h.Synchronous {
				// A function that changes kind must not resume a token.
				names = append(names, ns+"."+fn+" (synchronous)")
			} else {
				names = append(names, ns+"."+fn)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// Run runs one invocation: a fresh run, or a resume when in.Continuation is
// set. A failure is an *Error.
func (r *Runner) Run(ctx context.Context, in Input) (*Result, error) {
	if err := in.Limits.validate(); err != nil {
		return nil, err
	}
	r.running.Add(1)
	defer r.running.Add(-1)
	lim := in.Limits.lower(r.limits)
	if len(in.Source) > lim.SourceBytes {
		return nil, limitError(CodeSourceTooLarge, "maxSourceBytes", "source is %d bytes, over the limit of %d", len(in.Source), lim.SourceBytes)
	}
	if !in.Language.valid() {
		return nil, newError(CodeInvalidInput, "unknown language %q (javascript or typescript)", in.Language)
	}
	if !in.SourceType.valid() {
		return nil, newError(CodeInvalidInput, "unknown source type %q (function-body or module)", in.SourceType)
	}
	module := in.sourceType() == SourceModule
	names, err := bindingNames(in.HostFunctions)
	if err != nil {
		return nil, err
	}
	var ts *tsProgram
	if in.Language == LanguageTypeScript {
		if module {
			ts, err = typeScriptModule(ctx, in.Source, lim.Timeout)
		} else {
			ts, err = typeScriptProgram(ctx, in.Source, lim.Timeout)
		}
		if err != nil {
			return nil, err
		}
	}
	ctxWire, err := encodeWire(in.Context, "context")
	if err != nil {
		return nil, newError(CodeInvalidInput, "continuation context: %v", err)
	}
	if n := r.cfg.MaxConcurrentRuns; n > 0 {
		if r.active.Add(1) > int64(n) {
			r.active.Add(-1)
			return nil, limitError(CodeConcurrencyLimit, "maxConcurrentRuns", "%d runs are already in progress", n)
		}
		defer r.active.Add(-1)
	}
	scope := scopeHash(r.cfg.Audience, names, ctxWire, in.Language, in.Source, moduleScope(&in))
	codec := *r.codec
	codec.maxTokens = lim.ContinuationBytes

	var st *contState
	resolutions := map[string]*resolved{}
	var claimed string // the token ID this resume claimed in the store
	if in.Continuation != "" {
		if r.cfg.Store == nil {
			return nil, newError(CodeInvalidInput, "resuming needs a continuation secret and a Config.Store")
		}
		signed, err := r.decodeToken(ctx, in.Continuation, lim.ContinuationBytes)
		if err != nil {
			return nil, err
		}
		env, err := codec.open(signed)
		if err == nil && env.State.ScopeHash != scope {
			err = protocolError("bound to another source, host functions, audience or context")
		}
		if err == nil {
			st = &env.State
			err = checkResolutions(st, in.Resolutions, lim, resolutions)
		}
		if err != nil {
			return nil, err
		}
		// Everything above is checked without an effect; from here on the
		// resume may call host functions, so the token is claimed first.
		if err := r.claim(ctx, env); err != nil {
			return nil, err
		}
		claimed = env.Nonce
	} else {
		if len(in.Resolutions) > 0 {
			return nil, newError(CodeProtocol, "resolutions given without a continuation")
		}
		st = &contState{
			Version: stateVersion, Runtime: stateRuntime, Serde: serdeName,
			LogicalRunID: randomHex(16), ScopeHash: scope,
			DateNowMs: r.cfg.Now().UnixMilli(), RandomSeed: randomHex(16),
		}
	}

	inv := &invocation{
		r: r, in: in, lim: lim, st: st, resolutions: resolutions, ts: ts,
		id:   fmt.Sprintf("run-%d", r.invocations.Add(1)),
		mods: moduleState{module: module},
	}
	res, err := inv.run(ctx)
	if err != nil {
		if claimed != "" && inv.liveCalls == 0 {
			// No host function ran: the token may be tried again.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if rerr := r.cfg.Store.Release(rctx, claimed); rerr != nil {
				r.log.Warn("jsrun: releasing a continuation claim", "err", rerr)
			}
			cancel()
		}
		return nil, err
	}
	if res.Status == StatusInterrupted {
		next := *st
		next.Ledger = inv.newLedger
		next.Modules = inv.mods.ops
		sc, err := codec.seal(&next)
		if err != nil {
			return nil, err
		}
		tok, err := r.encodeToken(ctx, sc)
		if err != nil {
			return nil, err
		}
		res.Continuation, res.ContinuationExpiresAt = tok, sc.ExpiresAt
	}
	return res, nil
}

// claim records the first use of a verified token in the store. A token
// claimed before fails with CodeContinuationUsed naming the first use; a
// store failure fails the resume (closed: nothing runs unclaimed).
func (r *Runner) claim(ctx context.Context, env *envelope) error {
	// The claim must outlive every instant at which the token verifies.
	until := time.UnixMilli(env.ExpiresAtMs).Add(r.cfg.ClockSkew)
	err := r.cfg.Store.Claim(ctx, env.Nonce, r.cfg.Now(), until)
	if err == nil {
		return nil
	}
	var used *UsedError
	if errors.As(err, &used) {
		e := newError(CodeContinuationUsed, "continuation already used: it was first resumed at %s, and a continuation resumes only once", formatUse(used.FirstUse))
		e.Details = map[string]any{"first_used_at": formatUse(used.FirstUse)}
		e.cause = err
		return e
	}
	if ctx.Err() != nil {
		return &Error{Code: CodeAborted, Name: "RunError", Message: "run aborted by the caller", cause: err}
	}
	return &Error{Code: CodeInternal, Name: "RunError", Message: "continuation store: " + err.Error(), cause: err}
}

type resolved struct {
	value any
	wire  string
}

// checkResolutions validates resolutions against the pending interruptions:
// a non-empty subset, each id once, every value serializable and in bounds.
func checkResolutions(st *contState, rs []Resolution, lim Limits, out map[string]*resolved) error {
	pending := map[string]bool{}
	for _, e := range st.Ledger {
		if e.Status == statusInterrupted {
			pending[e.InterruptionID] = true
		}
	}
	if len(pending) == 0 {
		return newError(CodeProtocol, "the continuation has no pending interruption")
	}
	if len(rs) == 0 {
		return newError(CodeProtocol, "a resume needs at least one resolution")
	}
	for _, res := range rs {
		if !pending[res.InterruptionID] {
			return newError(CodeProtocol, "resolution for unknown interruption %q", res.InterruptionID)
		}
		if out[res.InterruptionID] != nil {
			return newError(CodeProtocol, "interruption %q resolved twice", res.InterruptionID)
		}
		wire, err := encodeWire(res.Value, "resolution")
		if err != nil {
			return err
		}
		if len(wire) > lim.HostOutputBytes {
			return limitError(CodeBridgeLimit, "maxHostFunctionOutputBytes", "resolution of %s is %d bytes, over the limit of %d", res.InterruptionID, len(wire), lim.HostOutputBytes)
		}
		out[res.InterruptionID] = &resolved{value: res.Value, wire: wire}
	}
	return nil
}

// hostFailure maps a host function's error to what the guest sees.
func (r *Runner) hostFailure(name string, err error) *ledgerError {
	var ue *UserError
	if errors.As(err, &ue) {
		le := &ledgerError{Name: ue.Name, Message: ue.Message, Code: ue.Code}
		if le.Name == "" {
			le.Name = "Error"
		}
		if le.Code == "" {
			le.Code = string(CodeHostFunction)
		}
		return le
	}
	r.log.Warn("jsrun: host function failed", "function", name, "err", err)
	return &ledgerError{Name: "Error", Message: "Host function failed.", Code: string(CodeHostFunction)}
}
