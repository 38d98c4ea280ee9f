//! The pinned move of `tests/tests/handover_pinned_move.rs` and
//! `tests/tests/observability_tracing.rs`: two ConversionWebhookServers `<ns>-a` and `<ns>-b` (2
//! replicas each), a CRD with a spoke `v1` and a hub `v2`, and a CRDConversionConfig pinned to `a`,
//! then re-pinned to `b`. Two dco-operator replicas (local processes) make the move, scoped by
//! `--selector` to the test's objects and pinned, so other tests' servers on the same cluster
//! cannot interfere.
//!
//! [`move_trace`] reads that move back from what an OTLP collector received: the trace the
//! operator promises (operator/src/telemetry.rs, docs/operations.md "Traces").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, HandoverStatus};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span, status};
use serde_json::{Value, json};

use crate::{Manager, Operators, TestEnv, hex, wait_for};

pub const MANAGER: Manager = Manager("dco-operator-e2e");
pub const WAIT: Duration = Duration::from_secs(120);

/// Two replicas, which divide the configs and servers by shard Leases in the test's namespace
/// (docs/sharding.md): the move is made by whichever owns the config's shard.
pub const REPLICAS: [&str; 2] = ["oph-1", "oph-2"];

/// The transitions of a move away from a settled server, in the state machine's order
/// (state/src/handover.rs, `step`): the span name (the Event reason), the state left and the
/// state entered.
pub const MOVE_TRANSITIONS: [(&str, &str, &str); 4] = [
    ("HandoverStarted", "SourceDropped", "Compiling"),
    ("DestinationReady", "Compiling", "DestinationReady"),
    ("Patched", "DestinationReady", "Patched"),
    ("SourceDropped", "Patched", "SourceDropped"),
];

/// The move's objects, named after the test's namespace.
pub struct PinnedMove {
    pub ns: String,
    /// `dco-e2e=<ns>`: the operator's `--selector`, carried by every object of the move.
    pub selector: String,
    pub a: String,
    pub b: String,
    pub group: String,
    /// The CRD's name, `widgets.<group>`.
    pub target: String,
    pub config: String,
    pub servers: Api<ConversionWebhookServer>,
    pub cfgs: Api<CRDConversionConfig>,
    pub crds: Api<CustomResourceDefinition>,
}

fn schema(spec: Value) -> Value {
    json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": spec}}}})
}

/// `(namespace, name)` of the Service the CRD's spec.conversion names.
pub fn wired(crd: &CustomResourceDefinition) -> Option<(String, String)> {
    let svc = crd.spec.conversion.as_ref()?.webhook.as_ref()?.client_config.as_ref()?.service.as_ref()?;
    Some((svc.namespace.clone(), svc.name.clone()))
}

/// `(phase, handover state, destination)` of a config.
pub fn handover(cfg: &CRDConversionConfig) -> (String, String, String) {
    let st = cfg.status.clone().unwrap_or_default();
    let h = st.handover.unwrap_or_default();
    (
        format!("{:?}", st.phase.unwrap_or_default()),
        format!("{:?}", h.state),
        h.destination.unwrap_or_default(),
    )
}

impl PinnedMove {
    /// dco's CRDs applied and served, the webhook image mapped to the workspace's
    /// `dco-webhook`; nothing of the move exists yet.
    pub async fn prepare(env: &TestEnv) -> Result<Self> {
        crate::map_image("dco-webhook", crate::workspace_binary("dco-webhook")?)?;
        crate::install_dco_crds(&env.client, &MANAGER).await?;
        let ns = env.ns.clone();
        let group = format!("{ns}.e2e.dco.rs");
        Ok(PinnedMove {
            selector: format!("dco-e2e={ns}"),
            a: format!("{ns}-a"),
            b: format!("{ns}-b"),
            target: format!("widgets.{group}"),
            config: format!("{ns}-widgets"),
            group,
            servers: Api::all(env.client.clone()),
            cfgs: Api::all(env.client.clone()),
            crds: Api::all(env.client.clone()),
            ns,
        })
    }

