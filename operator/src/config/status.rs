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
use super::conflict::{ConflictStanding, Said};
use super::facts::{self, Observed};
use super::{propagation, reverts};

/// How often an unsettled handover is looked at without an event.
pub const UNSETTLED_REQUEUE: Duration = Duration::from_secs(5);

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
    match o.conflict.condition(desc) {
        Some((reason, msg)) => set(&mut st, condition::CONFLICT, true, reason, msg),
        None => conditions::remove(&mut st.conditions, condition::CONFLICT),
    }
    if let ConflictStanding::Ignored { .. } = &o.conflict {
        // Not served by dco while the other config is: what it compiles to does not matter,
        // and Applied would claim a wiring that is the other config's.
        conditions::remove(&mut st.conditions, condition::APPLIED);
        st.phase = Some(Phase::Invalid);
        st.message = o.conflict.fact(desc).err();
        return st;
    }

    let (Some(live), Some(compiled)) = (&o.target, &o.compiled) else {
        let msg = facts::target_missing(desc);
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
        let msg = facts::target_not_established(desc);
        set(&mut st, condition::TARGET_HEALTHY, false, "NotEstablished", msg);
    }
    let (available, reason, server_msg) = server_ready(o);
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
            } else if o.facts.wired_gone.is_some() {
                // Nothing answers the target's conversions: not a config in progress.
                st.phase = Some(Phase::Failed);
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
    // Applied tells the truth about the wiring whatever the compile says: a target wired to a
    // server that is gone converts nothing; once it is being wired again, it says so until it
    // settles.
    if let Some(msg) = wired_gone(o) {
        set(&mut st, condition::APPLIED, false, WIRED_SERVER_MISSING, msg);
    } else if !is_settled(o, settled)
        && conditions::find(&st.conditions, condition::APPLIED)
            .is_some_and(|c| c.reason == WIRED_SERVER_MISSING)
    {
        let to = o.resolved.as_ref().map_or("a server", |a| a.server.as_str());
        let how = settled.state.message.clone().unwrap_or_default();
        let msg = format!("{desc} is being wired to ConversionWebhookServer {to}: {how}");
        set(&mut st, condition::APPLIED, false, "Rewiring", msg);
    }
    xrd_conditions(&mut st, o, settled, gen_);
    st.message = Some(summary(o, &settled.state));
    st
}

/// What only an XRD target has: `ConversionPropagated` and `status.generatedCRDs`,
/// `PackageManaged`, and `status.reverts`. `Applied` is False while the XRD names its server
/// but the generated CRDs do not carry the wiring yet (a move, or a heal after a revert).
fn xrd_conditions(
    st: &mut ConfigStatus,
    o: &Observed,
    settled: &Settled<HandoverStatus, Action>,
    gen_: Option<i64>,
) {
    let now = o.now;
    let set = |st: &mut ConfigStatus, type_: &str, ok: bool, reason: &str, msg: String| {
        conditions::set(&mut st.conditions, type_, ok, reason, msg, gen_, now)
    };
    let Some(p) = &o.propagation else {
        conditions::remove(&mut st.conditions, condition::CONVERSION_PROPAGATED);
        conditions::remove(&mut st.conditions, condition::PACKAGE_MANAGED);
        st.generated_crds.clear();
        return;
    };
    st.generated_crds = p.crds.clone();
    match &p.verdict {
        Ok(msg) => {
            set(st, condition::CONVERSION_PROPAGATED, true, propagation::reason::PROPAGATED, msg.clone())
        }
        Err((reason, msg)) => set(st, condition::CONVERSION_PROPAGATED, false, reason, msg.clone()),
    }
    match o.package.as_ref().and_then(Option::as_deref) {
        Some(owner) => {
            let msg = format!(
                "the XRD is owned by {owner}: Crossplane's package manager writes it again from the package on every resync, which drops spec.conversion unless the XRD guard is on (--xrd-guard, chart value admission.xrdGuard.enabled: docs/crossplane.md); dco re-wires it after each drop (WiringReverted Events, status.reverts), and objects written at a spoke version in between are stored unconverted"
            );
            set(st, condition::PACKAGE_MANAGED, true, "PackageOwned", msg);
        }
        None => {
            let msg = "no Crossplane package owns the XRD".to_string();
            set(st, condition::PACKAGE_MANAGED, false, "NotPackageOwned", msg);
        }
    }
    if let Some(r) = &o.revert {
        st.reverts = Some(reverts::record(st.reverts.as_ref(), r, &now.to_string()));
        let msg =
            format!("{} changed {}'s spec.conversion: {}; re-wiring it", r.writer, o.target_desc, r.change);
        set(st, condition::APPLIED, false, "WiringReverted", msg);
    } else if let Err((_, why)) = &p.verdict
        && !is_settled(o, settled)
        && settled.state.state == HandoverState::SourceDropped
    {
        let msg = format!("{} is wired, but not everything the apiserver reads is yet: {why}", o.target_desc);
        set(st, condition::APPLIED, false, "NotPropagated", msg);
    }
}

