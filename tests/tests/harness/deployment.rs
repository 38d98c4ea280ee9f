//! Pods are local processes (docs/testenv.md, "Running your binaries as Pods"): a Deployment
//! of 2 replicas yields 2 Ready Pods that are real local
//! processes, each listening on its own loopback Pod IP; scaling to 1 stops
//! one of them (process gone, address closed).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use dco_tests::{
    ECHO_CONVERT_IMAGE, TestEnv, container_pid, http_get, process_alive, wait_deployment_available, wait_for,
    wait_ready_pods,
};

struct Replica {
    name: String,
    ip: String,
    pid: u32,
}

fn replica(p: &Pod) -> Result<Replica> {
    let name = p.metadata.name.clone().context("pod name")?;
    let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("no podIP")?;
    let pid = container_pid(p, "main").context("no testenv://<pid> container id")?;
    Ok(Replica { name, ip, pid })
}

#[tokio::test]
async fn deployment_replicas_are_processes_and_scaling_down_stops_one() -> Result<()> {
    dco_tests::map_echo_convert(env!("CARGO_BIN_EXE_echo-convert"))?;
    let t = TestEnv::new("deploy").await?;
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "main",
                        "image": ECHO_CONVERT_IMAGE,
                        "args": ["--http", "--bind=$(POD_IP):8080"],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
                    }],
                },
            },
        },
    }))?;
    let deployments = t.api::<Deployment>();
    deployments.create(&PostParams::default(), &deploy).await?;
    wait_deployment_available(&deployments, "web", 2, Duration::from_secs(120)).await?;

    let pods = t.api::<Pod>();
    let ready = wait_ready_pods(&pods, "app=web", 2, Duration::from_secs(60)).await?;
    let replicas: Vec<Replica> = ready.iter().map(replica).collect::<Result<_>>()?;
    let ips: BTreeSet<&str> = replicas.iter().map(|r| r.ip.as_str()).collect();
    assert_eq!(ips.len(), 2, "each pod has its own IP");
    for r in &replicas {
        let ip: Ipv4Addr = r.ip.parse()?;
        assert!(ip.is_loopback() && ip != Ipv4Addr::LOCALHOST, "pod IP {ip} is a 127.0.0.x address");
        assert!(process_alive(r.pid), "process {} of {} runs", r.pid, r.name);
        // the process answers on its own address with its own name
        let (code, body) = http_get(&format!("{}:8080", r.ip), "/").await?;
        assert_eq!((code, body.as_str()), (200, r.name.as_str()));
    }

    // scale to 1: one process stops, its address closes
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}})))
        .await?;
    wait_deployment_available(&deployments, "web", 1, Duration::from_secs(60)).await?;
    let left = wait_ready_pods(&pods, "app=web", 1, Duration::from_secs(60)).await?;
    let kept = replica(&left[0])?;
    let gone = replicas
        .iter()
        .find(|r| r.name != kept.name)
        .context("one of the original replicas should be gone")?;
    assert!(replicas.iter().any(|r| r.name == kept.name), "the kept pod is an original");
    wait_for("the stopped replica's process to exit", Duration::from_secs(30), || async {
        Ok((!process_alive(gone.pid)).then_some(()))
    })
    .await?;
    assert!(
        http_get(&format!("{}:8080", gone.ip), "/").await.is_err(),
        "nothing listens on the stopped replica's address"
    );
    assert!(process_alive(kept.pid), "the kept replica still runs");
    let (code, body) = http_get(&format!("{}:8080", kept.ip), "/").await?;
    assert_eq!((code, body.as_str()), (200, kept.name.as_str()));
    t.cleanup().await;
    Ok(())
}
