//! Test support for end-to-end tests against the local cluster (`hack/testenv`,
//! see docs/testenv.md).
//!
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! let t = dco_tests::TestEnv::new("my-test").await?; // cluster up (once), client, own namespace
//! dco_tests::map_image("dco-webhook", "target/debug/dco-webhook")?; // optional: image -> binary
//! // ... use t.client / t.ns ...
//! t.cleanup().await; // or just drop it: the namespace is deleted either way
//! # Ok(()) }
//! ```
//!
//! * [`ensure_cluster`] runs `hack/testenv up` once per process; the script
//!   takes a file lock, so several test binaries may call it at once.
//! * [`TestEnv::new`] creates a uniquely named namespace (label
//!   `dco-tests=true`), waits for its `default` ServiceAccount, and deletes
//!   the namespace on drop (unless `DCO_TESTS_KEEP_NAMESPACES=1`).
//! * [`wait_for`] and friends poll with a timeout and say what they waited for.

pub mod apiservers;
pub mod cert_manager;
pub mod chart;
pub mod crossplane;
pub mod crossplane_world;
pub mod expect;
pub mod fleet;
pub mod load;
pub mod monitoring;
pub mod moves;
pub mod object_log;
pub mod operator_pods;
pub mod operator_process;
pub mod otelcol;
pub mod pinned_move;
pub mod rbac;
pub mod review;
pub mod soak;
pub mod xpkg;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;

/// Server-side applies `obj` as field manager `manager`, forcing conflicts (each test owns
/// the objects it applies); the error names the object.
pub async fn apply_as<K>(api: &Api<K>, manager: &str, name: &str, obj: serde_json::Value) -> Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(name, &kube::api::PatchParams::apply(manager).force(), &kube::api::Patch::Apply(&obj))
        .await
        .with_context(|| format!("applying {name}"))
}

/// A test's server-side-apply field manager, named after the test: an object's managedFields
/// say which test wrote it. `const MANAGER: Manager = Manager("dco-e2e-adopt");` then
/// `MANAGER.apply(&api, name, json)`; where a `&str` is wanted, `&MANAGER` is one.
#[derive(Clone, Copy, Debug)]
pub struct Manager(pub &'static str);

impl Manager {
    /// [`apply_as`] this manager: forced, the error names the object.
    pub async fn apply<K>(self, api: &Api<K>, name: &str, obj: serde_json::Value) -> Result<K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        apply_as(api, self.0, name, obj).await
    }
}

