//! The self-managed serving certificate of a webhook server (`docs/operations.md`, for
//! clusters without cert-manager): a long-lived CA whose key stays in its own Secret, and a leaf for
//! `<svc>.<ns>.svc` signed by it, stored as `tls.crt`/`tls.key`/`ca.crt`.
//!
//! Rotation keeps the apiserver able to verify at every moment: a new leaf is signed by the
//! same CA (the targets' `caBundle` does not change), and a new CA is introduced while the old
//! one is still trusted (`ca.crt` carries both until the old one expires).
//!
//! Everything here is pure (time comes in as an argument) so every branch is tested.

use std::collections::BTreeMap;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};
use time::OffsetDateTime;
use x509_parser::prelude::{GeneralName, ParsedExtension, X509Certificate};

pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
/// The CA being replaced, still trusted until it expires.
pub const PREVIOUS_CA_CRT: &str = "previous-ca.crt";

const DAY: i64 = 86_400;

/// How long certificates live and when they are replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub ca_days: i64,
    pub ca_renew_before_days: i64,
    pub leaf_days: i64,
    pub leaf_renew_before_days: i64,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes { ca_days: 3650, ca_renew_before_days: 365, leaf_days: 365, leaf_renew_before_days: 30 }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating the serving certificate for {host}: {source}")]
    Generate { host: String, source: rcgen::Error },
    #[error("the validity period does not fit a timestamp: {0}")]
    Time(String),
}

/// The Secrets' data as the cluster holds them now (empty maps when missing).
#[derive(Clone, Debug, Default)]
pub struct Current<'a> {
    pub ca: Option<&'a BTreeMap<String, Vec<u8>>>,
    pub tls: Option<&'a BTreeMap<String, Vec<u8>>>,
}

/// What to write, and what is true afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// New content for the CA Secret, when it must change.
    pub write_ca: Option<BTreeMap<String, Vec<u8>>>,
    /// New content for the serving Secret, when it must change.
    pub write_tls: Option<BTreeMap<String, Vec<u8>>>,
    /// PEM bundle the apiserver must trust (the targets' `caBundle`).
    pub ca_bundle: String,
    /// Unix time the leaf expires.
    pub leaf_not_after: i64,
    /// Why something is rewritten, for the Event.
    pub reasons: Vec<String>,
}

struct Parsed {
    not_after: i64,
    dns_names: Vec<String>,
    der: Vec<u8>,
}

fn parse(pem: &[u8]) -> Option<Parsed> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = p.parse_x509().ok()?;
    let dns_names = dns_names(&cert);
    Some(Parsed { not_after: cert.validity().not_after.timestamp(), dns_names, der: p.contents.clone() })
}

fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for ext in cert.extensions() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
            for n in &san.general_names {
                if let GeneralName::DNSName(d) = n {
                    out.push((*d).to_string());
                }
            }
        }
    }
    out
}

/// Whether `leaf_der` was signed by `ca_der`'s key.
fn signed_by(leaf_der: &[u8], ca_der: &[u8]) -> bool {
    let (Ok((_, leaf)), Ok((_, ca))) =
        (x509_parser::parse_x509_certificate(leaf_der), x509_parser::parse_x509_certificate(ca_der))
    else {
        return false;
    };
    leaf.verify_signature(Some(ca.public_key())).is_ok()
}

/// Whether `key_pem` is the private key of the certificate `cert_der`.
fn key_matches(key_pem: &[u8], cert_der: &[u8]) -> bool {
    let Ok(key) =
        std::str::from_utf8(key_pem).map_err(|_| ()).and_then(|k| KeyPair::from_pem(k).map_err(|_| ()))
    else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert_der) else { return false };
    cert.public_key().subject_public_key.data.as_ref() == key.public_key_raw()
}

fn at(unix: i64) -> Result<OffsetDateTime, CertError> {
    OffsetDateTime::from_unix_timestamp(unix).map_err(|e| CertError::Time(e.to_string()))
}

