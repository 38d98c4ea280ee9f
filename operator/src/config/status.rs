//! A config's status, rendered purely from the persisted status, one observation and where the
//! handover machine came to rest: the conditions a person reads in `kubectl describe`, the
//! phase, the one-line message, and when to look again.

use std::time::Duration;

use dco_api::config::{DriftPolicy, Phase};
use dco_api::{ConfigStatus, HandoverState, HandoverStatus, webhook_path};
use dco_state::conditions;
use dco_state::handover::{self, Action};
use dco_state::machine::Settled;

use super::condition;
use super::facts::Observed;

/// How often an unsettled handover is looked at without an event.
pub const UNSETTLED_REQUEUE: Duration = Duration::from_secs(5);
/// How often a config whose target does not exist is looked at again.
pub const MISSING_TARGET_REQUEUE: Duration = Duration::from_secs(30);

/// What of the config itself the status depends on.
#[derive(Clone, Copy, Debug)]
pub struct Config<'a> {
    pub generation: Option<i64>,
    pub drift_policy: DriftPolicy,
    pub target_name: &'a str,
}

/// The status to write.
pub fn render(
    prev: Option<&ConfigStatus>,
    cfg: Config<'_>,
    o: &Observed,
    settled: &Settled<HandoverStatus, Action>,
) -> ConfigStatus {
    let (gen_, now) = (cfg.generation, o.now);
    let tname = cfg.target_name;
    let desc = &o.target_desc;
    let mut st = prev.cloned().unwrap_or_default();
    st.observed_generation = gen_;
    st.webhook_path = Some(webhook_path(tname));
    let set = |st: &mut ConfigStatus, type_: &str, ok: bool, reason: &str, msg: String| {
        conditions::set(&mut st.conditions, type_, ok, reason, msg, gen_, now)
    };
    let c = settled.condition.clone();
    set(&mut st, handover::CONDITION, c.status, c.reason, c.message);
    st.handover = Some(settled.state.clone());

    let (Some(live), Some(compiled)) = (&o.target, &o.compiled) else {
        let msg = format!("{desc} does not exist; create it or fix the config's target name");
        set(&mut st, condition::TARGET_HEALTHY, false, "TargetNotFound", msg.clone());
        st.phase = Some(if st.last_applied_plan_hash.is_some() { Phase::Stale } else { Phase::Pending });
        st.message = Some(msg);
        return st;
    };
    st.observed_target_generation = live.pointer("/metadata/generation").and_then(serde_json::Value::as_i64);

    if let Some(r) = &compiled.report {
        st.spoke_statuses = r.spokes.clone();
        st.overall_lossless = Some(r.overall_lossless);
        st.schema_hash = Some(r.schema_hash.clone());
    }
    match &compiled.outcome {
        Ok((_, msg)) => set(&mut st, condition::VALIDATED, true, "Compiled", msg.clone()),
        Err((reason, msg)) => set(&mut st, condition::VALIDATED, false, reason, msg.clone()),
    }
    if let Ok(a) = &o.resolved {
        st.assigned_webhook_server = Some(a.server.clone());
    }
    if o.established {
        set(&mut st, condition::TARGET_HEALTHY, true, "Established", format!("{desc} is established"));
    } else {
        let msg = format!("{desc} is not Established yet; waiting for the apiserver to accept it");
        set(&mut st, condition::TARGET_HEALTHY, false, "NotEstablished", msg);
    }
    let server_msg = match (&o.dest_wiring, &o.resolved) {
        (Ok(_), Ok(a)) => {
            format!("ConversionWebhookServer {} is available (assigned by {:?})", a.server, a.by)
        }
        (Err(e), _) | (Ok(_), Err(e)) => e.clone(),
    };
    let available = o.dest_wiring.is_ok();
    let reason = if available { "Available" } else { "NotAvailable" };
    set(&mut st, condition::WEBHOOK_SERVER_READY, available, reason, server_msg);

    match &compiled.outcome {
        Ok((hash, _)) => {
            conditions::remove(&mut st.conditions, condition::STALE);
            if is_settled(o, settled) {
                st.phase = Some(Phase::Applied);
                st.last_applied_plan_hash = Some(hash.clone());
                let msg = format!(
                    "{desc} converts through ConversionWebhookServer {}",
                    st.assigned_webhook_server.as_deref().unwrap_or("?")
                );
                set(&mut st, condition::APPLIED, true, "Wired", msg);
            } else {
                st.phase = Some(Phase::Validated);
            }
        }
        Err((_, why)) => {
            let served_before = st.last_applied_plan_hash.is_some() && o.facts.wired_to.is_some();
            if served_before {
                let fail_closed = cfg.drift_policy == DriftPolicy::FailClosed;
                st.phase = Some(if fail_closed { Phase::Failed } else { Phase::Stale });
                let msg = format!(
                    "the config no longer compiles against {desc}: {why}; {}",
                    if fail_closed {
                        "driftPolicy FailClosed: conversions of the target fail until this is fixed"
                    } else {
                        "driftPolicy KeepServingStale: the last good plan keeps serving"
                    }
                );
                set(&mut st, condition::STALE, true, "SchemaDrift", msg);
            } else {
                st.phase = Some(Phase::Invalid);
            }
        }
    }
    st.message = Some(summary(o, &settled.state));
    st
}

/// Settled on the server the resolver names now; a pending move is not "Applied".
fn is_settled(o: &Observed, settled: &Settled<HandoverStatus, Action>) -> bool {
    settled.state.state == HandoverState::SourceDropped
        && settled.state.destination.as_deref() == o.resolved.as_ref().ok().map(|a| a.server.as_str())
}

/// One line for `status.message`: the first thing in the way, or how it is served.
fn summary(o: &Observed, handover: &HandoverStatus) -> String {
    if let Some(Err((_, e))) = o.compiled.as_ref().map(|c| &c.outcome) {
        return e.clone();
    }
    if !o.established {
        return "waiting for the target to be Established".to_string();
    }
    if let Err(e) = &o.dest_wiring {
        return e.clone();
    }
    handover.message.clone().unwrap_or_default()
}

/// When to look again: soon while anything is in motion or in the way, at the resync period
/// once settled.
pub fn requeue(o: &Observed, settled: &Settled<HandoverStatus, Action>, resync: Duration) -> Duration {
    if o.target.is_none() {
        return MISSING_TARGET_REQUEUE;
    }
    let compile_failed = o.facts.compiled.is_err();
    let unblocked = o.established && (o.dest_wiring.is_ok() || compile_failed);
    if is_settled(o, settled) && unblocked { resync } else { UNSETTLED_REQUEUE }
}
