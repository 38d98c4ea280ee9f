package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	apiservercompat "k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// defaultControllers is the set of kube-controller-manager controllers the
// testenv runs. The endpoints/endpointslice controllers are left out: Pod IPs
// here are loopback addresses, which the API rejects in Endpoints and
// EndpointSlices; Services are routed by the testenv service resolver instead.
const defaultControllers = "deployment-controller,replicaset-controller,garbage-collector-controller," +
	"serviceaccount-token-controller,serviceaccount-controller,namespace-controller," +
	"root-ca-certificate-publisher-controller,clusterrole-aggregation-controller," +
	"statefulset-controller,daemonset-controller,job-controller,cronjob-controller," +
	"disruption-controller,horizontal-pod-autoscaler-controller,ttl-after-finished-controller," +
	"pod-garbage-collector-controller"

type serveConfig struct {
	stateDir       string
	repoRoot       string
	apiserverPort  int
	apiservers     int
	apiserver2Port int
	etcdPort       int
	featureGates   string
	controllers    string
	nodeName       string
	podIPRange     string
	images         multiFlag
	imageMapFile   string
	keepData       bool
	verbosity      int
	extraAPIFlags  multiFlag
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func versionString() string {
	return fmt.Sprintf("dco testenv, Kubernetes %s", version.Get().GitVersion)
}

func runServe(args []string) int {
	cwd, _ := os.Getwd()
	cfg := serveConfig{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&cfg.stateDir, "state-dir", filepath.Join(cwd, "target", "testenv"), "directory for state, pods, logs and kubeconfig")
	fs.StringVar(&cfg.repoRoot, "repo-root", cwd, "relative binary paths of the image map are resolved against this directory")
	fs.IntVar(&cfg.apiserverPort, "apiserver-port", envInt("DCO_TESTENV_APISERVER_PORT", 0), "kube-apiserver secure port on 127.0.0.1 (0: a free port)")
	fs.IntVar(&cfg.apiservers, "apiservers", envInt("DCO_TESTENV_APISERVERS", 2), "kube-apiservers on the one etcd, 1 or 2 (the second serves <state-dir>/kubeconfig-2)")
	fs.IntVar(&cfg.apiserver2Port, "apiserver2-port", envInt("DCO_TESTENV_APISERVER2_PORT", 0), "the second kube-apiserver's secure port on 127.0.0.1 (0: a free port)")
	fs.IntVar(&cfg.etcdPort, "etcd-port", envInt("DCO_TESTENV_ETCD_PORT", 0), "etcd client port on 127.0.0.1 (0: a free port)")
	fs.StringVar(&cfg.featureGates, "feature-gates", envStr("DCO_TESTENV_FEATURE_GATES", "ShardedListAndWatch=true"), "kube-apiserver/controller-manager feature gates")
	fs.StringVar(&cfg.controllers, "controllers", envStr("DCO_TESTENV_CONTROLLERS", defaultControllers), "kube-controller-manager --controllers")
	fs.StringVar(&cfg.nodeName, "node-name", "testenv", "name of the process-kubelet's Node")
	fs.StringVar(&cfg.podIPRange, "pod-ip-range", envStr("DCO_TESTENV_POD_IP_RANGE", "127.0.0.2-127.0.0.254"), "loopback addresses handed out as Pod IPs (FIRST-LAST)")
	fs.Var(&cfg.images, "image", "image map entry NAME=PATH (repeatable); also DCO_TESTENV_IMAGES=NAME=PATH,... and the image map file")
	fs.StringVar(&cfg.imageMapFile, "image-map-file", "", "image map file, re-read on every Pod start (default <state-dir>/images)")
	fs.BoolVar(&cfg.keepData, "keep-data", false, "keep etcd data from the previous run (default: start empty)")
	fs.IntVar(&cfg.verbosity, "v", envInt("DCO_TESTENV_V", 0), "klog verbosity")
	fs.Var(&cfg.extraAPIFlags, "apiserver-arg", "extra kube-apiserver flag, e.g. --apiserver-arg=--audit-log-path=... (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if cfg.apiservers != 1 && cfg.apiservers != 2 {
		fmt.Fprintf(os.Stderr, "--apiservers (DCO_TESTENV_APISERVERS) must be 1 or 2, not %d\n", cfg.apiservers)
		return 2
	}
	if cfg.imageMapFile == "" {
		cfg.imageMapFile = filepath.Join(cfg.stateDir, "images")
	}
	if err := serve(cfg); err != nil {
		klog.ErrorS(err, "testenv failed")
		klog.Flush()
		return 1
	}
	return 0
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if v := os.Getenv(k); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return *u
}

func serve(cfg serveConfig) error {
	stateDir, err := filepath.Abs(cfg.stateDir)
	if err != nil {
		return err
	}
	cfg.stateDir = stateDir
	for _, d := range []string{"logs", "pods", "run"} {
		if err := os.MkdirAll(filepath.Join(stateDir, d), 0o755); err != nil {
			return err
		}
	}
	os.Remove(filepath.Join(stateDir, "ready"))
	if err := os.WriteFile(filepath.Join(stateDir, "run", "testenv.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigCh := make(chan os.Signal, 2)
	signal.Notify(sigCh, syscall.SIGTERM, syscall.SIGINT)

	// --- certificates -------------------------------------------------------
	pk := newPKI(filepath.Join(stateDir, "pki"))
	if err := pk.ensure(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}

	// --- ports ----------------------------------------------------------------
	apiLn, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.apiserverPort)))
	if err != nil {
		return fmt.Errorf("apiserver listener: %w", err)
	}
	apiPort := apiLn.Addr().(*net.TCPAddr).Port
	etcdPort := cfg.etcdPort
	if etcdPort == 0 {
		if etcdPort, err = freePort(); err != nil {
			return err
		}
	}
	etcdPeerPort, err := freePort()
	if err != nil {
		return err
	}
	host := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	// The second apiserver: same etcd, flags and serving certificate (its SANs
	// hold 127.0.0.1), its own port, CRD informer and storage.
	var api2Ln net.Listener
	var api2Port int
	var host2 string
	kubeconfig2Path := filepath.Join(stateDir, "kubeconfig-2")
	os.Remove(kubeconfig2Path)
	if cfg.apiservers == 2 {
		if api2Ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.apiserver2Port))); err != nil {
			return fmt.Errorf("second apiserver listener: %w", err)
		}
		api2Port = api2Ln.Addr().(*net.TCPAddr).Port
		host2 = "https://127.0.0.1:" + strconv.Itoa(api2Port)
	}

	// --- kubeconfig -------------------------------------------------------------
	kubeconfigPath := filepath.Join(stateDir, "kubeconfig")
	if err := writeAdminKubeconfig(kubeconfigPath, host, pk); err != nil {
		return err
	}
	adminCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return err
	}
	adminCfg.QPS, adminCfg.Burst = 200, 400

	// --- etcd -------------------------------------------------------------------
	etcdDir := filepath.Join(stateDir, "etcd")
	if !cfg.keepData {
		os.RemoveAll(etcdDir)
	}
	ecfg := embed.NewConfig()
	ecfg.Name = "testenv"
	ecfg.Dir = etcdDir
	ecfg.ListenClientUrls = []url.URL{mustURL(fmt.Sprintf("http://127.0.0.1:%d", etcdPort))}
	ecfg.AdvertiseClientUrls = ecfg.ListenClientUrls
	ecfg.ListenPeerUrls = []url.URL{mustURL(fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort))}
	ecfg.AdvertisePeerUrls = ecfg.ListenPeerUrls
	ecfg.InitialCluster = ecfg.InitialClusterFromName(ecfg.Name)
	ecfg.ListenMetricsUrls = nil
	ecfg.LogLevel = "error"
	ecfg.Logger = "zap"
	ecfg.LogOutputs = []string{"stderr"}
	ecfg.UnsafeNoFsync = true
	ecfg.QuotaBackendBytes = 4 << 30
	ecfg.AutoCompactionMode = "periodic"
	ecfg.AutoCompactionRetention = "5m"
	etcd, err := embed.StartEtcd(ecfg)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	var closeEtcd sync.Once
	defer closeEtcd.Do(etcd.Close)
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return errors.New("etcd did not become ready in 60s")
	}
	klog.InfoS("etcd ready", "port", etcdPort)

	// --- shared pieces --------------------------------------------------------
	images := newImageMap(cfg.repoRoot, cfg.imageMapFile, cfg.images)
	resolver := newServiceResolver(apiPort)
	apiserverapp.SetServiceResolverForTests(resolver)

	// --- kube-apiserver -----------------------------------------------------------
	apiErr := make(chan error, 1)
	if err := startAPIServer(ctx, cfg, pk, apiLn, etcdPort, false, apiErr); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	client, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		return err
	}
	if err := waitReadyz(ctx, client, apiErr, 3*time.Minute); err != nil {
		return err
	}
	klog.InfoS("kube-apiserver ready", "host", host)

	var wg sync.WaitGroup
	resolver.start(ctx, client)

	// --- the second kube-apiserver -------------------------------------------------
	// Started once the first is ready: it then finds the cluster bootstrapped,
	// and the first has read the hostname its identity Lease is named after.
	// It comes up while the controller-manager and the kubelet do.
	var api2Err chan error // nil with one apiserver: never ready to receive
	var client2 kubernetes.Interface
	if api2Ln != nil {
		if err := writeAdminKubeconfig(kubeconfig2Path, host2, pk); err != nil {
			return err
		}
		cfg2, err := clientcmd.BuildConfigFromFlags("", kubeconfig2Path)
		if err != nil {
			return err
		}
		if client2, err = kubernetes.NewForConfig(cfg2); err != nil {
			return err
		}
		api2Err = make(chan error, 1)
		if err := startAPIServer(ctx, cfg, pk, api2Ln, etcdPort, true, api2Err); err != nil {
			return fmt.Errorf("second kube-apiserver: %w", err)
		}
	}

	// --- kube-controller-manager -------------------------------------------------
	kcmErr := make(chan error, 1)
	if err := startControllerManager(ctx, cfg, pk, kubeconfigPath, kcmErr); err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}

	// --- scheduler + process-kubelet ----------------------------------------------
	kl, err := newKubelet(kubeletConfig{
		nodeName:   cfg.nodeName,
		stateDir:   stateDir,
		apiHost:    host,
		apiPort:    apiPort,
		caFile:     pk.CACert,
		servingCrt: pk.KubeletCert,
		servingKey: pk.KubeletKey,
		images:     images,
		ipRange:    cfg.podIPRange,
	}, client)
	if err != nil {
		return err
	}
	wg.Add(2)
	go func() { defer wg.Done(); runBinder(ctx, client, cfg.nodeName) }()
	go func() { defer wg.Done(); kl.run(ctx) }()
	if err := kl.waitRegistered(ctx, time.Minute); err != nil {
		return err
	}
	if client2 != nil {
		if err := waitReadyz(ctx, client2, api2Err, 3*time.Minute); err != nil {
			return fmt.Errorf("second kube-apiserver: %w", err)
		}
		klog.InfoS("second kube-apiserver ready", "host", host2)
	}

	ready := fmt.Sprintf("pid=%d\nhost=%s\napiserver_port=%d\netcd_port=%d\nkubeconfig=%s\n", os.Getpid(), host, apiPort, etcdPort, kubeconfigPath)
	if client2 != nil {
		ready += fmt.Sprintf("host2=%s\napiserver2_port=%d\nkubeconfig2=%s\n", host2, api2Port, kubeconfig2Path)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "ready"), []byte(ready), 0o644); err != nil {
		return err
	}
	klog.InfoS("testenv ready", "host", host, "kubeconfig", kubeconfigPath)

	var runErr error
	select {
	case s := <-sigCh:
		klog.InfoS("shutting down", "signal", s.String())
	case err := <-apiErr:
		runErr = fmt.Errorf("kube-apiserver exited: %w", err)
	case err := <-api2Err:
		runErr = fmt.Errorf("second kube-apiserver exited: %w", err)
	case err := <-kcmErr:
		runErr = fmt.Errorf("kube-controller-manager exited: %w", err)
	}
	os.Remove(filepath.Join(stateDir, "ready"))
	// Stop the pods first (graceful, bounded), then the control plane.
	kl.shutdown(15 * time.Second)
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	for _, ch := range []chan error{apiErr, api2Err} {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
		}
	}
	closeEtcd.Do(etcd.Close)
	os.Remove(filepath.Join(stateDir, "run", "testenv.pid"))
	klog.Flush()
	return runErr
}

