//! XRD events for the XRDConversionConfig controller while Crossplane is installed, as
//! `dco_api::crossplane` follows it: XRDs are watched (metadata only, in small pages) through
//! the API version the cluster prefers from the moment Crossplane's CRD is established until
//! it is removed, each event enqueueing the configs naming that XRD. Crossplane coming, going
//! or changing the preferred version (an upgrade adding `v2`) enqueues every
//! XRDConversionConfig, so each re-reads its target at once (found, or gone) instead of at
//! the next `--resync`; a changed version also restarts the watch there. Each event's
//! resourceVersion goes to the index a config's idle wake compares (`crate::target_versions`).

use dco_api::XRDConversionConfig;
use dco_api::config::TargetKind;
use dco_api::crossplane::{XrdApi, XrdApiReceiver, XrdVersion};
use dco_api::target::TARGET_PAGE;
use futures::{Stream, StreamExt};
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use crate::kinds::configs_of_target;
use crate::observability::watch_metrics::WatchMetrics;
use crate::target_versions::TargetVersions;

/// The configs to reconcile because of XRDs or of Crossplane itself; ends when the returned
/// stream is dropped.
pub fn triggers(
    client: Client,
    crossplane: XrdApiReceiver,
    configs: Store<XRDConversionConfig>,
    versions: TargetVersions,
    errors: WatchMetrics,
) -> impl Stream<Item = ObjectRef<XRDConversionConfig>> + Send + 'static {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(follow(client, crossplane, configs, versions, tx, errors));
    futures::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) })
}

async fn follow(
    client: Client,
    mut crossplane: XrdApiReceiver,
    configs: Store<XRDConversionConfig>,
    versions: TargetVersions,
    tx: mpsc::UnboundedSender<ObjectRef<XRDConversionConfig>>,
    errors: WatchMetrics,
) {
    let send = |refs: Vec<ObjectRef<XRDConversionConfig>>| refs.into_iter().all(|r| tx.send(r).is_ok());
    let mut known: Option<Option<XrdVersion>> = None;
    loop {
        let Some(now) = dco_api::crossplane::wait_known(&mut crossplane).await else { return };
        let at = now.preferred();
        if known.is_some_and(|k| k != at)
            && !send(configs.state().iter().map(|c| ObjectRef::from_obj(c.as_ref())).collect())
        {
            return;
        }
        known = Some(at);
        // A watch through another version (or none) starts from nothing.
        versions.clear(TargetKind::Xrd);
        let Some(at) = at else {
            tracing::info!("XRDConversionConfigs wait for Crossplane: XRDs are watched once it is installed");
            if crossplane.wait_for(|a| a.is_some_and(XrdApi::installed)).await.is_err() {
                return;
            }
            continue;
        };
        tracing::info!(
            api = at.api_version(),
            "watching CompositeResourceDefinitions for XRDConversionConfigs"
        );
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &at.resource());
        let xrds = watcher(api, watcher::Config::default().page_size(TARGET_PAGE));
        let index = versions.clone();
        let events = errors
            .counted("CompositeResourceDefinition", xrds)
            .default_backoff()
            .inspect(move |ev| {
                if let Ok(ev) = ev {
                    index.apply(TargetKind::Xrd, ev);
                }
            })
            .touched_objects();
        let mut events = std::pin::pin!(events);
        // Crossplane removed, or another version preferred (upgraded to serve v2, or v2 no
        // longer served): watch again through what is served now.
        let changed = crossplane.wait_for(|a| a.is_some_and(|a| a.preferred() != Some(at)));
        let mut changed = std::pin::pin!(changed);
        loop {
            tokio::select! {
                c = &mut changed => if c.is_ok() { break } else { return },
                () = tx.closed() => return,
                ev = events.next() => match ev {
                    Some(Ok(xrd)) => {
                        if !send(configs_of_target(&configs, &xrd.name_any())) {
                            return;
                        }
                    }
                    Some(Err(e)) => tracing::warn!(error = %e, "XRD watch failed; retrying with backoff"),
                    None => return,
                },
            }
        }
        tracing::info!(
            api = at.api_version(),
            "the XRD API the cluster serves changed: stopped watching CompositeResourceDefinitions there"
        );
    }
}
