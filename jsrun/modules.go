package jsrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"modernc.org/quickjs"
)

// ES modules. A run with Input.ModuleLoader can import modules the host
// serves: statically from a module source (SourceType "module"), and
// dynamically (import()) from either kind of source. The engine asks for
// them through modernc.org/quickjs's VM.SetModuleLoader (QuickJS's
// JS_SetModuleLoaderFunc2): the callbacks run on the loop goroutine, inside
// the VM call that imports, and call the host's loader on a goroutine of
// its own, so a loader that ignores its context still cannot hold the run
// past its deadline.
//
// The entry of a module run is itself served by these callbacks under the
// name "<entry>" (the Run SDK's name for it): the run evaluates
// `await import("<entry>")`, so a load or link failure reaches the guest's
// outcome like any other error, and modules export what they like (the
// completed value of a module run is undefined, as in the Run SDK).
//
// Every call of the host's Normalize and Load takes the next module request
// index and is recorded in the continuation (normalize: specifier,
// importer and the name it returned; load: the name and the SHA-256 of the
// source). A resume answers Normalize from that record and calls Load again,
// and fails with RUN_PROTOCOL_ERROR if a module's source is not the one the
// continuation was made with: a loader that now serves other code never
// runs it. Module sources themselves are not kept in the token.

// ModuleLoader serves the modules a run imports. Both methods are called on
// a goroutine of their own, with a context that ends with the run (its
// deadline or the caller's cancellation). An error is what the guest's
// import fails with (a TypeError, "module load failed: …"): the message of
// a *UserError is shown to the guest, any other error is logged and the
// guest sees only which import failed.
type ModuleLoader interface {
	// Normalize resolves specifier, as written in the importer's source, to
	// the name of a module. importer is the name of the importing module,
	// EntryModule for the run's own source. Names beginning with "<" are
	// the runtime's and cannot be returned. Within one run a (specifier,
	// importer) pair is resolved once.
	Normalize(ctx context.Context, specifier, importer string) (string, error)
	// Load returns the module a normalized name names. The engine loads
	// each name once per run.
	Load(ctx context.Context, name string) (Module, error)
}

// Module is one module's source.
type Module struct {
	Source string
	// Language is JavaScript ("") or TypeScript (types stripped as for
	// Input.Source).
	Language Language
}

// SourceType is how Input.Source is evaluated.
type SourceType string

// Source types.
const (
	// SourceFunctionBody: the body of an async function (top-level await
	// and return; the returned value is the result). The default without a
	// module loader.
	SourceFunctionBody SourceType = "function-body"
	// SourceModule: an ES module (static imports, exports, top-level
	// await; no return). A completed module run has the value undefined.
	// The default when Input.ModuleLoader is set.
	SourceModule SourceType = "module"
)

// EntryModule is the importer name of the run's own source.
const EntryModule = "<entry>"

// evalFileName is the file name modernc's Eval gives every script.
const evalFileName = "<eval>"

// moduleProgram is the function a module run evaluates in place of a body.
const moduleProgram = `(async function jsrun$main() { await import("` + EntryModule + `"); })`

func (t SourceType) valid() bool {
	return t == "" || t == SourceFunctionBody || t == SourceModule
}

// sourceType is the effective source type of in (the Run SDK's default: a
// module when there is a loader).
func (in *Input) sourceType() SourceType {
	if in.SourceType != "" {
		return in.SourceType
	}
	if in.ModuleLoader != nil {
		return SourceModule
	}
	return SourceFunctionBody
}

// moduleScope is what the continuation binds of a run's module setup: the
// source type, and whether it has a loader ("" for a function body without
// one: the scope of runs from before modules existed).
func moduleScope(in *Input) string {
	t := in.sourceType()
	if t == SourceFunctionBody && in.ModuleLoader == nil {
		return ""
	}
	if in.ModuleLoader != nil {
		return string(t) + "+loader"
	}
	return string(t)
}

// moduleOp is one recorded module request.
type moduleOp struct {
	Kind      string `json:"kind"` // normalize | load
	Specifier string `json:"specifier,omitempty"`
	Importer  string `json:"importer,omitempty"`
	// Name is what normalize returned, or the name load loaded.
	Name string `json:"name"`
	// SHA256 of a loaded module's language and source.
	SHA256 string `json:"sha256,omitempty"`
	// Failed is the message the guest's import failed with.
	Failed string `json:"failed,omitempty"`
}

// describe names a recorded request in an error message.
func (op *moduleOp) describe() string {
	if op.Kind == opNormalize {
		return fmt.Sprintf("the resolution of %q from %q", op.Specifier, op.Importer)
	}
	return fmt.Sprintf("the load of %q", op.Name)
}

const (
	opNormalize = "normalize"
	opLoad      = "load"
)

