//! The soak's world and its run: set-up, the schedule's events, settling, the checks, the
//! removal (see the module docs of `soak`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, LABEL_INSTANCE};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use super::load::{self, Recorder, TargetApis, VERSIONS};
use super::memory::{self, Sampler};
use super::schedule::{self, Kind, Planned};
use super::{Event, NOT_READY_PROPAGATION, Options, Outcome, Window};
use crate::chart::{helm, helm_install_dco, release_label, widget_config, widget_crd, widget_spec};
use crate::{Manager, TestEnv, container_pid, fnv1a64, pod_ready, signal, wait_for};

const MANAGER: Manager = Manager("dco-soak");
const WAIT: Duration = Duration::from_secs(300);
const WEBHOOKS: &str = "app.kubernetes.io/name=dco-webhook";
const OPERATORS: &str = "app.kubernetes.io/name=dco-operator";
/// A rolling upgrade replaces every Pod (about a minute here): not more often than this.
const HELM_SPACING: Duration = Duration::from_secs(150);

/// One target: its CRD, group and config.
struct Target {
    crd: String,
    group: String,
    config: String,
}

pub struct World<'a> {
    t: &'a TestEnv,
    opts: Options,
    label: (String, String),
    release: String,
    default_server: String,
    pin_server: String,
    pool_server: String,
    targets: Vec<Target>,
    pinned: Vec<bool>,
    pool: bool,
    drain: u32,
    last_helm: Option<Instant>,
    /// A process stopped by SIGSTOP, continued on any way out.
    stopped: Option<u32>,
    rec: Arc<Recorder>,
    events: Vec<Event>,
    event_errors: Vec<String>,
    windows: Vec<Window>,
}

impl<'a> World<'a> {
    pub fn new(t: &'a TestEnv, opts: &Options) -> World<'a> {
        let suffix = t.ns.rsplit('-').next().unwrap_or("run").to_string();
        let targets = (0..opts.targets)
            .map(|i| {
                let group = format!("{}-t{i}.soak.example", t.ns);
                Target { crd: format!("widgets.{group}"), group, config: format!("{}-t{i}", t.ns) }
            })
            .collect();
        World {
            t,
            opts: opts.clone(),
            label: release_label(t),
            release: format!("dco-soak-{suffix}"),
            default_server: format!("{}-default", t.ns),
            pin_server: format!("{}-pin", t.ns),
            pool_server: format!("{}-pool", t.ns),
            targets,
            pinned: vec![false; opts.targets],
            pool: false,
            drain: 5,
            last_helm: None,
            stopped: None,
            rec: Recorder::new(Instant::now()),
            events: Vec::new(),
            event_errors: Vec::new(),
            windows: Vec::new(),
        }
    }

    fn configs(&self) -> Api<CRDConversionConfig> {
        Api::all(self.t.client.clone())
    }
    fn servers(&self) -> Api<ConversionWebhookServer> {
        Api::all(self.t.client.clone())
    }
    fn crds(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.t.client.clone())
    }
    fn pods(&self) -> Api<Pod> {
        self.t.api()
    }

    fn values(&self) -> Value {
        json!({"replicaCount": 2,
            "defaultServer": {"name": self.default_server, "spec": {"replicas": 2, "sharding": {"enabled": true}}},
            "operator": {"leaseDuration": "15s", "leaseRenewInterval": "5s"},
            "webhook": {"args": [format!("--drain-period={}s", self.drain)]}})
    }

    fn api(&self, client: &kube::Client, target: &Target, version: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&target.group, version, "Widget");
        Api::namespaced_with(client.clone(), &self.t.ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"))
    }