/// `WebhookServerReady`: whether the destination can be wired to, its reason and message.
fn server_ready(o: &Observed) -> (bool, &'static str, String) {
    let msg = match (&o.dest_wiring, &o.resolved) {
        (Ok(_), Ok(a)) => {
            format!("ConversionWebhookServer {} is available (assigned by {:?})", a.server, a.by)
        }
        (Err(e), _) | (Ok(_), Err(e)) => e.clone(),
    };
    let available = o.dest_wiring.is_ok();
    (available, if available { "Available" } else { "NotAvailable" }, msg)
}

/// `Applied`'s reason while the target names a server that is gone.
pub const WIRED_SERVER_MISSING: &str = "WiredServerMissing";

/// What a person must know when the target's wired server is gone (`Facts::wired_gone`): that
/// its conversions fail, and what brings it back.
fn wired_gone(o: &Observed) -> Option<String> {
    let gone = o.facts.wired_gone.as_ref()?;
    let next = match &o.resolved {
        Ok(a) => format!(
            "it is moved to ConversionWebhookServer {} once that server reports the target (condition HandoverReady)",
            a.server
        ),
        Err(why) => why.clone(),
    };
    Some(format!(
        "{}'s spec.conversion names {}, so every conversion of the target fails; {next}",
        o.target_desc,
        gone.describe()
    ))
}

/// Settled on the server the resolver names now; a pending move is not "Applied".
fn is_settled(o: &Observed, settled: &Settled<HandoverStatus, Action>) -> bool {
    settled.state.state == HandoverState::SourceDropped
        && settled.state.destination.as_deref() == o.resolved.as_ref().ok().map(|a| a.server.as_str())
        && o.facts.propagated.is_ok()
}

/// One line for `status.message`: the first thing in the way, or how it is served.
fn summary(o: &Observed, handover: &HandoverStatus) -> String {
    if let Some(Err((_, e))) = o.compiled.as_ref().map(|c| &c.outcome) {
        return e.clone();
    }
    if !o.established {
        return "waiting for the target to be Established".to_string();
    }
    if let Some(msg) = wired_gone(o) {
        return msg;
    }
    if let Err(e) = &o.dest_wiring {
        return e.clone();
    }
    if let Some(r) = &o.revert {
        return format!("{} reverted the wiring ({}); re-wiring", r.writer, r.change);
    }
    if handover.state == HandoverState::SourceDropped
        && let Err(why) = &o.facts.propagated
    {
        return format!("waiting for Crossplane to propagate the wiring: {why}");
    }
    handover.message.clone().unwrap_or_default()
}

/// When to look again: soon while anything is in motion or in the way, at the resync period
/// once at rest. A config waiting for its target, or for the config chosen over it to go, is
/// at rest: the target's creation and the other config's deletion wake it through their
/// watches (runtime/controllers.rs, wake/fanout.rs). Timers of 30 s for those, at 10,000
/// configs naming absent targets, were 333 wakes a second for nothing.
pub fn requeue(o: &Observed, settled: &Settled<HandoverStatus, Action>, resync: Duration) -> Duration {
    if at_rest(o, settled) { resync } else { UNSETTLED_REQUEUE }
}

