//! cert-manager issues a server's serving certificate when `spec.certificate.issuerRef` is set
//! (docs/operations.md "Serving certificates"): the operator applies a cert-manager
//! `Certificate` (owned by the server) whose Secret is the serving Secret the webhook Pods
//! mount, instead of the CA and leaf of `pki.rs`. cert-manager writes `tls.crt`, `tls.key`
//! and `ca.crt` into it and renews it; the Pods reload the files (webhook/src/tls.rs), and the
//! config controller keeps the targets' `caBundle` on the Secret's `ca.crt`
//! (`Context::ca_bundle`) — cert-manager's CA injector cannot inject into XRDs.
//!
//! The decisions are pure ([`desired`], [`check_spec`], [`secret_apply`], [`assess`]); the
//! API calls are in [`ensure`] and [`release`].

use std::collections::BTreeMap;
use std::time::Duration;

use dco_api::ConversionWebhookServer;
use dco_api::server::{CERT_MANAGER_GROUP, CertificateSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::names::FIELD_MANAGER;
use crate::names::ServerNames;
use crate::pki::{CA_CRT, TLS_CRT, TLS_KEY};
use crate::server::condition;

pub const GROUP: &str = "cert-manager.io";
pub const API_VERSION: &str = "cert-manager.io/v1";
/// cert-manager marks the Secrets it issued with the Certificate's name.
pub const ANNOTATION_CERTIFICATE_NAME: &str = "cert-manager.io/certificate-name";
/// The annotations cert-manager writes on an issued Secret: removed when the operator takes
/// the Secret back, so nothing claims cert-manager still issues it.
const ANNOTATION_PREFIX: &str = "cert-manager.io/";
/// cert-manager's own default duration (90 days).
pub const DEFAULT_DURATION: &str = "2160h";
/// cert-manager refuses shorter ones (`MinimumCertificateDuration`, `MinimumRenewBefore` in
/// its pkg/apis/certmanager/v1/const.go); its admission webhook is not required here, so the
/// operator checks them itself.
const MIN_DURATION: Duration = Duration::from_secs(3600);
const MIN_RENEW_BEFORE: Duration = Duration::from_secs(300);

/// Look again this soon while the certificate is not issued, or cert-manager is missing.
pub const PENDING_RECHECK: Duration = Duration::from_secs(10);
pub const MISSING_RECHECK: Duration = Duration::from_secs(30);
/// How long after cert-manager's leaf the self-managed CA stays trusted
/// (`Context::ca_bundle`) and its Secret kept: time for every replica to load the new leaf
/// from the Secret (the kubelet's sync of Secret volumes, up to a minute or so, plus the
/// webhook's reload interval), during which a replica may still serve the operator's leaf.
pub const SELF_MANAGED_CA_GRACE: Duration = Duration::from_secs(300);

/// `certificates.cert-manager.io/v1`.
pub fn resource() -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: "v1".to_string(),
        api_version: API_VERSION.to_string(),
        kind: "Certificate".to_string(),
        plural: "certificates".to_string(),
    }
}

/// The Certificate of a server: the name its workload has, in its namespace.
pub fn certificate_name(names: &ServerNames) -> &str {
    &names.workload
}

/// How the certificate stands, for the `CertificateReady` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

/// A Go duration (`time.ParseDuration`, which cert-manager uses for `duration` and
/// `renewBefore`): decimal numbers with units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`, e.g.
/// `2160h`, `1h30m`, `1.5h`.
pub fn go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    let mut secs = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        secs += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(secs).ok()
}

/// The spec's duration and renewBefore as cert-manager will read them, or why it would refuse
/// them (naming the field and the fix).
pub fn check_spec(spec: &CertificateSpec) -> Result<(), String> {
    let field = |name: &str, v: &str| {
        go_duration(v).ok_or_else(|| {
            format!(
                "spec.certificate.{name} {v:?} is not a Go duration; write it like \"2160h\" or \"1h30m\""
            )
        })
    };
    // cert-manager's own group has two issuer kinds; an external issuer's kinds are its own.
    let r = &spec.issuer_ref;
    if r.group() == CERT_MANAGER_GROUP && !matches!(r.kind.as_str(), "Issuer" | "ClusterIssuer") {
        return Err(format!(
            "spec.certificate.issuerRef.kind {:?} is not a kind of {CERT_MANAGER_GROUP} (Issuer or ClusterIssuer); for an external issuer set issuerRef.group to its API group",
            r.kind
        ));
    }
    let duration = field("duration", spec.duration.as_deref().unwrap_or(DEFAULT_DURATION))?;
    if duration < MIN_DURATION {
        return Err(format!(
            "spec.certificate.duration {:?} is shorter than cert-manager's minimum of 1h; raise it",
            spec.duration.as_deref().unwrap_or_default()
        ));
    }
    if let Some(rb) = spec.renew_before.as_deref() {
        let renew_before = field("renewBefore", rb)?;
        if renew_before < MIN_RENEW_BEFORE {
            return Err(format!(
                "spec.certificate.renewBefore {rb:?} is shorter than cert-manager's minimum of 5m; raise it"
            ));
        }
        if renew_before >= duration {
            return Err(format!(
                "spec.certificate.renewBefore {rb:?} is not shorter than the duration ({}); lower it or raise spec.certificate.duration",
                spec.duration.as_deref().unwrap_or(DEFAULT_DURATION)
            ));
        }
    }
    Ok(())
}

