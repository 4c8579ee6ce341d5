package jsrun_test

import (
	"testing"

	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/jsrun/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) jsrun.ContinuationStore { return jsrun.NewMemoryStore() })
}
