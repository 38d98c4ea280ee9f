//! Benchmark (`hack/bench/scale-configs.sh`; results in docs/performance.md, "Scale: 10,000
//! configs on 3 operator replicas"): CONFIGS CRDConversionConfigs, REAL of them naming
//! targets that exist (served by one server of 2 replicas), the rest naming absent CRDs, on
//! OPERATORS operator replicas (local processes, debug build):
//!
//! 1. cold start: the configs are created while no operator runs; then all replicas start at
//!    once; the time until every config has a status for its generation
//!    (`status.observedGeneration`);
//! 2. the replicas' resident memory and CPU per config: RSS once settled less RSS with no
//!    config (the same replicas' baseline, measured first), CPU seconds of the cold start, and
//!    CPU over IDLE quiet seconds;
//! 3. one replica killed (SIGKILL): the statuses of the configs of its shards are cleared at
//!    once, and the time until the survivors hold its shards and every config has a status
//!    again.
//!
//! Not a test: it prints what it measured. Needs debug builds of dco-operator and dco-webhook
//! and a cluster of its own (the script starts one).

#[path = "scale/common.rs"]
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use common::{Operators, cpu_seconds, knob, rss_kb, secs};
use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use dco_tests::fleet::Fleet;
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-bench-configs");
const LABEL: &str = "dco-bench-configs";
const WAIT: Duration = Duration::from_secs(3600);
/// The operator's default `--shards`.
const SHARDS: u32 = 32;

/// The shard of a uid as the operator computes it (docs/sharding.md, "Shards"): FNV-1a 64 of
/// the uid's bytes, in `S` equal ranges of the 64-bit space, range `i` starting at
/// `floor(i·2^64/S)`.
fn shard_of(uid: &str) -> u32 {
    let h = u128::from(dco_api::hash::fnv1a64(uid.as_bytes()));
    let start = |i: u32| u128::from(i) * (1u128 << 64) / u128::from(SHARDS);
    let guess = ((h * u128::from(SHARDS)) >> 64) as u32;
    if guess + 1 < SHARDS && h >= start(guess + 1) { guess + 1 } else { guess }
}

fn crd_json(ns: &str, i: usize) -> Value {
    let mut crd = dco_tests::two_version_widget_crd(&format!("r{i:05}.{ns}.cfg.dco.rs"));
    crd["metadata"]["labels"] = json!({LABEL: ns});
    crd
}

fn config_json(ns: &str, i: usize, real: bool) -> Value {
    let target = if real {
        format!("widgets.r{i:05}.{ns}.cfg.dco.rs")
    } else {
        format!("widgets.a{i:05}.{ns}.absent.dco.rs")
    };
    // The real targets' versions share one schema: no rule.
    let rules = if real {
        json!([])
    } else {
        json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.bar", "spokePath": "spec.foo"}}])
    };
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": format!("{ns}-c{i:05}"), "labels": {LABEL: ns}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}})
}

/// Configs whose status answers their generation, and all configs, of those in `only` (all
/// when empty).
async fn with_status(client: &Client, ns: &str, only: &BTreeSet<String>) -> Result<(usize, usize)> {
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    // In pages, as the operator lists: one read of 10,000 whole configs is itself a load.
    let mut lp = ListParams::default().labels(&format!("{LABEL}={ns}")).limit(500);
    let (mut done, mut all) = (0, 0);
    loop {
        let page = cfgs.list(&lp).await?;
        let mine =
            page.items.iter().filter(|c| only.is_empty() || only.contains(&kube::ResourceExt::name_any(*c)));
        for c in mine {
            all += 1;
            let st = c.status.as_ref();
            if st.is_some_and(|s| s.phase.is_some() && s.observed_generation == c.metadata.generation) {
                done += 1;
            }
        }
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return Ok((done, all)),
        }
    }
}

