//! Rebalancing (docs/performance.md, "Rebalance"): 200 targets spread over two sharded
//! servers, then a third joins.
//!
//! Servers A (`default: true`) and B are pool members (`spec.sharding.enabled`), 2 replicas
//! each; 200 small target CRDs (v1 spoke, v2 hub and storage, a FieldRename rule), each with
//! an unpinned CRDConversionConfig, settle on the server the resolver picks. The test
//! computes that assignment with `dco_api::assign::Servers` over `ServerInfo::from` of the
//! server objects: the function the operator and every webhook replica use
//! (api/src/assign.rs). Then server C joins. Weighted rendezvous hashing moves exactly the
//! targets C now wins (about 1/3) and nothing between A and B; each move is one change of
//! the target's spec (generation +1), every other target is not touched, and a load client
//! that writes at the spoke version and reads back at the hub version over 20 of the targets
//! (moving and staying) fails no request and reads no wrong value throughout.
//!
//! Reported, not asserted (the machine is shared; waits are only generous timeouts): each
//! webhook replica's resident memory (VmRSS of its local process, docs/testenv.md) with 0,
//! 100 and 200 targets in the cluster, and the targets it holds; the time until every moved
//! target is settled on C; the rate at which moves started (from the `HandoverStarted`
//! Events, paced by operator/src/wake/pacing.rs `Pacer` at `--rebalance-qps`, which the
//! operator also reads from `DCO_REBALANCE_QPS`); the load's counts.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`
//! (`cargo build -p dco-operator -p dco-webhook`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use dco_api::assign::{ServerInfo, Servers};
use dco_api::config::ConversionConfig;
use dco_api::{CRDConversionConfig, ConversionWebhookServer, HandoverState, LABEL_INSTANCE, served_lease};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::json;

use dco_tests::fleet::{Fleet, wait_server_up};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-rebalance");
/// The label of everything cluster-scoped the test makes (value: the test's namespace): the
/// operators' `--selector`, and what the cleanup deletes.
const LABEL: &str = "dco-e2e-rebalance";
const TARGETS: usize = 200;
/// Targets under load: half that C wins (they move), half that stay.
const SAMPLE: usize = 20;
/// Load clients, each on its own targets (so each checks its own writes).
const CLIENTS: usize = 4;
/// Only a timeout: 200 first wirings on a shared 2-core machine take minutes.
const WAIT: Duration = Duration::from_secs(900);
/// The webhooks' drain period here: the default. A source keeps a moved plan this long after
/// it saw the switch (and after the last review it answered), so the load runs past it. Not
/// the other tests' 5 s: in a storm of re-wirings an apiserver switches late (it still used
/// a source's old wiring 6 s after the write in one CI run, 11 s in another), and a target
/// that gets no request for a drain period meanwhile is dropped before it (docs/operations.md
/// "The drain period").
const DRAIN: Duration = Duration::from_secs(30);

fn group(ns: &str, i: usize) -> String {
    format!("t{i:03}.{ns}.rebal.dco.rs")
}

fn target(ns: &str, i: usize) -> String {
    format!("widgets.{}", group(ns, i))
}

fn config(ns: &str, i: usize) -> String {
    format!("{ns}-t{i:03}")
}

fn fleet(ns: &str) -> Fleet<'_> {
    Fleet { manager: MANAGER, label: LABEL, ns }
}

/// Applies targets `range` (CRDs, then configs once the CRDs are Established), 8 at a time.
async fn create_targets(client: &Client, ns: &str, range: std::ops::Range<usize>) -> Result<()> {
    fleet(ns).apply_targets(client, range, 8, WAIT, |i| (group(ns, i), config(ns, i))).await
}

/// One config as a poll saw it, with its target.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    /// The server it is settled on: handover SourceDropped there, `HandoverReady` True with
    /// reason `HandoverReady` (verified through the Leases), phase Applied, and the target's
    /// spec.conversion naming that server's Service.
    settled_on: Option<String>,
    /// The server the target's spec.conversion names.
    wired_to: Option<String>,
    state: Option<HandoverState>,
    source: Option<String>,
    attempt: u32,
    since: Option<String>,
    generation: i64,
}

