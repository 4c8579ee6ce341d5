package main

import (
	"flag"
	"os"
	"strconv"

	"github.com/shellgate/shellgate/sandbox"
)

// defaultDataDir is where Shellgate keeps images, homes, runtime state and
// keys: $SHELLGATE_DATA, else /var/lib/shellgate.
func defaultDataDir() string {
	if d := os.Getenv("SHELLGATE_DATA"); d != "" {
		return d
	}
	return "/var/lib/shellgate"
}

// dataDirFlag adds the shared --data-dir flag to a subcommand's flag set.
// The value is resolved once, when set (symlinks followed, made absolute),
// so every path a subcommand derives from it is the one the kernel's mount
// table shows.
func dataDirFlag(fs *flag.FlagSet) *string {
	v := dataDirValue{new(string)}
	if err := v.Set(defaultDataDir()); err != nil {
		// Unresolvable (e.g. a path through an unreadable directory):
		// keep it as given; sandbox.Open resolves again and reports.
		*v.p = defaultDataDir()
	}
	fs.Var(v, "data-dir", "data directory (env SHELLGATE_DATA); symlinks in it are resolved")
	return v.p
}

type dataDirValue struct{ p *string }

func (v dataDirValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v dataDirValue) Set(s string) error {
	r, err := sandbox.ResolveDataDir(s)
	if err != nil {
		return err
	}
	*v.p = r
	return nil
}

// diskReserveFlag adds --disk-reserve-mb: free space on the homes' file
// system that sandbox homes may not take (default $SHELLGATE_DISK_RESERVE_MB,
// else 5% of that file system; -1 for none). The returned function gives the
// value for sandbox.Config.DiskReserve.
func diskReserveFlag(fs *flag.FlagSet) func() int64 {
	def := int64(0)
	if v, err := strconv.ParseInt(os.Getenv("SHELLGATE_DISK_RESERVE_MB"), 10, 64); err == nil {
		def = v
	}
	mb := fs.Int64("disk-reserve-mb", def, "MiB of the homes' file system kept free: below it no home is created and no command starts (0: 5% of the file system, -1: none; env SHELLGATE_DISK_RESERVE_MB)")
	return func() int64 {
		switch {
		case *mb < 0:
			return -1
		case *mb == 0:
			return 0
		}
		return *mb << 20
	}
}
