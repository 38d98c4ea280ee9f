package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
	kc := filepath.Join(*stateDir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		say("not running: %v\n", err)
		return 1
	}
	cfg.Timeout = *timeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		say("not running: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if _, err := client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		say("not ready: %v\n", err)
		return 1
	}
	say("apiserver  %s (ready)\n", cfg.Host)
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
