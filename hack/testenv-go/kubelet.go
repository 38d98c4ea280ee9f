package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// The process-kubelet. It registers one Ready Node (with a node Lease and
// status heartbeats), serves the kubelet's containerLogs endpoint so
// `kubectl logs` works, and runs every Pod bound to its Node as local
// processes (see pod.go).
//
// virtual-kubelet's node package was the suggested base, but its releases
// that build with Kubernetes 1.36 (v1.13, v1.14) require newer
// OpenTelemetry/Kubernetes modules than k8s.io/kubernetes v1.36 pins, so the
// small part of it needed here is written out instead.

type kubeletConfig struct {
	nodeName   string
	stateDir   string
	apiHost    string
	apiPort    int
	caFile     string
	servingCrt string
	servingKey string
	images     *imageMap
	ipRange    string
}

type kubelet struct {
	cfg    kubeletConfig
	client kubernetes.Interface
	ips    *ipAllocator
	port   int

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	closing bool

	registered chan struct{}
	regOnce    sync.Once
}

func newKubelet(cfg kubeletConfig, client kubernetes.Interface) (*kubelet, error) {
	ips, err := newIPAllocator(cfg.ipRange)
	if err != nil {
		return nil, err
	}
	return &kubelet{cfg: cfg, client: client, ips: ips, workers: map[types.UID]*podWorker{}, registered: make(chan struct{})}, nil
}

func (k *kubelet) waitRegistered(ctx context.Context, timeout time.Duration) error {
	select {
	case <-k.registered:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("node %s not registered after %s", k.cfg.nodeName, timeout)
	}
}

func (k *kubelet) logsDir() string { return filepath.Join(k.cfg.stateDir, "logs") }

func (k *kubelet) run(ctx context.Context) {
	if err := k.startServer(ctx); err != nil {
		klog.ErrorS(err, "kubelet server")
	}
	go k.heartbeat(ctx)

	f := informers.NewSharedInformerFactoryWithOptions(k.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.nodeName).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.podChanged(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, n any) { k.podChanged(ctx, n.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				k.podDeleted(p)
			}
		},
	})
	f.Start(ctx.Done())
	<-ctx.Done()
}

func (k *kubelet) podChanged(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closing {
		return
	}
	w, ok := k.workers[pod.UID]
	if !ok {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			if pod.DeletionTimestamp != nil {
				// finished before; nothing runs: just let it go
				go k.finalDelete(ctx, pod)
			}
			return
		}
		w = newPodWorker(k, pod)
		k.workers[pod.UID] = w
		go w.run(ctx)
	}
	w.update(pod)
}

func (k *kubelet) podDeleted(pod *corev1.Pod) {
	k.mu.Lock()
	w := k.workers[pod.UID]
	k.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

func (k *kubelet) forget(uid types.UID) {
	k.mu.Lock()
	delete(k.workers, uid)
	k.mu.Unlock()
}

func (k *kubelet) finalDelete(ctx context.Context, pod *corev1.Pod) {
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.ErrorS(err, "deleting pod", "pod", klog.KObj(pod))
	}
}

// shutdown stops every pod process (SIGTERM, then SIGKILL after grace).
func (k *kubelet) shutdown(grace time.Duration) {
	k.mu.Lock()
	k.closing = true
	ws := make([]*podWorker, 0, len(k.workers))
	for _, w := range k.workers {
		ws = append(ws, w)
	}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func(w *podWorker) { defer wg.Done(); w.killAll(grace) }(w)
	}
	wg.Wait()
}

// --- node registration and heartbeats ---------------------------------------------

func (k *kubelet) nodeObject() *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("16"),
		corev1.ResourceMemory:           resource.MustParse("64Gi"),
		corev1.ResourcePods:             resource.MustParse("250"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: k.cfg.nodeName,
			Labels: map[string]string{
				"kubernetes.io/hostname":           k.cfg.nodeName,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               runtime.GOARCH,
				"node.kubernetes.io/instance-type": "dco-testenv",
				"node-role.kubernetes.io/testenv":  "",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: k.cfg.nodeName},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(k.port)}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          version.Get().GitVersion,
				OperatingSystem:         "linux",
				Architecture:            runtime.GOARCH,
				ContainerRuntimeVersion: "dco-testenv://processes",
				OSImage:                 "dco testenv process-kubelet",
				KernelVersion:           kernelVersion(),
			},
		},
	}
}