/// Nothing can move until an input changes: settled on the resolved server with nothing in
/// the way, or held back whatever the servers' Leases say (its target missing, or another
/// config chosen over it). A timer wake of a config at rest with nothing changed makes no
/// request (config/idle.rs). A move in flight is not at rest: the Leases it waits on are no
/// input of the idle wake.
pub fn at_rest(o: &Observed, settled: &Settled<HandoverStatus, Action>) -> bool {
    if o.target.is_none() || matches!(o.conflict, ConflictStanding::Ignored { .. }) {
        return true;
    }
    let compile_failed = o.facts.compiled.is_err();
    let unblocked = o.established && (o.dest_wiring.is_ok() || compile_failed);
    is_settled(o, settled) && unblocked
}

#[cfg(test)]
mod tests {
    use dco_api::assign::{AssignedBy, Assignment};
    use dco_state::handover::{Facts, Handover};
    use dco_state::machine::Machine;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::config::facts::{Compiled, Report};
    use crate::config::target::Wiring;

    const RESYNC: Duration = Duration::from_secs(300);

    fn wiring() -> Wiring {
        crate::testing::wiring("widgets.example.org")
    }

    /// A target that exists, compiles, resolves to `a` and is wired to `a`.
    fn observed() -> Observed {
        let facts = Facts {
            now: "2026-12-01T00:00:00Z".into(),
            destination: Ok("a".into()),
            compiled: Ok(()),
            target_ready: Ok(()),
            destination_ready: Ok(()),
            wired_to: Some("a".into()),
            wiring_current: true,
            servers: Default::default(),
            new_traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            conflict: Ok(()),
            wired_gone: None,
            propagated: Ok(()),
        };
        Observed {
            facts,
            now: Timestamp::from_second(1_800_000_000).unwrap(),
            target_desc: "CustomResourceDefinition widgets.example.org".into(),
            target: Some(json!({"metadata": {"generation": 4}})),
            compiled: Some(Compiled {
                report: Some(Report { spokes: vec![], overall_lossless: true, schema_hash: "h1".into() }),
                outcome: Ok(("plan-1".into(), "compiles against the live schemas".into())),
            }),
            resolved: Ok(Assignment { server: "a".into(), by: AssignedBy::Default }),
            established: true,
            dest_wiring: Ok(wiring()),
            conflict: ConflictStanding::Alone,
            propagation: None,
            package: None,
            revert: None,
        }
    }

