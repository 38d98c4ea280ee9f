//! The controllers' queues (observability/queue.rs) on kube-runtime's `Controller`: every way
//! into a controller stamps the object (its primary stream, the streams of the objects it
//! watches through a mapper, its `reconcile_on` streams), the reconcile's start takes the stamp
//! out, the `Action` a reconcile or the error policy returns records the requeue deadline, and
//! a request the scheduler found no cached object for is forgotten.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;

use super::watches::Primary;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::observability::queue::{Queue, QueueMetrics, requeue_after};
use crate::reconcile::Wing;

/// The queue of `W`'s controller, over its cache.
pub fn queue<W: Wing>(
    metrics: &QueueMetrics,
    store: kube::runtime::reflector::Store<W::Object>,
) -> Arc<Queue<W::Object>> {
    // Three controllers, one name each for the life of the process.
    let name: &'static str = Box::leak(W::controller().into_boxed_str());
    metrics.queue(name, store)
}

/// The primary stream, each object stamped as it passes.
pub fn primary<K>(q: &Arc<Queue<K>>, s: Primary<K>) -> Primary<K>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let q = q.clone();
    s.inspect(move |o| q.triggered(&ObjectRef::from_obj(o.as_ref()), Instant::now())).boxed()
}

/// A `reconcile_on` stream, each request stamped as it passes.
pub fn stamped<K, S>(q: &Arc<Queue<K>>, s: S) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    S: Stream<Item = ObjectRef<K>> + Send + 'static,
{
    let q = q.clone();
    s.inspect(move |r| q.triggered(r, Instant::now()))
}

/// A `watches_stream` mapper whose answers are stamped.
pub fn mapped<K, T, I>(
    q: &Arc<Queue<K>>,
    f: impl Fn(T) -> I + Send + Sync + 'static,
) -> impl Fn(T) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    I: IntoIterator<Item = ObjectRef<K>>,
{
    let q = q.clone();
    move |t| {
        let refs: Vec<ObjectRef<K>> = f(t).into_iter().collect();
        let now = Instant::now();
        for r in &refs {
            q.triggered(r, now);
        }
        refs
    }
}

/// `reconcile::<W>` that takes the object out of the queue as it starts, and records the
/// requeue its `Action` asks for.
pub fn reconcile<W: Wing>(
    q: &Arc<Queue<W::Object>>,
) -> impl FnMut(Arc<W::Object>, Arc<Context>) -> BoxFuture<'static, Result<Action>> + use<W> {
    let q = q.clone();
    move |obj, ctx| {
        let r = ObjectRef::from_obj(obj.as_ref());
        q.started(&r, Instant::now());
        let q = q.clone();
        Box::pin(async move {
            let out = crate::reconcile::reconcile::<W>(obj, ctx).await;
            if let Ok(a) = &out {
                q.requeued(&r, requeue_after(a), Instant::now());
            }
            out
        })
    }
}

/// `error_policy::<W>`, its retry recorded as a requeue.
pub fn error_policy<W: Wing>(
    q: &Arc<Queue<W::Object>>,
) -> impl Fn(Arc<W::Object>, &Error, Arc<Context>) -> Action + use<W> {
    let q = q.clone();
    move |obj, e, ctx| {
        let r = ObjectRef::from_obj(obj.as_ref());
        let a = crate::reconcile::error_policy::<W>(obj, e, ctx);
        q.requeued(&r, requeue_after(&a), Instant::now());
        a
    }
}

/// Looks at each result of the controller: a request for an object no longer cached leaves
/// the queue (the scheduler will not reconcile it).
pub fn forget_missing<K, T, E, Q>(
    q: &Arc<Queue<K>>,
) -> impl FnMut(&Result<T, controller::Error<E, Q>>) + use<K, T, E, Q>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    E: std::error::Error + 'static,
    Q: std::error::Error + 'static,
{
    let q = q.clone();
    move |r| {
        if let Err(controller::Error::ObjectNotFound(gone)) = r {
            let mut obj = ObjectRef::<K>::new(&gone.name);
            if let Some(ns) = &gone.namespace {
                obj = obj.within(ns);
            }
            q.forget(&obj);
        }
    }
}
