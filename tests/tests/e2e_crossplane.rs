//! dco on a real Crossplane 2, end to end (docs/testenv.md "Crossplane", docs/operations.md
//! "How a target is wired and moved"). The world is `dco_tests::crossplane_world`: one XRD of
//! each scope (`Namespaced`, `Cluster`, `LegacyCluster` with a claim), each serving three
//! versions with the referenceable one in the middle, an XRDConversionConfig each, two
//! ConversionWebhookServers and two dco-operator replicas. Proves:
//!
//! 1. the configs wire their XRDs and Crossplane carries the wiring into every CRD it generates
//!    (the XR CRDs and the claim CRD): `ConversionPropagated=True` with `status.generatedCRDs`;
//! 2. XRs of each scope and claims are written at every version and read back at every
//!    version through the apiserver, every value checked, and what Crossplane writes into their
//!    specs (its schema defaults, a bound claim's `resourceRef`, the XR's `claimRef`) reads the
//!    same at every version; the XR Crossplane makes for a claim carries its parameters, read
//!    at every version too;
//! 3. a move of all three targets between the servers and back, under a load of reads and
//!    writes at both spoke versions of every kind (half through each apiserver): no request
//!    failed, none read a wrong value; each generated CRD's spec (and spec.conversion) changed
//!    exactly once per move; `ConversionPropagated` turned True before `HandoverReady` did,
//!    and the CRDs carried the destination before the config said it was ready;
//! 4. with the objects gone, deleting the configs reverts every XRD and, through Crossplane,
//!    every generated CRD to no dco webhook.
//!
//! Prints each move's duration, Crossplane's propagation lag (the XRD's wiring seen → each
//! generated CRD's) and the requests of the load.
//!
//! Needs `target/debug/dco-operator`, `target/debug/dco-webhook` and Go (the crossplane tool).
//! Runs Crossplane under its cluster-wide lock: never beside `webhook_crossplane_detection` or
//! `operator_crossplane_detection`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_tests::crossplane::Crossplane;
use dco_tests::crossplane_world::{
    HUB, KINDS, Kind, MANAGER, OPERATORS, SPOKES, VERSIONS, WAIT, XRDS, XpWorld, condition, crossplane_part,
    is_true, spec_at, user_part, xrd_resource,
};
use dco_tests::load::{Load, Shape, Target};
use dco_tests::moves::Tally;
use dco_tests::object_log::{ObjectLog, Seen};
use dco_tests::{ClusterScoped, TestEnv, wait_for};
use kube::Client;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The webhook replicas' drain period (`start_operators` passes `--drain-period=5s`).
const DRAIN: Duration = Duration::from_secs(5);
const LOAD_OBJECTS: usize = 2;
const LOAD_PERIOD: Duration = Duration::from_millis(60);

/// The watches a move is measured with.
struct Logs {
    cfgs: ObjectLog,
    crds: ObjectLog,
    xrds: ObjectLog,
}

impl Logs {
    async fn start(w: &XpWorld) -> Result<Logs> {
        let cfgs: Vec<String> = (0..XRDS.len()).map(|i| w.config_name(i)).collect();
        let xrds: Vec<String> = (0..XRDS.len()).map(|i| w.xrd_name(i)).collect();
        let crd_ar = dco_tests::ar::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >();
        Ok(Logs {
            cfgs: ObjectLog::start(&w.client, &dco_tests::ar::<dco_api::XRDConversionConfig>(), &cfgs)
                .await?,
            crds: ObjectLog::start(&w.client, &crd_ar, &w.generated_crds()).await?,
            xrds: ObjectLog::start(&w.client, &xrd_resource("v1"), &xrds).await?,
        })
    }
}

/// The Service a CRD's or XRD's spec.conversion calls.
fn wired(obj: &Value) -> Option<String> {
    dco_api::target::wired_service(obj).map(|(_, n)| n.to_string())
}

