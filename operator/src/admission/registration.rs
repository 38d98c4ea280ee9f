//! Keeping the webhook registered (docs/admission.md, "Registration"): every replica, every
//! [`INTERVAL`], makes sure that
//! 1. the serving certificate exists in two Secrets in the operator's namespace (the CA and
//!    the leaf for `<service>.<namespace>.svc`, issued and rotated by pki.rs, the code
//!    that serves the webhook servers) and serves what they hold ([`CertResolver`]); or, with
//!    `--admission-tls-secret`, serves the key pair someone else (cert-manager) issued into
//!    that Secret, watched so a renewal is served at once (issued.rs);
//! 2. the Service selecting the operator Pods exists, when `--admission-pod-selector` is set;
//! 3. once a replica can answer (a Ready operator Pod behind the Service, [`answering`]), the
//!    `ValidatingWebhookConfiguration` holds dco's two webhooks with the current `caBundle`;
//! 4. with `--xrd-guard`, the `MutatingWebhookConfiguration` `<webhook name>-xrd-guard` holds
//!    the XRD guard (xrd_guard.rs, `failurePolicy: Ignore`); without it, one the operator
//!    created is deleted ([`Registration::guard_name`]).
//!
//! One owner decides whether the configuration exists ([`Owner`]): with the chart, the release
//! creates it empty and deletes it on uninstall, and the operator only fills it (a patch that
//! fails while it is missing, so no replica can race helm's create); without the chart the
//! operator creates it (server-side apply). Its webhooks have `failurePolicy: Fail`, so they
//! go in only once some Pod answers them: a configuration written earlier would refuse every
//! write of dco's kinds, the chart's default server first.
//!
//! Replicas race only on creating or renewing the Secrets: creates and updates carry the
//! resourceVersion they read, so one wins and the others read its result on their next pass.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dco_api::{API_VERSION, GROUP, VERSION};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::issued;
use super::metrics::RegistrationLabels;
use super::serve::{CertResolver, certified_key};
use crate::cli::Owner;
use crate::names::FIELD_MANAGER;
use crate::pki::{self, Current, Lifetimes};

/// How often each replica re-checks the registration (and a rotation becomes due).
pub const INTERVAL: Duration = Duration::from_secs(60);
/// Until the first certificate is served and the webhooks are in place, and after a lost race.
const RETRY: Duration = Duration::from_secs(1);
/// Operator Pods read to find a Ready one (a Deployment has a handful).
const MAX_PODS: u32 = 100;

/// The apiserver waits this long for an answer, then applies `failurePolicy: Fail`.
pub const TIMEOUT_SECONDS: i32 = 5;
pub const PATH: &str = "/validate";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub service_namespace: String,
    pub service: String,
    /// The Service's port; the Pods listen on `target_port`.
    pub port: i32,
    pub target_port: i32,
    /// Labels of the operator Pods: when set, the operator applies the Service itself.
    pub pod_selector: Option<BTreeMap<String, String>>,
    pub webhook_name: String,
    /// `--selector` as an `objectSelector`.
    pub object_selector: Option<Value>,
    pub owner: Owner,
    /// `--xrd-guard`: register the XRD guard's MutatingWebhookConfiguration.
    pub xrd_guard: bool,
    /// `--admission-failure-policy` of the validating webhooks (the guard's is always Ignore).
    pub failure_policy: crate::cli::FailurePolicy,
    /// `--admission-tls-secret`: serve this Secret's key pair, issued by someone else
    /// (cert-manager), instead of issuing one (issued.rs).
    pub tls_secret: Option<String>,
}

/// `dco-operator-admission`, suffixed with a hash of `--selector` so operators that share a
/// cluster (each with its own selector) keep one configuration each.
pub fn default_webhook_name(selector: Option<&str>) -> String {
    match selector.filter(|s| !s.is_empty()) {
        None => "dco-operator-admission".to_string(),
        Some(s) => format!("dco-operator-admission-{}", crate::names::selector_hash(s)),
    }
}