/// The names the leaf covers: those of the self-managed leaf (`pki.rs`: the Service host,
/// `<svc>.<ns>` and `<host>.cluster.local`), then the spec's own.
pub fn dns_names(names: &ServerNames, spec: &CertificateSpec) -> Vec<String> {
    let host = names.service_host();
    let mut out = vec![
        host.clone(),
        format!("{}.{}", names.service(), names.namespace),
        format!("{host}.cluster.local"),
    ];
    for n in &spec.dns_names {
        if !n.is_empty() && !out.contains(n) {
            out.push(n.clone());
        }
    }
    out
}

/// The Certificate the operator applies for a server.
pub fn desired(spec: &CertificateSpec, names: &ServerNames, owner: &OwnerReference) -> Value {
    let labels = names.labels();
    let mut cert_spec = json!({
        "secretName": names.tls_secret,
        // The operator's Secret watch is scoped by these labels (runtime/watches.rs `managed()`), and
        // the config controller finds the server of a Secret by them (wake/views.rs `CaView`).
        "secretTemplate": {"labels": labels},
        "dnsNames": dns_names(names, spec),
        "duration": spec.duration.as_deref().unwrap_or(DEFAULT_DURATION),
        // PKCS#8, as the operator's own keys: when spec.certificate is removed, the
        // self-managed path reads this key to keep serving the leaf (pki.rs).
        "privateKey": {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8", "rotationPolicy": "Always"},
        "usages": ["digital signature", "key encipherment", "server auth"],
        "issuerRef": {"name": spec.issuer_ref.name, "kind": spec.issuer_ref.kind, "group": spec.issuer_ref.group()},
    });
    if let Some(rb) = &spec.renew_before {
        cert_spec["renewBefore"] = json!(rb);
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "Certificate",
        "metadata": {
            "name": certificate_name(names),
            "namespace": names.namespace,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": cert_spec,
    })
}

fn annotation<'a>(s: &'a Secret, key: &str) -> Option<&'a str> {
    s.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn data<'a>(s: &'a Secret, key: &str) -> Option<&'a [u8]> {
    s.data.as_ref()?.get(key).map(|b| b.0.as_slice()).filter(|b| !b.is_empty())
}

/// Whether cert-manager issued `secret` for this server's Certificate.
pub fn issued_by_cert_manager(secret: &Secret, names: &ServerNames) -> bool {
    annotation(secret, ANNOTATION_CERTIFICATE_NAME) == Some(certificate_name(names))
}

/// The server's reference on the serving Secret: not the controller (cert-manager's
/// `--enable-certificate-owner-ref` makes the Certificate that), but an owner, so the Secret
/// goes with the server.
pub fn secret_owner(owner: &OwnerReference) -> OwnerReference {
    OwnerReference { controller: Some(false), ..owner.clone() }
}

/// The apply that makes the existing serving Secret the server's in cert-manager's hands
/// (labels, a non-controller owner reference), or `None` when it already is, or does not
/// exist yet (cert-manager creates it from `secretTemplate`, and the operator adds the
/// reference on a later pass). Until cert-manager has issued into it, the apply carries the
/// Secret's current data, so that the operator's field manager letting go of nothing leaves
/// the Pods' files as they are; afterwards cert-manager owns the data too and the apply is
/// metadata only.
pub fn secret_apply(current: Option<&Secret>, names: &ServerNames, owner: &OwnerReference) -> Option<Value> {
    let s = current?;
    let want = secret_owner(owner);
    let refs = s.metadata.owner_references.clone().unwrap_or_default();
    let owner_ok = refs.iter().any(|r| r.uid == want.uid && r.controller != Some(true));
    let labels = s.metadata.labels.clone().unwrap_or_default();
    let labels_ok = names.labels().iter().all(|(k, v)| labels.get(k) == Some(v));
    if owner_ok && labels_ok {
        return None;
    }
    let mut obj = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": names.tls_secret, "namespace": names.namespace, "labels": names.labels(),
            "ownerReferences": [want]},
        "type": s.type_.as_deref().unwrap_or("kubernetes.io/tls"),
    });
    if !issued_by_cert_manager(s, names)
        && let Some(d) = &s.data
    {
        obj["data"] = serde_json::to_value(d).unwrap_or(Value::Null);
    }
    Some(obj)
}

