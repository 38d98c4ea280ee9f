//! Whether Crossplane is installed, and which versions of its XRD API the cluster serves,
//! followed while the process runs: a watch of the one CRD
//! `compositeresourcedefinitions.apiextensions.crossplane.io` (a field selector on its name),
//! so installing Crossplane, upgrading it (Crossplane 2 adds `v2` beside `v1`) or removing it
//! is seen one watch event later instead of at the next poll. The operator watches XRDs and
//! the webhook reads them only while they are served, through [`XrdApi::preferred`] (`v2`
//! where served, `v1` while it is the only one). Served means Established and listed as
//! `served` in `spec.versions`: before, the apiserver does not serve the kind yet (a list is a
//! 404). A CRD being deleted still counts until it is gone: XRDs may outlive the delete
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
pub use crate::target::{XrdApi, XrdVersion};

/// What the detector publishes: `None` until the first list has answered, then the XRD API
/// the cluster serves ([`XrdApi::ABSENT`] without Crossplane).
pub type XrdApiReceiver = watch::Receiver<Option<XrdApi>>;

/// Follows Crossplane's XRD CRD. Its task ends once every receiver is gone.
pub struct Detector {
    api: XrdApiReceiver,
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
    /// condition and its versions: one object, and events only when it changes.
    pub fn start(client: Client) -> Detector {
        Detector::start_counting(client, |_| {})
    }

    /// [`Detector::start`], with `on_error` told of every error of the watch (for a metric;
    /// each is also logged and retried with backoff).
    pub fn start_counting(
        client: Client,
        on_error: impl FnMut(&watcher::Error) + Send + 'static,
    ) -> Detector {
        let (tx, api) = watch::channel(None);
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        let events = watcher::watch_object(crds, XRD_CRD_NAME).default_backoff();
        let task = tokio::spawn(follow(events, tx, on_error));
        Detector { api, task }
    }

    /// `None` until the first list has answered, then the served API; changes as Crossplane
    /// comes, is upgraded and goes.
    pub fn subscribe(&self) -> XrdApiReceiver {
        self.api.clone()
    }

    /// Whether Crossplane is installed, once the first list has answered.
    pub async fn installed(&self) -> bool {
        wait_known(&mut self.subscribe()).await.is_some_and(XrdApi::installed)
    }
}

/// The next known answer (the current one if known); `None` when the detector is gone.
pub async fn wait_known(api: &mut XrdApiReceiver) -> Option<XrdApi> {
    api.wait_for(Option::is_some).await.ok().and_then(|v| *v)
}

/// Publishes each change the watch shows (`Some(_)` found or updated, `None` deleted or
/// absent from a list). Errors are retried by the stream's backoff; the last answer stands
/// meanwhile.
async fn follow<S>(events: S, tx: watch::Sender<Option<XrdApi>>, mut on_error: impl FnMut(&watcher::Error))
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
            Some(Ok(o)) => publish(&tx, o.as_ref().map_or(XrdApi::ABSENT, served)),
            Some(Err(e)) => {
                on_error(&e);
                tracing::warn!(error = %e,
                    "cannot watch {XRD_CRD_NAME} to see whether Crossplane is installed; retrying (needs list and watch on customresourcedefinitions)");
            }
        }
    }
}

/// The XRD API versions Crossplane's XRD CRD `crd` serves once Established (being deleted or
/// not); none before.
pub fn served(crd: &CustomResourceDefinition) -> XrdApi {
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
    if !established {
        return XrdApi::ABSENT;
    }
    XrdApi::of_served(crd.spec.versions.iter().filter(|v| v.served).map(|v| v.name.as_str()))
}

fn publish(tx: &watch::Sender<Option<XrdApi>>, api: XrdApi) {
    tx.send_if_modified(|cur| {
        if *cur == Some(api) {
            return false;
        }
        match api.preferred() {
            Some(v) => tracing::info!(
                "Crossplane is installed ({XRD_CRD_NAME} is established, {api}): XRDs are read and written at {}",
                v.api_version()
            ),
            None => tracing::info!(
                "Crossplane is not installed ({XRD_CRD_NAME} is not there, not established yet, or serves neither v1 nor v2)"
            ),
        }
        *cur = Some(api);
        true
    });
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionCondition, CustomResourceDefinitionStatus, CustomResourceDefinitionVersion,
    };

    use super::*;

    fn crd(versions: &[(&str, bool)], established: bool) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition::default();
        crd.spec.versions = versions
            .iter()
            .map(|(name, served)| CustomResourceDefinitionVersion {
                name: (*name).into(),
                served: *served,
                ..Default::default()
            })
            .collect();
        if established {
            crd.status = Some(CustomResourceDefinitionStatus {
                conditions: Some(vec![CustomResourceDefinitionCondition {
                    type_: "Established".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        crd
    }

    /// What the watch shows, in order, becomes one published answer per change, errors
    /// reach the hook, and the task ends with its last receiver.
    #[tokio::test]
    async fn publishes_each_change_of_the_served_versions_once() {
        let (tx, mut rx) = watch::channel(None);
        let (events_tx, events_rx) =
            futures::channel::mpsc::unbounded::<Result<Option<CustomResourceDefinition>, watcher::Error>>();
        let errors = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = errors.clone();
        let task = tokio::spawn(follow(events_rx, tx, move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        assert_eq!(*rx.borrow(), None, "unknown until the first list");
        let v1 = crd(&[("v1", true)], true);
        let both = crd(&[("v1", true), ("v2", true)], true);
        let mut deleting = both.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        let mut seen = Vec::new();
        // Absent; created, not yet Established; Established at v1 (Crossplane 1); updated
        // alike; an error; upgraded (v2 added); being deleted (still served); gone; back at
        // v2 with v1 no longer served; a version dco does not know only.
        for ev in [
            Ok(None),
            Ok(Some(crd(&[("v1", true)], false))),
            Ok(Some(v1.clone())),
            Ok(Some(v1)),
            Err(watcher::Error::NoResourceVersion),
            Ok(Some(both)),
            Ok(Some(deleting)),
            Ok(None),
            Ok(Some(crd(&[("v1", false), ("v2", true)], true))),
            Ok(Some(crd(&[("v3", true)], true))),
        ] {
            events_tx.unbounded_send(ev).unwrap();
            if let Ok(Ok(())) =
                tokio::time::timeout(std::time::Duration::from_millis(200), rx.changed()).await
            {
                seen.push(rx.borrow_and_update().map(XrdApi::preferred));
            }
        }
        use XrdVersion::{V1, V2};
        assert_eq!(
            seen,
            vec![Some(None), Some(Some(V1)), Some(Some(V2)), Some(None), Some(Some(V2)), Some(None)]
        );
        assert_eq!(errors.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Every receiver gone: the task ends.
        drop(rx);
        tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap();
    }
}