    fn cfg(policy: DriftPolicy) -> Config<'static> {
        Config { generation: Some(2), drift_policy: policy, target_name: "widgets.example.org" }
    }

    fn settle(state: &HandoverStatus, o: &Observed) -> Settled<HandoverStatus, Action> {
        Handover::settle(state, &o.facts, 8)
    }

    fn settled_on_a() -> HandoverStatus {
        HandoverStatus {
            state: HandoverState::SourceDropped,
            destination: Some("a".into()),
            attempt: 1,
            ..Default::default()
        }
    }

    fn condition<'a>(st: &'a ConfigStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
        let c = conditions::find(&st.conditions, type_).unwrap_or_else(|| panic!("no {type_} in {st:?}"));
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn settled_on_the_resolved_server_is_applied_and_resyncs_slowly() {
        let o = observed();
        let s = settle(&settled_on_a(), &o);
        let st = render(None, cfg(DriftPolicy::default()), &o, &s);
        assert_eq!(st.phase, Some(Phase::Applied));
        assert_eq!(st.last_applied_plan_hash.as_deref(), Some("plan-1"));
        assert_eq!(st.observed_generation, Some(2));
        assert_eq!(st.observed_target_generation, Some(4));
        assert_eq!(st.webhook_path.as_deref(), Some("/convert/widgets.example.org"));
        assert_eq!(st.assigned_webhook_server.as_deref(), Some("a"));
        assert_eq!(st.schema_hash.as_deref(), Some("h1"));
        assert_eq!(condition(&st, condition::APPLIED).0, "True");
        assert_eq!(
            condition(&st, condition::VALIDATED),
            ("True", "Compiled", "compiles against the live schemas")
        );
        assert_eq!(condition(&st, condition::TARGET_HEALTHY).1, "Established");
        assert_eq!(condition(&st, condition::WEBHOOK_SERVER_READY).1, "Available");
        assert_eq!(condition(&st, handover::CONDITION), ("True", "HandoverReady", "served by server a"));
        assert_eq!(requeue(&o, &s, RESYNC), RESYNC);
        assert!(at_rest(&o, &s));
    }

    #[test]
    fn a_move_in_flight_is_validated_and_looked_at_soon() {
        let mut o = observed();
        o.facts.wired_to = Some("b".into());
        let moving = HandoverStatus { destination: Some("b".into()), ..settled_on_a() };
        let s = settle(&moving, &o);
        let st = render(None, cfg(DriftPolicy::default()), &o, &s);
        assert_eq!(s.state.state, HandoverState::Compiling);
        assert_eq!(st.phase, Some(Phase::Validated));
        assert!(conditions::find(&st.conditions, condition::APPLIED).is_none());
        assert_eq!(st.message.as_deref(), s.state.message.as_deref());
        assert_eq!(requeue(&o, &s, RESYNC), UNSETTLED_REQUEUE);
        assert!(!at_rest(&o, &s), "a move waits on Leases, which no idle wake compares");
    }

    #[test]
    fn a_missing_target_is_pending_or_stale_and_rechecked() {
        let mut o = observed();
        o.target = None;
        o.compiled = None;
        o.established = false;
        o.facts.target_ready = Err("CustomResourceDefinition widgets.example.org does not exist".into());
        let s = settle(&HandoverStatus::default(), &o);
        let st = render(None, cfg(DriftPolicy::default()), &o, &s);
        assert_eq!(st.phase, Some(Phase::Pending));
        let (status, reason, msg) = condition(&st, condition::TARGET_HEALTHY);
        assert_eq!((status, reason), ("False", "TargetNotFound"));
        assert!(msg.contains("create it or fix the config's target name"), "{msg}");
        assert_eq!(condition(&st, handover::CONDITION).1, "AwaitingTarget");
        assert_eq!(requeue(&o, &s, RESYNC), RESYNC);
        assert!(at_rest(&o, &s), "only the target's creation can move it");
        let served =
            ConfigStatus { last_applied_plan_hash: Some("plan-0".into()), ..ConfigStatus::default() };
        assert_eq!(render(Some(&served), cfg(DriftPolicy::default()), &o, &s).phase, Some(Phase::Stale));
    }

    #[test]
    fn a_compile_failure_is_invalid_or_drift_by_policy() {
        let mut o = observed();
        o.compiled.as_mut().unwrap().outcome = Err(("CompileFailed", "1 error(s): spec.size".into()));
        o.facts.compiled = Err("1 error(s): spec.size".into());
        let s = settle(&settled_on_a(), &o);
        let st = render(None, cfg(DriftPolicy::default()), &o, &s);
        assert_eq!(st.phase, Some(Phase::Invalid));
        assert_eq!(condition(&st, condition::VALIDATED), ("False", "CompileFailed", "1 error(s): spec.size"));
        assert_eq!(st.message.as_deref(), Some("1 error(s): spec.size"));

        let served =
            ConfigStatus { last_applied_plan_hash: Some("plan-0".into()), ..ConfigStatus::default() };
        let st = render(Some(&served), cfg(DriftPolicy::KeepServingStale), &o, &s);
        assert_eq!(st.phase, Some(Phase::Stale));
        assert!(condition(&st, condition::STALE).2.contains("the last good plan keeps serving"));
        let st = render(Some(&served), cfg(DriftPolicy::FailClosed), &o, &s);
        assert_eq!(st.phase, Some(Phase::Failed));
        assert!(condition(&st, condition::STALE).2.contains("FailClosed"));
        // A settled target whose config stopped compiling is still looked at on resync.
        assert_eq!(requeue(&o, &s, RESYNC), RESYNC);
    }

    #[test]
    fn what_is_in_the_way_is_the_message() {
        let mut o = observed();
        o.established = false;
        o.facts.target_ready = Err("not Established yet".into());
        let s = settle(&settled_on_a(), &o);
        let st = render(None, cfg(DriftPolicy::default()), &o, &s);
        assert_eq!(condition(&st, condition::TARGET_HEALTHY).1, "NotEstablished");
        assert_eq!(st.message.as_deref(), Some("waiting for the target to be Established"));
        assert_eq!(requeue(&o, &s, RESYNC), UNSETTLED_REQUEUE);
        assert!(!at_rest(&o, &s));

        let mut o = observed();
        o.dest_wiring = Err("ConversionWebhookServer a has no ready replica yet".into());
        o.facts.destination_ready = Err("ConversionWebhookServer a has no ready replica yet".into());
        let s = settle(&HandoverStatus::default(), &o);
        let st = render(None, cfg(DriftPolicy::default()), &o, &s);
        let (status, reason, msg) = condition(&st, condition::WEBHOOK_SERVER_READY);
        assert_eq!((status, reason), ("False", "NotAvailable"));
        assert_eq!(st.message.as_deref(), Some(msg));
        assert_eq!(condition(&st, handover::CONDITION).1, "AwaitingDestination");
        assert_eq!(st.phase, Some(Phase::Validated));
    }

    /// A pinned server force-deleted under its target: Applied turns False with the Service and
    /// server named, the phase Failed; when the server exists again, Rewiring until settled,
    /// then Applied again.
    #[test]
    fn a_wired_server_that_is_gone_is_not_applied_until_rewired() {
        let applied = {
            let o = observed();
            render(None, cfg(DriftPolicy::default()), &o, &settle(&settled_on_a(), &o))
        };
        assert_eq!(condition(&applied, condition::APPLIED).0, "True");

        let pin_missing = "spec.webhookServerRef.name names ConversionWebhookServer \"a\", which does not exist; create it or change the reference";
        let mut o = observed();
        o.resolved = Err(pin_missing.into());
        o.facts.destination = Err(pin_missing.into());
        o.dest_wiring = Err(pin_missing.into());
        o.facts.destination_ready = Err(pin_missing.into());
        o.facts.wired_to = None;
        o.facts.wired_gone = Some(dco_state::handover::Gone {
            service: "dco-system/dco-webhook-a".into(),
            server: Some("a".into()),
        });
        let s = settle(&settled_on_a(), &o);
        let st = render(Some(&applied), cfg(DriftPolicy::default()), &o, &s);
        let want = format!(
            "CustomResourceDefinition widgets.example.org's spec.conversion names Service dco-system/dco-webhook-a (of ConversionWebhookServer a, which no longer exists), so every conversion of the target fails; {pin_missing}"
        );
        assert_eq!(condition(&st, condition::APPLIED), ("False", WIRED_SERVER_MISSING, want.as_str()));
        assert_eq!(st.phase, Some(Phase::Failed));
        assert_eq!(st.message.as_deref(), Some(want.as_str()));
        assert_eq!(condition(&st, handover::CONDITION).1, "WiredServerMissing");
        assert_eq!(s.transitions.len(), 1, "one Warning Event: {:?}", s.transitions);
        assert_eq!(requeue(&o, &s, RESYNC), UNSETTLED_REQUEUE);

        // Unpinned onto the default b: the message says where it goes.
        let mut moving = o.clone();
        moving.resolved = Ok(Assignment { server: "b".into(), by: AssignedBy::Default });
        let st2 = render(Some(&st), cfg(DriftPolicy::default()), &moving, &s);
        assert!(
            condition(&st2, condition::APPLIED).2.ends_with(
                "it is moved to ConversionWebhookServer b once that server reports the target (condition HandoverReady)"
            ),
            "{st2:?}"
        );

        // Created again, not ready yet: no longer gone, not yet wired.
        let mut back = observed();
        back.dest_wiring = Err("ConversionWebhookServer a has no ready replica yet".into());
        back.facts.destination_ready = Err("ConversionWebhookServer a has no ready replica yet".into());
        let s2 = settle(&s.state, &back);
        let st3 = render(Some(&st), cfg(DriftPolicy::default()), &back, &s2);
        let (status, reason, msg) = condition(&st3, condition::APPLIED);
        assert_eq!((status, reason), ("False", "Rewiring"));
        assert!(
            msg.starts_with(
                "CustomResourceDefinition widgets.example.org is being wired to ConversionWebhookServer a: "
            ),
            "{msg}"
        );
        assert_eq!(st3.phase, Some(Phase::Validated));

        // Ready: re-wired, settled, Applied.
        let back = observed();
        let s3 = settle(&s.state, &back);
        let st4 = render(Some(&st3), cfg(DriftPolicy::default()), &back, &s3);
        assert_eq!(condition(&st4, condition::APPLIED).0, "True");
        assert_eq!(st4.phase, Some(Phase::Applied));
    }

    #[test]
    fn a_conflict_shows_on_both_configs_and_holds_back_the_ignored_one() {
        let desc = "CustomResourceDefinition widgets.example.org";
        // The ignored one: Conflict=True, HandoverReady=False/Conflict, Invalid, not Applied,
        // and the machine writes nothing.
        let mut o = observed();
        o.conflict = ConflictStanding::Ignored { chosen: "CRDConversionConfig a".into() };
        o.facts.conflict = o.conflict.fact(desc);
        let applied =
            render(None, cfg(DriftPolicy::default()), &observed(), &settle(&settled_on_a(), &observed()));
        let s = settle(&settled_on_a(), &o);
        assert!(s.actions.is_empty());
        let st = render(Some(&applied), cfg(DriftPolicy::default()), &o, &s);
        let want = "CRDConversionConfig a also names CustomResourceDefinition widgets.example.org and is the one served (the first by kind, then name, as every webhook replica chooses); this config is ignored and never writes the target: delete one of them";
        assert_eq!(condition(&st, condition::CONFLICT), ("True", "Conflict", want));
        assert_eq!(condition(&st, handover::CONDITION), ("False", "Conflict", want));
        assert!(conditions::find(&st.conditions, condition::APPLIED).is_none(), "{st:?}");
        assert_eq!(st.phase, Some(Phase::Invalid));
        assert_eq!(st.message.as_deref(), Some(want));
        assert_eq!(requeue(&o, &s, RESYNC), RESYNC);
        assert!(at_rest(&o, &s), "held back: only the configs naming the target can move it");

        // The chosen one proceeds as usual and says what it overrides.
        let mut o = observed();
        o.conflict = ConflictStanding::Chosen { ignored: vec!["XRDConversionConfig b".into()] };
        let s = settle(&settled_on_a(), &o);
        let st = render(None, cfg(DriftPolicy::default()), &o, &s);
        assert_eq!(st.phase, Some(Phase::Applied));
        let (status, reason, msg) = condition(&st, condition::CONFLICT);
        assert_eq!((status, reason), ("True", "ChosenOverAnother"));
        assert!(msg.starts_with("XRDConversionConfig b also names CustomResourceDefinition widgets.example.org; this config is the one served"), "{msg}");
        assert_eq!(requeue(&o, &s, RESYNC), RESYNC);
        assert!(at_rest(&o, &s), "chosen and settled");
        let mut moving = o.clone();
        moving.facts.wired_to = Some("b".into());
        let m = settle(&HandoverStatus { destination: Some("b".into()), ..settled_on_a() }, &moving);
        assert!(!at_rest(&moving, &m), "chosen and moving");

        // Once the other is gone the condition goes too.
        let o = observed();
        let st2 = render(Some(&st), cfg(DriftPolicy::default()), &o, &settle(&settled_on_a(), &o));
        assert!(conditions::find(&st2.conditions, condition::CONFLICT).is_none());
        assert_eq!(st2.phase, Some(Phase::Applied));
    }

    /// An XRD settled on `a` whose generated CRDs do or do not carry the wiring.
    fn xrd_observed(propagated: bool, package: Option<&str>) -> Observed {
        use dco_api::config::{GeneratedCrd, GeneratedRole};
        let mut o = observed();
        o.target_desc = "CompositeResourceDefinition xdbs.example.org".into();
        let crd = |name: &str, role, ok: bool| GeneratedCrd {
            name: name.into(),
            role,
            propagated: ok,
            reason: (!ok).then(|| "it has no spec.conversion (strategy None)".to_string()),
        };
        let crds = vec![
            crd("xdbs.example.org", GeneratedRole::Composite, true),
            crd("dbs.example.org", GeneratedRole::Claim, propagated),
        ];
        let verdict = if propagated {
            Ok("the generated CRDs xdbs.example.org, dbs.example.org carry the XRD's wiring".to_string())
        } else {
            Err((
                propagation::reason::CRD_DIFFERS,
                "claim CRD dbs.example.org: it has no spec.conversion (strategy None)".to_string(),
            ))
        };
        let p = propagation::Propagation { crds, verdict };
        o.facts.propagated = p.fact();
        o.propagation = Some(p);
        o.package = Some(package.map(str::to_string));
        o
    }

    #[test]
    fn an_xrd_is_applied_only_once_its_generated_crds_carry_the_wiring() {
        let lagging = xrd_observed(false, None);
        let s = settle(&settled_on_a(), &lagging);
        let st = render(None, cfg(DriftPolicy::default()), &lagging, &s);
        assert_eq!(st.generated_crds.len(), 2);
        assert!(!st.generated_crds[1].propagated);
        let (status, reason, msg) = condition(&st, condition::CONVERSION_PROPAGATED);
        assert_eq!((status, reason), ("False", "CRDDiffers"));
        assert!(msg.contains("claim CRD dbs.example.org"), "{msg}");
        assert_eq!(condition(&st, condition::APPLIED).0, "False");
        assert_eq!(condition(&st, condition::APPLIED).1, "NotPropagated");
        assert_eq!(condition(&st, handover::CONDITION).1, "AwaitingPropagation");
        assert_ne!(st.phase, Some(Phase::Applied));
        assert_eq!(requeue(&lagging, &s, RESYNC), UNSETTLED_REQUEUE);
        assert!(!at_rest(&lagging, &s));
        assert_eq!(condition(&st, condition::PACKAGE_MANAGED).0, "False");

        let done = xrd_observed(true, Some("ConfigurationRevision platform-1a2b"));
        let s = settle(&settled_on_a(), &done);
        let st = render(Some(&st), cfg(DriftPolicy::default()), &done, &s);
        assert_eq!(condition(&st, condition::CONVERSION_PROPAGATED).0, "True");
        assert!(st.generated_crds.iter().all(|c| c.propagated));
        assert_eq!(condition(&st, condition::APPLIED).0, "True");
        assert_eq!(condition(&st, handover::CONDITION).0, "True");
        assert_eq!(st.phase, Some(Phase::Applied));
        let (status, _, msg) = condition(&st, condition::PACKAGE_MANAGED);
        assert!(status == "True" && msg.contains("ConfigurationRevision platform-1a2b"), "{msg}");

        // A CRD target has neither condition nor list.
        let crd = observed();
        let st = render(Some(&st), cfg(DriftPolicy::default()), &crd, &settle(&settled_on_a(), &crd));
        assert!(conditions::find(&st.conditions, condition::CONVERSION_PROPAGATED).is_none());
        assert!(conditions::find(&st.conditions, condition::PACKAGE_MANAGED).is_none());
        assert!(st.generated_crds.is_empty());
    }

    #[test]
    fn a_revert_is_counted_in_status_and_unapplies_until_healed() {
        let mut o = xrd_observed(false, Some("ConfigurationRevision platform-1a2b"));
        o.revert = Some(reverts::Revert {
            writer: "crossplane".into(),
            change: "it has no spec.conversion (strategy None)".into(),
        });
        let prev = ConfigStatus {
            reverts: Some(dco_api::config::RevertStatus { count: 2, ..Default::default() }),
            ..Default::default()
        };
        let s = settle(&settled_on_a(), &o);
        let st = render(Some(&prev), cfg(DriftPolicy::default()), &o, &s);
        let r = st.reverts.as_ref().unwrap();
        assert_eq!((r.count, r.last_writer.as_deref()), (3, Some("crossplane")));
        assert!(r.last_detected.is_some());
        let (status, reason, msg) = condition(&st, condition::APPLIED);
        assert_eq!((status, reason), ("False", "WiringReverted"));
        assert!(msg.starts_with("crossplane changed CompositeResourceDefinition xdbs.example.org"), "{msg}");
        assert!(st.message.as_deref().unwrap().contains("crossplane reverted the wiring"));
    }
}
