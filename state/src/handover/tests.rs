use super::*;
use proptest::prelude::*;

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// Replicas whose Leases read as `serving` in the destination's role.
fn as_destination(serving: &Serving) -> Replicas {
    let up = Replicas { ready: 2, live: 2, ..Replicas::default() };
    match serving {
        Serving::Serves => Replicas { by_all: true, by_any: true, ..up },
        Serving::NotServing => up,
        Serving::NoLeases => Replicas { live: 0, ..up },
        Serving::CannotTell(why) => Replicas { cannot_tell: Some(why.clone()), ..up },
    }
}

/// Replicas whose Leases read as `serving` in the source's role.
fn as_source(serving: &Serving) -> Replicas {
    let up = Replicas { ready: 2, live: 2, ..Replicas::default() };
    match serving {
        Serving::Serves => Replicas { by_any: true, ..up },
        Serving::NotServing => up,
        Serving::NoLeases => Replicas { live: 0, ..up },
        Serving::CannotTell(why) => Replicas { cannot_tell: Some(why.clone()), ..up },
    }
}

/// Facts where `dest` reads as `dst` and every other server as `src`.
fn facts(dest: &str, wired: Option<&str>, dst: Serving, src: Serving) -> Facts {
    let mut servers: std::collections::BTreeMap<String, Replicas> =
        ["old", "new", "newer", "a", "b", "c", "rogue"]
            .iter()
            .map(|s| (s.to_string(), as_source(&src)))
            .collect();
    servers.insert(dest.to_string(), as_destination(&dst));
    Facts {
        now: "2026-11-29T12:00:00Z".into(),
        destination: Ok(dest.to_string()),
        compiled: Ok(()),
        target_ready: Ok(()),
        destination_ready: Ok(()),
        wired_to: wired.map(str::to_string),
        wiring_current: true,
        servers,
        new_traceparent: TRACEPARENT.into(),
        conflict: Ok(()),
        wired_gone: None,
        propagated: Ok(()),
    }
}

/// The target names the Service of server `old`, which was force-deleted.
fn gone() -> Gone {
    Gone { service: "dco-system/dco-webhook-old".into(), server: Some("old".into()) }
}

fn at(state: S, source: Option<&str>, dest: &str) -> HandoverStatus {
    HandoverStatus {
        state,
        source: source.map(str::to_string),
        destination: Some(dest.to_string()),
        attempt: 1,
        ..Default::default()
    }
}

