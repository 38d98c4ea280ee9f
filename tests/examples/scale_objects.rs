//! Benchmark (`hack/bench/scale-objects.sh`; results in docs/performance.md, "Scale: a move of
//! a target with 100,000 objects"): one target (v1 spoke with `spec.foo`, v2 hub and storage
//! with `spec.bar`, a FieldRename) with OBJECTS objects, pinned to server A, moved to server B
//! (2 replicas each) by changing the pin, with a load (`dco_tests::load`) on the target
//! throughout. It reports:
//!
//! - a full paged LIST (500 a page) at v1 (every object converted by the webhook) and at v2
//!   (the storage version: the apiserver's own cost), before the move on A and right after
//!   the move's patch on B, while the apiserver rebuilds the kind's storage; the objects each
//!   serving replica converted per second meanwhile (`dco_webhook_objects_converted_total`);
//! - a first-page LIST (limit 500) at v1 and at v2 every 250 ms across the move: the window in
//!   which it failed and the slowest answer, from the move's patch of the CRD on;
//! - the load's requests: ok, failed, wrong.
//!
//! The objects are created at v2 by JOBS `kubectl create` processes (as hack/bench/convctl-live.sh
//! does). Not a test: it prints what it measured. Needs debug builds of dco-operator and
//! dco-webhook and a cluster of its own (the script starts one).

#[path = "scale/common.rs"]
mod common;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::{Operators, knob, secs};
use dco_api::config::Phase;
use dco_api::{CRDConversionConfig, ConversionWebhookServer, HandoverState, LABEL_INSTANCE};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

use dco_tests::fleet::Fleet;
use dco_tests::load::{Load, Target};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-bench-objects");
const LABEL: &str = "dco-bench-objects";
const WAIT: Duration = Duration::from_secs(3600);

fn spec(version: &str, k: i64) -> Value {
    if version == "v1" { json!({"foo": format!("v{k}")}) } else { json!({"bar": format!("v{k}")}) }
}

fn fleet(ns: &str) -> Fleet<'_> {
    Fleet { manager: MANAGER, label: LABEL, ns }
}

async fn settled_on(client: &Client, config: &str, server: &str) -> Result<Option<()>> {
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let st = cfgs.get(config).await?.status.unwrap_or_default();
    let h = st.handover.unwrap_or_default();
    Ok((st.phase == Some(Phase::Applied)
        && h.state == HandoverState::SourceDropped
        && h.destination.as_deref() == Some(server))
    .then_some(()))
}

