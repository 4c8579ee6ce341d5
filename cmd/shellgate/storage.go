package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shellgate/shellgate/internal/s3store"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/homearchive"
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
	desc    string
	close   func() error
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
		return &storage{blobs: b, desc: dir, close: b.Close}, nil
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
	if k := os.Getenv(archiveKeyEnv); k != "" {
		if len(k) < 32 {
			s.Close()
			return nil, fmt.Errorf("%s must be at least 32 bytes (got %d)", archiveKeyEnv, len(k))
		}
		ar.Key = []byte(k)
	}
	return &storage{blobs: s.Blobs(), archive: ar, desc: s.String(), close: s.Close}, nil
}
