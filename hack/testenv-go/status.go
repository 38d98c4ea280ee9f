package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// runStatus exits 0 when the cluster of the state dir answers /readyz with
// its kubeconfig, printing a short summary; 1 otherwise.
func runStatus(args []string) int {
	cwd, _ := os.Getwd()
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	stateDir := fs.String("state-dir", filepath.Join(cwd, "target", "testenv"), "state directory")
	quiet := fs.Bool("q", false, "print nothing")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to try")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	say := func(f string, a ...any) {
		if !*quiet {
			fmt.Printf(f, a...)
		}
	}
	// The ready file, rewritten at every start, names the second apiserver's
	// kubeconfig when it runs one (a kubeconfig-2 may be left from a run before):
	// then both must answer.
	kc := filepath.Join(*stateDir, "kubeconfig")
	kubeconfigs := []string{kc}
	if ready, err := os.ReadFile(filepath.Join(*stateDir, "ready")); err == nil {
		for _, l := range strings.Split(string(ready), "\n") {
			if kc2, ok := strings.CutPrefix(l, "kubeconfig2="); ok {
				kubeconfigs = append(kubeconfigs, kc2)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var client kubernetes.Interface
	for i, path := range kubeconfigs {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			say("not running: %v\n", err)
			return 1
		}
		cfg.Timeout = *timeout
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			say("not running: %v\n", err)
			return 1
		}
		name := "apiserver"
		if i > 0 {
			name = fmt.Sprintf("apiserver%d", i+1)
		}
		if _, err := c.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			say("not ready: %s %s: %v\n", name, cfg.Host, err)
			return 1
		}
		say("%-10s %s (ready, %s)\n", name, cfg.Host, filepath.Base(path))
		if client == nil {
			client = c
		}
	}
	say("kubeconfig %s\n", kc)
	if v, err := client.Discovery().ServerVersion(); err == nil {
		say("version    %s\n", v.GitVersion)
	}
	if nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			ready := "NotReady"
			for _, c := range n.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" {
					ready = "Ready"
				}
			}
			say("node       %s %s\n", n.Name, ready)
		}
	}
	if pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		say("pods       %d\n", len(pods.Items))
	}
	return 0
}
