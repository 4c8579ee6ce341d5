// Package storetest holds the conformance suites of the store interfaces,
// one per interface, run by every implementation (SQLite today,
// PostgreSQL):
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Opener {
//			dir := t.TempDir()
//			return func() (store.Store, error) { return sqlstore.OpenSQLite(ctx, dir) }
//		})
//	}
//
// The suites check the contracts written on the interfaces: round trips,
// tenancy (another scope's rows answer exactly like missing ones),
// pagination edges, validation, restart (close and reopen keeps
// everything) and concurrent writers on two independent handles to the
// same data, as two processes or two gateway replicas would have
// (Replicas: racing for the same rows).
package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/store"
)

// Opener opens a Store on one test's data. Each call returns a new,
// independent handle (its own connections) on the same data.
type Opener func() (store.Store, error)

// Factory makes empty data for one test and returns its Opener.
type Factory func(t *testing.T) Opener

// Run runs every store suite.
func Run(t *testing.T, f Factory) {
	t.Run("Keys", func(t *testing.T) { Keys(t, f) })
	t.Run("Containers", func(t *testing.T) { Containers(t, f) })
	t.Run("Files", func(t *testing.T) { Files(t, f) })
	t.Run("Usage", func(t *testing.T) { Usage(t, f) })
	t.Run("Guardrails", func(t *testing.T) { Guardrails(t, f) })
	t.Run("Logs", func(t *testing.T) { Logs(t, f) })
	t.Run("Nodes", func(t *testing.T) { Nodes(t, f) })
	t.Run("Replicas", func(t *testing.T) { Replicas(t, f) })
	t.Run("Quotas", func(t *testing.T) { Quotas(t, f) })
}

// The scopes of the suites: B shares A's account, C shares A's workspace
// name under another account; all three are separate tenants.
var (
	scopeA = store.Scope{Account: "acme", Workspace: "prod"}
	scopeB = store.Scope{Account: "acme", Workspace: "dev"}
	scopeC = store.Scope{Account: "other", Workspace: "prod"}
)

// open opens a handle that the test closes at its end.
func open(t *testing.T, o Opener) store.Store {
	t.Helper()
	s, err := o()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// reopen closes s and opens a new handle on the same data.
func reopen(t *testing.T, s store.Store, o Opener) store.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return open(t, o)
}

// wantErr fails t unless err is target.
func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// sameAsMissing checks that err, from asking about another scope's id,
// is the error asking about an id that does not exist gives, word for
// word once the ids are replaced.
func sameAsMissing(t *testing.T, foreign error, foreignID string, missing error, missingID string, what string) {
	t.Helper()
	wantErr(t, foreign, store.ErrNotFound, what+" (another scope's id)")
	wantErr(t, missing, store.ErrNotFound, what+" (missing id)")
	if a, b := strings.ReplaceAll(foreign.Error(), foreignID, "ID"), strings.ReplaceAll(missing.Error(), missingID, "ID"); a != b {
		t.Fatalf("%s: another scope's id answers %q, a missing one %q", what, a, b)
	}
}

// scoped is what Containers and Files have in common: each scope's rows,
// by id.
type scoped[T any] interface {
	Get(ctx context.Context, scope store.Scope, id string) (T, error)
	Delete(ctx context.Context, scope store.Scope, id string) error
	List(ctx context.Context, scope store.Scope, opts store.ListOptions) (store.Page[T], error)
}

// othersSeeNothing checks that to scopes B and C scope A's row a (id)
// answers like a missing id (Get, Delete, List after it), that they list
// nothing, and, after more (the calls of rows' own type, for each scope,
// may be nil), that a is unchanged.
func othersSeeNothing[T any](t *testing.T, rows scoped[T], a T, id, missing string, more func(sc store.Scope, missing string)) {
	t.Helper()
	for _, sc := range []store.Scope{scopeB, scopeC} {
		_, ef := rows.Get(t.Context(), sc, id)
		_, em := rows.Get(t.Context(), sc, missing)
		sameAsMissing(t, ef, id, em, missing, "Get")
		sameAsMissing(t, rows.Delete(t.Context(), sc, id), id, rows.Delete(t.Context(), sc, missing), missing, "Delete")
		_, ef = rows.List(t.Context(), sc, store.ListOptions{After: id, Limit: 10})
		_, em = rows.List(t.Context(), sc, store.ListOptions{After: missing, Limit: 10})
		sameAsMissing(t, ef, id, em, missing, "List after")
		if p, err := rows.List(t.Context(), sc, store.ListOptions{Limit: 10}); err != nil || len(p.Items) != 0 || p.HasMore {
			t.Fatalf("%+v lists %+v, %v", sc, p, err)
		}
		if more != nil {
			more(sc, missing)
		}
	}
	if got, err := rows.Get(t.Context(), scopeA, id); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("A's row after the other scopes' attempts: %+v, %v", got, err)
	}
}

// deleteOnce deletes scope A's row id, which is then gone: Get and a
// second Delete are ErrNotFound.
func deleteOnce[T any](t *testing.T, rows scoped[T], id string) {
	t.Helper()
	if err := rows.Delete(t.Context(), scopeA, id); err != nil {
		t.Fatal(err)
	}
	_, err := rows.Get(t.Context(), scopeA, id)
	wantErr(t, err, store.ErrNotFound, "Get after delete")
	wantErr(t, rows.Delete(t.Context(), scopeA, id), store.ErrNotFound, "second delete")
}

func contextWithCancel(t *testing.T) (context.Context, func()) {
	return context.WithCancel(t.Context())
}

// created stores rec with create (a Create method of the store under
// test) and returns the stored record, failing the test when it cannot.
func created[T any](t *testing.T, create func(context.Context, T) (T, error), rec T) T {
	t.Helper()
	x, err := create(t.Context(), rec)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
