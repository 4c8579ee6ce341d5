package server

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// authCache remembers keys that authenticated, for Config.AuthCacheTTL,
// so that a burst of requests (a gateway request's tool steps, a chat
// pass-through) does not read the key store on every one. It is keyed by
// the SHA-256 of the whole presented key, so it holds no key and a hit
// needs the exact key (a preimage of the hash); the store's own
// constant-time check runs on every miss. Only successes are cached: an
// unknown or revoked key always reaches the store, and a key revoked
// while cached stops working when its entry expires. Bounded: when full,
// expired entries are dropped, and if none were, all of them.
type authCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]authEntry
}

type authEntry struct {
	p     Principal
	until time.Time
}

// maxAuthCache bounds the cache (about 100 bytes an entry).
const maxAuthCache = 4096

func (c *authCache) get(sum [sha256.Size]byte, now time.Time) (Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[sum]
	if !ok {
		return Principal{}, false
	}
	if !now.Before(e.until) {
		delete(c.m, sum)
		return Principal{}, false
	}
	return e.p, true
}

func (c *authCache) put(sum [sha256.Size]byte, p Principal, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[sha256.Size]byte]authEntry{}
	}
	if len(c.m) >= maxAuthCache {
		now := time.Now()
		for k, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxAuthCache {
			clear(c.m)
		}
	}
	c.m[sum] = authEntry{p: p, until: until}
}

// authenticate resolves the request's API key: `Authorization: Bearer KEY`
// or `x-api-key: KEY` (when both are sent they must agree), else
// `x-goog-api-key: KEY`, or on the Gemini paths `?key=KEY`. Any failure is
// 401 in the route's envelope, with no hint of which part was wrong beyond
// "missing" versus "invalid".
func (s *Server) authenticate(r *http.Request) (Principal, error) {
	key, err := requestKey(r)
	if err != nil {
		return Principal{}, err
	}
	sum := sha256.Sum256([]byte(key))
	if p, ok := s.auth.get(sum, time.Now()); ok {
		return p, nil
	}
	p, err := s.cfg.Keys.Authenticate(r.Context(), key)
	if err == nil && s.cfg.AuthCacheTTL > 0 {
		s.auth.put(sum, p, time.Now().Add(s.cfg.AuthCacheTTL))
	}
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, ErrUnauthorized):
		return Principal{}, errorf(http.StatusUnauthorized, "invalid or revoked API key")
	default:
		s.log.ErrorContext(r.Context(), "key store failed", "err", err)
		return Principal{}, errorf(http.StatusServiceUnavailable, "the key store is unavailable; try again")
	}
}

func requestKey(r *http.Request) (string, error) {
	var bearer string
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return "", errorf(http.StatusUnauthorized, "the Authorization header must be `Bearer KEY`")
		}
		bearer = strings.TrimSpace(tok)
	}
	apiKey := strings.TrimSpace(r.Header.Get("x-api-key"))
	if apiKey == "" {
		// Google's conventions, for the Gemini dialect: the header, or the
		// key query parameter on its paths only.
		apiKey = strings.TrimSpace(r.Header.Get("x-goog-api-key"))
		if apiKey == "" && geminiPath(r.URL.Path) {
			apiKey = strings.TrimSpace(r.URL.Query().Get("key"))
		}
	}
	switch {
	case bearer != "" && apiKey != "" && bearer != apiKey:
		return "", errorf(http.StatusUnauthorized, "Authorization and x-api-key carry different keys")
	case bearer != "":
		return bearer, nil
	case apiKey != "":
		return apiKey, nil
	}
	return "", errorf(http.StatusUnauthorized, "missing API key: send `Authorization: Bearer KEY`, `x-api-key: KEY` or `x-goog-api-key: KEY`")
}

func geminiPath(p string) bool {
	return strings.HasPrefix(p, "/v1beta/") || strings.HasPrefix(p, "/api/v1beta/")
}
