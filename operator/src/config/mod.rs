//! The config wing: the XRDConversionConfig and CRDConversionConfig controllers (one generic
//! reconciler). A config's reconcile is one `dco_state::drive` of the handover machine
//! through [`driver::ConfigDriver`]: observe (`facts.rs`) → settle → execute the wiring
//! (`target.rs`) → render status (`status.rs`). Deletion reverts the target (`revert`).

use std::marker::PhantomData;

use dco_api::config::Phase;
use dco_api::{ANNOTATION_ALLOW_UNSAFE_DELETE, ConfigStatus, FINALIZER_SAFE_REVERT};
use dco_state::conditions;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use self::facts::wired_server;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kinds::ConfigKind;
use crate::reconcile::{Wing, write_status};

pub mod conflict;
pub mod driver;
pub mod facts;
pub mod propagation;
pub mod reverts;
pub mod status;
pub mod target;
#[cfg(test)]
mod tests;
pub mod xrds;

pub mod condition {
    pub const VALIDATED: &str = "Validated";
    pub const TARGET_HEALTHY: &str = "TargetHealthy";
    pub const WEBHOOK_SERVER_READY: &str = "WebhookServerReady";
    pub const APPLIED: &str = "Applied";
    pub const STALE: &str = "Stale";
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// Another config names the same target (`conflict.rs`); True on both while it lasts.
    pub const CONFLICT: &str = "Conflict";
    /// XRD targets: every CRD Crossplane generated from the XRD carries dco's wiring.
    pub const CONVERSION_PROPAGATED: &str = "ConversionPropagated";
    /// XRD targets: a Crossplane package owns the XRD (its package manager rewrites it).
    pub const PACKAGE_MANAGED: &str = "PackageManaged";
}

/// The config wing of kind `K` in the one reconcile shape (`crate::reconcile`):
/// runtime/controllers.rs runs `reconcile::<ConfigWing<K>>` for each config kind.
pub struct ConfigWing<K>(PhantomData<K>);

impl<K: ConfigKind> Wing for ConfigWing<K> {
    type Object = K;
    type Status = ConfigStatus;
    const KIND: &'static str = K::KIND;
    const FINALIZER: &'static str = FINALIZER_SAFE_REVERT;

    fn controller() -> String {
        K::kind(&()).to_lowercase()
    }

    fn span(cfg: &K) -> tracing::Span {
        tracing::info_span!("reconcile", kind = K::KIND, config = %cfg.name_any(), target = %cfg.target_name())
    }

    async fn apply(cached: &K, ctx: &Context) -> Result<Action> {
        // The persisted handover state must be the latest: a reconcile woken by our own target
        // patch may run before the cache has our last status write, and stepping the machine
        // from a stale state would start a bogus move (with the new server as its "source").
        let api: Api<K> = Api::all(ctx.client.clone());
        let name = cached.name_any();
        let Some(fresh) = api.get_opt(&name).await.map_err(Error::kube("read", K::KIND, name))? else {
            return Ok(Action::await_change());
        };
        let driven = dco_state::drive::drive(&mut driver::ConfigDriver::<K>::new(ctx), &fresh).await?;
        Ok(Action::requeue(driven.requeue))
    }

    async fn cleanup(cfg: &K, ctx: &Context) -> Result<Action> {
        revert(cfg, ctx).await
    }
}

async fn revert<K: ConfigKind>(cfg: &K, ctx: &Context) -> Result<Action> {
    let now = Timestamp::now();
    let tkind = cfg.target_kind();
    let tname = cfg.target_name().to_string();
    let tkind_name = tkind.kind_name();
    let Some(live) = target::fetch(ctx, tkind, &tname).await? else {
        return Ok(Action::await_change());
    };
    let Some(server) = wired_server(ctx, &live) else {
        // Not wired to any dco server: nothing of ours to take back.
        return Ok(Action::await_change());
    };
    // Another config names the target (conflict.rs): the wiring is, or becomes, that one's.
    // Reverting it would leave the other config's target unconverted ("delete one of them"
    // must be safe whichever one goes).
    let configs = crate::kinds::configs_naming(&ctx.client, ctx.settings.selector.as_deref(), &tname).await?;
    let others = match conflict::judge(K::KIND, &cfg.name_any(), &tname, &configs) {
        conflict::ConflictStanding::Alone => None,
        conflict::ConflictStanding::Chosen { ignored } => Some(ignored.join(", ")),
        conflict::ConflictStanding::Ignored { chosen } => Some(chosen),
    };
    if let Some(others) = others {
        ctx.event(
            cfg,
            false,
            "RevertSkipped",
            "Delete",
            format!(
                "left {tkind_name} {tname}'s spec.conversion wired to ConversionWebhookServer {server}: {others} names it too"
            ),
        )
        .await;
        return Ok(Action::await_change());
    }
    let served = target::served_versions(&live);
    let allowed = cfg.annotations().get(ANNOTATION_ALLOW_UNSAFE_DELETE).is_some_and(|v| v == "true");
    let mut st = cfg.config_status().cloned().unwrap_or_default();
    if served > 1 && !allowed {
        let msg = format!(
            "{tkind_name} {tname} serves {served} versions and converts through ConversionWebhookServer {server}; deleting this config would leave objects unreadable at other versions. Stop serving all but one version first, or annotate the config {ANNOTATION_ALLOW_UNSAFE_DELETE}=true"
        );
        conditions::set(
            &mut st.conditions,
            condition::DELETION_BLOCKED,
            true,
            "TargetServesSeveralVersions",
            msg.clone(),
            cfg.meta().generation,
            now,
        );
        write_status::<ConfigWing<K>>(ctx, cfg, &st).await?;
        ctx.event(cfg, true, "DeletionBlocked", "Delete", msg.clone()).await;
        return Err(Error::DeletionBlocked(format!("{} {}: {msg}", K::KIND, cfg.name_any())));
    }
    st.phase = Some(Phase::Reverting);
    write_status::<ConfigWing<K>>(ctx, cfg, &st).await?;
    target::unwire(ctx, tkind, &tname).await?;
    ctx.metrics.target_patches.inc();
    ctx.event(
        cfg,
        false,
        "Reverted",
        "Delete",
        format!(
            "reverted {tkind_name} {tname}'s spec.conversion to None (was ConversionWebhookServer {server})"
        ),
    )
    .await;
    Ok(Action::await_change())
}
