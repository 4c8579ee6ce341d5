package sandbox

import (
	"errors"
	"fmt"
	"io"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"
)

// Homes are sparse: a 5 GiB home takes a few MiB until files are written,
// so the homes of a data directory can promise more than the disk holds.
// Two things keep that from reaching the host: homes are mounted with
// `discard`, so space freed in a home goes back to the host, and a reserve
// of free space (Config.DiskReserve) that homes may not take. Below it, no
// home is created, no command starts and no file is copied in
// (ErrDiskReserve); reading files, sleeping and destroying sandboxes still
// work, so an operator can free space. A command already running when the
// host drops below the reserve is not stopped: its result says so in
// stderr, and the next command is refused.

// ErrDiskReserve: the host's free disk space is at or below the reserve
// the operator keeps free of homes.
var ErrDiskReserve = errors.New("the host's free disk space is below the reserve kept free of sandbox homes")

// defaultReserveFraction of the homes' file system is the default reserve.
const defaultReserveFraction = 20 // 1/20 = 5%

// diskSpace returns the size of the file system holding dir and what is
// available on it.
func diskSpace(dir string) (size, avail int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// checkReserve fails with ErrDiskReserve when less than the reserve is
// free on the homes' file system; what says what was refused.
func (m *Manager) checkReserve(what string) error {
	if m.cfg.DiskReserve < 0 {
		return nil
	}
	_, avail, err := diskSpace(m.dirs.homes)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if avail < m.cfg.DiskReserve {
		return fmt.Errorf("%s: %w: %s free on %s, the reserve is %s (free space on the host, or lower DiskReserve / --disk-reserve-mb)",
			what, ErrDiskReserve, humanize.IBytes(uint64(avail)), m.dirs.homes, humanize.IBytes(uint64(m.cfg.DiskReserve)))
	}
	return nil
}

// reserveCheckEvery is how many bytes a file copy writes between checks of
// the reserve.
const reserveCheckEvery = 16 << 20

// reserveReader fails a file copy into a home once the host is below the
// reserve, checked every reserveCheckEvery bytes.
type reserveReader struct {
	m     *Manager
	what  string
	r     io.Reader
	count int64
}

func (rr *reserveReader) Read(p []byte) (int, error) {
	if rr.count >= reserveCheckEvery {
		rr.count = 0
		if err := rr.m.checkReserve(rr.what); err != nil {
			return 0, err
		}
	}
	n, err := rr.r.Read(p)
	rr.count += int64(n)
	return n, err
}
