//! The ConversionWebhookServer controller: applies the server's workload (Deployment,
//! Service, RBAC, serving certificate, HPA/PDB), aggregates its replicas' served-target
//! Leases into status, and holds its deletion while configs still need it.
//!
//! An apply reads as: the desired objects (`desired`, pure) → whether anything changed since
//! the last apply (`idle`, pure) → if so, apply-and-prune of what the server owns (`owned`)
//! with the certificate step (`crate::pki`) among the applies → the Lease aggregate and
//! assignments from the caches (and, while replicas are missing, one page of the server's
//! Pods) → the status (`status::render`, pure) → one status write, if it changed.

use std::time::{Duration, Instant};

use dco_api::{ANNOTATION_ALLOW_FORCE_DELETE, ConversionWebhookServer, FINALIZER_IN_USE, ServerStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use self::owned::OwnedObjects;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kinds::{self, ConfigRef};
use crate::names::ServerNames;
use crate::pki::{self, Current};
use crate::reconcile::{Wing, write_status};
use crate::served;

pub const CONTROLLER: &str = "conversionwebhookserver";

pub mod cert_manager;
pub mod desired;
pub mod idle;
pub mod owned;
pub mod status;
#[cfg(test)]
mod tests;

pub mod condition {
    pub const AVAILABLE: &str = "Available";
    pub const CERTIFICATE_READY: &str = "CertificateReady";
    pub const SERVICE_READY: &str = "ServiceReady";
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    pub const DEFAULT_CONFLICT: &str = "DefaultConflict";
}

/// The server wing in the one reconcile shape (`crate::reconcile`): runtime/controllers.rs
/// runs `reconcile::<ServerWing>`.
pub struct ServerWing;

impl Wing for ServerWing {
    type Object = ConversionWebhookServer;
    type Status = ServerStatus;
    const KIND: &'static str = "ConversionWebhookServer";
    const FINALIZER: &'static str = FINALIZER_IN_USE;

    fn controller() -> String {
        CONTROLLER.to_string()
    }

    fn span(cws: &ConversionWebhookServer) -> tracing::Span {
        tracing::info_span!("reconcile", server = %cws.name_any())
    }

    async fn apply(cws: &ConversionWebhookServer, ctx: &Context) -> Result<Action> {
        apply(cws, ctx).await
    }

    async fn cleanup(cws: &ConversionWebhookServer, ctx: &Context) -> Result<Action> {
        cleanup(cws, ctx).await
    }
}

async fn read_secret(ctx: &Context, namespace: &str, name: &str) -> Result<Option<Secret>> {
    // Read from the apiserver, not the cache: a stale cache would mint a second CA.
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    api.get_opt(name).await.map_err(Error::kube("read", "Secret", format!("{namespace}/{name}")))
}

fn secret_data(s: &Option<Secret>) -> Option<std::collections::BTreeMap<String, Vec<u8>>> {
    s.as_ref()
        .and_then(|s| s.data.as_ref())
        .map(|d| d.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
}

/// Every config of both kinds under `--selector` (`kinds::config_refs`).
async fn config_refs(ctx: &Context) -> Result<Vec<ConfigRef>> {
    kinds::config_refs(&ctx.client, ctx.settings.selector.as_deref()).await
}

async fn apply(cws: &ConversionWebhookServer, ctx: &Context) -> Result<Action> {
    let now = Timestamp::now();
    let names = ctx.names(cws);
    let server = cws.name_any();
    let Some(owner) = desired::owner(cws) else {
        return Err(Error::NotReady(format!("ConversionWebhookServer {server} has no uid yet")));
    };
    if let Some(message) = ctx.settings.server_namespaces.refusal(&server, &names.namespace) {
        return refuse_namespace(cws, ctx, &names, now, message).await;
    }
    let objects = desired::objects(cws, &names, &ctx.settings, &owner);
    let desired = fingerprint(cws, &objects);
    let last = ctx.memos.with(|m: &mut idle::Memo| m.0.get(&owner.uid).cloned());
    let clock = Instant::now();
    let seen = seen_versions(ctx, &names);
    let applied = match (idle::plan(last.as_ref(), desired, &seen, clock), last) {
        (idle::Plan::Quiet, Some(last)) => match quiet(ctx, &names, &last) {
            Some(applied) => applied,
            None => apply_objects(cws, ctx, &names, &owner, &objects, (desired, true), now).await?,
        },
        (idle::Plan::Apply { prune, why }, _) => {
            tracing::debug!(server = %server, prune, "applying the server's objects: {why}");
            apply_objects(cws, ctx, &names, &owner, &objects, (desired, prune), now).await?
        }
        (idle::Plan::Quiet, None) => unreachable!("a quiet plan needs a last apply"),
    };
    let pod_failures = if applied.workload.missing() { failing_pods(ctx, &names).await } else { Vec::new() };
    let configs = ctx.watched.config_refs.all();
    let mut f = facts(cws, ctx, &names, now, &configs, Some(applied), None);
    f.pod_failures = pod_failures;
    let rendered = status::render(cws.status.as_ref(), &f);
    // An unchanged status is not written again: an idle server costs no request.
    if cws.status.as_ref() != Some(&rendered.status) {
        tracing::debug!(server = %server, "writing the status: it changed");
        write_status::<ServerWing>(ctx, cws, &rendered.status).await?;
    }
    // After the status write: a failed write sends nothing, and the retry says it then.
    for f in &rendered.events {
        pod_failing_event(ctx, cws, f).await;
    }
    let due =
        ctx.memos.with(|m: &mut idle::Memo| m.0.get(&owner.uid).map(|a| a.certificate_due.min(a.resync_due)));
    let until_due = due.map_or(idle::FULL_RESYNC, |d| d.saturating_duration_since(Instant::now()));
    let wait = rendered
        .lease_recheck
        .unwrap_or(until_due)
        .min(rendered.pods_recheck.unwrap_or(until_due))
        .min(until_due)
        // Never a busy loop on a due time just passed.
        .max(Duration::from_secs(1));
    Ok(Action::requeue(wait))
}

/// The fingerprint of what a full apply would write: the desired objects and the
/// certificate's spec (`idle::plan` compares it with the last apply's).
fn fingerprint(cws: &ConversionWebhookServer, o: &desired::Objects) -> u64 {
    let v = |x: serde_json::Result<serde_json::Value>| x.unwrap_or_default();
    idle::fingerprint(&[
        v(serde_json::to_value(&o.service_account)),
        v(serde_json::to_value(&o.role)),
        v(serde_json::to_value(&o.role_binding)),
        v(serde_json::to_value(&o.cluster_role)),
        v(serde_json::to_value(&o.cluster_role_binding)),
        v(serde_json::to_value(&o.service)),
        v(serde_json::to_value(&o.deployment)),
        v(serde_json::to_value(&o.hpa)),
        v(serde_json::to_value(&o.pdb)),
        v(serde_json::to_value(&cws.spec.certificate)),
    ])
}

/// The resourceVersions of the server's Deployment, Service and Secrets as their watches
/// show them now.
fn seen_versions(ctx: &Context, names: &ServerNames) -> idle::Versions {
    let ns = &names.namespace;
    let rv = |m: &kube::api::ObjectMeta| m.resource_version.clone();
    let secret =
        |name: &str| ctx.stores.secrets.get(&ObjectRef::new(name).within(ns)).and_then(|s| rv(s.meta()));
    idle::Versions {
        deployment: ctx
            .watched
            .deployments
            .get(&ObjectRef::new(&names.workload).within(ns))
            .and_then(|d| rv(d.meta())),
        service: ctx
            .watched
            .services
            .get(&ObjectRef::new(names.service()).within(ns))
            .and_then(|s| rv(s.meta())),
        ca: secret(&names.ca_secret),
        tls: secret(&names.tls_secret),
    }
}

/// What the status reads of the workload, from the cached Deployment and the last apply:
/// `None` if the Deployment is not cached (then the reconcile applies after all).
fn quiet(ctx: &Context, names: &ServerNames, last: &idle::Applied) -> Option<status::Applied> {
    let key = ObjectRef::new(&names.workload).within(&names.namespace);
    let deploy = ctx.watched.deployments.get(&key)?;
    Some(status::Applied {
        workload: workload(&deploy),
        service_port: last.service_port,
        certificate: last.certificate.clone(),
    })
}

fn workload(deploy: &Deployment) -> status::Workload {
    let ds = deploy.status.clone().unwrap_or_default();
    let replicas = ds.replicas.unwrap_or(0);
    status::Workload {
        replicas,
        ready: ds.ready_replicas.unwrap_or(0),
        desired: deploy.spec.replicas.unwrap_or(replicas),
    }
}

/// The full apply: every desired object (RBAC first, then the certificate, the Service and
/// the Deployment), the prune when `prune`, and the memo of what it left
/// (`idle::Applied`, keyed by the server's uid).
async fn apply_objects(
    cws: &ConversionWebhookServer,
    ctx: &Context,
    names: &ServerNames,
    owner: &OwnerReference,
    objects: &desired::Objects,
    (desired, prune): (u64, bool),
    now: Timestamp,
) -> Result<status::Applied> {
    let server = cws.name_any();
    let (_, refused) = desired::split_extra_args(&cws.spec.extra_args);
    if !refused.is_empty() {
        ctx.event(
            cws,
            true,
            "ExtraArgsRefused",
            "Apply",
            format!(
                "spec.extraArgs {refused:?} override flags the operator manages ({}); they are ignored — remove them",
                desired::MANAGED_FLAGS.join(", ")
            ),
        )
        .await;
    }
    let mut owned = OwnedObjects::new(ctx.client.clone(), names, owner);
    // RBAC first: Pods that start before their Role exist fail their first Lease writes.
    if let Some(sa) = &objects.service_account {
        owned.add(sa).await?;
    }
    owned.add(&objects.role).await?;
    owned.add(&objects.role_binding).await?;
    owned.add(&objects.cluster_role).await?;
    owned.add(&objects.cluster_role_binding).await?;
    // Then the serving Secret, before the Deployment whose Pods mount it.
    let (certificate, cert_recheck) = certificate(cws, ctx, names, owner, &mut owned, now).await?;
    let svc = owned.add(&objects.service).await?;
    let deploy = owned.add(&objects.deployment).await?;
    if let Some(h) = &objects.hpa {
        owned.add(h).await?;
    }
    if let Some(p) = &objects.pdb {
        owned.add(p).await?;
    }
    if prune {
        for gone in owned.prune().await? {
            tracing::info!(server = %server, "pruned {gone}: no longer in the desired objects");
        }
    }
    let service_port =
        svc.spec.as_ref().and_then(|s| s.ports.as_ref()).and_then(|p| p.first()).map_or(443, |p| p.port);
    let clock = Instant::now();
    // The Secrets as their watch shows them: a write just made reaches it a moment later and
    // costs one more apply then, which finds nothing to write.
    let mut versions = seen_versions(ctx, names);
    versions.deployment = deploy.metadata.resource_version.clone();
    versions.service = svc.metadata.resource_version.clone();
    let applied = idle::Applied {
        desired,
        versions,
        certificate: certificate.clone(),
        service_port,
        certificate_due: clock + cert_recheck,
        resync_due: clock + idle::jittered(idle::FULL_RESYNC),
    };
    ctx.memos.with(|m: &mut idle::Memo| m.0.insert(owner.uid.clone(), applied));
    Ok(status::Applied { workload: workload(&deploy), service_port, certificate })
}

/// A Warning Event about the server that relates the failing Pod: the recorder folds Events
/// with the same reason and references into one series, so without the Pod a second Pod's
/// failure would only count up the first's.
async fn pod_failing_event(ctx: &Context, cws: &ConversionWebhookServer, f: &status::PodFailure) {
    let pod = ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        name: Some(f.pod.clone()),
        namespace: Some(f.namespace.clone()),
        uid: f.uid.clone(),
        ..ObjectReference::default()
    };
    let ev = KubeEvent {
        type_: EventType::Warning,
        reason: status::PODS_FAILING.to_string(),
        note: Some(f.line()),
        action: "Apply".to_string(),
        secondary: Some(pod),
    };
    if let Err(e) = ctx.recorder.publish(&ev, &cws.object_ref(&())).await {
        tracing::warn!(server = %cws.name_any(), error = %e, "cannot record an Event");
    }
}

/// The failing containers among the first `status::PODS_PAGE` of the server's webhook Pods
/// (one list, by the Deployment's selector). A list that fails (RBAC without list on pods, as
/// before the chart granted it) leaves the status at the replica count and is logged.
async fn failing_pods(ctx: &Context, names: &ServerNames) -> Vec<status::PodFailure> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let selector = names.selector().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    match api.list(&ListParams::default().labels(&selector).limit(status::PODS_PAGE)).await {
        Ok(pods) => status::pod_failures(&pods.items),
        Err(e) => {
            tracing::warn!(
                server = %names.server,
                "cannot list the Pods of Deployment {}/{} ({selector}) to say why replicas are not ready: {e}; the operator needs list on pods there (docs/installation.md, \"RBAC\")",
                names.namespace,
                names.workload
            );
            Vec::new()
        }
    }
}

