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
//
// A third bound is on request bodies (Config.MaxBodyBytesInFlight): the
// bytes of the bodies a workspace's requests hold in memory at once, each
// reserved from its Content-Length (or the route's cap when the length is
// not sent) before the body is read and given back when the request ends.
// Over it: 429 with Retry-After, naming the bound and its flag. A
// workspace with nothing in flight is always admitted, so a body the
// route's cap allows is never refused for its size alone. Uploads, which
// stream to their destination, are not counted.

// wsLimits are the limit states of every workspace seen.
type wsLimits struct {
	rate    rate.Limit
	burst   int
	maxConc int
	maxBody int64 // bytes of request bodies in flight; 0: no bound

	mu sync.Mutex
	ws map[Principal]*wsLimit
}

type wsLimit struct {
	bucket    *rate.Limiter // nil without a rate limit
	inflight  int
	bodyBytes int64 // reserved by admitBody
	seen      time.Time
}

// maxTracked bounds the workspaces kept; past it, idle ones with a full
// bucket are forgotten (forgetting one is the same as a full bucket).
const maxTracked = 10000

func newWSLimits(perSecond float64, burst, maxConc int, maxBody int64) *wsLimits {
	l := &wsLimits{maxConc: maxConc, maxBody: maxBody, ws: map[Principal]*wsLimit{}}
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
	w := l.entryLocked(p, now)
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

// entryLocked is p's state, made on first use.
func (l *wsLimits) entryLocked(p Principal, now time.Time) *wsLimit {
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
	return w
}

// admitBody reserves n bytes of request body for p's workspace, or
// refuses them with a 429 naming the bound and the flag that raises it.
// release gives them back when the request ends.
func (l *wsLimits) admitBody(p Principal, n int64) (release func(), err *apiError) {
	if l.maxBody <= 0 || n <= 0 {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.entryLocked(p, time.Now())
	if w.bodyBytes > 0 && w.bodyBytes+n > l.maxBody {
		e := quotaError(http.StatusTooManyRequests, flagMaxBodyInFlight, "this workspace's requests in flight already hold %d bytes of request bodies; this one's %d bytes would pass its limit of %d "+
			"(a body sent without Content-Length counts as the route's cap): retry when one ends", w.bodyBytes, n, l.maxBody)
		e.retryAfter = 1
		return nil, e
	}
	w.bodyBytes += n
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			w.bodyBytes -= n
			l.mu.Unlock()
		})
	}, nil
}

// held is a copy of p's counts: inflight, its requests admitted and not
// yet ended, and bodyBytes, the bytes of request body they hold (zero for
// a workspace not tracked).
func (l *wsLimits) held(p Principal) wsLimit {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.ws[p]; w != nil {
		return *w
	}
	return wsLimit{}
}

func (l *wsLimits) pruneLocked(now time.Time) {
	for p, w := range l.ws {
		if w.inflight == 0 && w.bodyBytes == 0 && now.Sub(w.seen) > time.Minute && (w.bucket == nil || w.bucket.TokensAt(now) >= float64(l.burst)) {
			delete(l.ws, p)
		}
	}
}
