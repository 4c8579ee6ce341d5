package sandbox_test

import (
	"testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

var _ sandbox.CheckpointArchive = (*homearchive.Archive)(nil)

// Two nodes sharing a home archive: in a local directory and in S3
// (versitygw). The lifecycle logic is the runtime's least concern, so one
// runtime (crun) runs it.
func TestHomeArchive(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		sandboxtest.ArchiveSuite(t, "crun", func(t *testing.T) homearchive.Objects {
			d, err := homearchive.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return d
		})
	})
	t.Run("s3", func(t *testing.T) {
		sandboxtest.ArchiveSuite(t, "crun", func(t *testing.T) homearchive.Objects {
			return s3test.Open(t, s3test.NewBucket(t)).Objects("homes")
		})
	})
}

// Two nodes sharing a home archive on gVisor: the running state goes with
// the home (sandboxtest.CheckpointArchiveSuite), in a local directory and
// in S3 (versitygw).
func TestCheckpointArchive(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		sandboxtest.CheckpointArchiveSuite(t, func(t *testing.T) homearchive.Objects {
			d, err := homearchive.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return d
		})
	})
	t.Run("s3", func(t *testing.T) {
		sandboxtest.CheckpointArchiveSuite(t, func(t *testing.T) homearchive.Objects {
			return s3test.Open(t, s3test.NewBucket(t)).Objects("homes")
		})
	})
}
