package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/jsrun/jsrunhttp"
	"github.com/shellgate/shellgate/jsrun/jsrunsql"
	"github.com/shellgate/shellgate/sandbox"
)

func init() {
	register("eval", "run a JavaScript file in the secure eval (interrupt/resume from the shell)", runEval)
}

// evalAudience is shared with the server's handler so that a continuation
// printed by the CLI is only good for eval.
const evalAudience = "shellgate-eval"

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runEval(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	setUsage(fs, `usage: shellgate eval FILE.js|FILE.ts|FILE.mjs|FILE.mts [--language typescript] [--source-type module] [--client-functions NS.fn,NS.fn2] [--continuation TOKEN] [--resolve ID=JSON]... [--sandbox NAME] [--context JSON]

Runs FILE.js ("-" reads stdin) as the body of an async function and prints
the POST /api/v1/eval response JSON. FILE.ts (also .mts, .cts) is
TypeScript: its types are stripped first (--language overrides the
extension, e.g. for stdin). FILE.mjs and FILE.mts are ES modules
(--source-type overrides): their imports ("./lib.js", "../x.mjs", "/y.js")
load files under FILE's own directory, never outside it. A call to a client function interrupts
the run; resume with --continuation and one --resolve per answered id.
Values are tagged JSON (docs/jsrun.md). The signing secret is
$SHELLGATE_CONTINUATION_SECRET (>= 32 bytes) or DATA/keys/continuation.key.
A continuation resumes once: a second resume fails with RUN_CONTINUATION_USED
(uses are recorded in DATA/eval/continuations.db).
Exit status: 0 completed, 3 interrupted, 1 error.`)
	dataDir := dataDirFlag(fs)
	clientFns := fs.String("client-functions", "", "comma-separated NS.fn client functions")
	continuation := fs.String("continuation", "", "continuation token from an interrupted run")
	var resolves multiFlag
	fs.Var(&resolves, "resolve", "ID=JSON resolution (tagged JSON), repeatable")
	sandboxName := fs.String("sandbox", "", "sandbox (container) whose built-ins the code may call: sandbox.exec, readFile, writeFile")
	rtName := fs.String("runtime", "", "with --sandbox: OCI runtime (default: the strongest that works here)")
	imageName := fs.String("image", "default", "with --sandbox: root filesystem image")
	contextJSON := fs.String("context", "", "tagged-JSON value bound into the continuation")
	language := fs.String("language", "", "javascript or typescript (default: by the file's extension)")
	sourceType := fs.String("source-type", "", "function-body or module (default: module for .mjs and .mts)")
	// Accept flags before or after FILE.js.
	var file string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return exitError{2}
		}
		if fs.NArg() == 0 {
			break
		}
		if file != "" {
			return fmt.Errorf("one FILE.js expected, got %q and %q", file, fs.Arg(0))
		}
		file, rest = fs.Arg(0), fs.Args()[1:]
	}
	if file == "" {
		fs.Usage()
		return exitError{2}
	}
	var src []byte
	var err error
	if file == "-" {
		src, err = readAllStdin()
	} else {
		src, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}

	req := &jsrunhttp.Request{Source: string(src), Language: *language, Continuation: *continuation}
	if req.Language == "" {
		req.Language = languageOf(file)
	}
	req.SourceType = *sourceType
	if req.SourceType == "" {
		req.SourceType = string(jsrun.SourceFunctionBody)
		if ext := strings.ToLower(filepath.Ext(file)); ext == ".mjs" || ext == ".mts" {
			req.SourceType = string(jsrun.SourceModule)
		}
	}
	if req.SourceType == string(jsrun.SourceModule) && file != "-" {
		// Imports resolve under the file's directory, confined to it.
		dir, err := filepath.Abs(filepath.Dir(file))
		if err != nil {
			return err
		}
		req.Loader = jsrun.DirModules{Root: dir}
	}
	if *clientFns != "" {
		req.ClientFunctions = map[string][]string{}
		for _, q := range strings.Split(*clientFns, ",") {
			ns, fn, ok := strings.Cut(strings.TrimSpace(q), ".")
			if !ok || ns == "" || fn == "" {
				return fmt.Errorf("--client-functions: %q is not NS.fn", q)
			}
			req.ClientFunctions[ns] = append(req.ClientFunctions[ns], fn)
		}
	}
	for _, r := range resolves {
		id, val, ok := strings.Cut(r, "=")
		if !ok || id == "" {
			return fmt.Errorf("--resolve: %q is not ID=JSON", r)
		}
		if !json.Valid([]byte(val)) {
			return fmt.Errorf("--resolve %s: value is not JSON: %s", id, val)
		}
		req.Resolutions = append(req.Resolutions, jsrunhttp.Resolution{InterruptionID: id, Value: json.RawMessage(val)})
	}
	if *contextJSON != "" {
		if !json.Valid([]byte(*contextJSON)) {
			return fmt.Errorf("--context is not JSON")
		}
		req.Context = json.RawMessage(*contextJSON)
	}

	secret, err := continuationSecret(*dataDir)
	if err != nil {
		return err
	}
	// Each continuation resumes once: its first resume is recorded in the
	// data directory, shared by every shellgate process using it. The
	// database is opened on the first claim, so runs that do not resume
	// never touch it.
	store := &lazyStore{path: continuationStorePath(*dataDir)}
	defer store.Close()
	runner, err := jsrun.NewRunner(jsrun.Config{Secret: secret, Store: store, Audience: evalAudience, OrderedObjects: true})
	if err != nil {
		return err
	}
	cfg := jsrunhttp.Config{Runner: runner}
	if *sandboxName != "" {
		if !sandbox.ValidName(*sandboxName) {
			return fmt.Errorf("--sandbox: %w: %q", sandbox.ErrBadName, *sandboxName)
		}
		mgr, err := sandbox.Open(ctx, sandbox.Config{DataDir: *dataDir, Runtime: *rtName, Image: *imageName, IdleTimeout: -1})
		if err != nil {
			return fmt.Errorf("--sandbox: %w", err)
		}
		defer mgr.Close(context.WithoutCancel(ctx))
		// The CLI's caller owns every sandbox of the data directory.
		cfg.Sandboxes = func(_ context.Context, _ *http.Request, id string) (jsrunhttp.Sandbox, error) {
			if !sandbox.ValidName(id) {
				return nil, fmt.Errorf("%w: %q", jsrunhttp.ErrSandboxNotFound, id)
			}
			return tool.EvalSandbox{Manager: mgr, Name: id}, nil
		}
		req.Sandbox = &jsrunhttp.SandboxRequest{ContainerID: *sandboxName}
	}
	status, resp := jsrunhttp.EvalRequest(ctx, jsrunhttp.NewHandler(cfg), req)
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resp); err != nil {
		return err
	}
	switch {
	case status == http.StatusOK && resp.Status == "interrupted":
		return exitError{3}
	case status != http.StatusOK:
		return exitError{1}
	}
	return nil
}

