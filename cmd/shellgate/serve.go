package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/broadcast"
	"github.com/shellgate/shellgate/internal/cluster"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
	"github.com/shellgate/shellgate/internal/mcp"
	"github.com/shellgate/shellgate/internal/server"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

func init() {
	register("serve", "serve the HTTP API: serve [--addr 127.0.0.1:8080] [--data-dir DIR] [--database postgres://...] [--storage s3://BUCKET/PREFIX?endpoint=URL] [--config PROVIDERS.yaml] [--node-id ID --advertise-url URL]", runServe)
}

// DefaultAddr is where `shellgate serve` listens without --addr: loopback
// only, since anyone who reaches /metrics sees the server's counters.
const defaultAddr = "127.0.0.1:8080"

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", defaultAddr, "HOST:PORT to listen on")
	dataDir := dataDirFlag(fs)
	database := databaseFlag(fs)
	storageSpec := storageFlag(fs)
	rtName := fs.String("runtime", "", "OCI runtime: runsc, crun or runc (default: the strongest that works here)")
	img := fs.String("image", "default", "root filesystem image of new containers")
	pool := fs.Int("pool", 1, "started sandboxes kept ready for new containers (0: none)")
	idle := fs.Duration("idle-sleep", 5*time.Minute, "a container sleeps after this long without a command (its files are kept)")
	fs.DurationVar(idle, "idle-timeout", 5*time.Minute, "the same as --idle-sleep")
	rateLimit := fs.Float64("rate-limit", 0, "each workspace's sustained API requests per second (0: no limit); over it: 429 with Retry-After")
	rateBurst := fs.Int("rate-burst", 0, "requests a workspace may send at once above --rate-limit (0: the rate, rounded up)")
	maxConc := fs.Int("max-concurrent", server.DefaultMaxConcurrent, "quota: each workspace's API requests in flight at once (0: unlimited); over it: 429 with Retry-After")
	maxContainers := fs.Int("max-containers", server.DefaultMaxContainers, "quota: containers each workspace may have that are not expired, across replicas (0: unlimited); over it a create is 403")
	maxAwake := fs.Int("max-awake", server.DefaultMaxAwake, "quota: containers of each workspace awake at once on this replica (0: unlimited); over it a create or wake is 429")
	maxMCPSessions := fs.Int("max-mcp-sessions", mcp.DefaultMaxSessions, "quota: open MCP sessions of each workspace on this replica (0: unlimited); over it an initialize at /mcp is 429")
	maxWSFilesMB := fs.Int64("max-workspace-files-mb", server.DefaultMaxWorkspaceFileBytes>>20, "quota: MiB of workspace files each workspace may keep, across replicas (0: unlimited); over it an upload or promote is 403")
	maxBodyMB := fs.Int64("max-inflight-body-mb", server.DefaultMaxBodyBytesInFlight>>20, "each workspace's request bodies held in memory at once, in MiB, reserved from Content-Length (or the route's cap without one); uploads are not counted (0: no bound); over it: 429 with Retry-After")
	netAllow := fs.String("network-allow", "", "the most network any workspace's containers may open: comma-separated hostnames, *.example.com patterns or * (default: none, so no container has network)")
	netAllowWS := map[string]*egress.Policy{}
	fs.Func("network-allow-workspace", "ACCOUNT/WORKSPACE=DOMAINS: --network-allow for one workspace (repeatable)", func(v string) error {
		ws, domains, ok := strings.Cut(v, "=")
		if !ok || !strings.Contains(ws, "/") {
			return fmt.Errorf("want ACCOUNT/WORKSPACE=DOMAINS, got %q", v)
		}
		pol, err := allowPolicy(domains)
		if err != nil {
			return err
		}
		netAllowWS[ws] = pol
		return nil
	})
	retention := fs.Duration("retention", server.DefaultRetention, "a container's files are deleted this long after its last use, unless it has its own expires_after")
	sweepEvery := fs.Duration("sweep-every", time.Minute, "how often expired containers and old request logs are swept, and memory a burst of requests took is given back to the system")
	callWait := fs.Duration("call-wait", server.DefaultCallWait, "how long an exec call waits for the container's previous call before answering 409")
	grace := fs.Duration("shutdown-grace", time.Minute, "on SIGTERM/SIGINT, how long calls in flight may run before they are cancelled and reported")
	maxUpload := fs.Int64("max-upload-mb", server.DefaultMaxUploadBytes>>20, "largest file an upload may carry, in MiB (workspace files and container files)")
	idleConn := fs.Duration("idle-conn-timeout", server.DefaultIdleConnTimeout, "a keep-alive connection idle this long between requests is closed")
	headerTimeout := fs.Duration("header-timeout", server.DefaultHeaderTimeout, "a connection still sending its request's headers after this long is closed")
	maxHeaderKB := fs.Int("max-header-kb", server.DefaultMaxHeaderBytes>>10, "largest request line and headers, in KiB; over it: 431")
	stall := fs.Duration("stall-timeout", server.DefaultStallTimeout, "a request body that sends nothing for this long ends the request (408) and its connection; slow but steady uploads go on")
	maxConns := fs.Int("max-conns", 0, "connections held at once; over it the longest-idle keep-alive connection is closed, or, when all are busy, the new one is answered 503 (0: half the open-file limit, at most 4096; -1: no cap)")
	maxConnsIP := fs.Int("max-conns-per-ip", 0, "connections held at once from one address, evicting its idle ones first (0: 256, at most half of --max-conns; -1: no cap, e.g. behind a reverse proxy)")
	logFormat := fs.String("log-format", "json", "log format on stderr: json or text")
	maxCPUs := fs.Float64("max-cpus", 0, "the most CPUs a container may ask for (0: the default, 1)")
	maxMemMB := fs.Int64("max-memory-mb", 0, "the most memory in MiB a container may ask for (0: the default, 5120); OpenAI's memory_limit tiers are clamped to it")
	maxProcs := fs.Int64("max-processes", 0, "the most processes a container may ask for (0: the default, 512)")
	maxDiskMB := fs.Int64("max-disk-mb", 0, "the largest /workspace/home in MiB a container may ask for (0: the default, 5120)")
	nodeID := fs.String("node-id", "", "this replica's id among those sharing the database (env SHELLGATE_NODE_ID; default: the host name)")
	advertise := fs.String("advertise-url", "", "the URL other replicas reach this one's API at, e.g. http://10.0.0.5:8080; setting it turns on routing across replicas: requests for a container awake on another replica are proxied there (env SHELLGATE_ADVERTISE_URL)")
	heartbeat := fs.Duration("heartbeat", cluster.DefaultHeartbeat, "with --advertise-url: how often this replica renews its heartbeat; a replica silent for five heartbeats is dead")
	providersPath := fs.String("config", "", "config file (YAML: providers: NAME: {api, base_url, api_key_env, models, timeout}; broadcast: [{type: otlp_http, endpoint, headers}]; runtime: {backend: kubernetes, namespace, image, kubeconfig, runtime_class, egress_proxy, ...}; database: DSN; storage: s3://...); without providers the model gateway has none; without runtime sandboxes run on this machine")
	setUsage(fs, "usage: shellgate serve [flags]\n\nServes the HTTP API (see GET /api/v1/openapi.json). Make a key with `shellgate keys create`.")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *rateLimit < 0 || *rateBurst < 0 || *maxConc < 0 || *maxBodyMB < 0 {
		return errors.New("--rate-limit, --rate-burst, --max-concurrent and --max-inflight-body-mb must not be negative")
	}
	maxBodyInFlight := *maxBodyMB << 20
	if maxBodyInFlight == 0 {
		maxBodyInFlight = -1 // no bound
	}
	if *maxContainers < 0 || *maxAwake < 0 || *maxWSFilesMB < 0 || *maxMCPSessions < 0 {
		return errors.New("--max-containers, --max-awake, --max-workspace-files-mb and --max-mcp-sessions must not be negative (0 is unlimited)")
	}
	if *retention <= 0 {
		return errors.New("--retention must be positive")
	}
	if *maxCPUs < 0 || *maxMemMB < 0 || *maxProcs < 0 || *maxDiskMB < 0 {
		return errors.New("--max-cpus, --max-memory-mb, --max-processes and --max-disk-mb must not be negative")
	}
	if *idleConn <= 0 || *headerTimeout <= 0 || *stall <= 0 || *maxHeaderKB <= 0 {
		return errors.New("--idle-conn-timeout, --header-timeout, --stall-timeout and --max-header-kb must be positive")
	}
	if *maxConns < -1 || *maxConnsIP < -1 {
		return errors.New("--max-conns and --max-conns-per-ip take a count, 0 (the default) or -1 (no cap)")
	}
	conns := server.ConnLimits{IdleTimeout: *idleConn, HeaderTimeout: *headerTimeout, MaxHeaderBytes: *maxHeaderKB << 10,
		StallTimeout: *stall, MaxConns: *maxConns, MaxConnsPerIP: *maxConnsIP}
	maxLimits := server.Limits{CPUMillis: int64(*maxCPUs * 1000), MemoryBytes: *maxMemMB << 20, Processes: *maxProcs, DiskBytes: *maxDiskMB << 20}
	log, err := newLogger(*logFormat)
	if err != nil {
		return err
	}
	var models gateway.Models
	var dests []broadcast.Destination
	var sc serveConfig
	if *providersPath != "" {
		var err error
		if sc, err = readServeConfig(*providersPath); err != nil {
			return err
		}
	}
	if sc.rest != nil {
		ps, err := upstream.ParseConfig(sc.rest, os.Getenv)
		if err != nil {
			return fmt.Errorf("provider config %s: %w", *providersPath, err)
		}
		models = ps
		log.Info("model providers", "config", *providersPath, "providers", ps.Names(), "models", ps.List())
		if dests, err = broadcast.ParseConfig(sc.rest, os.Getenv); err != nil {
			return fmt.Errorf("config %s: %w", *providersPath, err)
		}
	}
	if sc.kube != nil {
		// Flags that only mean something for sandboxes on this machine.
		var bad error
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "runtime", "image", "pool":
				bad = errors.Join(bad, fmt.Errorf("--%s %w", f.Name, errKubeFlag))
			case "advertise-url":
				bad = errors.Join(bad, errors.New("--advertise-url: Kubernetes sandboxes need no routing between replicas (each one reaches every pod); leave it unset"))
			}
		})
		if os.Getenv("SHELLGATE_ADVERTISE_URL") != "" {
			bad = errors.Join(bad, errors.New("SHELLGATE_ADVERTISE_URL: Kubernetes sandboxes need no routing between replicas (each one reaches every pod); leave it unset"))
		}
		if bad != nil {
			return bad
		}
	}
	envDests, err := broadcast.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	bc, err := broadcast.New(append(dests, envDests...), broadcast.Options{Logger: log})
	if err != nil {
		return err
	}
	if bc != nil {
		log.Info("trace broadcast", "destinations", bc.Destinations())
		defer func() {
			// Traces still queued get a few seconds to go out.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := bc.Shutdown(sctx); err != nil {
				log.Warn("trace broadcast: shutdown", "err", err)
			}
		}()
	}
	if *rtName != "" && sc.kube == nil {
		if _, err := runtime.New(*rtName, os.TempDir()); err != nil {
			return err
		}
	}
	st, stDesc, err := openStore(ctx, orConfig(*database, databaseEnv, sc.database), *dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	files, err := openStorage(ctx, orConfig(*storageSpec, storageEnv, sc.storage), *dataDir)
	if err != nil {
		return err
	}
	defer files.close()
	blobs := files.blobs
	node, err := openNode(ctx, st, *nodeID, *advertise, *heartbeat, files.archive != nil, log)
	if err != nil {
		return err
	}
	homes := files.archive
	if node != nil {
		homes = node.Archive(files.archive)
		go node.Run(ctx)
	}
	var mgr sandbox.Backend
	if sc.kube != nil {
		*img = sc.kube.Image
		kh, kerr := files.kubeArchiver(*dataDir)
		if err = kerr; err == nil {
			mgr, err = openKubeSandboxes(ctx, *sc.kube, *idle, kh, log)
		}
	} else {
		mgr, err = sandbox.Open(ctx, sandbox.Config{
			DataDir:     *dataDir,
			Runtime:     *rtName,
			Image:       *img,
			PoolSize:    *pool,
			IdleTimeout: *idle,
			Logger:      log,
			HomeArchive: homes,
		})
	}
	if err != nil {
		return err
	}
	// POST /api/v1/eval: the continuation secret as `shellgate eval` gets
	// it, the single-use claims in the server's own database.
	secret, err := continuationSecret(*dataDir)
	if err != nil {
		return errors.Join(err, mgr.Close(context.Background()))
	}
	runner, err := jsrun.NewRunner(jsrun.Config{Secret: secret, Store: st.Continuations(), Audience: evalAudience, Logger: log, OrderedObjects: true})
	if err != nil {
		return errors.Join(err, mgr.Close(context.Background()))
	}
	defer runner.Close()
	if *maxUpload < 1 {
		return errors.Join(fmt.Errorf("--max-upload-mb %d: want at least 1", *maxUpload), mgr.Close(context.Background()))
	}
	netMax, err := allowPolicy(*netAllow)
	if err != nil {
		return errors.Join(fmt.Errorf("--network-allow: %w", err), mgr.Close(context.Background()))
	}
	backend := server.StoreBackend{St: st, Blobs: blobs}
	srv, err := server.New(server.Config{
		Sandboxes: mgr, Keys: backend, Containers: backend, Ledger: backend, WorkspaceFiles: backend,
		Files: st.Files(), Blobs: blobs, MaxUploadBytes: *maxUpload << 20, Guardrails: st.Guardrails(), Logs: st.Logs(),
		EvalRunner: runner, Logger: log, CallWait: *callWait, MaxLimits: maxLimits,
		Retention: *retention, SweepEvery: *sweepEvery, RateLimit: *rateLimit, RateBurst: *rateBurst, MaxConcurrent: unlimitedIfZero(*maxConc),
		MaxContainers: unlimitedIfZero(*maxContainers), MaxAwake: unlimitedIfZero(*maxAwake), MaxMCPSessions: unlimitedIfZero(*maxMCPSessions),
		MaxWorkspaceFileBytes: unlimitedIfZero(*maxWSFilesMB << 20),
		MaxBodyBytesInFlight:  maxBodyInFlight,
		NetworkAllow:          netMax, NetworkAllowByWorkspace: netAllowWS,
		Models: models, Broadcast: bc, Cluster: node, Conns: conns,
	})
	if err != nil {
		return errors.Join(err, mgr.Close(context.Background()))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return errors.Join(err, mgr.Close(context.Background()))
	}
	log.Info("serving", "addr", "http://"+ln.Addr().String(), "data_dir", *dataDir, "store", stDesc, "files", files.desc, "runtime", mgr.Runtime(), "image", *img, "node", nodeDesc(node, *advertise),
		"max_conns", srv.ConnLimits().MaxConns, "max_conns_per_ip", srv.ConnLimits().MaxConnsPerIP)
	return srv.Run(ctx, ln, *grace)
}

