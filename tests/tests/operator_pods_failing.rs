//! A server whose webhook Pods fail says why in its status (docs/operations.md,
//! "Troubleshooting"): the failure the chart's default values meet on a host-network cluster,
//! reproduced. On the local cluster every Pod shares the host's network namespace, so the test
//! holds a port on 0.0.0.0 and runs dco-operator with `--webhook-listen=$(POD_IP):<that port>`:
//! every webhook Pod exits 1 on "cannot listen on ... address in use" and crash-loops.
//!
//! The server must then say `Available=False`, reason `PodsFailing`, with a message naming a
//! Pod, its exit code, its restarts and the `kubectl logs ... --previous` to read, and one
//! Warning Event per failing Pod however many reconciles and restarts pass. Each named Pod's
//! termination message (the tail of its log, by the webhook container's
//! `terminationMessagePolicy: FallbackToLogsOnError`; what `kubectl describe pod` shows) names
//! the listener, the flag and the fix; the status message's quote of its last line is proven by
//! the unit tests (`operator/src/server/status.rs`). Once the port is free, the Pods come up on
//! their next restart and the server turns `Available` with reason `ReplicasReady`.
//!
//! Needs `target/debug/dco-operator` and `dco-webhook`.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use dco_api::ConversionWebhookServer;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use dco_tests::{Manager, TestEnv, pod_ready, wait_for};

const MANAGER: Manager = Manager("dco-e2e-pods-failing");
const WAIT: Duration = Duration::from_secs(120);
const REPLICAS: usize = 2;

/// The Warning Events about `server` with reason `PodsFailing`: each one's note and how often
/// it was sent (the recorder counts a repeat into the first's series instead of writing
/// another Event).
async fn warnings(client: &kube::Client, server: &str) -> Result<Vec<(String, i32)>> {
    Ok(dco_tests::warning_events(client, server, "PodsFailing")
        .await?
        .into_iter()
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect())
}

/// The webhook container of `p` ended (now or in its last run): that end and its restarts.
fn ended(p: &Pod) -> Option<(&ContainerStateTerminated, i32)> {
    let cs = p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == "webhook")?;
    let term = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()))?;
    Some((term, cs.restart_count))
}

/// The webhook container of `p` has ended non-zero (now or in its last run): its exit code and restarts.
fn exited(p: &Pod) -> Option<(i32, i32)> {
    ended(p).filter(|(term, _)| term.exit_code != 0).map(|(term, restarts)| (term.exit_code, restarts))
}

#[tokio::test]
async fn a_server_whose_pods_cannot_bind_their_port_says_why_and_recovers() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("podsfail").await?;
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    // Held until the test frees it: every Pod's `$(POD_IP):<port>` is inside it.
    let taken = TcpListener::bind("0.0.0.0:0")?;
    let port = taken.local_addr()?.port();
    let label = ("dco-e2e-podsfail", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let listen = format!("--webhook-listen=$(POD_IP):{port}");
    let operators = dco_tests::start_operators(&t, &selector, &["pf-1"], &["--resync", "60s", &listen])?;
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let server = format!("{}-s", t.ns);
    let result = scenario(&t, &servers, &server, label, port, taken).await;
    // Deleted while the operator runs, so its finalizer goes the ordinary way (no config needs
    // the server); stripped only if that did not happen, before the operator stops.
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    if dco_tests::wait_deleted(&servers, &server, Duration::from_secs(30)).await.is_err() {
        let _ = servers
            .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
            .await;
    }
    drop(operators);
    t.cleanup().await;
    result
}

