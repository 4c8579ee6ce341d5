package server

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Per-workspace limits (SPEC §7): a token bucket of requests per second
// with a burst (Config.RateLimit, RateBurst) and the quota of requests in
// flight (Config.MaxConcurrent, quota.go), both counted per account + workspace
// over every authenticated route. A request over either is answered 429
// with Retry-After (whole seconds) in the route's own envelope, before its
// body is read; a streamed call holds its place until the stream ends.

// wsLimits are the limit states of every workspace seen.
type wsLimits struct {
	rate    rate.Limit
	burst   int
	maxConc int

	mu sync.Mutex
	ws map[Principal]*wsLimit
}

type wsLimit struct {
	bucket   *rate.Limiter // nil without a rate limit
	inflight int
	seen     time.Time
}

// maxTracked bounds the workspaces kept; past it, idle ones with a full
// bucket are forgotten (forgetting one is the same as a full bucket).
const maxTracked = 10000

func newWSLimits(perSecond float64, burst, maxConc int) *wsLimits {
	l := &wsLimits{maxConc: maxConc, ws: map[Principal]*wsLimit{}}
	if perSecond > 0 {
		l.rate = rate.Limit(perSecond)
		l.burst = burst
		if l.burst < 1 {
			l.burst = max(1, int(math.Ceil(perSecond)))
		}
	}
	return l
}

// admit counts one request of p's workspace, or refuses it with a 429.
// release must be called when the request ends.
func (l *wsLimits) admit(p Principal) (release func(), err *apiError) {
	if l.rate == 0 && l.maxConc <= 0 {
		return func() {}, nil
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.ws[p]
	if w == nil {
		if len(l.ws) >= maxTracked {
			l.pruneLocked(now)
		}
		w = &wsLimit{}
		if l.rate > 0 {
			w.bucket = rate.NewLimiter(l.rate, l.burst)
		}
		l.ws[p] = w
	}
	w.seen = now
	if l.maxConc > 0 && w.inflight >= l.maxConc {
		e := quotaError(http.StatusTooManyRequests, flagMaxConcurrent, "this workspace already has %d requests in flight, its quota of requests in flight: retry when one ends", w.inflight)
		e.retryAfter = 1
		return nil, e
	}
	if w.bucket != nil {
		r := w.bucket.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			e := errorf(http.StatusTooManyRequests, "this workspace is over its rate limit of %g requests per second (burst %d); retry in %s", float64(l.rate), l.burst, d.Round(time.Millisecond))
			e.retryAfter = max(1, int(math.Ceil(d.Seconds())))
			return nil, e
		}
	}
	w.inflight++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			w.inflight--
			l.mu.Unlock()
		})
	}, nil
}

// inflight is the number of p's requests admitted and not yet ended.
func (l *wsLimits) inflight(p Principal) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.ws[p]; w != nil {
		return w.inflight
	}
	return 0
}

func (l *wsLimits) pruneLocked(now time.Time) {
	for p, w := range l.ws {
		if w.inflight == 0 && now.Sub(w.seen) > time.Minute && (w.bucket == nil || w.bucket.TokensAt(now) >= float64(l.burst)) {
			delete(l.ws, p)
		}
	}
}