impl std::ops::Deref for Manager {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

/// Sends a signal to a local process (`KILL`, `STOP`, `CONT`, `TERM`): the Pods of the local
/// cluster are processes of this machine (docs/testenv.md).
pub fn signal(pid: u32, sig: &str) -> Result<()> {
    let out = Command::new("kill").args([format!("-{sig}"), pid.to_string()]).output()?;
    anyhow::ensure!(out.status.success(), "kill -{sig} {pid}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// `work`, or an error once the process gets SIGINT or SIGTERM: a benchmark's `main` runs its
/// work so, then cleans up, and a stopped run leaves no child process or object behind (the
/// work's handles drop when it is cut short).
pub async fn until_signalled<T>(work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        r = work => r,
        _ = int.recv() => anyhow::bail!("interrupted (SIGINT)"),
        _ = term.recv() => anyhow::bail!("terminated (SIGTERM)"),
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The bytes of one key of a Secret's `data`.
pub fn secret_bytes(s: &k8s_openapi::api::core::v1::Secret, key: &str) -> Option<Vec<u8>> {
    s.data.as_ref()?.get(key).map(|b| b.0.clone())
}

/// The value of one series of the Prometheus text at `addr`'s `/metrics`, named as exposed
/// (`name` or `name{label="value",...}`, labels in the exposed order); `None` when absent.
pub async fn metric(addr: &str, series: &str) -> Result<Option<f64>> {
    let (code, body) = http_get(addr, "/metrics").await?;
    anyhow::ensure!(code == 200, "GET {addr}/metrics: {code}");
    Ok(metric_value(&body, series))
}

/// [`metric`] of a scrape already read.
pub fn metric_value(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// One shard Lease of dco-operator (docs/sharding.md, "Shards").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardHolder {
    /// `holderIdentity`: the replica's Pod name or `--replica-id`; empty once freed.
    pub holder: String,
    /// Renewed within its `leaseDurationSeconds`.
    pub live: bool,
}

/// The shard Leases in `leases`' namespace (label `sharding.dco.rs/role=shard`), by shard.
pub async fn shard_holders(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
) -> Result<std::collections::BTreeMap<u32, ShardHolder>> {
    let lp = ListParams::default().labels("sharding.dco.rs/role=shard");
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut out = std::collections::BTreeMap::new();
    for l in leases.list(&lp).await?.items {
        // `dco-operator[-<hash of --selector>]-shard-<i>` (the operator's Lease names)
        let Some(i) = l.metadata.name.as_deref().and_then(|n| n.rsplit_once("-shard-")?.1.parse().ok())
        else {
            continue;
        };
        let spec = l.spec.unwrap_or_default();
        let live = spec.renew_time.is_some_and(|r| {
            r.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(
                spec.lease_duration_seconds.unwrap_or(0),
            )) > now
        });
        out.insert(i, ShardHolder { holder: spec.holder_identity.unwrap_or_default(), live });
    }
    Ok(out)
}

/// The reconciles dco-operator's shard gate let through for `controller`, by the object's
/// shard, since the replica started: `dco_operator_shard_reconciles_total{controller,shard}`
/// on its `/metrics` at `addr` (docs/operations.md, "Metrics"). Shards without a reconcile
/// are absent.
pub async fn shard_reconciles(addr: &str, controller: &str) -> Result<std::collections::BTreeMap<u32, u64>> {
    let (code, body) = http_get(addr, "/metrics").await?;
    anyhow::ensure!(code == 200, "GET {addr}/metrics: {code}");
    Ok(shard_reconciles_in(&body, controller))
}

/// [`shard_reconciles`] of a scrape already read.
pub fn shard_reconciles_in(body: &str, controller: &str) -> std::collections::BTreeMap<u32, u64> {
    let prefix = format!("dco_operator_shard_reconciles_total{{controller=\"{controller}\",shard=\"");
    body.lines()
        .filter_map(|l| {
            let (shard, value) = l.strip_prefix(prefix.as_str())?.split_once("\"} ")?;
            Some((shard.parse().ok()?, value.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// A binary of this workspace's debug build (`target/debug/<name>`), which the end-to-end
/// tests run as local processes. The benchmarks' scripts set `DCO_BIN_PROFILE=release` to run
/// `target/release/<name>` instead.
pub fn workspace_binary(name: &str) -> Result<PathBuf> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target"));
    let profile = std::env::var("DCO_BIN_PROFILE").unwrap_or_else(|_| "debug".into());
    let build = match profile.as_str() {
        "debug" => format!("cargo build -p {name}"),
        "release" => format!("cargo build --release -p {name}"),
        other => bail!("DCO_BIN_PROFILE is debug or release, not '{other}'"),
    };
    let bin = target.join(&profile).join(name);
    if !bin.exists() {
        bail!("{} is missing: build it with `{build}`", bin.display());
    }
    Ok(bin)
}

/// A test tool built from its own Go module under `hack/testenv-go/tools/<name>` by
/// `hack/testenv tool <name>` (cached under `DCO_TESTENV_CACHE`; a cold build takes minutes):
/// the binary's path. Blocking.
pub fn testenv_tool(name: &str) -> Result<PathBuf> {
    let root = repo_root();
    let script = root.join("hack").join("testenv");
    let out = Command::new(&script)
        .args(["tool", name])
        .current_dir(&root)
        .output()
        .with_context(|| format!("running {} tool {name}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("`hack/testenv tool {name}` failed ({}):\n{stderr}", out.status);
    }
    // The build's own lines ("built in 349s", "from cache"), for the test's log.
    eprint!("{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    if !path.is_file() {
        bail!("`hack/testenv tool {name}` printed {stdout:?}, not the path of a binary");
    }
    Ok(path)
}

/// dco-operator replicas running as local processes; killed when dropped.
pub struct Operators(pub Vec<std::process::Child>);

impl Drop for Operators {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Applies (as `manager`) the test's default ConversionWebhookServer `<ns>-s` with `replicas`
/// replicas in the test's namespace, labelled `label` so the test's operators (scoped by that
/// label) manage it; returns its name.
pub async fn apply_default_server(
    env: &TestEnv,
    manager: Manager,
    label: (&str, &str),
    replicas: u32,
) -> Result<String> {
    let servers: Api<dco_api::ConversionWebhookServer> = Api::all(env.client.clone());
    let server = format!("{}-s", env.ns);
    manager
        .apply(
            &servers,
            &server,
            serde_json::json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                "metadata": {"name": server, "labels": {label.0: label.1}},
                "spec": {"namespace": env.ns, "replicas": replicas, "default": true}}),
        )
        .await?;
    Ok(server)
}

/// dco for one test: its CRDs, one operator process `id` scoped by `label`, and the default
/// server of [`apply_default_server`] with 2 replicas, waited for until both are ready.
/// Returns the operator (stopped on drop) and the server's name.
pub async fn start_dco(
    env: &TestEnv,
    manager: Manager,
    label: (&str, &str),
    id: &str,
) -> Result<(Operators, String)> {
    install_dco_crds(&env.client, manager.0).await?;
    let selector = format!("{}={}", label.0, label.1);
    let operators = start_operators(env, &selector, &[id], &["--resync", "60s"])?;
    let server = apply_default_server(env, manager, label, 2).await?;
    let servers: Api<dco_api::ConversionWebhookServer> = Api::all(env.client.clone());
    wait_for("dco's server to have 2 ready replicas", Duration::from_secs(180), || async {
        Ok(servers.get(&server).await?.status.is_some_and(|s| s.ready_replicas == 2).then_some(()))
    })
    .await?;
    Ok((operators, server))
}

/// Starts one dco-operator process per id in `ids`, scoped by `selector` to a test's objects,
/// its webhook servers' workloads and its shard Leases in the test's namespace, with short
/// webhook drain, renew and lease periods; `extra` flags go last. The webhooks listen on
/// `$(POD_IP):9443` unless `extra` holds a `--webhook-listen` (clap takes a flag once). Logs go
/// to `<testenv>/logs/dco-operator_<ns>_<id>.log`.
pub fn start_operators(env: &TestEnv, selector: &str, ids: &[&str], extra: &[&str]) -> Result<Operators> {
    let mut out = Operators(Vec::new());
    let listen: &[&str] = if extra.iter().any(|a| a.split('=').next() == Some("--webhook-listen")) {
        &[]
    } else {
        &["--webhook-listen", "$(POD_IP):9443"]
    };
    let args: Vec<&str> = listen
        .iter()
        .copied()
        .chain(["--webhook-arg=--drain-period=5s"])
        .chain(["--webhook-arg=--lease-renew-interval=5s", "--webhook-arg=--lease-duration=20s"])
        .chain(extra.iter().copied())
        .collect();
    for id in ids {
        let (mut cmd, log) = operator_process::command(env, selector, id, "127.0.0.1:0", &args, &[])?;
        let child = cmd.spawn().context("starting dco-operator")?;
        eprintln!("dco-operator {id} log: {}", log.display());
        out.0.push(child);
    }
    Ok(out)
}

/// Runs the `echo-convert` fixture (tests/src/bin/echo-convert.rs) in `t`'s namespace as a
/// foreign conversion webhook: a Deployment of 1 replica behind Service `echo-convert` (port
/// 443, path `/convert`), serving a certificate for the Service's DNS names. Returns the CA
/// (PEM) a CRD's `caBundle` must carry. The caller maps the image first
/// ([`map_echo_convert`]).
pub async fn deploy_echo_convert(t: &TestEnv) -> Result<String> {
    use k8s_openapi::api::core::v1::{Secret, Service};
    use kube::api::PostParams;
    use serde_json::json;
    let ns = t.ns.clone();
    // serving certificate for the Service's DNS name, delivered through a Secret volume
    let dns = vec![format!("echo-convert.{ns}.svc"), format!("echo-convert.{ns}.svc.cluster.local")];
    let (ca, crt, key) = serving_cert(&dns)?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "echo-convert-tls"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": crt, "tls.key": key, "ca.crt": ca},
    }))?;
    t.api::<Secret>().create(&PostParams::default(), &secret).await?;

    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "echo-convert"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "echo-convert"}},
            "template": {
                "metadata": {"labels": {"app": "echo-convert"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "webhook",
                        "image": ECHO_CONVERT_IMAGE,
                        "args": [
                            "--bind=$(POD_IP):8443",
                            "--cert=/etc/webhook/tls/tls.crt",
                            "--key=/etc/webhook/tls/tls.key",
                        ],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
                        "ports": [{"name": "https", "containerPort": 8443}],
                        "readinessProbe": {
                            "httpGet": {"scheme": "HTTPS", "path": "/healthz", "port": "https"},
                            "periodSeconds": 1,
                        },
                        "volumeMounts": [{"name": "tls", "mountPath": "/etc/webhook/tls", "readOnly": true}],
                    }],
                    "volumes": [{"name": "tls", "secret": {"secretName": "echo-convert-tls"}}],
                },
            },
        },
    }))?;
    let deployments = t.api::<Deployment>();
    deployments.create(&PostParams::default(), &deploy).await?;

    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "echo-convert"},
        "spec": {
            "selector": {"app": "echo-convert"},
            "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
        },
    }))?;
    t.api::<Service>().create(&PostParams::default(), &svc).await?;
    wait_deployment_available(&deployments, "echo-convert", 1, Duration::from_secs(120)).await?;

    Ok(ca)
}

