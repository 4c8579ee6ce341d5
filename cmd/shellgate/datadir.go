package main

import (
	"flag"
	"os"
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
func dataDirFlag(fs *flag.FlagSet) *string {
	return fs.String("data-dir", defaultDataDir(), "data directory (env SHELLGATE_DATA)")
}
