//! The config controllers (XRDConversionConfig and CRDConversionConfig, one generic
//! reconciler). In order: fetch the target → compile against its live schemas → resolve the
//! server → target Established → server Available → one step of the handover machine, whose
//! actions this executes and whose state, condition and Event it persists. It never decides a
//! transition itself: that is `dco_state::handover`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dco_api::config::{ConversionConfig, DriftPolicy, Phase};
use dco_api::{
    ANNOTATION_ALLOW_UNSAFE_DELETE, ConfigStatus, ConversionWebhookServer, FINALIZER_SAFE_REVERT,
    HandoverState, webhook_path,
};
use dco_state::handover::{self, Action as HandoverAction, Facts, Handover};
use dco_state::machine::{EventNote, Machine, Step};
use k8s_openapi::ClusterResourceScope;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::instrument;

use self::target::Wiring;
use crate::assigned::HasConfigStatus;
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};
use crate::metrics::TransitionLabels;
use crate::server::desired;
use crate::serving::serving;
use crate::telemetry;
use dco_state::conditions;

pub mod target;

pub mod condition {
    pub const VALIDATED: &str = "Validated";
    pub const TARGET_HEALTHY: &str = "TargetHealthy";
    pub const WEBHOOK_SERVER_READY: &str = "WebhookServerReady";
    pub const APPLIED: &str = "Applied";
    pub const STALE: &str = "Stale";
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
}

/// How often an unsettled handover is looked at without an event.
const UNSETTLED_REQUEUE: Duration = Duration::from_secs(5);
/// More transitions than the machine has states: one reconcile never loops.
const MAX_STEPS: usize = 8;
/// How many diagnostics a condition message lists before "and N more".
const MAX_LISTED: usize = 10;

/// Everything a config kind must be for the generic reconciler.
pub trait ConfigKind:
    ConversionConfig
    + HasConfigStatus
    + Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> ConfigKind for T where
    T: ConversionConfig
        + HasConfigStatus
        + Resource<DynamicType = (), Scope = ClusterResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

fn controller_name<K: ConfigKind>() -> String {
    K::kind(&()).to_lowercase()
}