async fn scenario(
    t: &TestEnv,
    servers: &Api<ConversionWebhookServer>,
    server: &str,
    label: (&str, &str),
    port: u16,
    taken: TcpListener,
) -> Result<()> {
    MANAGER
        .apply(
            servers,
            server,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": server, "labels": {label.0: label.1}},
            "spec": {"namespace": t.ns, "replicas": REPLICAS}}),
        )
        .await?;
    let pods: Api<Pod> = t.api();
    let by_server = ListParams::default().labels(&format!("conversion.dco.rs/instance={server}"));
    let started = Instant::now();

    // 1. The first webhook container that exits: the failure the status must explain. Looked
    // for every 100 ms, so the time to the condition below is measured from within 0.1 s of it.
    let (first, code) = loop {
        ensure!(started.elapsed() < WAIT, "no webhook container exited in {WAIT:?}");
        let list = pods.list(&by_server).await?;
        let found = list
            .items
            .iter()
            .find_map(|p| exited(p).map(|(code, _)| (p.metadata.name.clone().unwrap_or_default(), code)));
        if let Some(f) = found {
            break f;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failed_at = Instant::now();
    eprintln!("{first} exited {code} {:?} after the server's apply", started.elapsed());
    ensure!(code == 1, "{first} exited {code}, want 1 (dco-webhook's error exit)");

    let (status, message) = loop {
        ensure!(failed_at.elapsed() < WAIT, "no Available reason PodsFailing {WAIT:?} after a Pod failed");
        if let Some((s, _, m)) = dco_tests::server_condition(servers, server, "Available")
            .await?
            .filter(|(_, r, _)| r == "PodsFailing")
        {
            break (s, m);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let reported = failed_at.elapsed();
    eprintln!("Available={status} PodsFailing {reported:?} after the first exit: {message}");
    ensure!(status == "False", "Available={status} while no replica can bind its port");
    let workload = format!("dco-webhook-{server}");
    ensure!(
        message
            .starts_with(&format!("0 of {REPLICAS} replicas of Deployment {}/{workload} are ready; ", t.ns)),
        "{message}"
    );
    // Every failing Pod named in the message comes with its exit code, restarts and the
    // command to read its log; its termination message holds the listener, the flag and the fix.
    let list = pods.list(&by_server).await?;
    let named: Vec<&Pod> = list
        .items
        .iter()
        .filter(|p| message.contains(&format!("Pod {} ", p.metadata.name.as_deref().unwrap_or("?"))))
        .collect();
    ensure!(!named.is_empty(), "the message names none of the server's Pods: {message}");
    for p in &named {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        ensure!(
            message.contains(&format!("Pod {name} container webhook: exited with code 1 (")),
            "no exit code for {name}: {message}"
        );
        let logs = format!("kubectl logs -n {} {name} -c webhook --previous", t.ns);
        ensure!(message.contains(&logs), "no {logs:?} in {message}");
        let said = ended(p).and_then(|(term, _)| term.message.clone()).unwrap_or_default();
        ensure!(
            said.contains(&format!(":{port} for conversion reviews (--listen)"))
                && said.contains("set bindPodIP=true"),
            "{name}'s termination message does not name the listener, the flag and the fix:\n{said}"
        );
    }
    ensure!(message.contains(" restart"), "no restart count in {message}");

    // 2. One Warning Event per failing Pod, not one per reconcile: the reconciles recur every
    // 10 s while replicas are missing, and the restarts count up meanwhile.
    let notes = wait_for("a PodsFailing Warning Event", WAIT, || async {
        Ok(Some(warnings(&t.client, server).await?).filter(|n| !n.is_empty()))
    })
    .await?;
    eprintln!("first Warning Event {:?} after the first exit: {}", failed_at.elapsed(), notes[0].0);
    tokio::time::sleep(Duration::from_secs(25)).await;
    let (_, reason, later) =
        dco_tests::server_condition(servers, server, "Available").await?.unwrap_or_default();
    ensure!(reason == "PodsFailing", "Available reason {reason} while the port is still taken: {later}");
    ensure!(later != message, "the message did not follow the restarts in 25 s: {later}");
    let notes = warnings(&t.client, server).await?;
    let list = pods.list(&by_server).await?;
    let mut restarts = Vec::new();
    for p in &list.items {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let about: Vec<_> =
            notes.iter().filter(|(n, _)| n.starts_with(&format!("Pod {name} container webhook: "))).collect();
        ensure!(
            about.len() <= 1 && about.iter().all(|(_, sent)| *sent == 1),
            "Warning Events about {name} (note, times sent): {about:#?}"
        );
        if let Some((_, r)) = exited(p) {
            ensure!(about.len() == 1, "no Warning Event about {name}, which failed {r} times: {notes:#?}");
            restarts.push(r);
        }
    }
    ensure!(
        notes.len() == restarts.len(),
        "{} Warning Events for {} failing Pods: {notes:#?}",
        notes.len(),
        restarts.len()
    );
    eprintln!(
        "after 25 s more: {} Warning Events for {} failing Pods (restarts {restarts:?}); Available: {later}",
        notes.len(),
        restarts.len()
    );

    // 3. The port freed: the next restarts bind it, and the server says ReplicasReady once
    // every replica is ready (before that, one ready replica makes it Available while the other
    // is still named, or, with the Deployment's count behind the Pods, ReplicasReady "1 of 2").
    drop(taken);
    let freed = Instant::now();
    let (mut pods_ready, mut first_available) = (None, None);
    let all_ready = format!("{REPLICAS} of {REPLICAS} replicas of Deployment {}/{workload} are ready", t.ns);
    let mut seen = Vec::new();
    loop {
        ensure!(
            freed.elapsed() < WAIT,
            "not Available=True ReplicasReady {all_ready:?} {WAIT:?} after the port was freed; saw {seen:#?}"
        );
        if pods_ready.is_none() {
            let list = pods.list(&by_server).await?;
            if list.items.iter().filter(|p| pod_ready(p)).count() == REPLICAS {
                pods_ready = Some(freed.elapsed());
            }
        }
        let (status, reason, message) =
            dco_tests::server_condition(servers, server, "Available").await?.unwrap_or_default();
        if status == "True" && first_available.is_none() {
            first_available = Some(freed.elapsed());
        }
        if status == "True" && reason == "ReplicasReady" && message == all_ready {
            break;
        }
        if seen.last() != Some(&(status.clone(), reason.clone(), message.clone())) {
            seen.push((status, reason, message));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recovered = freed.elapsed();
    ensure!(
        seen.iter().all(|(_, r, _)| r == "PodsFailing" || r == "ReplicasReady"),
        "on the way back: {seen:#?}"
    );
    eprintln!(
        "port freed: {REPLICAS} Pods Ready {pods_ready:?} later, Available=True {first_available:?} later, ReplicasReady \"{all_ready}\" {recovered:?} later"
    );
    Ok(())
}