fn new_ca(server: &str, now: i64, life: &Lifetimes) -> Result<(String, String), CertError> {
    let err = |source| CertError::Generate { host: format!("the CA of server {server}"), source };
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("dco webhook CA for {server}"));
    dn.push(DnType::OrganizationName, "dco");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.not_before = at(now - 300)?;
    params.not_after = at(now + life.ca_days * DAY)?;
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn new_leaf(
    host: &str,
    ca_cert_pem: &str,
    ca_key_pem: &str,
    now: i64,
    life: &Lifetimes,
) -> Result<(String, String), CertError> {
    let err = |source| CertError::Generate { host: host.to_string(), source };
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(err)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(err)?;
    let key = KeyPair::generate().map_err(err)?;
    // The short name and the namespaced one too: some clients dial those.
    let mut names = vec![host.to_string()];
    let mut parts = host.split('.');
    if let (Some(svc), Some(ns)) = (parts.next(), parts.next()) {
        names.push(format!("{svc}.{ns}"));
        names.push(format!("{host}.cluster.local"));
    }
    let mut params = CertificateParams::new(names).map_err(err)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, host);
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = at(now - 300)?;
    params.not_after = at(now + life.leaf_days * DAY)?;
    let cert = params.signed_by(&key, &issuer).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn text(data: Option<&BTreeMap<String, Vec<u8>>>, key: &str) -> Option<String> {
    data?.get(key).and_then(|v| String::from_utf8(v.clone()).ok()).filter(|s| !s.trim().is_empty())
}

/// The CA certificate (PEM) in the serving Secret's `ca.crt` bundle that signed its
/// `tls.crt`, when both are still valid at `now`.
fn signer_of_served_leaf(tls: Option<&BTreeMap<String, Vec<u8>>>, now: i64) -> Option<String> {
    let leaf = parse(tls?.get(TLS_CRT)?).filter(|l| l.not_after > now)?;
    let bundle = tls?.get(CA_CRT)?;
    x509_parser::pem::Pem::iter_from_buffer(bundle).filter_map(Result::ok).find_map(|pem| {
        let ca = pem.parse_x509().ok()?;
        let live = ca.validity().not_after.timestamp() > now;
        (live && signed_by(&leaf.der, &pem.contents)).then(|| {
            let b64 = base64_lines(&pem.contents);
            format!("-----BEGIN CERTIFICATE-----\n{b64}-----END CERTIFICATE-----\n")
        })
    })
}

