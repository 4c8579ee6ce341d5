// Package jsrun runs agent-written JavaScript (or TypeScript) in a fresh,
// hardened QuickJS context with interrupt, approve and resume: the Go
// counterpart of Vercel's Run SDK. It has no server dependency; jsrunhttp
// serves it over HTTP. The user documentation, with the wire format, limits
// and error codes, is docs/jsrun.md.
//
// # How a run works
//
// `jsrun` is importable and server-free. Each run gets its own QuickJS context
// (`modernc.org/quickjs`, pure Go), optionally taken hardened from a prewarmed
// pool, and driven by one loop goroutine. Host functions run on their own
// goroutines (or inline when `Sync`) and send results back over a channel; only
// `VM.Interrupt` is called from outside the loop. An interrupted run returns an
// HMAC-signed continuation whose ledger records every host call. A resume re-runs
// the source in a fresh context and answers settled calls from the ledger in
// their original order, so deterministic Date and `Math.random` make the replay
// exact. `jsrunhttp` is the wire layer for `POST /api/v1/eval`: it turns client
// functions into interruptions, exposes the caller's sandbox through a small
// `Sandbox` interface resolved per workspace, and binds continuations to that
// workspace. Continuations are single-use: before a resume can have an effect
// the runner claims the token's nonce in a `jsrun.ContinuationStore` (SQLite via
// `jsrun/jsrunsql` for the CLI, the server's own database via
// `sqlstore.DB.Continuations` for `shellgate serve`, in-memory only when a caller asks for
// it), and only the first claim wins. A request's limits are clamped to the
// runner's. `internal/tool.EvalSandbox` is the one adapter from that interface
// to `sandbox.Manager` (commands through the shell tool's validation and
// limits). `shellgate eval` calls the same handler in-process.
//
// Three pieces sit beside the loop. TypeScript (`jsrun/typescript.go`) is
// stripped by esbuild's transform inside the same function wrapper before the
// VM exists, after a nesting scan (`tsguard.go`) that keeps sources esbuild
// would recurse on without limit away from it; the transform itself runs in a
// resident child process (`tsworker.go`, the same executable), so what the scan
// misses ends the child, not the server; its source map maps error
// positions back, and transforms are cached per source. Synchronous host
// functions (`syncbridge.go`) call one Go function registered on the VM (and
// hidden by the prelude) that blocks the loop inside the VM call while the
// host function runs on its own goroutine; their calls share the request
// indices, the settlement order and the ledger with the others. A
// `ContinuationCodec` wraps the signed token on its way out and in
// (`codec.go`: identity by default, AES-GCM, or a reference to a stored
// token), so signing, verification and single use stay the runner's.
// ES modules (`modules.go`) use QuickJS's own module-loader hook
// (`VM.SetModuleLoader`): the engine calls back on the loop goroutine, inside
// the VM call that imports, and the callback runs the host's `ModuleLoader`
// on a goroutine of its own, bounded by the deadline and the module limits
// (a breach ends the run the way a synchronous call's failure does). A module
// run evaluates `await import("<entry>")` and the callback serves the source
// itself under that name, so link and load failures reach the guest's
// outcome like any error. Loader requests are recorded in the continuation
// (names and source hashes, not sources); a resume answers `Normalize` from
// the record and checks what `Load` returns against it.
package jsrun
