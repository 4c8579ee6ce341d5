package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/cluster"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/internal/tool"
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
		ew(w, unavailable(r.PathValue("id"), rt))
		return true
	case cluster.Proxy:
		s.proxy(w, r, rt, ew)
		return true
	}
	return false
}

// unavailable is the answer for a container whose home is on a dead node.
func unavailable(ref string, rt cluster.Route) *apiError {
	ae := errorf(http.StatusServiceUnavailable, "container %q lives on node %s, which has not been seen since %s, and without a home archive (--storage s3://…) no other node can wake it",
		ref, rt.Node, rt.Since.UTC().Format(time.RFC3339))
	ae.retryAfter = 30
	return ae
}

// Gateway and eval requests name their container in the body (or the
// x-session-id header), not the path, so they are routed once the body is
// read: the whole request is replayed to the container's node before
// anything is sent to a model, so the model is called once, by the node
// that runs the tools, which also bills and logs the request.

// forwardReq is a request whose body was read here, to be sent elsewhere as
// it came.
type forwardReq struct {
	w    http.ResponseWriter
	r    *http.Request
	body []byte
	rl   *reqLog
}

// replayable reads r's body so that it can be sent again, and gives the
// request to the handler with the same bytes. nil when the request is
// never routed (no cluster, or it was proxied here already); then, and
// when reading fails, the handler reads the body (and meets the error)
// as before.
func (s *Server) replayable(w http.ResponseWriter, r *http.Request, rl *reqLog) *forwardReq {
	if s.cfg.Cluster == nil || r.Header.Get(HopHeader) != "" {
		return nil
	}
	body, err := io.ReadAll(r.Body) // capped by the route's MaxBytesReader
	if err != nil {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return &forwardReq{w: w, r: r, body: body, rl: rl}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// to sends the request to the node in rt and writes its answer. It
// returns the error to answer with when that node could not be reached
// (nothing written), else nil: the request is answered.
func (rp *forwardReq) to(s *Server, rt cluster.Route) *apiError {
	r := rp.r.Clone(rp.r.Context())
	r.Body = io.NopCloser(bytes.NewReader(rp.body))
	r.ContentLength = int64(len(rp.body))
	r.GetBody = nil
	var failed *apiError
	s.proxy(rp.w, r, rt, func(_ http.ResponseWriter, err error) {
		failed, _ = err.(*apiError)
		if failed == nil {
			failed = errorf(http.StatusBadGateway, "%v", err)
		}
	})
	if failed == nil && rp.rl != nil {
		rp.rl.proxied = true // the node that served it logs it
	}
	return failed
}

// routeContainer is where a request for the container ref of p goes:
// ok false to serve it here.
func (s *Server) routeContainer(ctx context.Context, p Principal, ref string) (rt cluster.Route, ok bool) {
	c, err := s.find(ctx, p, ref)
	if err != nil {
		return rt, false // served here: the handler answers 404, 410 or the store's failure
	}
	rt, err = s.cfg.Cluster.Route(ctx, c.ID)
	if err != nil || rt.Where == cluster.Local {
		return rt, false
	}
	return rt, true
}

// Forward implements gateway.Forwarder: a gateway request whose container
// (named by reference, session or conversation) is awake on another live
// node is replayed there whole, before the model is called.
func (g gatewaySandboxes) Forward(ctx context.Context, sel identity.Request) error {
	if g.rp == nil {
		return nil
	}
	choice, err := identity.Choose(sel)
	if err != nil || choice.New() {
		return nil // Open answers the bad reference, or makes the container here
	}
	rt, ok := g.s.routeContainer(ctx, g.p, choice.Key)
	if !ok {
		return nil
	}
	var ae *apiError
	if rt.Where == cluster.Unavailable {
		ae = unavailable(choice.Key, rt)
	} else if ae = g.rp.to(g.s, rt); ae == nil {
		return gateway.ErrAnswered
	}
	return &gateway.RequestError{Status: ae.status, Message: ae.msg}
}

// routeEval replays an eval request whose sandbox.container_id is awake
// on another live node there, and reports whether it answered.
func (s *Server) routeEval(w http.ResponseWriter, r *http.Request, p Principal) bool {
	rp := s.replayable(w, r, nil)
	if rp == nil {
		return false
	}
	var req struct {
		Sandbox *struct {
			ContainerID string `json:"container_id"`
		} `json:"sandbox"`
	}
	if json.Unmarshal(rp.body, &req) != nil || req.Sandbox == nil || req.Sandbox.ContainerID == "" {
		return false // the handler answers a bad body; no sandbox, nothing to route
	}
	rt, ok := s.routeContainer(r.Context(), p, req.Sandbox.ContainerID)
	if !ok {
		return false
	}
	if rt.Where == cluster.Unavailable {
		writeError(w, unavailable(req.Sandbox.ContainerID, rt))
		return true
	}
	if ae := rp.to(s, rt); ae != nil {
		writeError(w, ae)
	}
	return true
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
		// Headers this node set already (request ids) are the serving
		// node's in the answer, not both.
		ModifyResponse: func(resp *http.Response) error {
			for k := range resp.Header {
				w.Header().Del(k)
			}
			return nil
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

// keyHeaders are the headers that carry a client's API key.
var keyHeaders = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key"}

// clientKey is the client's own key headers of r, for calls this node
// makes on its behalf to another node (which checks them again).
func clientKey(r *http.Request) http.Header {
	h := http.Header{}
	for _, k := range keyHeaders {
		if v := r.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return h
}

// maxRemoteEvent bounds one event of a remote exec stream: the result
// event holds every command's output (100 × 2 × 64 Ki characters of
// JSON-escaped text at most).
const maxRemoteEvent = 64 << 20

// remoteExec runs p's commands in container id on the node in rt through
// its exec API (streamed; node to node with the client's key and the hop
// header, so that node serves it itself), passing each output chunk to
// onOutput as it comes. The call is billed there (an exec row): this node
// bills none of it.
func (s *Server) remoteExec(ctx context.Context, key http.Header, rt cluster.Route, id string, p tool.Plan, onOutput func(cmd, stream int, text string)) ([]tool.CommandOutput, error) {
	body, err := json.Marshal(map[string]any{"commands": p.Commands, "timeout_ms": p.TimeoutMs, "max_output_length": p.MaxOutputLength, "stream": true})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(rt.URL, "/")+"/api/v1/containers/"+url.PathEscape(id)+"/exec", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("node %s has a bad URL %q: %w", rt.Node, rt.URL, err)
	}
	maps.Copy(req.Header, key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HopHeader, s.cfg.Cluster.ID())
	s.metrics.proxied.Inc()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the container is awake on node %s, which did not answer: %w", rt.Node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("node %s answered %d: %s", rt.Node, resp.StatusCode, eb.Error.Message)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxRemoteEvent)
	var event string
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch event {
		case "output":
			var d outputDelta
			if err := json.Unmarshal([]byte(data), &d); err != nil {
				return nil, fmt.Errorf("node %s: bad output event: %w", rt.Node, err)
			}
			if onOutput != nil {
				stream := 1
				if d.Stream == "stderr" {
					stream = 2
				}
				onOutput(d.Index, stream, d.Text)
			}
		case "result":
			var r execResponse
			if err := json.Unmarshal([]byte(data), &r); err != nil {
				return nil, fmt.Errorf("node %s: bad result event: %w", rt.Node, err)
			}
			return r.Output, nil
		case "error":
			var eb errorBody
			json.Unmarshal([]byte(data), &eb)
			return nil, fmt.Errorf("node %s: %s", rt.Node, eb.Error.Message)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("node %s: reading its answer: %w", rt.Node, err)
	}
	return nil, fmt.Errorf("node %s ended the call without a result", rt.Node)
}
