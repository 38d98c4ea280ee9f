//! The world of the move tests: `tests/tests/handover_moves.rs` (every kind of move)
//! and `tests/tests/handover_faults.rs` (faults during and between moves).
//!
//! Two ConversionWebhookServers `a` (the default) and `b` of 2 replicas each, 2 dco-operator
//! replicas (local processes, killable one by one), and a target with three versions whose
//! storage version is the middle one, `v2`. The config's rules rename into a nested path, remap
//! an enum and rename inside the items of an array (ForEach), differently for each spoke. A
//! load client runs for the whole test: it writes objects at both spokes (`v1`, `v3`) and reads
//! each back at the hub and at the other spoke, and lists at the spokes, checking every value;
//! with two apiservers in the cluster (docs/testenv.md) it alternates between them request by
//! request, so each apiserver's own switch of `spec.conversion` is exercised.
//!
//! A move is measured between [`World::begin`] and [`World::finish`]: the requests the load made
//! meanwhile (and failed, and read wrong), the handover states it passed through, whether it
//! settled verified (HandoverReady reason `HandoverReady`), and how often the target's spec
//! changed (its `metadata.generation`; every change rebuilds the kind's storage in every
//! apiserver, docs/operations.md "What a move costs the cluster", so a move writes it once).
//!
//! `DCO_E2E_NO_HOLD_WHILE_NAMED=1` starts the webhook replicas with the test switch
//! `--unsafe-test-no-hold-while-named` (webhook/src/cli.rs): a source replica no longer holds
//! the target while its spec.conversion names it (nor extends its drain by the reviews it
//! answers), and the tests must then fail: handover_moves in the move whose operator is killed,
//! handover_faults in the SIGSTOP fault, both moves that wait longer than the drain period.

use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use dco_api::assign::{ServerInfo, Servers};
use dco_api::served_lease::{self, Report};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, LABEL_INSTANCE};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::apiservers::RebuildProbe;
use crate::review::Replica;
use crate::{Manager, TestEnv, container_pid, fnv1a64, pod_ready, wait_for};

pub const MANAGER: Manager = Manager("dco-e2e-moves");
pub const WAIT: Duration = Duration::from_secs(150);
/// The webhook replicas' drain period: `start_operators` passes `--drain-period=5s`.
pub const DRAIN: Duration = Duration::from_secs(5);
/// The operator replicas' shard Lease duration: how long a killed replica's shards wait.
pub const OPERATOR_LEASE: &str = "10s";
/// Load clients, each on its own objects (so each checks its own writes).
const CLIENTS: usize = 3;
const PER_CLIENT: usize = 3;
const VERSIONS: [&str; 3] = ["v1", "v2", "v3"];
const TIERS: [(&str, &str, &str); 3] =
    [("Gold", "gold", "G"), ("Silver", "silver", "S"), ("Bronze", "bronze", "B")];

/// Whether this run switches the hold-while-named rule off (see the module docs).
pub fn hold_while_named_off() -> bool {
    std::env::var("DCO_E2E_NO_HOLD_WHILE_NAMED").is_ok_and(|v| v == "1" || v == "true")
}

/// What the load client counted.
#[derive(Default)]
pub struct Counts {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub wrong: AtomicU64,
    errors: Mutex<Vec<String>>,
    /// Every failed request (not wrong values), with when: the kill faults tell apart the
    /// ones routed to a replica that was dead but still Ready in the API.
    failures: Mutex<Vec<(Instant, String)>>,
}

/// `(ok, failed, wrong)` at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub ok: u64,
    pub failed: u64,
    pub wrong: u64,
}

impl std::ops::Sub for Tally {
    type Output = Tally;
    fn sub(self, o: Tally) -> Tally {
        Tally { ok: self.ok - o.ok, failed: self.failed - o.failed, wrong: self.wrong - o.wrong }
    }
}

impl Counts {
    pub fn fail(&self, wrong: bool, what: String) {
        if wrong { &self.wrong } else { &self.failed }.fetch_add(1, Ordering::SeqCst);
        if !wrong {
            let mut f = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
            if f.len() < 100_000 {
                f.push((Instant::now(), what.chars().take(600).collect()));
            }
        }
        let mut e = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        if e.len() < 5 {
            // The first few, shortened: a failing move repeats the same error thousands of times.
            e.push(what.chars().take(300).collect());
        }
    }

    /// Failed requests in `[from, to]` whose error is the connection to a replica breaking
    /// or being refused (not a conversion error).
    fn transport_failures(&self, from: Instant, to: Instant) -> u64 {
        const TRANSPORT: [&str; 6] = [
            "connection refused",
            "connection reset",
            "client connection lost",
            "broken pipe",
            "EOF",
            "closed network connection",
        ];
        let f = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        f.iter()
            .filter(|(at, what)| *at >= from && *at <= to && TRANSPORT.iter().any(|t| what.contains(t)))
            .count() as u64
    }

