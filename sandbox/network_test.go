package sandbox_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestNetwork(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.NetworkSuite(t, rt) })
	}
}