/// The cert-manager condition `type_` of a Certificate: (status, reason, message).
fn cm_condition<'a>(cert: &'a Value, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let c = cert["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)?;
    Some((c["status"].as_str()?, c["reason"].as_str().unwrap_or(""), c["message"].as_str().unwrap_or("")))
}

/// What is true of the serving certificate, from what cert-manager reports (`cert`: the
/// applied Certificate, with its status) and what the serving Secret holds.
pub fn assess(
    spec: &CertificateSpec,
    names: &ServerNames,
    cert: &Value,
    secret: Option<&Secret>,
    now: Timestamp,
) -> (Standing, Duration) {
    let cert_ref = format!("Certificate {}/{}", names.namespace, certificate_name(names));
    let secret_ref = format!("Secret {}/{}", names.namespace, names.tls_secret);
    let issuer = issuer_words(spec);
    let pods = match secret {
        Some(_) => format!("the webhook Pods keep serving what {secret_ref} holds now"),
        None => format!("the webhook Pods wait for {secret_ref} (ContainerCreating) until it is issued"),
    };
    let generation = cert["metadata"]["generation"].as_i64();
    let ready = cm_condition(cert, "Ready");
    let current = ready.is_some_and(|(s, _, _)| s == "True")
        && cert["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| c["observedGeneration"].as_i64())
            .is_none_or(|g| Some(g) == generation || generation.is_none());
    let issued = secret.filter(|s| issued_by_cert_manager(s, names));
    match (current, issued) {
        (true, Some(s)) => {
            let (Some(_), Some(_)) = (data(s, TLS_CRT), data(s, TLS_KEY)) else {
                return pending(
                    "CertificatePending",
                    format!("{cert_ref} is Ready but {secret_ref} lacks tls.crt or tls.key; {pods}"),
                );
            };
            let Some(ca) = data(s, CA_CRT) else {
                return (
                    Standing {
                        ready: false,
                        reason: "NoCABundle",
                        message: format!(
                            "{secret_ref} was issued by {issuer} without a ca.crt, so the targets' caBundle cannot be set (ACME and some external issuers do not return their CA); use a CA or self-signed issuer whose CA the Secret carries"
                        ),
                    },
                    MISSING_RECHECK,
                );
            };
            let not_after = cert["status"]["notAfter"].as_str().unwrap_or("?");
            let renewal = cert["status"]["renewalTime"].as_str();
            let mut message = format!(
                "{secret_ref} holds a certificate for {} issued by cert-manager ({cert_ref}, {issuer}), valid until {not_after}",
                names.service_host()
            );
            if let Some(r) = renewal {
                message.push_str(&format!("; cert-manager renews it at {r}"));
            }
            if data(s, TLS_CRT) == Some(ca) {
                message.push_str(
                    "; the issuer signs the leaf with its own key, so every renewal changes the CA the targets trust: use a CA issuer for renewals without a failed request",
                );
            }
            // Look again just after the renewal, so the status shows the new validity.
            let recheck = renewal
                .and_then(|r| r.parse::<Timestamp>().ok())
                .and_then(|r| u64::try_from(r.as_second() - now.as_second() + 30).ok())
                .map_or(MISSING_RECHECK, |s| Duration::from_secs(s.max(30)));
            (Standing { ready: true, reason: "CertManager", message }, recheck)
        }
        (true, None) => pending(
            "CertificatePending",
            format!(
                "{cert_ref} is Ready but {secret_ref} does not carry its {ANNOTATION_CERTIFICATE_NAME} annotation yet; {pods}"
            ),
        ),
        (false, _) => {
            let why = match ready {
                Some((_, reason, message)) => format!("Ready is False ({reason}: {message})"),
                None => "no Ready condition yet (is cert-manager running?)".to_string(),
            };
            let issuing = cm_condition(cert, "Issuing")
                .filter(|(s, _, _)| *s == "True")
                .map(|(_, r, m)| format!("; Issuing ({r}: {m})"))
                .unwrap_or_default();
            pending(
                "CertificatePending",
                format!(
                    "cert-manager has not issued {cert_ref} from {issuer}: {why}{issuing}; {pods}. `kubectl describe certificate -n {} {}` and its CertificateRequest say why",
                    names.namespace,
                    certificate_name(names)
                ),
            )
        }
    }
}

fn pending(reason: &'static str, message: String) -> (Standing, Duration) {
    (Standing { ready: false, reason, message }, PENDING_RECHECK)
}

fn issuer_words(spec: &CertificateSpec) -> String {
    let r = &spec.issuer_ref;
    match r.group() {
        CERT_MANAGER_GROUP => format!("{} {}", r.kind, r.name),
        group => format!("{}.{group} {}", r.kind, r.name),
    }
}

/// The standing when cert-manager's Certificate kind is not served.
pub fn not_installed(spec: &CertificateSpec, names: &ServerNames, secret: Option<&Secret>) -> Standing {
    let secret_ref = format!("Secret {}/{}", names.namespace, names.tls_secret);
    let pods = match secret {
        Some(_) => format!("the webhook Pods keep serving what {secret_ref} holds now, which nothing renews"),
        None => format!("the webhook Pods wait for {secret_ref} (ContainerCreating)"),
    };
    Standing {
        ready: false,
        reason: "CertManagerNotInstalled",
        message: format!(
            "spec.certificate.issuerRef asks cert-manager ({}) to issue the serving certificate, but this cluster does not serve {API_VERSION} certificates; install cert-manager, or remove spec.certificate to let the operator manage {secret_ref} itself; {pods}",
            issuer_words(spec)
        ),
    }
}

/// Whether the self-managed CA must stay (its Secret kept, its certificate in the targets'
/// `caBundle`) while cert-manager issues: until cert-manager has issued into the serving
/// Secret and [`SELF_MANAGED_CA_GRACE`] has passed since that leaf's `notBefore`; and how
/// long until it may go.
pub fn keep_self_managed_ca(
    names: &ServerNames,
    cert: &Value,
    secret: Option<&Secret>,
    now: Timestamp,
) -> (bool, Option<Duration>) {
    let issued = secret.is_some_and(|s| issued_by_cert_manager(s, names));
    let since = cert["status"]["notBefore"].as_str().and_then(|t| t.parse::<Timestamp>().ok());
    let (Some(since), true) = (since, issued) else {
        return (true, None);
    };
    let grace = i64::try_from(SELF_MANAGED_CA_GRACE.as_secs()).unwrap_or(i64::MAX);
    let left = since.as_second().saturating_add(grace) - now.as_second();
    match u64::try_from(left) {
        Ok(l) if l > 0 => (true, Some(Duration::from_secs(l + 1))),
        _ => (false, None),
    }
}

/// The Event for a change of the certificate's standing (`None` when it stands as before).
pub fn transition(previous: Option<&Condition>, now: &Standing) -> Option<(bool, &'static str, String)> {
    let same = previous.is_some_and(|c| (c.status == "True") == now.ready && c.reason == now.reason);
    if same {
        return None;
    }
    Some(if now.ready {
        (false, "CertificateIssued", now.message.clone())
    } else {
        (true, now.reason, now.message.clone())
    })
}

// --- the API calls ---------------------------------------------------------------------

/// Whether the cluster serves cert-manager's Certificate kind (its CRDs are installed).
async fn served(ctx: &Context) -> Result<bool> {
    match ctx.client.list_api_group_resources(API_VERSION).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == "certificates")),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(Error::kube("discover", "cert-manager.io/v1", "certificates")(e)),
    }
}

