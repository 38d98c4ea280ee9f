//! Whether Crossplane is installed, followed while the process runs: a watch of the one CRD
//! `compositeresourcedefinitions.apiextensions.crossplane.io` (a field selector on its name),
//! so installing Crossplane, or removing it, is seen one watch event later instead of at the
//! next poll. The operator watches XRDs and the webhook reads them only while it is there.
//! Installed means Established: before, the apiserver does not serve the kind yet (a list is
//! a 404). A CRD being deleted still counts until it is gone: XRDs may outlive the delete
//! (their finalizers wait for Crossplane) and the CRDs Crossplane made from them still call
//! their conversion webhooks, so what serves them must not stop before the kind is gone.

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::Api;
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
    /// binaries hold for their targets). The CRD is read whole, for its Established
    /// condition: one object, and events only when it changes.
    pub fn start(client: Client) -> Detector {
        let (tx, installed) = watch::channel(None);
        let api: Api<CustomResourceDefinition> = Api::all(client);
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

/// Publishes each change the watch shows (`Some(_)` found or updated, `None` deleted or
/// absent from a list). Errors are retried by the stream's backoff; the last answer stands
/// meanwhile.
async fn follow<S>(events: S, tx: watch::Sender<Option<bool>>)
where
    S: futures::Stream<Item = Result<Option<CustomResourceDefinition>, watcher::Error>>,
{
    let mut events = std::pin::pin!(events);
    loop {
        let ev = tokio::select! {
            () = tx.closed() => return,
            ev = events.next() => ev,
        };
        match ev {
            None => return,
            Some(Ok(o)) => publish(&tx, o.as_ref().is_some_and(served)),
            Some(Err(e)) => tracing::warn!(error = %e,
                "cannot watch {XRD_CRD_NAME} to see whether Crossplane is installed; retrying (needs list and watch on customresourcedefinitions)"),
        }
    }
}

/// Established (being deleted or not).
fn served(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
}

fn publish(tx: &watch::Sender<Option<bool>>, installed: bool) {
    tx.send_if_modified(|cur| {
        if *cur == Some(installed) {
            return false;
        }
        if installed {
            tracing::info!("Crossplane is installed ({XRD_CRD_NAME} is established)");
        } else {
            tracing::info!(
                "Crossplane is not installed ({XRD_CRD_NAME} is not there or not established yet)"
            );
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
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
            CustomResourceDefinitionCondition, CustomResourceDefinitionStatus,
        };
        let (events_tx, events_rx) =
            futures::channel::mpsc::unbounded::<Result<Option<CustomResourceDefinition>, watcher::Error>>();
        let task = tokio::spawn(follow(events_rx, tx));
        assert_eq!(*rx.borrow(), None, "unknown until the first list");
        let created = CustomResourceDefinition::default();
        let mut crd = created.clone();
        crd.status = Some(CustomResourceDefinitionStatus {
            conditions: Some(vec![CustomResourceDefinitionCondition {
                type_: "Established".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let mut deleting = crd.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        let mut seen = Vec::new();
        // Absent; created, not yet Established; Established; updated; being deleted (still
        // installed); gone; back.
        for ev in [None, Some(created), Some(crd.clone()), Some(crd.clone()), Some(deleting), None, Some(crd)]
        {
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
