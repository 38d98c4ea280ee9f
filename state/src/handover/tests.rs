use super::*;
use proptest::prelude::*;

fn facts<'a>(dest: &'a str, wired: Option<&'a str>, dst: Serving, src: Serving) -> Facts<'a> {
    Facts {
        now: "2026-11-29T12:00:00Z",
        destination: Ok(dest),
        compiled: Ok(()),
        wired_to: wired,
        destination_serving: dst,
        source_serving: src,
        new_traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
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
fn first_apply_skips_the_destination_guard_and_wires() {
    let f = facts("a", None, Serving::NotServing, Serving::NoLeases);
    let s = step(&HandoverStatus::default(), &f);
    assert_eq!(s.next.state, S::Compiling);
    assert_eq!(s.next.source, None);
    assert_eq!(s.next.attempt, 1);
    assert_eq!(s.next.traceparent.as_deref(), Some(f.new_traceparent));
    assert_eq!(s.event.as_ref().unwrap().reason, reason::STARTED);

    let s = step(&s.next, &f);
    assert_eq!(s.next.state, S::DestinationReady);
    let s = step(&s.next, &f);
    assert_eq!(s.actions, vec![Action::WireTo("a".into())]);
    assert_eq!(s.condition.reason, reason::PATCHING);

    // The SSA landed: the target now names a.
    let f = facts("a", Some("a"), Serving::NotServing, Serving::NoLeases);
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
    let f = facts("new", Some("old"), Serving::NoLeases, Serving::NotServing);
    let s = Handover::settle(&state, &f, 10);
    assert_eq!(s.next.state, S::DestinationReady);
    assert!(s.next.unverified);
    assert_eq!(s.actions, vec![Action::WireTo("new".into())]);
    let f = facts("new", Some("new"), Serving::NoLeases, Serving::NotServing);
    let s = Handover::settle(&s.next, &f, 10);
    assert_eq!(s.next.state, S::SourceDropped);
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
fn settle_folds_a_chain_into_one_event() {
    let f = facts("a", Some("a"), Serving::Serves, Serving::NotServing);
    let s = Handover::settle(&HandoverStatus::default(), &f, 10);
    // Compiling → DestinationReady → Patched (already wired) → SourceDropped in one reconcile.
    assert_eq!(s.next.state, S::SourceDropped);
    let e = s.event.unwrap();
    assert_eq!(e.reason, reason::SOURCE_DROPPED);
    assert!(e.note.contains("HandoverStarted → DestinationReady → Patched → SourceDropped"), "{}", e.note);
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
    /// Leases at all, or there was nothing to hand over), and it never wires anything while
    /// the resolver has no answer.
    #[test]
    fn never_wires_to_an_unready_destination(
        seq in proptest::collection::vec((0usize..3, 0usize..4, serving(), serving(), any::<bool>()), 1..60)
    ) {
        let servers = ["a", "b", "c"];
        let mut state = HandoverStatus::default();
        let mut wired: Option<&str> = None;
        // For the current attempt: was the destination proven (or exempt) before wiring?
        let mut proven: Option<String> = None;
        for (d, w, dst, src, resolver_ok) in seq {
            let dest = servers[d];
            let mut f = facts(dest, wired, dst.clone(), src);
            if !resolver_ok { f.destination = Err("none".into()); }
            let before = state.clone();
            let s = step(&state, &f);
            if s.next.attempt != before.attempt { proven = None; }
            if before.state == S::Compiling && s.next.state == S::DestinationReady {
                let exempt = before.source.is_none() || before.source.as_deref() == Some(dest);
                prop_assert!(exempt || matches!(dst, Serving::Serves | Serving::NoLeases));
                proven = s.next.destination.clone();
            }
            if before.state == S::SourceDropped && s.next.state == S::DestinationReady {
                proven = s.next.destination.clone();
            }
            for a in &s.actions {
                let Action::WireTo(to) = a;
                prop_assert!(resolver_ok);
                prop_assert_eq!(Some(to), proven.as_ref());
                // The executor applies it; sometimes it fails and nothing changes.
                if w != 0 { wired = servers.iter().copied().find(|s| *s == to.as_str()); }
            }
            state = s.next;
        }
    }
}
