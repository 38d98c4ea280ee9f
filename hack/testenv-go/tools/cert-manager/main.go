// cert-manager's controller for the local cluster (docs/testenv.md, tests/tests/certs_cert_manager.rs).
//
// The release's own main package (cmd/controller) is a separate Go module that is not
// published with version tags, so it cannot be required from the module proxy; the
// controllers themselves are in the main module github.com/cert-manager/cert-manager, and
// this program runs them the way cmd/controller/app does: one ContextFactory, the
// controllers built from their registered constructors, the informer factories started,
// each controller's Run. Only the controllers a SelfSigned/CA issuer chain needs are
// linked in (no ACME, Vault, Venafi, ingress or gateway shims), which keeps the build small;
// no leader election, webhook or cainjector.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each package registers its controller (controllerpkg.Register) or issuer type.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	clusterNS := flag.String("cluster-resource-namespace", "cert-manager", "namespace of the Secrets ClusterIssuers read (a CA ClusterIssuer's key pair)")
	namespace := flag.String("namespace", "", "watch only this namespace (empty: all)")
	ownerRef := flag.Bool("enable-certificate-owner-ref", false, "make each Certificate the owner of its Secret, so deleting it deletes the Secret")
	workers := flag.Int("concurrent-workers", 5, "workers per controller")
	leaderElect := flag.Bool("leader-elect", false, "accepted for the release's flag set; only false is supported (one process)")
	qps := flag.Float64("kube-api-qps", 20, "client QPS")
	burst := flag.Int("kube-api-burst", 50, "client burst")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	if *leaderElect {
		fmt.Fprintln(os.Stderr, "cert-manager (testenv): --leader-elect=true is not supported; run one process")
		os.Exit(2)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx = logf.NewContext(ctx, logf.Log, "cert-manager")
	log := logf.FromContext(ctx)

	opts := controllerpkg.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   float32(*qps),
		KubernetesAPIBurst: *burst,
		Namespace:          *namespace,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: *clusterNS},
		CertificateOptions: controllerpkg.CertificateOptions{
			EnableOwnerRef: *ownerRef,
			// The release's defaults (cmd/controller/app/options).
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager (testenv): %v\n", err)
		os.Exit(1)
	}
	shared, err := factory.Build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager (testenv): %v\n", err)
		os.Exit(1)
	}

	known := controllerpkg.Known()
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	type run struct {
		name string
		c    controllerpkg.Interface
	}
	var runs []run
	for _, n := range names {
		c, err := known[n](factory)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cert-manager (testenv): controller %s: %v\n", n, err)
			os.Exit(1)
		}
		runs = append(runs, run{n, c})
	}
	// Informers are requested while the controllers register; start them only after.
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("starting controllers", "controllers", strings.Join(names, ","), "clusterResourceNamespace", *clusterNS)

	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			if err := r.c.Run(*workers, ctx); err != nil {
				log.Error(err, "controller stopped", "controller", r.name)
				cancel()
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	logf.FlushLogs()
}
