package server

import (
	"errors"
	"net/http"
	"strings"
)

// authenticate resolves the request's API key: `Authorization: Bearer KEY`
// or `x-api-key: KEY` (when both are sent they must agree). Any failure is
// 401 in the route's envelope, with no hint of which part was wrong beyond
// "missing" versus "invalid".
func (s *Server) authenticate(r *http.Request) (Principal, error) {
	key, err := requestKey(r)
	if err != nil {
		return Principal{}, err
	}
	p, err := s.cfg.Keys.Authenticate(r.Context(), key)
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
	switch {
	case bearer != "" && apiKey != "" && bearer != apiKey:
		return "", errorf(http.StatusUnauthorized, "Authorization and x-api-key carry different keys")
	case bearer != "":
		return bearer, nil
	case apiKey != "":
		return apiKey, nil
	}
	return "", errorf(http.StatusUnauthorized, "missing API key: send `Authorization: Bearer KEY` or `x-api-key: KEY`")
}