// moduleState is an invocation's module bookkeeping.
type moduleState struct {
	module       bool   // the source is a module
	entryPending bool   // the entry module is still to be served
	entryJS      string // the entry module's JavaScript (module runs)
	resolved     map[[2]string]string
	ops          []moduleOp // this invocation's requests, for the next token
	bytes        int
	ts           map[string]*tsProgram // loaded TypeScript modules, for stacks
}

// moduleHash is what a continuation binds a loaded module by.
func moduleHash(m Module) string {
	h := sha256.New()
	lang := m.Language
	if lang == LanguageJavaScript {
		lang = ""
	}
	h.Write([]byte(lang))
	h.Write([]byte{0})
	h.Write([]byte(m.Source))
	return hex.EncodeToString(h.Sum(nil))
}

// setupModules installs the module callbacks when the run can import.
func (inv *invocation) setupModules() {
	if inv.in.ModuleLoader == nil && !inv.mods.module {
		return // import() rejects, as QuickJS does without a loader
	}
	inv.mods.resolved = map[[2]string]string{}
	inv.vm.SetModuleLoader(inv.loadModule, inv.normalizeModule)
}

// moduleFailure is an import the guest sees fail (the engine throws a
// TypeError with this message after its own prefix).
type moduleFailure struct{ msg string }

func (e *moduleFailure) Error() string { return e.msg }

// fatal ends the run from inside a module callback (see failSync); the
// error returned to the engine is never seen, the VM is interrupted.
func (inv *invocation) moduleFatal(err error) error {
	inv.failSync(err)
	return err
}

// nextModuleRequest counts a request to the host's loader and returns the
// recorded one at its index, if the continuation has it.
func (inv *invocation) nextModuleRequest() (*moduleOp, error) {
	i := len(inv.mods.ops)
	if i >= inv.lim.ModuleRequests {
		return nil, limitError(CodeBridgeLimit, "maxModuleRequests", "run made more than %d module loader requests", inv.lim.ModuleRequests)
	}
	if i < len(inv.st.Modules) {
		return &inv.st.Modules[i], nil
	}
	return nil, nil
}

func (inv *invocation) normalizeModule(_ *quickjs.VM, base, specifier string) (string, error) {
	if inv.syncFatal != nil {
		return "", inv.syncFatal
	}
	importer := base
	if base == evalFileName {
		if inv.mods.module {
			if specifier == EntryModule && inv.mods.entryPending {
				return EntryModule, nil // the bootstrap's import of the entry
			}
		}
		importer = EntryModule
	}
	key := [2]string{specifier, importer}
	if name, ok := inv.mods.resolved[key]; ok {
		return name, nil
	}
	if len(specifier) > maxSpecifierBytes {
		return "", &moduleFailure{fmt.Sprintf("module specifier of %d bytes, over the limit of %d", len(specifier), maxSpecifierBytes)}
	}
	if inv.in.ModuleLoader == nil {
		return "", &moduleFailure{fmt.Sprintf("no module loader: cannot import %q", specifier)}
	}
	old, err := inv.nextModuleRequest()
	if err != nil {
		return "", inv.moduleFatal(err)
	}
	op := moduleOp{Kind: opNormalize, Specifier: specifier, Importer: importer}
	if old != nil {
		if old.Kind != opNormalize || old.Specifier != specifier || old.Importer != importer {
			return "", inv.moduleFatal(newError(CodeProtocol, "replay diverged at module request %d: the continuation has %s, the run asks to resolve %q from %q", len(inv.mods.ops)+1, old.describe(), specifier, importer))
		}
		op = *old
	} else {
		var name string
		err := inv.hostModuleCall(func(ctx context.Context) error {
			var err error
			name, err = inv.in.ModuleLoader.Normalize(ctx, specifier, importer)
			return err
		})
		if err != nil {
			if f := inv.loaderFailure(err, fmt.Sprintf("cannot resolve %q from %q", specifier, importer)); f != "" {
				op.Failed = f
			} else {
				return "", err
			}
		} else if msg := badModuleName(name); msg != "" {
			inv.r.log.Warn("jsrun: module loader returned a bad name", "specifier", specifier, "importer", importer, "name", name)
			op.Failed = fmt.Sprintf("cannot resolve %q from %q: the loader returned %s", specifier, importer, msg)
		} else {
			op.Name = name
		}
	}
	inv.mods.ops = append(inv.mods.ops, op)
	if op.Failed != "" {
		return "", &moduleFailure{op.Failed}
	}
	inv.mods.resolved[key] = op.Name
	return op.Name, nil
}

// maxSpecifierBytes bounds a specifier (and a normalized name) handed to
// the host.
const maxSpecifierBytes = 4096

// badModuleName says what is wrong with a name Normalize returned.
func badModuleName(name string) string {
	switch {
	case name == "":
		return "an empty name"
	case strings.HasPrefix(name, "<"):
		return "a reserved name (beginning with <)"
	case strings.ContainsRune(name, 0):
		return "a name with NUL"
	case !utf8.ValidString(name):
		return "a name that is not UTF-8"
	case len(name) > maxSpecifierBytes:
		return "a name over 4096 bytes"
	}
	return ""
}

