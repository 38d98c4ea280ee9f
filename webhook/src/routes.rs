//! The HTTP surface: on the conversion listener `POST /convert/{target}`, `/healthz` and
//! `/readyz` ([`router`]); on the admin listener `/metrics`, `/debug/registry` and the probes
//! again ([`admin_router`]), so a NetworkPolicy can open only the conversion port to the
//! apiserver.
//!
//! The convert handler is the apiserver's write and read path for every served target, so it
//! fails closed (no plan → 503), bounds the body, its memory (the in-flight [`Budget`]) and
//! the time spent from headers to answer, runs the CPU-bound conversion off the async
//! workers, and never panics.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::body::{self, BodyError};
use crate::budget::{Budget, Held};
use crate::health::Health;
use crate::metrics::{Metrics, Outcome, TargetLabel, UNKNOWN_TARGET};
use crate::plan::BadReview;
use crate::pool::{Pool, PoolError, RequestBudget};
use crate::registry::{Entry, Registry};

/// Request limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    /// Memory a conversion may use, as a multiple of its body (`pool::RequestBudget`).
    pub conversion_memory_factor: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // 64 MiB holds a list of several thousand large objects; the apiserver's own
        // conversion timeout is 30 s, and answering first lets it report our message.
        Limits {
            max_body_bytes: 64 << 20,
            request_timeout: Duration::from_secs(25),
            conversion_memory_factor: 16,
        }
    }
}

/// Shared state of all routes.
pub struct App {
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub limits: Limits,
    /// Where conversions run.
    pub pool: Arc<Pool>,
    /// Bytes of reviews in flight across all connections (`--max-inflight-bytes`).
    pub budget: Budget,
    /// Named in 503 messages so an operator knows which instance answered.
    pub instance: String,
    /// `/debug/registry` shows compile errors' full text (which quotes schema fields and enum
    /// values) only when asked (`--debug-registry-full-errors`).
    pub debug_full_errors: bool,
}

/// The conversion listener: what the apiserver and the kubelet need.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/convert/{target}", post(convert))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(app)
}

/// The admin listener: what operators and Prometheus need.
pub fn admin_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/registry", get(debug_registry))
        .with_state(app)
}

fn text(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], msg).into_response()
}

async fn convert(
    State(app): State<Arc<App>>,
    Path(target): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The handler runs once the headers are in: from here the whole request, body read and
    // conversion, has `--request-timeout`.
    let start = Instant::now();
    let deadline = start + app.limits.request_timeout;
    // After a pause the registry is as old as the pause: wait for the re-read (`pause.rs`).
    if let Some(waited) = app.health.freshness.wait_fresh(deadline.min(start + crate::pause::MAX_WAIT)).await
    {
        tracing::info!(
            target = target,
            waited_ms = waited.as_millis() as u64,
            "a review waited for the re-read after a pause"
        );
    }
    let entry = app.registry.get(&target);
    // Only registered names become metric labels.
    let label = if entry.is_some() { target.as_str() } else { UNKNOWN_TARGET };
    let read = body::read(&headers, body, app.limits.max_body_bytes, &app.budget, deadline).await;
    let (body, reservation) = match read {
        Ok(r) => {
            if r.waited {
                app.metrics.budget_wait("granted");
            }
            (Ok(r.bytes), Some(r.reservation))
        }
        Err(e) => {
            if matches!(e, BodyError::Budget(_)) {
                app.metrics.budget_wait("refused");
            }
            (Err(e), None)
        }
    };
    let (outcome, response) = convert_inner(&app, &target, entry, body, deadline).await;
    app.metrics.observe_request(label, outcome, start.elapsed().as_secs_f64());
    match reservation {
        // The answer is about as large as the review; the reservation, resized to it, stays
        // with the body until hyper has written or dropped it.
        Some(mut r) => {
            let size = hyper::body::Body::size_hint(response.body()).exact();
            r.resize(size.map_or(r.len(), |n| n as usize));
            response.map(|b| Body::new(Held::new(b, r)))
        }
        None => response,
    }
}

