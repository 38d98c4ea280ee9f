//! The replica's watches (kube-runtime reflectors): ConversionWebhookServers (all: the pool
//! and the default decide assignment), both config kinds and the targets (CRDs, and XRDs once
//! Crossplane's CompositeResourceDefinition CRD exists), the last three narrowed by the
//! instance's `cacheSelector`. Every event wakes the sync loop; the loop reads the stores.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dco_api::config::{ConversionConfig, TargetKind};
use dco_api::target::{XRD_CRD_NAME, slim, xrd_resource};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use futures::{Stream, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::sync::{ConfigView, TargetView, World};

/// How often to look for Crossplane when it is not installed yet.
const XRD_PROBE_INTERVAL: Duration = Duration::from_secs(30);

/// What narrows the config and target watches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// A label selector in the apiserver's string form, from the instance's `cacheSelector`.
    pub label_selector: Option<String>,
}

impl Scope {
    /// The scope the instance asks for, or an error naming the bad selector.
    pub fn of(server: Option<&ConversionWebhookServer>) -> Result<Scope, String> {
        let Some(sel) = server.and_then(|s| s.spec.cache_selector.clone()) else {
            return Ok(Scope::default());
        };
        let selector = kube::core::Selector::try_from(sel)
            .map_err(|e| format!("spec.cacheSelector is not a valid label selector: {e}"))?;
        let s = selector.to_string();
        Ok(Scope { label_selector: (!s.is_empty()).then_some(s) })
    }

    fn config(&self) -> watcher::Config {
        let c = watcher::Config::default();
        match &self.label_selector {
            Some(s) => c.labels(s),
            None => c,
        }
    }
}

/// Run a reflector for `api` into a new store, waking `notify` on every event.
fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
    what: &'static str,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, cfg).modify(slim::<K>).default_backoff());
    (reader, tokio::spawn(drive(stream, notify, what)))
}

async fn drive<S, K>(stream: S, notify: Arc<Notify>, what: &'static str)
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => notify.notify_one(),
            Err(e) => tracing::warn!(watch = what, error = %e,
                "watch failed; retrying with backoff (a 403 means the ClusterRole lacks list/watch on this resource)"),
        }
    }
}

/// The reflector stores of one scope.
pub struct Caches {
    pub servers: Store<ConversionWebhookServer>,
    xccs: Store<XRDConversionConfig>,
    cccs: Store<CRDConversionConfig>,
    crds: Store<CustomResourceDefinition>,
    xrds: Arc<Mutex<Option<Store<DynamicObject>>>>,
    xrds_settled: tokio::sync::watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    pub scope: Scope,
    /// Reuse of JSON renderings of targets whose fingerprint did not change.
    rendered: Mutex<HashMap<(TargetKind, String), TargetView>>,
}

impl Drop for Caches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The server watch lives apart from the scoped caches: the scope itself comes from it.
pub fn watch_servers(
    client: &Client,
    notify: Arc<Notify>,
) -> (Store<ConversionWebhookServer>, JoinHandle<()>) {
    reflect(Api::all(client.clone()), watcher::Config::default(), notify, "ConversionWebhookServers")
}

impl Caches {
    pub async fn start(
        client: &Client,
        servers: Store<ConversionWebhookServer>,
        scope: Scope,
        notify: Arc<Notify>,
    ) -> Caches {
        let (xccs, t1) =
            reflect(Api::all(client.clone()), scope.config(), notify.clone(), "XRDConversionConfigs");
        let (cccs, t2) =
            reflect(Api::all(client.clone()), scope.config(), notify.clone(), "CRDConversionConfigs");
        let (crds, t3) =
            reflect(Api::all(client.clone()), scope.config(), notify.clone(), "CustomResourceDefinitions");
        let xrds = Arc::new(Mutex::new(None));
        let (settled, xrds_settled) = tokio::sync::watch::channel(false);
        let t4 = tokio::spawn(watch_xrds_when_installed(
            client.clone(),
            scope.clone(),
            notify,
            xrds.clone(),
            settled,
        ));
        Caches {
            servers,
            xccs,
            cccs,
            crds,
            xrds,
            xrds_settled,
            tasks: vec![t1, t2, t3, t4],
            scope,
            rendered: Mutex::new(HashMap::new()),
        }
    }

    /// Resolves once every started watch has listed once. The XRD watch counts only when
    /// Crossplane was found; its first list completes before it is published here.
    pub async fn wait_ready(&self) {
        let all = async {
            let _ = self.servers.wait_until_ready().await;
            let _ = self.xccs.wait_until_ready().await;
            let _ = self.cccs.wait_until_ready().await;
            let _ = self.crds.wait_until_ready().await;
            let _ = self.xrds_settled.clone().wait_for(|settled| *settled).await;
        };
        let mut all = std::pin::pin!(all);
        loop {
            tokio::select! {
                () = &mut all => return,
                () = tokio::time::sleep(Duration::from_secs(10)) => tracing::info!(
                    "still waiting for the initial lists of servers, configs and CRDs; not ready until they complete"),
            }
        }
    }