/// DER as the base64 body of a PEM block, 64 characters a line.
fn base64_lines(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 1);
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Decide and produce what the two Secrets must hold at `now` for `host`.
pub fn ensure(
    server: &str,
    host: &str,
    current: Current<'_>,
    now: i64,
    life: &Lifetimes,
) -> Result<Outcome, CertError> {
    let mut reasons = Vec::new();

    // 1. The CA: keep it while it is valid for long enough, else make a new one and keep
    //    trusting the old one while it lives.
    let ca_cert = text(current.ca, CA_CRT);
    let ca_key = text(current.ca, CA_KEY);
    let parsed_ca = ca_cert.as_deref().and_then(|c| parse(c.as_bytes()));
    let ca_usable = match (&parsed_ca, &ca_key) {
        (Some(p), Some(k)) => key_matches(k.as_bytes(), &p.der),
        _ => false,
    };
    let ca_fresh = parsed_ca.as_ref().is_some_and(|p| p.not_after - now > life.ca_renew_before_days * DAY);
    let previous = text(current.ca, PREVIOUS_CA_CRT)
        .filter(|pem| parse(pem.as_bytes()).is_some_and(|p| p.not_after > now));
    let (ca_cert, ca_key, previous, write_ca) = match (ca_cert, ca_key) {
        (Some(c), Some(k)) if ca_usable && ca_fresh => {
            let prev_changed = previous != text(current.ca, PREVIOUS_CA_CRT);
            (c, k, previous, prev_changed)
        }
        (old_cert, _) => {
            reasons.push(if parsed_ca.is_none() {
                "created a CA".to_string()
            } else if !ca_usable {
                "the CA's key does not match its certificate: replaced the CA".to_string()
            } else {
                "the CA expires within the renewal window: rotated the CA".to_string()
            });
            // Still trusted until it expires, so leaves it signed keep verifying meanwhile.
            // When the CA Secret lost it (deleted, or a key that no longer matches), the CA
            // that signed the leaf the replicas serve now is still in the serving Secret's
            // bundle: keep trusting that one, or every replica fails the apiserver's TLS
            // check until it reloads the new leaf (docs/operations.md, "Certificates").
            let keep_old = old_cert
                .filter(|_| ca_usable && parsed_ca.as_ref().is_some_and(|p| p.not_after > now))
                .or_else(|| signer_of_served_leaf(current.tls, now));
            let (c, k) = new_ca(server, now, life)?;
            (c, k, keep_old, true)
        }
    };
    let ca_der = parse(ca_cert.as_bytes()).map(|p| p.der).unwrap_or_default();
    let mut ca_data = BTreeMap::from([
        (CA_CRT.to_string(), ca_cert.clone().into_bytes()),
        (CA_KEY.to_string(), ca_key.clone().into_bytes()),
    ]);
    if let Some(p) = &previous {
        ca_data.insert(PREVIOUS_CA_CRT.to_string(), p.clone().into_bytes());
    }
    let ca_bundle = match &previous {
        Some(p) => format!("{}\n{}", ca_cert.trim_end(), p.trim_end()) + "\n",
        None => ca_cert.clone(),
    };

    // 2. The leaf: keep it while it covers the host, is signed by the current CA (or by the
    //    previous one, still in the bundle), matches its key and lives long enough. A leaf of
    //    the previous CA is kept until its own renewal: by then the new CA has been in every
    //    caBundle for a while, whereas a new leaf issued at once could be served before the
    //    apiserver trusts the CA that signed it.
    let previous_der: Vec<Vec<u8>> =
        previous.iter().filter_map(|p| parse(p.as_bytes())).map(|p| p.der).collect();
    let leaf_cert = text(current.tls, TLS_CRT);
    let leaf_key = text(current.tls, TLS_KEY);
    let parsed_leaf = leaf_cert.as_deref().and_then(|c| parse(c.as_bytes()));
    let leaf_problem = match (&parsed_leaf, &leaf_key) {
        (None, _) | (_, None) => Some("created the serving certificate".to_string()),
        (Some(p), Some(k)) => {
            if !p.dns_names.iter().any(|n| n == host) {
                Some(format!("the serving certificate does not cover {host}: reissued"))
            } else if !signed_by(&p.der, &ca_der) && !previous_der.iter().any(|d| signed_by(&p.der, d)) {
                Some("the serving certificate is not signed by the current CA: reissued".to_string())
            } else if !key_matches(k.as_bytes(), &p.der) {
                Some("tls.key does not match tls.crt: reissued".to_string())
            } else if p.not_after - now <= life.leaf_renew_before_days * DAY {
                Some("the serving certificate expires within the renewal window: renewed".to_string())
            } else {
                None
            }
        }
    };
    let (leaf_cert, leaf_key) = match (leaf_problem, leaf_cert, leaf_key) {
        (None, Some(c), Some(k)) => (c, k),
        (problem, _, _) => {
            reasons.extend(problem);
            new_leaf(host, &ca_cert, &ca_key, now, life)?
        }
    };
    let leaf_not_after = parse(leaf_cert.as_bytes()).map_or(now, |p| p.not_after);
    let tls_data = BTreeMap::from([
        (TLS_CRT.to_string(), leaf_cert.into_bytes()),
        (TLS_KEY.to_string(), leaf_key.into_bytes()),
        (CA_CRT.to_string(), ca_bundle.clone().into_bytes()),
    ]);
    let write_tls = (current.tls != Some(&tls_data)).then_some(tls_data);
    if write_tls.is_some() && reasons.is_empty() {
        reasons.push("the serving Secret's ca.crt was out of date: rewritten".to_string());
    }
    Ok(Outcome { write_ca: write_ca.then_some(ca_data), write_tls, ca_bundle, leaf_not_after, reasons })
}

