package jsrun

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// refCodec keeps signed continuations in SQLite and hands out only a random
// 43-character reference: what an application does to keep continuations
// server-side.
type refCodec struct {
	db     *sql.DB
	now    func() time.Time
	encode atomic.Int64
}

func newRefCodec(t *testing.T) *refCodec {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "refs.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE continuations (ref TEXT PRIMARY KEY, signed TEXT NOT NULL, expires_ms INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &refCodec{db: db, now: time.Now}
}

func (c *refCodec) Encode(ctx context.Context, sc SealedContinuation) (string, error) {
	c.encode.Add(1)
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	ref := base64.RawURLEncoding.EncodeToString(b)
	_, err := c.db.ExecContext(ctx, `INSERT INTO continuations (ref, signed, expires_ms) VALUES (?, ?, ?)`, ref, sc.Signed, sc.ExpiresAt.UnixMilli())
	return ref, err
}

func (c *refCodec) Decode(ctx context.Context, ref string) (string, error) {
	var signed string
	err := c.db.QueryRowContext(ctx, `SELECT signed FROM continuations WHERE ref = ? AND expires_ms >= ?`, ref, c.now().UnixMilli()).Scan(&signed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errors.New("unknown or expired continuation reference")
	}
	return signed, err
}

func TestStoredReferenceCodec(t *testing.T) {
	rc := newRefCodec(t)
	r := newTestRunner(t, func(c *Config) { c.Codec = rc })
	var calls atomic.Int64
	hf := tools(&calls)
	src := `const s = await tools.sum(2, 3); const ok = await tools.approve('card 4242'); return ok ? s : -1`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	if res.Status != StatusInterrupted || len(res.Continuation) != 43 || strings.Contains(res.Continuation, ".") {
		t.Fatalf("want a 43-character reference, got %+v", res)
	}
	if rc.encode.Load() != 1 {
		t.Fatalf("Encode called %d times", rc.encode.Load())
	}
	var signed string
	if err := rc.db.QueryRow(`SELECT signed FROM continuations WHERE ref = ?`, res.Continuation).Scan(&signed); err != nil {
		t.Fatal(err)
	}
	if _, err := r.codec.decode(signed); err != nil {
		t.Fatalf("the stored value is not the signed continuation: %v", err)
	}

	// An unknown reference fails before any host function runs.
	before := calls.Load()
	_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: strings.Repeat("A", 43), Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)
	// So does the signed continuation itself: only references are accepted.
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: signed, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)
	if calls.Load() != before {
		t.Fatal("a refused resume called a host function")
	}

	out := mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	if out.Status != StatusCompleted || out.Value != 5.0 {
		t.Fatalf("resume: %+v", out)
	}
	if calls.Load() != before+1 { // only the approval ran again; the sum came from the ledger
		t.Fatalf("resume made %d host calls", calls.Load()-before)
	}
	// The reference is single-use like any continuation.
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeContinuationUsed)

	// The runner still verifies what the codec returns: a store that was
	// tampered with cannot forge a ledger.
	res = mustRun(t, r, Input{Source: src, HostFunctions: hf})
	if _, err := rc.db.Exec(`UPDATE continuations SET signed = ? WHERE ref = ?`, signed[:len(signed)-2]+"AA", res.Continuation); err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)

	// An expired entry is gone for the codec.
	res = mustRun(t, r, Input{Source: src, HostFunctions: hf})
	rc.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)
}

func TestDefaultCodecIsTheSignedToken(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	res := mustRun(t, r, Input{Source: `return await tools.approve(1)`, HostFunctions: tools(&calls)})
	st, err := r.codec.decode(res.Continuation)
	if err != nil || len(st.Ledger) != 1 || st.Ledger[0].Status != statusInterrupted {
		t.Fatalf("default token is not the signed continuation: %v %+v", err, st)
	}
}

func TestEncryptedCodec(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	codec, err := NewEncryptedCodec(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEncryptedCodec(key[:16]); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
	r := newTestRunner(t, func(c *Config) { c.Codec = codec })
	var calls atomic.Int64
	hf := tools(&calls)
	src := `const card = '4111-1111-1111-1111'; return await tools.approve(card)`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	raw, err := base64.RawURLEncoding.DecodeString(res.Continuation)
	if err != nil {
		t.Fatalf("token is not base64url: %v", err)
	}
	if strings.Contains(string(raw), "4111") || strings.Contains(string(raw), "ledger") {
		t.Fatal("the encrypted token shows its ledger")
	}
	if _, err := r.codec.decode(res.Continuation); err == nil {
		t.Fatal("the encrypted token verifies as a signed one")
	}

	// Tampered, or encrypted under another key: refused before any effect.
	before := calls.Load()
	bad := []byte(res.Continuation)
	bad[len(bad)/2] ^= 1
	if bad[len(bad)/2] == '-' || bad[len(bad)/2] == '_' {
		bad[len(bad)/2] = 'A'
	}
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: string(bad), Resolutions: resolveAll(res, "ok")})
	wantCode(t, err, CodeProtocol)
	other := make([]byte, 32)
	otherCodec, _ := NewEncryptedCodec(other)
	r2 := newTestRunner(t, func(c *Config) { c.Codec = otherCodec })
	_, err = r2.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, "ok")})
	wantCode(t, err, CodeProtocol)
	if calls.Load() != before {
		t.Fatal("a refused resume called a host function")
	}

	out := mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, "ok")})
	if out.Value != "ok" {
		t.Fatalf("resume: %+v", out)
	}
}

// failingCodec fails every operation, to check how failures are reported.
type failingCodec struct{}

func (failingCodec) Encode(context.Context, SealedContinuation) (string, error) {
	return "", errors.New("store is down")
}
func (failingCodec) Decode(context.Context, string) (string, error) {
	return "", errors.New("store is down")
}

func TestCodecFailures(t *testing.T) {
	r := newTestRunner(t, func(c *Config) { c.Codec = failingCodec{} })
	var calls atomic.Int64
	_, err := r.Run(context.Background(), Input{Source: `return await tools.approve(1)`, HostFunctions: tools(&calls)})
	if e := wantCode(t, err, CodeInternal); !strings.Contains(e.Message, "store is down") {
		t.Fatalf("message %q", e.Message)
	}
	_, err = r.Run(context.Background(), Input{Source: `return await tools.approve(1)`, HostFunctions: tools(&calls),
		Continuation: "ref", Resolutions: []Resolution{{InterruptionID: "interrupt-1", Value: 1}}})
	wantCode(t, err, CodeProtocol)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Run(ctx, Input{Source: `return 1`, Continuation: "ref", Resolutions: []Resolution{{InterruptionID: "interrupt-1", Value: 1}}})
	wantCode(t, err, CodeAborted)
}
