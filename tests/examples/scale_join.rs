//! Benchmark (`hack/bench/scale-join.sh`; results in docs/performance.md, "Scale: idle
//! requests and a sixth server joining"): TARGETS small targets (v1 spoke, v2 hub and
//! storage, a FieldRename) with unpinned configs over POOL sharded servers of 2 replicas and
//! OPERATORS operator replicas, all settled; then
//!
//! 1. the apiserver requests dco makes over IDLE seconds of quiet, from the apiserver's audit
//!    log (AUDIT_LOG), by client, verb and resource;
//! 2. one more pool server joins: how many targets move against the rendezvous expectation
//!    (1/(POOL+1)), the rate at which moves start (`HandoverStarted` Events, paced at
//!    `--rebalance-qps` QPS), the time until all are settled after its Pods are Ready, and a
//!    load (`dco_tests::load`) over SAMPLE moving and SAMPLE staying targets throughout.
//!
//! JOIN=0 stops after the idle window (no sixth server).
//!
//! Not a test: nothing is asserted but that the run completes; it prints what it measured.
//! Needs builds of dco-operator and dco-webhook (debug, or release with
//! `DCO_BIN_PROFILE=release`) and a cluster of its own (the script starts one with the audit
//! log on).

#[path = "scale/common.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{Operators, knob, secs};
use dco_api::assign::{ServerInfo, Servers};
use dco_api::config::{ConversionConfig, Phase};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, HandoverState, LABEL_INSTANCE};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use dco_tests::fleet::{Fleet, wait_server_up};
use dco_tests::load::{Load, Target};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-bench-join");
const LABEL: &str = "dco-bench-join";
const WAIT: Duration = Duration::from_secs(3600);

fn group(ns: &str, i: usize) -> String {
    format!("t{i:04}.{ns}.join.dco.rs")
}
fn target(ns: &str, i: usize) -> String {
    format!("widgets.{}", group(ns, i))
}
fn config(ns: &str, i: usize) -> String {
    format!("{ns}-t{i:04}")
}

fn fleet(ns: &str) -> Fleet<'_> {
    Fleet { manager: MANAGER, label: LABEL, ns }
}

fn spec(version: &str, k: i64) -> Value {
    if version == "v1" { json!({"foo": format!("v{k}")}) } else { json!({"bar": format!("v{k}")}) }
}

/// Configs settled on the server `want` names for their target: Applied, handover at
/// SourceDropped there, HandoverReady True.
async fn settled(client: &Client, ns: &str, want: &BTreeMap<String, String>) -> Result<usize> {
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let list = cfgs.list(&ListParams::default().labels(&format!("{LABEL}={ns}"))).await?;
    Ok(list
        .items
        .iter()
        .filter(|c| {
            let st = c.status.clone().unwrap_or_default();
            let h = st.handover.clone().unwrap_or_default();
            st.phase == Some(Phase::Applied)
                && h.state == HandoverState::SourceDropped
                && h.destination.as_ref() == want.get(c.target_name())
                && st.conditions.iter().any(|c| c.type_ == "HandoverReady" && c.status == "True")
        })
        .count())
}

