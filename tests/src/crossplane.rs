//! A real Crossplane 2 (core) against the local cluster: the `crossplane` binary of
//! `hack/testenv-go/tools/crossplane` (built by `hack/testenv tool crossplane`), run as a local
//! process the way its chart runs it in a Pod: `crossplane core init` (Crossplane's CRDs from
//! the module's `cluster/crds`, the TLS Secrets in `crossplane-system`), then `crossplane core
//! start` with its ports on free ports, its TLS directories filled from those Secrets, webhooks
//! off and its package cache under the caller's directory (docs/testenv.md, "Crossplane").
//! It pulls a package only when a test installs one from the loopback registry
//! ([`crate::xpkg`]): its only traffic is to the local apiserver and that registry.
//!
//! ```no_run
//! # async fn t(t: &dco_tests::TestEnv, dir: &std::path::Path) -> anyhow::Result<()> {
//! let xp = dco_tests::crossplane::Crossplane::start(&t.client, dir).await?;
//! // ... apply XRDs, see the CRDs Crossplane renders from them ...
//! xp.stop().await?; // kill it and remove its CRDs (drop alone only kills it)
//! # Ok(()) }
//! ```
//!
//! Crossplane's CRDs are cluster-scoped and two Crossplanes on one cluster would both
//! reconcile every XRD, so one test at a time runs it: [`Crossplane::start`] takes an exclusive
//! file lock (`<testenv>/crossplane.lock`, waiting for another test's Crossplane to stop) and
//! holds it until the handle is dropped. Under that lock no other test uses Crossplane's CRDs,
//! so [`Crossplane::stop`] removes them: tests that install a stand-in for the XRD CRD
//! (`webhook_crossplane_detection`, `operator_crossplane_detection`) need it absent.
//! `DCO_TESTS_KEEP_CROSSPLANE=1` keeps them (the next start's init applies them again). The
//! namespace `crossplane-system` and its TLS Secrets stay: init reuses them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};

/// The namespace Crossplane runs in (`POD_NAMESPACE`): its TLS Secrets live there.
pub const NAMESPACE: &str = "crossplane-system";
/// The Go module whose `cluster/crds` init applies (its version is the tool's go.mod's).
const MODULE: &str = "github.com/crossplane/crossplane/v2";
const CA_SECRET: &str = "crossplane-root-ca";
const SERVER_SECRET: &str = "crossplane-tls-server";
const CLIENT_SECRET: &str = "crossplane-tls-client";
/// Attempts at free ports: another process may take one between the probe and Crossplane's bind.
const PORT_ATTEMPTS: usize = 3;
const START_TIMEOUT: Duration = Duration::from_secs(60);
const UNINSTALL_TIMEOUT: Duration = Duration::from_secs(180);

/// The cluster-wide Crossplane lock, held (released when dropped).
pub struct Lock(File);

/// A running Crossplane; killed when dropped.
pub struct Crossplane {
    child: Child,
    /// Held while this Crossplane runs (closing the file releases it).
    _lock: File,
    pidfile: PathBuf,
    client: Client,
    /// Crossplane's CRD manifests (the module's `cluster/crds`).
    pub crds_dir: PathBuf,
    /// `crossplane core start`'s log (stdout and stderr), for diagnosis.
    pub log: PathBuf,
    /// `127.0.0.1:<port>` of its health probes (`/healthz`, `/readyz`).
    pub health: String,
}

impl Drop for Crossplane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

fn keep_crds() -> bool {
    std::env::var("DCO_TESTS_KEEP_CROSSPLANE").is_ok_and(|v| v == "1" || v == "true")
}

/// The directory of the module's source in the Go module cache (downloaded when missing: the
/// tool's build downloads it too).
fn module_dir() -> Result<PathBuf> {
    let tool = crate::repo_root().join("hack/testenv-go/tools/crossplane");
    let out = Command::new("go")
        .args(["mod", "download", "-json", MODULE])
        .current_dir(&tool)
        .env("GOFLAGS", "-mod=readonly")
        .output()
        .context("running go mod download (Go is needed for Crossplane's CRDs)")?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!("go mod download -json {MODULE}: {}", String::from_utf8_lossy(&out.stderr))
    })?;
    match json["Dir"].as_str() {
        Some(d) if out.status.success() => Ok(PathBuf::from(d)),
        _ => bail!("go mod download -json {MODULE} ({}): {json}", out.status),
    }
}