/// Where the cluster and its state live.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The repository root.
    pub repo_root: PathBuf,
    /// `target/testenv` (or `$DCO_TESTENV_DIR`).
    pub dir: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
}

impl Cluster {
    /// `target/testenv/bin/kubectl`.
    pub fn kubectl(&self) -> PathBuf {
        self.dir.join("bin").join("kubectl")
    }
    /// The image map file read by the process-kubelet at every Pod start.
    pub fn image_map(&self) -> PathBuf {
        self.dir.join("images")
    }
    /// The log file of a Pod's container.
    pub fn pod_log(&self, ns: &str, pod: &str, container: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{ns}_{pod}_{container}.log"))
    }
}

/// The repository root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn testenv_dir() -> PathBuf {
    match std::env::var_os("DCO_TESTENV_DIR") {
        Some(d) => PathBuf::from(d),
        None => repo_root().join("target").join("testenv"),
    }
}

static CLUSTER: OnceLock<std::result::Result<Cluster, String>> = OnceLock::new();

/// Brings the local cluster up when needed (`hack/testenv up`, idempotent and
/// safe to run from several processes at once: the script holds a file lock)
/// and returns where it is. Blocking; runs once per process.
pub fn ensure_cluster() -> Result<Cluster> {
    CLUSTER
        .get_or_init(|| {
            let root = repo_root();
            let script = root.join("hack").join("testenv");
            let out = Command::new(&script)
                .arg("up")
                .current_dir(&root)
                .output()
                .map_err(|e| format!("running {}: {e}", script.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "`hack/testenv up` failed ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let dir = testenv_dir();
            Ok(Cluster { repo_root: root, kubeconfig: dir.join("kubeconfig"), dir })
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Installs rustls' ring provider (kube uses it); harmless when already done.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A new client for the cluster's admin kubeconfig. Make one per test:
/// a kube Client belongs to the tokio runtime it was made on.
pub async fn client() -> Result<Client> {
    install_crypto();
    let cluster = tokio::task::spawn_blocking(ensure_cluster).await??;
    let kc = Kubeconfig::read_from(&cluster.kubeconfig)
        .with_context(|| format!("reading {}", cluster.kubeconfig.display()))?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(cfg)?)
}

/// Adds `name=path` to the image map (`target/testenv/images`): Pods whose
/// image repository is `name` (or ends in `/name`) run `path` (absolute, or
/// relative to the repository root). Later entries win.
pub fn map_image(name: &str, path: impl AsRef<Path>) -> Result<()> {
    let dir = testenv_dir();
    std::fs::create_dir_all(&dir)?;
    let path = path.as_ref();
    let line = format!("{name}={}\n", path.display());
    let file = dir.join("images");
    if std::fs::read_to_string(&file)
        .map(|s| s.lines().last().map(|l| format!("{l}\n")) == Some(line.clone()) || s.contains(&line))
        .unwrap_or(false)
    {
        return Ok(());
    }
    // O_APPEND writes of one short line are atomic: no lock needed
    std::fs::OpenOptions::new().create(true).append(true).open(&file)?.write_all(line.as_bytes())?;
    Ok(())
}

/// A unique, DNS-safe name: `<prefix>-<6 base-36 chars>`.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ N.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let suffix: String = (0..6).map(|i| alphabet[((x >> (i * 6)) % 36) as usize] as char).collect();
    format!("{prefix}-{suffix}")
}

/// One test's view of the cluster: a client and a namespace of its own,
/// deleted when this is dropped.
pub struct TestEnv {
    /// Admin client.
    pub client: Client,
    /// The test's namespace.
    pub ns: String,
    /// Where the cluster lives.
    pub cluster: Cluster,
    cleaned: bool,
}

impl TestEnv {
    /// Cluster up (if needed), a client, and a fresh namespace `<prefix>-xxxxxx`.
    pub async fn new(prefix: &str) -> Result<Self> {
        let client = client().await?;
        let cluster = ensure_cluster()?;
        let ns = unique_name(prefix);
        let api: Api<Namespace> = Api::all(client.clone());
        api.create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    labels: Some([("dco-tests".to_string(), "true".to_string())].into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
        let env = TestEnv { client, ns, cluster, cleaned: false };
        // Pods are refused until the namespace's default ServiceAccount exists.
        let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
        wait_for("the default ServiceAccount", Duration::from_secs(60), || {
            let sas = sas.clone();
            async move { Ok(sas.get_opt("default").await?.map(|_| ())) }
        })
        .await?;
        Ok(env)
    }

    /// A namespaced Api in the test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Deletes the namespace now (without waiting for it to be gone).
    pub async fn cleanup(mut self) {
        self.cleaned = true;
        if keep_namespaces() {
            return;
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(&self.ns, &DeleteParams::background()).await;
    }
}

fn keep_namespaces() -> bool {
    std::env::var("DCO_TESTS_KEEP_NAMESPACES").is_ok_and(|v| v == "1" || v == "true")
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.cleaned || keep_namespaces() {
            return;
        }
        // Blocking and independent of the (possibly shutting down) runtime.
        let _ = Command::new(self.cluster.kubectl())
            .arg("--kubeconfig")
            .arg(&self.cluster.kubeconfig)
            .args(["delete", "namespace", &self.ns, "--wait=false", "--ignore-not-found"])
            .output();
    }
}

/// Polls `f` until it returns `Ok(Some(v))` (→ `v`), an error (→ that error)
/// or `timeout` passes (→ an error naming `what`).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if start.elapsed() >= timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 3 / 2).min(Duration::from_secs(1));
    }
}

/// Whether a Pod's `Ready` condition is `True`.
pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The local process id of a Pod's container (the process-kubelet reports
/// `containerID: testenv://<pid>`).
pub fn container_pid(p: &Pod, container: &str) -> Option<u32> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .container_id
        .as_deref()?
        .strip_prefix("testenv://")?
        .parse()
        .ok()
}

/// Whether a local process exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Waits until a Pod is Ready and returns it.
pub async fn wait_pod_ready(api: &Api<Pod>, name: &str, timeout: Duration) -> Result<Pod> {
    let what = format!("pod {name} to be Ready");
    wait_for(&what, timeout, || async { Ok(api.get_opt(name).await?.filter(pod_ready)) }).await
}

/// Waits until a CustomResourceDefinition is Established (its kinds are served).
pub async fn wait_crd_established(
    api: &Api<CustomResourceDefinition>,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    let what = format!("CRD {name} to be Established");
    wait_for(&what, timeout, || async {
        let conditions = api.get(name).await?.status.and_then(|s| s.conditions).unwrap_or_default();
        Ok(conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(()))
    })
    .await
}

/// Waits until an object is gone.
pub async fn wait_deleted<K>(api: &Api<K>, name: &str, timeout: Duration) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{name} to be deleted");
    wait_for(&what, timeout, || async { Ok(api.get_opt(name).await?.is_none().then_some(())) }).await
}