/// A `--selector` (the label selector syntax of `kubectl -l`) as a `LabelSelector`:
/// `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma-separated.
pub fn object_selector(selector: &str) -> Result<Value, String> {
    let mut labels = serde_json::Map::new();
    let mut exprs = Vec::new();
    let (mut depth, mut start, mut parts) = (0i32, 0usize, Vec::new());
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let set = |p: &str, word: &str| {
            let (k, rest) = p.split_once(word)?;
            let vals = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
            Some((k.trim().to_string(), vals.split(',').map(|v| v.trim().to_string()).collect::<Vec<_>>()))
        };
        if let Some((k, vs)) = set(p, " notin ") {
            exprs.push(json!({"key": k, "operator": "NotIn", "values": vs}));
        } else if let Some((k, vs)) = set(p, " in ") {
            exprs.push(json!({"key": k, "operator": "In", "values": vs}));
        } else if let Some((k, v)) = p.split_once("!=") {
            exprs.push(json!({"key": k.trim(), "operator": "NotIn", "values": [v.trim()]}));
        } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
            labels.insert(k.trim().to_string(), json!(v.trim()));
        } else if let Some(k) = p.strip_prefix('!') {
            exprs.push(json!({"key": k.trim(), "operator": "DoesNotExist"}));
        } else if p.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
            exprs.push(json!({"key": p, "operator": "Exists"}));
        } else {
            return Err(format!("--selector {selector:?}: cannot read {p:?} as a label requirement"));
        }
    }
    let mut out = serde_json::Map::new();
    if !labels.is_empty() {
        out.insert("matchLabels".into(), Value::Object(labels));
    }
    if !exprs.is_empty() {
        out.insert("matchExpressions".into(), Value::Array(exprs));
    }
    Ok(Value::Object(out))
}

impl Registration {
    fn host(&self) -> String {
        format!("{}.{}.svc", self.service, self.service_namespace)
    }

    /// The self-managed CA and serving Secrets.
    pub fn secret_names(&self) -> (String, String) {
        (format!("{}-ca", self.service), format!("{}-tls", self.service))
    }

    /// The Secret whose key pair is served (also the `secret` label of the admission
    /// certificate's expiry metric, status_metrics.rs).
    pub fn serving_secret(&self) -> String {
        self.tls_secret.clone().unwrap_or_else(|| self.secret_names().1)
    }

    /// The configuration as this operator wants it.
    pub fn webhook_configuration(&self, ca_bundle: &str) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.webhook_name, "labels": {"app.kubernetes.io/name": "dco-operator"},
                "annotations": {"conversion.dco.rs/api-version": API_VERSION}},
            "webhooks": self.webhooks(ca_bundle),
        })
    }

    /// What the operator writes into a configuration its installer created: the webhooks and
    /// an annotation, never the labels the installer owns (a label written by both would
    /// flip on every `helm upgrade`, or conflict under server-side apply).
    pub fn webhook_content(&self, ca_bundle: &str) -> Value {
        json!({
            "metadata": {"annotations": {"conversion.dco.rs/api-version": API_VERSION}},
            "webhooks": self.webhooks(ca_bundle),
        })
    }

    /// The XRD guard's `MutatingWebhookConfiguration`: `<webhook name>-xrd-guard`.
    pub fn guard_name(&self) -> String {
        format!("{}-xrd-guard", self.webhook_name)
    }

    /// The guard's configuration as this operator wants it (its installer's: [`Self::guard_content`]).
    pub fn guard_configuration(&self, ca_bundle: &str) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.guard_name(), "labels": {"app.kubernetes.io/name": "dco-operator"},
                "annotations": {"conversion.dco.rs/api-version": API_VERSION}},
            "webhooks": self.guard_webhooks(ca_bundle),
        })
    }

    /// What the operator writes into a guard configuration its installer created.
    pub fn guard_content(&self, ca_bundle: &str) -> Value {
        json!({
            "metadata": {"annotations": {"conversion.dco.rs/api-version": API_VERSION}},
            "webhooks": self.guard_webhooks(ca_bundle),
        })
    }

    /// One webhook on every update of an XRD, at whatever version Crossplane serves (the review
    /// comes at the request's version; `spec.conversion` is laid out alike in all of them).
    /// `failurePolicy: Ignore`: the guard narrows the window of a revert, it never blocks a
    /// write. No `objectSelector`: XRDs carry no dco labels; the rule itself only keeps the
    /// wiring to this operator's servers.
    fn guard_webhooks(&self, ca_bundle: &str) -> Value {
        json!([{
            "name": "xrds.guard.conversion.dco.rs",
            "clientConfig": {
                "service": {"namespace": self.service_namespace, "name": self.service,
                    "path": super::xrd_guard::PATH, "port": self.port},
                "caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_bundle),
            },
            "rules": [{"apiGroups": [dco_api::target::XRD_GROUP], "apiVersions": ["*"], "operations": ["UPDATE"],
                "resources": [dco_api::target::XRD_PLURAL], "scope": "Cluster"}],
            "failurePolicy": "Ignore",
            "matchPolicy": "Equivalent",
            "reinvocationPolicy": "IfNeeded",
            "sideEffects": "None",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "admissionReviewVersions": ["v1"],
        }])
    }

    fn webhooks(&self, ca_bundle: &str) -> Value {
        let client = json!({
            "service": {"namespace": self.service_namespace, "name": self.service, "path": PATH, "port": self.port},
            "caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_bundle),
        });
        let hook = |name: &str, resources: &[&str], operations: &[&str]| {
            let mut h = json!({
                "name": name,
                "clientConfig": client,
                "rules": [{"apiGroups": [GROUP], "apiVersions": [VERSION], "operations": operations,
                    "resources": resources, "scope": "*"}],
                // dco's kinds only: a Fail policy on anything else would make the operator a
                // dependency of unrelated writes.
                "failurePolicy": self.failure_policy.as_str(),
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "admissionReviewVersions": ["v1"],
            });
            if let Some(sel) = &self.object_selector {
                h["objectSelector"] = sel.clone();
            }
            h
        };
        json!([
            // Configs: nothing of a config's is refused on DELETE (its finalizer reverts).
            hook(
                "configs.validate.conversion.dco.rs",
                &["crdconversionconfigs", "xrdconversionconfigs"],
                &["CREATE", "UPDATE"]
            ),
            hook(
                "servers.validate.conversion.dco.rs",
                &["conversionwebhookservers"],
                &["CREATE", "UPDATE", "DELETE"]
            ),
        ])
    }

    fn service_object(&self, pods: &BTreeMap<String, String>) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.service, "namespace": self.service_namespace,
                "labels": {"app.kubernetes.io/name": "dco-operator", "app.kubernetes.io/component": "admission"}},
            "spec": {"selector": pods,
                "ports": [{"name": "https", "port": self.port, "targetPort": self.target_port, "protocol": "TCP"}]},
        })
    }
}

