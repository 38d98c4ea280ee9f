//! A real Crossplane Configuration package on loopback (docs/testenv.md, "Crossplane"): the
//! package image built here as an OCI image layout, pushed to `crane registry serve` on
//! 127.0.0.1 (go-containerregistry, in crane and in Crossplane, speaks plain HTTP to a
//! loopback registry), and installed with a `pkg.crossplane.io/v1` Configuration, so that
//! Crossplane's package manager creates the package's XRDs and owns them (controller: the
//! ConfigurationRevision).
//!
//! The image follows Crossplane v2.3.0's xpkg rules (crossplane-runtime `pkg/xpkg`: `build.go`,
//! `layers.go`, `client.go` `ExtractPackageYAML`): one layer holding `package.yaml` (a
//! `meta.pkg.crossplane.io/v1` Configuration, then the objects, as YAML documents), annotated
//! `io.crossplane.xpkg: base` in the manifest, and the config's label
//! `io.crossplane.xpkg:<layer digest>: base` as `crossplane xpkg build` writes it.
//!
//! [`Revision::nudge`] makes the package manager write the package's objects again: any change
//! of the ConfigurationRevision enqueues its reconcile, which updates every object it owns
//! with the package's copy (internal/controller/pkg/revision/establisher.go: `Update`, a
//! whole-object PUT, after a dry run of the same); the same reconcile runs for every revision
//! at each `--sync-interval` of Crossplane (default 1 h).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// `pkg.crossplane.io/v1` `Configuration` (cluster-scoped).
pub fn configuration_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("pkg.crossplane.io", "v1", "Configuration"),
        "configurations",
    )
}

/// `pkg.crossplane.io/v1` `ConfigurationRevision` (cluster-scoped).
pub fn revision_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("pkg.crossplane.io", "v1", "ConfigurationRevision"),
        "configurationrevisions",
    )
}

/// `package.yaml` of a Configuration package named `name` holding `objects` (JSON documents
/// are YAML documents).
pub fn package_yaml(name: &str, objects: &[Value]) -> String {
    let meta = json!({"apiVersion": "meta.pkg.crossplane.io/v1", "kind": "Configuration",
        "metadata": {"name": name}, "spec": {}});
    std::iter::once(&meta).chain(objects).map(|o| format!("---\n{o}\n")).collect()
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::hex(&Sha256::digest(bytes)))
}

/// One regular file `name` holding `data` as a tar archive (ustar, mode 0644: `StreamFileMode`).
fn tar_one(name: &str, data: &[u8]) -> Result<Vec<u8>> {
    ensure!(name.len() < 100, "tar member name {name:?} longer than 99 bytes");
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let s = format!("{v:0w$o}\0", w = len - 1);
        h[at..at + len].copy_from_slice(s.as_bytes());
    };
    octal(&mut h, 100, 8, 0o644);
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, data.len() as u64);
    octal(&mut h, 136, 12, 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    Ok(out)
}

/// Writes the package image holding `package_yaml` as an OCI image layout in `dir` (created);
/// returns the manifest's digest.
pub fn write_layout(dir: &Path, package_yaml: &str) -> Result<String> {
    let blobs = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;
    let put = |bytes: &[u8]| -> Result<String> {
        let digest = sha256(bytes);
        std::fs::write(blobs.join(digest.trim_start_matches("sha256:")), bytes)?;
        Ok(digest)
    };
    let tar = tar_one("package.yaml", package_yaml.as_bytes())?;
    let diff_id = sha256(&tar);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar)?;
    let layer = gz.finish()?;
    let layer_digest = put(&layer)?;
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Labels": {format!("io.crossplane.xpkg:{layer_digest}"): "base"}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }))?;
    let config_digest = put(&config)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": config.len(), "digest": config_digest},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "size": layer.len(),
            "digest": layer_digest, "annotations": {"io.crossplane.xpkg": "base"}}],
    }))?;
    let manifest_digest = put(&manifest)?;
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "size": manifest.len(), "digest": manifest_digest}]}))?,
    )?;
    Ok(manifest_digest)
}