fn rv(s: &Seen) -> u64 {
    s.object["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// `(name, propagated)` of each CRD a config's `status.generatedCRDs` lists, by name.
fn generated(cfg: &Value) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = cfg["status"]["generatedCRDs"]
        .as_array()
        .map(|a| {
            let entry = |e: &Value| Some((e["name"].as_str()?.to_string(), e["propagated"] == true));
            a.iter().filter_map(entry).collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Every config says its wiring reached every CRD Crossplane generated from its XRD.
async fn check_propagated(w: &XpWorld) -> Result<()> {
    for i in 0..XRDS.len() {
        let cfg = w.cfgs.get(&w.config_name(i)).await?.data;
        let name = w.config_name(i);
        ensure!(
            is_true(&cfg, "ConversionPropagated"),
            "config {name}: condition ConversionPropagated is {:?}, not True, though every generated CRD carries the wiring",
            condition(&cfg, "ConversionPropagated")
        );
        let mut want: Vec<(String, bool)> = w.generated_crds_of(i).into_iter().map(|n| (n, true)).collect();
        want.sort();
        ensure!(
            generated(&cfg) == want,
            "config {name}: status.generatedCRDs is {}, not {want:?} (name, propagated)",
            cfg["status"]["generatedCRDs"]
        );
    }
    Ok(())
}

/// Writes object `name` of `kind` at `version` with write `k`'s spec: created the first time,
/// then merge-patched (the user part only: Crossplane's fields stay as they are).
async fn write(w: &XpWorld, kind: &Kind, version: &str, name: &str, k: i64, create: bool) -> Result<()> {
    let api = w.api(&w.client, kind, version);
    if create {
        let obj: DynamicObject =
            serde_json::from_value(json!({"apiVersion": format!("{}/{version}", w.group),
            "kind": kind.kind, "metadata": {"name": name}, "spec": spec_at(version, k)}))?;
        api.create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating {} {name} at {version}", kind.kind))?;
    } else {
        let patch = json!({"spec": spec_at(version, k)});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("writing {} {name} at {version}", kind.kind))?;
    }
    Ok(())
}

/// Reads `name` of `kind` at the hub and then at every version: the user part is write `k`'s
/// in each version's shape, and Crossplane's part is the hub's at every version. Crossplane may
/// write its part meanwhile (a claim's binding lands in more than one update), so the reads
/// are compared only against a hub read that was the same before and after them (up to 5
/// rounds). Returns Crossplane's part.
async fn read_all(w: &XpWorld, kind: &Kind, name: &str, k: i64) -> Result<Value> {
    let hub = w.api(&w.client, kind, HUB);
    let mut injected = crossplane_part(&hub.get(name).await?.data["spec"]);
    for _ in 0..5 {
        let mut read = Vec::new();
        for v in VERSIONS {
            let o = w.api(&w.client, kind, v).get(name).await;
            read.push((v, o.with_context(|| format!("reading {} {name} at {v}", kind.kind))?));
        }
        let after = crossplane_part(&hub.get(name).await?.data["spec"]);
        if after != injected {
            injected = after;
            continue;
        }
        for (v, o) in read {
            let what = format!("{} {name} read at {v} after write {k}", kind.kind);
            let api_version = o.types.as_ref().map(|t| t.api_version.clone());
            ensure!(api_version == Some(format!("{}/{v}", w.group)), "{what}: apiVersion {api_version:?}");
            let spec = &o.data["spec"];
            ensure!(user_part(spec) == user_part(&spec_at(v, k)), "{what}: {spec} (want {})", spec_at(v, k));
            ensure!(
                crossplane_part(spec) == injected,
                "{what}: Crossplane's fields {spec} differ from the hub's {injected}"
            );
        }
        return Ok(injected);
    }
    anyhow::bail!(
        "{} {name}: Crossplane kept changing its part of the spec over 5 rounds of reads",
        kind.kind
    )
}

/// Waits until claim `name` is bound (its `resourceRef`, Crossplane's) and returns its XR's name.
async fn bound_xr(w: &XpWorld, claim: &Kind, name: &str) -> Result<String> {
    let hub = w.api(&w.client, claim, HUB);
    wait_for(&format!("Crossplane to bind claim {name}"), WAIT, || async {
        let o = hub.get(name).await?;
        Ok(o.data["spec"]["resourceRef"]["name"].as_str().map(str::to_string))
    })
    .await
}

/// The XR Crossplane made for claim `claim` carries its parameters (write `k`) at every
/// version, and its `claimRef` names the claim at every version.
async fn check_claims_xr(w: &XpWorld, claim: &str, xr_name: &str, k: i64) -> Result<()> {
    let xr = &KINDS[2];
    let hub = w.api(&w.client, xr, HUB);
    wait_for(&format!("XR {xr_name} to carry claim {claim}'s write {k}"), WAIT, || async {
        let o = hub.get_opt(xr_name).await?;
        Ok(o.filter(|o| user_part(&o.data["spec"]) == user_part(&spec_at(HUB, k))).map(|_| ()))
    })
    .await?;
    let injected = read_all(w, xr, xr_name, k).await?;
    let claim_ref = &injected["claimRef"];
    ensure!(
        claim_ref["name"] == claim
            && claim_ref["namespace"] == w.ns.as_str()
            && claim_ref["kind"] == "Bucket",
        "XR {xr_name}: spec.claimRef {claim_ref} does not name claim {}/{claim}",
        w.ns
    );
    Ok(())
}

/// Objects of every kind written at each version, then again at the two others, each write
/// read back at every version; claims bound by Crossplane, and their XRs checked too. Returns
/// the number of reads checked.
async fn round_trips(w: &XpWorld) -> Result<usize> {
    let mut reads = 0;
    for (n, kind) in KINDS.iter().enumerate() {
        for (i, first) in VERSIONS.iter().enumerate() {
            let name = format!("rt-{first}");
            let mut xr = None;
            for step in 0..VERSIONS.len() {
                let v = VERSIONS[(i + step) % VERSIONS.len()];
                let k = (1000 * n + 100 * i + 10 * step) as i64 + 1;
                write(w, kind, v, &name, k, step == 0).await?;
                if kind.claim && xr.is_none() {
                    xr = Some(bound_xr(w, kind, &name).await?);
                }
                let injected = read_all(w, kind, &name, k).await?;
                reads += VERSIONS.len() + 1;
                if let Some(xr) = &xr {
                    ensure!(
                        injected["resourceRef"]["name"] == xr.as_str(),
                        "claim {name}: resourceRef {} after write {k} at {v}",
                        injected["resourceRef"]
                    );
                    check_claims_xr(w, &name, xr, k).await?;
                    reads += VERSIONS.len() + 1;
                }
                if step == 0 && i == 0 {
                    println!(
                        "{} {name}: Crossplane's part of the spec, the same at every version: {injected}",
                        kind.kind
                    );
                }
            }
        }
    }
    Ok(reads)
}

/// One load per kind and spoke version (the v1alpha1 loads through the first apiserver, the
/// v1 loads through the second when the cluster runs two).
struct Loads(Vec<(String, Load)>);

impl Loads {
    async fn start(w: &XpWorld) -> Result<Loads> {
        let second = match dco_tests::apiservers::client2().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("one apiserver only ({e}); every load goes through the first");
                w.client.clone()
            }
        };
        let mut loads = Vec::new();
        for kind in KINDS {
            for spoke in SPOKES {
                let client: Client = if spoke == SPOKES[0] { w.client.clone() } else { second.clone() };
                let target = Target {
                    client,
                    ns: if kind.namespaced { w.ns.clone() } else { String::new() },
                    group: w.group.clone(),
                    kind: kind.kind.to_string(),
                    plural: kind.plural.to_string(),
                    spoke: spoke.to_string(),
                    hub: HUB.to_string(),
                    spec: spec_at,
                    manager: "dco-e2e-crossplane-load",
                };
                let shape = Shape { prefix: format!("load-{spoke}-"), view: user_part };
                let load = Load::start_shaped(target, LOAD_OBJECTS, LOAD_PERIOD, shape);
                loads.push((format!("{} at {spoke}", kind.kind), load));
            }
        }
        Ok(Loads(loads))
    }

    fn tally(&self) -> Tally {
        self.0.iter().map(|(_, l)| l.tally()).fold(Tally::default(), |a, t| Tally {
            ok: a.ok + t.ok,
            failed: a.failed + t.failed,
            wrong: a.wrong + t.wrong,
        })
    }

    fn errors(&self) -> Vec<String> {
        self.0
            .iter()
            .flat_map(|(what, l)| l.errors().into_iter().map(move |e| format!("{what}: {e}")))
            .collect()
    }

    async fn wait_clean(&self, when: &str) -> Result<()> {
        for (what, l) in &self.0 {
            l.wait_clean(16, WAIT, &format!("{what} {when}")).await?;
        }
        Ok(())
    }

    async fn stop(self) -> Result<Vec<(String, Tally)>> {
        let mut out = Vec::new();
        for (what, l) in self.0 {
            out.push((what, l.stop().await?));
        }
        Ok(out)
    }
}

/// What one move did.
struct MoveReport {
    what: String,
    took: Duration,
    load: Tally,
    /// Per generated CRD: (generation changes, spec.conversion changes).
    crd_changes: Vec<(String, i64, usize)>,
    /// Per generated CRD: the XRD's wiring seen → the CRD's.
    lags: Vec<(String, Duration)>,
    /// Per XRD: spec.conversion changes.
    xrd_changes: Vec<(String, usize)>,
    errors: Vec<String>,
}

/// How often the objects' `spec.conversion` changed among `before` and `during`, and by how
/// much the generation grew.
fn changes(before: Option<&Seen>, during: &[Seen]) -> (i64, usize) {
    let mut last = before.map(|s| s.object["spec"]["conversion"].clone());
    let mut n = 0;
    for s in during {
        let c = s.object["spec"]["conversion"].clone();
        if last.as_ref().is_some_and(|l| *l != c) {
            n += 1;
        }
        last = Some(c);
    }
    let generation = match (before, during.last()) {
        (Some(b), Some(l)) => l.generation - b.generation,
        _ => 0,
    };
    (generation, n)
}

/// The config of XRD `i` during a move to `to` (seen in `[begin, end]`): the first status that
/// says the move is over (settled on `to`, `HandoverReady=True`) already says
/// `ConversionPropagated=True`, and turned it True no later; no status says ready while not
/// propagated; and every CRD generated from the XRD carried the destination before (etcd's
/// order: resourceVersions). Returns what is wrong, and whether Propagated was seen False.
fn check_order(
    w: &XpWorld,
    logs: &Logs,
    i: usize,
    to: &str,
    begin: Instant,
    end: Instant,
) -> (Vec<String>, bool) {
    let cfg = w.config_name(i);
    let (_, seen) = logs.cfgs.window(&cfg, begin, end);
    let on_to = |s: &&Seen| s.object["status"]["handover"]["destination"] == to;
    let ready = |s: &&Seen| {
        on_to(s)
            && s.object["status"]["handover"]["state"] == "SourceDropped"
            && is_true(&s.object, "HandoverReady")
    };
    let mut wrong = Vec::new();
    let went_false = seen.iter().filter(on_to).any(|s| !is_true(&s.object, "ConversionPropagated"));
    for s in seen.iter().filter(ready) {
        if !is_true(&s.object, "ConversionPropagated") {
            wrong.push(format!(
                "config {cfg}: HandoverReady=True on {to} while ConversionPropagated is {:?} (resourceVersion {})",
                condition(&s.object, "ConversionPropagated"),
                rv(s)
            ));
        }
    }
    let Some(first) = seen.iter().find(ready) else {
        wrong.push(format!("config {cfg}: no status settled on {to} with HandoverReady=True seen"));
        return (wrong, went_false);
    };
    let ltt = |t: &str| {
        condition(&first.object, t).and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
    };
    let (propagated, handover) = (ltt("ConversionPropagated"), ltt("HandoverReady"));
    if propagated.is_none() || propagated > handover {
        wrong.push(format!(
            "config {cfg}: ConversionPropagated turned True at {propagated:?}, after HandoverReady at {handover:?}"
        ));
    }
    let service = w.service(to);
    for crd in w.generated_crds_of(i) {
        match logs.crds.first_after(&crd, begin, |o| wired(o).as_deref() == Some(service.as_str())) {
            Some(c) if rv(&c) < rv(first) => {}
            Some(c) => wrong.push(format!(
                "config {cfg}: ready at resourceVersion {} before CRD {crd} carried {service} (resourceVersion {})",
                rv(first),
                rv(&c)
            )),
            None => wrong.push(format!("CRD {crd}: never seen wired to {service}")),
        }
    }
    (wrong, went_false)
}

/// Re-pins every config from `from` to `to` under the load, waits until all settled and one
/// drain period more, and measures the move.
async fn one_move(w: &XpWorld, logs: &Logs, loads: &Loads, from: &str, to: &str) -> Result<MoveReport> {
    let what = format!("move {from} -> {to}");
    let tally0 = loads.tally();
    let begin = Instant::now();
    w.pin_all(to).await?;
    w.wait_settled(to).await.with_context(|| what.clone())?;
    let took = begin.elapsed();
    tokio::time::sleep(DRAIN + Duration::from_secs(3)).await;
    let end = Instant::now();
    let service = w.service(to);
    let mut r = MoveReport {
        what,
        took,
        load: loads.tally() - tally0,
        crd_changes: Vec::new(),
        lags: Vec::new(),
        xrd_changes: Vec::new(),
        errors: loads.errors(),
    };
    for i in 0..XRDS.len() {
        let xrd = w.xrd_name(i);
        let (before, during) = logs.xrds.window(&xrd, begin, end);
        r.xrd_changes.push((xrd.clone(), changes(before.as_ref(), &during).1));
        let xrd_wired = logs.xrds.first_after(&xrd, begin, |o| wired(o).as_deref() == Some(service.as_str()));
        for crd in w.generated_crds_of(i) {
            let (before, during) = logs.crds.window(&crd, begin, end);
            let (generation, conversion) = changes(before.as_ref(), &during);
            r.crd_changes.push((crd.clone(), generation, conversion));
            let crd_wired =
                logs.crds.first_after(&crd, begin, |o| wired(o).as_deref() == Some(service.as_str()));
            if let (Some(x), Some(c)) = (&xrd_wired, crd_wired) {
                r.lags.push((crd, c.at.saturating_duration_since(x.at)));
            }
        }
        let (wrong, went_false) = check_order(w, logs, i, to, begin, end);
        r.errors.extend(wrong);
        println!(
            "{}: config {} showed ConversionPropagated False during the move: {went_false}",
            r.what,
            w.config_name(i)
        );
    }
    print_move(&r);
    Ok(r)
}

fn print_move(r: &MoveReport) {
    println!(
        "{}: settled in {:.1} s; load {} ok, {} failed, {} wrong",
        r.what,
        r.took.as_secs_f64(),
        r.load.ok,
        r.load.failed,
        r.load.wrong
    );
    for (crd, generation, conversion) in &r.crd_changes {
        println!("  CRD {crd}: generation +{generation}, spec.conversion changed {conversion}x");
    }
    for (crd, lag) in &r.lags {
        println!("  propagation lag (XRD wired -> CRD {crd} wired): {lag:?}");
    }
    for (xrd, n) in &r.xrd_changes {
        println!("  XRD {xrd}: spec.conversion changed {n}x");
    }
    for e in &r.errors {
        println!("  problem: {e}");
    }
}

/// A move is clean: nothing failed or read wrong, each generated CRD's spec changed once.
fn ensure_clean(r: &MoveReport) -> Result<()> {
    ensure!(
        r.load.failed == 0 && r.load.wrong == 0 && r.load.ok > 0,
        "{}: load {:?}: {:?}",
        r.what,
        r.load,
        r.errors
    );
    for (crd, generation, conversion) in &r.crd_changes {
        ensure!(
            *generation == 1 && *conversion == 1,
            "{}: CRD {crd} changed its generation {generation}x and spec.conversion {conversion}x, not once",
            r.what
        );
    }
    ensure!(r.errors.is_empty(), "{}: {:?}", r.what, r.errors);
    Ok(())
}

/// The first wiring: every config on `a`, the generated CRDs carrying it; the lag printed.
async fn first_wiring(w: &XpWorld, logs: &Logs) -> Result<()> {
    let a = &w.servers[0];
    let begin = Instant::now();
    w.pin_all(a).await?;
    w.wait_settled(a).await.context("the first wiring")?;
    println!("first wiring: every config settled on {a} in {:.1} s", begin.elapsed().as_secs_f64());
    let service = w.service(a);
    for i in 0..XRDS.len() {
        let xrd =
            logs.xrds.first_after(&w.xrd_name(i), begin, |o| wired(o).as_deref() == Some(service.as_str()));
        for crd in w.generated_crds_of(i) {
            let c = logs.crds.first_after(&crd, begin, |o| wired(o).as_deref() == Some(service.as_str()));
            if let (Some(x), Some(c)) = (&xrd, c) {
                println!(
                    "  propagation lag (XRD wired -> CRD {crd} wired): {:?}",
                    c.at.saturating_duration_since(x.at)
                );
            }
        }
    }
    check_propagated(w).await
}

/// Everything between Crossplane started and the clean-up.
async fn run(w: &XpWorld) -> Result<()> {
    w.apply_servers().await?;
    let created = Instant::now();
    w.apply_xrds().await?;
    println!("XRDs applied -> every generated CRD Established: {:.1} s", created.elapsed().as_secs_f64());
    let logs = Logs::start(w).await?;
    first_wiring(w, &logs).await?;

    let started = Instant::now();
    let reads = round_trips(w).await?;
    println!("round trips: {reads} reads checked in {:.1} s", started.elapsed().as_secs_f64());

    let loads = Loads::start(w).await?;
    loads.wait_clean("before the moves").await?;
    let (a, b) = (&w.servers[0], &w.servers[1]);
    let there = one_move(w, &logs, &loads, a, b).await;
    let back = match &there {
        Ok(_) => Some(one_move(w, &logs, &loads, b, a).await),
        Err(_) => None,
    };
    let errors = loads.errors();
    for (what, t) in loads.stop().await? {
        println!("load {what}: {} ok, {} failed, {} wrong", t.ok, t.failed, t.wrong);
    }
    println!("load errors (first few): {errors:?}");
    let there = there?;
    let back = back.context("no move back")??;
    check_propagated(w).await?;
    ensure_clean(&there)?;
    ensure_clean(&back)?;
    reverted_on_delete(w).await
}

/// With the objects gone, deleting the configs reverts every XRD, and Crossplane every CRD it
/// generated, to no dco webhook.
async fn reverted_on_delete(w: &XpWorld) -> Result<()> {
    w.remove_objects().await?;
    let begin = Instant::now();
    w.delete_configs(Duration::from_secs(90)).await?;
    for crd in w.generated_crds() {
        wait_for(&format!("CRD {crd} to lose dco's wiring"), WAIT, || async {
            let c = serde_json::to_value(w.crds.get(&crd).await?)?;
            Ok(wired(&c).is_none().then_some(()))
        })
        .await?;
    }
    println!("configs deleted -> every generated CRD unwired: {:.1} s", begin.elapsed().as_secs_f64());
    Ok(())
}

#[tokio::test]
async fn xrds_of_every_scope_convert_and_move_between_servers_on_crossplane() -> Result<()> {
    let t = TestEnv::new("xpe").await?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    let dir = std::env::temp_dir().join(format!("dco-tests-{}", t.ns));
    let xp = Crossplane::start(&t.client, &dir).await?;
    eprintln!("crossplane log: {}", xp.log.display());
    let w = XpWorld::new(&t);
    // Declared after `xp`, so dropped before it: deleted while Crossplane still runs.
    let guard = ClusterScoped((0..XRDS.len()).map(|i| (xrd_resource("v1"), w.xrd_name(i))).collect());
    let operators = dco_tests::start_operators(&t, &w.selector, &OPERATORS, &["--resync", "60s"])?;

    let result = run(&w).await;
    let removed = w.remove_all().await;
    w.remove_servers().await;
    drop(operators);
    drop(guard);
    xp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    result?;
    removed
}
