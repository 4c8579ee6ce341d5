// Command shellgate-agent is the init process of every Shellgate sandbox.
// It is a static binary, bind-mounted read-only into the sandbox, speaking
// the frame protocol of package agent on its stdin and stdout.
//
//	shellgate-agent [-uid N] [-gid N] [-nproc N]
//
// runs commands as uid:gid (default: the agent's own user) with at most
// nproc processes and threads (RLIMIT_NPROC; default: unchanged).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/shellgate/shellgate/sandbox/agent"
)

func main() {
	var opts agent.Options
	flag.IntVar(&opts.UID, "uid", -1, "run commands as this user (needs CAP_SETUID, CAP_SETGID and CAP_KILL)")
	flag.IntVar(&opts.GID, "gid", -1, "run commands with this group")
	flag.Int64Var(&opts.Processes, "nproc", 0, "RLIMIT_NPROC of the commands' user: processes and threads")
	flag.Parse()
	if err := agent.Serve(os.Stdin, os.Stdout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "shellgate-agent:", err)
		os.Exit(1)
	}
}