async fn wait_settled(client: &Client, ns: &str, want: &BTreeMap<String, String>, what: &str) -> Result<()> {
    let started = Instant::now();
    let mut last = Instant::now();
    loop {
        let n = settled(client, ns, want).await?;
        if n == want.len() {
            return Ok(());
        }
        if started.elapsed() > WAIT {
            bail!("{what}: {n} of {} settled after {WAIT:?}", want.len());
        }
        if last.elapsed() > Duration::from_secs(30) {
            eprintln!("{what}: {n} of {} settled after {:.0?}", want.len(), started.elapsed());
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn assignment(client: &Client, ns: &str, names: &[String]) -> Result<BTreeMap<String, String>> {
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let list = servers.list(&ListParams::default().labels(&format!("{LABEL}={ns}"))).await?;
    let pool = Servers::new(list.items.iter().map(ServerInfo::from));
    names
        .iter()
        .map(|t| Ok((t.clone(), pool.resolve(t, None).with_context(|| format!("resolving {t}"))?.server)))
        .collect()
}

/// When each of `moved`'s configs reached `reason` in its latest move (the Events of the
/// handover: operator/src/config/driver.rs), for those that did.
async fn move_times(
    client: &Client,
    ns: &str,
    moved: &BTreeSet<String>,
    reason: &str,
) -> Result<BTreeMap<String, Timestamp>> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await?;
    let mut at: BTreeMap<String, Timestamp> = BTreeMap::new();
    for e in &list.items {
        let Some(cfg) = e.regarding.as_ref().and_then(|r| r.name.as_ref()) else { continue };
        if !cfg.starts_with(ns) || !moved.contains(cfg) || e.reason.as_deref() != Some(reason) {
            continue;
        }
        let Some(when) = e.event_time.as_ref().map(|m| m.0) else { continue };
        let t = at.entry(cfg.clone()).or_insert(when);
        *t = (*t).max(when);
    }
    Ok(at)
}

/// The median and the largest of the seconds from `a` to `b` of each config in both.
fn phase(a: &BTreeMap<String, Timestamp>, b: &BTreeMap<String, Timestamp>) -> String {
    let mut d: Vec<f64> =
        a.iter().filter_map(|(c, x)| Some(b.get(c)?.duration_since(*x).as_secs_f64())).collect();
    d.sort_by(f64::total_cmp);
    match d.last() {
        Some(max) => format!("{:.1} / {max:.1} s", d[d.len() / 2]),
        None => "—".into(),
    }
}

async fn run(t: &TestEnv, audit_log: Option<String>) -> Result<()> {
    let (client, ns) = (t.client.clone(), t.ns.as_str());
    let n: usize = knob("TARGETS", 1000);
    let pool_size: usize = knob("POOL", 5);
    let sample: usize = knob("SAMPLE", 10);
    let idle: u64 = knob("IDLE", 60);
    let names: Vec<String> = (0..n).map(|i| target(ns, i)).collect();
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let pool: Vec<String> = (0..=pool_size).map(|k| format!("{ns}-s{k}")).collect();
    for (k, s) in pool[..pool_size].iter().enumerate() {
        MANAGER.apply(&servers, s, fleet(ns).server(s, k == 0, true)).await?;
    }
    for s in &pool[..pool_size] {
        wait_server_up(&client, s, WAIT).await?;
    }
    let before = assignment(&client, ns, &names).await?;
    let t0 = Instant::now();
    fleet(ns).apply_targets(&client, 0..n, 16, WAIT, |i| (group(ns, i), config(ns, i))).await?;
    let created = t0.elapsed();
    wait_settled(&client, ns, &before, "the targets").await?;
    eprintln!(
        "{n} targets over {pool_size} servers: created in {}, all settled {} after the first was created",
        secs(created),
        secs(t0.elapsed())
    );

    // 1. Idle: quiet for a while first (the last status writes, Events), then the window.
    tokio::time::sleep(Duration::from_secs(30)).await;
    if let Some(log) = &audit_log {
        let from = common::audit_now();
        tokio::time::sleep(Duration::from_secs(idle)).await;
        let to = common::audit_now();
        // The audit backend writes in batches: let the window's lines reach the file.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let counts = common::audit_counts(log, ns, &from, &to)?;
        println!(
            "\nidle {idle} s with {n} targets settled ({from} to {to}): requests by client, verb, resource"
        );
        println!("| client | verb | resource | requests | per second |");
        println!("|---|---|---|---|---|");
        for ((c, v, r), k) in &counts {
            println!("| {c} | {v} | {r} | {k} | {:.3} |", *k as f64 / idle as f64);
        }
        for who in ["operator", "webhook"] {
            let sum: u64 = counts.iter().filter(|((c, ..), _)| c == who).map(|(_, k)| k).sum();
            println!("{who}: {sum} requests, {:.2}/s", sum as f64 / idle as f64);
        }
    }

    if knob("JOIN", 1) == 0 {
        eprintln!("JOIN=0: the join is skipped");
        return Ok(());
    }

    // 2. The sample, and the load on it.
    let new = pool[pool_size].clone();
    let with_new = Servers::new(pool.iter().enumerate().map(|(k, s)| ServerInfo {
        name: s.clone(),
        default: k == 0,
        pool_weight: Some(1),
    }));
    let wins: BTreeSet<usize> =
        (0..n).filter(|i| with_new.pool_winner(&names[*i]) == Some(new.as_str())).collect();
    let picked: Vec<usize> = (0..n)
        .filter(|i| wins.contains(i))
        .take(sample)
        .chain((0..n).filter(|i| !wins.contains(i)).take(sample))
        .collect();
    let mut loads = Vec::new();
    for &i in &picked {
        let tgt = Target {
            client: client.clone(),
            ns: ns.to_string(),
            group: group(ns, i),
            kind: "Widget".into(),
            plural: "widgets".into(),
            spoke: "v1".into(),
            hub: "v2".into(),
            spec,
            manager: MANAGER.0,
        };
        loads.push((wins.contains(&i), Load::start(tgt, 2, Duration::from_millis(100))));
    }
    for (_, l) in &loads {
        l.wait_clean(8, WAIT, "before the join").await?;
    }

    // The join.
    let applied = Timestamp::now();
    let t_join = Instant::now();
    MANAGER.apply(&servers, &new, fleet(ns).server(&new, false, true)).await?;
    let after = assignment(&client, ns, &names).await?;
    let moved: BTreeSet<String> =
        (0..n).filter(|i| before[&names[*i]] != after[&names[*i]]).map(|i| config(ns, i)).collect();
    let to_new = (0..n).filter(|i| after[&names[*i]] == new).count();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{LABEL_INSTANCE}={new}"));
    wait_for("the new server's 2 Pods Ready", WAIT, || async {
        let l = pods.list(&lp).await?;
        Ok((l.items.iter().filter(|p| dco_tests::pod_ready(p)).count() >= 2).then_some(()))
    })
    .await?;
    let ready = t_join.elapsed();
    wait_settled(&client, ns, &after, "the rebalance").await?;
    let settled_at = t_join.elapsed();
    // Past the sources' drain period (30 s), so the load sees the apiserver's switch whole.
    tokio::time::sleep(Duration::from_secs(32)).await;
    let (mut ok_m, mut ok_s, mut failed, mut wrong, mut errors) = (0, 0, 0, 0, Vec::new());
    for (moving, l) in loads {
        errors.extend(l.errors());
        let t = l.stop().await?;
        if moving {
            ok_m += t.ok
        } else {
            ok_s += t.ok
        }
        failed += t.failed;
        wrong += t.wrong;
    }
    let started = move_times(&client, ns, &moved, "HandoverStarted").await?;
    let patched = move_times(&client, ns, &moved, "Patched").await?;
    let dropped = move_times(&client, ns, &moved, "SourceDropped").await?;
    let starts: Vec<Timestamp> = started.values().copied().collect();
    let (first, last) = (starts.iter().min().copied(), starts.iter().max().copied());
    let span = match (first, last) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    let peak = starts
        .iter()
        .map(|s| starts.iter().filter(|x| **x >= *s && x.duration_since(*s).as_secs_f64() < 1.0).count())
        .max()
        .unwrap_or(0);
    let ideal = n as f64 / (pool_size + 1) as f64;
    println!(
        "\nserver {new} joins a pool of {pool_size} with {n} targets (--rebalance-qps {}):",
        knob("QPS", 50)
    );
    println!(
        "| moved (ideal {ideal:.1}) | moved to the new server | moves started: span, rate, busiest second | Pods Ready after apply | all settled after Pods Ready (after apply) | load ok (moving / staying) / failed / wrong |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {to_new} | {span:.1} s, {:.1}/s, {peak} ({} Events) | {} | **{}** ({}) | {ok_m} / {ok_s} / {failed} / {wrong} |",
        moved.len(),
        if span > 0.0 { (starts.len().max(1) - 1) as f64 / span } else { 0.0 },
        starts.len(),
        secs(ready),
        secs(settled_at.saturating_sub(ready)),
        secs(settled_at)
    );
    if let Some(f) = first {
        println!(
            "first move started {:.1} s after the apply ({:.1} s after the Pods were Ready), the last {:.1} s after the apply; \
             start → Patched {}, Patched → SourceDropped {} (median / max)",
            f.duration_since(applied).as_secs_f64(),
            f.duration_since(applied).as_secs_f64() - ready.as_secs_f64(),
            last.map_or(0.0, |l| l.duration_since(applied).as_secs_f64()),
            phase(&started, &patched),
            phase(&patched, &dropped)
        );
    }
    if !errors.is_empty() {
        println!("load errors: {errors:?}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("sj").await?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let selector = format!("{LABEL}={}", t.ns);
    let ids: Vec<String> = (0..knob("OPERATORS", 3usize)).map(|k| format!("op{k}")).collect();
    let qps = knob("QPS", 50u32).to_string();
    let operators = Operators::start(&t, &selector, &ids, &["--rebalance-qps", &qps])?;
    let result = dco_tests::until_signalled(run(&t, std::env::var("AUDIT_LOG").ok())).await;
    drop(operators);
    fleet(&t.ns).delete_all(&t.client).await;
    t.cleanup().await;
    result
}