fn certificates(ctx: &Context, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(ctx.client.clone(), namespace, &resource())
}

/// What the cert-manager path did and found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub standing: Standing,
    /// When to look again.
    pub recheck: Duration,
    /// Whether the self-managed CA Secret stays ([`keep_self_managed_ca`]).
    pub keep_ca: bool,
}

/// The cert-manager path of a server's certificate: apply its Certificate and the serving
/// Secret's ownership, and say how it stands (an Event when that changes).
pub async fn ensure(
    ctx: &Context,
    cws: &ConversionWebhookServer,
    spec: &CertificateSpec,
    names: &ServerNames,
    owner: &OwnerReference,
    secret: Option<&Secret>,
) -> Result<Outcome> {
    let previous = cws
        .status
        .as_ref()
        .and_then(|s| dco_state::conditions::find(&s.conditions, condition::CERTIFICATE_READY));
    let mut keep_ca = true;
    let (standing, recheck) = if !served(ctx).await? {
        (not_installed(spec, names, secret), MISSING_RECHECK)
    } else if let Err(message) = check_spec(spec) {
        (Standing { ready: false, reason: "InvalidCertificateSpec", message }, MISSING_RECHECK)
    } else {
        if let Some(obj) = secret_apply(secret, names, owner) {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
            api.patch(&names.tls_secret, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&obj))
                .await
                .map_err(Error::kube(
                    "apply",
                    "Secret",
                    format!("{}/{}", names.namespace, names.tls_secret),
                ))?;
        }
        let name = certificate_name(names);
        let applied = certificates(ctx, &names.namespace)
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired(spec, names, owner)),
            )
            .await
            .map_err(Error::kube("apply", "Certificate", format!("{}/{name}", names.namespace)))?;
        let cert = serde_json::to_value(&applied)
            .map_err(|source| Error::Serialize { what: format!("Certificate {name}"), source })?;
        let now = Timestamp::now();
        let (keep, until) = keep_self_managed_ca(names, &cert, secret, now);
        keep_ca = keep;
        let (standing, recheck) = assess(spec, names, &cert, secret, now);
        (standing, until.map_or(recheck, |u| recheck.min(u)))
    };
    if let Some((warning, reason, note)) = transition(previous, &standing) {
        ctx.event(cws, warning, reason, "Certificate", note).await;
    }
    Ok(Outcome { standing, recheck, keep_ca })
}

