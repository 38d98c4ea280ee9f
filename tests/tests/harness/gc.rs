//! Garbage collection (docs/testenv.md, "Controllers"): a Lease owned by a Pod (as the webhook's
//! served-target Leases are) is deleted by kube-controller-manager's garbage collector after the
//! Pod is deleted; the Pod's process is stopped. The Pod also checks that
//! `kube::Client::try_default()` works inside a testenv Pod.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use dco_tests::{
    ECHO_CONVERT_IMAGE, TestEnv, container_pid, process_alive, wait_deleted, wait_for, wait_pod_ready,
};

#[tokio::test]
async fn lease_owned_by_a_pod_is_garbage_collected() -> Result<()> {
    dco_tests::map_echo_convert(env!("CARGO_BIN_EXE_echo-convert"))?;
    let t = TestEnv::new("gc").await?;
    let pods = t.api::<Pod>();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "owner", "labels": {"app": "owner"}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": ECHO_CONVERT_IMAGE,
                "args": ["--http", "--whoami", "--bind=$(POD_IP):8080"],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let running = wait_pod_ready(&pods, "owner", Duration::from_secs(60)).await?;
    let pid = container_pid(&running, "main").context("no testenv://<pid> container id")?;
    assert!(process_alive(pid), "pod process {pid} should run");

    // in the Pod, kube::Client::try_default() authenticates as the Pod's ServiceAccount
    let log_file = t.cluster.pod_log(&t.ns, "owner", "main");
    let want = format!("whoami: system:serviceaccount:{}:default", t.ns);
    wait_for("the pod to log its identity", Duration::from_secs(20), || async {
        let log = std::fs::read_to_string(&log_file).unwrap_or_default();
        if log.contains("whoami failed") {
            anyhow::bail!("in-pod client failed: {log}");
        }
        Ok(log.contains(&want).then_some(()))
    })
    .await?;

    let leases = t.api::<Lease>();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {
            "name": "dco-served-owner",
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Pod", "name": "owner",
                "uid": running.metadata.uid.clone().context("pod uid")?,
            }],
        },
        "spec": {"holderIdentity": "owner", "leaseDurationSeconds": 30},
    }))?;
    leases.create(&PostParams::default(), &lease).await?;

    // the owner still exists: the garbage collector must leave the Lease alone
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(leases.get_opt("dco-served-owner").await?.is_some());

    pods.delete("owner", &DeleteParams::default()).await?;
    wait_deleted(&pods, "owner", Duration::from_secs(60)).await?;
    wait_for("the pod process to exit", Duration::from_secs(15), || async {
        Ok((!process_alive(pid)).then_some(()))
    })
    .await?;
    wait_deleted(&leases, "dco-served-owner", Duration::from_secs(60))
        .await
        .context("the garbage collector did not delete the Lease")?;
    t.cleanup().await;
    Ok(())
}