/// What a pass waits for, apart from errors: its outcome label in
/// `dco_operator_admission_registration_passes_total`.
#[derive(Debug)]
pub enum Waiting {
    /// `--admission-configuration=existing` and its installer has not created it yet.
    NoConfiguration(String),
    /// No Pod behind the Service answers yet.
    NobodyAnswers(String),
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waiting::NoConfiguration(m) | Waiting::NobodyAnswers(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Waiting {}

/// The outcome label of a pass's result.
pub fn outcome(r: &anyhow::Result<()>) -> &'static str {
    match r {
        Ok(()) => "registered",
        Err(e) => match e.downcast_ref::<Waiting>() {
            Some(Waiting::NoConfiguration(_)) => "no_configuration",
            Some(Waiting::NobodyAnswers(_)) => "nobody_answers",
            None => "failed",
        },
    }
}

/// Whether the Service's calls reach a replica now: some Pod it selects is Ready and not
/// terminating (what the endpoint controllers and kube-proxy follow), and, where the cluster
/// publishes EndpointSlices for it, one of their endpoints is ready. `Ok` is the number of
/// Ready Pods; `Err` says what is missing.
pub fn answering(service: &str, pods: &[Pod], slices: Option<&[EndpointSlice]>) -> Result<usize, String> {
    let ready = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().is_some_and(|s| {
                    s.pod_ip.is_some()
                        && s.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
                })
        })
        .count();
    if ready == 0 {
        return Err(format!(
            "no Pod behind Service {service} is Ready yet ({} selected): the webhooks go in once one answers",
            pods.len()
        ));
    }
    if let Some(slices) = slices.filter(|s| !s.is_empty()) {
        // The API reads an unset `ready` as true.
        let endpoints = slices
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .count();
        if endpoints == 0 {
            return Err(format!(
                "Service {service} has {ready} Ready Pod(s) but no ready endpoint in its EndpointSlices yet"
            ));
        }
    }
    Ok(ready)
}