/// Waits until exactly `n` Ready, non-terminating Pods match `selector`, and
/// returns them.
pub async fn wait_ready_pods(
    api: &Api<Pod>,
    selector: &str,
    n: usize,
    timeout: Duration,
) -> Result<Vec<Pod>> {
    let what = format!("{n} ready pods matching {selector}");
    wait_for(&what, timeout, || async {
        let pods = api.list(&ListParams::default().labels(selector)).await?;
        let all = pods.items.len();
        let ready: Vec<Pod> = pods
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
            .collect();
        Ok((ready.len() == n && all == n).then_some(ready))
    })
    .await
}

/// Waits until a Deployment reports `n` available replicas and no others.
pub async fn wait_deployment_available(
    api: &Api<Deployment>,
    name: &str,
    n: i32,
    timeout: Duration,
) -> Result<Deployment> {
    let what = format!("deployment {name} to have {n} available replicas");
    wait_for(&what, timeout, || async {
        let d = api.get(name).await?;
        let ok = d.status.as_ref().is_some_and(|s| {
            s.available_replicas.unwrap_or(0) == n
                && s.replicas.unwrap_or(0) == n
                && s.updated_replicas.unwrap_or(0) == n
                && s.observed_generation == d.metadata.generation
        });
        Ok(ok.then_some(d))
    })
    .await
}