/// `Available=False` with why, and one Warning Event when it first says so: the server's
/// namespace is not one the operator watches (`--server-namespaces`), so nothing is applied
/// there — its Secrets could be neither watched nor, with the chart's RBAC, read. Looked at
/// again every --resync; a spec change or a restart with the namespace added runs it.
async fn refuse_namespace(
    cws: &ConversionWebhookServer,
    ctx: &Context,
    names: &ServerNames,
    now: Timestamp,
    message: String,
) -> Result<Action> {
    let said = cws.status.as_ref().and_then(|s| {
        dco_state::conditions::find(&s.conditions, condition::AVAILABLE)
            .filter(|c| c.reason == NAMESPACE_NOT_WATCHED && c.message == message)
    });
    let configs = ctx.watched.config_refs.all();
    let mut rendered =
        status::render(cws.status.as_ref(), &facts(cws, ctx, names, now, &configs, None, None));
    rendered.status.observed_generation = cws.metadata.generation;
    dco_state::conditions::set(
        &mut rendered.status.conditions,
        condition::AVAILABLE,
        false,
        NAMESPACE_NOT_WATCHED,
        message.clone(),
        cws.metadata.generation,
        now,
    );
    write_status::<ServerWing>(ctx, cws, &rendered.status).await?;
    if said.is_none() {
        ctx.event(cws, true, NAMESPACE_NOT_WATCHED, "Apply", message.clone()).await;
    }
    tracing::warn!(server = %cws.name_any(), "{message}");
    Ok(Action::requeue(ctx.settings.resync))
}

