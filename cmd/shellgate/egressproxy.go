package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/egress/kubeproxy"
	"github.com/shellgate/shellgate/sandbox/kube"
)

func init() {
	register("egress-proxy", "the egress proxy of sandbox pods on Kubernetes (deploy/kubernetes/04-egress-proxy.yaml)", runEgressProxy)
}

func runEgressProxy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("egress-proxy", flag.ContinueOnError)
	listen := fs.String("listen", "0.0.0.0:3128", "address of the proxy (sandbox pods' HTTP_PROXY and HTTPS_PROXY)")
	namespace := fs.String("namespace", "shellgate", "namespace of the sandbox pods")
	node := fs.String("node", os.Getenv("NODE_NAME"), "serve only the sandbox pods on this node (default $NODE_NAME; empty: every node's)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: the pod's service account)")
	kubeContext := fs.String("context", "", "kubeconfig context (default: its current one)")
	metricsAddr := fs.String("metrics-listen", "", "address serving /metrics (Prometheus) and /healthz; empty: none. Keep it off the proxy's port: sandboxes can reach that one")
	dialTimeout := fs.Duration("dial-timeout", 10*time.Second, "bound on resolving and connecting to an upstream")
	maxConns := fs.Int("max-conns", 16384, "most client connections in flight")
	maxPerPod := fs.Int("max-conns-per-pod", 512, "most connections in flight from one sandbox pod")
	logFormat := fs.String("log-format", "json", "log format: json or text")
	setUsage(fs, "usage: shellgate egress-proxy [flags]\n\nAn explicit HTTP proxy (CONNECT host:443, absolute-form http:// requests) for sandbox pods. Each connection's pod is found by its source address among the namespace's running sandbox pods; its shellgate.dev/allowed-domains annotation is its allowlist, applied with the local engine's rules (names only, ports 80 and 443, no private, loopback, link-local or metadata addresses). Needs pods get/list/watch in the namespace.")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitError{2}
	}
	if *maxConns <= 0 || *maxPerPod <= 0 || *dialTimeout <= 0 {
		return errors.New("--max-conns, --max-conns-per-pod and --dial-timeout must be positive")
	}
	log, err := newLogger(*logFormat)
	if err != nil {
		return err
	}

	rc, err := kube.FileConfig{Kubeconfig: *kubeconfig, Context: *kubeContext}.RESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	pods, err := kubeproxy.NewPods(cs, *namespace, *node)
	if err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer func() { stopWatch(); pods.Shutdown() }()
	if err := pods.Start(wctx, time.Minute); err != nil {
		return err
	}
	x, err := egress.NewExplicit(egress.ExplicitConfig{
		Client: pods.Client, MaxConns: *maxConns, MaxConnsPerClient: *maxPerPod,
		DialTimeout: *dialTimeout, Logger: log,
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(x.Collectors()...)
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
		ml, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			l.Close()
			return err
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ml)
		defer srv.Close()
	}
	log.Info("egress proxy listening", "addr", l.Addr().String(), "namespace", *namespace, "node", *node)
	done := make(chan error, 1)
	go func() { done <- x.Serve(l) }()
	select {
	case <-ctx.Done():
		x.Close()
		<-done
		return nil
	case err := <-done:
		x.Close()
		return err
	}
}
