package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

// TestKubeHomeStorage: serve's kubernetes backend on the home archive of
// its local storage (DATA/kubehomes): 1. an idle pod sleeps and its home
// is in the archive; 2. a gateway restarted on the same data directory
// (storage reopened, new backend) wakes it with its files; 3. a short
// archive key is refused.
func TestKubeHomeStorage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := kubetest.NewCluster(t)
	data := t.TempDir()
	start := func(idle time.Duration) (*storage, *kube.Sandboxes) {
		t.Helper()
		st, err := openStorage(ctx, "", data)
		if err != nil {
			t.Fatal(err)
		}
		kh, err := st.kubeArchiver(data)
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.Config()
		cfg.Archiver = kh
		b, err := kube.New(c.CS, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st, kube.NewSandboxes(b, kube.SandboxesConfig{Shell: []string{"/bin/sh", "-c"}, IdleTimeout: idle})
	}
	st, s := start(200 * time.Millisecond)
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "mkdir -p d && echo kept > d/f"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	for stt, _ := s.Status("c1"); stt != sandbox.Sleeping; stt, _ = s.Status("c1") {
		if ctx.Err() != nil {
			t.Fatal("1: never slept")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(data, kubeHomesDir, "c1", "manifest.json")); err != nil {
		t.Fatalf("1: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st.close()

	st, s = start(-1)
	defer st.close()
	defer s.Close(context.Background())
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "cat d/f"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("2: %+v %v", res, err)
	}

	t.Setenv(archiveKeyEnv, "short")
	if _, err := openStorage(ctx, "", t.TempDir()); err == nil {
		t.Fatal("3: a short archive key was taken")
	}
}