    pub fn tally(&self) -> Tally {
        Tally {
            ok: self.ok.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
            wrong: self.wrong.load(Ordering::SeqCst),
        }
    }

    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// An object's spec at `version` for write `k` of client `c`: the same content in the three
/// shapes the config's rules convert between.
fn spec_at(version: &str, c: usize, k: u64) -> Value {
    let (hub, v1, v3) = TIERS[(k % 3) as usize];
    let owner = format!("c{c}-{k}");
    let names = [format!("p{k}"), format!("q{k}")];
    match version {
        "v1" => json!({"sizeGB": k, "tier": v1, "owner": owner,
            "ports": [{"port": k, "name": names[0]}, {"port": k + 1, "name": names[1]}]}),
        "v2" => json!({"size": {"gb": k}, "tier": hub, "owner": owner,
            "ports": [{"number": k, "name": names[0]}, {"number": k + 1, "name": names[1]}]}),
        _ => json!({"capacity": {"gb": k}, "tier": v3, "owner": owner,
            "endpoints": [{"number": k, "label": names[0]}, {"number": k + 1, "label": names[1]}]}),
    }
}

/// The spec an object read at `version` must have, from the write it carries (`owner`).
fn expected_from_owner(version: &str, spec: &Value) -> Option<Value> {
    let owner = spec["owner"].as_str()?;
    let (c, k) = owner.strip_prefix('c')?.split_once('-')?;
    Some(spec_at(version, c.parse().ok()?, k.parse().ok()?))
}

fn schemas() -> [Value; 3] {
    let obj = |props: Value| json!({"type": "object", "properties": props});
    let items = |props: Value| json!({"type": "array", "items": obj(props)});
    let int = json!({"type": "integer"});
    let s = json!({"type": "string"});
    let tier = |i: usize| {
        let values: Vec<&str> = TIERS.iter().map(|t| [t.0, t.1, t.2][i]).collect();
        json!({"type": "string", "enum": values})
    };
    let wrap = |spec: Value| json!({"openAPIV3Schema": obj(json!({"spec": spec}))});
    [
        wrap(obj(json!({"sizeGB": int, "tier": tier(1), "owner": s,
            "ports": items(json!({"port": int, "name": s}))}))),
        wrap(obj(json!({"size": obj(json!({"gb": int})), "tier": tier(0), "owner": s,
            "ports": items(json!({"number": int, "name": s}))}))),
        wrap(obj(json!({"capacity": obj(json!({"gb": int})), "tier": tier(2), "owner": s,
            "endpoints": items(json!({"number": int, "label": s}))}))),
    ]
}

/// The config's spokes: FieldRename into a nested path, EnumRemap and ForEach for each.
fn spokes() -> Value {
    let rename = |hub: &str, spoke: &str| json!({"strategy": "FieldRename", "fieldRename": {"hubPath": hub, "spokePath": spoke}});
    let remap = |i: usize| {
        json!({"strategy": "EnumRemap", "enumRemap": {"path": "spec.tier",
        "mapping": TIERS.iter().map(|t| json!({"hub": t.0, "spoke": (if i == 0 { t.1 } else { t.2 })})).collect::<Vec<_>>()}})
    };
    let each = |spoke: &str, rule: Value| json!({"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.ports", "spokeItemsPath": spoke, "rules": [rule]}});
    json!([
        {"version": "v1", "rules": [rename("spec.size.gb", "spec.sizeGB"), remap(0),
            each("spec.ports", rename("number", "port"))]},
        {"version": "v3", "rules": [rename("spec.size.gb", "spec.capacity.gb"), remap(1),
            each("spec.endpoints", rename("name", "label"))]},
    ])
}

/// One observed handover status of the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub state: String,
    pub source: String,
    pub destination: String,
    pub attempt: u32,
    pub unverified: bool,
}

/// Every distinct handover status the config passed through, with when it was seen.
#[derive(Default)]
pub struct History(Mutex<Vec<(Instant, Seen)>>);

impl History {
    fn record(&self, cfg: &CRDConversionConfig) {
        let Some(h) = cfg.status.as_ref().and_then(|s| s.handover.clone()) else { return };
        let seen = Seen {
            state: format!("{:?}", h.state),
            source: h.source.unwrap_or_default(),
            destination: h.destination.unwrap_or_default(),
            attempt: h.attempt,
            unverified: h.unverified,
        };
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if v.last().map(|(_, s)| s) != Some(&seen) {
            v.push((Instant::now(), seen));
        }
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn since(&self, from: usize) -> Vec<(Instant, Seen)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)[from..].to_vec()
    }

    /// Waits until a status seen after index `from` satisfies `pred`.
    pub async fn wait(&self, what: &str, from: usize, pred: impl Fn(&Seen) -> bool) -> Result<Seen> {
        wait_for(what, WAIT, || async { Ok(self.since(from).into_iter().map(|(_, s)| s).find(|s| pred(s))) })
            .await
    }
}

