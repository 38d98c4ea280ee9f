//! A replica stopped before its caches synced stops by itself (docs/admission.md, "Stopping and
//! failing replicas"): a SIGTERM no longer waits for a sync that may never come. The test runs
//! dco-operator as a Pod under a ServiceAccount of its own with no RBAC at all, so every list
//! and watch is refused: its /metrics counts `forbidden` watch errors and it never turns
//! Ready. The Pod is then deleted with a grace period of 30 s, and its container must exit 0
//! well before that, within the default `--shutdown-drain` (5 s) plus a margin: before the fix
//! it waited for the sync until the kubelet's SIGKILL at the end of the grace period.
//!
//! The local cluster's kubelet deletes the Pod as soon as its container ended, without
//! writing the final state into its status, so the exit is observed on the container's process
//! (`testenv://<pid>`) and its exit code read from the kubelet's own record of it (the control
//! plane's log, docs/testenv.md). Needs `target/debug/dco-operator`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use dco_tests::{TestEnv, container_pid, pod_ready, process_alive, wait_for};

const POD: &str = "presync";
const SERVICE_ACCOUNT: &str = "dco-presync-no-rbac";
const WAIT: Duration = Duration::from_secs(90);
const GRACE_S: u64 = 30;
/// The operator's default `--shutdown-drain` (operator/src/cli.rs): the longest a stop may
/// take by design, and more than a stop before the sync needs.
const DRAIN: Duration = Duration::from_secs(5);
/// Exit within the drain and this margin, far from the grace period's SIGKILL.
const MARGIN: Duration = Duration::from_secs(5);

fn operator_pod(ns: &str, selector: &str) -> Value {
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let args = [
        "--namespace",
        ns,
        "--selector",
        selector,
        "--metrics-listen",
        "$(POD_IP):8080",
        "--webhook-listen",
        "$$(POD_IP):9443",
    ];
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "labels": {"app": POD}},
        "spec": {"serviceAccountName": SERVICE_ACCOUNT, "restartPolicy": "Never",
            "terminationGracePeriodSeconds": GRACE_S,
            "containers": [{"name": "operator", "image": "dco-operator:dev", "args": args,
                "env": [
                    {"name": "POD_NAME", "valueFrom": field("metadata.name")},
                    {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
                    {"name": "POD_IP", "valueFrom": field("status.podIP")},
                    {"name": "RUST_LOG", "value": "info"}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1}}]}})
}

/// The sum of `dco_operator_watch_errors_total` over the series with `reason="forbidden"`, and
/// their kinds.
fn forbidden(body: &str) -> (f64, Vec<String>) {
    let mut kinds = Vec::new();
    let mut sum = 0.0;
    for l in body.lines() {
        let Some((labels, value)) =
            l.strip_prefix("dco_operator_watch_errors_total{").and_then(|r| r.split_once("} "))
        else {
            continue;
        };
        if !labels.split(',').any(|kv| kv == "reason=\"forbidden\"") {
            continue;
        }
        sum += value.trim().parse::<f64>().unwrap_or(0.0);
        kinds.extend(
            labels
                .split(',')
                .filter_map(|kv| kv.strip_prefix("kind="))
                .map(|k| k.trim_matches('"').to_string()),
        );
    }
    (sum, kinds)
}

/// The kubelet's record of `ns/pod`'s container `container` ending, in the control plane's log
/// from byte `from` on: its exit code and the signal that ended it (empty when it exited by
/// itself).
fn kubelet_exit_record(
    log: &std::path::Path,
    from: u64,
    ns: &str,
    pod: &str,
    container: &str,
) -> Option<(i32, String)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).ok()?;
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut text = Vec::new();
    f.read_to_end(&mut text).ok()?;
    let text = String::from_utf8_lossy(&text);
    let key = format!("\"container exited\" pod=\"{ns}/{pod}\" container=\"{container}\" ");
    let line = text.lines().find(|l| l.contains(&key))?;
    let rest = line.split_once(&key)?.1;
    let code = rest.strip_prefix("code=")?.split_whitespace().next()?.parse().ok()?;
    let signal = rest.split_once("signal=")?.1.trim().trim_matches('"').to_string();
    Some((code, signal))
}

