package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// serviceResolver is installed with app.SetServiceResolverForTests before the
// apiserver starts. The apiserver asks it, per connection, where
// <svc>.<ns>.svc:<port> is (admission webhooks, CRD conversion webhooks,
// aggregated APIs). It answers like kube-proxy would: a random Ready Pod
// selected by the Service's selector, at the resolved targetPort (numbers or
// named container ports). kubernetes.default is the apiserver itself.
type serviceResolver struct {
	apiPort int

	mu       sync.RWMutex
	services corelisters.ServiceLister
	pods     corelisters.PodLister
	synced   []cache.InformerSynced
}

func newServiceResolver(apiPort int) *serviceResolver {
	return &serviceResolver{apiPort: apiPort}
}

func (r *serviceResolver) start(ctx context.Context, client kubernetes.Interface) {
	f := informers.NewSharedInformerFactory(client, 0)
	svc := f.Core().V1().Services()
	pods := f.Core().V1().Pods()
	r.mu.Lock()
	r.services = svc.Lister()
	r.pods = pods.Lister()
	r.synced = []cache.InformerSynced{svc.Informer().HasSynced, pods.Informer().HasSynced}
	r.mu.Unlock()
	f.Start(ctx.Done())
}

// ResolveEndpoint implements webhook.ServiceResolver and the aggregator's ServiceResolver.
func (r *serviceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	if namespace == "default" && name == "kubernetes" {
		return &url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(r.apiPort))}, nil
	}
	r.mu.RLock()
	services, pods, synced := r.services, r.pods, r.synced
	r.mu.RUnlock()
	if services == nil {
		return nil, fmt.Errorf("testenv resolver: not started yet")
	}
	// The first call may come before the informers synced: wait a little.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		all := true
		for _, s := range synced {
			all = all && s()
		}
		if all {
			break
		}
	}
	svc, err := services.Services(namespace).Get(name)
	if err != nil {
		return nil, fmt.Errorf("testenv resolver: service %s/%s: %w", namespace, name, err)
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			sp = &svc.Spec.Ports[i]
			break
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("testenv resolver: service %s/%s has no port %d", namespace, name, port)
	}
	if len(svc.Spec.Selector) == 0 {
		return nil, fmt.Errorf("testenv resolver: service %s/%s has no selector", namespace, name)
	}
	list, err := pods.Pods(namespace).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return nil, err
	}
	type ep struct {
		ip   string
		port int32
	}
	var ready []ep
	for _, p := range list {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" || !podReady(p) {
			continue
		}
		tp, ok := targetPort(p, sp)
		if !ok {
			continue
		}
		ready = append(ready, ep{p.Status.PodIP, tp})
	}
	if len(ready) == 0 {
		return nil, fmt.Errorf("testenv resolver: service %s/%s port %d has no ready endpoints", namespace, name, port)
	}
	e := ready[rand.IntN(len(ready))]
	klog.V(4).InfoS("resolved service", "service", namespace+"/"+name, "port", port, "endpoint", e)
	return &url.URL{Scheme: "https", Host: net.JoinHostPort(e.ip, strconv.Itoa(int(e.port)))}, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// targetPort resolves a Service port's targetPort against a Pod's container ports.
func targetPort(p *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	tp := sp.TargetPort
	switch {
	case tp.Type == intstr.Int && tp.IntVal == 0:
		return sp.Port, true
	case tp.Type == intstr.Int:
		return tp.IntVal, true
	default:
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == tp.StrVal && (cp.Protocol == "" || cp.Protocol == sp.Protocol || sp.Protocol == "") {
					return cp.ContainerPort, true
				}
			}
		}
		return 0, false
	}
}
