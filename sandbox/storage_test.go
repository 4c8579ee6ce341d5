package sandbox_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestStorage(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.StorageSuite)
}