    /// The [`REPLICAS`], exporting handover traces to the OTLP/HTTP collector at `otlp`.
    pub fn start_operators(&self, env: &TestEnv, otlp: &str) -> Result<Operators> {
        crate::start_operators(env, &self.selector, &REPLICAS, &["--resync", "60s", "--otlp-endpoint", otlp])
    }

    fn labels(&self) -> Value {
        json!({"dco-e2e": self.ns})
    }

    pub async fn apply_server(&self, name: &str) -> Result<()> {
        let obj = json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": self.labels()},
            "spec": {"namespace": self.ns, "replicas": 2},
        });
        MANAGER.apply(&self.servers, name, obj).await.map(drop)
    }

    /// The config, pinned to `server` by `webhookServerRef`.
    pub async fn pin(&self, server: &str) -> Result<()> {
        let obj = json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": self.config, "labels": self.labels()},
            "spec": {"targetCRD": {"name": self.target}, "hubVersion": "v2", "webhookServerRef": {"name": server},
                "spokes": [{"version": "v1", "rules": [
                    {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]},
        });
        MANAGER.apply(&self.cfgs, &self.config, obj).await.map(drop)
    }

    /// Server `a`, the target (v1 served, the spoke; v2 served and stored, the hub) and the
    /// config pinned to `a`; returns once the target is settled on `a` (the first move).
    pub async fn settle_on_a(&self) -> Result<()> {
        self.apply_server(&self.a).await?;
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": self.target, "labels": self.labels()},
            "spec": {"group": self.group, "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [
                    {"name": "v1", "served": true, "storage": false, "schema": schema(json!({"storageSize": {"type": "integer"}, "owner": {"type": "string"}}))},
                    {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"storageGB": {"type": "integer"}, "owner": {"type": "string"}}))},
                ]},
        });
        MANAGER.apply(&self.crds, &self.target, crd).await?;
        self.pin(&self.a).await?;
        self.wait_settled(&self.a).await
    }

    /// Server `b`, and the config re-pinned to it at once: the operator must hold the wiring
    /// until b's replicas report the target.
    pub async fn repin_to_b(&self) -> Result<()> {
        self.apply_server(&self.b).await?;
        self.pin(&self.b).await
    }

    /// Waits until the config is Applied with its handover settled (SourceDropped) on
    /// `server`, and the target's spec.conversion names that server's Service.
    pub async fn wait_settled(&self, server: &str) -> Result<()> {
        let service = (self.ns.clone(), format!("dco-webhook-{server}"));
        wait_for(&format!("config {} settled on {server}", self.config), WAIT, || async {
            let cfg = self.cfgs.get(&self.config).await?;
            let crd = self.crds.get(&self.target).await?;
            let settled = handover(&cfg) == ("Applied".into(), "SourceDropped".into(), server.to_string())
                && wired(&crd) == Some(service.clone());
            Ok(settled.then_some(()))
        })
        .await
    }

    /// The handover status after the move to `b` settled, checked to be one move from `a`
    /// (attempt 2), not a restarted one that took `b` for its source.
    pub async fn settled_move(&self) -> Result<HandoverStatus> {
        let h = self.cfgs.get(&self.config).await?.status.and_then(|s| s.handover).unwrap_or_default();
        ensure!(h.source.as_deref() == Some(self.a.as_str()) && h.attempt == 2, "the settled move is {h:?}");
        ensure!(h.traceparent.is_some(), "the settled move has no traceparent: {h:?}");
        Ok(h)
    }

    /// Deletes the config (allowed by annotation: the target serves two versions) and waits
    /// until its finalizer has reverted the CRD's spec.conversion to `None`.
    pub async fn delete_config_and_wait_revert(&self) -> Result<()> {
        let annotation =
            json!({"metadata": {"annotations": {"conversion.dco.rs/allow-unsafe-delete": "true"}}});
        self.cfgs.patch(&self.config, &PatchParams::default(), &Patch::Merge(annotation)).await?;
        self.cfgs.delete(&self.config, &DeleteParams::default()).await?;
        wait_for("the config's finalizer to revert the CRD", WAIT, || async {
            let gone = self.cfgs.get_opt(&self.config).await?.is_none();
            let crd = self.crds.get(&self.target).await?;
            let none = crd.spec.conversion.as_ref().is_some_and(|c| c.strategy == "None");
            Ok((gone && none).then_some(()))
        })
        .await
    }

    /// Force-deletes server `name` (annotation `conversion.dco.rs/allow-force-delete=true`:
    /// configs may still resolve to it) and waits until it is gone.
    pub async fn force_delete(&self, name: &str) -> Result<()> {
        let force = json!({"metadata": {"annotations": {"conversion.dco.rs/allow-force-delete": "true"}}});
        self.servers.patch(name, &PatchParams::default(), &Patch::Merge(&force)).await?;
        self.servers.delete(name, &DeleteParams::default()).await?;
        crate::wait_deleted(&self.servers, name, WAIT).await
    }

    /// Waits until server `name` runs `replicas` Ready replicas, each with a live
    /// served-target Lease (`status.reportingReplicas`), and is Available.
    pub async fn wait_server_reporting(&self, name: &str, replicas: i32) -> Result<()> {
        wait_for(&format!("server {name} with {replicas} reporting replicas"), WAIT, || async {
            let st = self.servers.get(name).await?.status.unwrap_or_default();
            let available = st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True");
            Ok((available && st.ready_replicas == replicas && st.reporting_replicas == replicas)
                .then_some(()))
        })
        .await
    }

    /// The config's condition `type_` as `(status, reason, message)`.
    pub async fn condition(&self, type_: &str) -> Result<Option<(String, String, String)>> {
        let st = self.cfgs.get(&self.config).await?.status.unwrap_or_default();
        Ok(st.conditions.into_iter().find(|c| c.type_ == type_).map(|c| (c.status, c.reason, c.message)))
    }

    /// The Events about the config (events.k8s.io, namespace `default`: the config is
    /// cluster-scoped), oldest first, as `(type, reason, note)`.
    pub async fn events(&self, client: &kube::Client) -> Result<Vec<(String, String, String)>> {
        let api: Api<Event> = Api::namespaced(client.clone(), "default");
        let mut evs: Vec<Event> = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(self.config.as_str()))
            .collect();
        evs.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        Ok(evs
            .into_iter()
            .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect())
    }

    /// Waits for an Event about the config of type `type_` and reason `reason`; returns its note.
    pub async fn wait_event(&self, client: &kube::Client, type_: &str, reason: &str) -> Result<String> {
        wait_for(&format!("a {type_} Event {reason} about {}", self.config), WAIT, || async {
            let evs = self.events(client).await?;
            Ok(evs.into_iter().rev().find(|(t, r, _)| t == type_ && r == reason).map(|(_, _, n)| n))
        })
        .await
    }

    /// `kubectl describe crdconversionconfig <config>`, as a person would read it.
    pub fn describe(&self, cluster: &crate::Cluster) -> Result<String> {
        let out = std::process::Command::new(cluster.kubectl())
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["describe", "crdconversionconfig", &self.config])
            .output()?;
        ensure!(out.status.success(), "kubectl describe: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Removes the servers (force: a config may still resolve to them) and the target; best
    /// effort, for the end of a test.
    pub async fn cleanup(&self) {
        self.remove_servers(&[&self.a, &self.b]).await;
        let _ = self.crds.delete(&self.target, &DeleteParams::default()).await;
    }

    /// Force-deletes servers `names` and waits (best effort) until they are gone.
    pub async fn remove_servers(&self, names: &[&str]) {
        let force = json!({"metadata": {"annotations": {"conversion.dco.rs/allow-force-delete": "true"}}});
        for n in names {
            let _ = self.servers.patch(n, &PatchParams::default(), &Patch::Merge(&force)).await;
            let _ = self.servers.delete(n, &DeleteParams::default()).await;
        }
        let _ = wait_for("the servers to go", WAIT, || async {
            let mut left = 0;
            for n in names {
                left += usize::from(self.servers.get_opt(n).await?.is_some());
            }
            Ok((left == 0).then_some(()))
        })
        .await;
    }

    /// The move to `b` (settled as `h`) in what a collector received, checked as
    /// [`move_trace`] does.
    pub fn trace(&self, got: &[ResourceSpans], h: &HandoverStatus) -> Result<Option<MoveTrace>> {
        let want = ExpectedMove {
            traceparent: h.traceparent.clone().unwrap_or_default(),
            config: format!("CRDConversionConfig/{}", self.config),
            target: self.target.clone(),
            source: self.a.clone(),
            destination: self.b.clone(),
            attempt: h.attempt,
        };
        move_trace(got, &want)
    }
}