/// 64-bit FNV-1a, the hash of KEP-5866 shard selectors: the product's own function, so the
/// sharded-list test also proves it agrees with the apiserver's.
pub use dco_api::hash::fnv1a64;

/// A self-signed CA and a serving certificate for `dns_names`, as PEM:
/// (ca.crt, tls.crt, tls.key).
pub fn serving_cert(dns_names: &[String]) -> Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "dco-tests CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(dns_names.to_vec())?;
    leaf.distinguished_name.push(DnType::CommonName, dns_names.first().cloned().unwrap_or_default());
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    Ok((ca_cert.pem(), leaf_cert.pem(), leaf_key.serialize_pem()))
}

/// The image the tests run `echo-convert` under (mapped by [`map_echo_convert`]).
pub const ECHO_CONVERT_IMAGE: &str = "dco-tests/echo-convert:dev";

/// Maps the `echo-convert` image to the fixture binary. Integration tests pass
/// `env!("CARGO_BIN_EXE_echo-convert")`.
pub fn map_echo_convert(binary: &str) -> Result<()> {
    map_image("echo-convert", binary)
}

/// A plain HTTP/1.0 GET of `path` on `addr`; returns (status code, body).
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .with_context(|| format!("connecting to {addr}: timeout"))??;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .context("reading response: timeout")??;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("bad response from {addr}: {head}"))?;
    Ok((code, body.to_string()))
}