/// Every config of the test and its target, keyed by target, from two lists.
async fn snapshot(client: &Client, ns: &str) -> Result<BTreeMap<String, Seen>> {
    let selector = ListParams::default().labels(&format!("{LABEL}={ns}"));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let (crd_list, cfg_list) = tokio::try_join!(crds.list(&selector), cfgs.list(&selector))?;
    let service_of = |crd: &CustomResourceDefinition| {
        let svc = crd.spec.conversion.as_ref()?.webhook.as_ref()?.client_config.as_ref()?.service.as_ref()?;
        (svc.namespace == ns).then(|| svc.name.strip_prefix("dco-webhook-").map(str::to_string))?
    };
    let targets: BTreeMap<String, (Option<String>, i64)> = crd_list
        .items
        .iter()
        .map(|c| (kube::ResourceExt::name_any(c), (service_of(c), c.metadata.generation.unwrap_or_default())))
        .collect();
    let mut out = BTreeMap::new();
    for c in &cfg_list.items {
        let name = c.target_name().to_string();
        let Some((wired_to, generation)) = targets.get(&name).cloned() else { continue };
        let st = c.status.clone().unwrap_or_default();
        let h = st.handover.clone().unwrap_or_default();
        let verified = st
            .conditions
            .iter()
            .any(|c| c.type_ == "HandoverReady" && c.status == "True" && c.reason == "HandoverReady");
        let settled = verified
            && h.state == HandoverState::SourceDropped
            && st.phase == Some(dco_api::config::Phase::Applied)
            && h.destination.is_some()
            && h.destination == wired_to;
        out.insert(
            name,
            Seen {
                settled_on: if settled { h.destination.clone() } else { None },
                wired_to,
                state: st.handover.as_ref().map(|h| h.state),
                source: h.source.clone(),
                attempt: h.attempt,
                since: h.since.clone(),
                generation,
            },
        );
    }
    Ok(out)
}

/// The resolver's answer for every target over the test's servers as they are now.
async fn expected(
    client: &Client,
    ns: &str,
    targets: &[String],
) -> Result<(Servers, BTreeMap<String, String>)> {
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let list = servers.list(&ListParams::default().labels(&format!("{LABEL}={ns}"))).await?;
    let pool = Servers::new(list.items.iter().map(ServerInfo::from));
    let mut out = BTreeMap::new();
    for t in targets {
        out.insert(t.clone(), pool.resolve(t, None).with_context(|| format!("resolving {t}"))?.server);
    }
    Ok((pool, out))
}

/// Polls until every target is settled on its `want` server; returns the last snapshot.
/// `must_stay`: targets that must be settled where they are at every poll (no flap).
async fn wait_settled(
    client: &Client,
    ns: &str,
    want: &BTreeMap<String, String>,
    must_stay: &BTreeSet<String>,
    what: &str,
) -> Result<BTreeMap<String, Seen>> {
    let started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let seen = snapshot(client, ns).await?;
        for t in must_stay {
            let s = seen.get(t);
            ensure!(
                s.and_then(|s| s.settled_on.as_ref()) == want.get(t),
                "{what}: {t}, which stays on {:?}, is not settled there: {s:?}",
                want.get(t)
            );
        }
        let settled =
            want.iter().filter(|(t, s)| seen.get(*t).and_then(|x| x.settled_on.as_ref()) == Some(s));
        let n = settled.count();
        if n == want.len() {
            return Ok(seen);
        }
        if started.elapsed() > WAIT {
            let pending: Vec<_> = want
                .iter()
                .filter(|(t, s)| seen.get(*t).and_then(|x| x.settled_on.as_ref()) != Some(s))
                .take(5)
                .map(|(t, s)| format!("{t} (want {s}): {:?}", seen.get(t)))
                .collect();
            bail!("{what}: {n} of {} settled after {WAIT:?}; e.g. {pending:?}", want.len());
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!("{what}: {n} of {} settled after {:.0?}", want.len(), started.elapsed());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// One webhook replica: its server, Pod, the targets its served-target Lease reports and its
/// process's resident memory.
struct Replica {
    server: String,
    pod: String,
    held: Option<usize>,
    rss_kb: u64,
}

fn vm_rss_kb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS line")?;
    Ok(line.split_whitespace().nth(1).context("empty VmRSS")?.parse()?)
}

async fn replicas(client: &Client, ns: &str, servers: &[&str]) -> Result<Vec<Replica>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for server in servers {
        let list = pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
        for p in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            let pod = kube::ResourceExt::name_any(p);
            let pid = dco_tests::container_pid(p, "webhook").with_context(|| format!("no pid for {pod}"))?;
            let lease = leases.get_opt(&dco_api::served_lease_name(&pod)).await?;
            let held = lease.and_then(|l| {
                served_lease::read(&l.metadata.annotations.unwrap_or_default()).targets().map(|t| t.len())
            });
            out.push(Replica { server: server.to_string(), pod, held, rss_kb: vm_rss_kb(pid)? });
        }
    }
    Ok(out)
}

