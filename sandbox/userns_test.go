package sandbox_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestUserNS(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.UserNSSuite(t, rt) })
	}
}

func TestUserNSInotify(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.InotifySuite(t, rt) })
	}
}

func TestUserNSSlotsAfterCrash(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { sandboxtest.SlotCrashSuite(t, rt) })
	}
}
