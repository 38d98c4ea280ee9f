//! The ConversionWebhookServer controller: applies the server's workload (Deployment,
//! Service, RBAC, serving certificate, HPA/PDB), aggregates its replicas' served-target
//! Leases into status, and holds its deletion while configs still need it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dco_api::{ANNOTATION_ALLOW_FORCE_DELETE, ConversionWebhookServer, FINALIZER_IN_USE, ServerStatus};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::instrument;

use self::certs::Current;
use self::names::ServerNames;
use crate::assigned::{self, ConfigRef};
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};
use crate::leases;
use dco_state::conditions;

pub const CONTROLLER: &str = "conversionwebhookserver";

pub mod certs;
pub mod desired;
pub mod names;

pub mod condition {
    pub const AVAILABLE: &str = "Available";
    pub const CERTIFICATE_READY: &str = "CertificateReady";
    pub const SERVICE_READY: &str = "ServiceReady";
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    pub const DEFAULT_CONFLICT: &str = "DefaultConflict";
}

/// Every config of both kinds, as the assignment rules see them.
pub fn config_refs(ctx: &Context) -> Vec<ConfigRef> {
    let mut out: Vec<ConfigRef> = ctx.stores.cccs.state().iter().map(|c| ConfigRef::of(c.as_ref())).collect();
    out.extend(ctx.stores.xccs.state().iter().map(|c| ConfigRef::of(c.as_ref())));
    out
}

