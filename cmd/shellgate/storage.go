package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/s3blobs"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/kube/kubehome"
	"github.com/shellgate/shellgate/sandbox/s3store"
)

const (
	storageEnv = "SHELLGATE_STORAGE"
	// archiveKeyEnv, if set (32 bytes or more, the same on every
	// replica), signs the home archive's manifests: a node then mounts
	// only homes that a holder of the key archived.
	archiveKeyEnv = "SHELLGATE_ARCHIVE_KEY"
)

func storageFlag(fs *flag.FlagSet) *string {
	return fs.String("storage", "", "where file bytes live: empty for DATA/files, or s3://BUCKET/PREFIX?endpoint=URL&region=R for S3-compatible storage shared by replicas, which also archives sleeping containers' homes (credentials: env AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; env "+storageEnv+")")
}

// storage is what --storage selects: the blobs of workspace files and
// uploads, and (for S3) the archive of sleeping homes.
type storage struct {
	blobs   store.Blobs
	archive sandbox.HomeArchive // nil: homes stay on this node
	// kubeHomes keeps the homes of sleeping Kubernetes sandboxes
	// (kubehome): S3 under PREFIX/kubehomes/, else DATA/kubehomes.
	kubeHomes  homearchive.Objects
	archiveKey []byte // SHELLGATE_ARCHIVE_KEY, nil when unset
	desc       string
	close      func() error
}

// kubeHomesDir is the local kubehome key space's directory under the data
// directory.
const kubeHomesDir = "kubehomes"

// archiveKey reads SHELLGATE_ARCHIVE_KEY: nil when unset.
func archiveKey() ([]byte, error) {
	k := os.Getenv(archiveKeyEnv)
	if k == "" {
		return nil, nil
	}
	if len(k) < 32 {
		return nil, fmt.Errorf("%s must be at least 32 bytes (got %d)", archiveKeyEnv, len(k))
	}
	return []byte(k), nil
}

// openStorage opens the storage --storage (else $SHELLGATE_STORAGE) names,
// or DATA/files.
func openStorage(ctx context.Context, spec, dataDir string) (*storage, error) {
	if spec == "" {
		spec = os.Getenv(storageEnv)
	}
	if spec == "" {
		dir := filepath.Join(dataDir, store.LocalBlobsDir)
		b, err := store.OpenLocalBlobs(dir)
		if err != nil {
			return nil, err
		}
		homes, err := homearchive.NewDir(filepath.Join(dataDir, kubeHomesDir))
		if err != nil {
			b.Close()
			return nil, err
		}
		key, err := archiveKey()
		if err != nil {
			b.Close()
			return nil, err
		}
		return &storage{blobs: b, kubeHomes: homes, archiveKey: key, desc: dir, close: b.Close}, nil
	}
	cfg, err := s3store.ParseURL(spec)
	if err != nil {
		return nil, err
	}
	// Uploads are spooled (and hashed) beside the data, not in /tmp.
	cfg.TempDir = filepath.Join(dataDir, "run")
	if err := os.MkdirAll(cfg.TempDir, 0o700); err != nil {
		return nil, err
	}
	s, err := s3store.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ar := homearchive.New(s.Objects("homes"))
	key, err := archiveKey()
	if err != nil {
		s.Close()
		return nil, err
	}
	ar.Key = key
	return &storage{blobs: s3blobs.New(s), archive: ar, kubeHomes: s.Objects(kubeHomesDir), archiveKey: key, desc: s.String(), close: s.Close}, nil
}

// kubeArchiver is the home archive of Kubernetes sandboxes in this
// storage; large files are spooled under DATA/run while archived.
func (s *storage) kubeArchiver(dataDir string) (*kubehome.Archiver, error) {
	a := kubehome.New(s.kubeHomes)
	a.Key = s.archiveKey
	a.TempDir = filepath.Join(dataDir, "run")
	if err := os.MkdirAll(a.TempDir, 0o700); err != nil {
		return nil, err
	}
	return a, nil
}
