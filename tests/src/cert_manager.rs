//! The real cert-manager controller on the local cluster: the controllers of
//! `hack/testenv-go/tools/cert-manager` (cert-manager's own module, built by
//! `hack/testenv tool cert-manager`), run as a local process against the cluster's
//! kubeconfig, with cert-manager's CRDs from the same module (`deploy/crds`) applied first.
//! No webhook, cainjector or leader election: a SelfSigned → CA issuer chain needs none.
//!
//! ```no_run
//! # async fn t(env: &dco_tests::TestEnv) -> anyhow::Result<()> {
//! dco_tests::cert_manager::install_crds(&env.client).await?;
//! let cm = dco_tests::cert_manager::CertManager::start(env, &env.ns)?; // killed when dropped
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};

use crate::{Manager, TestEnv, repo_root, testenv_tool, wait_crd_established};

/// cert-manager's module, as the tool's go.mod requires it.
const MODULE: &str = "github.com/cert-manager/cert-manager";
/// The CRDs the controllers of the tool watch (no ACME: no Orders or Challenges).
const CRDS: [&str; 4] = [
    "cert-manager.io_certificaterequests.yaml",
    "cert-manager.io_certificates.yaml",
    "cert-manager.io_clusterissuers.yaml",
    "cert-manager.io_issuers.yaml",
];
const MANAGER: Manager = Manager("dco-tests-cert-manager");

/// `cert-manager.io/v1` `kind` (`plural`), for dynamic objects.
pub fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "cert-manager.io".into(),
        version: "v1".into(),
        api_version: "cert-manager.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Namespaced cert-manager objects of `kind`.
pub fn api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &resource(kind, plural))
}

/// The issuers of a CA chain: SelfSigned `{prefix}selfsigned` issues the CA Certificate
/// `{prefix}root` (its key pair in the Secret `{prefix}root` of `ns`), and the CA issuer
/// `{prefix}ca` signs every leaf with it, so leaves verify against one CA across renewals.
pub struct CaChain {
    /// The CA issuer's name.
    pub issuer: String,
    /// The root Certificate's Secret, in `ns`.
    pub root_secret: String,
}

/// Applies a [`CaChain`] of `kind` (`Issuer` in `ns`, or `ClusterIssuer`, whose CA Secret must
/// then be in cert-manager's cluster resource namespace, `ns` here). Nothing is issued until
/// cert-manager runs; the caller waits for what it needs.
pub async fn apply_ca_chain(client: &Client, ns: &str, kind: &str, prefix: &str) -> Result<CaChain> {
    let plural = match kind {
        "Issuer" => "issuers",
        "ClusterIssuer" => "clusterissuers",
        other => bail!("an issuer kind is Issuer or ClusterIssuer, not {other}"),
    };
    let issuers: Api<DynamicObject> = if kind == "Issuer" {
        api(client, ns, kind, plural)
    } else {
        Api::all_with(client.clone(), &resource(kind, plural))
    };
    let certificates = api(client, ns, "Certificate", "certificates");
    let (selfsigned, issuer, root) =
        (format!("{prefix}selfsigned"), format!("{prefix}ca"), format!("{prefix}root"));
    let issuer_obj = |name: &str, spec: serde_json::Value| serde_json::json!({"apiVersion": "cert-manager.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec});
    MANAGER
        .apply(&issuers, &selfsigned, issuer_obj(&selfsigned, serde_json::json!({"selfSigned": {}})))
        .await?;
    let ca = serde_json::json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": root},
        "spec": {"isCA": true, "commonName": format!("dco-tests {prefix}root {ns}"), "secretName": root,
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"name": selfsigned, "kind": kind, "group": "cert-manager.io"}}});
    MANAGER.apply(&certificates, &root, ca).await?;
    MANAGER
        .apply(&issuers, &issuer, issuer_obj(&issuer, serde_json::json!({"ca": {"secretName": root}})))
        .await?;
    Ok(CaChain { issuer, root_secret: root })
}

