package upstream

import (
	"net/http"
	"testing"
	"time"

	"github.com/shellgate/shellgate/testenv"
)

// TestMain fails the package if a test leaves goroutines behind (a call,
// a stream or a connection never let go of).
func TestMain(m *testing.M) {
	testenv.RunCheckingLeaks(m, 10*time.Second, func() {
		http.DefaultClient.CloseIdleConnections()
		defaultClient.CloseIdleConnections()
	})
}