/// Waits for the cluster-wide Crossplane lock; the file stays open (locked) in the handle.
fn lock(cluster: &crate::Cluster) -> Result<File> {
    let path = cluster.dir.join("crossplane.lock");
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    if file.try_lock().is_err() {
        eprintln!("crossplane: another test runs Crossplane; waiting for {}", path.display());
        file.lock().with_context(|| format!("locking {}", path.display()))?;
    }
    Ok(file)
}

/// Kills a Crossplane a killed test process left running (its pid file names it): under the
/// lock no other test's Crossplane runs, and two would fight over every XRD.
fn kill_leftover(pidfile: &Path) {
    let Some(pid) = std::fs::read_to_string(pidfile).ok().and_then(|s| s.trim().parse::<u32>().ok()) else {
        return;
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    if args.first().is_some_and(|a| a.ends_with(b"crossplane")) && args.contains(&&b"start"[..]) {
        eprintln!("crossplane: killing a leftover Crossplane (pid {pid})");
        let _ = crate::signal(pid, "KILL");
    }
    let _ = std::fs::remove_file(pidfile);
}

impl Crossplane {
    /// Builds the tool if needed (minutes when cold: docs/testenv.md), takes the lock, runs
    /// `crossplane core init` (idempotent: the CRDs are applied again, the Secrets kept) and
    /// starts `crossplane core start`, its files under `dir`; returns once it answers `/readyz`.
    pub async fn start(client: &Client, dir: &Path) -> Result<Crossplane> {
        Self::start_with(client, dir, &[]).await
    }

    /// [`Crossplane::start`] with `extra` flags of `crossplane core start` (e.g. a short
    /// `--sync-interval`, how often the package manager writes its packages' objects again).
    pub async fn start_with(client: &Client, dir: &Path, extra: &[&str]) -> Result<Crossplane> {
        Self::start_under(client, dir, extra, None).await
    }

    /// Takes the cluster-wide lock ahead of [`Crossplane::start_locked`], for a test that must
    /// see the cluster without Crossplane first: no other test's Crossplane starts meanwhile
    /// (each removes Crossplane's CRDs when it stops).
    pub async fn lock() -> Result<Lock> {
        let cluster = tokio::task::spawn_blocking(crate::ensure_cluster).await??;
        Ok(Lock(tokio::task::spawn_blocking(move || lock(&cluster)).await??))
    }

    /// [`Crossplane::start`] under a lock taken by [`Crossplane::lock`].
    pub async fn start_locked(held: Lock, client: &Client, dir: &Path) -> Result<Crossplane> {
        Self::start_under(client, dir, &[], Some(held)).await
    }

    async fn start_under(
        client: &Client,
        dir: &Path,
        extra: &[&str],
        held: Option<Lock>,
    ) -> Result<Crossplane> {
        let bin = tokio::task::spawn_blocking(|| crate::testenv_tool("crossplane")).await??;
        let crds_dir = tokio::task::spawn_blocking(module_dir).await??.join("cluster").join("crds");
        let cluster = tokio::task::spawn_blocking(crate::ensure_cluster).await??;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let lock = match held {
            Some(Lock(file)) => file,
            None => {
                let lock_cluster = cluster.clone();
                tokio::task::spawn_blocking(move || lock(&lock_cluster)).await??
            }
        };
        let pidfile = cluster.dir.join("crossplane.pid");
        kill_leftover(&pidfile);

        let namespaces: Api<Namespace> = Api::all(client.clone());
        if namespaces.get_opt(NAMESPACE).await?.is_none() {
            let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))?;
            match namespaces.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e).context("creating namespace crossplane-system"),
            }
        }

        let t0 = Instant::now();
        init(&bin, &cluster, &crds_dir, dir).await?;
        eprintln!("crossplane: core init in {:?}", t0.elapsed());
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
        let server_dir = dir.join("tls-server");
        let client_dir = dir.join("tls-client");
        write_certs(&secrets, SERVER_SECRET, &server_dir).await?;
        write_certs(&secrets, CLIENT_SECRET, &client_dir).await?;

        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let (child, log, health) =
                match start_once(&bin, &cluster, dir, &server_dir, &client_dir, extra).await? {
                    Ok(started) => started,
                    Err(why) => {
                        last = why;
                        continue;
                    }
                };
            std::fs::write(&pidfile, child.id().to_string())?;
            eprintln!("crossplane: core start ready in {:?} (log {})", t0.elapsed(), log.display());
            return Ok(Crossplane {
                child,
                _lock: lock,
                pidfile,
                client: client.clone(),
                crds_dir,
                log,
                health,
            });
        }
        bail!("crossplane did not start in {PORT_ATTEMPTS} attempts; last: {last}")
    }

    /// Kills Crossplane, then removes its CRDs (unless `DCO_TESTS_KEEP_CROSSPLANE=1`) while
    /// still holding the lock; the lock is released at the end.
    pub async fn stop(mut self) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if keep_crds() {
            eprintln!("crossplane: DCO_TESTS_KEEP_CROSSPLANE: its CRDs stay");
            return Ok(());
        }
        let t0 = Instant::now();
        uninstall_crds(&self.client, &self.crds_dir).await?;
        eprintln!("crossplane: its CRDs removed in {:?}", t0.elapsed());
        Ok(())
    }
}