/// The reason of a server refused for its namespace (`refuse_namespace`).
pub const NAMESPACE_NOT_WATCHED: &str = "NamespaceNotWatched";

/// The serving certificate: cert-manager's when `spec.certificate` asks for it
/// (`cert_manager`), else the self-managed CA and leaf, rewritten through `owned` when they
/// must change. Returns how it stands and when to look again for renewal.
async fn certificate(
    cws: &ConversionWebhookServer,
    ctx: &Context,
    names: &ServerNames,
    owner: &OwnerReference,
    owned: &mut OwnedObjects,
    now: Timestamp,
) -> Result<(status::Certificate, Duration)> {
    // Both Secrets stay whether or not this reconcile rewrites them (or reads them at all):
    // the config controller reads the CA from the serving Secret (`Context::ca_bundle`).
    owned.keep::<Secret>(&names.tls_secret);
    if let Some(spec) = &cws.spec.certificate {
        let tls = read_secret(ctx, &names.namespace, &names.tls_secret).await?;
        // cert-manager's Certificate and the Secret's hand-over are writes too.
        ctx.fence("a server's certificate")?;
        let out = cert_manager::ensure(ctx, cws, spec, names, owner, tls.as_ref()).await?;
        if out.keep_ca {
            owned.keep::<Secret>(&names.ca_secret);
        }
        return Ok((status::Certificate::CertManager(out.standing), out.recheck.min(ctx.settings.resync)));
    }
    owned.keep::<Secret>(&names.ca_secret);
    let server = cws.name_any();
    let ca = read_secret(ctx, &names.namespace, &names.ca_secret).await?;
    let tls = read_secret(ctx, &names.namespace, &names.tls_secret).await?;
    // Taking the Secret back from cert-manager: keep its leaf (and trust its CA) rather than
    // the operator's old CA (`cert_manager::release`).
    ctx.fence("a server's certificate")?;
    let ca = if cert_manager::release(ctx, cws, names, owner, tls.as_ref()).await? { None } else { ca };
    let (ca_data, tls_data) = (secret_data(&ca), secret_data(&tls));
    let outcome = pki::ensure(
        &server,
        &names.service_host(),
        Current { ca: ca_data.as_ref(), tls: tls_data.as_ref() },
        now.as_second(),
        &ctx.settings.cert_lifetimes,
    )
    .map_err(|source| Error::Certificate { server: server.clone(), source })?;
    if let Some(data) = &outcome.write_ca {
        owned.add(&desired::secret(&names.ca_secret, "Opaque", data, names, owner)).await?;
    }
    if let Some(data) = &outcome.write_tls {
        owned.add(&desired::secret(&names.tls_secret, "kubernetes.io/tls", data, names, owner)).await?;
    }
    if !outcome.reasons.is_empty() {
        ctx.event(cws, false, "CertificateIssued", "Apply", outcome.reasons.join("; ")).await;
    }
    let renew_at = outcome.leaf_not_after
        - ctx.settings.cert_lifetimes.leaf_renew_before_days * 86_400
        - now.as_second();
    // Not capped by --resync: the Secrets are watched (a change wakes the server and shows in
    // `idle::Versions`), and the slow resync applies everything anyway.
    let recheck = Duration::from_secs(u64::try_from(renew_at.max(60)).unwrap_or(60));
    Ok((status::Certificate::SelfManaged { leaf_not_after: outcome.leaf_not_after }, recheck))
}