func readAllStdin() ([]byte, error) { return io.ReadAll(os.Stdin) }

// languageOf names the language of a source file by its extension
// ("" for JavaScript, the default).
func languageOf(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".ts", ".mts", ".cts":
		return string(jsrun.LanguageTypeScript)
	}
	return ""
}

// continuationStorePath is the SQLite database of used continuations.
func continuationStorePath(dataDir string) string {
	return filepath.Join(dataDir, "eval", "continuations.db")
}

// lazyStore opens the SQLite continuation store when it is first needed.
type lazyStore struct {
	path string
	once sync.Once
	s    *jsrunsql.Store
	err  error
}

func (l *lazyStore) open(ctx context.Context) (*jsrunsql.Store, error) {
	l.once.Do(func() {
		l.s, l.err = jsrunsql.OpenSQLite(ctx, l.path)
		if l.err != nil {
			l.err = fmt.Errorf("opening the continuation store (set --data-dir): %w", l.err)
		}
	})
	return l.s, l.err
}

func (l *lazyStore) Claim(ctx context.Context, id string, at, expiresAt time.Time) error {
	s, err := l.open(ctx)
	if err != nil {
		return err
	}
	return s.Claim(ctx, id, at, expiresAt)
}

func (l *lazyStore) Release(ctx context.Context, id string) error {
	s, err := l.open(ctx)
	if err != nil {
		return err
	}
	return s.Release(ctx, id)
}

func (l *lazyStore) Close() {
	if l.s != nil {
		l.s.Close()
	}
}

// continuationSecret returns $SHELLGATE_CONTINUATION_SECRET, or the key kept
// in DATA/keys/continuation.key, generating it (0600) on first use.
func continuationSecret(dataDir string) ([]byte, error) {
	if s := os.Getenv("SHELLGATE_CONTINUATION_SECRET"); s != "" {
		if len(s) < 32 {
			return nil, fmt.Errorf("SHELLGATE_CONTINUATION_SECRET must be at least 32 bytes (got %d)", len(s))
		}
		return []byte(s), nil
	}
	path := filepath.Join(dataDir, "keys", "continuation.key")
	if b, err := os.ReadFile(path); err == nil {
		key := []byte(strings.TrimSpace(string(b)))
		if len(key) < 32 {
			return nil, fmt.Errorf("%s holds fewer than 32 bytes; delete it to generate a new key", path)
		}
		return key, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading continuation key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating key directory (set SHELLGATE_CONTINUATION_SECRET or --data-dir): %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	key := []byte(fmt.Sprintf("%x", raw)) // 64 hex characters
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return continuationSecret(dataDir) // another process won the race
	}
	if err != nil {
		return nil, fmt.Errorf("creating continuation key: %w", err)
	}
	if _, err := f.Write(append(key, '\n')); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return key, nil
}
