package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/shellgate/shellgate/testenv"
)

// TestMain fails the package if a test leaves goroutines behind: a call
// or stream still running, a manager or store not closed, a connection
// the server never let go of.
func TestMain(m *testing.M) {
	testenv.RunCheckingLeaks(m, 10*time.Second, http.DefaultClient.CloseIdleConnections)
}