/// Percent-encodes a query parameter value.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What an OTLP collector received: every export request, in arrival order.
pub type OtlpExports = std::sync::Arc<std::sync::Mutex<Vec<ExportTraceServiceRequest>>>;

/// An OTLP/HTTP collector on loopback (protobuf on `/v1/traces`): its base URL, and what it
/// has received. A body that is not an export is answered 400 and kept out.
pub async fn otlp_collector() -> Result<(String, OtlpExports)> {
    use prost::Message as _;
    let got = OtlpExports::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let keep = keep.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(req) => {
                        keep.lock().unwrap_or_else(|e| e.into_inner()).push(req);
                        axum::http::StatusCode::OK
                    }
                    Err(_) => axum::http::StatusCode::BAD_REQUEST,
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, got))
}

/// Every span a collector has received, in the order they were exported.
pub fn otlp_spans(got: &OtlpExports) -> Vec<Span> {
    let requests = got.lock().unwrap_or_else(|e| e.into_inner()).clone();
    requests
        .into_iter()
        .flat_map(|r| r.resource_spans)
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

/// Every `ResourceSpans` a collector has received (each span with the resource that sent it),
/// in the order they were exported.
pub fn otlp_resource_spans(got: &OtlpExports) -> Vec<opentelemetry_proto::tonic::trace::v1::ResourceSpans> {
    let requests = got.lock().unwrap_or_else(|e| e.into_inner()).clone();
    requests.into_iter().flat_map(|r| r.resource_spans).collect()
}

/// Lower-case hex of trace and span ids, as a traceparent writes them.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Deletes cluster-scoped objects a test made when dropped, on a runtime of its own with a
/// client of its own: a kube Client's connection task lives on the runtime that made it, and
/// that runtime is blocked in this Drop, so reusing the test's client here would deadlock.
pub struct ClusterScoped(pub Vec<(kube::api::ApiResource, String)>);

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        let objs = std::mem::take(&mut self.0);
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build().map(|rt| {
                rt.block_on(async {
                    let Ok(client) = client().await else { return };
                    for (ar, name) in objs {
                        let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &ar);
                        let _ = api.delete(&name, &DeleteParams::background()).await;
                    }
                })
            })
        })
        .join();
    }
}

/// The ApiResource of a typed kind (for [`ClusterScoped`]).
pub fn ar<K: kube::Resource<DynamicType = ()>>() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<K>(&())
}

/// A minimal stand-in for Crossplane's CRD `compositeresourcedefinitions.apiextensions.crossplane.io`:
/// the name, group and kind dco watches (`dco_api::crossplane`), any spec, serving `v1` and
/// `v2` as Crossplane 2 does (`v1` stored). Cluster-wide, so one test at a time may install it.
/// A namespaced `widgets.<group>` CRD serving `v1` and `v2` (storage) with one schema, a
/// `spec.size` string: the smallest target a config can wire.
pub fn two_version_widget_crd(group: &str) -> serde_json::Value {
    let schema = serde_json::json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "string"}}}}}});
    serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema},
                {"name": "v2", "served": true, "storage": true, "schema": schema}]}})
}

pub fn crossplane_xrd_crd() -> serde_json::Value {
    crossplane_xrd_crd_serving(true, true)
}

/// [`crossplane_xrd_crd`] serving only the versions asked for (`v1` stays the stored one:
/// Crossplane 1 serves `v1` only; a Crossplane that dropped `v1` would serve `v2` only).
pub fn crossplane_xrd_crd_serving(v1: bool, v2: bool) -> serde_json::Value {
    let schema = serde_json::json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": dco_api::target::XRD_CRD_NAME},
        "spec": {"group": "apiextensions.crossplane.io", "scope": "Cluster",
            "names": {"plural": "compositeresourcedefinitions", "singular": "compositeresourcedefinition",
                "kind": "CompositeResourceDefinition", "listKind": "CompositeResourceDefinitionList"},
            "versions": [{"name": "v1", "served": v1, "storage": true, "schema": schema},
                {"name": "v2", "served": v2, "storage": false, "schema": schema}]}})
}