/// The status facts both paths read from the caches (served targets, assignments, other
/// defaults) next to what this reconcile did.
fn facts<'a>(
    cws: &ConversionWebhookServer,
    ctx: &Context,
    names: &'a ServerNames,
    now: Timestamp,
    configs: &[ConfigRef],
    applied: Option<status::Applied>,
    deletion_blocked: Option<String>,
) -> status::StatusInputs<'a> {
    let server = cws.name_any();
    let leases = ctx.stores.leases.state();
    let other_defaults = ctx
        .stores
        .servers
        .state()
        .iter()
        .filter(|s| s.spec.default && s.name_any() != server && s.meta().deletion_timestamp.is_none())
        .map(|s| s.name_any())
        .collect();
    status::StatusInputs {
        names,
        generation: cws.metadata.generation,
        now,
        applied,
        deletion_blocked,
        leases: served::aggregate(leases.iter().map(|l| l.as_ref()), &server, &names.namespace, now),
        assigned: kinds::assigned_to(configs, &ctx.servers(), &server),
        default: cws.spec.default,
        other_defaults,
        pod_failures: Vec::new(),
    }
}

async fn cleanup(cws: &ConversionWebhookServer, ctx: &Context) -> Result<Action> {
    let server = cws.name_any();
    let now = Timestamp::now();
    let forced = cws.annotations().get(ANNOTATION_ALLOW_FORCE_DELETE).is_some_and(|v| v == "true");
    // Read now, not from a cache: a config that appeared since would lose its server.
    let configs = config_refs(ctx).await?;
    let blockers = kinds::deletion_blockers(&configs, &ctx.servers(), &server);
    if blockers.is_empty() || forced {
        if forced && !blockers.is_empty() {
            ctx.event(
                cws,
                true,
                "ForceDeleted",
                "Delete",
                format!(
                    "deleted while {} still need it ({ANNOTATION_ALLOW_FORCE_DELETE}=true)",
                    blockers.join(", ")
                ),
            )
            .await;
        }
        // The owned objects go with the server through garbage collection.
        return Ok(Action::await_change());
    }
    let message = format!(
        "deletion waits until no config resolves to or is served by this server: {}; move or delete them (a pool member's targets move on their own), or annotate the server {ANNOTATION_ALLOW_FORCE_DELETE}=true",
        blockers.join(", ")
    );
    let names = ctx.names(cws);
    let rendered = status::render(
        cws.status.as_ref(),
        &facts(cws, ctx, &names, now, &configs, None, Some(message.clone())),
    );
    write_status::<ServerWing>(ctx, cws, &rendered.status).await?;
    ctx.event(cws, true, "DeletionBlocked", "Delete", message.clone()).await;
    Err(Error::DeletionBlocked(format!("ConversionWebhookServer {server}: {message}")))
}