/// [`answering`] for the registration's Service, read from the apiserver.
async fn service_answers(client: &Client, reg: &Registration) -> anyhow::Result<usize> {
    let ns = &reg.service_namespace;
    let named = format!("{ns}/{}", reg.service);
    let selector = match &reg.pod_selector {
        Some(pods) => pods.clone(),
        None => Api::<Service>::namespaced(client.clone(), ns)
            .get_opt(&reg.service)
            .await?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the admission Service {named} does not exist: create it (the chart does) or set --admission-pod-selector"
                )
            })?
            .spec
            .and_then(|s| s.selector)
            .unwrap_or_default(),
    };
    if selector.is_empty() {
        anyhow::bail!("the admission Service {named} selects no Pods (no spec.selector)");
    }
    let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&labels.join(",")).limit(MAX_PODS))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot list the Pods of Service {named} ({e}): the operator needs list on pods there"
            )
        })?;
    let by_service = ListParams::default().labels(&format!("kubernetes.io/service-name={}", reg.service));
    // Clusters without EndpointSlices for it (the endpoint controllers off), or an operator not
    // allowed to read them, are judged by the Pods alone.
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns).list(&by_service).await.ok();
    answering(&named, &pods.items, slices.as_ref().map(|l| l.items.as_slice()))
        .map_err(|m| Waiting::NobodyAnswers(m).into())
}

fn data(s: &Option<Secret>) -> Option<BTreeMap<String, Vec<u8>>> {
    s.as_ref()
        .and_then(|s| s.data.as_ref())
        .map(|d| d.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
}

/// Create `name` with `data`, or replace what was read (`read`'s resourceVersion: a
/// concurrent writer makes this fail, and the next pass reads its result).
async fn write(
    api: &Api<Secret>,
    name: &str,
    read: &Option<Secret>,
    data: BTreeMap<String, Vec<u8>>,
) -> kube::Result<()> {
    let mut s = read.clone().unwrap_or_default();
    s.metadata.name = Some(name.to_string());
    s.metadata.labels.get_or_insert_with(BTreeMap::new).extend([
        ("app.kubernetes.io/name".to_string(), "dco-operator".to_string()),
        ("app.kubernetes.io/component".to_string(), "admission".to_string()),
    ]);
    s.type_ = Some("Opaque".into());
    s.data = Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect());
    match read {
        None => api
            .create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &s)
            .await
            .map(|_| ()),
        Some(_) => api
            .replace(
                name,
                &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() },
                &s,
            )
            .await
            .map(|_| ()),
    }
}

/// Step 1 with the self-managed certificate: the CA and leaf Secrets issued and rotated by
/// pki.rs, the leaf served. Returns the `caBundle` (PEM).
async fn self_managed(
    client: &Client,
    reg: &Registration,
    certs_now: &CertResolver,
    life: &Lifetimes,
) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &reg.service_namespace);
    let (ca_name, tls_name) = reg.secret_names();
    let (ca, tls) = (secrets.get_opt(&ca_name).await?, secrets.get_opt(&tls_name).await?);
    let (ca_data, tls_data) = (data(&ca), data(&tls));
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let out = pki::ensure(
        "dco-operator-admission",
        &reg.host(),
        Current { ca: ca_data.as_ref(), tls: tls_data.as_ref() },
        now,
        life,
    )?;
    if let Some(d) = out.write_ca {
        write(&secrets, &ca_name, &ca, d).await?;
        tracing::info!(secret = %ca_name, reasons = ?out.reasons, "wrote the admission CA");
        // The leaf is signed by the CA just written: write it on the next pass, against the
        // CA that won if another replica raced this one.
        anyhow::bail!("the admission CA was just written; the serving certificate follows");
    }
    let tls_now = match out.write_tls {
        Some(d) => {
            write(&secrets, &tls_name, &tls, d.clone()).await?;
            tracing::info!(secret = %tls_name, reasons = ?out.reasons, "wrote the admission serving certificate");
            d
        }
        None => tls_data.unwrap_or_default(),
    };
    let text = |k: &str| tls_now.get(k).and_then(|v| String::from_utf8(v.clone()).ok()).unwrap_or_default();
    let key = certified_key(&text(pki::TLS_CRT), &text(pki::TLS_KEY)).map_err(anyhow::Error::msg)?;
    certs_now.set(Arc::new(key));
    Ok(out.ca_bundle)
}