async fn convert_inner(
    app: &App,
    target: &str,
    entry: Option<Arc<Entry>>,
    body: Result<bytes::Bytes, BodyError>,
    deadline: Instant,
) -> (Outcome, Response) {
    let body = match body {
        Ok(b) => b,
        Err(BodyError::TooLarge { limit }) => {
            let msg = format!(
                "ConversionReview body for target {target:?} exceeds the {limit}-byte limit; raise --max-request-bytes on dco-webhook if batches this large are expected"
            );
            return (Outcome::too_large, text(StatusCode::PAYLOAD_TOO_LARGE, msg));
        }
        Err(e @ BodyError::Read(_)) => {
            return (Outcome::bad_request, text(StatusCode::BAD_REQUEST, e.to_string()));
        }
        Err(BodyError::Timeout { received }) => {
            let msg = format!(
                "the ConversionReview body for target {target:?} did not arrive within the {:?} request timeout ({received} bytes received); the client is sending too slowly, or raise --request-timeout on dco-webhook",
                app.limits.request_timeout
            );
            return (Outcome::body_timeout, text(StatusCode::REQUEST_TIMEOUT, msg));
        }
        Err(BodyError::Budget(e)) => {
            let msg = format!("cannot take the ConversionReview for target {target:?} now: {e}");
            // Counted in dco_webhook_budget_waits_total; a flood must not flood the log too.
            tracing::debug!(target = target, "{msg}");
            return (Outcome::over_budget, text(StatusCode::SERVICE_UNAVAILABLE, msg));
        }
    };
    let Some(entry) = entry else {
        let msg = format!(
            "no conversion plan for target {target:?} on this replica of ConversionWebhookServer {:?}: the target is not assigned to this instance and its spec.conversion does not name this instance's Service; check the config's status.assignedWebhookServer, or retry if it was just created",
            app.instance
        );
        return (Outcome::unknown_target, text(StatusCode::SERVICE_UNAVAILABLE, msg));
    };
    if entry.draining_until.is_some() {
        // An apiserver still routes the target here: the drain lasts until they stop
        // (registry.rs `LastReview`). Only draining entries pay for the stamp.
        entry.last_review.stamp(std::time::Instant::now());
    }
    if let Some(f) = entry.closed() {
        // A ConversionReview, not a 503: the apiserver passes its message on to the client.
        let msg = format!(
            "ConversionWebhookServer {:?} refuses to convert target {target:?}: {}",
            app.instance, f.message
        );
        return (Outcome::fail_closed, failure_review(&body, &msg));
    }
    let Some(plan) = entry.plan().cloned() else {
        let why = entry.failure.as_ref().map_or("no plan compiled yet", |f| f.message.as_str());
        let msg = format!(
            "target {target:?} has no servable plan on this replica of ConversionWebhookServer {:?}: {why}",
            app.instance
        );
        return (Outcome::unknown_target, text(StatusCode::SERVICE_UNAVAILABLE, msg));
    };

    // Conversion is CPU-bound: it runs on the conversion threads (the engine's stack, a
    // bounded number at once), under a budget the engine checks as it goes, so a review past
    // its deadline or its memory stops instead of running on after its answer was sent.
    let budget = Arc::new(RequestBudget::new(
        deadline,
        app.limits.request_timeout,
        body.len(),
        app.limits.conversion_memory_factor,
    ));
    let input = body.clone();
    let signals = entry.served.as_ref().map(|s| s.signals.clone()).unwrap_or_default();
    let counted = plan.clone();
    let job = app.pool.run(budget.clone(), move || plan.review(&input));
    let done = tokio::time::timeout_at(deadline.into(), job).await;
    if done.is_ok() {
        app.metrics.conversion_memory.observe(budget.peak_bytes() as f64);
    }
    match done {
        Ok(Ok(Ok(reviewed))) => {
            signals.record(&app.metrics, target, counted.as_ref(), reviewed.to, &reviewed.tally);
            let outcome = if reviewed.failure.is_some() {
                tracing::debug!(target = target, uid = %reviewed.uid, failure = ?reviewed.failure, "conversion failed");
                Outcome::conversion_failure
            } else {
                app.metrics
                    .objects_converted
                    .get_or_create(&TargetLabel { target: target.to_string() })
                    .inc_by(u64::try_from(reviewed.objects).unwrap_or(u64::MAX));
                Outcome::success
            };
            (outcome, ([(header::CONTENT_TYPE, "application/json")], reviewed.body).into_response())
        }
        Ok(Ok(Err(bad))) => {
            let status = StatusCode::BAD_REQUEST;
            let msg = match bad {
                BadReview::Malformed(_) | BadReview::MissingRequest => bad.to_string(),
            };
            (Outcome::bad_request, text(status, msg))
        }
        Ok(Err(e @ PoolError::Gone)) => {
            tracing::error!(target = target, error = %e, "no conversion thread; answering 503");
            let msg = format!("cannot convert for target {target:?} right now: {e}; see the dco-webhook log");
            (Outcome::internal_error, text(StatusCode::SERVICE_UNAVAILABLE, msg))
        }
        Ok(Err(e @ PoolError::Panicked)) => {
            // `target` names a registry entry here: only a plan can panic.
            app.metrics.panics.get_or_create(&TargetLabel { target: target.to_string() }).inc();
            tracing::error!(target = target, error = %e, "the conversion plan panicked; answering 500");
            let msg = format!("internal error converting target {target:?}; see the dco-webhook log");
            (Outcome::internal_error, text(StatusCode::INTERNAL_SERVER_ERROR, msg))
        }
        Err(_) => {
            let msg = format!(
                "converting target {target:?} exceeded the {:?} per-request budget; raise --request-timeout on dco-webhook or check the config for expensive rules (CEL, deep ForEach)",
                app.limits.request_timeout
            );
            tracing::warn!(target = target, "{msg}");
            (Outcome::timeout, failure_review(&body, &msg))
        }
    }
}

