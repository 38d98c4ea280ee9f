//! The one Kubernetes-side shape of a reconcile, for both wings (docs/operator.md, "two wings
//! on one framework"): the shard gate, the timer, the finalizer, the reconcile metric, the
//! error policy and the status write are written here once; a [`Wing`] brings its kind and
//! what it does on apply and on cleanup (the config wing drives its handover machine there,
//! the server wing applies its workload).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ClusterResourceScope;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, Event as Finalizer};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument as _;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::names::FIELD_MANAGER;

/// What one controller brings to [`reconcile`], [`error_policy`] and [`write_status`].
pub(crate) trait Wing: 'static {
    type Object: Resource<DynamicType = (), Scope = ClusterResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    /// What [`write_status`] writes.
    type Status: Serialize + Sync;
    /// The object's kind, in errors.
    const KIND: &'static str;
    /// The finalizer that holds the object until [`Wing::cleanup`] lets it go.
    const FINALIZER: &'static str;

    /// The controller's name: the gate's and the metrics' label.
    fn controller() -> String;
    /// The span of one reconcile (its log lines' fields), also around the error policy's line.
    fn span(obj: &Self::Object) -> tracing::Span;
    /// The object exists and is not being deleted.
    fn apply(obj: &Self::Object, ctx: &Context) -> impl Future<Output = Result<Action>> + Send;
    /// The object is being deleted: `Ok` lets the finalizer go.
    fn cleanup(obj: &Self::Object, ctx: &Context) -> impl Future<Output = Result<Action>> + Send;
}

/// One reconcile of a `W` object: the shard gate (another replica's objects stop here), then
/// apply or cleanup under `W::FINALIZER`, timed into the reconcile metric.
pub(crate) async fn reconcile<W: Wing>(obj: Arc<W::Object>, ctx: Arc<Context>) -> Result<Action> {
    let span = W::span(&obj);
    async move {
        let controller = W::controller();
        if let Some(skip) = ctx.not_ours(&controller, obj.as_ref()) {
            return Ok(skip);
        }
        let started = Instant::now();
        let api: Api<W::Object> = Api::all(ctx.client.clone());
        let name = obj.name_any();
        let out = finalizer::finalizer(&api, W::FINALIZER, obj, |event| async {
            match event {
                Finalizer::Apply(o) => W::apply(&o, &ctx).await,
                Finalizer::Cleanup(o) => W::cleanup(&o, &ctx).await,
            }
        })
        .await
        .map_err(|e| Error::Finalizer { kind: W::KIND, name, source: Box::new(e) });
        ctx.metrics.reconciled(&controller, started.elapsed());
        out
    }
    .instrument(span)
    .await
}

/// A held deletion (`DeletionBlocked`, the object says how to release it) is looked at again
/// in 15 s and logged at info; any other failure in 10 s, as a warning.
pub(crate) fn error_policy<W: Wing>(obj: Arc<W::Object>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(&W::controller(), error);
    let _in = W::span(&obj).entered();
    let blocked = matches!(error, Error::Finalizer { source, .. }
        if matches!(source.as_ref(), finalizer::Error::CleanupFailed(Error::DeletionBlocked(_))));
    if blocked {
        tracing::info!("{error}");
        Action::requeue(Duration::from_secs(15))
    } else {
        tracing::warn!("reconcile failed: {error}");
        Action::requeue(Duration::from_secs(10))
    }
}

/// The whole status of `obj`, by forced server-side apply under the operator's field manager.
pub(crate) async fn write_status<W: Wing>(ctx: &Context, obj: &W::Object, status: &W::Status) -> Result<()> {
    dco_state::status::apply(&ctx.client, obj, status, FIELD_MANAGER).await.map_err(Error::kube(
        "write status of",
        W::KIND,
        obj.name_any(),
    ))
}

#[cfg(test)]
mod tests {
    use dco_api::CRDConversionConfig;
    use serde_json::json;

    use super::*;
    use crate::context::testing::test_context;
    use crate::testing::config;

    /// A wing of its own: the shape is tested here without either real wing (which sit above
    /// this module; their reconciles are tested in config/tests.rs and server/tests.rs).
    struct Probe;

    impl Wing for Probe {
        type Object = CRDConversionConfig;
        type Status = ();
        const KIND: &'static str = "CRDConversionConfig";
        const FINALIZER: &'static str = "dco.rs/probe";

        fn controller() -> String {
            "probe".to_string()
        }
        fn span(_: &Self::Object) -> tracing::Span {
            tracing::Span::none()
        }
        async fn apply(_: &Self::Object, _: &Context) -> Result<Action> {
            Ok(Action::await_change())
        }
        async fn cleanup(_: &Self::Object, _: &Context) -> Result<Action> {
            Ok(Action::await_change())
        }
    }

    fn in_finalizer(source: finalizer::Error<Error>) -> Error {
        Error::Finalizer { kind: "CRDConversionConfig", name: "widgets".into(), source: Box::new(source) }
    }

    #[tokio::test]
    async fn a_held_deletion_is_looked_at_again_in_15_s_any_other_failure_in_10_s() {
        let (ctx, _api, _) = test_context();
        let cfg = Arc::new(config(None, json!({})));
        let blocked = in_finalizer(finalizer::Error::CleanupFailed(Error::DeletionBlocked("held".into())));
        assert_eq!(
            error_policy::<Probe>(cfg.clone(), &blocked, ctx.clone()),
            Action::requeue(Duration::from_secs(15))
        );
        let failed = in_finalizer(finalizer::Error::ApplyFailed(Error::NotReady("not yet".into())));
        assert_eq!(
            error_policy::<Probe>(cfg.clone(), &failed, ctx.clone()),
            Action::requeue(Duration::from_secs(10))
        );
        // Only the finalizer's cleanup holds a deletion.
        let bare = Error::DeletionBlocked("held".into());
        assert_eq!(error_policy::<Probe>(cfg, &bare, ctx.clone()), Action::requeue(Duration::from_secs(10)));
        // Each counted under its controller and error.
        let metrics = ctx.metrics.encode();
        for (want, n) in [("deletion_blocked", 2), ("not_ready", 1)] {
            let line =
                format!(r#"dco_operator_reconcile_errors_total{{controller="probe",error="{want}"}} {n}"#);
            assert!(metrics.contains(&line), "no {line} in {metrics}");
        }
    }
}