/// Step 1 with `--admission-tls-secret`: the Secret's key pair served (swapped in when it
/// changed), its `ca.crt` the `caBundle`. An error leaves what is served and registered as is.
async fn issued_elsewhere(
    client: &Client,
    reg: &Registration,
    name: &str,
    certs_now: &CertResolver,
) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &reg.service_namespace);
    let named = format!("{}/{name}", reg.service_namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| anyhow::anyhow!("cannot read Secret {named} ({e}): the operator needs get on it"))?;
    let got = issued::read(secret.as_ref(), &named, &reg.host()).map_err(anyhow::Error::msg)?;
    let unchanged = certs_now.current().is_some_and(|k| {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let served: Vec<&[u8]> = k.cert.iter().map(|c| c.as_ref()).collect();
        let read: Vec<CertificateDer<'_>> =
            CertificateDer::pem_slice_iter(got.cert_pem.as_bytes()).filter_map(Result::ok).collect();
        served == read.iter().map(|c| c.as_ref()).collect::<Vec<_>>()
    });
    if !unchanged {
        let key =
            certified_key(&got.cert_pem, &got.key_pem).map_err(|e| anyhow::anyhow!("Secret {named}: {e}"))?;
        certs_now.set(Arc::new(key));
        tracing::info!(secret = %named, "serving the admission certificate of the Secret");
    }
    Ok(got.ca_pem)
}

/// One pass: the certificate served, the Service, the configuration. Returns whether
/// everything is in place.
pub async fn reconcile(
    client: &Client,
    reg: &Registration,
    certs_now: &CertResolver,
    life: &Lifetimes,
) -> anyhow::Result<()> {
    let ca_bundle = match &reg.tls_secret {
        None => self_managed(client, reg, certs_now, life).await?,
        Some(name) => issued_elsewhere(client, reg, name, certs_now).await?,
    };
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    if let Some(pods) = &reg.pod_selector {
        let services: Api<Service> = Api::namespaced(client.clone(), &reg.service_namespace);
        services.patch(&reg.service, &pp, &Patch::Apply(reg.service_object(pods))).await?;
    }
    service_answers(client, reg).await?;
    // Every pass: a patch that changes nothing is a no-op on the apiserver, and one that
    // does restores a caBundle or setting someone changed.
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    match reg.owner {
        Owner::Operator => {
            vwcs.patch(&reg.webhook_name, &pp, &Patch::Apply(reg.webhook_configuration(&ca_bundle))).await?;
        }
        Owner::Installer => {
            // A merge patch, not an apply: it fails while the object is missing instead of
            // creating it, so helm's create never finds it there first, and a replica
            // running after `helm uninstall` cannot bring it back.
            let merge = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            match vwcs.patch(&reg.webhook_name, &merge, &Patch::Merge(reg.webhook_content(&ca_bundle))).await
            {
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Err(Waiting::NoConfiguration(format!(
                        "ValidatingWebhookConfiguration {} does not exist yet; with --admission-configuration=existing \
                         its installer (the chart) creates it and the operator fills in the webhooks",
                        reg.webhook_name
                    ))
                    .into());
                }
                r => {
                    r?;
                }
            }
        }
    }
    reconcile_guard(client, reg, &ca_bundle).await
}

/// Step 4: the XRD guard's configuration, written like the validating one (apply when the
/// operator owns it, a merge patch into its installer's), or deleted when the guard is off
/// and the operator owns it. An installer removes its own (the chart renders it only with the
/// guard on).
async fn reconcile_guard(client: &Client, reg: &Registration, ca_bundle: &str) -> anyhow::Result<()> {
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let name = reg.guard_name();
    match (reg.xrd_guard, reg.owner) {
        (true, Owner::Operator) => {
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            mwcs.patch(&name, &pp, &Patch::Apply(reg.guard_configuration(ca_bundle))).await?;
        }
        (true, Owner::Installer) => {
            let merge = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            match mwcs.patch(&name, &merge, &Patch::Merge(reg.guard_content(ca_bundle))).await {
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Err(Waiting::NoConfiguration(format!(
                        "MutatingWebhookConfiguration {name} does not exist yet; with --admission-configuration=existing \
                         and --xrd-guard its installer (the chart, admission.xrdGuard.enabled) creates it"
                    ))
                    .into());
                }
                r => {
                    r?;
                }
            }
        }
        (false, Owner::Operator) => match mwcs.delete(&name, &Default::default()).await {
            Ok(_) => {
                tracing::info!(configuration = %name, "the XRD guard is off: deleted its MutatingWebhookConfiguration")
            }
            // None there (the usual case), or no right to it (the chart grants none with the guard off).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => {}
            Err(e) => return Err(e.into()),
        },
        (false, Owner::Installer) => {}
    }
    Ok(())
}

