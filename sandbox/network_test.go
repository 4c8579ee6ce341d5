package sandbox_test

import (
	"os"
	"testing"

	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxtest.MaybeNetworkCrashHelper()
	os.Exit(m.Run())
}

func TestNetwork(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.NetworkSuite(t, rt) })
	}
}

func TestNetworkCrash(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.NetworkCrashSuite(t, rt) })
	}
}

// TestNetworkCycles: 200 create/destroy cycles of sandboxes with a
// network leave no veth, namespace or rule behind (crun: the fastest).
func TestNetworkCycles(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 20
	}
	sandboxtest.NetworkCycles(t, "crun", n)
}

func BenchmarkNetwork(b *testing.B) {
	for _, rt := range runtime.Names {
		b.Run(rt, func(b *testing.B) { sandboxtest.NetworkBench(b, rt) })
	}
}

func TestNetworkSharedHostUser(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.NetworkSharedHostUser(t, rt) })
	}
}