/// What the trace of one move from a settled `source` must say.
#[derive(Clone, Debug)]
pub struct ExpectedMove {
    /// The move's persisted `status.handover.traceparent`.
    pub traceparent: String,
    /// `CRDConversionConfig/<name>`.
    pub config: String,
    pub target: String,
    pub source: String,
    pub destination: String,
    pub attempt: u32,
}

/// The spans of one move's trace, as checked by [`move_trace`].
#[derive(Clone, Debug)]
pub struct MoveTrace {
    pub trace_id: String,
    pub root: Span,
    /// One span per transition, in [`MOVE_TRANSITIONS`] order.
    pub transitions: Vec<Span>,
    /// The other traces of the same config (its earlier moves), by attempt.
    pub earlier: Vec<(i64, String)>,
}

impl MoveTrace {
    /// One line per span: name, span id ← parent id, from → to, duration.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "trace {}: {} [{}] (no parent)\n",
            self.trace_id,
            self.root.name,
            hex(&self.root.span_id)
        );
        for s in &self.transitions {
            let ms = s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano) as f64 / 1e6;
            out += &format!(
                "  {} [{} <- {}] {} -> {} {ms:.1} ms\n",
                s.name,
                hex(&s.span_id),
                hex(&s.parent_span_id),
                text(s, "dco.handover.from"),
                text(s, "dco.handover.to"),
            );
        }
        for (attempt, trace) in &self.earlier {
            out += &format!("  earlier move (attempt {attempt}): trace {trace}\n");
        }
        out
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).and_then(|v| v.value.as_ref())
}

