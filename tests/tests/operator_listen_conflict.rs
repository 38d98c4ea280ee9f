//! A replica that cannot bind a listener it is configured to serve never turns Ready: it exits
//! non-zero, and its termination message (what `kubectl describe pod` shows: the tail of its log,
//! by `terminationMessagePolicy: FallbackToLogsOnError`) names the listener, the flag and the
//! likely fix (docs/operations.md, "Listeners"). On the local cluster every Pod shares the host's network namespace, so the
//! test takes a port on 127.0.0.1 (an address no Pod gets) and points one listener of each
//! replica at it, the others at the Pod's own address:
//!
//! * dco-operator with admission (`--admission-listen`) — it used to log the failure and turn
//!   Ready anyway once its certificate was served;
//! * dco-operator's `--metrics-listen` (/healthz, /readyz, /metrics) — it used to log and run on;
//! * dco-webhook's `--listen` (conversion) and `--admin-listen`.
//!
//! Each runs as a Pod with `restartPolicy: Never` and a readiness probe, under the operator's
//! ServiceAccount (cluster-admin, as the admission tests run it), so that nothing but the port
//! stands between it and Ready. Needs `target/debug/dco-operator` and `dco-webhook`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use dco_tests::operator_pods::{apply_operator_account, remove_operators};
use dco_tests::{Manager, TestEnv, pod_ready};

const MANAGER: Manager = Manager("dco-listen-conflict-test");
const WAIT: Duration = Duration::from_secs(90);

fn env() -> Value {
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    json!([
        {"name": "POD_NAME", "valueFrom": field("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
        {"name": "POD_IP", "valueFrom": field("status.podIP")},
        {"name": "RUST_LOG", "value": "info"}])
}

fn operator_pod(name: &str, args: &[String]) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"serviceAccountName": "dco-operator", "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "operator", "image": "dco-operator:dev", "args": args, "env": env(),
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1}}]}})
}

fn webhook_pod(name: &str, listen: &str, admin: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "webhook", "image": "dco-webhook:dev", "env": env(),
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "args": ["--static-dir=/static", "--tls-cert-file=/etc/tls/tls.crt", "--tls-key-file=/etc/tls/tls.key",
                    format!("--listen={listen}"), format!("--admin-listen={admin}")],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
                "volumeMounts": [{"name": "tls", "mountPath": "/etc/tls"}, {"name": "static", "mountPath": "/static"}]}],
            "volumes": [{"name": "tls", "secret": {"secretName": "listen-tls"}}, {"name": "static", "emptyDir": {}}]}})
}

/// Follows Pod `name` until its container ended: never Ready on the way, ended non-zero, and
/// its termination message holds every one of `expect`. Returns the time from creation to the exit.
async fn never_ready_and_exits(
    t: &TestEnv,
    name: &str,
    container: &str,
    expect: &[String],
) -> Result<Duration> {
    let pods: Api<Pod> = t.api();
    let started = Instant::now();
    let mut seen = 0;
    let (code, message) = loop {
        ensure!(started.elapsed() < WAIT, "{name} still running after {WAIT:?}");
        let p = pods.get(name).await?;
        seen += 1;
        ensure!(!pod_ready(&p), "{name} turned Ready although a listener it serves could not be bound");
        let terminated = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == container))
            .and_then(|c| c.state.as_ref()?.terminated.clone());
        if let Some(term) = terminated {
            break (term.exit_code, term.message.unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = started.elapsed();
    ensure!(code != 0, "{name} exited {code}, not an error");
    for e in expect {
        ensure!(message.contains(e.as_str()), "{name}'s termination message lacks {e:?}:\n{message}");
    }
    let line = message.lines().find(|l| l.contains("cannot listen on")).unwrap_or_default();
    eprintln!(
        "{name}: never Ready ({seen} looks), exit code {code} {took:?} after creation: {}",
        line.trim()
    );
    Ok(took)
}

#[tokio::test]
async fn a_replica_that_cannot_bind_a_listener_exits_and_is_never_ready() -> Result<()> {
    let t = TestEnv::new("listen").await?;
    let label = format!("dco-listen-test={}", t.ns);
    let result = scenario(&t, &label).await;
    remove_operators(&t, &[label]).await;
    t.cleanup().await;
    result
}

async fn scenario(t: &TestEnv, selector: &str) -> Result<()> {
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    apply_operator_account(t, &MANAGER).await?;
    // Held for the whole test: the port every replica below is pointed at.
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?.to_string();
    let in_use = "address in use";
    let fix = "set bindPodIP=true".to_string();
    let pods: Api<Pod> = t.api();
    let create = |obj: Value| {
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &serde_json::from_value(obj)?)
                .await
                .map_err(anyhow::Error::from)
        }
    };

    let base = || -> Vec<String> {
        ["--namespace", &t.ns, "--selector", selector, "--webhook-listen", "$$(POD_IP):9443"]
            .map(String::from)
            .to_vec()
    };
    let mut admission = base();
    admission.extend([
        "--metrics-listen=$(POD_IP):8080".to_string(),
        format!("--admission-service={}/dco-listen-admission", t.ns),
        format!("--admission-listen={addr}"),
        "--admission-pod-selector=app=adm".to_string(),
    ]);
    create(operator_pod("adm", &admission)).await?;
    let mut metrics = base();
    metrics.push(format!("--metrics-listen={addr}"));
    create(operator_pod("metrics", &metrics)).await?;

    let (_, crt, key) = dco_tests::serving_cert(&["listen.example".to_string()])?;
    let secrets: Api<Secret> = t.api();
    let secret: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "listen-tls"}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": crt, "tls.key": key}}))?;
    secrets.create(&PostParams::default(), &secret).await?;
    create(webhook_pod("conversion", &addr, "$(POD_IP):8080")).await?;
    create(webhook_pod("admin", "$(POD_IP):9443", &addr)).await?;

    let want = |what: &str, flag: &str| {
        vec![format!("cannot listen on {addr} for {what} ({flag})"), in_use.to_string(), fix.clone()]
    };
    let expect = [
        want("admission reviews", "--admission-listen"),
        want("/healthz, /readyz and /metrics", "--metrics-listen"),
        want("conversion reviews", "--listen"),
        want("/readyz, /healthz and /metrics", "--admin-listen"),
    ];
    let (a, m, c, d) = tokio::join!(
        never_ready_and_exits(t, "adm", "operator", &expect[0]),
        never_ready_and_exits(t, "metrics", "operator", &expect[1]),
        never_ready_and_exits(t, "conversion", "webhook", &expect[2]),
        never_ready_and_exits(t, "admin", "webhook", &expect[3]),
    );
    let (a, m, c, d) = (a?, m?, c?, d?);
    eprintln!("exits after creation: admission {a:?}, metrics {m:?}, conversion {c:?}, admin {d:?}");

    // A control: the same operator Pod with its admission port free turns Ready, so what kept
    // the first from Ready was the port alone.
    drop(taken);
    let mut free = base();
    free.extend([
        "--metrics-listen=$(POD_IP):8080".to_string(),
        format!("--admission-service={}/dco-listen-admission", t.ns),
        "--admission-listen=$(POD_IP):9443".to_string(),
        "--admission-pod-selector=app=adm-free".to_string(),
    ]);
    create(operator_pod("adm-free", &free)).await?;
    let started = Instant::now();
    dco_tests::wait_pod_ready(&pods, "adm-free", WAIT).await.context("the control Pod to turn Ready")?;
    eprintln!(
        "control: the same operator with a free admission port Ready {:?} after creation",
        started.elapsed()
    );
    Ok(())
}
