package server

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/cluster"
)

// Routing across replicas (Config.Cluster): a request on a container's
// routes (/api/v1/containers/{id}/…, /v1/containers/{id}/…) for a
// container awake on another live node is proxied there as it came, with
// the client's own API key, which that node checks again. HopHeader marks
// a proxied request: it is served where it lands, never proxied again, so
// two nodes that disagree about a location cannot bounce a request
// between them. A client that sets the header itself only turns routing
// off for its request (its wake then meets the other node's claim: 409),
// so the header needs no secret.
const HopHeader = "Shellgate-Proxied-From"

// routed reports whether a route names a container by {id}.
func routed(pattern string) bool { return strings.Contains(pattern, "/containers/{id}") }

// routeAcross serves r elsewhere when its container is awake on another node,
// and reports whether it did (or answered an error).
func (s *Server) routeAcross(w http.ResponseWriter, r *http.Request, p Principal, ew errWriter) bool {
	cl := s.cfg.Cluster
	if cl == nil || r.Header.Get(HopHeader) != "" {
		return false
	}
	c, err := s.find(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return false // the handler answers (404, or the store's failure)
	}
	rt, err := cl.Route(r.Context(), c.ID)
	if err != nil {
		return false
	}
	switch rt.Where {
	case cluster.Unavailable:
		ae := errorf(http.StatusServiceUnavailable, "container %q lives on node %s, which has not been seen since %s, and without a home archive (--storage s3://…) no other node can wake it",
			r.PathValue("id"), rt.Node, rt.Since.UTC().Format(time.RFC3339))
		ae.retryAfter = 30
		ew(w, ae)
		return true
	case cluster.Proxy:
		s.proxy(w, r, rt, ew)
		return true
	}
	return false
}

// proxy forwards r to the node in rt and streams its answer back (SSE
// events are flushed as they come).
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, rt cluster.Route, ew errWriter) {
	target, err := url.Parse(rt.URL)
	if err != nil {
		ew(w, fmt.Errorf("node %s has a bad URL %q: %w", rt.Node, rt.URL, err))
		return
	}
	s.metrics.proxied.Inc()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(HopHeader, s.cfg.Cluster.ID())
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.WarnContext(r.Context(), "proxying to the container's node failed", "node", rt.Node, "err", err)
			if r.Context().Err() != nil {
				return
			}
			ae := errorf(http.StatusBadGateway, "the container is awake on node %s, which did not answer; try again", rt.Node)
			ae.retryAfter = 1
			ew(w, ae)
		},
	}
	rp.ServeHTTP(w, r)
}
