// Command shellgate-agent is the init process of every Shellgate sandbox.
// It is a static binary, bind-mounted read-only into the sandbox, speaking
// the frame protocol of package agent on its stdin and stdout.
//
//	shellgate-agent [-uid N] [-gid N] [-nproc N]
//
// runs commands as uid:gid (default: the agent's own user) with at most
// nproc processes and threads (RLIMIT_NPROC; default: unchanged).
//
//	shellgate-agent -listen :7070 -credentials DIR [...]
//
// is the network mode of a Kubernetes pod: the agent serves TLS on the
// address with DIR's tls.crt and tls.key, serves every connection whose
// first frame carries DIR's token (their commands one at a time, in the
// order they arrived), and exits when the last connection it serves ends.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/shellgate/shellgate/sandbox/agent"
)

func main() {
	var opts agent.Options
	flag.IntVar(&opts.UID, "uid", -1, "run commands as this user (needs CAP_SETUID, CAP_SETGID and CAP_KILL)")
	flag.IntVar(&opts.GID, "gid", -1, "run commands with this group")
	flag.Int64Var(&opts.Processes, "nproc", 0, "RLIMIT_NPROC of the commands' user: processes and threads")
	listen := flag.String("listen", "", "serve on this TCP address (TLS + token) instead of stdin/stdout")
	creds := flag.String("credentials", "", "with -listen: directory holding tls.crt, tls.key and token")
	flag.Parse()
	if err := run(*listen, *creds, opts); err != nil {
		fmt.Fprintln(os.Stderr, "shellgate-agent:", err)
		os.Exit(1)
	}
}

func run(listen, credDir string, opts agent.Options) error {
	if listen == "" {
		if credDir != "" {
			return fmt.Errorf("-credentials needs -listen")
		}
		return agent.Serve(os.Stdin, os.Stdout, opts)
	}
	if credDir == "" {
		return fmt.Errorf("-listen needs -credentials: the pod network is not trusted")
	}
	c, err := agent.ReadCredentials(credDir)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "shellgate-agent: listening on", ln.Addr())
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "shellgate-agent: "+format+"\n", args...) }
	return agent.ServeTLS(ln, c, opts, logf)
}