/// A webhook replica killed by the test: from the kill until its Pod was seen not Ready, the
/// apiserver may still route a review to it (its service resolution follows Pod readiness,
/// as kube-proxy follows endpoints) and does not retry a failed conversion call
/// (k8s.io/apiextensions-apiserver `webhook_converter.go`): a request that fails then did
/// not have a live replica to go to.
#[derive(Clone, Copy, Debug)]
pub struct Kill {
    pub at: Instant,
    pub not_ready_at: Instant,
}

/// How long after the test saw a killed Pod not Ready the apiserver's resolver may still hold
/// the old Pod status. Its Pod informer is a watch on the first apiserver, which had the
/// status 20–40 ms after the signal, before the test's poll (46–400 ms, it competes with the
/// load; docs/operations.md "What a move costs the cluster"): this is margin on top.
const NOT_READY_PROPAGATION: Duration = Duration::from_millis(250);

/// What a resumed replica answered ([`World::reviews_after_resume`]), times from the SIGCONT.
#[derive(Debug, Default)]
pub struct Resumed {
    pub ok: u32,
    /// When each failed review was sent, and what came back (the first 20).
    pub failed: Vec<(Duration, String)>,
    /// The first review that converted: when it was sent, and how long its answer took.
    pub first_ok: Option<(Duration, Duration)>,
    /// When the test first saw the Pod Ready again.
    pub ready_after: Option<Duration>,
}

/// A move in progress: what it started from.
pub struct Begin {
    pub generation: i64,
    pub tally: Tally,
    pub seen: usize,
    pub at: Instant,
}

/// What one move (or fault) cost and proved.
#[derive(Clone, Debug)]
pub struct MoveReport {
    pub what: String,
    pub load: Tally,
    pub took: Duration,
    pub states: Vec<String>,
    pub spec_changes: i64,
    /// Of `load.failed`: broken or refused connections to a killed replica while its Pod was
    /// still Ready in the API ([`Kill`]).
    pub to_dying: u64,
    /// One for a move, none for a change or fault that must not move the target.
    pub expected_changes: i64,
    /// A move settled verified; a non-move left the handover status alone.
    pub verified: bool,
    /// How far apart the apiservers switched to the new spec.conversion (a move), or `None`
    /// when one did not (a move is then not clean) or nothing changed.
    pub apiserver_lag: Option<Duration>,
    pub errors: Vec<String>,
}

impl MoveReport {
    pub fn clean(&self) -> bool {
        self.load.failed == self.to_dying
            && self.load.wrong == 0
            && self.verified
            && self.spec_changes == self.expected_changes
    }
}

pub struct World {
    pub t: TestEnv,
    pub selector: String,
    pub label: (String, String),
    /// Running operator replicas, by id.
    pub operators: Vec<(String, Child)>,
    /// `[a, b]`: `a` is the default server.
    pub servers: [String; 2],
    pub group: String,
    pub target: String,
    pub cfg: String,
    pub crds: Api<CustomResourceDefinition>,
    pub cfgs: Api<CRDConversionConfig>,
    pub srvs: Api<ConversionWebhookServer>,
    pub pods: Api<Pod>,
    pub leases: Api<Lease>,
    pub history: Arc<History>,
    pub counts: Arc<Counts>,
    /// How many apiservers the load alternates between.
    pub apiservers: usize,
    pub reports: Vec<MoveReport>,
    /// Webhook replicas killed by the test.
    pub kills: Vec<Kill>,
    /// Each apiserver's storage rebuild of the target's kind: when each switched.
    probe: Option<RebuildProbe>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A group for the target whose rendezvous winner in the pool `{a, b}` is `b`, so that
/// enabling sharding on `b` moves it (deterministic for a namespace).
fn group_won_by(ns: &str, a: &str, b: &str) -> String {
    let pool = Servers::new([
        ServerInfo { name: a.to_string(), default: true, pool_weight: Some(1) },
        ServerInfo { name: b.to_string(), default: false, pool_weight: Some(1) },
    ]);
    (0..)
        .map(|i| format!("g{i}.{ns}.moves.dco.rs"))
        .find(|g| pool.pool_winner(&format!("gadgets.{g}")) == Some(b))
        .expect("half of all names are won by b")
}

impl World {
    /// Sets the world up, wires the target to `a` and starts the load.
    pub async fn new(prefix: &str) -> Result<World> {
        crate::map_image("dco-webhook", crate::workspace_binary("dco-webhook")?)?;
        let t = TestEnv::new(prefix).await?;
        let client = t.client.clone();
        // Both apiservers of the cluster (docs/testenv.md): required, since each switches
        // spec.conversion on its own schedule and the drain period must cover the slower.
        let load_clients = vec![client.clone(), crate::apiservers::client2().await?];
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crate::install_dco_crds(&client, &MANAGER).await?;
        let label = (format!("dco-{prefix}"), t.ns.clone());
        let selector = format!("{}={}", label.0, label.1);
        let servers = [format!("{}-a", t.ns), format!("{}-b", t.ns)];
        let group = group_won_by(&t.ns, &servers[0], &servers[1]);
        let target = format!("gadgets.{group}");
        let mut w = World {
            cfg: format!("{}-gadgets", t.ns),
            selector,
            label,
            operators: Vec::new(),
            group,
            target,
            crds,
            cfgs: Api::all(client.clone()),
            srvs: Api::all(client.clone()),
            pods: t.api(),
            leases: t.api(),
            history: Arc::default(),
            counts: Arc::default(),
            apiservers: load_clients.len(),
            reports: Vec::new(),
            kills: Vec::new(),
            probe: None,
            stop: Arc::default(),
            tasks: Vec::new(),
            servers,
            t,
        };
        for id in ["1", "2"] {
            w.start_operator(id)?;
        }

        let extra: Vec<&str> =
            if hold_while_named_off() { vec!["--unsafe-test-no-hold-while-named"] } else { vec![] };
        if !extra.is_empty() {
            eprintln!("DCO_E2E_NO_HOLD_WHILE_NAMED: the webhook replicas run {extra:?}");
        }
        for (i, s) in w.servers.iter().enumerate() {
            MANAGER
                .apply(
                    &w.srvs,
                    s,
                    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                "metadata": {"name": s, "labels": {&w.label.0: &w.label.1}},
                "spec": {"namespace": w.t.ns, "replicas": 2, "default": i == 0, "extraArgs": extra}}),
                )
                .await?;
        }
        for s in &w.servers {
            wait_for(&format!("server {s} to have 2 ready replicas"), WAIT, || async {
                let st = w.srvs.get(s).await?.status;
                Ok(st.is_some_and(|st| st.ready_replicas == 2).then_some(()))
            })
            .await?;
        }