#[instrument(skip(cws, ctx), fields(server = %cws.name_any()))]
pub async fn reconcile(cws: Arc<ConversionWebhookServer>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let api: Api<ConversionWebhookServer> = Api::all(ctx.client.clone());
    let name = cws.name_any();
    let out = finalizer(&api, FINALIZER_IN_USE, cws, |event| async {
        match event {
            Finalizer::Apply(c) => apply(&c, &ctx).await,
            Finalizer::Cleanup(c) => cleanup(&c, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer { kind: "ConversionWebhookServer", name, source: Box::new(e) });
    ctx.metrics.reconciled(CONTROLLER, started.elapsed());
    out
}

pub fn error_policy(cws: Arc<ConversionWebhookServer>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error);
    match error {
        Error::Finalizer { source, .. }
            if matches!(
                source.as_ref(),
                kube::runtime::finalizer::Error::CleanupFailed(Error::DeletionBlocked(_))
            ) =>
        {
            tracing::info!(server = %cws.name_any(), "{error}");
            Action::requeue(Duration::from_secs(15))
        }
        _ => {
            tracing::warn!(server = %cws.name_any(), "reconcile failed: {error}");
            Action::requeue(Duration::from_secs(10))
        }
    }
}

async fn ssa<K>(ctx: &Context, obj: &K, what: &'static str) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    K::Scope: ScopeApi<K>,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let ns = obj.meta().namespace.clone();
    let api = K::Scope::api(ctx.client.clone(), ns.as_deref());
    let label = match &ns {
        Some(ns) => format!("{ns}/{name}"),
        None => name.clone(),
    };
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map_err(Error::kube("apply", what, label))
}

/// Picks `Api::namespaced` or `Api::all` by the resource's scope.
pub trait ScopeApi<K> {
    fn api(client: kube::Client, namespace: Option<&str>) -> Api<K>;
}

impl<K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>> ScopeApi<K>
    for k8s_openapi::NamespaceResourceScope
{
    fn api(client: kube::Client, namespace: Option<&str>) -> Api<K> {
        Api::namespaced(client, namespace.unwrap_or("default"))
    }
}

impl<K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>> ScopeApi<K>
    for k8s_openapi::ClusterResourceScope
{
    fn api(client: kube::Client, _namespace: Option<&str>) -> Api<K> {
        Api::all(client)
    }
}

async fn delete_if_present<K>(ctx: &Context, namespace: &str, name: &str, what: &'static str) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::kube("delete", what, format!("{namespace}/{name}"))(e)),
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

async fn apply(cws: &ConversionWebhookServer, ctx: &Context) -> Result<Action> {
    let now = Timestamp::now();
    let names = ctx.names(cws);
    let gen_ = cws.metadata.generation;
    let server = cws.name_any();
    let Some(owner) = desired::owner(cws) else {
        return Err(Error::NotReady(format!("ConversionWebhookServer {server} has no uid yet")));
    };
    let mut status = cws.status.clone().unwrap_or_default();
    status.observed_generation = gen_;

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

    // RBAC first: Pods that start before their Role exist fail their first Lease writes.
    if let Some(sa) = desired::service_account(cws, &names, &owner) {
        ssa(ctx, &sa, "ServiceAccount").await?;
    }
    ssa(ctx, &desired::role(&names, &owner), "Role").await?;
    ssa(ctx, &desired::role_binding(cws, &names, &owner), "RoleBinding").await?;
    ssa(ctx, &desired::cluster_role(&names, &owner), "ClusterRole").await?;
    ssa(ctx, &desired::cluster_role_binding(cws, &names, &owner), "ClusterRoleBinding").await?;

    // The serving certificate.
    let mut cert_recheck = ctx.settings.resync;
    if cws.spec.certificate.is_some() {
        conditions::set(
            &mut status.conditions,
            condition::CERTIFICATE_READY,
            false,
            "CertManagerNotSupported",
            format!(
                "spec.certificate asks cert-manager to issue the serving certificate, which this operator version does not do yet; remove spec.certificate to let the operator manage Secret {}/{} itself",
                names.namespace, names.tls_secret
            ),
            gen_,
            now,
        );
    } else {
        let ca = read_secret(ctx, &names.namespace, &names.ca_secret).await?;
        let tls = read_secret(ctx, &names.namespace, &names.tls_secret).await?;
        let (ca_data, tls_data) = (secret_data(&ca), secret_data(&tls));
        let outcome = certs::ensure(
            &server,
            &names.service_host(),
            Current { ca: ca_data.as_ref(), tls: tls_data.as_ref() },
            now.as_second(),
            &ctx.settings.cert_lifetimes,
        )
        .map_err(|source| Error::Certificate { server: server.clone(), source })?;
        if let Some(data) = &outcome.write_ca {
            ssa(ctx, &desired::secret(&names.ca_secret, "Opaque", data, &names, &owner), "Secret").await?;
        }
        if let Some(data) = &outcome.write_tls {
            ssa(
                ctx,
                &desired::secret(&names.tls_secret, "kubernetes.io/tls", data, &names, &owner),
                "Secret",
            )
            .await?;
        }
        if !outcome.reasons.is_empty() {
            ctx.event(cws, false, "CertificateIssued", "Apply", outcome.reasons.join("; ")).await;
        }
        let renew_at = outcome.leaf_not_after
            - ctx.settings.cert_lifetimes.leaf_renew_before_days * 86_400
            - now.as_second();
        cert_recheck = cert_recheck.min(Duration::from_secs(u64::try_from(renew_at.max(60)).unwrap_or(60)));
        conditions::set(
            &mut status.conditions,
            condition::CERTIFICATE_READY,
            true,
            "SelfManaged",
            format!(
                "Secret {}/{} holds a certificate for {} valid until {}",
                names.namespace,
                names.tls_secret,
                names.service_host(),
                Timestamp::from_second(outcome.leaf_not_after).map(|t| t.to_string()).unwrap_or_default()
            ),
            gen_,
            now,
        );
    }

    let svc = ssa(ctx, &desired::service(cws, &names, &owner), "Service").await?;
    let port =
        svc.spec.as_ref().and_then(|s| s.ports.as_ref()).and_then(|p| p.first()).map_or(443, |p| p.port);
    status.endpoint = Some(format!("https://{}:{port}", names.service_host()));
    conditions::set(
        &mut status.conditions,
        condition::SERVICE_READY,
        true,
        "Applied",
        format!("Service {}/{} routes port {port} to the webhook Pods", names.namespace, names.service()),
        gen_,
        now,
    );

    let deploy = ssa(ctx, &desired::deployment(cws, &names, &ctx.settings, &owner), "Deployment").await?;
    match desired::hpa(cws, &names, &owner) {
        Some(h) => drop(ssa(ctx, &h, "HorizontalPodAutoscaler").await?),
        None => {
            delete_if_present::<HorizontalPodAutoscaler>(
                ctx,
                &names.namespace,
                &names.workload,
                "HorizontalPodAutoscaler",
            )
            .await?
        }
    }
    match desired::pdb(cws, &names, &owner) {
        Some(p) => drop(ssa(ctx, &p, "PodDisruptionBudget").await?),
        None => {
            delete_if_present::<PodDisruptionBudget>(
                ctx,
                &names.namespace,
                &names.workload,
                "PodDisruptionBudget",
            )
            .await?
        }
    }

    let ds = deploy.status.unwrap_or_default();
    status.replicas = ds.replicas.unwrap_or(0);
    status.ready_replicas = ds.ready_replicas.unwrap_or(0);
    let desired = deploy.spec.replicas.unwrap_or(status.replicas);
    let available = status.ready_replicas > 0;
    conditions::set(
        &mut status.conditions,
        condition::AVAILABLE,
        available,
        if available { "ReplicasReady" } else { "NoReadyReplicas" },
        format!(
            "{} of {desired} replicas of Deployment {}/{} are ready",
            status.ready_replicas, names.namespace, names.workload
        ),
        gen_,
        now,
    );

    let next = finish_status(cws, ctx, &names, &mut status, now);
    write_status(ctx, cws, &status).await?;
    let wait = next.min(cert_recheck).min(ctx.settings.resync);
    Ok(Action::requeue(wait))
}

/// The parts of status computed from caches: served targets, assignments, default conflicts.
/// Returns when to look again for Lease expiry.
fn finish_status(
    cws: &ConversionWebhookServer,
    ctx: &Context,
    names: &ServerNames,
    status: &mut ServerStatus,
    now: Timestamp,
) -> Duration {
    let server = cws.name_any();
    let leases = ctx.stores.leases.state();
    let agg = leases::aggregate(leases.iter().map(|l| l.as_ref()), &server, &names.namespace, now);
    agg.write_to(status);

    let servers = ctx.servers();
    status.assigned_configs = assigned::assigned_to(&config_refs(ctx), &servers, &server);

    let others: Vec<String> = ctx
        .stores
        .servers
        .state()
        .iter()
        .filter(|s| s.spec.default && s.name_any() != server && s.meta().deletion_timestamp.is_none())
        .map(|s| s.name_any())
        .collect();
    if cws.spec.default && !others.is_empty() {
        conditions::set(
            &mut status.conditions,
            condition::DEFAULT_CONFLICT,
            true,
            "SeveralDefaults",
            format!(
                "ConversionWebhookServers {others:?} also have spec.default: true; set it on only one — until then targets that need the default server cannot be resolved"
            ),
            cws.metadata.generation,
            now,
        );
    } else {
        conditions::remove(&mut status.conditions, condition::DEFAULT_CONFLICT);
    }

    // Look again just after the first live Lease would lapse, so a dead replica leaves the
    // intersection even though no watch event announces it.
    agg.next_expiry
        .and_then(|e| u64::try_from(e.as_second() - now.as_second() + 1).ok())
        .map_or(ctx.settings.resync, |s| Duration::from_secs(s.max(1)))
}

async fn write_status(ctx: &Context, cws: &ConversionWebhookServer, status: &ServerStatus) -> Result<()> {
    dco_state::status::apply(&ctx.client, cws, status, FIELD_MANAGER).await.map_err(Error::kube(
        "write status of",
        "ConversionWebhookServer",
        cws.name_any(),
    ))
}

async fn cleanup(cws: &ConversionWebhookServer, ctx: &Context) -> Result<Action> {
    let server = cws.name_any();
    let now = Timestamp::now();
    let forced = cws.annotations().get(ANNOTATION_ALLOW_FORCE_DELETE).is_some_and(|v| v == "true");
    let blockers = assigned::deletion_blockers(&config_refs(ctx), &ctx.servers(), &server);
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
    let mut status = cws.status.clone().unwrap_or_default();
    let names = ctx.names(cws);
    conditions::set(
        &mut status.conditions,
        condition::DELETION_BLOCKED,
        true,
        "ConfigsStillAssigned",
        message.clone(),
        cws.metadata.generation,
        now,
    );
    finish_status(cws, ctx, &names, &mut status, now);
    write_status(ctx, cws, &status).await?;
    ctx.event(cws, true, "DeletionBlocked", "Delete", message.clone()).await;
    Err(Error::DeletionBlocked(format!("ConversionWebhookServer {server}: {message}")))
}
