package sandbox_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestFiles(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.FilesSuite)
}
