//! The admission certificate issued by someone else (`--admission-tls-secret`; the chart's
//! `admission.certManager` renders a cert-manager Certificate into that Secret,
//! docs/admission.md "A certificate from cert-manager"): the operator issues nothing, serves
//! the Secret's `tls.crt`/`tls.key` and writes its `ca.crt` as the webhooks' `caBundle`.
//!
//! Why the operator writes the `caBundle`, not cert-manager's CA injector: every registration
//! pass merge-patches the whole `webhooks` list of its configurations (registration.rs),
//! `caBundle` included, so an injected bundle would be overwritten (or, left out of the
//! patch, dropped) within a minute; and the injector is an optional cert-manager component.
//!
//! A renewal is served without a restart: [`watch`] wakes the registration loop on every
//! change of the Secret, and the pass swaps the new key pair into the `CertResolver`. While
//! the Secret is missing or unusable, the replica keeps serving what it loaded last and the
//! `caBundle` stays as it is (a deleted Secret's successor comes from the same issuer).

use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use crate::pki::{CA_CRT, TLS_CRT, TLS_KEY};

/// A certificate file larger than this is not a serving certificate (bounds the parse).
const MAX_PEM: usize = 64 * 1024;

/// What the Secret holds, ready to serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    /// `ca.crt`: the webhooks' `caBundle`.
    pub ca_pem: String,
}

/// The names the leaf covers (its DNS subjectAltNames), or `None` when `pem` is no certificate.
fn leaf_names(pem: &str) -> Option<Vec<String>> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = p.parse_x509().ok()?;
    let mut out = Vec::new();
    for ext in cert.extensions() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
            out.extend(san.general_names.iter().filter_map(|n| match n {
                GeneralName::DNSName(d) => Some((*d).to_string()),
                _ => None,
            }));
        }
    }
    Some(out)
}

/// The key pair and CA of `secret` (`namespace/name`, for the messages) for `host`, or what is
/// wrong with it and the fix.
pub fn read(secret: Option<&Secret>, named: &str, host: &str) -> Result<Issued, String> {
    let issuer = "with the chart, cert-manager issues it from the Certificate of the same name \
        (admission.certManager): `kubectl describe certificate` of it and of its issuer say why not";
    let Some(s) = secret else {
        return Err(format!(
            "Secret {named} (--admission-tls-secret) does not exist yet; {issuer}; until it does, \
             a replica that served before keeps its certificate and a new one is not Ready"
        ));
    };
    let field = |k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty() && b.len() <= MAX_PEM)
            .and_then(|b| String::from_utf8(b.to_vec()).ok())
    };
    let (Some(cert_pem), Some(key_pem)) = (field(TLS_CRT), field(TLS_KEY)) else {
        return Err(format!(
            "Secret {named} has no {TLS_CRT} and {TLS_KEY} (of at most 64 KiB) yet; {issuer}"
        ));
    };
    let Some(ca_pem) = field(CA_CRT) else {
        return Err(format!(
            "Secret {named} has no {CA_CRT}, so the webhooks' caBundle cannot be set (ACME and some \
             external issuers do not return their CA); use a CA issuer whose CA the Secret carries"
        ));
    };
    let names =
        leaf_names(&cert_pem).ok_or_else(|| format!("Secret {named}: {TLS_CRT} is not a PEM certificate"))?;
    if !names.iter().any(|n| n == host) {
        return Err(format!(
            "Secret {named}: the certificate is for {names:?}, not {host} (the admission Service's name the \
             apiserver verifies); add {host} to the Certificate's dnsNames"
        ));
    }
    Ok(Issued { cert_pem, key_pem, ca_pem })
}

/// Wakes `wake` on every change of Secret `name` (and when the watch starts again), until the
/// process ends: a renewal is served within a watch event, not the next 60 s pass. Needs
/// `list` and `watch` of that one Secret (RBAC `resourceNames` with a `metadata.name` field
/// selector).
pub async fn watch(api: Api<Secret>, name: String, wake: Arc<Notify>) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, cfg).default_backoff().boxed();
    while let Some(e) = events.next().await {
        match e {
            Ok(_) => wake.notify_one(),
            Err(e) => tracing::info!(secret = %name, error = %e, "watching the admission Secret; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    const HOST: &str = "dco-operator-admission.dco-system.svc";

    fn leaf(names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn secret(entries: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn the_secret_is_served_only_when_it_has_everything_and_each_lack_names_the_fix() {
        let named = "dco-system/dco-operator-admission-cert-manager";
        let e = read(None, named, HOST).unwrap_err();
        assert!(
            e.contains(named) && e.contains("does not exist") && e.contains("kubectl describe certificate"),
            "{e}"
        );
        let (crt, key) = leaf(&[HOST, "dco-operator-admission.dco-system"]);
        let e = read(Some(&secret(&[("ca.crt", &crt)])), named, HOST).unwrap_err();
        assert!(e.contains("no tls.crt and tls.key"), "{e}");
        let e = read(Some(&secret(&[("tls.crt", &crt), ("tls.key", &key)])), named, HOST).unwrap_err();
        assert!(e.contains("no ca.crt") && e.contains("CA issuer"), "{e}");
        let e = read(Some(&secret(&[("tls.crt", "junk"), ("tls.key", &key), ("ca.crt", &crt)])), named, HOST)
            .unwrap_err();
        assert!(e.contains("not a PEM certificate"), "{e}");
        let (other, other_key) = leaf(&["elsewhere.example"]);
        let e = read(
            Some(&secret(&[("tls.crt", &other), ("tls.key", &other_key), ("ca.crt", &other)])),
            named,
            HOST,
        )
        .unwrap_err();
        assert!(e.contains("add dco-operator-admission.dco-system.svc to the Certificate's dnsNames"), "{e}");
        let ok = read(Some(&secret(&[("tls.crt", &crt), ("tls.key", &key), ("ca.crt", &crt)])), named, HOST)
            .unwrap();
        assert_eq!(ok, Issued { cert_pem: crt.clone(), key_pem: key, ca_pem: crt });
        let huge = "x".repeat(MAX_PEM + 1);
        assert!(
            read(Some(&secret(&[("tls.crt", &huge), ("tls.key", "k"), ("ca.crt", "c")])), named, HOST)
                .is_err()
        );
    }
}