func (inv *invocation) loadModule(_ *quickjs.VM, name string) (string, error) {
	if inv.syncFatal != nil {
		return "", inv.syncFatal
	}
	if name == EntryModule && inv.mods.entryPending {
		inv.mods.entryPending = false // served once
		return inv.mods.entryJS, nil
	}
	if inv.in.ModuleLoader == nil {
		return "", &moduleFailure{fmt.Sprintf("no module loader: cannot load %q", name)}
	}
	old, err := inv.nextModuleRequest()
	if err != nil {
		return "", inv.moduleFatal(err)
	}
	index := len(inv.mods.ops) + 1
	if old != nil && (old.Kind != opLoad || old.Name != name) {
		return "", inv.moduleFatal(newError(CodeProtocol, "replay diverged at module request %d: the continuation has %s, the run loads %q", index, old.describe(), name))
	}
	op := moduleOp{Kind: opLoad, Name: name}
	if old != nil && old.Failed != "" {
		inv.mods.ops = append(inv.mods.ops, *old)
		return "", &moduleFailure{old.Failed}
	}
	var m Module
	err = inv.hostModuleCall(func(ctx context.Context) error {
		var err error
		m, err = inv.in.ModuleLoader.Load(ctx, name)
		return err
	})
	if err != nil {
		f := inv.loaderFailure(err, fmt.Sprintf("cannot load %q", name))
		if f == "" {
			return "", err
		}
		if old != nil {
			return "", inv.moduleFatal(newError(CodeProtocol, "module %q no longer loads (module request %d): the continuation was made with its source %s", name, index, old.SHA256))
		}
		op.Failed = f
		inv.mods.ops = append(inv.mods.ops, op)
		return "", &moduleFailure{f}
	}
	if !m.Language.valid() {
		return "", inv.moduleFatal(newError(CodeInvalidInput, "module %q: unknown language %q (javascript or typescript)", name, m.Language))
	}
	if len(m.Source) > inv.lim.SourceBytes {
		e := limitError(CodeSourceTooLarge, "maxSourceBytes", "module %q is %d bytes, over the limit of %d", name, len(m.Source), inv.lim.SourceBytes)
		e.Details["module"] = name
		return "", inv.moduleFatal(e)
	}
	inv.mods.bytes += len(m.Source)
	if inv.mods.bytes > inv.lim.ModuleBytes {
		return "", inv.moduleFatal(limitError(CodeBridgeLimit, "maxModuleBytes", "the modules of this run are %d bytes, over the limit of %d", inv.mods.bytes, inv.lim.ModuleBytes))
	}
	op.SHA256 = moduleHash(m)
	if old != nil && old.SHA256 != op.SHA256 {
		return "", inv.moduleFatal(newError(CodeProtocol, "module %q changed since the continuation was made (module request %d): the loader serves other code now, which does not resume", name, index))
	}
	inv.mods.ops = append(inv.mods.ops, op)
	if m.Language == LanguageTypeScript {
		p, err := typeScriptModule(inv.hostCtx, m.Source, time.Until(inv.deadline))
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == CodeUserSourceError {
				line, col := 0, 0
				if e.Details != nil {
					line, _ = e.Details["line"].(int)
					col, _ = e.Details["column"].(int)
				}
				return "", &moduleFailure{fmt.Sprintf("SyntaxError: %s (%s:%d:%d)", e.Message, name, line, col)}
			}
			return "", inv.moduleFatal(err)
		}
		if inv.mods.ts == nil {
			inv.mods.ts = map[string]*tsProgram{}
		}
		inv.mods.ts[name] = p
		return p.js, nil
	}
	return m.Source, nil
}

// loaderFailure returns the message the guest sees for a loader error, or
// "" when the error ends the run (timeout, abort: already recorded).
func (inv *invocation) loaderFailure(err error, generic string) string {
	if inv.syncFatal != nil {
		return ""
	}
	var ue *UserError
	if errors.As(err, &ue) {
		return ue.Message
	}
	inv.r.log.Warn("jsrun: module loader failed", "err", err)
	return generic
}

// hostModuleCall runs one loader call on its own goroutine, bounded by the
// run's deadline and the caller's cancellation (which end the run).
func (inv *invocation) hostModuleCall(f func(ctx context.Context) error) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				inv.r.log.Error("jsrun: module loader panicked", "panic", p)
				done <- errors.New("module loader panicked")
			}
		}()
		done <- f(context.WithValue(inv.hostCtx, moduleLimitKey{}, inv.lim.SourceBytes))
	}()
	select {
	case err := <-done:
		return err
	case <-inv.hostCtx.Done():
		if errors.Is(inv.hostCtx.Err(), context.Canceled) {
			return inv.moduleFatal(newError(CodeAborted, "run aborted by the caller"))
		}
		return inv.moduleFatal(inv.timeoutError())
	}
}
