package jsrunsql

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/jsrun/storetest"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var t0 = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

func TestSQLiteConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) jsrun.ContinuationStore {
		return open(t, filepath.Join(t.TempDir(), "continuations.db"))
	})
}

// Two stores on one file (two connection pools, as two servers would be)
// behave as one store: every call alternates between them.
func TestSQLiteConformanceTwoPools(t *testing.T) {
	storetest.Run(t, func(t *testing.T) jsrun.ContinuationStore {
		path := filepath.Join(t.TempDir(), "continuations.db")
		return &twoPools{stores: [2]*Store{open(t, path), open(t, path)}}
	})
}

type twoPools struct {
	stores [2]*Store
	next   atomic.Uint32
}

func (p *twoPools) pick() *Store { return p.stores[p.next.Add(1)%2] }

func (p *twoPools) Claim(ctx context.Context, id string, at, expiresAt time.Time) error {
	return p.pick().Claim(ctx, id, at, expiresAt)
}

func (p *twoPools) Release(ctx context.Context, id string) error { return p.pick().Release(ctx, id) }

func TestClaimIsSingleUseAndDurable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "eval", "continuations.db")
	s := open(t, path)
	if err := s.Claim(ctx, "tok1", t0.Add(1234*time.Millisecond), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var used *jsrun.UsedError
	err := s.Claim(ctx, "tok1", t0.Add(time.Minute), t0.Add(time.Hour))
	if !errors.As(err, &used) || !used.FirstUse.Equal(t0.Add(1234*time.Millisecond)) || !errors.Is(err, jsrun.ErrContinuationUsed) {
		t.Fatalf("second claim: %v", err)
	}
	if !strings.Contains(err.Error(), "2026-12-01T03:00:01.234Z") {
		t.Fatalf("error does not name the first use: %v", err)
	}
	// (A released claim can be made again: the conformance suite's case 02,
	// run on this store by TestSQLiteConformance.)
	// Claims survive closing the database (a restart).
	s.Close()
	s2 := open(t, path)
	if err := s2.Claim(ctx, "tok1", t0.Add(2*time.Minute), t0.Add(time.Hour)); !errors.As(err, &used) || !used.FirstUse.Equal(t0.Add(1234*time.Millisecond)) {
		t.Fatalf("after reopening: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("database mode %v %v, want 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("WAL file: %v %v (want WAL mode, 0600)", fi, err)
	}
}

// TestProcessesRace claims one ID from several processes at once, on a
// database none of them has created yet.
func TestProcessesRace(t *testing.T) {
	if path := os.Getenv("JSRUNSQL_CLAIM_DB"); path != "" {
		// Child: wait for the go file, claim, report.
		for {
			if _, err := os.Stat(path + ".go"); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		s, err := OpenSQLite(context.Background(), path)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		defer s.Close()
		err = s.Claim(context.Background(), "raced", time.Now(), time.Now().Add(time.Hour))
		switch {
		case err == nil:
			fmt.Println("won")
		case errors.Is(err, jsrun.ErrContinuationUsed):
			fmt.Println("refused")
		default:
			fmt.Println("error:", err)
		}
		return
	}
	path := filepath.Join(t.TempDir(), "raced.db")
	const n = 4
	outs := make([]strings.Builder, n)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestProcessesRace$", "-test.count=1")
		cmds[i].Env = append(os.Environ(), "JSRUNSQL_CLAIM_DB="+path)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	won, refused := 0, 0
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i].String())
		}
		out := outs[i].String()
		switch {
		case strings.HasPrefix(out, "won"):
			won++
		case strings.HasPrefix(out, "refused"):
			refused++
		default:
			t.Fatalf("child %d: %s", i, out)
		}
	}
	if won != 1 || refused != n-1 {
		t.Fatalf("%d processes won, %d refused; want 1 and %d", won, refused, n-1)
	}
}

func TestSweepDeletesOnlyExpiredClaims(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	for i, exp := range []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour} {
		if err := s.Claim(ctx, fmt.Sprint("t", i), t0, t0.Add(exp)); err != nil {
			t.Fatal(err)
		}
	}
	// The next claim past the first expiry and a minute after the last
	// sweep removes the expired claim by itself.
	if err := s.Claim(ctx, "t3", t0.Add(90*time.Minute), t0.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Count(ctx); err != nil || n != 3 {
		t.Fatalf("%d claims after the automatic sweep (%v), want 3", n, err)
	}
	if err := s.Claim(ctx, "t1", t0.Add(91*time.Minute), t0.Add(4*time.Hour)); !errors.Is(err, jsrun.ErrContinuationUsed) {
		t.Fatalf("unexpired claim was swept: %v", err)
	}
	if n, err := s.Sweep(ctx, t0.Add(150*time.Minute)); err != nil || n != 1 {
		t.Fatalf("sweep removed %d (%v), want 1", n, err)
	}
	if n, _ := s.Count(ctx); n != 2 {
		t.Fatalf("%d claims left, want 2", n)
	}
}

// TestRunnerResumesOnceAcrossRestarts: the store behind a Runner keeps a
// token used after the process (here: the runner and the database handle)
// is gone.
func TestRunnerResumesOnceAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "continuations.db")
	secret := []byte(strings.Repeat("k", 32))
	var effects atomic.Int64
	hf := map[string]jsrun.Namespace{"tools": {"approve": jsrun.Async(func(ctx context.Context, args []any) (any, error) {
		if r := jsrun.ResumeFrom(ctx); r != nil {
			effects.Add(1)
			return r.Resolution, nil
		}
		return nil, jsrun.Interrupt(ctx, args[0])
	})}}
	newRunner := func() (*jsrun.Runner, *Store) {
		s, err := OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := jsrun.NewRunner(jsrun.Config{Secret: secret, Store: s})
		if err != nil {
			t.Fatal(err)
		}
		return r, s
	}
	src := `return await tools.approve('rm -rf build')`
	r, s := newRunner()
	res, err := r.Run(ctx, jsrun.Input{Source: src, HostFunctions: hf})
	if err != nil || res.Status != jsrun.StatusInterrupted {
		t.Fatal(res, err)
	}
	resume := func(r *jsrun.Runner) error {
		_, err := r.Run(ctx, jsrun.Input{Source: src, HostFunctions: hf, Continuation: res.Continuation,
			Resolutions: []jsrun.Resolution{{InterruptionID: res.Interruptions[0].ID, Value: true}}})
		return err
	}
	if err := resume(r); err != nil {
		t.Fatal(err)
	}
	if code := jsrun.ErrorCode(resume(r)); code != jsrun.CodeContinuationUsed {
		t.Fatalf("second resume: %s", code)
	}
	s.Close()
	r2, s2 := newRunner()
	defer s2.Close()
	if code := jsrun.ErrorCode(resume(r2)); code != jsrun.CodeContinuationUsed {
		t.Fatalf("resume after a restart: %s", code)
	}
	if effects.Load() != 1 {
		t.Fatalf("the approved call ran %d times", effects.Load())
	}
}

// BenchmarkClaim is the cost a resume pays for its claim (one fsync'd insert
// in WAL mode).
func BenchmarkClaim(b *testing.B) {
	s, err := OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		if err := s.Claim(context.Background(), fmt.Sprint("tok", i), now, now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}