/// A ConversionReview with a Failure result, for the paths where the plan never answered.
/// The apiserver only accepts a response that echoes the request's uid and apiVersion, so
/// both are read from the body by the engine's scanner: no full parse of a large review, and
/// no recursion into a deeply nested one (this runs on an async worker's stack).
pub fn failure_review(body: &[u8], message: &str) -> Response {
    let (api_version, uid) = dco_engine::envelope(body);
    let api_version = api_version
        .filter(|v| v == "apiextensions.k8s.io/v1beta1")
        .unwrap_or_else(|| "apiextensions.k8s.io/v1".to_string());
    let review = serde_json::json!({
        "apiVersion": api_version,
        "kind": "ConversionReview",
        "response": {
            "uid": uid.unwrap_or_default(),
            "convertedObjects": [],
            "result": {"status": "Failure", "message": message},
        },
    });
    ([(header::CONTENT_TYPE, "application/json")], review.to_string()).into_response()
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    match app.health.readiness() {
        Ok(()) => "ok".into_response(),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        app.metrics.encode(),
    )
        .into_response()
}

fn rfc3339(t: SystemTime) -> Option<String> {
    k8s_openapi::jiff::Timestamp::try_from(t).ok().map(|t| t.to_string())
}

/// One registry entry as `/debug/registry` shows it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct EntryView<'a> {
    target: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<&'a crate::registry::ConfigRef>,
    hold: crate::hold::HoldReason,
    servable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    hub_version: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    versions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan_hash: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compiled_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draining_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<ErrorView<'a>>,
    /// Reviews are answered with `last_error` (driftPolicy FailClosed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    fail_closed: bool,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorView<'a> {
    message: &'a str,
    /// The errors' full text, with `--debug-registry-full-errors`.
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<&'a [String]>,
    /// Where each error is (spoke, rule, strategy, paths).
    locations: &'a [String],
    at: Option<String>,
}

async fn debug_registry(State(app): State<Arc<App>>) -> Response {
    let snap = app.registry.snapshot();
    let mut entries: Vec<&Arc<Entry>> = snap.values().collect();
    entries.sort_by(|a, b| a.target.cmp(&b.target));
    let views: Vec<EntryView<'_>> = entries
        .iter()
        .map(|e| EntryView {
            target: &e.target,
            config: e.config.as_ref(),
            hold: e.hold,
            servable: e.served.is_some(),
            hub_version: e.plan().map(|p| p.hub_version().to_string()),
            versions: e.plan().map(|p| p.versions()).unwrap_or_default(),
            plan_hash: e.served.as_ref().map(|s| s.plan_hash.as_str()),
            compiled_at: e.served.as_ref().and_then(|s| rfc3339(s.compiled_at)),
            draining_until: e.draining_until.and_then(rfc3339),
            // Compile errors quote schema field names and enum values; by default only
            // where they are is shown.
            last_error: e.failure.as_ref().map(|f| ErrorView {
                message: if app.debug_full_errors { &f.message } else { &f.summary },
                errors: app.debug_full_errors.then_some(f.errors.as_slice()),
                locations: &f.locations,
                at: rfc3339(f.at),
            }),
            fail_closed: e.closed().is_some(),
        })
        .collect();
    match serde_json::to_vec_pretty(&views) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot render the registry: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn the_failure_review_reads_uid_and_version_from_any_body() {
        // A timed-out review may never have been scanned: reading its uid must not recurse
        // into its objects (this runs on an async worker's stack; 2 MiB here).
        let deep = "[".repeat(1_000_000) + &"]".repeat(1_000_000);
        let body = format!(
            r#"{{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"ConversionReview","request":{{"uid":"u-9","objects":{deep}}}}}"#
        );
        let response = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || failure_review(body.as_bytes(), "too slow"))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1beta1");
        assert_eq!(v["response"]["uid"], "u-9");
        assert_eq!(v["response"]["result"]["message"], "too slow");
    }
}
