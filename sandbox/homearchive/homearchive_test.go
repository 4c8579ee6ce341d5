package homearchive_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/homearchive/archivetest"
)

func TestDirConformance(t *testing.T) {
	archivetest.Run(t, func(t *testing.T) homearchive.Objects {
		d, err := homearchive.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
