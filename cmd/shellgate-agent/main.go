// Command shellgate-agent is the init process of every Shellgate sandbox.
// It is a static binary, bind-mounted read-only into the sandbox, speaking
// the frame protocol of package agent on its stdin and stdout.
package main

import (
	"fmt"
	"os"

	"github.com/shellgate/shellgate/sandbox/agent"
)

func main() {
	if err := agent.Serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shellgate-agent:", err)
		os.Exit(1)
	}
}
