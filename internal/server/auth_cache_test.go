package server

import (
	"context"
	"github.com/shellgate/shellgate/internal/store"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// countingKeys counts the key store's lookups.
type countingKeys struct {
	Authenticator
	n atomic.Int64
}

func (k *countingKeys) Authenticate(ctx context.Context, key string) (Principal, error) {
	k.n.Add(1)
	return k.Authenticator.Authenticate(ctx, key)
}

// TestAuthCache: a key that authenticated is remembered for AuthCacheTTL
// (the store is asked once for many requests), failures are never
// remembered, and a key revoked while remembered stops working once the
// TTL has passed; with a negative TTL a revocation is seen at once.
func TestAuthCache(t *testing.T) {
	const ttl = 3 * time.Second // ten requests fit in it on a loaded machine
	var keys *countingKeys
	e := newEnv(t, "crun", "busybox", func(c *Config) {
		keys = &countingKeys{Authenticator: c.Keys}
		c.Keys, c.AuthCacheTTL = keys, ttl
	})
	key := e.newKey("acme", "a")
	list := func() int {
		st, _ := e.do("GET", "/api/v1/containers", key, nil)
		return st
	}
	for range 10 {
		if st := list(); st != http.StatusOK {
			t.Fatalf("a valid key: %d", st)
		}
	}
	if n := keys.n.Load(); n != 1 {
		t.Fatalf("10 requests within the TTL asked the key store %d times, want 1", n)
	}
	bad := key[:len(key)-1] + "x"
	for range 3 {
		if st, _ := e.do("GET", "/api/v1/containers", bad, nil); st != http.StatusUnauthorized {
			t.Fatalf("a changed key: %d", st)
		}
	}
	if n := keys.n.Load(); n != 4 {
		t.Fatalf("failures were cached: %d store lookups after 3 bad keys, want 4", n)
	}

	// revoke revokes tok by its id (keys made in the same millisecond list
	// in no fixed order, so "the last one" is not a way to find it).
	revoke := func(e *env, tok string) {
		id, _, ok := store.ParseToken(tok)
		if !ok {
			t.Fatalf("not a key: %q", tok)
		}
		if err := e.st.Keys().Revoke(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	revoke(e, key)
	time.Sleep(ttl)
	if st := list(); st != http.StatusUnauthorized {
		t.Fatalf("a key revoked %s ago still works: %d", ttl, st)
	}
	if st := list(); st != http.StatusUnauthorized {
		t.Fatalf("a revoked key works again: %d", st)
	}

	// No cache: a revocation is seen by the next request.
	e2 := newEnv(t, "crun", "busybox", func(c *Config) { c.AuthCacheTTL = -1 })
	key2 := e2.newKey("acme", "a")
	if st, _ := e2.do("GET", "/api/v1/containers", key2, nil); st != http.StatusOK {
		t.Fatalf("a valid key: %d", st)
	}
	revoke(e2, key2)
	if st, _ := e2.do("GET", "/api/v1/containers", key2, nil); st != http.StatusUnauthorized {
		t.Fatalf("without the cache a revoked key still works: %d", st)
	}
}
