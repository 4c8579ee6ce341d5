package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubehome"
)

// serveConfig is a `serve --config` file split by reader: the model
// providers with their aliases, and trace broadcast (upstream, broadcast) get the file without
// its `runtime:`, `database:` and `storage:` keys; `runtime:` selects the
// sandbox backend, `database:` the store and `storage:` the file storage
// (each as its flag, which wins, or its environment variable, which wins
// over the file). A file may hold any of them; unknown top-level keys are
// errors.
type serveConfig struct {
	// database and storage are what --database and --storage take.
	database, storage string
	// rest is the file without `runtime:`; nil when nothing else is in it.
	rest []byte
	// kube is set when `runtime:` selects Kubernetes.
	kube *kube.FileConfig
}

func parseServeConfig(b []byte) (serveConfig, error) {
	var top struct {
		Providers yaml.Node `yaml:"providers"`
		Aliases   yaml.Node `yaml:"aliases"`
		Broadcast yaml.Node `yaml:"broadcast"`
		Runtime   yaml.Node `yaml:"runtime"`
		Database  string    `yaml:"database"`
		Storage   string    `yaml:"storage"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&top); err != nil {
		return serveConfig{}, fmt.Errorf("not a valid config (top-level keys: providers, aliases, broadcast, runtime, database, storage): %w", err)
	}
	sc := serveConfig{database: top.Database, storage: top.Storage}
	if top.Runtime.Kind != 0 {
		if top.Runtime.Kind != yaml.MappingNode {
			return serveConfig{}, fmt.Errorf("runtime: want a mapping (backend: kubernetes, namespace, image, ...), line %d", top.Runtime.Line)
		}
		raw, err := yaml.Marshal(&top.Runtime)
		if err != nil {
			return serveConfig{}, fmt.Errorf("runtime: %w", err)
		}
		fc, err := kube.ParseFileConfig(raw)
		if err != nil {
			return serveConfig{}, err
		}
		sc.kube = &fc
	}
	rest := map[string]*yaml.Node{}
	for k, n := range map[string]*yaml.Node{"providers": &top.Providers, "aliases": &top.Aliases, "broadcast": &top.Broadcast} {
		if n.Kind != 0 {
			rest[k] = n
		}
	}
	if len(rest) > 0 {
		raw, err := yaml.Marshal(rest)
		if err != nil {
			return serveConfig{}, err
		}
		sc.rest = raw
	}
	return sc, nil
}

// orConfig is a setting's value: its flag's when given, else nothing when
// its environment variable is set (the opener reads it), else the config
// file's.
func orConfig(flagValue, env, fromFile string) string {
	if flagValue != "" || os.Getenv(env) != "" {
		return flagValue
	}
	return fromFile
}

// kubeCheckTimeout bounds serve's startup check of the API server.
const kubeCheckTimeout = 30 * time.Second

// openKubeSandboxes connects to the cluster of fc and checks, before the
// server starts, that the gateway's identity may do what sandboxes need.
// Homes are archived by kubehome in homes (the server's storage), so pods
// sleep after idle and a restarted gateway restores them.
func openKubeSandboxes(ctx context.Context, fc kube.FileConfig, idle time.Duration, homes *kubehome.Archiver, log *slog.Logger) (sandbox.Backend, error) {
	b, _, err := fc.Connect(kube.Config{Logger: log, Archiver: homes})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, kubeCheckTimeout)
	defer cancel()
	if err := b.Check(cctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("runtime (kubernetes): %w", err)
	}
	return kube.NewSandboxes(b, kube.SandboxesConfig{Shell: fc.Shell, IdleTimeout: idle}), nil
}

// readServeConfig reads and splits the --config file.
func readServeConfig(path string) (serveConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return serveConfig{}, err
	}
	sc, err := parseServeConfig(b)
	if err != nil {
		return serveConfig{}, fmt.Errorf("config %s: %w", path, err)
	}
	return sc, nil
}

var errKubeFlag = errors.New("applies to sandboxes on this machine; the config file's runtime: section runs them on Kubernetes")
