package main

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// runBinder is the testenv's scheduler: there is one Node, so every pending
// Pod for the default scheduler (or one naming the node in a nodeSelector
// or not) is bound to it through the Binding subresource, as kube-scheduler
// would do.
func runBinder(ctx context.Context, client kubernetes.Interface, nodeName string) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.AndSelectors(
			fields.OneTermEqualSelector("spec.nodeName", ""),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
		).String()
	}))
	inf := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
	})
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced)
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		func() {
			defer q.Done(key)
			ns, name, _ := cache.SplitMetaNamespaceKey(key)
			pod, err := inf.Lister().Pods(ns).Get(name)
			if err != nil || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
				q.Forget(key)
				return
			}
			if s := pod.Spec.SchedulerName; s != "" && s != corev1.DefaultSchedulerName {
				q.Forget(key)
				return
			}
			if len(pod.Spec.SchedulingGates) > 0 {
				q.Forget(key)
				return
			}
			b := &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: pod.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err = client.CoreV1().Pods(ns).Bind(cctx, b, metav1.CreateOptions{})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				klog.ErrorS(err, "binding pod", "pod", key)
				q.AddRateLimited(key)
				return
			}
			klog.V(2).InfoS("bound pod", "pod", key, "node", nodeName)
			q.Forget(key)
		}()
	}
}