/// At a replica's stop, once it has drained: when no other Pod behind the Service answers
/// (an uninstall, a scale to zero), the webhooks are taken out of the configuration, so
/// none with `failurePolicy: Fail` is left pointing at a Service without a ready endpoint.
/// The next replica to answer registers them again. Best effort: an uninstall may already
/// have removed the operator's RBAC, or the configuration.
pub async fn withdraw_if_last(client: &Client, reg: &Registration) {
    match service_answers(client, reg).await {
        Ok(n) => tracing::info!(ready = n, "other replicas answer admission; the webhooks stay"),
        Err(why) => {
            let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            let merge = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            match vwcs.patch(&reg.webhook_name, &merge, &Patch::Merge(json!({"webhooks": null}))).await {
                Ok(_) => tracing::info!(reason = %format!("{why:#}"), configuration = %reg.webhook_name,
                    "no other replica answers admission: took the webhooks out until one does"),
                Err(e) => tracing::info!(error = %e, configuration = %reg.webhook_name,
                    "no other replica answers admission, and its webhooks could not be taken out"),
            }
        }
    }
}

/// Every [`INTERVAL`] (every [`RETRY`] until a pass succeeds), forever. What a pass waits
/// for is logged when it changes, not every second.
pub async fn run(
    client: Client,
    reg: Registration,
    certs: Arc<CertResolver>,
    life: Lifetimes,
    passes: Family<RegistrationLabels, Counter>,
) {
    // Not yet registered: the first success is logged too.
    let mut last: Option<String> = Some(String::new());
    // A Secret issued by someone else is watched: its change starts a pass at once.
    let wake = Arc::new(tokio::sync::Notify::new());
    if let Some(name) = &reg.tls_secret {
        let api = Api::<Secret>::namespaced(client.clone(), &reg.service_namespace);
        tokio::spawn(issued::watch(api, name.clone(), wake.clone()));
    }
    loop {
        let result = reconcile(&client, &reg, &certs, &life).await;
        passes.get_or_create(&RegistrationLabels { outcome: outcome(&result) }).inc();
        let wait = match result {
            Ok(()) => {
                if last.take().is_some() {
                    tracing::info!(configuration = %reg.webhook_name, "admission webhooks registered");
                }
                INTERVAL
            }
            Err(e) => {
                let text = format!("{e:#}");
                if last.as_deref() != Some(text.as_str()) {
                    tracing::info!(error = %text, "admission registration not complete yet; retrying every second");
                    last = Some(text);
                }
                RETRY
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_become_object_selectors() {
        assert_eq!(object_selector("team=a").unwrap(), json!({"matchLabels": {"team": "a"}}));
        assert_eq!(
            object_selector("team==a, env in (x, y),!legacy,tier!=z,owned").unwrap(),
            json!({"matchLabels": {"team": "a"}, "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["x", "y"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "NotIn", "values": ["z"]},
                {"key": "owned", "operator": "Exists"}]})
        );
        assert!(object_selector("a b c").is_err());
    }

    #[test]
    fn names_differ_per_selector_and_the_configuration_is_narrow() {
        assert_eq!(default_webhook_name(None), "dco-operator-admission");
        assert_ne!(default_webhook_name(Some("team=a")), default_webhook_name(Some("team=b")));
        let reg = Registration {
            service_namespace: "dco-system".into(),
            service: "dco-operator-admission".into(),
            port: 443,
            target_port: 9443,
            pod_selector: None,
            webhook_name: default_webhook_name(Some("team=a")),
            object_selector: Some(object_selector("team=a").unwrap()),
            owner: Owner::Installer,
            xrd_guard: true,
            failure_policy: crate::cli::FailurePolicy::default(),
            tls_secret: None,
        };
        let ignoring = Registration { failure_policy: crate::cli::FailurePolicy::Ignore, ..reg.clone() };
        let v = ignoring.webhook_configuration("PEM");
        assert!(v["webhooks"].as_array().unwrap().iter().all(|h| h["failurePolicy"] == "Ignore"), "{v}");
        let v = reg.webhook_configuration("PEM");
        let hooks = v["webhooks"].as_array().unwrap();
        assert_eq!(hooks.len(), 2);
        for h in hooks {
            assert_eq!(h["failurePolicy"], "Fail");
            assert_eq!(h["sideEffects"], "None");
            assert_eq!(h["timeoutSeconds"], 5);
            assert_eq!(h["admissionReviewVersions"], json!(["v1"]));
            assert_eq!(h["rules"][0]["apiGroups"], json!(["conversion.dco.rs"]));
            assert_eq!(h["objectSelector"], json!({"matchLabels": {"team": "a"}}));
            assert_eq!(h["clientConfig"]["service"]["path"], "/validate");
        }
        assert_eq!(hooks[1]["operations"], Value::Null);
        assert_eq!(hooks[1]["rules"][0]["operations"], json!(["CREATE", "UPDATE", "DELETE"]));
        assert_eq!(
            hooks[0]["rules"][0]["resources"],
            json!(["crdconversionconfigs", "xrdconversionconfigs"])
        );
        // Filling an installer's configuration writes the same webhooks and none of its labels.
        let content = reg.webhook_content("PEM");
        assert_eq!(content["webhooks"], v["webhooks"]);
        assert_eq!(content["metadata"]["labels"], Value::Null);
        assert_eq!(content.get("apiVersion"), None);
        // The XRD guard: one webhook on XRD updates at every version, never blocking.
        assert_eq!(reg.guard_name(), format!("{}-xrd-guard", reg.webhook_name));
        let g = reg.guard_configuration("PEM");
        assert_eq!(g["kind"], "MutatingWebhookConfiguration");
        let hook = &g["webhooks"][0];
        assert_eq!(g["webhooks"].as_array().map(Vec::len), Some(1));
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate-xrd");
        assert_eq!(
            hook["rules"],
            json!([{"apiGroups": ["apiextensions.crossplane.io"], "apiVersions": ["*"], "operations": ["UPDATE"],
                "resources": ["compositeresourcedefinitions"], "scope": "Cluster"}])
        );
        assert_eq!(hook.get("objectSelector"), None, "XRDs carry no dco labels");
        assert_eq!(reg.guard_content("PEM")["webhooks"], g["webhooks"]);
    }

    fn pod(name: &str, ready: bool, ip: bool, terminating: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "deletionTimestamp": terminating.then_some("2026-01-01T00:00:00Z")},
            "status": {"podIP": ip.then_some("10.0.0.1"),
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    fn slice(ready: &[Option<bool>]) -> EndpointSlice {
        let eps: Vec<Value> =
            ready.iter().map(|r| json!({"addresses": ["10.0.0.1"], "conditions": {"ready": r}})).collect();
        serde_json::from_value(json!({"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": eps}))
            .unwrap()
    }

    #[test]
    fn each_pass_has_an_outcome() {
        assert_eq!(outcome(&Ok(())), "registered");
        assert_eq!(outcome(&Err(Waiting::NoConfiguration("x".into()).into())), "no_configuration");
        assert_eq!(outcome(&Err(Waiting::NobodyAnswers("x".into()).into())), "nobody_answers");
        assert_eq!(outcome(&Err(anyhow::anyhow!("403"))), "failed");
        // Context added on the way up keeps the classification.
        let wrapped: anyhow::Result<()> =
            Err(anyhow::Error::from(Waiting::NobodyAnswers("x".into())).context("pass"));
        assert_eq!(outcome(&wrapped), "nobody_answers");
    }

    #[test]
    fn webhooks_wait_for_a_pod_that_answers() {
        let svc = "dco/dco-admission";
        // Nothing selected, not Ready, no address yet, or terminating: nobody answers.
        assert!(answering(svc, &[], None).unwrap_err().contains("0 selected"));
        for p in [pod("a", false, true, false), pod("a", true, false, false), pod("a", true, true, true)] {
            assert!(answering(svc, &[p], None).is_err());
        }
        let ok = [pod("a", false, true, false), pod("b", true, true, false)];
        assert_eq!(answering(svc, &ok, None), Ok(1));
        // Where EndpointSlices exist they must agree; an empty list of them says nothing.
        assert_eq!(answering(svc, &ok, Some(&[])), Ok(1));
        assert_eq!(answering(svc, &ok, Some(&[slice(&[None])])), Ok(1));
        assert_eq!(answering(svc, &ok, Some(&[slice(&[Some(false)]), slice(&[Some(true)])])), Ok(1));
        let err = answering(svc, &ok, Some(&[slice(&[Some(false)]), slice(&[])])).unwrap_err();
        assert!(err.contains("no ready endpoint"), "{err}");
    }
}