/// An XRD `xwidgets.<group>` (an XWidget, hub v2, spoke v1) for [`crossplane_xrd_crd`]'s kind:
/// enough for dco to read it as a target.
pub fn crossplane_xrd(group: &str) -> (String, serde_json::Value) {
    let name = format!("xwidgets.{group}");
    let xrd = serde_json::json!({"apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": group, "names": {"kind": "XWidget", "plural": "xwidgets"},
            "versions": [{"name": "v2", "served": true, "referenceable": true}, {"name": "v1", "served": true, "referenceable": false}]}});
    (name, xrd)
}

/// Standard base64 of a string (Secret data, caBundles).
pub fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The webhook client config a CRD's `spec.conversion` carries (a wired target's).
pub fn conversion_client_config(
    crd: &CustomResourceDefinition,
) -> Option<&k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig> {
    crd.spec.conversion.as_ref()?.webhook.as_ref()?.client_config.as_ref()
}

/// The Service (namespace, name) a wired target's conversion calls.
pub fn conversion_service(crd: &CustomResourceDefinition) -> Option<(String, String)> {
    let s = conversion_client_config(crd)?.service.as_ref()?;
    Some((s.namespace.clone(), s.name.clone()))
}

/// Applies dco's own CRDs (`dco_api::crds()`) as field manager `manager` and waits until each
/// is Established (a test may run alone on a fresh cluster).
pub async fn install_dco_crds(client: &Client, manager: &str) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in dco_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        apply_as(&crds, manager, &name, serde_json::to_value(&crd)?).await?;
        wait_crd_established(&crds, &name, Duration::from_secs(120)).await?;
    }
    Ok(())
}

/// What the operator gives a server's replicas, set up by hand for a test that runs a
/// dco-webhook Deployment named `instance` itself in `t`'s namespace: ServiceAccount
/// `dco-webhook`; ClusterRole and ClusterRoleBinding `cluster_role` (read dco's kinds and the
/// targets cluster-wide, get Pods); Leases in the namespace only; the serving Secret
/// `dco-webhook-tls` for the Service's DNS names; and Service `instance` (443 → 9443, Pods
/// labelled `app: <instance>`). Returns the CA (PEM) a target's `caBundle` carries. The caller
/// removes the two cluster-scoped objects.
pub async fn hand_run_webhook_setup(
    t: &TestEnv,
    manager: &str,
    instance: &str,
    cluster_role: &str,
) -> Result<String> {
    use k8s_openapi::api::core::v1::{Secret, Service};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use serde_json::json;
    let ns = &t.ns;
    let sa = json!({"kind": "ServiceAccount", "name": "dco-webhook", "namespace": ns});
    apply_as(
        &t.api::<ServiceAccount>(),
        manager,
        "dco-webhook",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "dco-webhook"}}),
    )
    .await?;
    apply_as(&Api::<ClusterRole>::all(t.client.clone()), manager, cluster_role, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": cluster_role},
        "rules": [
            {"apiGroups": ["conversion.dco.rs"], "resources": ["xrdconversionconfigs", "crdconversionconfigs", "conversionwebhookservers"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apiextensions.crossplane.io"], "resources": ["compositeresourcedefinitions"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        ]})).await?;
    apply_as(&Api::<ClusterRoleBinding>::all(t.client.clone()), manager, cluster_role, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": cluster_role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [sa]})).await?;
    apply_as(&t.api::<Role>(), manager, "dco-webhook-leases", json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "dco-webhook-leases"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update", "patch"]}]})).await?;
    apply_as(&t.api::<RoleBinding>(), manager, "dco-webhook-leases", json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "dco-webhook-leases"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dco-webhook-leases"},
        "subjects": [sa]})).await?;
    let (ca, crt, key) =
        serving_cert(&[format!("{instance}.{ns}.svc"), format!("{instance}.{ns}.svc.cluster.local")])?;
    apply_as(
        &t.api::<Secret>(),
        manager,
        "dco-webhook-tls",
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "dco-webhook-tls"}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": crt, "tls.key": key, "ca.crt": ca}}),
    )
    .await?;
    apply_as(&t.api::<Service>(), manager, instance, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": instance},
        "spec": {"selector": {"app": instance}, "ports": [{"name": "https", "port": 443, "targetPort": 9443}]}})).await?;
    Ok(ca)
}

