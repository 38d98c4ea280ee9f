//! XRD events for the XRDConversionConfig controller while Crossplane is installed, as
//! `dco_api::crossplane` follows it: XRDs are watched (metadata only, in small pages) from the
//! moment Crossplane's CRD is established until it is removed, each event enqueueing the
//! configs naming that XRD. Crossplane coming or going enqueues every XRDConversionConfig, so
//! each re-reads its target at once (found, or gone) instead of at the next `--resync`.

use dco_api::XRDConversionConfig;
use dco_api::target::{TARGET_PAGE, xrd_resource};
use futures::{Stream, StreamExt};
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::{mpsc, watch};

use crate::kinds::configs_of_target;
use crate::observability::watch_metrics::WatchMetrics;

/// The configs to reconcile because of XRDs or of Crossplane itself; ends when the returned
/// stream is dropped.
pub fn triggers(
    client: Client,
    installed: watch::Receiver<Option<bool>>,
    configs: Store<XRDConversionConfig>,
    errors: WatchMetrics,
) -> impl Stream<Item = ObjectRef<XRDConversionConfig>> + Send + 'static {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(follow(client, installed, configs, tx, errors));
    futures::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) })
}

async fn follow(
    client: Client,
    mut installed: watch::Receiver<Option<bool>>,
    configs: Store<XRDConversionConfig>,
    tx: mpsc::UnboundedSender<ObjectRef<XRDConversionConfig>>,
    errors: WatchMetrics,
) {
    let send = |refs: Vec<ObjectRef<XRDConversionConfig>>| refs.into_iter().all(|r| tx.send(r).is_ok());
    let mut known = None;
    loop {
        let Some(now) = dco_api::crossplane::wait_known(&mut installed).await else { return };
        if known.is_some_and(|k| k != now)
            && !send(configs.state().iter().map(|c| ObjectRef::from_obj(c.as_ref())).collect())
        {
            return;
        }
        known = Some(now);
        if !now {
            tracing::info!("XRDConversionConfigs wait for Crossplane: XRDs are watched once it is installed");
            if installed.wait_for(|i| *i == Some(true)).await.is_err() {
                return;
            }
            continue;
        }
        tracing::info!("watching CompositeResourceDefinitions for XRDConversionConfigs");
        let ar = xrd_resource();
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &ar);
        let xrds = watcher(api, watcher::Config::default().page_size(TARGET_PAGE));
        let events = errors.counted("CompositeResourceDefinition", xrds).default_backoff().touched_objects();
        let mut events = std::pin::pin!(events);
        let gone = installed.wait_for(|i| *i == Some(false));
        let mut gone = std::pin::pin!(gone);
        loop {
            tokio::select! {
                g = &mut gone => if g.is_ok() { break } else { return },
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
        tracing::info!("Crossplane was removed: stopped watching CompositeResourceDefinitions");
    }
}
