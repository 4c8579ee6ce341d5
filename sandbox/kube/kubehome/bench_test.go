package kubehome_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/kube/kubehome"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
)

// BenchmarkArchiveRestore: one sleep's archive and one wake's restore of
// a home of 100 random files, 20 MiB, in an awake pod (the real agent
// over loopback TLS) into a local key space, by kubehome (file requests,
// per-file objects) and by what a user would otherwise do: `tar -c` of
// the home through Exec into one object, and for the restore the tarball
// uploaded with a file request and `tar -x` through Exec (Exec has no
// stdin). Unchanged: a second archive of the same home, nothing changed
// (kubehome reads everything and puts nothing; tar sends it all again).
func BenchmarkArchiveRestore(b *testing.B) {
	const files, each = 100, 200 << 10
	c := kubetest.NewCluster(b)
	obj, err := homearchive.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	a := kubehome.New(obj)
	a.TempDir = b.TempDir()
	be, s := newSandboxes(b, c, nil)
	run(b, s, "bench", fmt.Sprintf("for i in $(seq %d); do mkdir -p d$((i%%10)); head -c %d /dev/urandom > d$((i%%10))/f$i; done", files, each))
	cl, err := be.Agent("bench")
	if err != nil {
		b.Fatal(err)
	}
	h := testHome{c: cl, dir: c.HomeDir}
	ctx := context.Background()
	sh := []string{"/bin/sh", "-c"}
	tarArchive := func(key string) {
		out, err := cl.Exec(ctx, agent.ExecRequest{Shell: sh, Command: "tar -C " + c.HomeDir + " -cf - .", Dir: "/", MaxBytes: 32 << 20}, nil)
		if err != nil || out.ExitCode != 0 || out.StdoutBytes != int64(len(out.Stdout)) || len(out.Stdout) < files*each {
			b.Fatal(out.ExitCode, string(out.Stderr), err)
		}
		if err := obj.Put(ctx, key, bytes.NewReader(out.Stdout), int64(len(out.Stdout))); err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	b.Run("kubehome", func(b *testing.B) {
		b.SetBytes(files * each)
		for b.Loop() {
			n++
			name := fmt.Sprintf("k%d", n)
			if err := a.Archive(ctx, name, h); err != nil {
				b.Fatal(err)
			}
			if err := a.Restore(ctx, name, h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tar-exec", func(b *testing.B) {
		b.SetBytes(files * each)
		for b.Loop() {
			n++
			key := fmt.Sprintf("t%d/home.tar", n)
			tarArchive(key)
			rc, err := obj.Get(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			_, err = cl.PutFile(ctx, c.HomeDir, ".home.tar", rc, 0)
			rc.Close()
			if err != nil {
				b.Fatal(err)
			}
			out, err := cl.Exec(ctx, agent.ExecRequest{Shell: sh, Command: "tar -xf .home.tar && rm .home.tar", Dir: c.HomeDir}, nil)
			if err != nil || out.ExitCode != 0 {
				b.Fatal(string(out.Stderr), err)
			}
		}
	})
	if err := a.Archive(ctx, "same", h); err != nil {
		b.Fatal(err)
	}
	b.Run("unchanged/kubehome", func(b *testing.B) {
		b.SetBytes(files * each)
		for b.Loop() {
			p := a.Stats().Puts
			if err := a.Archive(ctx, "same", h); err != nil || a.Stats().Puts != p {
				b.Fatal(err, a.Stats())
			}
		}
	})
	b.Run("unchanged/tar-exec", func(b *testing.B) {
		b.SetBytes(files * each)
		for b.Loop() {
			tarArchive("same.tar")
		}
	})
}

// BenchmarkHas: how a replica that never saw a sleeping sandbox finds it
// (kube.Sandboxes asks once per name): Has, one existence check of the
// manifest, against the other way to know the home is archived, Load
// (read, parse and check the manifest), for a home of 100 files archived
// in a local key space and in S3 (versitygw on loopback).
func BenchmarkHas(b *testing.B) {
	dir, err := homearchive.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	s3 := s3test.Open(b, s3test.NewBucket(b))
	c := kubetest.NewCluster(b)
	for _, st := range []struct {
		name string
		obj  homearchive.Objects
	}{{"dir", dir}, {"s3", s3.Objects("kubehomes")}} {
		a := kubehome.New(st.obj)
		a.TempDir = b.TempDir()
		_, s := newSandboxes(b, c, a)
		run(b, s, "asleep", "for i in $(seq 100); do echo $i > f$i; done")
		if err := s.Close(context.Background()); err != nil { // archives it
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(st.name+"/has", func(b *testing.B) {
			for b.Loop() {
				if ok, err := a.Has(ctx, "asleep"); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
		b.Run(st.name+"/load", func(b *testing.B) {
			for b.Loop() {
				if m, err := a.Load(ctx, "asleep"); m == nil || len(m.Files) != 100 || err != nil {
					b.Fatal(m, err)
				}
			}
		})
	}
}