async fn wait_all_status(
    client: &Client,
    ns: &str,
    only: &BTreeSet<String>,
    ops: &mut Operators,
    what: &str,
) -> Result<()> {
    let (started, mut last) = (Instant::now(), Instant::now());
    loop {
        ops.check_alive()?;
        // The overloaded apiserver may close a LIST of thousands of configs: a poll is retried.
        let (done, all) = match with_status(client, ns, only).await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{what}: a poll failed, retried: {e}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        if done == all && all > 0 {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < WAIT, "{what}: {done} of {all} with a status after {WAIT:?}");
        if last.elapsed() > Duration::from_secs(30) {
            eprintln!("{what}: {done} of {all} with a status after {:.0?}", started.elapsed());
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn sample(ops: &Operators) -> Vec<(u64, f64)> {
    ops.pids().into_iter().map(|p| (rss_kb(p), cpu_seconds(p))).collect()
}

async fn run(t: &TestEnv, selector: &str) -> Result<()> {
    let (client, ns) = (t.client.clone(), t.ns.as_str());
    let n: usize = knob("CONFIGS", 10_000);
    let real: usize = knob("REAL", 20);
    let replicas: usize = knob("OPERATORS", 3);
    let idle: u64 = knob("IDLE", 60);
    let ids = |prefix: &str| (0..replicas).map(|k| format!("{prefix}{k}")).collect::<Vec<_>>();

    // The baseline: the replicas with their server and no config.
    let ops = Operators::start(t, selector, &ids("base"), &[])?;
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = dco_tests::apply_default_server(t, MANAGER, (LABEL, ns), 2).await?;
    wait_for("the server's 2 ready replicas", WAIT, || async {
        Ok(servers.get(&server).await?.status.is_some_and(|s| s.ready_replicas == 2).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let base = sample(&ops);
    // SIGKILL: the next replicas take other ids, and free shard Leases after 30 s; the cold
    // start below begins once they are expired.
    drop(ops);

    let t0 = Instant::now();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    stream::iter(0..real)
        .map(|i| {
            let crds = crds.clone();
            async move {
                MANAGER
                    .apply(&crds, &format!("widgets.r{i:05}.{ns}.cfg.dco.rs"), crd_json(ns, i))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    stream::iter(0..n)
        .map(|i| {
            let cfgs = cfgs.clone();
            async move {
                MANAGER.apply(&cfgs, &format!("{ns}-c{i:05}"), config_json(ns, i, i < real)).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let created = t0.elapsed();
    eprintln!("{n} configs created in {} ({:.0}/s)", secs(created), n as f64 / created.as_secs_f64());
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    wait_for("the baseline replicas' shard Leases to expire", WAIT, || async {
        Ok(dco_tests::shard_holders(&leases).await?.values().all(|h| !h.live).then_some(()))
    })
    .await?;

    // 1. The cold start.
    let cold = Instant::now();
    let mut ops = Operators::start(t, selector, &ids("op"), &[])?;
    wait_all_status(&client, ns, &BTreeSet::new(), &mut ops, "cold start").await?;
    let cold_took = cold.elapsed();
    let after_cold = sample(&ops);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let settled = sample(&ops);
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let idle_end = sample(&ops);

    println!(
        "\n{n} configs ({real} with a target, {} naming absent CRDs) on {replicas} operator replicas",
        n - real
    );
    println!("cold start: every config has a status {} after all replicas started", secs(cold_took));
    println!(
        "| replica | RSS with no config | RSS settled | Δ per config | CPU of the cold start | CPU per config | idle CPU ({idle} s) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let (mut d_rss, mut cpu_cold, mut cpu_idle) = (0i64, 0.0, 0.0);
    for (k, id) in ids("op").iter().enumerate() {
        let ((b, _), (_, c1), (r2, c2), (_, c3)) = (base[k], after_cold[k], settled[k], idle_end[k]);
        let d = r2 as i64 - b as i64;
        d_rss += d;
        cpu_cold += c1;
        cpu_idle += c3 - c2;
        println!(
            "| {id} | {:.1} MB | {:.1} MB | — | {c1:.1} s | — | {:.2} s ({:.1} %) |",
            b as f64 / 1024.0,
            r2 as f64 / 1024.0,
            c3 - c2,
            (c3 - c2) / idle as f64 * 100.0
        );
    }
    println!(
        "| all | | | **{:.2} KB** | {cpu_cold:.1} s | **{:.2} ms** | {cpu_idle:.2} s ({:.1} % of a core) |",
        d_rss as f64 / n as f64,
        cpu_cold * 1000.0 / n as f64,
        cpu_idle / idle as f64 * 100.0
    );

    // 3. One replica killed: its shards' configs lose their status at once.
    let (victim, mut child) = ops.children.remove(0);
    let holders = dco_tests::shard_holders(&leases).await?;
    let its: BTreeSet<u32> = holders.iter().filter(|(_, h)| h.holder == victim).map(|(s, _)| *s).collect();
    let list = cfgs.list_metadata(&ListParams::default().labels(&format!("{LABEL}={ns}"))).await?;
    let orphans: BTreeSet<String> = list
        .items
        .iter()
        .filter(|c| c.metadata.uid.as_deref().is_some_and(|u| its.contains(&shard_of(u))))
        .map(kube::ResourceExt::name_any)
        .collect();
    let killed = Instant::now();
    child.kill().context("killing a replica")?;
    let _ = child.wait();
    stream::iter(orphans.iter().cloned())
        .map(|name| {
            let cfgs = cfgs.clone();
            async move {
                cfgs.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": null})))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let cleared = killed.elapsed();
    let taken = {
        let leases = leases.clone();
        let victim = victim.clone();
        tokio::spawn(async move {
            wait_for("the survivors to hold every shard", WAIT, || async {
                let h = dco_tests::shard_holders(&leases).await?;
                Ok((h.len() == SHARDS as usize && h.values().all(|h| h.live && h.holder != victim))
                    .then_some(()))
            })
            .await
            .map(|()| killed.elapsed())
        })
    };
    wait_all_status(&client, ns, &orphans, &mut ops, "after the kill").await?;
    let all_back = killed.elapsed();
    let taken = taken.await??;
    println!(
        "\nreplica {victim} killed (SIGKILL) holding {} shards, {} configs: their statuses cleared {} after the kill; \
         the survivors hold every shard {} after it; every config has a status again **{}** after it",
        its.len(),
        orphans.len(),
        secs(cleared),
        secs(taken),
        secs(all_back)
    );
    drop(ops);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("sc").await?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let selector = format!("{LABEL}={}", t.ns);
    let result = dco_tests::until_signalled(run(&t, &selector)).await;
    Fleet { manager: MANAGER, label: LABEL, ns: &t.ns }.delete_all(&t.client).await;
    t.cleanup().await;
    result
}