    /// The whole run; see the module docs.
    pub async fn soak(&mut self) -> Result<Outcome> {
        let set_up = Instant::now();
        self.set_up().await?;
        let before = self.checksums().await?;
        eprintln!(
            "soak: set up in {:.0} s: {} targets, {} untouched objects each",
            set_up.elapsed().as_secs_f64(),
            self.targets.len(),
            self.opts.objects
        );
        self.rec = Recorder::new(Instant::now());
        let mut clients = vec![self.t.client.clone()];
        match crate::apiservers::client2().await {
            Ok(c) => clients.push(c),
            Err(e) => eprintln!("soak: one apiserver only ({e})"),
        }
        let apis = self
            .targets
            .iter()
            .map(|tg| TargetApis {
                name: tg.crd.clone(),
                group: tg.group.clone(),
                apis: clients
                    .iter()
                    .map(|c| [self.api(c, tg, VERSIONS[0]), self.api(c, tg, VERSIONS[1])])
                    .collect(),
                statics: (0..self.opts.objects).map(|i| (format!("s{i}"), 1000 + i as i64)).collect(),
            })
            .collect();
        let sampler = Sampler::start(self.rec.clone(), self.pods(), Duration::from_secs(5));
        let running = load::start(
            self.rec.clone(),
            apis,
            self.opts.period,
            self.servers(),
            format!("{}-adm", self.t.ns),
            self.label.clone(),
        );
        let ran = self.run_schedule().await;
        let settled = match &ran {
            Ok(()) => self.settle().await,
            Err(e) => Err(anyhow::anyhow!("the schedule stopped: {e:#}")),
        };
        // The load keeps going a while on the settled world: the end window of the leak check.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let end_ms = self.rec.ms(Instant::now());
        let written = running.stop().await?;
        let samples = sampler.stop().await;
        let mut checks = Vec::new();
        checks.push(match settled {
            Ok(s) => ("every target settled and verified on its assigned server".into(), true, s),
            Err(e) => {
                ("every target settled and verified on its assigned server".into(), false, format!("{e:#}"))
            }
        });
        checks.push(self.compare(&before, &self.checksums().await?));
        checks.push(self.last_writes(&written).await?);
        checks.extend(self.judge(&samples, end_ms));
        let dir =
            super::report::write(&self.opts, &self.rec, &self.events, &samples, &self.windows, &checks)?;
        eprintln!("soak: report in {}", dir.display());
        Ok(Outcome { dir, checks })
    }