/// `crane registry serve` on a free loopback port; killed when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub host: String,
    crane: PathBuf,
    docker_config: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts it (crane from `hack/testenv tool crane`); `dir` holds crane's empty docker
    /// config, so no credential of the machine is read.
    pub fn start(dir: &Path) -> Result<Registry> {
        let crane = crate::testenv_tool("crane")?;
        let docker_config = dir.join("docker-config");
        std::fs::create_dir_all(&docker_config)?;
        let mut child = Command::new(&crane)
            .args(["registry", "serve", "--address", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting crane registry serve")?;
        let mut lines = std::io::BufReader::new(child.stderr.take().context("crane's stderr")?).lines();
        let port = lines
            .by_ref()
            .take(20)
            .map_while(|l| l.ok())
            .find_map(|l| Some(l.split("serving on port ").nth(1)?.trim().to_string()));
        // Keep reading its log: Go dies of SIGPIPE writing to a closed stderr.
        std::thread::spawn(move || lines.for_each(drop));
        let mut registry = Registry { child, host: String::new(), crane, docker_config };
        let port = port.ok_or_else(|| anyhow!("crane registry serve did not say its port"))?;
        registry.host = format!("127.0.0.1:{port}");
        Ok(registry)
    }

    /// Pushes the OCI layout `layout` as `<host>/<repo_tag>`; returns the pushed reference
    /// (`<host>/<repo>@sha256:...`).
    pub fn push(&self, layout: &Path, repo_tag: &str) -> Result<String> {
        let reference = format!("{}/{repo_tag}", self.host);
        let out = Command::new(&self.crane)
            .arg("push")
            .arg(layout)
            .arg(&reference)
            .env("DOCKER_CONFIG", &self.docker_config)
            .output()
            .context("running crane push")?;
        ensure!(out.status.success(), "crane push {reference}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    }
}

/// An installed Configuration and its active revision.
pub struct Revision {
    pub configuration: String,
    pub name: String,
    client: Client,
}

/// Applies a `pkg.crossplane.io/v1` Configuration `name` of `package` (a reference on the
/// loopback registry; dependency resolution skipped: the package has none) as `manager`, and
/// waits until it is Installed and Healthy; returns its active revision.
pub async fn install(
    client: &Client,
    manager: &str,
    name: &str,
    package: &str,
    timeout: Duration,
) -> Result<Revision> {
    let configs: Api<DynamicObject> = Api::all_with(client.clone(), &configuration_resource());
    let obj = json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "Configuration", "metadata": {"name": name},
        "spec": {"package": package, "skipDependencyResolution": true, "packagePullPolicy": "IfNotPresent"}});
    configs
        .patch(name, &PatchParams::apply(manager).force(), &Patch::Apply(&obj))
        .await
        .with_context(|| format!("applying Configuration {name}"))?;
    let revisions: Api<DynamicObject> = Api::all_with(client.clone(), &revision_resource());
    let cond = |o: &DynamicObject, t: &str| {
        o.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    let waited =
        crate::wait_for(&format!("Configuration {name} to be Installed and Healthy"), timeout, || {
            let (configs, revisions) = (configs.clone(), revisions.clone());
            async move {
                let c = configs.get(name).await?;
                if !(cond(&c, "Installed") && cond(&c, "Healthy")) {
                    return Ok(None);
                }
                let Some(rev) = c.data["status"]["currentRevision"].as_str().map(String::from) else {
                    return Ok(None);
                };
                let r = revisions.get(&rev).await?;
                Ok((r.data["spec"]["desiredState"] == "Active" && cond(&r, "RevisionHealthy")).then_some(rev))
            }
        })
        .await;
    let got = match waited {
        Ok(rev) => rev,
        Err(e) => {
            let status = configs.get(name).await.map(|c| c.data["status"].to_string()).unwrap_or_default();
            bail!("{e:#}; Configuration {name}'s status: {status}");
        }
    };
    Ok(Revision { configuration: name.to_string(), name: got, client: client.clone() })
}

impl Revision {
    /// Makes the package manager reconcile this revision now (an annotation `key=value`
    /// changed): it writes every object of the package again, as on each `--sync-interval`.
    pub async fn nudge(&self, key: &str, value: &str) -> Result<()> {
        let revisions: Api<DynamicObject> = Api::all_with(self.client.clone(), &revision_resource());
        revisions
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .with_context(|| format!("annotating ConfigurationRevision {}", self.name))?;
        Ok(())
    }

    /// Deletes the Configuration (its revision and, by garbage collection, the objects the
    /// revision controls go with it) and waits until the revision is gone.
    pub async fn uninstall(self, timeout: Duration) -> Result<()> {
        let configs: Api<DynamicObject> = Api::all_with(self.client.clone(), &configuration_resource());
        match configs.delete(&self.configuration, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => bail!("deleting Configuration {}: {e}", self.configuration),
        }
        let revisions: Api<DynamicObject> = Api::all_with(self.client.clone(), &revision_resource());
        crate::wait_deleted(&revisions, &self.name, timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layer_is_one_ustar_file_with_a_valid_checksum() {
        let t = tar_one("package.yaml", b"abc").unwrap();
        assert_eq!(t.len(), 512 + 512 + 1024);
        assert_eq!(&t[..12], b"package.yaml");
        assert_eq!(&t[257..262], b"ustar");
        assert_eq!(&t[124..136], b"00000000003\0");
        let mut h = t[..512].to_vec();
        let stored = u64::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        h[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, h.iter().map(|b| u64::from(*b)).sum::<u64>());
        assert_eq!(&t[512..515], b"abc");
    }

    #[test]
    fn the_layout_names_the_annotated_layer() {
        let dir = std::env::temp_dir().join(crate::unique_name("xpkg-layout"));
        let digest = write_layout(&dir, &package_yaml("p", &[json!({"kind": "X"})])).unwrap();
        let index: Value = serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        assert_eq!(index["manifests"][0]["digest"], digest);
        let blob =
            |d: &str| std::fs::read(dir.join("blobs/sha256").join(d.trim_start_matches("sha256:"))).unwrap();
        let manifest: Value = serde_json::from_slice(&blob(&digest)).unwrap();
        assert_eq!(manifest["layers"][0]["annotations"]["io.crossplane.xpkg"], "base");
        let layer = manifest["layers"][0]["digest"].as_str().unwrap();
        assert_eq!(sha256(&blob(layer)), layer);
        let config: Value =
            serde_json::from_slice(&blob(manifest["config"]["digest"].as_str().unwrap())).unwrap();
        assert_eq!(config["config"]["Labels"][format!("io.crossplane.xpkg:{layer}")], "base");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