#[instrument(skip(cfg, ctx), fields(kind = %K::kind(&()), config = %cfg.name_any(), target = %cfg.target_name()))]
pub async fn reconcile<K: ConfigKind>(cfg: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let api: Api<K> = Api::all(ctx.client.clone());
    let name = cfg.name_any();
    let kind: &'static str =
        if K::kind(&()) == "XRDConversionConfig" { "XRDConversionConfig" } else { "CRDConversionConfig" };
    let out = finalizer(&api, FINALIZER_SAFE_REVERT, cfg, |event| async {
        match event {
            Finalizer::Apply(c) => apply(c.as_ref(), &ctx).await,
            Finalizer::Cleanup(c) => revert(c.as_ref(), &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer { kind, name, source: Box::new(e) });
    ctx.metrics.reconciled(&controller_name::<K>(), started.elapsed());
    out
}

pub fn error_policy<K: ConfigKind>(cfg: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(&controller_name::<K>(), error);
    let blocked = matches!(error, Error::Finalizer { source, .. }
        if matches!(source.as_ref(), kube::runtime::finalizer::Error::CleanupFailed(Error::DeletionBlocked(_))));
    if blocked {
        tracing::info!(config = %cfg.name_any(), "{error}");
        Action::requeue(Duration::from_secs(15))
    } else {
        tracing::warn!(config = %cfg.name_any(), "reconcile failed: {error}");
        Action::requeue(Duration::from_secs(10))
    }
}

async fn write_status<K: ConfigKind>(ctx: &Context, cfg: &K, status: &ConfigStatus) -> Result<()> {
    dco_state::status::apply(&ctx.client, cfg, status, FIELD_MANAGER).await.map_err(Error::kube(
        "write status of",
        kind_static::<K>(),
        cfg.name_any(),
    ))
}

fn kind_static<K: ConfigKind>() -> &'static str {
    if K::kind(&()) == "XRDConversionConfig" { "XRDConversionConfig" } else { "CRDConversionConfig" }
}

fn listed(items: &[String]) -> String {
    let mut s = items.iter().take(MAX_LISTED).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > MAX_LISTED {
        s.push_str(&format!("; and {} more", items.len() - MAX_LISTED));
    }
    s
}

/// The compile outcome, written into status; `Ok(plan hash)` when the config compiles.
fn validate<K: ConfigKind>(
    cfg: &K,
    target: &Value,
    st: &mut ConfigStatus,
    now: Timestamp,
) -> Result<String, String> {
    let gen_ = cfg.meta().generation;
    let t = match dco_engine::Target::from_value(target) {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("cannot read the target's schemas: {e}");
            conditions::set(
                &mut st.conditions,
                condition::VALIDATED,
                false,
                "TargetUnreadable",
                msg.clone(),
                gen_,
                now,
            );
            return Err(msg);
        }
    };
    let compiled = dco_engine::compile(cfg.conversion(), &t);
    let report = &compiled.report;
    st.spoke_statuses = report.spokes.clone();
    st.overall_lossless = Some(report.overall_lossless);
    st.schema_hash = Some(report.schema_hash.clone());
    let errors: Vec<String> = report.errors().map(|d| d.to_string()).collect();
    let warnings: Vec<String> = report.warnings().map(|d| d.to_string()).collect();
    match compiled.plan {
        Some(plan) if errors.is_empty() => {
            let msg = if warnings.is_empty() {
                format!(
                    "compiles against the live schemas of {} (lossless: {})",
                    t.describe(),
                    report.overall_lossless
                )
            } else {
                format!("compiles with {} warning(s): {}", warnings.len(), listed(&warnings))
            };
            conditions::set(&mut st.conditions, condition::VALIDATED, true, "Compiled", msg, gen_, now);
            Ok(plan.hash())
        }
        _ => {
            let msg = if errors.is_empty() {
                "the engine produced no plan and no error; report this as a bug".to_string()
            } else {
                format!("{} error(s): {}", errors.len(), listed(&errors))
            };
            conditions::set(
                &mut st.conditions,
                condition::VALIDATED,
                false,
                "CompileFailed",
                msg.clone(),
                gen_,
                now,
            );
            Err(msg)
        }
    }
}

/// The wiring that sends `target`'s reviews to `server`, or why it cannot be built yet.
fn wiring_for(
    ctx: &Context,
    server: &ConversionWebhookServer,
    target: &str,
    review_versions: &[String],
) -> Result<Wiring, String> {
    let names = ctx.names(server);
    let ca_bundle = ctx.ca_bundle(server).ok_or_else(|| {
        format!(
            "Secret {}/{} has no ca.crt yet (the server's serving certificate is not issued)",
            names.namespace, names.tls_secret
        )
    })?;
    Ok(Wiring {
        namespace: names.namespace.clone(),
        service: names.service().to_string(),
        path: webhook_path(target),
        port: desired::service_spec(server).port,
        ca_bundle,
        review_versions: if review_versions.is_empty() {
            vec!["v1".to_string()]
        } else {
            review_versions.to_vec()
        },
    })
}

/// What the move's source still does with the target: its status for liveness, its Leases
/// (the cache) for whether any replica still holds the target.
fn source_facts(
    ctx: &Context,
    source: Option<&str>,
    target: &str,
    now: Timestamp,
) -> dco_state::handover::Serving {
    let server = source.and_then(|s| ctx.server(s));
    let held = server.as_ref().map_or_else(crate::leases::Held::default, |s| {
        let names = ctx.names(s);
        let leases = ctx.stores.leases.state();
        crate::leases::held(leases.iter().map(|l| l.as_ref()), &names.server, &names.namespace, target, now)
    });
    crate::serving::source_serving(server.as_ref().and_then(|s| s.status.as_ref()), &held)
}

/// Which server a target's `spec.conversion` names, by its Service.
fn wired_server(ctx: &Context, target: &Value) -> Option<String> {
    let (ns, svc) = target::wired_service(target)?;
    ctx.server_by_service(&ns, &svc).map(|s| s.name_any())
}

/// One transition the machine made: its Event, and what its span needs.
struct Moved {
    from: dco_api::HandoverStatus,
    to: dco_api::HandoverStatus,
    note: EventNote,
}

/// Step the machine until it rests or asks for an action, keeping one Event per transition
/// (each tagged with the move's attempt, so `kubectl describe` does not fold two moves' Events
/// of the same reason into one).
fn run_machine(
    state: &dco_api::HandoverStatus,
    facts: &Facts<'_>,
) -> (Step<dco_api::HandoverStatus, HandoverAction>, Vec<Moved>) {
    let mut moves = Vec::new();
    let mut from = state.clone();
    let mut step = Handover::step(state, facts);
    for _ in 0..MAX_STEPS {
        if let Some(note) = step.event.take() {
            moves.push(Moved { from: from.clone(), to: step.next.clone(), note });
        }
        if !step.actions.is_empty() {
            break;
        }
        let next = Handover::step(&step.next, facts);
        if next.next == step.next {
            break;
        }
        from = std::mem::replace(&mut step, next).next;
    }
    (step, moves)
}

async fn emit<K: ConfigKind>(ctx: &Context, cfg: &K, target: &str, m: &Moved) {
    let (note, attempt) = (&m.note, m.to.attempt);
    ctx.metrics
        .handover_transitions
        .get_or_create(&TransitionLabels { reason: note.reason.to_string() })
        .inc();
    tracing::info!(
        reason = note.reason,
        attempt,
        trace_id = m.to.traceparent.as_deref().and_then(telemetry::trace_id),
        "handover: {}",
        note.note
    );
    let at = std::time::SystemTime::now();
    let since = |s: &str| s.parse::<Timestamp>().ok().map(std::time::SystemTime::from);
    telemetry::record(&telemetry::Transition {
        traceparent: m.to.traceparent.as_deref(),
        reason: note.reason,
        note: &note.note,
        warning: note.warning,
        from: m.from.state,
        to: m.to.state,
        since: m.from.since.as_deref().and_then(since),
        at,
        config: format!("{}/{}", kind_static::<K>(), cfg.name_any()),
        target,
        source: m.to.source.as_deref(),
        destination: m.to.destination.as_deref(),
        attempt,
    });
    ctx.event(cfg, note.warning, note.reason, &format!("HandoverMove{attempt}"), note.note.clone()).await;
}

async fn apply<K: ConfigKind>(cached: &K, ctx: &Context) -> Result<Action> {
    // The persisted handover state must be the latest: a reconcile woken by our own target
    // patch may run before the cache has our last status write, and stepping the machine
    // from a stale state would start a bogus move (with the new server as its "source").
    let api: Api<K> = Api::all(ctx.client.clone());
    let name = cached.name_any();
    let Some(fresh) = api.get_opt(&name).await.map_err(Error::kube("read", kind_static::<K>(), name))? else {
        return Ok(Action::await_change());
    };
    let cfg = &fresh;
    let now = Timestamp::now();
    let now_s = now.to_string();
    let gen_ = cfg.meta().generation;
    let tkind = cfg.target_kind();
    let tname = cfg.target_name().to_string();
    let tkind_name = target::kind_name(tkind);
    let mut st = cfg.config_status().cloned().unwrap_or_default();
    st.observed_generation = gen_;
    st.webhook_path = Some(webhook_path(&tname));

    // 1. The target.
    let Some(live) = target::fetch(&ctx.client, tkind, &tname).await? else {
        let msg = format!("{tkind_name} {tname} does not exist; create it or fix the config's target name");
        conditions::set(
            &mut st.conditions,
            condition::TARGET_HEALTHY,
            false,
            "TargetNotFound",
            msg.clone(),
            gen_,
            now,
        );
        st.phase = Some(if st.last_applied_plan_hash.is_some() { Phase::Stale } else { Phase::Pending });
        st.message = Some(msg);
        write_status(ctx, cfg, &st).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    st.observed_target_generation = live.pointer("/metadata/generation").and_then(Value::as_i64);

    // 2. Compile (every reconcile: a schema drift shows up here).
    let compiled = validate(cfg, &live, &mut st, now);

    // 3. Resolve.
    let servers = ctx.servers();
    let pin = cfg.conversion().webhook_server_ref.as_ref().map(|r| r.name.as_str());
    let resolved = servers.resolve(&tname, pin);
    if let Ok(a) = &resolved {
        st.assigned_webhook_server = Some(a.server.clone());
    }

    // 4. Target Established.
    let established = target::established(&live);
    conditions::set(
        &mut st.conditions,
        condition::TARGET_HEALTHY,
        established,
        if established { "Established" } else { "NotEstablished" },
        if established {
            format!("{tkind_name} {tname} is established")
        } else {
            format!("{tkind_name} {tname} is not Established yet; waiting for the apiserver to accept it")
        },
        gen_,
        now,
    );

    // 5. Server Available (and its CA issued).
    let dest = resolved.as_ref().ok().and_then(|a| ctx.server(&a.server));
    let dest_ready: Result<Wiring, String> = match (&resolved, &dest) {
        (Err(e), _) => Err(e.to_string()),
        (Ok(a), None) => Err(format!("ConversionWebhookServer {} is not in the cache yet", a.server)),
        (Ok(a), Some(server)) => {
            let available =
                server.status.as_ref().is_some_and(|s| conditions::is_true(&s.conditions, "Available"));
            if available {
                wiring_for(ctx, server, &tname, &cfg.conversion().conversion_review_versions)
            } else {
                Err(format!("ConversionWebhookServer {} has no ready replica yet", a.server))
            }
        }
    };
    conditions::set(
        &mut st.conditions,
        condition::WEBHOOK_SERVER_READY,
        dest_ready.is_ok(),
        if dest_ready.is_ok() { "Available" } else { "NotAvailable" },
        match (&dest_ready, &resolved) {
            (Ok(_), Ok(a)) => {
                format!("ConversionWebhookServer {} is available (assigned by {:?})", a.server, a.by)
            }
            (Err(e), _) => e.clone(),
            (Ok(_), Err(e)) => e.to_string(),
        },
        gen_,
        now,
    );

    // 6. The handover machine, only once the target and the destination can take it: a first
    //    wiring skips the Lease check, so it must never point at a server that cannot serve.
    let wired_to = wired_server(ctx, &live);
    let state = st.handover.clone().unwrap_or_default();
    let machine_may_run = established && (dest_ready.is_ok() || resolved.is_err() || compiled.is_err());
    let mut settled_wiring_refresh = None;
    if machine_may_run {
        let dest_name = resolved.as_ref().ok().map(|a| a.server.clone());
        let status_of = |s: Option<&str>| s.and_then(|s| ctx.server(s)).and_then(|s| s.status.clone());
        let traceparent = telemetry::new_traceparent();
        let compiled_fact = compiled.as_ref().map(|_| ()).map_err(Clone::clone);
        let destination_fact = resolved.as_ref().map(|a| a.server.as_str()).map_err(|e| e.to_string());
        let source_of = |h: &dco_api::HandoverStatus, wired: Option<&str>| {
            if h.destination.as_deref() == dest_name.as_deref() {
                h.source.clone()
            } else {
                wired.map(str::to_string)
            }
        };
        let src = source_of(&state, wired_to.as_deref());
        let facts = Facts {
            now: &now_s,
            destination: destination_fact.clone(),
            compiled: compiled_fact.clone(),
            wired_to: wired_to.as_deref(),
            destination_serving: serving(status_of(dest_name.as_deref()).as_ref(), &tname),
            source_serving: source_facts(ctx, src.as_deref(), &tname, now),
            new_traceparent: &traceparent,
        };
        let (mut step, mut events) = run_machine(&state, &facts);
        if let Some(HandoverAction::WireTo(server)) = step.actions.first().cloned() {
            let wiring = match ctx.server(&server) {
                Some(s) => wiring_for(ctx, &s, &tname, &cfg.conversion().conversion_review_versions)
                    .map_err(Error::NotReady)?,
                None => return Err(Error::NotReady(format!("ConversionWebhookServer {server} disappeared"))),
            };
            let after = target::wire(&ctx.client, tkind, &tname, &wiring).await?;
            ctx.metrics.target_patches.inc();
            // The apply was accepted: that is the guard of DestinationReady → Patched, so step
            // again with what the target says now.
            let wired_now = wired_server(ctx, &after);
            let src = source_of(&step.next, wired_now.as_deref());
            let facts = Facts {
                wired_to: wired_now.as_deref(),
                source_serving: source_facts(ctx, src.as_deref(), &tname, now),
                ..facts.clone()
            };
            let (next, more) = run_machine(&step.next, &facts);
            step = next;
            events.extend(more);
        } else if step.next.state == HandoverState::SourceDropped
            && wired_to.is_some()
            && wired_to == dest_name
            && let Ok(w) = &dest_ready
            && !w.matches(&live)
        {
            // Settled, but the CA rotated or the review versions changed: same server, new
            // details. Not a move, so not the machine's business.
            settled_wiring_refresh = Some(w.clone());
        }
        for m in &events {
            emit(ctx, cfg, &tname, m).await;
        }
        conditions::set(
            &mut st.conditions,
            handover::CONDITION,
            step.condition.status,
            step.condition.reason,
            step.condition.message.clone(),
            gen_,
            now,
        );
        st.handover = Some(step.next);
    }
    if let Some(w) = settled_wiring_refresh {
        target::wire(&ctx.client, tkind, &tname, &w).await?;
        ctx.metrics.target_patches.inc();
        ctx.event(cfg, false, "WiringRefreshed", "Wire", format!(
            "updated {tkind_name} {tname}'s spec.conversion (caBundle or conversionReviewVersions changed) for Service {}/{}",
            w.namespace, w.service
        )).await;
    }

    // 7. Phase and summary.
    let handover_state = st.handover.as_ref().map(|h| h.state).unwrap_or_default();
    // Settled on the server the resolver names now; a pending move is not "Applied".
    let settled = handover_state == HandoverState::SourceDropped
        && st.handover.as_ref().and_then(|h| h.destination.as_deref())
            == resolved.as_ref().ok().map(|a| a.server.as_str());
    match &compiled {
        Ok(hash) => {
            conditions::remove(&mut st.conditions, condition::STALE);
            if settled {
                st.phase = Some(Phase::Applied);
                st.last_applied_plan_hash = Some(hash.clone());
                conditions::set(
                    &mut st.conditions,
                    condition::APPLIED,
                    true,
                    "Wired",
                    format!(
                        "{tkind_name} {tname} converts through ConversionWebhookServer {}",
                        st.assigned_webhook_server.as_deref().unwrap_or("?")
                    ),
                    gen_,
                    now,
                );
            } else {
                st.phase = Some(Phase::Validated);
            }
        }
        Err(why) => {
            let served_before = st.last_applied_plan_hash.is_some() && wired_to.is_some();
            if served_before {
                let fail_closed = cfg.conversion().drift_policy == DriftPolicy::FailClosed;
                st.phase = Some(if fail_closed { Phase::Failed } else { Phase::Stale });
                conditions::set(
                    &mut st.conditions,
                    condition::STALE,
                    true,
                    "SchemaDrift",
                    format!(
                        "the config no longer compiles against {tkind_name} {tname}: {why}; {}",
                        if fail_closed {
                            "driftPolicy FailClosed: conversions of the target fail until this is fixed"
                        } else {
                            "driftPolicy KeepServingStale: the last good plan keeps serving"
                        }
                    ),
                    gen_,
                    now,
                );
            } else {
                st.phase = Some(Phase::Invalid);
            }
        }
    }
    st.message = Some(summary(&st, established, &dest_ready, &compiled));
    write_status(ctx, cfg, &st).await?;
    Ok(if settled && machine_may_run {
        Action::requeue(ctx.settings.resync)
    } else {
        Action::requeue(UNSETTLED_REQUEUE)
    })
}

/// One line for `status.message`: the first thing in the way, or how it is served.
fn summary(
    st: &ConfigStatus,
    established: bool,
    dest: &Result<Wiring, String>,
    compiled: &Result<String, String>,
) -> String {
    if let Err(e) = compiled {
        return e.clone();
    }
    if !established {
        return "waiting for the target to be Established".to_string();
    }
    if let Err(e) = dest {
        return e.clone();
    }
    st.handover.as_ref().and_then(|h| h.message.clone()).unwrap_or_default()
}

async fn revert<K: ConfigKind>(cfg: &K, ctx: &Context) -> Result<Action> {
    let now = Timestamp::now();
    let tkind = cfg.target_kind();
    let tname = cfg.target_name().to_string();
    let tkind_name = target::kind_name(tkind);
    let Some(live) = target::fetch(&ctx.client, tkind, &tname).await? else {
        return Ok(Action::await_change());
    };
    let Some(server) = wired_server(ctx, &live) else {
        // Not wired to any dco server: nothing of ours to take back.
        return Ok(Action::await_change());
    };
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
        write_status(ctx, cfg, &st).await?;
        ctx.event(cfg, true, "DeletionBlocked", "Delete", msg.clone()).await;
        return Err(Error::DeletionBlocked(format!("{} {}: {msg}", K::kind(&()), cfg.name_any())));
    }
    st.phase = Some(Phase::Reverting);
    write_status(ctx, cfg, &st).await?;
    target::unwire(&ctx.client, tkind, &tname).await?;
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