/// Objects converted so far by each replica of `server` (admin port 8080 on the Pod's IP).
async fn converted(client: &Client, ns: &str, server: &str) -> Result<Vec<f64>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    let mut out = Vec::new();
    for p in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("a Pod without an IP")?;
        let (_, body) = dco_tests::http_get(&format!("{ip}:8080"), "/metrics").await?;
        out.push(
            body.lines()
                .filter(|l| l.starts_with("dco_webhook_objects_converted_total{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        );
    }
    Ok(out)
}

/// A full paged LIST (500 a page) at `version`: objects, seconds, failed pages (retried).
async fn full_list(api: &Api<DynamicObject>) -> (usize, f64, usize) {
    let t = Instant::now();
    let (mut n, mut failed, mut token) = (0, 0, None::<String>);
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(c) = &token {
            lp = lp.continue_token(c);
        }
        match api.list(&lp).await {
            Ok(page) => {
                n += page.items.len();
                token = page.metadata.continue_.filter(|c| !c.is_empty());
                if token.is_none() {
                    return (n, t.elapsed().as_secs_f64(), failed);
                }
            }
            // A continue token outlives etcd's compaction (5 min) no longer: the list cannot
            // go on, as a client paging that slowly would find.
            Err(kube::Error::Api(e)) if e.code == 410 => {
                eprintln!("LIST expired (410) after {n} objects, {:.0?}: {}", t.elapsed(), e.message);
                return (n, t.elapsed().as_secs_f64(), failed + 1);
            }
            Err(e) => {
                failed += 1;
                if failed <= 3 {
                    eprintln!("LIST page failed: {e}");
                }
                if failed > 1000 {
                    return (n, t.elapsed().as_secs_f64(), failed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The full LIST at v1 while sampling `server`'s conversions, then the same at v2.
async fn list_pair(
    client: &Client,
    ns: &str,
    server: &str,
    v1: &Api<DynamicObject>,
    v2: &Api<DynamicObject>,
    when: &str,
) -> Result<()> {
    let c0 = converted(client, ns, server).await?;
    let (n1, s1, f1) = full_list(v1).await;
    let c1 = converted(client, ns, server).await?;
    let (n2, s2, f2) = full_list(v2).await;
    let rates: Vec<String> = c0.iter().zip(&c1).map(|(a, b)| format!("{:.0}", (b - a) / s1)).collect();
    println!(
        "| {when} | v1 (converted by {server}) | {n1} | {s1:.1} s | {f1} | {:.0} | {} |",
        n1 as f64 / s1,
        rates.join(" / ")
    );
    println!("| {when} | v2 (storage) | {n2} | {s2:.1} s | {f2} | {:.0} | — |", n2 as f64 / s2);
    Ok(())
}

/// First-page LISTs at one version every 250 ms until `stop`: (seconds since `from`, ok,
/// latency in seconds).
fn prober(
    api: Api<DynamicObject>,
    from: Instant,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(f64, bool, f64)>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let t = Instant::now();
            let ok = api.list(&ListParams::default().limit(500)).await.is_ok();
            out.push(((t - from).as_secs_f64(), ok, t.elapsed().as_secs_f64()));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        out
    })
}

/// Writes OBJECTS objects at v2 in JOBS files and creates them with JOBS kubectl processes.
fn create_objects(t: &TestEnv, group: &str, n: usize, jobs: usize) -> Result<f64> {
    let dir = t.cluster.dir.join("bench-objects");
    std::fs::create_dir_all(&dir)?;
    let per = n.div_ceil(jobs);
    let mut files = Vec::new();
    for j in 0..jobs {
        let path = dir.join(format!("chunk-{j:02}.yaml"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for i in j * per..((j + 1) * per).min(n) {
            writeln!(
                f,
                "apiVersion: {group}/v2\nkind: Widget\nmetadata: {{name: w{i:06}, namespace: {}}}\nspec: {{bar: \"value-{i}\"}}\n---",
                t.ns
            )?;
        }
        files.push(path);
    }
    let started = Instant::now();
    let children: Vec<_> = files
        .iter()
        .map(|f| {
            std::process::Command::new(t.cluster.kubectl())
                .arg("--kubeconfig")
                .arg(&t.cluster.kubeconfig)
                .arg("create")
                .arg("-f")
                .arg(f)
                .stdout(std::process::Stdio::null())
                .spawn()
        })
        .collect::<std::io::Result<_>>()?;
    for mut c in children {
        let st = c.wait()?;
        if !st.success() {
            bail!("kubectl create failed: {st}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(started.elapsed().as_secs_f64())
}

async fn run(t: &TestEnv) -> Result<()> {
    let (client, ns) = (t.client.clone(), t.ns.as_str());
    let n: usize = knob("OBJECTS", 100_000);
    let jobs: usize = knob("JOBS", 8);
    let group = format!("{ns}.objects.dco.rs");
    let target = format!("widgets.{group}");
    let config = format!("{ns}-c");
    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    MANAGER.apply(&servers, &a, fleet(ns).server(&a, true, false)).await?;
    MANAGER.apply(&servers, &b, fleet(ns).server(&b, false, false)).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    MANAGER.apply(&crds, &target, fleet(ns).crd(&group)).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    MANAGER.apply(&cfgs, &config, fleet(ns).config(&config, &target, Some(&a))).await?;
    wait_for("the target settled on A", WAIT, || settled_on(&client, &config, &a)).await?;
    for s in [&a, &b] {
        wait_for(&format!("{s}'s 2 ready replicas"), WAIT, || async {
            Ok(servers.get(s).await?.status.is_some_and(|st| st.ready_replicas == 2).then_some(()))
        })
        .await?;
    }
    let took = create_objects(t, &group, n, jobs)?;
    eprintln!("{n} objects created in {took:.1} s ({:.0}/s, {jobs} kubectl processes)", n as f64 / took);

    let ar =
        |v: &str| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, v, "Widget"), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar("v2"));
    println!("\none target with {n} objects (debug builds):");
    println!(
        "| when | LIST at | objects | time | failed pages | objects/s | converted/s per serving replica |"
    );
    println!("|---|---|---|---|---|---|---|");
    list_pair(&client, ns, &a, &v1, &v2, "before the move").await?;

    let load = Load::start(
        Target {
            client: client.clone(),
            ns: ns.to_string(),
            group: group.clone(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            spoke: "v1".into(),
            hub: "v2".into(),
            spec,
            manager: MANAGER.0,
        },
        4,
        Duration::from_millis(100),
    );
    load.wait_clean(16, WAIT, "before the move").await?;

    // The move: the pin goes to B.
    let generation = crds.get(&target).await?.metadata.generation.unwrap_or_default();
    let moved = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (p1, p2) = (prober(v1.clone(), moved, stop.clone()), prober(v2.clone(), moved, stop.clone()));
    MANAGER.apply(&cfgs, &config, fleet(ns).config(&config, &target, Some(&b))).await?;
    let patched = wait_for("the CRD's wiring to change", WAIT, || async {
        let g = crds.get(&target).await?.metadata.generation.unwrap_or_default();
        Ok((g > generation).then(|| moved.elapsed()))
    })
    .await?;
    let settled = {
        let (client, config, b) = (client.clone(), config.clone(), b.clone());
        tokio::spawn(async move {
            wait_for("the target settled on B", WAIT, || settled_on(&client, &config, &b)).await?;
            anyhow::Ok(moved.elapsed())
        })
    };
    list_pair(&client, ns, &b, &v1, &v2, "right after the move's patch").await?;
    let settled = settled.await??;
    // Past the source's drain period (30 s).
    tokio::time::sleep(Duration::from_secs(32)).await;
    stop.store(true, Ordering::SeqCst);
    let (r1, r2) = (p1.await?, p2.await?);
    let errors = load.errors();
    let tally = load.stop().await?;
    println!(
        "\nthe move: the CRD patched {} after the pin changed, settled on B {}",
        secs(patched),
        secs(settled)
    );
    println!(
        "| first-page LIST (limit 500) at | probes | failed | failure window (s after the patch) | slowest | median |"
    );
    println!("|---|---|---|---|---|---|");
    for (v, r) in [("v1", &r1), ("v2 (storage)", &r2)] {
        let fails: Vec<f64> = r.iter().filter(|x| !x.1).map(|x| x.0 - patched.as_secs_f64()).collect();
        let window = match (fails.first(), fails.last()) {
            (Some(f), Some(l)) => format!("{f:.1} to {l:.1}"),
            _ => "none".into(),
        };
        let mut lat: Vec<f64> = r.iter().filter(|x| x.1).map(|x| x.2).collect();
        lat.sort_by(f64::total_cmp);
        println!(
            "| {v} | {} | {} | {window} | {:.2} s | {:.3} s |",
            r.len(),
            fails.len(),
            lat.last().copied().unwrap_or(0.0),
            lat.get(lat.len() / 2).copied().unwrap_or(0.0)
        );
    }
    println!(
        "load on the target throughout: {} ok, {} failed, {} wrong",
        tally.ok, tally.failed, tally.wrong
    );
    if !errors.is_empty() {
        println!("load errors: {errors:?}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("so").await?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let selector = format!("{LABEL}={}", t.ns);
    let ops = Operators::start(&t, &selector, &["op0".to_string()], &[])?;
    let result = dco_tests::until_signalled(run(&t)).await;
    drop(ops);
    fleet(&t.ns).delete_all(&t.client).await;
    t.cleanup().await;
    result
}
