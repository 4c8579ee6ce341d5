// Command etcd is etcd's server at the version Kubernetes pins, built from
// the Go module proxy for make kube-e2e.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