/// The PEM bundle the apiserver must trust to call a server: the `ca.crt` of its serving
/// Secret, and `kept_ca`, the self-managed CA still kept while cert-manager issues
/// (server/cert_manager.rs `keep_self_managed_ca`), when the bundle lacks it. `None` while
/// the serving Secret holds no certificate.
pub fn ca_bundle(serving_ca: Option<&[u8]>, kept_ca: Option<&[u8]>) -> Option<String> {
    let pem = |b: &[u8]| String::from_utf8(b.to_vec()).ok().filter(|s| s.contains("BEGIN CERTIFICATE"));
    let mut bundle = pem(serving_ca?)?;
    if let Some(ca) = kept_ca.and_then(pem)
        && !bundle.contains(ca.trim())
    {
        bundle = format!("{}\n{}", bundle.trim_end(), ca.trim_end()) + "\n";
    }
    Some(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "dco-webhook-a.dco-system.svc";
    const NOW: i64 = 1_800_000_000;

    fn first() -> Outcome {
        ensure("a", HOST, Current::default(), NOW, &Lifetimes::default()).unwrap()
    }

    #[test]
    fn creates_a_ca_and_a_leaf_for_the_service_host_signed_by_it() {
        let o = first();
        let ca = o.write_ca.as_ref().unwrap();
        let tls = o.write_tls.as_ref().unwrap();
        let leaf = parse(&tls[TLS_CRT]).unwrap();
        assert!(leaf.dns_names.contains(&HOST.to_string()));
        let ca_der = parse(&ca[CA_CRT]).unwrap().der;
        assert!(signed_by(&leaf.der, &ca_der));
        assert!(key_matches(&tls[TLS_KEY], &leaf.der));
        assert_eq!(tls[CA_CRT], ca[CA_CRT]);
        assert_eq!(o.ca_bundle.as_bytes(), ca[CA_CRT].as_slice());
        assert_eq!(o.leaf_not_after, NOW + 365 * DAY);
    }

    #[test]
    fn nothing_to_write_when_everything_is_valid() {
        let o = first();
        let (ca, tls) = (o.write_ca.unwrap(), o.write_tls.unwrap());
        let again =
            ensure("a", HOST, Current { ca: Some(&ca), tls: Some(&tls) }, NOW + DAY, &Lifetimes::default())
                .unwrap();
        assert_eq!(again.write_ca, None);
        assert_eq!(again.write_tls, None);
        assert!(again.reasons.is_empty(), "{:?}", again.reasons);
    }

    #[test]
    fn the_leaf_is_renewed_before_expiry_by_the_same_ca() {
        let o = first();
        let (ca, tls) = (o.write_ca.unwrap(), o.write_tls.unwrap());
        let later = NOW + 340 * DAY;
        let r = ensure("a", HOST, Current { ca: Some(&ca), tls: Some(&tls) }, later, &Lifetimes::default())
            .unwrap();
        assert_eq!(r.write_ca, None, "the CA stays, so targets' caBundle does not change");
        let new_tls = r.write_tls.unwrap();
        assert_ne!(new_tls[TLS_CRT], tls[TLS_CRT]);
        assert_eq!(r.ca_bundle, o.ca_bundle);
        assert!(r.reasons[0].contains("renewed"));
    }

    #[test]
    fn a_changed_host_or_a_foreign_leaf_is_reissued() {
        let o = first();
        let (ca, tls) = (o.write_ca.unwrap(), o.write_tls.unwrap());
        let r = ensure(
            "a",
            "dco-webhook-a.other.svc",
            Current { ca: Some(&ca), tls: Some(&tls) },
            NOW,
            &Lifetimes::default(),
        )
        .unwrap();
        assert!(r.reasons[0].contains("does not cover"));
        let other = ensure("b", HOST, Current::default(), NOW, &Lifetimes::default()).unwrap();
        let r = ensure(
            "a",
            HOST,
            Current { ca: Some(&ca), tls: other.write_tls.as_ref() },
            NOW,
            &Lifetimes::default(),
        )
        .unwrap();
        assert!(r.reasons[0].contains("not signed by the current CA"), "{:?}", r.reasons);
    }

    #[test]
    fn ca_rotation_keeps_trusting_the_old_ca_until_it_expires() {
        let o = first();
        let (ca, tls) = (o.write_ca.unwrap(), o.write_tls.unwrap());
        let late = NOW + 3400 * DAY;
        let r = ensure("a", HOST, Current { ca: Some(&ca), tls: Some(&tls) }, late, &Lifetimes::default())
            .unwrap();
        let new_ca = r.write_ca.unwrap();
        assert_ne!(new_ca[CA_CRT], ca[CA_CRT]);
        assert_eq!(new_ca[PREVIOUS_CA_CRT], ca[CA_CRT]);
        assert!(r.ca_bundle.contains(std::str::from_utf8(&ca[CA_CRT]).unwrap().trim_end()));
        assert!(r.ca_bundle.contains(std::str::from_utf8(&new_ca[CA_CRT]).unwrap().trim_end()));
        // Once the old CA has expired it leaves the bundle.
        let new_tls = r.write_tls.unwrap();
        let after = NOW + 3651 * DAY;
        let r2 = ensure(
            "a",
            HOST,
            Current { ca: Some(&new_ca), tls: Some(&new_tls) },
            after,
            &Lifetimes::default(),
        )
        .unwrap();
        assert!(!r2.write_ca.unwrap().contains_key(PREVIOUS_CA_CRT));
        assert_eq!(r2.ca_bundle.as_bytes(), new_ca[CA_CRT].as_slice());
    }

    #[test]
    fn a_deleted_ca_secret_keeps_the_ca_of_the_served_leaf_trusted() {
        let o = first();
        let (ca, tls) = (o.write_ca.unwrap(), o.write_tls.unwrap());
        let old_ca = std::str::from_utf8(&ca[CA_CRT]).unwrap().trim_end().to_string();
        let r = ensure("a", HOST, Current { ca: None, tls: Some(&tls) }, NOW + DAY, &Lifetimes::default())
            .unwrap();
        assert_eq!(r.reasons[0], "created a CA");
        let new_ca = r.write_ca.unwrap();
        assert_ne!(new_ca[CA_CRT], ca[CA_CRT]);
        // The replicas still serve the old leaf until they reload: its CA stays in the bundle.
        assert_eq!(std::str::from_utf8(&new_ca[PREVIOUS_CA_CRT]).unwrap().trim_end(), old_ca);
        assert!(r.ca_bundle.contains(&old_ca), "{}", r.ca_bundle);
        assert!(r.ca_bundle.contains(std::str::from_utf8(&new_ca[CA_CRT]).unwrap().trim_end()));
        // The served leaf stays (the apiserver may not trust the new CA yet); only the
        // serving Secret's ca.crt changes, to the bundle the targets get.
        let new_tls = r.write_tls.unwrap();
        assert_eq!(new_tls[TLS_CRT], tls[TLS_CRT]);
        assert_eq!(new_tls[CA_CRT], r.ca_bundle.as_bytes());
        // The next pass, with both Secrets as written, changes nothing.
        let same = Current { ca: Some(&new_ca), tls: Some(&new_tls) };
        let r2 = ensure("a", HOST, same.clone(), NOW + DAY, &Lifetimes::default()).unwrap();
        assert_eq!((r2.write_ca, r2.write_tls, r2.ca_bundle.clone()), (None, None, r.ca_bundle.clone()));
        // At its renewal the leaf comes from the new CA, the old one still trusted.
        let renewal = ensure("a", HOST, same, NOW + 340 * DAY, &Lifetimes::default()).unwrap();
        let leaf = parse(&renewal.write_tls.unwrap()[TLS_CRT]).unwrap();
        assert!(signed_by(&leaf.der, &parse(&new_ca[CA_CRT]).unwrap().der));
        assert!(renewal.ca_bundle.contains(&old_ca));
        // Both Secrets deleted: nothing is left to trust but the new CA.
        let r3 = ensure("a", HOST, Current::default(), NOW + DAY, &Lifetimes::default()).unwrap();
        assert!(!r3.ca_bundle.contains(&old_ca));
        assert!(!r3.write_ca.unwrap().contains_key(PREVIOUS_CA_CRT));
    }

    #[test]
    fn garbage_in_the_secrets_is_replaced_not_a_panic() {
        let junk = BTreeMap::from([
            (CA_CRT.to_string(), b"not a cert".to_vec()),
            (CA_KEY.to_string(), vec![0xff, 0x00]),
            (TLS_CRT.to_string(), b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec()),
        ]);
        let r = ensure("a", HOST, Current { ca: Some(&junk), tls: Some(&junk) }, NOW, &Lifetimes::default())
            .unwrap();
        assert!(r.write_ca.is_some() && r.write_tls.is_some());
    }
}
