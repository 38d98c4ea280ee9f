//! The config wing: the XRDConversionConfig and CRDConversionConfig controllers (one generic
//! reconciler). A config's reconcile is one `dco_state::drive` of the handover machine
//! through [`driver::ConfigDriver`]: observe (`facts.rs`) → settle → execute the wiring
//! (`target.rs`) → render status (`status.rs`). Deletion reverts the target (`deletion.rs`).

use std::marker::PhantomData;

use dco_api::{ConfigStatus, FINALIZER_SAFE_REVERT};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::kinds::ConfigKind;
use crate::reconcile::Wing;

pub mod conflict;
pub mod deletion;
pub mod driver;
pub mod facts;
pub mod propagation;
pub mod reverts;
pub mod status;
pub mod target;
pub mod test_hook;
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

/// How many times one reconcile reads again after a write's precondition failed; past that,
/// the reconcile shape retries it after a renew interval (`crate::reconcile`).
const MAX_CONFLICTS: usize = 2;

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
        let mut conflicts = 0;
        loop {
            let Some(fresh) = api.get_opt(&name).await.map_err(Error::kube("read", K::KIND, &name))? else {
                return Ok(Action::await_change());
            };
            match dco_state::drive::drive(&mut driver::ConfigDriver::<K>::new(ctx), &fresh).await {
                Ok(driven) => return Ok(Action::requeue(driven.requeue)),
                // A write's precondition failed: the target or the config changed since this
                // reconcile read them (docs/sharding.md, "After a pause"). Read both again and
                // decide again, fenced like the first time; a few times at most.
                Err(e) if e.is_conflict() && conflicts < MAX_CONFLICTS => {
                    conflicts += 1;
                    tracing::info!("{e}; reading the config and its target again");
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn cleanup(cfg: &K, ctx: &Context) -> Result<Action> {
        deletion::revert(cfg, ctx).await
    }
}