// unlimitedIfZero is a quota flag for server.Config: the flag's 0
// (unlimited) is the Config's negative (its 0 is the default).
func unlimitedIfZero[T int | int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// allowPolicy is the operator's maximum from a comma-separated list of
// domains; empty is none (nil).
func allowPolicy(list string) (*egress.Policy, error) {
	var domains []string
	for _, d := range strings.Split(list, ",") {
		if d = strings.TrimSpace(d); d != "" {
			domains = append(domains, d)
		}
	}
	if len(domains) == 0 {
		return nil, nil
	}
	p := &egress.Policy{Type: egress.Allowlist, AllowedDomains: domains}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// openNode makes this replica a node of the database's cluster when it has
// an advertise URL (flag, else $SHELLGATE_ADVERTISE_URL); nil without one.
func openNode(ctx context.Context, st interface{ Nodes() store.Nodes }, id, advertise string, every time.Duration, portable bool, log *slog.Logger) (*cluster.Node, error) {
	if advertise == "" {
		advertise = os.Getenv("SHELLGATE_ADVERTISE_URL")
	}
	if advertise == "" {
		return nil, nil
	}
	if id == "" {
		id = os.Getenv("SHELLGATE_NODE_ID")
	}
	if id == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node-id: none given and no host name: %w", err)
		}
		id = h
	}
	if every <= 0 {
		return nil, errors.New("--heartbeat must be positive")
	}
	return cluster.New(ctx, cluster.Config{ID: id, URL: advertise, Nodes: st.Nodes(), Heartbeat: every, Portable: portable, Logger: log})
}

func nodeDesc(n *cluster.Node, url string) string {
	if n == nil {
		return "single (no --advertise-url)"
	}
	return n.ID() + " at " + url
}