#[test]
fn a_first_wiring_waits_for_the_destination_like_any_move() {
    // Nothing names a webhook yet, but a live target is served all the same (strategy None,
    // or a foreign webhook): adopting it must wait until the destination holds the plan.
    let f = facts("a", None, Serving::NotServing, Serving::NoLeases);
    let s = step(&HandoverStatus::default(), &f);
    assert_eq!(s.next.state, S::Compiling);
    assert_eq!(s.next.source, None);
    assert_eq!(s.next.attempt, 1);
    assert_eq!(s.next.traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(s.event.as_ref().unwrap().reason, reason::STARTED);
    for blocked in [Serving::NotServing, Serving::CannotTell("truncated".into())] {
        let wait = step(&s.next, &facts("a", None, blocked.clone(), Serving::NoLeases));
        assert_eq!(wait.next.state, S::Compiling, "{blocked:?} must block a first wiring");
        assert!(wait.actions.is_empty());
        assert_eq!(wait.condition.reason, reason::AWAITING_DESTINATION);
    }

    let f = facts("a", None, Serving::Serves, Serving::NoLeases);
    let s = step(&s.next, &f);
    assert_eq!(s.next.state, S::DestinationReady);
    assert!(!s.next.unverified);
    assert!(s.event.as_ref().unwrap().note.contains("adopting the target"), "{:?}", s.event);
    let s = step(&s.next, &f);
    assert_eq!(s.actions, vec![Action::WireTo("a".into())]);
    assert_eq!(s.condition.reason, reason::PATCHING);

    // The SSA landed: the target now names a.
    let f = facts("a", Some("a"), Serving::Serves, Serving::NoLeases);
    let s = step(&s.next, &f);
    assert_eq!(s.next.state, S::Patched);
    let s = step(&s.next, &f);
    assert_eq!(s.next.state, S::SourceDropped);
    assert_eq!(
        s.condition,
        ConditionUpdate { status: true, reason: reason::READY, message: "served by server a".into() }
    );
}

#[test]
fn a_first_wiring_to_a_server_without_leases_is_unverified() {
    let f = facts("a", None, Serving::NoLeases, Serving::NoLeases);
    let s = step(&HandoverStatus::default(), &f);
    let s = step(&s.next, &f);
    assert_eq!(s.next.state, S::DestinationReady);
    assert!(s.next.unverified, "assumed, and said so");
}

#[test]
fn a_move_waits_for_every_destination_replica() {
    let state = at(S::Compiling, Some("old"), "new");
    for blocked in [Serving::NotServing, Serving::CannotTell("replica b's set is truncated".into())] {
        let s = step(&state, &facts("new", Some("old"), blocked.clone(), Serving::Serves));
        assert_eq!(s.next.state, S::Compiling, "{blocked:?} must block");
        assert!(s.actions.is_empty());
        assert_eq!(s.condition.reason, reason::AWAITING_DESTINATION);
    }
    let s =
        step(&state, &facts("new", Some("old"), Serving::CannotTell("truncated".into()), Serving::Serves));
    assert!(s.condition.message.contains("truncated"), "{}", s.condition.message);

    let s = step(&state, &facts("new", Some("old"), Serving::Serves, Serving::Serves));
    assert_eq!(s.next.state, S::DestinationReady);
    assert!(!s.next.unverified);
}

#[test]
fn no_leases_at_the_destination_proceeds_unverified() {
    let state = at(S::Compiling, Some("old"), "new");
    let mut f = facts("new", Some("old"), Serving::NoLeases, Serving::NotServing);
    // Not before every replica is Ready: readiness is all there is to go on.
    f.servers.get_mut("new").unwrap().replicas = 3;
    let s = Handover::settle(&state, &f, 10);
    assert_eq!((s.state.state, s.condition.reason), (S::Compiling, reason::AWAITING_DESTINATION));
    assert!(s.condition.message.contains("only 2 of its 3 replicas are Ready"), "{}", s.condition.message);
    f.servers.get_mut("new").unwrap().replicas = 2;
    let s = Handover::settle(&state, &f, 10);
    assert_eq!(s.state.state, S::DestinationReady);
    assert!(s.state.unverified);
    // The Event is a Warning that says what was not verified.
    let e = &s.transitions[0].event;
    assert!(e.warning, "{e:?}");
    assert!(
        e.note.contains("publishes no served-target Leases")
            && e.note.contains("not verified that its replicas hold a compiled plan"),
        "{}",
        e.note
    );
    assert_eq!(s.actions, vec![Action::WireTo("new".into())]);
    let f = facts("new", Some("new"), Serving::NoLeases, Serving::NotServing);
    let s = Handover::settle(&s.state, &f, 10);
    assert_eq!(s.state.state, S::SourceDropped);
    assert_eq!(s.condition.reason, reason::UNVERIFIED);
    assert!(s.condition.status);
}

#[test]
fn the_source_must_drop_before_the_move_settles() {
    let state = at(S::Patched, Some("old"), "new");
    for still in [Serving::Serves, Serving::CannotTell("stale lease".into())] {
        let s = step(&state, &facts("new", Some("new"), Serving::Serves, still));
        assert_eq!(s.next.state, S::Patched);
        assert_eq!(s.condition.reason, reason::AWAITING_SOURCE_DROP);
        assert!(s.condition.message.contains("old"));
    }
    let s = step(&state, &facts("new", Some("new"), Serving::Serves, Serving::NotServing));
    assert_eq!(s.next.state, S::SourceDropped);
    assert_eq!(s.event.unwrap().reason, reason::SOURCE_DROPPED);
}

#[test]
fn a_destination_change_before_patched_restarts_the_move() {
    for from in [S::Compiling, S::DestinationReady] {
        let state = at(from, Some("old"), "new");
        let s = step(&state, &facts("newer", Some("old"), Serving::Serves, Serving::Serves));
        assert_eq!(s.next.state, S::Compiling);
        assert_eq!(s.next.destination.as_deref(), Some("newer"));
        assert_eq!(s.next.source.as_deref(), Some("old"));
        assert_eq!(s.next.attempt, 2);
        assert_eq!(s.event.unwrap().reason, reason::RESTARTED);
    }
}

#[test]
fn a_new_answer_after_settling_starts_from_the_server_now_named() {
    let state = at(S::SourceDropped, Some("old"), "a");
    let s = step(&state, &facts("b", Some("a"), Serving::Serves, Serving::Serves));
    assert_eq!(s.next.state, S::Compiling);
    assert_eq!(s.next.source.as_deref(), Some("a"));
    assert_eq!(s.next.destination.as_deref(), Some("b"));
    assert_eq!(s.event.unwrap().reason, reason::STARTED);
}

#[test]
fn without_a_resolver_answer_nothing_moves() {
    let state = at(S::SourceDropped, Some("old"), "a");
    let mut f = facts("a", Some("a"), Serving::Serves, Serving::Serves);
    f.destination = Err("no ConversionWebhookServer can serve target x".into());
    let s = step(&state, &f);
    assert_eq!(s.next.state, S::SourceDropped);
    assert!(s.actions.is_empty());
    assert_eq!(s.condition.reason, reason::NO_SERVER);
    assert!(s.event.is_none());
}

#[test]
fn a_pin_to_a_missing_server_says_the_target_stays_wired_where_it_is() {
    let state = at(S::SourceDropped, None, "a");
    let mut f = facts("a", Some("a"), Serving::Serves, Serving::Serves);
    f.destination = Err("spec.webhookServerRef.name names ConversionWebhookServer \"later\", which does not exist; create it or change the reference".into());
    let s = step(&state, &f);
    assert_eq!(
        (s.next.state, s.event.is_none(), s.condition.reason),
        (S::SourceDropped, true, reason::NO_SERVER)
    );
    assert!(
        s.condition.message.ends_with("; meanwhile the target stays wired to server a"),
        "{}",
        s.condition.message
    );
}

/// A force-deleted server the target is still wired to: reported once (a Warning naming its
/// Service and server), the move is given up, and it recovers by a new move when a server
/// resolves again — from the gone Service, not "from nothing".
#[test]
fn a_wired_server_that_is_gone_is_reported_once_and_recovers() {
    let pinned_missing = "spec.webhookServerRef.name names ConversionWebhookServer \"old\", which does not exist; create it or change the reference";
    for before in [
        at(S::SourceDropped, None, "old"),
        at(S::Patched, Some("a"), "old"),
        at(S::Compiling, Some("old"), "a"),
        at(S::DestinationReady, Some("old"), "a"),
    ] {
        let mut f = facts("a", None, Serving::NotServing, Serving::NotServing);
        f.destination = Err(pinned_missing.into());
        f.wired_gone = Some(gone());
        let s = Handover::settle(&before, &f, 10);
        assert_eq!(s.state.state, S::Unassigned, "{before:?}");
        assert_eq!(s.transitions.len(), 1, "{before:?}");
        let e = &s.transitions[0].event;
        assert!(e.warning);
        assert_eq!(e.reason, reason::WIRED_SERVER_MISSING);
        assert_eq!(
            e.note,
            "the target's spec.conversion names Service dco-system/dco-webhook-old (of ConversionWebhookServer old, which no longer exists): every conversion of the target fails until it is wired to a server that exists"
        );
        assert_eq!((s.condition.status, s.condition.reason), (false, reason::WIRED_SERVER_MISSING));
        assert!(s.condition.message.ends_with(pinned_missing), "{}", s.condition.message);
        // Observed again, nothing more happens: no second Event.
        let again = Handover::settle(&s.state, &f, 10);
        assert!(again.transitions.is_empty() && again.actions.is_empty());

        // Unpinned (another server resolves): a move from the gone Service, verified as any.
        let f = Facts { destination: Ok("a".into()), ..f.clone() };
        let s = Handover::settle(&s.state, &f, 10);
        assert_eq!((s.state.state, s.state.source.as_deref()), (S::Compiling, None));
        let e = &s.transitions[0].event;
        assert_eq!(e.reason, reason::STARTED);
        assert_eq!(
            e.note,
            "moving the target from Service dco-system/dco-webhook-old (of ConversionWebhookServer old, which no longer exists) to server a"
        );
        assert_eq!(s.condition.reason, reason::AWAITING_DESTINATION);
        let f = Facts { servers: [("a".to_string(), as_destination(&Serving::Serves))].into(), ..f };
        let s = Handover::settle(&s.state, &f, 10);
        assert_eq!(s.actions, [Action::WireTo("a".into())]);
        let f = Facts { wired_to: Some("a".into()), wired_gone: None, ..f };
        let s = Handover::settle(&s.state, &f, 10);
        assert_eq!((s.state.state, s.condition.status), (S::SourceDropped, true));
    }

    // The pinned server created again under the same name: the target names it again. Once
    // it can answer, a move onto itself settles it and writes its new CA bundle.
    let lost = HandoverStatus { state: S::Unassigned, attempt: 1, ..HandoverStatus::default() };
    let mut f = facts("old", Some("old"), Serving::Serves, Serving::Serves);
    f.wiring_current = false;
    f.destination_ready = Err("ConversionWebhookServer old has no ready replica yet".into());
    let s = Handover::settle(&lost, &f, 10);
    assert_eq!((s.state.state, s.condition.reason), (S::Unassigned, reason::AWAITING_DESTINATION));
    assert!(s.actions.is_empty());
    f.destination_ready = Ok(());
    let s = Handover::settle(&lost, &f, 10);
    assert_eq!(
        s.transitions[0].event.note,
        "re-wiring the target to server old, which its spec.conversion names already"
    );
    assert_eq!((s.state.state, s.state.attempt), (S::SourceDropped, 2));
    assert_eq!(s.actions, [Action::Refresh("old".into())]);
}

#[test]
fn a_failing_compile_holds_the_move() {
    let mut f = facts("a", None, Serving::Serves, Serving::Serves);
    f.compiled = Err("spoke v1, rule 0: spec.size does not exist".into());
    let s = step(&HandoverStatus::default(), &f);
    assert_eq!(s.next.state, S::Unassigned);
    assert_eq!(s.condition.reason, reason::COMPILE_FAILED);
    let s = step(&at(S::Compiling, Some("old"), "a"), &f);
    assert_eq!(s.next.state, S::Compiling);
    assert!(s.actions.is_empty());
}

#[test]
fn hand_rewiring_after_settling_is_put_back() {
    let state = at(S::SourceDropped, Some("old"), "a");
    let s = step(&state, &facts("a", Some("rogue"), Serving::Serves, Serving::Serves));
    assert_eq!(s.next.state, S::DestinationReady);
    assert!(s.event.as_ref().unwrap().warning);
    let s = step(&s.next, &facts("a", Some("rogue"), Serving::Serves, Serving::Serves));
    assert_eq!(s.actions, vec![Action::WireTo("a".into())]);
}

#[test]
fn settle_returns_every_transition_of_a_chain() {
    let f = facts("a", Some("a"), Serving::Serves, Serving::NotServing);
    let s = Handover::settle(&HandoverStatus::default(), &f, 10);
    // Compiling → DestinationReady → Patched (already wired) → SourceDropped in one reconcile,
    // each its own transition with its own Event.
    assert_eq!(s.state.state, S::SourceDropped);
    let chain: Vec<_> = s.transitions.iter().map(|t| (t.from.state, t.to.state, t.event.reason)).collect();
    assert_eq!(
        chain,
        [
            (S::Unassigned, S::Compiling, reason::STARTED),
            (S::Compiling, S::DestinationReady, reason::DESTINATION_READY),
            (S::DestinationReady, S::Patched, reason::PATCHED),
            (S::Patched, S::SourceDropped, reason::SOURCE_DROPPED),
        ]
    );
    assert!(s.condition.status);
}

#[test]
fn nothing_is_wired_before_the_target_and_the_destination_can_take_it() {
    let mut f = facts("a", None, Serving::Serves, Serving::Serves);
    f.target_ready = Err("CustomResourceDefinition x is not Established yet".into());
    let s = Handover::settle(&HandoverStatus::default(), &f, 10);
    assert_eq!((s.state.state, s.transitions.len()), (S::Unassigned, 0));
    assert_eq!(s.condition.reason, reason::AWAITING_TARGET);
    f.target_ready = Ok(());
    f.destination_ready = Err("ConversionWebhookServer a has no ready replica yet".into());
    let s = Handover::settle(&HandoverStatus::default(), &f, 10);
    assert_eq!((s.state.state, s.actions.len()), (S::Unassigned, 0));
    assert_eq!(s.condition.reason, reason::AWAITING_DESTINATION);
    assert!(s.condition.message.contains("no ready replica"), "{}", s.condition.message);
    // Settled where the resolver still points: an unready server does not unsettle it.
    let settled = at(S::SourceDropped, None, "a");
    let f = Facts { wired_to: Some("a".into()), ..f };
    let s = step(&settled, &f);
    assert_eq!((s.next.state, s.condition.status), (S::SourceDropped, true));
}

#[test]
fn a_settled_target_with_stale_details_is_refreshed_without_a_transition() {
    let settled = at(S::SourceDropped, None, "a");
    let f = Facts { wiring_current: false, ..facts("a", Some("a"), Serving::Serves, Serving::Serves) };
    let s = Handover::settle(&settled, &f, 10);
    assert_eq!(s.actions, [Action::Refresh("a".into())]);
    assert!(s.transitions.is_empty());
    assert!(s.condition.status);
    // Nothing to refresh with while the destination cannot be wired (no CA yet).
    let f = Facts { destination_ready: Err("no ca.crt".into()), ..f };
    assert!(Handover::settle(&settled, &f, 10).actions.is_empty());
}

fn serving() -> impl Strategy<Value = Serving> {
    prop_oneof![
        Just(Serving::Serves),
        Just(Serving::NotServing),
        Just(Serving::NoLeases),
        Just(Serving::CannotTell("truncated".into())),
    ]
}

proptest! {
    /// Over any sequence of observations, the machine wires the target to a server only when
    /// that server's replicas all reported the target in this move (or it could not publish
    /// Leases at all, or the target named it already) — a first wiring included — and it
    /// never wires anything while the resolver has no answer.
    #[test]
    fn never_wires_to_an_unready_destination(
        seq in proptest::collection::vec((0usize..3, 0usize..4, serving(), serving(), any::<bool>(), any::<bool>()), 1..60)
    ) {
        let servers = ["a", "b", "c"];
        let mut state = HandoverStatus::default();
        let mut wired: Option<&str> = None;
        // For the current attempt: was the destination proven (or exempt) before wiring?
        let mut proven: Option<String> = None;
        for (d, w, dst, src, resolver_ok, propagated) in seq {
            let dest = servers[d];
            let mut f = facts(dest, wired, dst.clone(), src);
            if !resolver_ok { f.destination = Err("none".into()); }
            if !propagated { f.propagated = Err("CRD x.example.org names no webhook".into()); }
            let before = state.clone();
            let s = step(&state, &f);
            // The source is never let go, nor the target called ready, while what the
            // apiserver reads does not carry the wiring yet.
            if before.state == S::Patched && s.next.state == S::SourceDropped { prop_assert!(propagated); }
            if s.condition.status { prop_assert!(propagated); }
            if s.next.attempt != before.attempt { proven = None; }
            if before.state == S::Compiling && s.next.state == S::DestinationReady {
                let exempt = before.source.as_deref() == Some(dest);
                prop_assert!(exempt || matches!(dst, Serving::Serves | Serving::NoLeases));
                proven = s.next.destination.clone();
            }
            if before.state == S::SourceDropped && s.next.state == S::DestinationReady {
                proven = s.next.destination.clone();
            }
            for a in &s.actions {
                let Action::WireTo(to) = a else {
                    prop_assert!(false, "a refresh while wiring_current is true: {a:?}");
                    continue;
                };
                prop_assert!(resolver_ok);
                prop_assert_eq!(Some(to), proven.as_ref());
                // The executor applies it; sometimes it fails and nothing changes.
                if w != 0 { wired = servers.iter().copied().find(|s| *s == to.as_str()); }
            }
            state = s.next;
        }
    }
}

/// Every (state × facts) combination over two servers and a foreign webhook: each step keeps
/// the invariants a move rests on, and every settle is bounded and chains its transitions.
#[test]
fn every_state_under_every_facts() {
    let states = [S::Unassigned, S::Compiling, S::DestinationReady, S::Patched, S::SourceDropped];
    let names = [None, Some("a"), Some("b")];
    let servings = [Serving::Serves, Serving::NotServing, Serving::NoLeases, Serving::CannotTell("t".into())];
    let mut checked = 0u32;
    for state in states {
        for source in names {
            for current in [None, Some("a"), Some("b")] {
                let before = HandoverStatus {
                    state,
                    source: source.map(str::to_string),
                    destination: current.map(str::to_string),
                    attempt: 3,
                    ..HandoverStatus::default()
                };
                for dest in [Ok("a"), Ok("b"), Err("no server")] {
                    for (compiled, target_ready, dest_ready) in bools3() {
                        for wired in [None, Some("a"), Some("b"), Some("foreign"), Some("gone")] {
                            // "gone": the target names the Service of a server that no longer
                            // exists, so no server is wired.
                            let (wired, wired_gone) = match wired {
                                Some("gone") => (None, Some(gone())),
                                w => (w, None),
                            };
                            for (wiring_current, propagated) in
                                [(true, true), (false, true), (true, false), (false, false)]
                            {
                                for a in &servings {
                                    for b in &servings {
                                        let f = Facts {
                                            now: "2026-12-01T00:00:00Z".into(),
                                            destination: dest.map(str::to_string).map_err(str::to_string),
                                            compiled: ok_or(compiled, "compile error"),
                                            target_ready: ok_or(target_ready, "not established"),
                                            destination_ready: ok_or(dest_ready, "no ready replica"),
                                            wired_to: wired.map(str::to_string),
                                            wiring_current,
                                            servers: [
                                                ("a".to_string(), mixed(a)),
                                                ("b".to_string(), mixed(b)),
                                            ]
                                            .into(),
                                            new_traceparent: TRACEPARENT.into(),
                                            conflict: Ok(()),
                                            wired_gone: wired_gone.clone(),
                                            propagated: ok_or(
                                                propagated,
                                                "CRD x.example.org names no webhook",
                                            ),
                                        };
                                        check(&before, &f);
                                        checked += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 5 * 3 * 3 * 3 * 8 * 5 * 4 * 16);
}

fn bools3() -> impl Iterator<Item = (bool, bool, bool)> {
    (0..8).map(|i| (i & 1 == 0, i & 2 == 0, i & 4 == 0))
}

fn ok_or(ok: bool, why: &str) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why.to_string()) }
}

/// Replicas that read as `serving` in both roles.
fn mixed(serving: &Serving) -> Replicas {
    let (d, s) = (as_destination(serving), as_source(serving));
    Replicas { by_any: d.by_any || s.by_any, ..d }
}

fn check(before: &HandoverStatus, f: &Facts) {
    let s = step(before, f);
    let ctx = format!("{before:?}\n{f:?}\n→ {s:?}");
    let dest = f.destination.as_deref().ok();
    let gate_ok = f.target_ready.is_ok() && f.destination_ready.is_ok();
    let moved = s.next.state != before.state || s.next.attempt != before.attempt;
    // One Event exactly for each transition.
    assert_eq!(s.event.is_some(), moved, "{ctx}");
    // Ready only when settled, and only while what the apiserver reads carries the wiring.
    if s.condition.status {
        assert_eq!(s.next.state, S::SourceDropped, "{ctx}");
        assert!(f.propagated.is_ok(), "{ctx}");
    }
    // A state that holds the gone server serves the target is given up, once, with a Warning
    // naming its Service, and nothing is written.
    let lost = f.wired_gone.is_some() && believes_served(before);
    if lost {
        assert_eq!((s.next.state, s.next.attempt), (S::Unassigned, before.attempt), "{ctx}");
        assert_eq!((s.next.source.as_deref(), s.next.destination.as_deref()), (None, None), "{ctx}");
        let e = s.event.as_ref().expect("an Event");
        assert!(e.warning && e.reason == reason::WIRED_SERVER_MISSING, "{ctx}");
        assert!(
            e.note.contains("Service dco-system/dco-webhook-old (of ConversionWebhookServer old,"),
            "{ctx}"
        );
        assert!(s.actions.is_empty(), "{ctx}");
    }
    // Once given up, it is not given up again: the next step is never another loss.
    if s.next.state == S::Unassigned {
        assert!(!believes_served(&s.next), "{ctx}");
    }
    // No resolver answer: nothing moves (but a gone wiring is reported), nothing is done.
    if dest.is_none() {
        assert!(!moved || lost, "{ctx}");
        assert!(s.actions.is_empty(), "{ctx}");
        let want = if f.wired_gone.is_some() { reason::WIRED_SERVER_MISSING } else { reason::NO_SERVER };
        assert_eq!(s.condition.reason, want, "{ctx}");
    }
    // A move starts (or restarts) only through the gate, and takes its source from the wiring.
    if s.next.attempt != before.attempt {
        assert!(gate_ok && s.next.state == S::Compiling, "{ctx}");
        assert_eq!(s.next.source, f.wired_to, "{ctx}");
        assert_eq!(s.next.destination.as_deref(), dest, "{ctx}");
    }
    for action in &s.actions {
        match action {
            Action::WireTo(to) => {
                assert!(gate_ok, "{ctx}");
                assert_eq!(Some(to.as_str()), dest, "{ctx}");
                assert_eq!((before.state, s.next.state), (S::DestinationReady, S::DestinationReady), "{ctx}");
            }
            Action::Refresh(to) => {
                assert!(f.destination_ready.is_ok() && !f.wiring_current, "{ctx}");
                assert_eq!(f.wired_to.as_deref(), Some(to.as_str()), "{ctx}");
                assert_eq!(Some(to.as_str()), dest, "{ctx}");
                assert!(!moved && s.next.state == S::SourceDropped, "{ctx}");
            }
        }
    }
    // Entering DestinationReady from Compiling: the destination proved it serves (or could not
    // publish Leases), a first wiring included, unless the target named it already.
    if before.state == S::Compiling && s.next.state == S::DestinationReady {
        let dest = dest.unwrap();
        let exempt = before.source.as_deref() == Some(dest);
        let proven = matches!(f.replicas(dest).as_destination(), Serving::Serves | Serving::NoLeases);
        assert!(gate_ok && f.compiled.is_ok() && (exempt || proven), "{ctx}");
        assert_eq!(
            s.next.unverified,
            !exempt && f.replicas(dest).as_destination() == Serving::NoLeases,
            "{ctx}"
        );
    }
    // Patched only once the target names the destination.
    if s.next.state == S::Patched && before.state != S::Patched {
        assert_eq!(f.wired_to.as_deref(), dest, "{ctx}");
    }
    // Settling: the generated CRDs name the destination, and the source let go (or there was
    // none). Never before: the apiserver may still call the source.
    if before.state == S::Patched && s.next.state == S::SourceDropped {
        assert!(f.propagated.is_ok(), "{ctx}");
        let source = before.source.as_deref().filter(|s| Some(*s) != dest);
        if let Some(source) = source {
            assert!(
                matches!(f.replicas(source).as_source(), Serving::NotServing | Serving::NoLeases),
                "{ctx}"
            );
        }
    }
    // Settle is bounded, each transition leaves the state the previous one entered, and it rests
    // where the step sequence rests.
    let settled = Handover::settle(before, f, 8);
    assert!(settled.transitions.len() <= 5, "{ctx}");
    let mut at = before.clone();
    for t in &settled.transitions {
        assert_eq!(t.from, at, "{ctx}");
        at = t.to.clone();
    }
    if settled.actions.is_empty() {
        assert_eq!(step(&settled.state, f).next, settled.state, "{ctx}");
    }
}

/// The typed form and the wire form say the same: every state a machine can write reads back
/// as itself, and a moving state without a destination reads as no move at all.
#[test]
fn the_typed_move_round_trips_through_its_wire_form() {
    let routes = [Route { source: None, destination: "a" }, Route { source: Some("b"), destination: "a" }];
    let mut moves = vec![Move::Unassigned];
    for r in routes {
        moves.push(Move::Compiling(r));
        for p in [Proof::Verified, Proof::Unverified] {
            moves.extend([Move::DestinationReady(r, p), Move::Patched(r, p), Move::SourceDropped(r, p)]);
        }
    }
    for m in moves {
        let mut status = HandoverStatus { attempt: 4, since: Some("t".into()), ..HandoverStatus::default() };
        m.write(&mut status);
        assert_eq!(Move::of(&status), m);
        assert_eq!((status.attempt, status.since.as_deref()), (4, Some("t")), "bookkeeping is kept");
    }
    let lost = HandoverStatus { state: S::Patched, source: Some("b".into()), ..HandoverStatus::default() };
    assert_eq!(Move::of(&lost), Move::Unassigned);
}

/// A config another one overrides (two configs for one target that slipped past admission)
/// never writes the target, in any state: not a first wiring, not a move, not a refresh.
#[test]
fn a_conflicting_config_never_writes_the_target() {
    let why = "CRDConversionConfig a also names the target and is the one served; delete one of them";
    let states = [
        HandoverStatus::default(),
        at(S::Compiling, None, "a"),
        at(S::DestinationReady, None, "a"),
        at(S::Patched, Some("old"), "a"),
        at(S::SourceDropped, None, "a"),
        at(S::SourceDropped, None, "old"),
    ];
    for state in states {
        for wired in [None, Some("a"), Some("old")] {
            let f = Facts {
                conflict: Err(why.into()),
                wiring_current: false,
                ..facts("a", wired, Serving::Serves, Serving::NotServing)
            };
            let s = step(&state, &f);
            assert!(s.actions.is_empty(), "{state:?} wired to {wired:?}: {:?}", s.actions);
            assert!(s.event.is_none(), "{state:?}: {:?}", s.event);
            assert_eq!(s.next.state, state.state, "the persisted move is kept as it was");
            assert_eq!(
                (s.condition.status, s.condition.reason, s.condition.message.as_str()),
                (false, reason::CONFLICT, why)
            );
        }
    }
    // Without the conflict the same facts wire (the test above is not vacuous).
    let s =
        step(&at(S::DestinationReady, None, "a"), &facts("a", None, Serving::Serves, Serving::NotServing));
    assert_eq!(s.actions, [Action::WireTo("a".into())]);
}

/// An XRD's move: the XRD names the destination (Patched), but Crossplane has not copied the
/// wiring into the generated CRDs yet, so the apiserver still calls the source: the move must
/// not settle (and the source must not be let go) until they carry it; a settled XRD whose
/// CRDs lost the wiring is not ready, and the machine does not move for it.
#[test]
fn a_move_does_not_settle_before_the_generated_crds_name_the_destination() {
    let patched = at(S::Patched, Some("old"), "new");
    let mut f = facts("new", Some("new"), Serving::Serves, Serving::NotServing);
    f.propagated = Err("CRD xdbs.example.org names server old".into());
    let s = step(&patched, &f);
    assert_eq!(s.next.state, S::Patched);
    assert!(s.actions.is_empty() && s.event.is_none());
    assert_eq!((s.condition.status, s.condition.reason), (false, reason::AWAITING_PROPAGATION));
    assert!(s.condition.message.contains("CRD xdbs.example.org names server old"), "{}", s.condition.message);
    // Propagated, and the source let go: settled.
    f.propagated = Ok(());
    let s = step(&patched, &f);
    assert_eq!(s.next.state, S::SourceDropped);
    assert_eq!((s.condition.status, s.condition.reason), (true, reason::READY));
    // Settled, then a generated CRD loses the wiring: not ready, no transition, nothing written
    // (the XRD itself still names the destination; Crossplane re-renders it).
    let settled = s.next;
    f.propagated = Err("CRD xdbs.example.org: strategy None".into());
    let s = step(&settled, &f);
    assert_eq!(s.next, settled);
    assert!(s.actions.is_empty() && s.event.is_none());
    assert_eq!((s.condition.status, s.condition.reason), (false, reason::AWAITING_PROPAGATION));
    // A first wiring (no source) waits the same way.
    let first = at(S::Patched, None, "new");
    f.propagated = Err("CRD xdbs.example.org is missing".into());
    assert_eq!(step(&first, &f).next.state, S::Patched);
}
