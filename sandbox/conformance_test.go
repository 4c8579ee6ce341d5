package sandbox_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.Suite(t, rt) })
	}
}

func TestCrashRecovery(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.CrashSuite(t, rt) })
	}
}

func TestLifecycle(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.LifecycleSuite(t, rt) })
	}
}
