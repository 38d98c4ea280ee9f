//! The config wing: the XRDConversionConfig and CRDConversionConfig controllers (one generic
//! reconciler). A config's reconcile is one `dco_state::drive` of the handover machine
//! through [`driver::ConfigDriver`]: observe (`facts.rs`) → settle → execute the wiring
//! (`target.rs`) → render status (`status.rs`). Deletion reverts the target (`deletion.rs`).
//! A wake of a config at rest with nothing changed does none of it (`idle.rs`).

use std::marker::PhantomData;
use std::time::Instant;

use dco_api::config::TargetKind;
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
pub mod idle;
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
        let uid = cached.uid().unwrap_or_default();
        let last = ctx.memos.with(|m: &mut idle::Memo| m.get(&uid).cloned());
        let seen = seen(cached, ctx, last.as_ref()).await;
        match idle::plan(last.as_ref(), &seen, Instant::now()) {
            idle::Plan::Quiet { requeue } => return Ok(Action::requeue(requeue)),
            idle::Plan::Look { why } => tracing::debug!(why, "looking at the config and its target"),
        }
        let looked = look(cached, ctx, seen).await;
        // A look that left the config at rest is remembered; any other, or a failure, is
        // not: the next wake looks again.
        let held = || {
            let (cccs, xccs) = (ctx.stores.cccs.state(), ctx.stores.xccs.state());
            let uids = cccs.iter().filter_map(|c| c.uid()).chain(xccs.iter().filter_map(|c| c.uid()));
            uids.collect::<std::collections::HashSet<String>>()
        };
        ctx.memos.with(|m: &mut idle::Memo| match &looked {
            Ok((_, Some(rest))) => m.remember(uid, rest.clone(), held),
            _ => m.forget(&uid),
        });
        looked.map(|(action, _)| action)
    }

    async fn cleanup(cfg: &K, ctx: &Context) -> Result<Action> {
        let uid = cfg.uid().unwrap_or_default();
        ctx.memos.with(|m: &mut idle::Memo| m.forget(&uid));
        deletion::revert(cfg, ctx).await
    }
}

/// One full look at config `cached`'s world: a drive of its handover machine on the config
/// read fresh, and what to remember of it when it left the config at rest (`seen`: what the
/// index and the caches showed before it).
async fn look<K: ConfigKind>(
    cached: &K,
    ctx: &Context,
    seen: idle::Inputs,
) -> Result<(Action, Option<idle::Looked>)> {
    // The persisted handover state must be the latest: a reconcile woken by our own target
    // patch may run before the cache has our last status write, and stepping the machine
    // from a stale state would start a bogus move (with the new server as its "source").
    let api: Api<K> = Api::all(ctx.client.clone());
    let name = cached.name_any();
    let mut conflicts = 0;
    loop {
        let Some(fresh) = api.get_opt(&name).await.map_err(Error::kube("read", K::KIND, &name))? else {
            return Ok((Action::await_change(), None));
        };
        let mut driver = driver::ConfigDriver::<K>::new(ctx);
        match dco_state::drive::drive(&mut driver, &fresh).await {
            Ok(driven) => {
                let rest = driver.at_rest.load(std::sync::atomic::Ordering::Relaxed).then(|| idle::Looked {
                    inputs: idle::Inputs {
                        config: driven.written.clone().or_else(|| fresh.resource_version()),
                        target: driver.seen_target.take(),
                        generated: std::mem::take(&mut driver.seen_generated),
                        ..seen.clone()
                    },
                    requeue: driven.requeue,
                    resync_due: Instant::now() + idle::jittered(idle::FULL_RESYNC),
                });
                return Ok((Action::requeue(driven.requeue), rest));
            }
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

/// What the watches and caches show now of config `cfg`'s inputs (`idle.rs`), an XRD's
/// generated CRDs by the names `last` read: no request.
async fn seen<K: ConfigKind>(cfg: &K, ctx: &Context, last: Option<&idle::Looked>) -> idle::Inputs {
    let (kind, tname) = (cfg.target_kind(), cfg.target_name());
    let targets = &ctx.watched.targets;
    let generated = last.map_or_else(Vec::new, |l| {
        l.inputs.generated.iter().map(|(n, _)| (n.clone(), targets.get(TargetKind::Crd, n))).collect()
    });
    // Who names the target decides the conflict, not what their statuses say.
    let naming: Vec<(&str, String)> =
        ctx.watched.config_refs.refs_naming(tname).into_iter().map(|r| (r.kind, r.name)).collect();
    // What the caches say of the servers, as the look's observation reads it (facts.rs): the
    // resolver's answer (a config at rest is settled on it, so the server it names exists),
    // the destination's wiring (its Service, CA, availability; a server made again under
    // its name has another CA), and for an XRD the API it is read through. Not the config's
    // own status: that is the config's resourceVersion.
    let pin = cfg.conversion().webhook_server_ref.as_ref().map(|r| r.name.as_str());
    let resolved = ctx.servers().resolve(tname, pin).map_err(|e| e.to_string());
    let wiring = facts::destination_wiring(ctx, cfg, &resolved);
    let xrds = match kind {
        TargetKind::Xrd => Some(ctx.xrd_api().await),
        TargetKind::Crd => None,
    };
    idle::Inputs {
        config: cfg.resource_version(),
        target: targets.get(kind, tname),
        generated,
        naming: idle::fingerprint(&[&naming]),
        servers: idle::fingerprint(&[&resolved, &wiring, &xrds]),
    }
}