        // The target, served by strategy None until its config wires it (tests/tests/handover_adopt.rs proves
        // that adoption under load); its objects are written once dco serves it.
        let [v1, v2, v3] = schemas();
        let versions: Vec<Value> = VERSIONS
            .iter()
            .zip([v1, v2, v3])
            .map(|(v, schema)| json!({"name": v, "served": true, "storage": *v == "v2", "schema": schema}))
            .collect();
        MANAGER.apply(&w.crds, &w.target, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": w.target, "labels": {&w.label.0: &w.label.1}},
            "spec": {"group": w.group, "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
                "versions": versions, "conversion": {"strategy": "None"}}}))
        .await?;
        crate::wait_crd_established(&w.crds, &w.target, WAIT).await?;
        w.tasks.push(watch_config(w.cfgs.clone(), w.cfg.clone(), w.history.clone()));
        MANAGER
            .apply(
                &w.cfgs,
                &w.cfg,
                json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": w.cfg, "labels": {&w.label.0: &w.label.1}},
            "spec": {"targetCRD": {"name": w.target}, "hubVersion": "v2", "spokes": spokes()}}),
            )
            .await?;
        let a = w.servers[0].clone();
        w.wait_settled(0, &a).await.context("the first wiring")?;

        let hub = w.versioned(&w.t.client, "v2");
        for c in 0..CLIENTS {
            for i in 0..PER_CLIENT {
                let name = format!("o{c}-{i}");
                let obj = json!({"apiVersion": format!("{}/v2", w.group), "kind": "Gadget",
                    "metadata": {"name": name}, "spec": spec_at("v2", c, 0)});
                wait_for(&format!("storing {name}"), WAIT, || async {
                    let p = PatchParams::apply(&MANAGER).force();
                    Ok(hub.patch(&name, &p, &Patch::Apply(&obj)).await.ok())
                })
                .await?;
            }
        }
        for c in 0..CLIENTS {
            let apis: Vec<[Api<DynamicObject>; 3]> =
                load_clients.iter().map(|cl| VERSIONS.map(|v| w.versioned(cl, v))).collect();
            w.tasks.push(load(c, apis, w.group.clone(), w.stop.clone(), w.counts.clone()));
        }
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&w.group, "v2", "Gadget"), "gadgets");
        w.probe = Some(RebuildProbe::start(load_clients.clone(), &ar, &w.t.ns).await?);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = w.counts.tally();
        ensure!(
            before.failed == 0 && before.wrong == 0 && before.ok > 0,
            "the load before any move: {before:?}: {:?}",
            w.counts.errors()
        );
        eprintln!(
            "world ready: target {} on {a}, load over {} apiserver(s), {} requests so far",
            w.target, w.apiservers, before.ok
        );
        Ok(w)
    }

    fn versioned(&self, client: &Client, version: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&self.group, version, "Gadget");
        Api::namespaced_with(client.clone(), &self.t.ns, &ApiResource::from_gvk_with_plural(&gvk, "gadgets"))
    }

    /// Starts operator replica `id` (ids are unique within the test).
    pub fn start_operator(&mut self, id: &str) -> Result<()> {
        let id = format!("{}-{id}", self.label.0);
        let extra = ["--resync", "60s", "--lease-duration", OPERATOR_LEASE, "--lease-renew-interval", "3s"];
        let mut started = crate::start_operators(&self.t, &self.selector, &[id.as_str()], &extra)?;
        let child = started.0.pop().context("one operator")?;
        self.operators.push((id, child));
        Ok(())
    }

    /// The operator replica that holds the config's shard now (S = 32, docs/sharding.md).
    pub async fn config_owner(&self) -> Result<String> {
        let uid = self.cfgs.get(&self.cfg).await?.metadata.uid.unwrap_or_default();
        let shard = fnv1a64(uid.as_bytes()) >> 59;
        // `dco-operator[-<hash of --selector>]-shard-<i>` (operator/src/sharding/leases.rs `LeaseNames`)
        let suffix = format!("-shard-{shard}");
        let leases = self.leases.list(&ListParams::default().labels("sharding.dco.rs/role=shard")).await?;
        let lease = leases
            .items
            .into_iter()
            .find(|l| l.metadata.name.as_deref().is_some_and(|n| n.ends_with(&suffix)))
            .with_context(|| format!("no Lease of shard {shard}"))?;
        lease
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
            .context("the config's shard has no holder")
    }

    /// kill -9 of operator replica `id`.
    pub fn kill_operator(&mut self, id: &str) -> Result<()> {
        let i =
            self.operators.iter().position(|(o, _)| o == id).with_context(|| format!("no operator {id}"))?;
        let (_, mut child) = self.operators.remove(i);
        child.kill()?;
        child.wait()?;
        eprintln!("killed operator {id}");
        Ok(())
    }

    /// After a kill -9 of webhook replica `pod` (process `pid`) sent at `at`: waits until
    /// the API shows its Pod not Ready ([`Kill`]).
    pub async fn record_kill(&mut self, pod: &str, pid: u32, at: Instant) -> Result<Kill> {
        loop {
            let p = self.pods.get(pod).await?;
            if !pod_ready(&p) || container_pid(&p, "webhook") != Some(pid) {
                break;
            }
            ensure!(at.elapsed() < WAIT, "pod {pod} still Ready {WAIT:?} after kill -9");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let kill = Kill { at, not_ready_at: Instant::now() };
        eprintln!(
            "killed replica {pod} (pid {pid}): not Ready in the API {:.0} ms later",
            (kill.not_ready_at - at).as_secs_f64() * 1000.0
        );
        self.kills.push(kill);
        Ok(kill)
    }

    /// Failures since `b` routed to a killed replica while it was still Ready in the API.
    fn to_dying(&self, b: &Begin) -> u64 {
        self.kills
            .iter()
            .filter(|k| k.at >= b.at)
            .map(|k| self.counts.transport_failures(k.at, k.not_ready_at + NOT_READY_PROPAGATION))
            .sum()
    }

    /// Replica `pod` of server `s` as an apiserver reaches it for the target once it is wired
    /// to `s`: its address, verified as the Service's DNS name, and the path.
    pub async fn replica(&self, s: &str, pod: &str) -> Result<(Replica, String)> {
        let p = self.pods.get(pod).await?;
        let ip =
            p.status.as_ref().and_then(|st| st.pod_ip.clone()).with_context(|| format!("{pod} has no IP"))?;
        let port = p
            .spec
            .iter()
            .flat_map(|sp| &sp.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .find(|cp| cp.name.as_deref() == Some("https"))
            .map(|cp| cp.container_port)
            .with_context(|| format!("{pod} has no port named https"))?;
        // The serving certificate's CA, from the Secret the Pod mounts (the caBundle the
        // operator gives a target wired to `s`).
        let secret = p
            .spec
            .iter()
            .flat_map(|sp| sp.volumes.iter().flatten())
            .find_map(|v| v.secret.as_ref()?.secret_name.clone())
            .with_context(|| format!("{pod} mounts no Secret"))?;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = self.t.api();
        let ca = crate::secret_bytes(&secrets.get(&secret).await?, "ca.crt")
            .with_context(|| format!("Secret {secret} has no ca.crt"))?;
        let service = format!("dco-webhook-{s}");
        let replica = Replica::new(format!("{ip}:{port}"), format!("{service}.{}.svc", self.t.ns), &ca)?;
        Ok((replica, format!("/convert/{}", self.target)))
    }

    /// Resumes replica `pod` (process `pid`) of server `s`, stopped with SIGSTOP, and sends a
    /// review of the target straight to it: the first on a connection opened while it was
    /// still stopped (the kernel queues it, as it queues an apiserver's request on a connection
    /// kept from before the stop), then one every 20 ms, as an apiserver would once the Pod is
    /// Ready again, until the replica is Ready with a Lease listing the target and has
    /// converted one review since; what it answered meanwhile, timed from the SIGCONT
    /// (`docs/webhook.md`, "After a pause"). `replica` is from [`World::replica`].
    pub async fn resume_and_review(
        &self,
        s: &str,
        pod: &str,
        pid: u32,
        (replica, path): &(Replica, String),
    ) -> Result<Resumed> {
        let (k, mut r) = (u64::MAX / 2, Resumed::default());
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "resumed", "desiredAPIVersion": format!("{}/v1", self.group),
                "objects": [{"apiVersion": format!("{}/v2", self.group), "kind": "Gadget",
                    "metadata": {"name": "resumed", "namespace": self.t.ns}, "spec": spec_at("v2", 0, k)}]}});
        let want = spec_at("v1", 0, k);
        let queued = {
            let (replica, path, review) = (replica.clone(), path.clone(), review.clone());
            tokio::spawn(async move { replica.post(&path, &review, Duration::from_secs(30)).await })
        };
        // Connected and the TLS ClientHello sent, into the stopped process's queue.
        tokio::time::sleep(Duration::from_millis(100)).await;
        crate::signal(pid, "CONT")?;
        let resumed = Instant::now();
        let mut queued = Some(queued);
        loop {
            let sent = resumed.elapsed();
            let answer = match queued.take() {
                Some(q) => q.await?,
                None => replica.post(path, &review, Duration::from_secs(30)).await,
            };
            let took = resumed.elapsed() - sent;
            let converted = match &answer {
                Ok((200, body)) => serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v["response"]["convertedObjects"][0]["spec"].clone().into())
                    .is_some_and(|spec: Value| spec == want),
                _ => false,
            };
            if converted {
                r.ok += 1;
                r.first_ok.get_or_insert((sent, took));
            } else if r.failed.len() < 20 {
                let what = match answer {
                    Ok((code, body)) => format!("{code}: {}", body.chars().take(300).collect::<String>()),
                    Err(e) => format!("{e:#}"),
                };
                r.failed.push((sent, what));
            }
            let ready = self.pods.get(pod).await.is_ok_and(|p| pod_ready(&p));
            if ready && r.ready_after.is_none() {
                r.ready_after = Some(resumed.elapsed());
            }
            if ready && r.ok > 0 && self.leases_of(s).await? == (2, 2) {
                return Ok(r);
            }
            ensure!(
                resumed.elapsed() < WAIT,
                "{pod} not Ready with its Lease listing the target {WAIT:?} after SIGCONT"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `(pod, pid, ready)` of each replica of server `s`.
    pub async fn replicas(&self, s: &str) -> Result<Vec<(String, u32, bool)>> {
        let lp = ListParams::default().labels(&format!("{LABEL_INSTANCE}={s}"));
        Ok(self
            .pods
            .list(&lp)
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| Some((p.metadata.name.clone()?, container_pid(p, "webhook")?, pod_ready(p))))
            .collect())
    }

    pub async fn set_pin(&self, server: Option<&str>) -> Result<()> {
        let r = server.map(|s| json!({"name": s}));
        self.cfgs
            .patch(
                &self.cfg,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"webhookServerRef": r}})),
            )
            .await?;
        Ok(())
    }

    pub async fn set_sharding(&self, server: &str, enabled: bool) -> Result<()> {
        let p = Patch::Merge(json!({"spec": {"sharding": {"enabled": enabled}}}));
        self.srvs.patch(server, &PatchParams::default(), &p).await?;
        Ok(())
    }

    /// The config's `status.handover.state` as stored now.
    pub async fn handover_state(&self) -> Result<String> {
        let cfg = self.cfgs.get(&self.cfg).await?;
        Ok(cfg.status.and_then(|s| s.handover).map(|h| format!("{:?}", h.state)).unwrap_or_default())
    }

    async fn generation(&self) -> Result<i64> {
        Ok(self.crds.get(&self.target).await?.metadata.generation.unwrap_or_default())
    }

    pub async fn begin(&self) -> Result<Begin> {
        Ok(Begin {
            generation: self.generation().await?,
            tally: self.counts.tally(),
            seen: self.history.len(),
            at: Instant::now(),
        })
    }

    /// Waits until a status seen after index `from` is settled on `server` and the target
    /// names its Service.
    async fn wait_settled(&self, from: usize, server: &str) -> Result<Seen> {
        let service = format!("dco-webhook-{server}");
        let seen = self
            .history
            .wait(&format!("{} settled on {server}", self.cfg), from, |s| {
                s.state == "SourceDropped" && s.destination == server
            })
            .await?;
        wait_for(&format!("{} wired to {service}", self.target), WAIT, || async {
            Ok((self.wired().await? == Some(service.clone())).then_some(()))
        })
        .await?;
        Ok(seen)
    }

    /// Waits for the move begun at `b` to settle on `to` coming from `from`, keeps the load on
    /// for one drain period and a little more (the source drops the plan meanwhile), and
    /// records what it cost.
    pub async fn finish(&mut self, what: &str, b: Begin, from: &str, to: &str) -> Result<MoveReport> {
        let seen = self.wait_settled(b.seen, to).await.with_context(|| what.to_string())?;
        let took = b.at.elapsed();
        ensure!(seen.source == from, "{what}: the move came from {:?}, not {from}", seen.source);
        let switch = match &self.probe {
            Some(p) => Some(p.wait_switches_after(b.at, WAIT).await.with_context(|| what.to_string())?),
            None => None,
        };
        tokio::time::sleep(DRAIN + Duration::from_secs(3)).await;
        let cfg = self.cfgs.get(&self.cfg).await?;
        let reason = crate::moves::ready_reason(&cfg);
        let states = self.history.since(b.seen).into_iter().map(|(_, s)| s.state).collect();
        let r = MoveReport {
            what: what.to_string(),
            load: self.counts.tally() - b.tally,
            took,
            states,
            spec_changes: self.generation().await? - b.generation,
            to_dying: self.to_dying(&b),
            expected_changes: 1,
            verified: reason == "HandoverReady" && !seen.unverified,
            apiserver_lag: switch.as_ref().and_then(|s| s.lag()),
            errors: self.counts.errors(),
        };
        eprintln!(
            "{what}: {} requests ok, {} failed, {} wrong; settled in {:.1} s through {:?}; spec changed {}×; HandoverReady reason {reason}; apiservers switched {}",
            r.load.ok,
            r.load.failed,
            r.load.wrong,
            r.took.as_secs_f64(),
            r.states,
            r.spec_changes,
            switch.map_or("(one apiserver)".to_string(), |s| s.describe())
        );
        self.reports.push(r.clone());
        Ok(r)
    }

    /// A change or fault that must not move the target: for `hold` its spec and handover
    /// status stay as they are, and the load fails nothing.
    pub async fn no_move(&mut self, what: &str, b: Begin, hold: Duration) -> Result<MoveReport> {
        tokio::time::sleep(hold).await;
        let moved = self.history.since(b.seen);
        let r = MoveReport {
            what: what.to_string(),
            load: self.counts.tally() - b.tally,
            took: b.at.elapsed(),
            states: moved.iter().map(|(_, s)| s.state.clone()).collect(),
            spec_changes: self.generation().await? - b.generation,
            to_dying: self.to_dying(&b),
            expected_changes: 0,
            verified: moved.is_empty(),
            apiserver_lag: None,
            errors: self.counts.errors(),
        };
        eprintln!(
            "{what}: {} requests ok, {} failed, {} wrong; {} statuses seen, spec changed {}×",
            r.load.ok,
            r.load.failed,
            r.load.wrong,
            moved.len(),
            r.spec_changes
        );
        self.reports.push(r.clone());
        Ok(r)
    }

    /// `(live, listing)`: the live served-target Leases of server `s`, and how many of them
    /// list the target.
    pub async fn leases_of(&self, s: &str) -> Result<(usize, usize)> {
        let lp = ListParams::default().labels(&format!("{LABEL_INSTANCE}={s}"));
        let now = k8s_openapi::jiff::Timestamp::now();
        let (mut live, mut listing) = (0, 0);
        for l in self.leases.list(&lp).await?.items {
            let spec = l.spec.unwrap_or_default();
            let (Some(renew), Some(secs)) = (spec.renew_time, spec.lease_duration_seconds) else { continue };
            if renew.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(secs)) < now {
                continue;
            }
            live += 1;
            let ann = l.metadata.annotations.unwrap_or_default();
            if matches!(served_lease::read(&ann), Report::Targets(t) if t.contains(&self.target)) {
                listing += 1;
            }
        }
        Ok((live, listing))
    }

    /// The Service the target's spec.conversion names now.
    pub async fn wired(&self) -> Result<Option<String>> {
        let crd = serde_json::to_value(self.crds.get(&self.target).await?)?;
        Ok(dco_api::target::wired_service(&crd).map(|(_, n)| n.to_string()))
    }

    /// Waits until server `s` has 2 ready replicas again, each with a live Lease listing the
    /// target (after a fault, before the next).
    pub async fn wait_recovered(&self, s: &str) -> Result<()> {
        wait_for(&format!("server {s} to recover: 2 ready replicas listing the target"), WAIT, || async {
            let ready = self.replicas(s).await?.iter().filter(|r| r.2).count();
            Ok((ready == 2 && self.leases_of(s).await? == (2, 2)).then_some(()))
        })
        .await
    }

    /// Stops the load, prints every move's line, removes what the test made, and fails unless
    /// every move was clean.
    pub async fn end(mut self) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        for t in std::mem::take(&mut self.tasks) {
            t.abort();
            let _ = t.await;
        }
        let total = self.counts.tally();
        eprintln!(
            "\n{:<48} {:>8} {:>13} {:>6} {:>8} {:>5} {:>8}  states",
            "move", "requests", "failed", "wrong", "settled", "spec", "api lag"
        );
        for r in &self.reports {
            eprintln!(
                "{:<48} {:>8} {:>13} {:>6} {:>7.1}s {:>5} {:>8}  {}",
                r.what,
                r.load.ok + r.load.failed + r.load.wrong,
                if r.to_dying > 0 {
                    format!("{} ({} dying)", r.load.failed, r.to_dying)
                } else {
                    r.load.failed.to_string()
                },
                r.load.wrong,
                r.took.as_secs_f64(),
                r.spec_changes,
                r.apiserver_lag.map_or("-".to_string(), |l| format!("{:.1}ms", l.as_secs_f64() * 1000.0)),
                r.states.join(" → ")
            );
        }
        eprintln!("the whole test: {total:?} over {} apiserver(s)", self.apiservers);
        let dirty: Vec<&MoveReport> = self.reports.iter().filter(|r| !r.clean()).collect();
        if let Some(r) = dirty.first() {
            bail!("{} of {} moves were not clean; first: {r:?}", dirty.len(), self.reports.len());
        }
        let dying: u64 = self.reports.iter().map(|r| r.to_dying).sum();
        ensure!(
            total.failed == dying && total.wrong == 0,
            "the load outside the moves: {total:?}: {:?}",
            self.counts.errors()
        );
        Ok(())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for (_, c) in &mut self.operators {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Cluster-scoped objects outlive the namespace: remove them, finalizers first (the
        // operators are gone, nobody else would).
        let kubectl = |args: &[&str]| {
            let _ = Command::new(self.t.cluster.kubectl())
                .arg("--kubeconfig")
                .arg(&self.t.cluster.kubeconfig)
                .args(args)
                .output();
        };
        let unfinalize = r#"{"metadata":{"finalizers":null}}"#;
        kubectl(&[
            "patch",
            "crdconversionconfigs.conversion.dco.rs",
            &self.cfg,
            "--type=merge",
            "-p",
            unfinalize,
        ]);
        kubectl(&[
            "delete",
            "crdconversionconfigs.conversion.dco.rs",
            &self.cfg,
            "--wait=false",
            "--ignore-not-found",
        ]);
        kubectl(&["delete", "crd", &self.target, "--wait=false", "--ignore-not-found"]);
        for s in &self.servers {
            kubectl(&[
                "patch",
                "conversionwebhookservers.conversion.dco.rs",
                s,
                "--type=merge",
                "-p",
                unfinalize,
            ]);
            kubectl(&[
                "delete",
                "conversionwebhookservers.conversion.dco.rs",
                s,
                "--wait=false",
                "--ignore-not-found",
            ]);
        }
    }
}