    async fn set_up(&mut self) -> Result<()> {
        helm_install_dco(self.t, &self.release, &self.values()).await.context("helm install")?;
        let pin = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": self.pin_server, "labels": {&self.label.0: &self.label.1}},
            "spec": {"namespace": self.t.ns, "replicas": 2}});
        MANAGER.apply(&self.servers(), &self.pin_server, pin).await?;
        let crds = self.crds();
        for tg in &self.targets {
            MANAGER.apply(&crds, &tg.crd, widget_crd(&tg.group, &self.label)).await?;
            crate::wait_crd_established(&crds, &tg.crd, WAIT).await?;
            MANAGER
                .apply(&self.configs(), &tg.config, widget_config(&tg.config, &tg.crd, &self.label))
                .await?;
        }
        for s in [&self.default_server, &self.pin_server] {
            self.wait_server_ready(s).await?;
        }
        wait_for("every target to settle", WAIT, || async { Ok(self.settled_all().await?.ok()) }).await?;
        for tg in &self.targets {
            let api = self.api(&self.t.client, tg, "v1");
            for i in 0..self.opts.objects {
                let name = format!("s{i}");
                let obj = json!({"apiVersion": format!("{}/v1", tg.group), "kind": "Widget",
                    "metadata": {"name": name}, "spec": widget_spec("v1", 1000 + i as i64)});
                MANAGER.apply(&api, &name, obj).await?;
            }
        }
        // Warm-up of the servers: every target served by the pin server once and back, so each
        // server's steady state (the memory judged) has seen every target.
        for pin in [true, false] {
            for i in 0..self.targets.len() {
                if self.pinned[i] != pin {
                    self.toggle_pin(i).await?;
                }
            }
            wait_for("every target to settle in the warm-up", WAIT, || async {
                Ok(self.settled_all().await?.ok())
            })
            .await?;
        }
        Ok(())
    }

    async fn wait_server_ready(&self, server: &str) -> Result<()> {
        let servers = self.servers();
        wait_for(&format!("server {server} to have 2 ready replicas"), WAIT, || async {
            Ok(servers.get(server).await?.status.is_some_and(|s| s.ready_replicas == 2).then_some(()))
        })
        .await
    }

    /// `Ok(summary)` when every target is settled, verified and wired to its assigned server
    /// (the pin's when pinned), `Err(what is not)` otherwise.
    async fn settled_all(&self) -> Result<std::result::Result<String, String>> {
        let mut on = BTreeMap::<String, usize>::new();
        for (i, tg) in self.targets.iter().enumerate() {
            let cfg = self.configs().get(&tg.config).await?;
            let st = cfg.status.clone().unwrap_or_default();
            let ready = st.conditions.iter().find(|c| c.type_ == "HandoverReady");
            let state = st.handover.as_ref().map(|h| serde_json::to_value(h.state).unwrap_or_default());
            let assigned = st.assigned_webhook_server.clone().unwrap_or_default();
            let wired = crate::conversion_service(&self.crds().get(&tg.crd).await?).map(|s| s.1);
            let why = if !ready.is_some_and(|c| c.status == "True" && c.reason == "HandoverReady") {
                Some(format!("HandoverReady {:?}", ready.map(|c| (&c.status, &c.reason, &c.message))))
            } else if state != Some(json!("SourceDropped")) {
                Some(format!("handover {state:?}"))
            } else if st.observed_generation != cfg.metadata.generation {
                Some("status behind the spec".into())
            } else if self.pinned[i] && assigned != self.pin_server {
                Some(format!("pinned to {} but assigned {assigned}", self.pin_server))
            } else if wired.as_deref() != Some(format!("dco-webhook-{assigned}").as_str()) {
                Some(format!("assigned {assigned} but wired to {wired:?}"))
            } else {
                None
            };
            if let Some(why) = why {
                return Ok(Err(format!("{}: {why}", tg.config)));
            }
            *on.entry(assigned).or_default() += 1;
        }
        Ok(Ok(format!("{} targets, by server {on:?}", self.targets.len())))
    }

    /// Every untouched object's identity and content at every version, by `target/version/name`.
    async fn checksums(&self) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for tg in &self.targets {
            for v in VERSIONS {
                for o in self.api(&self.t.client, tg, v).list(&ListParams::default()).await?.items {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    if !name.starts_with('s') {
                        continue;
                    }
                    let m = &o.metadata;
                    let whole = json!([
                        m.uid,
                        m.resource_version,
                        m.generation,
                        m.labels,
                        m.annotations,
                        o.data["spec"]
                    ]);
                    out.insert(format!("{}/{v}/{name}", tg.crd), fnv1a64(whole.to_string().as_bytes()));
                }
            }
        }
        Ok(out)
    }

    fn compare(
        &self,
        before: &BTreeMap<String, u64>,
        after: &BTreeMap<String, u64>,
    ) -> (String, bool, String) {
        let want = self.targets.len() * VERSIONS.len() * self.opts.objects;
        let lost: Vec<&String> = before.keys().filter(|k| !after.contains_key(*k)).collect();
        let changed: Vec<&String> =
            before.iter().filter(|(k, v)| after.get(*k).is_some_and(|a| a != *v)).map(|p| p.0).collect();
        let ok = before.len() == want && lost.is_empty() && changed.is_empty() && after.len() == want;
        let detail = format!(
            "{} objects × versions before, {} after; lost {lost:?}, changed {changed:?}",
            before.len(),
            after.len()
        );
        ("no untouched object lost or changed at any version".into(), ok, detail)
    }

    async fn last_writes(&self, written: &[BTreeMap<String, i64>]) -> Result<(String, bool, String)> {
        let mut bad = Vec::new();
        let mut n = 0;
        for (tg, objs) in self.targets.iter().zip(written) {
            for (name, gb) in objs {
                for v in VERSIONS {
                    n += 1;
                    let got = self.api(&self.t.client, tg, v).get(name).await?;
                    if got.data["spec"] != widget_spec(v, *gb) {
                        bad.push(format!("{}/{v}/{name}: {}", tg.crd, got.data["spec"]));
                    }
                }
            }
        }
        let detail = format!("{n} reads of the load's objects; wrong: {bad:?}");
        Ok(("the load's own objects read back as last written".into(), bad.is_empty(), detail))
    }

    fn judge(&self, samples: &[memory::Sample], end_ms: u32) -> Vec<(String, bool, String)> {
        let failures = self.rec.failures();
        let in_window = |f: &load::Failure| f.excused(&self.windows);
        let first5 = |fs: &[&load::Failure]| -> Vec<String> {
            fs.iter().take(5).map(|f| format!("+{:.1}s {}", f.at_ms as f64 / 1000.0, f.what)).collect()
        };
        let wrong: Vec<&load::Failure> = failures.iter().filter(|f| f.wrong).collect();
        let first_wrong = first5(&wrong);
        let excused = failures.iter().filter(|f| in_window(f)).count();
        let outside: Vec<&load::Failure> = failures.iter().filter(|f| !f.wrong && !in_window(f)).collect();
        let reqs = self.rec.reqs().len();
        let first = first5(&outside);
        let warm = self.opts.warmup.as_millis() as u32;
        let span = 30_000.min(end_ms.saturating_sub(warm) / 4);
        let levels = memory::levels(samples, warm, end_ms, span);
        let leaks: Vec<String> = levels
            .iter()
            .filter(|l| l.ratio() > 1.10)
            .map(|l| format!("{} {:.2}×", l.role, l.ratio()))
            .collect();
        let mem = levels
            .iter()
            .map(|l| {
                format!(
                    "{} {:.1}→{:.1} MB ({:+.1} %)",
                    l.role,
                    l.warm_kb as f64 / 1024.0,
                    l.end_kb as f64 / 1024.0,
                    (l.ratio() - 1.0) * 100.0
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        vec![
            (
                "0 failed requests outside the SIGKILL windows".into(),
                outside.is_empty(),
                format!(
                    "{reqs} requests, {} failed outside, {excused} inside {} windows; first outside: {first:?}",
                    outside.len(),
                    self.windows.len()
                ),
            ),
            (
                "0 wrong answers".into(),
                wrong.is_empty(),
                format!("{} wrong; first: {first_wrong:?}", wrong.len()),
            ),
            (
                "every event ran".into(),
                self.event_errors.is_empty(),
                format!("{} events; errors: {:?}", self.events.len(), self.event_errors),
            ),
            (
                "memory of every dco role within 10 % of its level after warm-up".into(),
                leaks.is_empty() && !levels.is_empty(),
                mem,
            ),
        ]
    }

    async fn run_schedule(&mut self) -> Result<()> {
        let plan = schedule::plan(self.opts.seed, self.opts.duration);
        let deadline = self.rec.start + self.opts.duration;
        for p in plan {
            let wake = Instant::now() + p.gap;
            if wake >= deadline {
                break;
            }
            tokio::time::sleep_until(wake.into()).await;
            let began = Instant::now();
            let (kind, result) = self.event(&p).await;
            let detail = match result {
                Ok(d) => d,
                Err(e) => {
                    let e: String = format!("{kind}: {e:#}").chars().take(400).collect();
                    eprintln!("soak: event failed: {e}");
                    self.event_errors.push(e.clone());
                    e
                }
            };
            eprintln!("soak: +{:.1}s {kind}: {detail}", self.rec.ms(began) as f64 / 1000.0);
            let ev = Event { at_ms: self.rec.ms(began), end_ms: self.rec.ms(Instant::now()), kind, detail };
            self.events.push(ev);
            if self.event_errors.len() > 10 {
                bail!("more than 10 events failed: {:?}", self.event_errors);
            }
        }
        tokio::time::sleep_until(deadline.into()).await;
        Ok(())
    }

    /// Runs one planned event: its kind as it ran (`pin` or `unpin`, …) and what it did.
    async fn event(&mut self, p: &Planned) -> (String, Result<String>) {
        match p.kind {
            Kind::Pin => {
                let i = (p.pick % self.targets.len() as u64) as usize;
                let kind = if self.pinned[i] { "unpin" } else { "pin" };
                (kind.into(), self.toggle_pin(i).await)
            }
            Kind::Pool => {
                let kind = if self.pool { "pool leave" } else { "pool join" };
                (kind.into(), self.toggle_pool().await)
            }
            Kind::WebhookKill => ("webhook SIGKILL".into(), self.kill(WEBHOOKS, "webhook", p.pick).await),
            Kind::OperatorKill => ("operator SIGKILL".into(), self.kill(OPERATORS, "operator", p.pick).await),
            Kind::WebhookStop => {
                let pause = Duration::from_millis(2_000 + p.pick % 6_000);
                ("webhook SIGSTOP".into(), self.pause(WEBHOOKS, "webhook", p.pick, pause).await)
            }
            Kind::OperatorStop => {
                // Under the admission webhook's 5 s timeout: a review waiting on the stopped
                // replica is answered once it runs again.
                let pause = Duration::from_millis(1_000 + p.pick % 2_000);
                ("operator SIGSTOP".into(), self.pause(OPERATORS, "operator", p.pick, pause).await)
            }
            Kind::CertRotate => ("certificate rotation".into(), self.rotate(p.pick).await),
            Kind::HelmUpgrade => {
                if self.last_helm.is_some_and(|t| t.elapsed() < HELM_SPACING) {
                    (
                        "helm upgrade (skipped)".into(),
                        Ok(format!("the last one was under {HELM_SPACING:?} ago")),
                    )
                } else {
                    ("helm upgrade".into(), self.upgrade().await)
                }
            }
        }
    }

    async fn toggle_pin(&mut self, i: usize) -> Result<String> {
        let cfg = &self.targets[i].config;
        let pin = if self.pinned[i] { Value::Null } else { json!({"name": self.pin_server}) };
        let patch = json!({"spec": {"webhookServerRef": pin}});
        self.configs().patch(cfg, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        self.pinned[i] = !self.pinned[i];
        Ok(format!("{cfg} → {}", if self.pinned[i] { &self.pin_server } else { "the pool" }))
    }

    async fn toggle_pool(&mut self) -> Result<String> {
        let name = self.pool_server.clone();
        let servers = self.servers();
        if self.pool {
            // Out of the pool first (its targets move to the others), then deleted once admission
            // no longer refuses it for configs that still resolve to it (docs/admission.md).
            let out = json!({"spec": {"sharding": {"enabled": false}}});
            servers.patch(&name, &PatchParams::default(), &Patch::Merge(&out)).await?;
            let started = Instant::now();
            wait_for(&format!("server {name} to be deletable (no config resolving to it)"), WAIT, || async {
                match servers.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(Some(())),
                    Err(kube::Error::Api(e))
                        if e.code == 403 && e.message.contains("still resolve to it") =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(e.into()),
                }
            })
            .await?;
            self.pool = false;
            return Ok(format!(
                "{name}: out of the pool, deleted after {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        } else {
            let s = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                "metadata": {"name": name, "labels": {&self.label.0: &self.label.1}},
                "spec": {"namespace": self.t.ns, "replicas": 2, "sharding": {"enabled": true}}});
            MANAGER.apply(&self.servers(), &name, s).await?;
        }
        self.pool = !self.pool;
        Ok(name)
    }

    /// The Ready Pods of `selector` whose peers of the same workload are all Ready too (a
    /// fault takes one replica of two; the other serves), by name: (name, pid).
    async fn victims(&self, selector: &str, container: &str) -> Result<Vec<(String, u32)>> {
        let pods = self.pods().list(&ListParams::default().labels(selector)).await?.items;
        let group = |p: &Pod| {
            p.metadata.labels.as_ref().and_then(|l| l.get(LABEL_INSTANCE).cloned()).unwrap_or_default()
        };
        let mut out = Vec::new();
        for p in &pods {
            let peers: Vec<&Pod> = pods.iter().filter(|q| group(q) == group(p)).collect();
            let all_ready = peers.len() >= 2
                && peers.iter().all(|q| pod_ready(q) && q.metadata.deletion_timestamp.is_none());
            if let (true, Some(pid)) = (all_ready, container_pid(p, container)) {
                out.push((p.metadata.name.clone().unwrap_or_default(), pid));
            }
        }
        out.sort();
        Ok(out)
    }

    async fn kill(&mut self, selector: &str, container: &str, pick: u64) -> Result<String> {
        let victims = self.victims(selector, container).await?;
        let Some((pod, pid)) = victims.get((pick % victims.len().max(1) as u64) as usize).cloned() else {
            return Ok("skipped: no replica with a Ready peer".into());
        };
        // The window opens before the signal: `kill` is a process of its own, and the victim
        // dies (resetting what it had in flight) before that process returns.
        let at = Instant::now();
        signal(pid, "KILL")?;
        let pods = self.pods();
        wait_for(&format!("{pod} unready after SIGKILL"), Duration::from_secs(60), || async {
            let p = pods.get(&pod).await?;
            Ok((!pod_ready(&p) || container_pid(&p, container) != Some(pid)).then_some(()))
        })
        .await?;
        let unready = at.elapsed();
        self.windows.push(Window { from: at, to: Instant::now() + NOT_READY_PROPAGATION });
        Ok(format!("{pod} (pid {pid}), unready in the API after {:.0} ms", unready.as_secs_f64() * 1000.0))
    }

    async fn pause(&mut self, selector: &str, container: &str, pick: u64, pause: Duration) -> Result<String> {
        let victims = self.victims(selector, container).await?;
        let Some((pod, pid)) = victims.get((pick % victims.len().max(1) as u64) as usize).cloned() else {
            return Ok("skipped: no replica with a Ready peer".into());
        };
        signal(pid, "STOP")?;
        self.stopped = Some(pid);
        tokio::time::sleep(pause).await;
        signal(pid, "CONT")?;
        self.stopped = None;
        Ok(format!("{pod} (pid {pid}) for {:.1} s", pause.as_secs_f64()))
    }

    /// Deletes a serving Secret (a leaf rotation: the operator issues a new leaf from the same
    /// CA), a server's CA Secret (a new CA, trusted beside the old one) or the admission
    /// webhook's leaf Secret (docs/operations.md, "Certificates"; docs/admission.md).
    async fn rotate(&mut self, pick: u64) -> Result<String> {
        let secrets: Api<Secret> = self.t.api();
        let server = if (pick / 3).is_multiple_of(2) { &self.default_server } else { &self.pin_server };
        let name = match pick % 3 {
            0 => format!("dco-webhook-{server}-tls"),
            1 => format!("dco-webhook-{server}-ca"),
            _ => {
                let all = secrets.list(&ListParams::default()).await?.items;
                let adm =
                    all.into_iter().filter_map(|s| s.metadata.name).find(|n| n.ends_with("-admission-tls"));
                match adm {
                    Some(n) => n,
                    None => return Ok("skipped: the admission leaf Secret is not reissued yet".into()),
                }
            }
        };
        match secrets.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(format!("deleted Secret {name}")),
            // Its previous rotation is not reissued yet (the admission leaf waits for a
            // registration pass, every 60 s: docs/admission.md): nothing to rotate now.
            Err(kube::Error::Api(e)) if e.code == 404 => {
                Ok(format!("skipped: Secret {name} is not reissued yet"))
            }
            Err(e) => Err(anyhow::Error::from(e).context(format!("deleting Secret {name}"))),
        }
    }

    async fn upgrade(&mut self) -> Result<String> {
        self.drain = if self.drain == 5 { 6 } else { 5 };
        self.last_helm = Some(Instant::now());
        let started = Instant::now();
        helm_install_dco(self.t, &self.release, &self.values()).await?;
        // The webhook Deployments roll after the operators that render them: wait for both.
        for s in [&self.default_server, &self.pin_server] {
            self.wait_rolled(s).await?;
        }
        Ok(format!(
            "--drain-period={}s, every Pod replaced in {:.0} s",
            self.drain,
            started.elapsed().as_secs_f64()
        ))
    }

    /// Until server `s`'s Pods are exactly its 2 replicas, Ready, running the current args.
    async fn wait_rolled(&self, s: &str) -> Result<()> {
        let pods = self.pods();
        let want = format!("--drain-period={}s", self.drain);
        wait_for(&format!("server {s}'s Pods to roll"), WAIT, || async {
            let list =
                pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={s}"))).await?.items;
            let rolled = list.len() == 2
                && list.iter().all(|p| {
                    let args =
                        p.spec.as_ref().and_then(|sp| sp.containers[0].args.clone()).unwrap_or_default();
                    pod_ready(p) && p.metadata.deletion_timestamp.is_none() && args.contains(&want)
                });
            Ok(rolled.then_some(()))
        })
        .await
    }

    /// After the schedule: no process stopped, every server's replicas Ready, every target
    /// settled on its assigned server.
    async fn settle(&mut self) -> Result<String> {
        let started = Instant::now();
        let mut servers = vec![self.default_server.clone(), self.pin_server.clone()];
        if self.pool {
            servers.push(self.pool_server.clone());
        }
        for s in &servers {
            self.wait_server_ready(s).await?;
        }
        let mut last = String::new();
        let done = wait_for("every target to settle after the schedule", WAIT, || async {
            Ok(self.settled_all().await?.ok())
        })
        .await;
        if done.is_err() {
            last = self.settled_all().await?.err().unwrap_or_default();
        }
        let summary = done.with_context(|| format!("still not settled: {last}"))?;
        Ok(format!("{summary}, {:.1} s after the schedule ended", started.elapsed().as_secs_f64()))
    }

    /// Removes what the run made outside its namespace, in the order docs/installation.md
    /// gives: the configs (each reverts its target), the servers, the release, the targets.
    pub async fn remove(&mut self) -> Result<()> {
        if let Some(pid) = self.stopped.take() {
            let _ = signal(pid, "CONT");
        }
        let configs = self.configs();
        let unsafe_ok =
            json!({"metadata": {"annotations": {dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}}});
        for tg in &self.targets {
            if configs.get_opt(&tg.config).await?.is_some() {
                configs.patch(&tg.config, &PatchParams::default(), &Patch::Merge(&unsafe_ok)).await?;
                configs.delete(&tg.config, &DeleteParams::default()).await?;
            }
        }
        for tg in &self.targets {
            crate::wait_deleted(&configs, &tg.config, WAIT).await?;
        }
        let servers = self.servers();
        for s in [&self.pool_server, &self.pin_server, &self.default_server] {
            if servers.get_opt(s).await?.is_some() {
                servers.delete(s, &DeleteParams::default()).await?;
                crate::wait_deleted(&servers, s, WAIT).await?;
            }
        }
        let (cluster, r, n) = (self.t.cluster.clone(), self.release.clone(), self.t.ns.clone());
        tokio::task::spawn_blocking(move || {
            helm(
                &cluster,
                &["uninstall", &r, "--namespace", &n, "--wait", "--timeout", "3m", "--ignore-not-found"],
            )
        })
        .await??;
        for tg in &self.targets {
            let _ = self.crds().delete(&tg.crd, &DeleteParams::default()).await;
        }
        Ok(())
    }
}
