//! Whether Crossplane is installed, followed while the process runs: a watch of the one CRD
//! `compositeresourcedefinitions.apiextensions.crossplane.io` (a field selector on its name),
//! so installing Crossplane, or removing it, is seen one watch event later instead of at the
//! next poll. The operator watches XRDs and the webhook reads them only while it is there.

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::target::XRD_CRD_NAME;

/// Follows whether Crossplane's XRD CRD exists. Its task ends once every receiver is gone.
pub struct Detector {
    installed: watch::Receiver<Option<bool>>,
    task: JoinHandle<()>,
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Detector {
    /// Starts the watch (needs list and watch on customresourcedefinitions, which both
    /// binaries hold for their targets; metadata only, so the CRD's schema is never read).
    pub fn start(client: Client) -> Detector {
        let (tx, installed) = watch::channel(None);
        let api: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client);
        let task = tokio::spawn(follow(watcher::watch_object(api, XRD_CRD_NAME).default_backoff(), tx));
        Detector { installed, task }
    }

    /// `None` until the first list has answered, then whether the CRD exists; changes as it
    /// comes and goes.
    pub fn subscribe(&self) -> watch::Receiver<Option<bool>> {
        self.installed.clone()
    }

    /// Whether Crossplane is installed, once the first list has answered.
    pub async fn installed(&self) -> bool {
        wait_known(&mut self.subscribe()).await.unwrap_or(false)
    }
}

/// The next known answer of `installed` (the current one if known); `None` when the detector
/// is gone.
pub async fn wait_known(installed: &mut watch::Receiver<Option<bool>>) -> Option<bool> {
    installed.wait_for(Option::is_some).await.ok().and_then(|v| *v)
}

/// Publishes each change of presence the watch shows (`Some(_)` found or updated, `None`
/// deleted or absent from a list). A CRD being deleted counts as gone: the apiserver is
/// deleting every XRD and is about to stop serving the kind. Errors are retried by the
/// stream's backoff; the last answer stands meanwhile.
async fn follow<S, K>(events: S, tx: watch::Sender<Option<bool>>)
where
    S: futures::Stream<Item = Result<Option<K>, watcher::Error>>,
    K: kube::Resource,
{
    let mut events = std::pin::pin!(events);
    loop {
        let ev = tokio::select! {
            () = tx.closed() => return,
            ev = events.next() => ev,
        };
        match ev {
            None => return,
            Some(Ok(o)) => publish(&tx, o.is_some_and(|o| o.meta().deletion_timestamp.is_none())),
            Some(Err(e)) => tracing::warn!(error = %e,
                "cannot watch {XRD_CRD_NAME} to see whether Crossplane is installed; retrying (needs list and watch on customresourcedefinitions)"),
        }
    }
}

fn publish(tx: &watch::Sender<Option<bool>>, installed: bool) {
    tx.send_if_modified(|cur| {
        if *cur == Some(installed) {
            return false;
        }
        if installed {
            tracing::info!("Crossplane is installed ({XRD_CRD_NAME} exists)");
        } else {
            tracing::info!("Crossplane is not installed ({XRD_CRD_NAME} not found)");
        }
        *cur = Some(installed);
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the watch shows, in order, becomes one published answer per change.
    #[tokio::test]
    async fn publishes_each_change_of_presence_once() {
        let (tx, mut rx) = watch::channel(None);
        type Crd = PartialObjectMeta<CustomResourceDefinition>;
        let (events_tx, events_rx) =
            futures::channel::mpsc::unbounded::<Result<Option<Crd>, watcher::Error>>();
        let task = tokio::spawn(follow(events_rx, tx));
        assert_eq!(*rx.borrow(), None, "unknown until the first list");
        let crd = Crd::default();
        let mut deleting = crd.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        let mut seen = Vec::new();
        for ev in [None, Some(crd.clone()), Some(crd.clone()), Some(deleting), None, Some(crd)] {
            events_tx.unbounded_send(Ok(ev)).unwrap();
            if let Ok(Ok(())) =
                tokio::time::timeout(std::time::Duration::from_millis(200), rx.changed()).await
            {
                seen.push(*rx.borrow_and_update());
            }
        }
        assert_eq!(seen, vec![Some(false), Some(true), Some(false), Some(true)]);
        // Every receiver gone: the task ends.
        drop(rx);
        tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap();
    }
}