    /// Render the stores into the pass's input. Only targets some config names are rendered.
    pub fn world(&self) -> World {
        let servers = dco_api::assign::Servers::new(self.servers.state().iter().map(|s| s.as_ref().into()));
        let mut configs = Vec::new();
        for c in self.xccs.state() {
            configs.push(config_view("XRDConversionConfig", c.as_ref()));
        }
        for c in self.cccs.state() {
            configs.push(config_view("CRDConversionConfig", c.as_ref()));
        }
        let xrds = self.xrds.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut rendered = self.rendered.lock().unwrap_or_else(PoisonError::into_inner);
        let mut targets = HashMap::new();
        for c in &configs {
            let key = (c.target_kind, c.target.clone());
            let live = match c.target_kind {
                TargetKind::Crd => {
                    self.crds.get(&reflector::ObjectRef::new(&c.target)).map(|o| (fingerprint(o.as_ref()), o))
                }
                TargetKind::Xrd => None,
            };
            let view = match (c.target_kind, live) {
                (TargetKind::Crd, Some((fp, crd))) => Some(cached(&mut rendered, &key, fp, || {
                    let mut v = serde_json::to_value(crd.as_ref()).unwrap_or_default();
                    set_type(&mut v, TargetKind::Crd);
                    v
                })),
                (TargetKind::Xrd, _) => xrds.as_ref().and_then(|s| {
                    let res = xrd_resource();
                    let o = s.get(&reflector::ObjectRef::new_with(&c.target, res))?;
                    Some(cached(&mut rendered, &key, fingerprint(o.as_ref()), || {
                        let mut v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                        set_type(&mut v, TargetKind::Xrd);
                        v
                    }))
                }),
                _ => None,
            };
            if let Some(v) = view {
                targets.insert(key, v);
            }
        }
        rendered.retain(|k, _| targets.contains_key(k));
        World { configs, targets, servers }
    }
}

fn cached(
    rendered: &mut HashMap<(TargetKind, String), TargetView>,
    key: &(TargetKind, String),
    fp: String,
    render: impl FnOnce() -> serde_json::Value,
) -> TargetView {
    if let Some(v) = rendered.get(key).filter(|v| v.fingerprint == fp) {
        return v.clone();
    }
    let v = TargetView { value: Arc::new(render()), fingerprint: fp };
    rendered.insert(key.clone(), v.clone());
    v
}

/// The engine tells a CRD from an XRD by `apiVersion`/`kind`: set them whatever the cached
/// object carried.
fn set_type(v: &mut serde_json::Value, kind: TargetKind) {
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), kind.api_version().into());
        o.insert("kind".into(), kind.kind_name().into());
    }
}

/// uid + generation: changes with every spec change (schemas, spec.conversion).
fn fingerprint<K: Resource>(o: &K) -> String {
    format!("{}@{}", o.meta().uid.as_deref().unwrap_or(""), o.meta().generation.unwrap_or(0))
}

fn config_view<C: ConversionConfig + Resource>(kind: &str, c: &C) -> ConfigView {
    ConfigView {
        kind: kind.to_string(),
        name: c.name_any(),
        target: c.target_name().to_string(),
        target_kind: c.target_kind(),
        spec: Arc::new(c.conversion().clone()),
        fingerprint: fingerprint(c),
    }
}

/// Start the XRD watch as soon as Crossplane's CRD exists; until then there are no XRDs to
/// serve and nothing fails. `settled` turns true once the first probe found no Crossplane or
/// the XRD watch listed once, so readiness waits for XRDs only where they exist.
async fn watch_xrds_when_installed(
    client: Client,
    scope: Scope,
    notify: Arc<Notify>,
    slot: Arc<Mutex<Option<Store<DynamicObject>>>>,
    settled: tokio::sync::watch::Sender<bool>,
) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    loop {
        match crds.get_opt(XRD_CRD_NAME).await {
            Ok(Some(_)) => break,
            Ok(None) => {
                if !*settled.borrow() {
                    tracing::info!(
                        "Crossplane is not installed ({XRD_CRD_NAME} not found); serving CRD targets only and checking again every 30s"
                    );
                    settled.send_replace(true);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot check whether Crossplane is installed; retrying (needs get on customresourcedefinitions)")
            }
        }
        tokio::time::sleep(XRD_PROBE_INTERVAL).await;
    }
    let res = xrd_resource();
    let api: Api<DynamicObject> = Api::all_with(client, &res);
    let writer = reflector::store::Writer::new(res);
    let reader = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        watcher(api, scope.config()).modify(slim::<DynamicObject>).default_backoff(),
    );
    let driving = drive(stream, notify.clone(), "CompositeResourceDefinitions");
    let mut driving = std::pin::pin!(driving);
    tokio::select! {
        () = &mut driving => return,
        ready = reader.wait_until_ready() => if ready.is_ok() {
            tracing::info!("Crossplane found: watching CompositeResourceDefinitions");
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(reader);
            settled.send_replace(true);
            notify.notify_one();
        },
    }
    driving.await;
}