/// The Deployment the operator would make for the server [`hand_run_webhook_setup`] prepared:
/// `replicas` dco-webhook Pods (image `dco-webhook:e2e`; map it with [`map_image`]) labelled
/// `app: <instance>` under ServiceAccount `dco-webhook`, serving conversion on 9443 with the
/// Secret `dco-webhook-tls` and the admin endpoints on 8080, renewing their Leases every 2 s
/// and stopping within 1 s of SIGTERM; `extra_args` go last.
pub fn hand_run_webhook_deployment(
    instance: &str,
    replicas: u32,
    extra_args: &[String],
) -> serde_json::Value {
    let mut args = vec![
        format!("--instance={instance}"),
        "--listen=$(POD_IP):9443".to_string(),
        "--admin-listen=$(POD_IP):8080".to_string(),
        "--tls-cert-file=/etc/dco/tls/tls.crt".to_string(),
        "--tls-key-file=/etc/dco/tls/tls.key".to_string(),
        "--lease-renew-interval=2s".to_string(),
        "--shutdown-delay=1s".to_string(),
        "--shutdown-timeout=5s".to_string(),
    ];
    args.extend(extra_args.iter().cloned());
    serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": instance},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": instance}},
            "template": {"metadata": {"labels": {"app": instance}}, "spec": {
                "serviceAccountName": "dco-webhook",
                "terminationGracePeriodSeconds": 10,
                "containers": [{"name": "webhook", "image": "dco-webhook:e2e", "args": args,
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        {"name": "RUST_LOG", "value": "info"}],
                    "ports": [{"name": "https", "containerPort": 9443}],
                    "readinessProbe": {"httpGet": {"scheme": "HTTPS", "path": "/readyz", "port": "https"}, "periodSeconds": 1},
                    "volumeMounts": [{"name": "tls", "mountPath": "/etc/dco/tls", "readOnly": true}]}],
                "volumes": [{"name": "tls", "secret": {"secretName": "dco-webhook-tls"}}]}}}})
}

/// The condition `type_` of a ConversionWebhookServer: (status, reason, message), if set.
pub async fn server_condition(
    servers: &Api<dco_api::ConversionWebhookServer>,
    server: &str,
    type_: &str,
) -> Result<Option<(String, String, String)>> {
    let s = servers.get(server).await?;
    Ok(s.status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message)))
}

/// `reason: note` of every Warning Event about the cluster-scoped object `name` (namespace
/// "default", as [`warning_events`] reads them), oldest first.
pub async fn warning_events_about(client: &Client, name: &str) -> Result<Vec<String>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let mut evs: Vec<_> = events
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.type_.as_deref() == Some("Warning")
        })
        .collect();
    evs.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(evs
        .into_iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default().chars().take(400).collect::<String>()
            )
        })
        .collect())
}

/// The Warning Events with `reason` about the cluster-scoped object `name` (kube-runtime's
/// recorder writes Events about cluster-scoped objects to namespace "default").
pub async fn warning_events(
    client: &Client,
    name: &str,
    reason: &str,
) -> Result<Vec<k8s_openapi::api::events::v1::Event>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    Ok(events
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some("Warning")
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn unique_names_are_dns_labels_and_differ() {
        let a = unique_name("t");
        let b = unique_name("t");
        assert_ne!(a, b);
        assert_eq!(a.len(), 8);
        assert!(a.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    }

    #[test]
    fn query_escape_escapes_the_shard_selector() {
        assert_eq!(
            query_escape("shardRange(object.metadata.uid, '0x0', '0x8')"),
            "shardRange%28object.metadata.uid%2C%20%270x0%27%2C%20%270x8%27%29"
        );
    }

    #[test]
    fn shard_reconciles_reads_one_controller_by_shard() {
        let body = "# TYPE dco_operator_shard_reconciles counter\n\
            dco_operator_shard_reconciles_total{controller=\"crdconversionconfig\",shard=\"3\"} 7\n\
            dco_operator_shard_reconciles_total{controller=\"conversionwebhookserver\",shard=\"3\"} 2\n\
            dco_operator_shard_reconciles_total{controller=\"crdconversionconfig\",shard=\"31\"} 1\n";
        assert_eq!(shard_reconciles_in(body, "crdconversionconfig"), [(3, 7), (31, 1)].into());
        assert_eq!(
            metric_value(
                body,
                "dco_operator_shard_reconciles_total{controller=\"crdconversionconfig\",shard=\"31\"}"
            ),
            Some(1.0)
        );
    }

    #[test]
    fn serving_cert_is_pem() {
        let (ca, crt, key) = serving_cert(&["svc.ns.svc".to_string()]).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(crt.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.contains("PRIVATE KEY"));
    }
}