/// `crossplane core init`: the CRDs, the CA and the server and client Secrets. Webhooks stay
/// on for init only so that it writes the server Secret; the directory of webhook
/// configurations is empty, so it registers none.
async fn init(bin: &Path, cluster: &crate::Cluster, crds_dir: &Path, dir: &Path) -> Result<()> {
    let hooks = dir.join("webhookconfigurations");
    std::fs::create_dir_all(&hooks)?;
    let log = dir.join("crossplane-init.log");
    let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(bin);
    cmd.args(["core", "init"])
        .arg(format!("--cr-ds-path={}", crds_dir.display()))
        .arg(format!("--webhook-configurations-path={}", hooks.display()))
        .arg(format!("--tlsca-secret-name={CA_SECRET}"))
        .arg(format!("--tls-server-secret-name={SERVER_SECRET}"))
        .arg(format!("--tls-client-secret-name={CLIENT_SECRET}"))
        .arg("--webhook-service-name=crossplane-webhooks")
        .arg(format!("--webhook-service-namespace={NAMESPACE}"))
        .arg("--webhook-service-port=9443")
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("POD_NAMESPACE", NAMESPACE)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    let status =
        tokio::task::spawn_blocking(move || cmd.status()).await?.context("running crossplane core init")?;
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("crossplane core init failed ({status}):\n{text}");
    }
    Ok(())
}

/// `tls.crt`, `tls.key` and `ca.crt` of one of init's Secrets into `to`: `core start` reads
/// its certificates from files.
async fn write_certs(secrets: &Api<Secret>, name: &str, to: &Path) -> Result<()> {
    let s = secrets.get(name).await.with_context(|| format!("reading Secret {NAMESPACE}/{name}"))?;
    std::fs::create_dir_all(to)?;
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        let bytes = crate::secret_bytes(&s, key).with_context(|| format!("Secret {name} has no {key}"))?;
        std::fs::write(to.join(key), bytes)?;
    }
    Ok(())
}