#[tokio::test]
async fn a_replica_stopped_before_its_caches_synced_exits_at_once() -> Result<()> {
    let t = TestEnv::new("presync").await?;
    let result = scenario(&t).await;
    t.cleanup().await;
    result
}

async fn scenario(t: &TestEnv) -> Result<()> {
    // A ServiceAccount bound to nothing: every list and watch of the operator is refused.
    let sas: Api<ServiceAccount> = t.api();
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT}}))?,
    )
    .await?;
    let pods: Api<Pod> = t.api();
    let selector = format!("dco-presync-test={}", t.ns);
    pods.create(&PostParams::default(), &serde_json::from_value(operator_pod(&t.ns, &selector))?).await?;

    // 1. Stuck before the sync: watches refused, not Ready.
    let created = Instant::now();
    let (pod, addr, refused, kinds) =
        wait_for("forbidden watch errors in the operator's /metrics", WAIT, || async {
            let p = pods.get(POD).await?;
            ensure!(!pod_ready(&p), "{POD} turned Ready although it cannot list anything");
            let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) else { return Ok(None) };
            let addr = format!("{ip}:8080");
            let Ok((200, body)) = dco_tests::http_get(&addr, "/metrics").await else { return Ok(None) };
            let (n, kinds) = forbidden(&body);
            Ok((n > 0.0).then_some((p, addr, n, kinds)))
        })
        .await?;
    eprintln!("{POD}: {refused} forbidden watch errors ({kinds:?}) {:?} after creation", created.elapsed());
    // Some seconds more: the refusals go on and nothing turns it Ready.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = pods.get(POD).await?;
    ensure!(!pod_ready(&p), "{POD} turned Ready although it cannot list anything");
    let (code, why) = dco_tests::http_get(&addr, "/readyz").await?;
    ensure!(code == 503, "/readyz answered {code} before the caches synced: {why}");
    let later = forbidden(&dco_tests::http_get(&addr, "/metrics").await?.1).0;
    ensure!(later > refused, "the forbidden watch errors stayed at {refused}: is it still watching?");
    eprintln!("{POD}: not Ready, /readyz {code} {:?}; {later} forbidden watch errors", why.trim());
    let pid = container_pid(&p, "operator")
        .or_else(|| container_pid(&pod, "operator"))
        .context("the operator's pid")?;
    ensure!(process_alive(pid), "the operator (pid {pid}) is not running");

    // 2. Deleted with a grace period of 30 s: the container must end by itself, exit code 0.
    let kubelet_log = t.cluster.dir.join("logs").join("testenv.log");
    let from = std::fs::metadata(&kubelet_log).map(|m| m.len()).unwrap_or(0);
    let deleted = Instant::now();
    pods.delete(POD, &DeleteParams { grace_period_seconds: Some(GRACE_S as u32), ..Default::default() })
        .await?;
    // Followed past the grace period, so a replica that waits for the kubelet's SIGKILL is
    // measured too.
    let limit = Duration::from_secs(GRACE_S + 10);
    while process_alive(pid) {
        ensure!(deleted.elapsed() < limit, "the operator (pid {pid}) still runs {limit:?} after the delete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let exited = deleted.elapsed();
    dco_tests::wait_deleted(&pods, POD, WAIT).await?;
    let gone = deleted.elapsed();
    let (exit_code, signal) =
        wait_for("the kubelet's record of the exit", Duration::from_secs(10), || async {
            Ok(kubelet_exit_record(&kubelet_log, from, &t.ns, POD, "operator"))
        })
        .await?;
    eprintln!(
        "{POD}: delete (grace {GRACE_S} s) to the container's exit {exited:?}, exit code {exit_code} signal {signal:?}; Pod gone {gone:?} after the delete"
    );
    ensure!(
        signal.is_empty() && exit_code == 0,
        "the operator did not stop by itself: exit code {exit_code}, signal {signal:?}, {exited:?} after the delete"
    );
    ensure!(
        exited < DRAIN + MARGIN,
        "the operator took {exited:?} to stop after the delete, more than --shutdown-drain {DRAIN:?} + {MARGIN:?}"
    );
    Ok(())
}