async fn report_memory(client: &Client, ns: &str, servers: &[&str], when: &str) -> Result<Vec<Replica>> {
    let r = replicas(client, ns, servers).await?;
    for x in &r {
        eprintln!(
            "memory {when}: {} {}: VmRSS {:.1} MiB, holds {} targets",
            x.server,
            x.pod,
            x.rss_kb as f64 / 1024.0,
            x.held.map_or("?".to_string(), |h| h.to_string())
        );
    }
    Ok(r)
}

/// Counts of the load client.
#[derive(Default)]
struct Load {
    ok_moving: AtomicU64,
    ok_staying: AtomicU64,
    failed: AtomicU64,
    wrong: AtomicU64,
    errors: std::sync::Mutex<Vec<String>>,
}

impl Load {
    fn ok(&self, moving: bool) {
        if moving { &self.ok_moving } else { &self.ok_staying }.fetch_add(1, Ordering::SeqCst);
    }
    fn fail(&self, wrong: bool, what: String) {
        if wrong { &self.wrong } else { &self.failed }.fetch_add(1, Ordering::SeqCst);
        let mut e = self.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if e.len() < 10 {
            e.push(format!("{}: {what}", Timestamp::now()));
        }
    }
    fn counts(&self) -> (u64, u64, u64, u64) {
        (
            self.ok_moving.load(Ordering::SeqCst),
            self.ok_staying.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
            self.wrong.load(Ordering::SeqCst),
        )
    }
    fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// A sample target under load: its object `w0` at both versions, and whether it moves.
#[derive(Clone)]
struct Loaded {
    name: String,
    group: String,
    v1: Api<DynamicObject>,
    v2: Api<DynamicObject>,
    moving: bool,
}

/// Writes `w0` at the spoke version (the reply is converted back from storage: checked) and
/// reads it at the hub version (checked), round-robin over `targets`, until `stop`.
fn load(targets: Vec<Loaded>, stop: Arc<AtomicBool>, counts: Arc<Load>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut k = 0u64;
        while !stop.load(Ordering::SeqCst) {
            k += 1;
            let t = &targets[k as usize % targets.len()];
            let value = format!("v{k}");
            let obj = json!({"apiVersion": format!("{}/v1", t.group), "kind": "Widget", "metadata": {"name": "w0"}, "spec": {"foo": value}});
            match t.v1.patch("w0", &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&obj)).await {
                Ok(o) if o.data["spec"]["foo"] == json!(value) => counts.ok(t.moving),
                Ok(o) => {
                    counts.fail(
                        true,
                        format!("{}: write at v1 answered {} (wrote {value})", t.name, o.data["spec"]),
                    );
                    continue;
                }
                Err(e) => {
                    counts.fail(false, format!("{}: write at v1: {e}", t.name));
                    continue;
                }
            }
            match t.v2.get("w0").await {
                Ok(o) if o.data["spec"]["bar"] == json!(value) => counts.ok(t.moving),
                Ok(o) => counts.fail(true, format!("{}: at v2 {} (wrote {value})", t.name, o.data["spec"])),
                Err(e) => counts.fail(false, format!("{}: read at v2: {e}", t.name)),
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
}

fn secs(d: SignedDuration) -> f64 {
    d.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn run(client: Client, ns: String) -> Result<()> {
    let started = Instant::now();
    let ns = ns.as_str();
    let names: Vec<String> = (0..TARGETS).map(|i| target(ns, i)).collect();
    let (a, b, c) = (format!("{ns}-a"), format!("{ns}-b"), format!("{ns}-c"));
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    MANAGER.apply(&servers, &a, fleet(ns).server(&a, true, true)).await?;
    MANAGER.apply(&servers, &b, fleet(ns).server(&b, false, true)).await?;
    wait_server_up(&client, &a, WAIT).await?;
    wait_server_up(&client, &b, WAIT).await?;
    let mem0 = report_memory(&client, ns, &[&a, &b], "with 0 targets").await?;

    let (pool, before) = expected(&client, ns, &names).await?;
    ensure!(pool.pool_members().count() == 2, "the pool is {:?}", pool.pool_members().collect::<Vec<_>>());
    // C's name is known before it exists, so the sample can hold targets that will move.
    let with_c = Servers::new([&a, &b, &c].map(|n| ServerInfo {
        name: n.clone(),
        default: *n == a,
        pool_weight: Some(1),
    }));
    let wins_c: BTreeSet<String> =
        names.iter().filter(|t| with_c.pool_winner(t) == Some(c.as_str())).cloned().collect();

    let t_create = Instant::now();
    create_targets(&client, ns, 0..TARGETS / 2).await?;
    let half: BTreeMap<String, String> =
        names[..TARGETS / 2].iter().map(|t| (t.clone(), before[t].clone())).collect();
    wait_settled(&client, ns, &half, &BTreeSet::new(), "the first 100 targets").await?;
    let took_half = t_create.elapsed();
    let mem100 = report_memory(&client, ns, &[&a, &b], "with 100 targets").await?;
    create_targets(&client, ns, TARGETS / 2..TARGETS).await?;
    let seen_before = wait_settled(&client, ns, &before, &BTreeSet::new(), "all 200 targets").await?;
    let took_all = t_create.elapsed();
    let mem200 = report_memory(&client, ns, &[&a, &b], "with 200 targets").await?;
    let on = |s: &str| before.values().filter(|v| *v == s).count();
    eprintln!(
        "200 targets settled {took_all:.1?} after the first was created (the first 100 in {took_half:.1?}): {} on A, {} on B",
        on(&a),
        on(&b)
    );

    // The sample: the first SAMPLE/2 targets C wins and the first SAMPLE/2 it does not.
    let sample: Vec<usize> = {
        let moving = (0..TARGETS).filter(|i| wins_c.contains(&names[*i])).take(SAMPLE / 2);
        let staying = (0..TARGETS).filter(|i| !wins_c.contains(&names[*i])).take(SAMPLE / 2);
        moving.chain(staying).collect()
    };
    ensure!(sample.len() == SAMPLE, "C wins {} of {TARGETS}: no sample of {SAMPLE}", wins_c.len());
    let mut loaded = Vec::new();
    for &i in &sample {
        let gvk = |v: &str| GroupVersionKind::gvk(&group(ns, i), v, "Widget");
        let ar = |v: &str| ApiResource::from_gvk_with_plural(&gvk(v), "widgets");
        let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar("v1"));
        let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar("v2"));
        let obj = json!({"apiVersion": format!("{}/v2", group(ns, i)), "kind": "Widget",
            "metadata": {"name": "w0"}, "spec": {"bar": "stored"}});
        // At the storage version: no conversion, only the kind being served after its CRD's
        // last change.
        wait_for(&format!("storing w0 of {}", names[i]), WAIT, || async {
            Ok(v2.patch("w0", &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&obj)).await.ok())
        })
        .await?;
        loaded.push(Loaded {
            name: names[i].clone(),
            group: group(ns, i),
            v1,
            v2,
            moving: wins_c.contains(&names[i]),
        });
    }
    let (stop, counts) = (Arc::new(AtomicBool::new(false)), Arc::new(Load::default()));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let mine: Vec<Loaded> = loaded.iter().skip(k).step_by(CLIENTS).cloned().collect();
            load(mine, stop.clone(), counts.clone())
        })
        .collect();
    // A few rounds over every sample target before C joins (a count, not a time: the
    // machine may be slow), none of which may fail.
    wait_for("the load to go round its targets", WAIT, || async {
        let (m, s, failed, wrong) = counts.counts();
        ensure!(
            failed == 0 && wrong == 0,
            "before C joined: {m}+{s} ok, {failed} failed, {wrong} wrong: {:?}",
            counts.errors()
        );
        Ok((m >= 4 * SAMPLE as u64 / 2 && s >= 4 * SAMPLE as u64 / 2).then_some(()))
    })
    .await?;

    // C joins.
    let c_applied = Timestamp::now();
    let t_join = Instant::now();
    MANAGER.apply(&servers, &c, fleet(ns).server(&c, false, true)).await?;
    eprintln!("C ({c}) applied at {c_applied}");
    let (pool3, after) = expected(&client, ns, &names).await?;
    ensure!(pool3.pool_members().count() == 3, "the pool is {:?}", pool3.pool_members().collect::<Vec<_>>());
    let c_up = {
        let client = client.clone();
        let c = c.clone();
        tokio::spawn(async move { wait_server_up(&client, &c, WAIT).await.map(|()| t_join.elapsed()) })
    };
    let moved: BTreeSet<String> = names.iter().filter(|t| before[*t] != after[*t]).cloned().collect();
    let stays: BTreeSet<String> = names.iter().filter(|t| !moved.contains(*t)).cloned().collect();
    ensure!(moved == wins_c, "the resolver moves {moved:?}, not what C wins by rendezvous: {wins_c:?}");
    ensure!(moved.iter().all(|t| after[t] == c), "a target moves between A and B");
    let ideal = TARGETS as f64 / 3.0;
    eprintln!("C joined: {} of {TARGETS} targets move to it (1/3 would be {ideal:.1})", moved.len());
    // Binomial(200, 1/3) has σ ≈ 6.7: a count beyond 5σ means the hash does not spread.
    ensure!(
        (moved.len() as f64 - ideal).abs() < 5.0 * 6.7,
        "{} targets moved, far from {ideal:.1}",
        moved.len()
    );
    let seen_after = wait_settled(&client, ns, &after, &stays, "the rebalance").await?;
    let settle = t_join.elapsed();
    let c_up = c_up.await??;
    // The load keeps going past the sources' drain: the apiserver's switch is done by then.
    tokio::time::sleep(DRAIN + Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await?;
    }
    let mem_after = report_memory(&client, ns, &[&a, &b, &c], "after the rebalance").await?;

    // What each target went through: observed moves are exactly C's wins.
    let observed_moved: BTreeSet<String> =
        names.iter().filter(|t| seen_before[*t].settled_on != seen_after[*t].settled_on).cloned().collect();
    ensure!(observed_moved == moved, "moved {observed_moved:?}, expected {moved:?}");
    let mut generation_errors = Vec::new();
    for t in &names {
        let (x, y) = (&seen_before[t], &seen_after[t]);
        if moved.contains(t) {
            // One move from its old server, not restarted, and one change of its spec.
            if y.generation != x.generation + 1
                || y.attempt != x.attempt + 1
                || y.source != x.settled_on
                || y.settled_on.as_deref() != Some(c.as_str())
            {
                generation_errors.push(format!("moved {t}: before {x:?}, after {y:?}"));
            }
        } else if y != x {
            generation_errors.push(format!("stayed {t}: before {x:?}, after {y:?}"));
        }
    }
    ensure!(generation_errors.is_empty(), "{} targets: {generation_errors:?}", generation_errors.len());

    // When each move started and when it was patched, from its Events (one per transition,
    // action HandoverMove<attempt>: operator/src/config/driver.rs).
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await?;
    let cfg_of_target: BTreeMap<String, String> =
        (0..TARGETS).map(|i| (config(ns, i), names[i].clone())).collect();
    let mut at: BTreeMap<(String, String), Vec<Timestamp>> = BTreeMap::new();
    for e in &list.items {
        let Some(t) = e.regarding.as_ref().and_then(|r| r.name.as_ref()).and_then(|n| cfg_of_target.get(n))
        else {
            continue;
        };
        if !moved.contains(t)
            || e.action.as_deref() != Some(&format!("HandoverMove{}", seen_after[t].attempt))
        {
            continue;
        }
        let Some(when) = e.event_time.as_ref().map(|m| m.0) else { continue };
        at.entry((t.clone(), e.reason.clone().unwrap_or_default())).or_default().push(when);
    }
    let once = |reason: &str| -> Result<Vec<Timestamp>> {
        moved
            .iter()
            .map(|t| match at.get(&(t.clone(), reason.to_string())).map(Vec::as_slice) {
                Some([one]) => Ok(*one),
                other => bail!("{t}: {reason} Events of its move: {other:?}"),
            })
            .collect()
    };
    let starts = once("HandoverStarted")?;
    let patched = once("Patched")?;
    let dropped = once("SourceDropped")?;
    ensure!(
        !at.keys().any(|(_, r)| r == "HandoverRestarted" || r == "WiringDrifted"),
        "a move restarted or drifted: {:?}",
        at.keys().filter(|(_, r)| r == "HandoverRestarted" || r == "WiringDrifted").collect::<Vec<_>>()
    );
    let first = *starts.iter().min().context("no start")?;
    let last = *starts.iter().max().context("no start")?;
    let span = secs(last.duration_since(first));
    let rate = if span > 0.0 { (starts.len() - 1) as f64 / span } else { f64::INFINITY };
    // The busiest second of starts.
    let peak = starts
        .iter()
        .map(|s| starts.iter().filter(|x| **x >= *s && secs(x.duration_since(*s)) < 1.0).count())
        .max()
        .unwrap_or(0);
    let to_patched: Vec<f64> = starts.iter().zip(&patched).map(|(s, p)| secs(p.duration_since(*s))).collect();
    let to_dropped: Vec<f64> =
        patched.iter().zip(&dropped).map(|(p, d)| secs(d.duration_since(*p))).collect();
    let last_dropped = *dropped.iter().max().context("no drop")?;

    let (m, s, failed, wrong) = counts.counts();
    eprintln!(
        "rebalance: {} moved (ideal {ideal:.1}), all to C; C up (2 ready, Available, reporting) {c_up:.1?} after it was applied",
        moved.len()
    );
    eprintln!(
        "rebalance: settled on C {settle:.1?} after C was applied (the last SourceDropped {:.1}s after)",
        secs(last_dropped.duration_since(c_applied))
    );
    eprintln!(
        "rebalance: moves started {:.1}s to {:.1}s after C was applied: {} in {span:.2}s = {rate:.1}/s, at most {peak} in one second; rate budget {} qps over 2 operator replicas",
        secs(first.duration_since(c_applied)),
        secs(last.duration_since(c_applied)),
        starts.len(),
        std::env::var("DCO_REBALANCE_QPS").unwrap_or_else(|_| "50 (default)".into())
    );
    eprintln!(
        "rebalance: start→Patched median {:.2}s max {:.2}s; Patched→SourceDropped median {:.2}s max {:.2}s",
        median(to_patched.clone()),
        to_patched.iter().copied().fold(0.0, f64::max),
        median(to_dropped.clone()),
        to_dropped.iter().copied().fold(0.0, f64::max)
    );
    eprintln!(
        "rebalance: load on {SAMPLE} targets: {} ok ({m} on moving targets, {s} on staying), {failed} failed, {wrong} wrong",
        m + s
    );
    eprintln!("rebalance: generations: {} moved targets +1, {} others unchanged", moved.len(), stays.len());
    let summary = |r: &[Replica]| {
        r.iter()
            .map(|x| {
                format!(
                    "{}/{} {:.1} MiB ({} held)",
                    x.server.rsplit('-').next().unwrap_or_default().to_uppercase(),
                    x.pod.rsplit('-').next().unwrap_or_default(),
                    x.rss_kb as f64 / 1024.0,
                    x.held.map_or("?".to_string(), |h| h.to_string())
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!("memory 0 targets: {}", summary(&mem0));
    eprintln!("memory 100 targets: {}", summary(&mem100));
    eprintln!("memory 200 targets: {}", summary(&mem200));
    eprintln!("memory after C joined: {}", summary(&mem_after));
    eprintln!("test took {:.1?}", started.elapsed());
    ensure!(failed == 0 && wrong == 0, "the load: {failed} failed, {wrong} wrong: {:?}", counts.errors());
    ensure!(m > 0 && s > 0, "the load made {m} requests on moving targets and {s} on staying ones");
    Ok(())
}

#[tokio::test]
async fn a_third_sharded_server_takes_only_what_it_wins_with_no_failed_request() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("rebal").await?;
    let client = t.client.clone();
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let selector = format!("{LABEL}={}", t.ns);
    let operators = dco_tests::start_operators(
        &t,
        &selector,
        &["rebal-1", "rebal-2"],
        &["--resync", "60s", "--webhook-arg=--drain-period=30s"],
    )?;
    // In a task of its own, so a panic still reaches the cleanup below.
    let result = match tokio::spawn(run(client.clone(), t.ns.clone())).await {
        Ok(r) => r,
        Err(e) => Err(anyhow::anyhow!("the test panicked: {e}")),
    };
    drop(operators);
    fleet(&t.ns).delete_all(&client).await;
    t.cleanup().await;
    result
}
