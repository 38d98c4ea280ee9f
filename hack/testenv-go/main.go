// Command testenv runs a real, local Kubernetes control plane on loopback:
// embedded etcd, kube-apiserver, kube-controller-manager, a trivial
// scheduler and a process-kubelet that runs the Pods of mapped images as local
// processes, each on its own 127.0.0.x address. It is also a multi-call binary:
// invoked as `kubectl` (by name or as `testenv kubectl ...`) it is kubectl.
//
// See docs/testenv.md.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  testenv serve [flags]      run the cluster in the foreground (hack/testenv up runs it in the background)
  testenv status [--state-dir DIR]
                             exit 0 when the cluster in DIR answers /readyz
  testenv kubectl ...        kubectl (also when invoked through a link named kubectl)
  testenv version
`)
}

func main() {
	base := filepath.Base(os.Args[0])
	if base == "kubectl" {
		os.Exit(runKubectl(os.Args))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(runServe(os.Args[2:]))
	case "status":
		os.Exit(runStatus(os.Args[2:]))
	case "kubectl":
		os.Exit(runKubectl(append([]string{"kubectl"}, os.Args[2:]...)))
	case "version":
		fmt.Println(versionString())
	case "-h", "--help", "help":
		usage()
	default:
		usage()
		os.Exit(2)
	}
}