/// A span's string attribute, or "" when absent or not a string.
pub fn text(span: &Span, key: &str) -> String {
    match attr(&span.attributes, key) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        _ => String::new(),
    }
}

fn int(span: &Span, key: &str) -> Option<i64> {
    match attr(&span.attributes, key) {
        Some(any_value::Value::IntValue(n)) => Some(*n),
        _ => None,
    }
}

/// Checks one move's trace in `got` (every ResourceSpans a collector received):
/// `Ok(None)` while some of its spans have not arrived (the exporter batches), an error
/// naming what is wrong once all have, else the trace. What the operator promises
/// (operator/src/telemetry.rs): the move is one trace, its id the traceparent's; its root span
/// `handover` carries the traceparent's span id, has no parent and is sent when the move
/// starts; each transition is exactly one child span of the root, named by its Event reason,
/// from when the state it leaves was entered to the transition, with `dco.handover.from` and
/// `.to` following the state machine; every span names the config, the target, the source,
/// the destination and the attempt, and comes from service `dco-operator`; the config's
/// earlier moves are other traces.
pub fn move_trace(got: &[ResourceSpans], want: &ExpectedMove) -> Result<Option<MoveTrace>> {
    let (trace_id, root_id) = match want.traceparent.split('-').collect::<Vec<_>>()[..] {
        ["00", trace, span, _] if trace.len() == 32 && span.len() == 16 => {
            (trace.to_string(), span.to_string())
        }
        _ => bail!("traceparent {:?} is not a W3C traceparent", want.traceparent),
    };
    let mut all: Vec<(Option<any_value::Value>, &Span)> = Vec::new();
    for rs in got {
        let service = rs.resource.as_ref().and_then(|r| attr(&r.attributes, "service.name")).cloned();
        all.extend(rs.scope_spans.iter().flat_map(|s| &s.spans).map(|span| (service.clone(), span)));
    }
    let ours: Vec<&(Option<any_value::Value>, &Span)> =
        all.iter().filter(|(_, s)| hex(&s.trace_id) == trace_id).collect();
    let named = |name: &str| ours.iter().filter(|(_, s)| s.name == name).map(|(_, s)| *s).collect::<Vec<_>>();
    let names = || ours.iter().map(|(_, s)| s.name.as_str()).collect::<Vec<_>>();
    let expected = std::iter::once("handover").chain(MOVE_TRANSITIONS.iter().map(|t| t.0));
    if expected.clone().any(|n| named(n).is_empty()) {
        return Ok(None);
    }
    ensure!(
        ours.len() == 1 + MOVE_TRANSITIONS.len() && expected.clone().all(|n| named(n).len() == 1),
        "trace {trace_id} should hold one span each of {:?}; it holds {:?}",
        expected.collect::<Vec<_>>(),
        names()
    );
    let service = Some(any_value::Value::StringValue("dco-operator".into()));
    for (svc, s) in &ours {
        ensure!(*svc == service, "span {} of trace {trace_id} comes from service {svc:?}", s.name);
        let attrs = [
            ("dco.config", &want.config),
            ("dco.target", &want.target),
            ("dco.handover.source", &want.source),
            ("dco.handover.destination", &want.destination),
        ];
        for (key, value) in attrs {
            ensure!(text(s, key) == *value, "span {} has {key}={:?}, want {value:?}", s.name, text(s, key));
        }
        let attempt = int(s, "dco.handover.attempt");
        ensure!(attempt == Some(i64::from(want.attempt)), "span {} has attempt {attempt:?}", s.name);
        let code = s.status.as_ref().map_or(0, |st| st.code);
        ensure!(code != status::StatusCode::Error as i32, "span {} is an error: {:?}", s.name, s.status);
    }

    let root = named("handover")[0].clone();
    ensure!(
        hex(&root.span_id) == root_id,
        "the root span's id is {}, not the traceparent's {root_id}",
        hex(&root.span_id)
    );
    ensure!(root.parent_span_id.is_empty(), "the root span has parent {}", hex(&root.parent_span_id));
    let mut transitions = Vec::new();
    for (name, from, to) in MOVE_TRANSITIONS {
        let s = named(name)[0].clone();
        ensure!(
            hex(&s.parent_span_id) == root_id,
            "span {name}'s parent is {}, not the root {root_id}",
            hex(&s.parent_span_id)
        );
        ensure!(s.span_id != root.span_id, "span {name} reuses the root's span id");
        let (f, t) = (text(&s, "dco.handover.from"), text(&s, "dco.handover.to"));
        ensure!((f.as_str(), t.as_str()) == (from, to), "span {name} goes {f} -> {t}, want {from} -> {to}");
        ensure!(s.start_time_unix_nano <= s.end_time_unix_nano, "span {name} ends before it starts");
        if let Some(prev) = transitions.last() {
            let prev: &Span = prev;
            // The state this transition leaves was entered by the previous one, before that
            // one was recorded; and the transitions were recorded in order.
            ensure!(
                prev.start_time_unix_nano <= s.start_time_unix_nano
                    && s.start_time_unix_nano <= prev.end_time_unix_nano
                    && prev.end_time_unix_nano <= s.end_time_unix_nano,
                "span {name} ({}..{}) does not follow {} ({}..{})",
                s.start_time_unix_nano,
                s.end_time_unix_nano,
                prev.name,
                prev.start_time_unix_nano,
                prev.end_time_unix_nano
            );
        } else {
            // The root span is sent when the move starts, at the first transition.
            ensure!(
                root.start_time_unix_nano == root.end_time_unix_nano
                    && root.end_time_unix_nano == s.end_time_unix_nano,
                "the root span ({}..{}) is not the instant of {name} ({})",
                root.start_time_unix_nano,
                root.end_time_unix_nano,
                s.end_time_unix_nano
            );
        }
        transitions.push(s);
    }
    let mut ids: Vec<_> = transitions.iter().map(|s| s.span_id.clone()).collect();
    ids.sort();
    ids.dedup();
    ensure!(ids.len() == transitions.len(), "transitions share span ids: {:?}", names());

    // Every other span of the config belongs to an earlier move, one trace per attempt.
    let mut earlier: Vec<(i64, String)> = Vec::new();
    for (_, s) in &all {
        if text(s, "dco.config") != want.config || hex(&s.trace_id) == trace_id {
            continue;
        }
        let attempt = int(s, "dco.handover.attempt").unwrap_or_default();
        ensure!(
            attempt < i64::from(want.attempt),
            "span {} of attempt {attempt} is outside trace {trace_id}",
            s.name
        );
        let trace = hex(&s.trace_id);
        match earlier.iter().find(|(a, _)| *a == attempt) {
            Some((_, t)) => ensure!(*t == trace, "attempt {attempt} spans two traces, {t} and {trace}"),
            None => earlier.push((attempt, trace)),
        }
    }
    earlier.sort();
    let mut traces: Vec<_> = earlier.iter().map(|(_, t)| t.clone()).collect();
    traces.sort();
    traces.dedup();
    ensure!(traces.len() == earlier.len(), "two attempts share a trace: {earlier:?}");
    Ok(Some(MoveTrace { trace_id, root, transitions, earlier }))
}

