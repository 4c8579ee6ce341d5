package sandbox_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.Suite)
}

func TestCrashRecovery(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.CrashSuite)
}

func TestLifecycle(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.LifecycleSuite)
}

func TestCheckpoint(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.CheckpointSuite)
}