func writeAdminKubeconfig(path, host string, pk *pki) error {
	ca, err := os.ReadFile(pk.CACert)
	if err != nil {
		return err
	}
	crt, err := os.ReadFile(pk.AdminCert)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(pk.AdminKey)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	kc.AuthInfos["testenv-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "testenv-admin", Namespace: "default"}
	kc.CurrentContext = "testenv"
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(*kc, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func waitReadyz(ctx context.Context, client kubernetes.Interface, errCh chan error, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-errCh:
			errCh <- err
			return false, fmt.Errorf("kube-apiserver exited: %w", err)
		default:
		}
		body, err := client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = err.Error() + ": " + string(body)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for /readyz: %w (last: %s)", err, last)
	}
	return nil
}

// startAPIServer runs a kube-apiserver in this process. second is the second
// one on the same etcd: it gets the same flags, but process-wide settings are
// left as the first applied them.
func startAPIServer(ctx context.Context, cfg serveConfig, pk *pki, ln net.Listener, etcdPort int, second bool, errCh chan error) error {
	s := apiserveroptions.NewServerRunOptions()
	if second {
		// As kube's own multi-apiserver integration tests do (kastesting.StartTestServer):
		// a registry of its own around a copy of the feature gate, so that Set()
		// does not re-set the process-wide gate the first apiserver is reading.
		// The flags are the same, so the copy ends up equal to it.
		reg := basecompatibility.NewComponentGlobalsRegistry()
		if err := reg.Register(basecompatibility.DefaultKubeComponent, apiservercompat.DefaultBuildEffectiveVersion(), utilfeature.DefaultMutableFeatureGate.DeepCopy()); err != nil {
			return err
		}
		s.GenericServerRunOptions.ComponentGlobalsRegistry = reg
		// Its own identity Lease (apiserver-<hash of the hostname>), as a second
		// host would have; the first read the real hostname during its start.
		host, _ := os.Hostname()
		genericapiserver.SetHostnameFuncForTests(host + "-apiserver-2")
	}
	fss := s.Flags()
	fs := fss.FlagSet("testenv")
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
		"--tls-cert-file=" + pk.ServingCert,
		"--tls-private-key-file=" + pk.ServingKey,
		"--client-ca-file=" + pk.CACert,
		"--requestheader-client-ca-file=" + pk.FrontProxyCA,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pk.FrontProxyCert,
		"--proxy-client-key-file=" + pk.FrontProxyKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pk.SAPub,
		"--service-account-signing-key-file=" + pk.SAKey,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=127.1.0.0/16",
		"--endpoint-reconciler-type=none",
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + pk.CACert,
		"--kubelet-client-certificate=" + pk.AdminCert,
		"--kubelet-client-key=" + pk.AdminKey,
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--feature-gates=" + cfg.featureGates,
		"--v=" + strconv.Itoa(cfg.verbosity),
	}
	args = append(args, cfg.extraAPIFlags...)
	if err := fs.Parse(args); err != nil {
		return err
	}
	// the listener was opened by us so the port is known before start-up
	s.SecureServing.Listener = ln
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	if !second {
		rest.SetDefaultWarningHandler(rest.NoWarnings{})
		if err := logsapi.ValidateAndApply(s.Logs, nil); err != nil {
			return err
		}
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	go func() {
		err := apiserverapp.Run(ctx, completed)
		if err == nil {
			err = errors.New("returned")
		}
		errCh <- err
	}()
	return nil
}

func startControllerManager(ctx context.Context, cfg serveConfig, pk *pki, kubeconfig string, errCh chan error) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	fss := s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	fs := fss.FlagSet("testenv")
	for name, f := range fss.FlagSets {
		if name == "testenv" {
			continue
		}
		f.VisitAll(func(fl *pflag.Flag) {
			if fs.Lookup(fl.Name) == nil {
				fs.AddFlag(fl)
			}
		})
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--controllers=" + cfg.controllers,
		"--service-account-private-key-file=" + pk.SAKey,
		"--root-ca-file=" + pk.CACert,
		"--use-service-account-credentials=false",
		"--secure-port=0",
		"--bind-address=127.0.0.1",
		"--concurrent-deployment-syncs=5",
		"--concurrent-replicaset-syncs=5",
		"--concurrent-gc-syncs=20",
		"--controller-start-interval=0s",
		// no cloud, no node IPAM on loopback
		"--allocate-node-cidrs=false",
		"--configure-cloud-routes=false",
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := s.Config(ctx, kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return err
	}
	go func() {
		err := kcmapp.Run(ctx, c.Complete())
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("returned")
		}
		errCh <- err
	}()
	return nil
}
