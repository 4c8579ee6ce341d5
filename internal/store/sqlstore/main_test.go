package sqlstore

import (
	"testing"
	"time"

	"github.com/shellgate/shellgate/testenv"
)

// TestMain fails the package if a test leaves goroutines behind (a store
// or blob handle not closed, a writer still running).
func TestMain(m *testing.M) { testenv.RunCheckingLeaks(m, 5*time.Second, nil) }
