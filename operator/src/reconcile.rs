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
use crate::retry::Failures;

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
        let pass = match ctx.admit(&controller, obj.as_ref()) {
            Ok(pass) => pass,
            Err(skip) => return Ok(skip),
        };
        let started = Instant::now();
        let api: Api<W::Object> = Api::all(ctx.client.clone());
        let name = obj.name_any();
        let key = name.clone();
        let out = ctx
            .fenced(
                pass,
                finalizer::finalizer(&api, W::FINALIZER, obj, |event| async {
                    match event {
                        Finalizer::Apply(o) => W::apply(&o, &ctx).await,
                        // The finalizer goes right after this returns: fenced like any write.
                        Finalizer::Cleanup(o) => W::cleanup(&o, &ctx)
                            .await
                            .and_then(|a| ctx.fence("finalizer removal").map(|()| a)),
                    }
                }),
            )
            .await
            .map_err(|e| Error::Finalizer { kind: W::KIND, name, source: Box::new(e) });
        ctx.metrics.reconciled(&controller, started.elapsed());
        if out.is_ok() {
            ctx.memos.with(|f: &mut Failures| f.succeeded(W::KIND, &key));
        }
        out.or_else(|e| stopped(&ctx, &controller, e))
    }
    .instrument(span)
    .await
}

/// A reconcile the fence stopped, or whose write found the object changed since it was read
/// (a 409 on a precondition), is no failure: it is tried again after a renew interval — by
/// then this replica has renewed its Leases or lost them, and the watch has the newer object.
fn stopped(ctx: &Context, controller: &str, e: Error) -> Result<Action> {
    if let Some((write, paused)) = e.fenced() {
        ctx.metrics.fenced(controller, write, paused);
        tracing::info!("{e}");
        return Ok(Action::requeue(ctx.gate.lapse_retry));
    }
    if e.conflict() {
        tracing::info!("{e}; reading it again");
        return Ok(Action::requeue(ctx.gate.lapse_retry));
    }
    Err(e)
}

/// A held deletion (`DeletionBlocked`, the object says how to release it) is looked at again
/// in 15 s and logged at info; any other failure after a delay that grows with the object's
/// failures in a row (crate::retry), as a warning.
pub(crate) fn error_policy<W: Wing>(obj: Arc<W::Object>, error: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(retry_in::<W>(&obj, error, &ctx))
}

fn retry_in<W: Wing>(obj: &W::Object, error: &Error, ctx: &Context) -> Duration {
    ctx.metrics.failed(&W::controller(), error);
    let _in = W::span(obj).entered();
    let blocked = matches!(error, Error::Finalizer { source, .. }
        if matches!(source.as_ref(), finalizer::Error::CleanupFailed(Error::DeletionBlocked(_))));
    if blocked {
        tracing::info!("{error}");
        Duration::from_secs(15)
    } else {
        let delay = ctx.memos.with(|f: &mut Failures| f.failed(W::KIND, obj.name_any()));
        tracing::warn!(retry_in = ?delay, "reconcile failed: {error}");
        delay
    }
}

/// The whole status of `obj`, by forced server-side apply under the operator's field manager,
/// conditioned on `obj`'s resourceVersion (a newer status, another replica's, is not
/// overwritten: 409) and fenced (docs/sharding.md, "After a pause").
pub(crate) async fn write_status<W: Wing>(ctx: &Context, obj: &W::Object, status: &W::Status) -> Result<()> {
    ctx.fence("status")?;
    dco_state::status::apply(&ctx.client, obj, status, FIELD_MANAGER).await.map(drop).map_err(Error::kube(
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
    async fn a_fenced_write_or_a_conflict_is_a_retry_after_a_renew_interval_not_a_failure() {
        let (ctx, _api, _) = test_context();
        let retry = Action::requeue(ctx.gate.lapse_retry);
        let fenced = Error::Fenced { write: "status", paused: true };
        assert_eq!(stopped(&ctx, "probe", fenced).ok(), Some(retry.clone()));
        let inner = Error::Fenced { write: "target spec.conversion", paused: false };
        let wrapped = in_finalizer(finalizer::Error::ApplyFailed(inner));
        assert_eq!(stopped(&ctx, "probe", wrapped).ok(), Some(retry.clone()));
        let response = kube::core::Status {
            code: 409,
            message: "the object has been modified".into(),
            ..Default::default()
        };
        let conflict = Error::kube("write status of", "CRDConversionConfig", "widgets")(kube::Error::Api(
            Box::new(response),
        ));
        assert_eq!(stopped(&ctx, "probe", conflict).ok(), Some(retry));
        let other = Error::NotReady("not yet".into());
        assert!(matches!(stopped(&ctx, "probe", other), Err(Error::NotReady(_))), "a failure stays one");
        let metrics = ctx.metrics.encode();
        for (write, reason) in [("status", "paused"), ("target spec.conversion", "not_owned")] {
            let line = format!(
                r#"dco_operator_reconciles_fenced_total{{controller="probe",write="{write}",reason="{reason}"}} 1"#
            );
            assert!(metrics.contains(&line), "no {line} in {metrics}");
        }
        assert!(!metrics.contains("reconcile_errors_total{"), "no failure counted: {metrics}");
    }

    #[tokio::test]
    async fn a_held_deletion_is_looked_at_again_in_15_s_other_failures_ever_later() {
        let (ctx, _api, _) = test_context();
        let cfg = config(None, json!({}));
        let blocked = in_finalizer(finalizer::Error::CleanupFailed(Error::DeletionBlocked("held".into())));
        assert_eq!(retry_in::<Probe>(&cfg, &blocked, &ctx), Duration::from_secs(15));
        let within = |d: Duration, secs: u64| {
            d.as_secs_f64() >= secs as f64 * 0.9 && d.as_secs_f64() <= secs as f64 * 1.1
        };
        let failed = in_finalizer(finalizer::Error::ApplyFailed(Error::NotReady("not yet".into())));
        let first = retry_in::<Probe>(&cfg, &failed, &ctx);
        assert!(within(first, 10), "{first:?}");
        // Only the finalizer's cleanup holds a deletion: a bare one is a second failure in a row.
        let bare = Error::DeletionBlocked("held".into());
        let second = retry_in::<Probe>(&cfg, &bare, &ctx);
        assert!(within(second, 20), "{second:?}");
        // A success (here, the memo's) starts it again at 10 s.
        ctx.memos.with(|f: &mut Failures| f.succeeded(<Probe as Wing>::KIND, &cfg.name_any()));
        let again = retry_in::<Probe>(&cfg, &failed, &ctx);
        assert!(within(again, 10), "{again:?}");
        // Each counted under its controller and error.
        let metrics = ctx.metrics.encode();
        for (want, n) in [("deletion_blocked", 2), ("not_ready", 2)] {
            let line =
                format!(r#"dco_operator_reconcile_errors_total{{controller="probe",error="{want}"}} {n}"#);
            assert!(metrics.contains(&line), "no {line} in {metrics}");
        }
    }
}