/// Lists the ten widgets at the spoke `v1` every `period` (every read a conversion) until
/// [`SpokeReader::finish`]: a read counts as failed unless it returns all ten with their
/// `spec.storageSize`.
pub struct SpokeReader {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl SpokeReader {
    pub fn start(v1: Api<DynamicObject>, period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let task = {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                let mut errors = Vec::new();
                while !stop.load(SeqCst) {
                    match v1.list(&ListParams::default()).await {
                        Ok(l)
                            if l.items.len() == 10
                                && l.items.iter().all(|o| o.data["spec"]["storageSize"].is_i64()) =>
                        {
                            ok.fetch_add(1, SeqCst);
                        }
                        Ok(l) => {
                            failed.fetch_add(1, SeqCst);
                            errors.push(format!(
                                "{} items, first: {:?}",
                                l.items.len(),
                                l.items.first().map(|o| &o.data)
                            ));
                        }
                        Err(e) => {
                            failed.fetch_add(1, SeqCst);
                            errors.push(e.to_string());
                        }
                    }
                    tokio::time::sleep(period).await;
                }
                errors
            })
        };
        SpokeReader { stop, ok, failed, task }
    }

    /// Stops the reads: how many passed, how many failed, and the failures.
    pub async fn finish(self) -> Result<(u64, u64, Vec<String>)> {
        self.stop.store(true, SeqCst);
        let errors = self.task.await?;
        Ok((self.ok.load(SeqCst), self.failed.load(SeqCst), errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::AnyValue;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ScopeSpans, Status};

    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const ROOT: &str = "b7ad6b7169203331";

    fn bytes(hex: &str) -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
    }

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue { key: key.into(), value: Some(AnyValue { value: Some(value) }), ..Default::default() }
    }

    fn s(v: &str) -> any_value::Value {
        any_value::Value::StringValue(v.into())
    }

    fn want() -> ExpectedMove {
        ExpectedMove {
            traceparent: format!("00-{TRACE}-{ROOT}-01"),
            config: "CRDConversionConfig/widgets".into(),
            target: "widgets.example.org".into(),
            source: "a".into(),
            destination: "b".into(),
            attempt: 2,
        }
    }

    fn span(trace: &str, id: &str, parent: &str, name: &str, attempt: i64, (start, end): (u64, u64)) -> Span {
        let attrs = [
            ("dco.config", "CRDConversionConfig/widgets"),
            ("dco.target", "widgets.example.org"),
            ("dco.handover.source", "a"),
            ("dco.handover.destination", "b"),
        ];
        let mut attributes: Vec<_> = attrs.iter().map(|(k, v)| kv(k, s(v))).collect();
        attributes.push(kv("dco.handover.attempt", any_value::Value::IntValue(attempt)));
        Span {
            trace_id: bytes(trace),
            span_id: bytes(id),
            parent_span_id: bytes(parent),
            name: name.into(),
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            ..Default::default()
        }
    }

    /// The move as the operator sends it: the root at the first transition's instant, then
    /// the four transitions, each starting where the previous one's state was entered.
    fn good() -> Vec<Span> {
        let mut spans = vec![span(TRACE, ROOT, "", "handover", 2, (100, 100))];
        let times = [(10, 100), (90, 200), (190, 300), (290, 400)];
        for (i, ((name, from, to), t)) in MOVE_TRANSITIONS.iter().zip(times).enumerate() {
            let mut sp = span(TRACE, &format!("{:016x}", i + 1), ROOT, name, 2, t);
            sp.attributes.push(kv("dco.handover.from", s(from)));
            sp.attributes.push(kv("dco.handover.to", s(to)));
            spans.push(sp);
        }
        spans
    }

    fn sent(spans: Vec<Span>) -> Vec<ResourceSpans> {
        vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("dco-operator"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }]
    }

    fn check(spans: Vec<Span>) -> Result<Option<MoveTrace>> {
        move_trace(&sent(spans), &want())
    }

    #[test]
    fn the_whole_move_is_accepted_with_its_earlier_moves() {
        let mut spans = good();
        spans.push(span("11111111111111111111111111111111", "2222222222222222", "", "handover", 1, (1, 1)));
        let t = check(spans).unwrap().unwrap();
        assert_eq!(t.trace_id, TRACE);
        let names: Vec<_> = t.transitions.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["HandoverStarted", "DestinationReady", "Patched", "SourceDropped"]);
        assert_eq!(t.earlier, [(1, "11111111111111111111111111111111".to_string())]);
    }

    #[test]
    fn a_trace_still_arriving_is_not_yet_an_answer() {
        let mut spans = good();
        spans.pop();
        assert!(check(spans).unwrap().is_none());
        assert!(check(vec![]).unwrap().is_none());
    }

    #[test]
    fn each_broken_promise_is_named() {
        type Break = Box<dyn Fn(&mut Vec<Span>)>;
        let cases: Vec<(&str, Break)> = vec![
            ("one span each", Box::new(|v| v.push(v[2].clone()))),
            ("root span's id", Box::new(|v| v[0].span_id = bytes("0000000000000001"))),
            ("root span has parent", Box::new(|v| v[0].parent_span_id = bytes("0000000000000009"))),
            ("not the root", Box::new(|v| v[3].parent_span_id = bytes("0000000000000009"))),
            (
                "want Compiling -> DestinationReady",
                Box::new(|v| v[2].attributes.retain(|kv| kv.key != "dco.handover.to")),
            ),
            ("does not follow", Box::new(|v| v[3].start_time_unix_nano = 50)),
            (
                "does not follow",
                Box::new(|v| (v[4].start_time_unix_nano, v[4].end_time_unix_nano) = (150, 150)),
            ),
            ("not the instant", Box::new(|v| v[0].end_time_unix_nano = 101)),
            ("dco.target", Box::new(|v| v[1].attributes[1] = kv("dco.target", s("other")))),
            ("attempt", Box::new(|v| v[4].attributes[4] = kv("dco.handover.attempt", s("2")))),
            ("is an error", Box::new(|v| v[2].status = Some(Status { code: 2, message: "blocked".into() }))),
            ("share span ids", Box::new(|v| v[2].span_id = v[1].span_id.clone())),
            (
                "outside trace",
                Box::new(|v| {
                    v.push(span("11111111111111111111111111111111", "2222222222222222", "", "x", 2, (1, 1)))
                }),
            ),
        ];
        for (want, break_it) in cases {
            let mut spans = good();
            break_it(&mut spans);
            let err = check(spans).expect_err(want).to_string();
            assert!(err.contains(want), "{want:?} not in {err:?}");
        }
        // The spans must come from the operator.
        let mut got = sent(good());
        got[0].resource = None;
        let err = move_trace(&got, &want()).unwrap_err().to_string();
        assert!(err.contains("from service None"), "{err}");
    }
}