/// The directory of cert-manager's module in the Go module cache (downloaded when missing),
/// at the version the tool's go.mod requires.
fn module_dir() -> Result<PathBuf> {
    let tool = repo_root().join("hack/testenv-go/tools/cert-manager");
    let out = Command::new("go")
        .args(["list", "-m", "-f", "{{.Dir}}", MODULE])
        .env("GOFLAGS", "-mod=readonly")
        .current_dir(&tool)
        .output()
        .context("running go list (cert-manager's CRDs come from its module)")?;
    if !out.status.success() {
        bail!("go list -m {MODULE} in {}: {}", tool.display(), String::from_utf8_lossy(&out.stderr));
    }
    let mut dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !dir.join("deploy/crds").is_dir() {
        // Listed but not extracted yet: fetch it.
        let dl = Command::new("go")
            .args(["mod", "download", "-json", MODULE])
            .current_dir(&tool)
            .output()
            .context("running go mod download")?;
        let info: serde_json::Value = serde_json::from_slice(&dl.stdout).unwrap_or_default();
        dir = PathBuf::from(info["Dir"].as_str().unwrap_or_default());
    }
    if !dir.join("deploy/crds").is_dir() {
        bail!("{} has no deploy/crds: is {MODULE} in the Go module cache?", dir.display());
    }
    Ok(dir)
}

/// Applies cert-manager's CRDs (server-side: the issuer CRDs are over 300 KB, past what a
/// client-side apply's annotation holds) and waits until each is Established.
pub async fn install_crds(client: &Client) -> Result<()> {
    let dir = tokio::task::spawn_blocking(module_dir).await??.join("deploy/crds");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in CRDS {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let crd: serde_json::Value =
            serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
        MANAGER.apply(&crds, &name, crd).await?;
        wait_crd_established(&crds, &name, Duration::from_secs(120)).await?;
    }
    Ok(())
}

/// A running cert-manager controller; killed when dropped.
pub struct CertManager {
    child: Child,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
}

impl Drop for CertManager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CertManager {
    /// Builds (or takes from the cache) the tool and starts it against `env`'s cluster;
    /// ClusterIssuers read their Secrets in `cluster_resource_namespace`.
    pub fn start(env: &TestEnv, cluster_resource_namespace: &str) -> Result<CertManager> {
        let bin = testenv_tool("cert-manager")?;
        let log = env.cluster.dir.join("logs").join(format!("cert-manager_{}.log", env.ns));
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(&bin)
            .arg(format!("--kubeconfig={}", env.cluster.kubeconfig.display()))
            .arg(format!("--cluster-resource-namespace={cluster_resource_namespace}"))
            .args(["--leader-elect=false", "-v=2"])
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        eprintln!("cert-manager log: {}", log.display());
        Ok(CertManager { child, log })
    }

    /// Whether the process still runs (it exits on a fatal error: see its log).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// The DER of every certificate in `pem`.
pub fn ders(pem: &[u8]) -> Result<Vec<Vec<u8>>> {
    rustls_pemfile::certs(&mut &pem[..]).map(|c| Ok(c?.to_vec())).collect()
}

/// The leaf a TLS server at `addr` serves for `host`, verified against `ca_pem` as the
/// apiserver verifies a webhook with its `caBundle`.
pub async fn served_leaf(addr: &str, host: &str, ca_pem: &[u8]) -> Result<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut &ca_pem[..]) {
        roots.add(c?)?;
    }
    let cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let tcp = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .with_context(|| format!("connecting to {addr} timed out"))??;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())?;
    let tls = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)).connect(name, tcp),
    )
    .await
    .with_context(|| format!("TLS handshake with {addr} timed out"))??;
    let (_, conn) = tls.get_ref();
    let leaf = conn.peer_certificates().and_then(|c| c.first()).context("no peer certificate")?;
    Ok(leaf.to_vec())
}

/// One DER TLV: (tag, contents, what follows).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        let (bytes, rest) = (rest.get(..n)?, rest.get(n..)?);
        (bytes.iter().fold(0usize, |a, &x| (a << 8) | usize::from(x)), rest)
    };
    Some((tag, rest.get(..len)?, rest.get(len..)?))
}

/// A certificate's serial number (hex), read from its DER: Certificate → TBSCertificate →
/// (optional `[0]` version) → serialNumber.
pub fn serial(der: &[u8]) -> Option<String> {
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let (tag, first, rest) = tlv(tbs)?;
    let (tag, serial) = if tag == 0xa0 {
        let (t, s, _) = tlv(rest)?;
        (t, s)
    } else {
        (tag, first)
    };
    (tag == 0x02).then(|| serial.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serial_of_a_generated_certificate_is_read_from_its_der() {
        let mut params = rcgen::CertificateParams::new(vec!["a.example".to_string()]).unwrap();
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x01, 0x23, 0xab]));
        let cert = params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap();
        assert_eq!(serial(cert.der()).as_deref(), Some("0123ab"));
        assert_eq!(serial(&[0x30, 0x01]), None);
    }
}