func kernelVersion() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func nodeConditions(now metav1.Time) []corev1.NodeCondition {
	c := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		c(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "testenv process-kubelet is posting ready status"),
		c(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "no memory pressure"),
		c(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "no disk pressure"),
		c(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "no PID pressure"),
	}
}

func (k *kubelet) registerNode(ctx context.Context) error {
	nodes := k.client.CoreV1().Nodes()
	want := k.nodeObject()
	now := metav1.Now()
	want.Status.Conditions = nodeConditions(now)
	n, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = nodes.Create(ctx, want, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	n.Labels = want.Labels
	n.Spec.Taints = nil
	if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		return err
	}
	n.Status = want.Status
	_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

func (k *kubelet) heartbeat(ctx context.Context) {
	for ctx.Err() == nil {
		if err := k.registerNode(ctx); err != nil {
			klog.ErrorS(err, "registering node")
			time.Sleep(time.Second)
			continue
		}
		break
	}
	k.regOnce.Do(func() { close(k.registered) })
	klog.InfoS("node registered", "node", k.cfg.nodeName)
	leaseTick := time.NewTicker(10 * time.Second)
	statusTick := time.NewTicker(60 * time.Second)
	defer leaseTick.Stop()
	defer statusTick.Stop()
	k.renewLease(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-leaseTick.C:
			k.renewLease(ctx)
		case <-statusTick.C:
			k.updateNodeStatus(ctx)
		}
	}
}

func (k *kubelet) updateNodeStatus(ctx context.Context) {
	n, err := k.client.CoreV1().Nodes().Get(ctx, k.cfg.nodeName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			if err := k.registerNode(ctx); err != nil {
				klog.ErrorS(err, "re-registering node")
			}
		}
		return
	}
	now := metav1.Now()
	conds := nodeConditions(now)
	for i := range conds {
		for _, old := range n.Status.Conditions {
			if old.Type == conds[i].Type && old.Status == conds[i].Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	n.Status.Conditions = conds
	if _, err := k.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		klog.V(2).ErrorS(err, "node status")
	}
}

func (k *kubelet) renewLease(ctx context.Context) {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.cfg.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, nerr := k.client.CoreV1().Nodes().Get(ctx, k.cfg.nodeName, metav1.GetOptions{})
		if nerr != nil {
			return
		}
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: k.cfg.nodeName, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.cfg.nodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			klog.V(2).ErrorS(err, "node lease")
		}
		return
	}
	if err != nil {
		return
	}
	l.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		klog.V(2).ErrorS(err, "node lease")
	}
}

// --- the kubelet API: just enough for `kubectl logs` ---------------------------------

func (k *kubelet) startServer(ctx context.Context) error {
	cert, err := tls.LoadX509KeyPair(k.cfg.servingCrt, k.cfg.servingKey)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	k.port = ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/containerLogs/{ns}/{pod}/{container}", k.serveLogs)
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && err != http.ErrServerClosed {
			klog.ErrorS(err, "kubelet server")
		}
	}()
	return nil
}

func logFileName(ns, pod, container string) string {
	return fmt.Sprintf("%s_%s_%s.log", ns, pod, container)
}

func (k *kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	path := filepath.Join(k.logsDir(), logFileName(r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")))
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, "no logs: "+err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	q := r.URL.Query()
	if tl := q.Get("tailLines"); tl != "" {
		n, _ := strconv.Atoi(tl)
		seekTail(f, n)
	}
	limit := int64(-1)
	if lb := q.Get("limitBytes"); lb != "" {
		limit, _ = strconv.ParseInt(lb, 10, 64)
	}
	w.Header().Set("Content-Type", "text/plain")
	var out io.Writer = w
	if limit >= 0 {
		out = &limitWriter{w: w, n: limit}
	}
	follow := q.Get("follow") == "true"
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return
			}
			if fl, ok := w.(http.Flusher); ok {
				fl.Flush()
			}
		}
		if err == io.EOF {
			if !follow {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return
		}
	}
}

type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	return n, err
}

// seekTail positions f at the start of its last n lines.
func seekTail(f *os.File, n int) {
	if n < 0 {
		return
	}
	var offsets []int64
	var off int64
	rd := bufio.NewReader(f)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 {
			offsets = append(offsets, off)
			off += int64(len(line))
		}
		if err != nil {
			break
		}
	}
	start := off
	if n == 0 {
		start = off
	} else if n < len(offsets) {
		start = offsets[len(offsets)-n]
	} else {
		start = 0
	}
	f.Seek(start, io.SeekStart)
}
