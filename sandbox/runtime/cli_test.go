package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func testSpec(t *testing.T) *Config {
	t.Helper()
	dir := t.TempDir()
	return Spec(SpecOptions{ID: "sg-test", Rootfs: filepath.Join(dir, "rootfs"), Home: filepath.Join(dir, "home"), Agent: filepath.Join(dir, "agent"), Limits: DefaultLimits()})
}

// Adjust gives crun and runc Docker's default profile: errno by default,
// the allowed syscalls listed.
func TestAdjustAddsSeccomp(t *testing.T) {
	for _, name := range []string{"crun", "runc"} {
		spec := testSpec(t)
		if err := newCLI(name, t.TempDir()).Adjust(spec); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := spec.Linux.Seccomp
		if p == nil || p.DefaultAction != specs.ActErrno || len(p.Syscalls) == 0 {
			t.Fatalf("%s: no usable seccomp profile in the spec: %+v", name, p)
		}
	}
}

// When the profile cannot be built, Adjust fails and leaves no profile-less
// spec that could be started by mistake (issue 6 item 7: it used to drop
// the profile silently).
func TestAdjustFailsClosedWithoutProfile(t *testing.T) {
	saved := seccompProfile
	t.Cleanup(func() { seccompProfile = saved })
	for _, tc := range []struct {
		name  string
		build func(*specs.Spec) (*specs.LinuxSeccomp, error)
	}{
		{"build error", func(*specs.Spec) (*specs.LinuxSeccomp, error) {
			return nil, errors.New("injected: unknown architecture")
		}},
		{"no profile", func(*specs.Spec) (*specs.LinuxSeccomp, error) { return nil, nil }},
		{"empty profile", func(*specs.Spec) (*specs.LinuxSeccomp, error) {
			return &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, nil
		}},
	} {
		seccompProfile = tc.build
		for _, name := range []string{"crun", "runc"} {
			spec := testSpec(t)
			err := newCLI(name, t.TempDir()).Adjust(spec)
			if err == nil || !strings.Contains(err.Error(), "seccomp") {
				t.Errorf("%s, %s: Adjust returned %v, want a seccomp error", tc.name, name, err)
			}
		}
	}
	// gVisor filters syscalls in its own sentry: its Adjust does not use
	// the profile and still works.
	if err := newCLI("runsc", t.TempDir()).Adjust(testSpec(t)); err != nil {
		t.Errorf("runsc: %v", err)
	}
}

// crun and runc refuse to start a bundle that has no seccomp profile,
// however it was made: the runtime never runs the container.
func TestStartRefusesBundleWithoutSeccomp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting containers needs root")
	}
	for _, name := range []string{"crun", "runc"} {
		t.Run(name, func(t *testing.T) {
			rt, err := New(name, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := rt.Check(ctx); err != nil {
				t.Fatalf("runtime %s does not work here: %v", name, err)
			}
			bundle := t.TempDir()
			spec := testSpec(t) // never Adjusted: no profile
			if err := WriteBundle(bundle, spec); err != nil {
				t.Fatal(err)
			}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			err = rt.Start(ctx, "sg-noseccomp", bundle, Stdio{In: r, Out: w})
			if err == nil || !strings.Contains(err.Error(), "no seccomp profile") {
				t.Fatalf("Start of a bundle without seccomp: %v", err)
			}
			if ids, err := rt.List(ctx); err != nil || len(ids) != 0 {
				t.Errorf("containers after a refused start: %v %v", ids, err)
			}
		})
	}
}