/// The reason of a config's `HandoverReady=True` condition, if it has one.
pub fn ready_reason(cfg: &CRDConversionConfig) -> String {
    cfg.status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| c.type_ == "HandoverReady" && c.status == "True"))
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

fn watch_config(
    cfgs: Api<CRDConversionConfig>,
    name: String,
    h: Arc<History>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher(cfgs, cfg).default_backoff().applied_objects().boxed();
        while let Some(ev) = events.next().await {
            if let Ok(c) = ev {
                h.record(&c);
            }
        }
    })
}

/// Load client `c`: for each write `k`, writes one of its objects at a spoke (v1 for even `k`,
/// v3 for odd), reads it back at the hub and at the other spoke, and every third write lists
/// at a spoke; each request goes to the next apiserver in turn. About 4 requests per 40 ms.
fn load(
    c: usize,
    apis: Vec<[Api<DynamicObject>; 3]>,
    group: String,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let n = apis.len();
        let mut req = c;
        let mut next = || {
            req += 1;
            &apis[req % n]
        };
        let mut k = 0u64;
        while !stop.load(Ordering::SeqCst) {
            k += 1;
            let name = format!("o{c}-{}", k as usize % PER_CLIENT);
            let (wv, other) = if k.is_multiple_of(2) { (0, 2) } else { (2, 0) };
            let obj = json!({"apiVersion": format!("{group}/{}", VERSIONS[wv]), "kind": "Gadget",
                "metadata": {"name": name}, "spec": spec_at(VERSIONS[wv], c, k)});
            let p = PatchParams::apply(&MANAGER).force();
            if let Err(e) = next()[wv].patch(&name, &p, &Patch::Apply(&obj)).await {
                counts.fail(false, format!("write {name} at {}: {e}", VERSIONS[wv]));
                continue;
            }
            counts.ok.fetch_add(1, Ordering::SeqCst);
            for v in [1, other] {
                match next()[v].get(&name).await {
                    Ok(o) if o.data["spec"] == spec_at(VERSIONS[v], c, k) => {
                        counts.ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(o) => counts
                        .fail(true, format!("{name} at {}: {} (wrote #{k})", VERSIONS[v], o.data["spec"])),
                    Err(e) => counts.fail(false, format!("read {name} at {}: {e}", VERSIONS[v])),
                }
            }
            if k.is_multiple_of(3) {
                let v = if k.is_multiple_of(2) { 2 } else { 0 };
                match next()[v].list(&ListParams::default()).await {
                    Ok(l) => {
                        let bad = l.items.iter().find(|o| {
                            expected_from_owner(VERSIONS[v], &o.data["spec"]).as_ref()
                                != Some(&o.data["spec"])
                        });
                        match bad {
                            None if l.items.len() == CLIENTS * PER_CLIENT => {
                                counts.ok.fetch_add(1, Ordering::SeqCst);
                            }
                            None => {
                                counts.fail(true, format!("list at {}: {} items", VERSIONS[v], l.items.len()))
                            }
                            Some(o) => {
                                counts.fail(true, format!("list at {}: {}", VERSIONS[v], o.data["spec"]))
                            }
                        }
                    }
                    Err(e) => counts.fail(false, format!("list at {}: {e}", VERSIONS[v])),
                }
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    })
}
