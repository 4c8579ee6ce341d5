package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Keys is the conformance suite of store.Keys.
func Keys(t *testing.T, f Factory) {
	t.Run("01 create then authenticate", func(t *testing.T) {
		s := open(t, f(t))
		key, token := mustKey(t, s, scopeA)
		if !strings.HasPrefix(token, store.TokenPrefix) || !strings.HasPrefix(key.ID, "key_") || token[len(store.TokenPrefix):len(store.TokenPrefix)+16] != key.ID[4:] {
			t.Fatalf("key %s, token %q: want %s + the id's digits", key.ID, token, store.TokenPrefix)
		}
		if key.Scope() != scopeA || key.CreatedAt.IsZero() || key.Revoked() {
			t.Fatalf("created %+v", key)
		}
		got, err := s.Keys().Authenticate(t.Context(), token)
		if err != nil {
			t.Fatal(err)
		}
		if got != key {
			t.Fatalf("Authenticate = %+v, want %+v", got, key)
		}
	})
	t.Run("02 tokens that are not a valid key", func(t *testing.T) {
		s := open(t, f(t))
		_, tokA := mustKey(t, s, scopeA)
		_, tokB := mustKey(t, s, scopeB)
		flip := []byte(tokA)
		if flip[len(flip)-2] == 'A' {
			flip[len(flip)-2] = 'B'
		} else {
			flip[len(flip)-2] = 'A'
		}
		prefix := len(store.TokenPrefix) + 16
		for name, tok := range map[string]string{
			"empty":                           "",
			"one wrong secret character":      string(flip),
			"A's id with B's secret":          tokA[:prefix] + tokB[prefix:],
			"another prefix":                  "sk-" + tokA[len(store.TokenPrefix):],
			"truncated":                       tokA[:len(tokA)-1],
			"one character more":              tokA + "A",
			"unknown id":                      store.TokenPrefix + "0000000000000000" + tokA[prefix:],
			"upper-case id":                   strings.ToUpper(tokA[:prefix]) + tokA[prefix:],
			"the key id instead of the token": strings.Replace(tokA[:prefix], store.TokenPrefix, "key_", 1),
		} {
			if _, err := s.Keys().Authenticate(t.Context(), tok); err != store.ErrUnauthorized {
				t.Errorf("%s: Authenticate(%q) = %v, want ErrUnauthorized", name, tok, err)
			}
		}
	})
	t.Run("03 list shows every key with its scope, oldest first", func(t *testing.T) {
		s := open(t, f(t))
		var ids []string
		for _, sc := range []store.Scope{scopeA, scopeB, scopeC} {
			k, _ := mustKey(t, s, sc)
			ids = append(ids, k.ID)
		}
		list, err := s.Keys().List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 3 {
			t.Fatalf("List = %+v", list)
		}
		seen := map[string]store.Scope{}
		for _, k := range list {
			seen[k.ID] = k.Scope()
		}
		for i, sc := range []store.Scope{scopeA, scopeB, scopeC} {
			if seen[ids[i]] != sc {
				t.Fatalf("key %s listed with scope %+v, want %+v", ids[i], seen[ids[i]], sc)
			}
		}
		for i := 1; i < len(list); i++ {
			if list[i].CreatedAt.Before(list[i-1].CreatedAt) {
				t.Fatalf("not oldest first: %+v", list)
			}
		}
	})
	t.Run("04 a revoked key never authenticates", func(t *testing.T) {
		o := f(t)
		s := open(t, o)
		key, token := mustKey(t, s, scopeA)
		_, other := mustKey(t, s, scopeA)
		if err := s.Keys().Revoke(t.Context(), key.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Keys().Authenticate(t.Context(), token); err != store.ErrUnauthorized {
			t.Fatalf("revoked key: %v", err)
		}
		if _, err := s.Keys().Authenticate(t.Context(), other); err != nil {
			t.Fatalf("revoking one key broke another: %v", err)
		}
		first := revokedAt(t, s, key.ID)
		if first.IsZero() {
			t.Fatal("list does not show the key revoked")
		}
		if err := s.Keys().Revoke(t.Context(), key.ID); err != nil {
			t.Fatalf("second revoke: %v", err)
		}
		if again := revokedAt(t, s, key.ID); !again.Equal(first) {
			t.Fatalf("second revoke moved the time from %v to %v", first, again)
		}
		wantErr(t, s.Keys().Revoke(t.Context(), "key_0000000000000000"), store.ErrNotFound, "revoking an unknown key")
		// Revocation survives a restart.
		s = reopen(t, s, o)
		if _, err := s.Keys().Authenticate(t.Context(), token); err != store.ErrUnauthorized {
			t.Fatalf("revoked key after restart: %v", err)
		}
		if _, err := s.Keys().Authenticate(t.Context(), other); err != nil {
			t.Fatalf("valid key after restart: %v", err)
		}
	})
	t.Run("05 invalid scopes", func(t *testing.T) {
		s := open(t, f(t))
		for _, sc := range []store.Scope{{}, {Account: "a"}, {Workspace: "w"}, {Account: "a b", Workspace: "w"}, {Account: "a", Workspace: "w/x"}, {Account: strings.Repeat("a", 65), Workspace: "w"}} {
			_, tok, err := s.Keys().Create(t.Context(), sc)
			wantErr(t, err, store.ErrInvalid, "scope "+sc.Account+"/"+sc.Workspace)
			if tok != "" {
				t.Fatalf("a token for an invalid scope: %q", tok)
			}
		}
	})
	t.Run("06 concurrent creates on two handles", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		const each = 10
		var wg sync.WaitGroup
		tokens := make(chan string, 2*each)
		errs := make(chan error, 2*each)
		for _, h := range handles {
			for range each {
				wg.Go(func() {
					_, tok, err := h.Keys().Create(t.Context(), scopeA)
					if err != nil {
						errs <- err
						return
					}
					tokens <- tok
				})
			}
		}
		wg.Wait()
		close(tokens)
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for tok := range tokens {
			if seen[tok] {
				t.Fatalf("token minted twice: %s", tok)
			}
			seen[tok] = true
			if _, err := handles[len(seen)%2].Keys().Authenticate(t.Context(), tok); err != nil {
				t.Fatalf("a key made concurrently does not authenticate: %v", err)
			}
		}
		if list, err := handles[0].Keys().List(t.Context()); err != nil || len(list) != 2*each {
			t.Fatalf("List: %d keys, %v", len(list), err)
		}
	})
}

func revokedAt(t *testing.T, s store.Store, id string) (at time.Time) {
	t.Helper()
	list, err := s.Keys().List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range list {
		if k.ID == id {
			return k.RevokedAt
		}
	}
	t.Fatalf("key %s not listed", id)
	return
}

// mustKey creates a key of scope in s and returns it with its token,
// failing the test when it cannot.
func mustKey(t *testing.T, s store.Store, scope store.Scope) (store.Key, string) {
	t.Helper()
	k, tok, err := s.Keys().Create(t.Context(), scope)
	if err != nil {
		t.Fatal(err)
	}
	return k, tok
}