/// `Ok(Err(why))`: Crossplane exited because a port was taken meanwhile (try again).
async fn start_once(
    bin: &Path,
    cluster: &crate::Cluster,
    dir: &Path,
    server_dir: &Path,
    client_dir: &Path,
    extra: &[&str],
) -> Result<std::result::Result<(Child, PathBuf, String), String>> {
    let (metrics, health, webhook) = (crate::free_port()?, crate::free_port()?, crate::free_port()?);
    // The package cache must exist: Crossplane tees each pulled package.yaml into it while it
    // parses it, and a missing directory fails the parse ("read/write on closed pipe").
    for cache in ["xpkg", "xfn"] {
        std::fs::create_dir_all(dir.join(cache))?;
    }
    let log = dir.join("crossplane.log");
    let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = Command::new(bin)
        .args(["core", "start", "--enable-webhooks=false"])
        .arg(format!("--metrics-port={metrics}"))
        .arg(format!("--health-probe-port={health}"))
        .arg(format!("--webhook-port={webhook}"))
        .arg(format!("--xpkg-cache-dir={}", dir.join("xpkg").display()))
        .arg(format!("--xfn-cache-dir={}", dir.join("xfn").display()))
        .arg(format!("--tls-server-secret-name={SERVER_SECRET}"))
        .arg(format!("--tls-client-secret-name={CLIENT_SECRET}"))
        .arg(format!("--tls-server-certs-dir={}", server_dir.display()))
        .arg(format!("--tls-client-certs-dir={}", client_dir.display()))
        .args(extra)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("POD_NAMESPACE", NAMESPACE)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let addr = format!("127.0.0.1:{health}");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("address already in use") {
                return Ok(Err(format!("a port was taken ({status})")));
            }
            bail!("crossplane exited ({status}) before it was ready:\n{text}");
        }
        if matches!(crate::http_get(&addr, "/readyz").await, Ok((200, _))) {
            return Ok(Ok((child, log, addr)));
        }
        if started.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("crossplane was not ready within {START_TIMEOUT:?}:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Crossplane's CRDs as its manifests name them.
fn crd_manifests(crds_dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(crds_dir).with_context(|| format!("reading {}", crds_dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path)?;
            out.push(serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?);
        }
    }
    Ok(out)
}

/// Deletes Crossplane's CRDs (and with them every object of their kinds) and waits until they
/// are gone. Crossplane is stopped, so nothing would remove the finalizers its controllers put
/// on their objects (an XRD a failed test left): they are removed first. The CRDs Crossplane
/// rendered for such an XRD are owned by it and go with it (garbage collection).
async fn uninstall_crds(client: &Client, crds_dir: &Path) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for manifest in crd_manifests(crds_dir)? {
        let name = manifest.metadata.name.clone().unwrap_or_default();
        let Some(crd) = crds.get_opt(&name).await? else { continue };
        let Some(storage) = crd.spec.versions.iter().find(|v| v.storage) else { continue };
        let gvk = GroupVersionKind::gvk(&crd.spec.group, &storage.name, &crd.spec.names.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for obj in all.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
            if obj.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()) {
                continue;
            }
            let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                None => Api::all_with(client.clone(), &ar),
            };
            let patch = serde_json::json!({"metadata": {"finalizers": null}});
            let obj_name = obj.metadata.name.clone().unwrap_or_default();
            let _ = api.patch(&obj_name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        }
        match crds.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting CRD {name}")),
        }
        names.push(name);
    }
    // The apiserver's CRD finalizer gives up on a CRD while its storage is (re)initializing
    // ("storage is (re)initializing") and retries with an exponential back-off that reached
    // minutes when first measured; any update of the CRD enqueues it again at once.
    let started = Instant::now();
    let mut nudge = 0u32;
    loop {
        let mut left = Vec::new();
        for name in &names {
            if crds.get_opt(name).await?.is_some() {
                left.push(name);
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() > UNINSTALL_TIMEOUT {
            bail!("Crossplane's CRDs were not deleted within {UNINSTALL_TIMEOUT:?}: {left:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        nudge += 1;
        if nudge.is_multiple_of(5) {
            let patch = serde_json::json!({"metadata": {"annotations": {"dco.rs/tests-uninstall": nudge.to_string()}}});
            for name in left {
                let _ = crds.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_pins_the_module_whose_crds_init_applies() {
        let go_mod =
            std::fs::read_to_string(crate::repo_root().join("hack/testenv-go/tools/crossplane/go.mod"))
                .expect("the tool's go.mod");
        assert!(go_mod.lines().any(|l| l.trim().starts_with(&format!("{MODULE} v2."))), "{go_mod}");
        assert!(go_mod.lines().any(|l| l.trim() == format!("tool {MODULE}/cmd/crossplane")), "{go_mod}");
    }
}