/// The operator takes the serving Secret back from cert-manager (spec.certificate removed):
/// when cert-manager issued it for this server's Certificate, that Certificate is deleted
/// (only if this server controls it) so cert-manager stops rewriting the Secret, and
/// cert-manager's annotations go, before the self-managed path rewrites the Secret. Does
/// nothing for a Secret cert-manager never issued. Returns whether cert-manager had issued
/// the Secret: the leaf the replicas serve is then cert-manager's, and the self-managed path
/// starts from no CA of its own, so that it keeps that leaf (and trusts its CA beside a new
/// one) until the leaf's renewal rather than replacing it at once (`certs::ensure`).
pub async fn release(
    ctx: &Context,
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    owner: &OwnerReference,
    secret: Option<&Secret>,
) -> Result<bool> {
    let Some(s) = secret.filter(|s| annotation(s, ANNOTATION_CERTIFICATE_NAME).is_some()) else {
        return Ok(false);
    };
    let name = certificate_name(names);
    let label = format!("{}/{name}", names.namespace);
    if issued_by_cert_manager(s, names) {
        let api = certificates(ctx, &names.namespace);
        let found = match api.get_opt(name).await {
            Ok(found) => found,
            // The kind is not served (cert-manager uninstalled): nothing can issue any more.
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => return Err(Error::kube("read", "Certificate", label)(e)),
        };
        if let Some(c) = found {
            let ours = c.owner_references().iter().any(|r| r.controller == Some(true) && r.uid == owner.uid);
            if !ours {
                ctx.event(
                    cws,
                    true,
                    "CertificateNotOwned",
                    "Certificate",
                    format!(
                        "Certificate {label} issues into Secret {}/{} but is not this server's; delete it, or cert-manager and the operator both write that Secret",
                        names.namespace, names.tls_secret
                    ),
                )
                .await;
                return Ok(false);
            }
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: c.uid(), resource_version: None }),
                ..DeleteParams::default()
            };
            match api.delete(name, &dp).await {
                Ok(_) => {
                    ctx.event(
                        cws,
                        false,
                        "CertificateReleased",
                        "Certificate",
                        format!(
                            "spec.certificate was removed: deleted Certificate {label}; the operator manages Secret {}/{} again",
                            names.namespace, names.tls_secret
                        ),
                    )
                    .await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(Error::kube("delete", "Certificate", label)(e)),
            }
        }
    }
    // A JSON merge patch removes them whoever's field manager set them.
    let strip: BTreeMap<String, Value> = s
        .annotations()
        .keys()
        .filter(|k| k.starts_with(ANNOTATION_PREFIX))
        .map(|k| (k.clone(), Value::Null))
        .collect();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
    api.patch(
        &names.tls_secret,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": strip}})),
    )
    .await
    .map_err(Error::kube("patch", "Secret", format!("{}/{}", names.namespace, names.tls_secret)))?;
    Ok(issued_by_cert_manager(s, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn names() -> ServerNames {
        ServerNames::new("a", "dco-system")
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "conversion.dco.rs/v1alpha1".into(),
            kind: "ConversionWebhookServer".into(),
            name: "a".into(),
            uid: "uid-a".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn spec(v: Value) -> CertificateSpec {
        serde_json::from_value(v).unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    fn secret(annotation: Option<&str>, keys: &[(&str, &str)]) -> Secret {
        let mut s = Secret {
            data: Some(
                keys.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect(),
            ),
            type_: Some("kubernetes.io/tls".into()),
            ..Secret::default()
        };
        if let Some(a) = annotation {
            s.metadata.annotations =
                Some(BTreeMap::from([(ANNOTATION_CERTIFICATE_NAME.to_string(), a.to_string())]));
        }
        s
    }

    fn cert(ready: Option<(&str, &str, &str)>, extra: Value) -> Value {
        let mut conditions: Vec<Value> = ready
            .map(|(s, r, m)| json!({"type": "Ready", "status": s, "reason": r, "message": m, "observedGeneration": 1}))
            .into_iter()
            .collect();
        if let Some(i) = extra.get("issuing") {
            conditions.push(json!({"type": "Issuing", "status": "True", "reason": i[0], "message": i[1]}));
        }
        json!({"metadata": {"generation": 1}, "status": {"conditions": conditions,
            "notAfter": "2026-03-31T00:00:00Z", "renewalTime": "2026-03-01T00:00:00Z"}})
    }

    #[test]
    fn go_durations_parse_as_go_does() {
        let h = |n: u64| Duration::from_secs(n * 3600);
        assert_eq!(go_duration("2160h"), Some(h(2160)));
        assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "h", "1d", "-1h", "1..5h", "1h30", "."] {
            assert_eq!(go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_spec_is_checked_as_cert_manager_would() {
        assert_eq!(check_spec(&spec(json!({"issuerRef": {"name": "ca"}}))), Ok(()));
        assert_eq!(
            check_spec(&spec(json!({"issuerRef": {"name": "ca"}, "duration": "2h", "renewBefore": "90m"}))),
            Ok(())
        );
        let err = |v: Value| check_spec(&spec(v)).unwrap_err();
        assert!(
            err(json!({"issuerRef": {"name": "ca"}, "duration": "90d"}))
                .contains("spec.certificate.duration \"90d\" is not a Go duration")
        );
        assert!(err(json!({"issuerRef": {"name": "ca"}, "duration": "30m"})).contains("minimum of 1h"));
        assert!(
            err(json!({"issuerRef": {"name": "ca"}, "renewBefore": "1m"}))
                .contains("renewBefore \"1m\" is shorter than cert-manager's minimum of 5m")
        );
        assert!(
            err(json!({"issuerRef": {"name": "ca"}, "duration": "2h", "renewBefore": "2h"}))
                .contains("not shorter than the duration (2h)")
        );
    }

    #[test]
    fn the_certificate_covers_the_self_managed_names_into_the_serving_secret() {
        let s = spec(
            json!({"issuerRef": {"name": "ca"}, "dnsNames": ["extra.example", "dco-webhook-a.dco-system.svc"]}),
        );
        let c = desired(&s, &names(), &owner());
        assert_eq!(c["apiVersion"], "cert-manager.io/v1");
        assert_eq!(c["metadata"]["name"], "dco-webhook-a");
        assert_eq!(c["metadata"]["namespace"], "dco-system");
        assert_eq!(c["metadata"]["ownerReferences"][0]["uid"], "uid-a");
        assert_eq!(c["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(c["spec"]["secretName"], "dco-webhook-a-tls");
        assert_eq!(
            c["spec"]["dnsNames"],
            json!([
                "dco-webhook-a.dco-system.svc",
                "dco-webhook-a.dco-system",
                "dco-webhook-a.dco-system.svc.cluster.local",
                "extra.example"
            ])
        );
        assert_eq!(
            c["spec"]["issuerRef"],
            json!({"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
        );
        assert_eq!(c["spec"]["duration"], DEFAULT_DURATION);
        assert!(c["spec"].get("renewBefore").is_none(), "cert-manager's default: a third of the duration");
        assert_eq!(c["spec"]["secretTemplate"]["labels"]["conversion.dco.rs/instance"], "a");

        let s = spec(
            json!({"issuerRef": {"name": "team", "kind": "Issuer"}, "duration": "24h", "renewBefore": "8h"}),
        );
        let c = desired(&s, &names(), &owner());
        assert_eq!(c["spec"]["issuerRef"]["kind"], "Issuer");
        assert_eq!(
            (c["spec"]["duration"].as_str(), c["spec"]["renewBefore"].as_str()),
            (Some("24h"), Some("8h"))
        );

        // An external issuer: its own kind and group reach the Certificate; in cert-manager's
        // group only its two kinds pass.
        let s = spec(
            json!({"issuerRef": {"name": "pca", "kind": "AWSPCAClusterIssuer", "group": "awspca.cert-manager.io"}}),
        );
        assert_eq!(check_spec(&s), Ok(()));
        assert_eq!(
            desired(&s, &names(), &owner())["spec"]["issuerRef"],
            json!({"name": "pca", "kind": "AWSPCAClusterIssuer", "group": "awspca.cert-manager.io"})
        );
        assert_eq!(issuer_words(&s), "AWSPCAClusterIssuer.awspca.cert-manager.io pca");
        let e = check_spec(&spec(json!({"issuerRef": {"name": "pca", "kind": "AWSPCAClusterIssuer"}})))
            .unwrap_err();
        assert!(e.contains("issuerRef.kind") && e.contains("issuerRef.group"), "{e}");
    }

    #[test]
    fn the_serving_secret_becomes_an_owned_not_controlled_dependent_keeping_its_data() {
        let n = names();
        assert_eq!(secret_apply(None, &n, &owner()), None, "cert-manager creates it");
        // The self-managed Secret from before: controlled by the server, not issued by cert-manager.
        let mut before = secret(None, &[("tls.crt", "old"), ("tls.key", "k"), ("ca.crt", "ca")]);
        before.metadata.owner_references = Some(vec![owner()]);
        before.metadata.labels = Some(n.labels());
        let a = secret_apply(Some(&before), &n, &owner()).unwrap();
        assert_eq!(a["metadata"]["ownerReferences"][0]["controller"], false);
        assert_eq!(a["metadata"]["ownerReferences"][0]["uid"], "uid-a");
        assert!(
            a["data"]["tls.crt"].is_string(),
            "the data stay the operator's until cert-manager issues: {a}"
        );
        // Issued by cert-manager, with no owner yet: metadata only.
        let mut issued = secret(Some("dco-webhook-a"), &[("tls.crt", "new")]);
        issued.metadata.labels = Some(n.labels());
        let a = secret_apply(Some(&issued), &n, &owner()).unwrap();
        assert!(a.get("data").is_none(), "{a}");
        // Once it is as wanted, nothing to write.
        issued.metadata.owner_references = Some(vec![secret_owner(&owner())]);
        assert_eq!(secret_apply(Some(&issued), &n, &owner()), None);
    }

    #[test]
    fn issued_and_ready_is_ready_with_its_renewal() {
        let s = spec(json!({"issuerRef": {"name": "ca"}}));
        let sec = secret(Some("dco-webhook-a"), &[("tls.crt", "leaf"), ("tls.key", "k"), ("ca.crt", "ca")]);
        let (st, recheck) =
            assess(&s, &names(), &cert(Some(("True", "Ready", "up to date")), json!({})), Some(&sec), now());
        assert!(st.ready);
        assert_eq!(st.reason, "CertManager");
        assert_eq!(
            st.message,
            "Secret dco-system/dco-webhook-a-tls holds a certificate for dco-webhook-a.dco-system.svc issued by cert-manager (Certificate dco-system/dco-webhook-a, ClusterIssuer ca), valid until 2026-03-31T00:00:00Z; cert-manager renews it at 2026-03-01T00:00:00Z"
        );
        assert_eq!(recheck, Duration::from_secs(59 * 86_400 + 30), "just after the renewal");
        // A self-signed leaf is its own CA: said, because renewals then change the caBundle.
        let sec = secret(Some("dco-webhook-a"), &[("tls.crt", "leaf"), ("tls.key", "k"), ("ca.crt", "leaf")]);
        let (st, _) = assess(&s, &names(), &cert(Some(("True", "Ready", "")), json!({})), Some(&sec), now());
        assert!(st.ready && st.message.contains("use a CA issuer"), "{}", st.message);
    }

    #[test]
    fn not_issued_yet_says_why_and_what_the_pods_do() {
        let s = spec(json!({"issuerRef": {"name": "ca"}}));
        let c = cert(
            Some(("False", "DoesNotExist", "Issuing certificate as Secret does not exist")),
            json!({"issuing": ["DoesNotExist", "Issuing certificate as Secret does not exist"]}),
        );
        let (st, recheck) = assess(&s, &names(), &c, None, now());
        assert_eq!((st.ready, st.reason, recheck), (false, "CertificatePending", PENDING_RECHECK));
        assert!(st.message.starts_with("cert-manager has not issued Certificate dco-system/dco-webhook-a from ClusterIssuer ca: Ready is False (DoesNotExist: Issuing certificate as Secret does not exist); Issuing (DoesNotExist"), "{}", st.message);
        assert!(
            st.message.contains(
                "the webhook Pods wait for Secret dco-system/dco-webhook-a-tls (ContainerCreating)"
            )
        );
        assert!(st.message.contains("kubectl describe certificate -n dco-system dco-webhook-a"));
        // The self-managed Secret from before still serves meanwhile.
        let old = secret(None, &[("tls.crt", "old"), ("tls.key", "k"), ("ca.crt", "ca")]);
        let (st, _) = assess(&s, &names(), &cert(None, json!({})), Some(&old), now());
        assert!(st.message.contains("no Ready condition yet (is cert-manager running?)"), "{}", st.message);
        assert!(st.message.contains("keep serving what Secret dco-system/dco-webhook-a-tls holds now"));
        // Ready, but for an older generation of the spec: not yet.
        let mut stale = cert(Some(("True", "Ready", "")), json!({}));
        stale["metadata"]["generation"] = json!(2);
        let sec = secret(Some("dco-webhook-a"), &[("tls.crt", "leaf"), ("tls.key", "k"), ("ca.crt", "ca")]);
        assert!(!assess(&s, &names(), &stale, Some(&sec), now()).0.ready);
        // Ready, but the Secret is still the operator's own (cert-manager's write not seen yet).
        assert!(
            !assess(&s, &names(), &cert(Some(("True", "Ready", "")), json!({})), Some(&old), now()).0.ready
        );
    }

    #[test]
    fn an_issuer_without_a_ca_cannot_set_the_ca_bundle() {
        let s = spec(json!({"issuerRef": {"name": "acme"}}));
        let sec = secret(Some("dco-webhook-a"), &[("tls.crt", "leaf"), ("tls.key", "k")]);
        let (st, _) = assess(&s, &names(), &cert(Some(("True", "Ready", "")), json!({})), Some(&sec), now());
        assert_eq!((st.ready, st.reason), (false, "NoCABundle"));
        assert!(st.message.contains("without a ca.crt"));
    }

    #[test]
    fn missing_cert_manager_names_the_fix() {
        let s = spec(json!({"issuerRef": {"name": "ca", "kind": "Issuer"}}));
        let st = not_installed(&s, &names(), None);
        assert_eq!((st.ready, st.reason), (false, "CertManagerNotInstalled"));
        assert!(
            st.message.contains("(Issuer ca)")
                && st.message.contains("does not serve cert-manager.io/v1 certificates")
        );
        assert!(st.message.contains("install cert-manager, or remove spec.certificate"));
        assert!(st.message.contains("wait for Secret dco-system/dco-webhook-a-tls (ContainerCreating)"));
    }

    #[test]
    fn the_self_managed_ca_stays_until_every_replica_can_have_loaded_cert_manager_s_leaf() {
        let n = names();
        let issued = secret(Some("dco-webhook-a"), &[("tls.crt", "leaf")]);
        let old = secret(None, &[("tls.crt", "old")]);
        let mut c = cert(Some(("True", "Ready", "")), json!({}));
        c["status"]["notBefore"] = json!("2025-12-31T23:58:00Z");
        assert_eq!(
            keep_self_managed_ca(&n, &c, Some(&issued), now()),
            (true, Some(Duration::from_secs(181)))
        );
        assert_eq!(keep_self_managed_ca(&n, &c, Some(&old), now()), (true, None), "not issued yet");
        assert_eq!(keep_self_managed_ca(&n, &c, None, now()), (true, None));
        c["status"]["notBefore"] = json!("2025-12-31T23:54:59Z");
        assert_eq!(keep_self_managed_ca(&n, &c, Some(&issued), now()), (false, None));
        assert_eq!(keep_self_managed_ca(&n, &cert(None, json!({})), Some(&issued), now()), (true, None));
    }

    #[test]
    fn an_event_only_when_the_standing_changes() {
        let ready = Standing { ready: true, reason: "CertManager", message: "m".into() };
        let pending = Standing { ready: false, reason: "CertificatePending", message: "p".into() };
        let cond = |status: &str, reason: &str| Condition {
            type_: condition::CERTIFICATE_READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()),
        };
        assert_eq!(transition(None, &pending), Some((true, "CertificatePending", "p".into())));
        assert_eq!(transition(Some(&cond("False", "CertificatePending")), &pending), None);
        assert_eq!(
            transition(Some(&cond("False", "CertificatePending")), &ready),
            Some((false, "CertificateIssued", "m".into()))
        );
        assert_eq!(
            transition(Some(&cond("True", "SelfManaged")), &ready),
            Some((false, "CertificateIssued", "m".into()))
        );
        assert_eq!(transition(Some(&cond("True", "CertManager")), &ready), None);
    }
}
