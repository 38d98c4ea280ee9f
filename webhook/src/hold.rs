//! The hold rule (`docs/webhook.md`, "What a replica does"): whether this replica keeps a
//! plan for a target.
//!
//! A replica holds a plan while EITHER the resolver assigns the target to its instance OR the
//! live target's `spec.conversion.webhook.clientConfig.service.name` still names its Service.
//! The second clause closes the handover window from the losing side: the operator repoints
//! the target only after the destination serves it, and until then the apiserver keeps
//! calling us. When neither holds, a plan already held is kept for a short drain period,
//! because apiservers pick up a changed `spec.conversion` asynchronously: the period runs
//! from the drain's start and again from every review the draining plan answers, since a
//! review proves an apiserver has not switched yet.
//!
//! For an XRD target the second clause also holds while a CRD Crossplane generated from the
//! XRD (the composite resource's, the claim's) still names our Service: the apiserver calls
//! what those CRDs say, and Crossplane re-renders them from the XRD a moment after the
//! operator repoints it, so they lag the XRD during every move.
//!
//! Pure: facts in, decision out. The sync loop gathers the facts and acts.

use std::time::{Duration, Instant};

/// Why a target is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum HoldReason {
    /// The resolver assigns it to this instance.
    Assigned,
    /// Not assigned here, but the live target's `spec.conversion` still names our Service.
    NamedBySpecConversion,
    /// Not assigned here and the XRD names another Service, but a CRD Crossplane generated
    /// from the XRD still names ours: Crossplane has not re-rendered it yet.
    NamedByGeneratedCrd,
    /// Not assigned here and not named, but the target is moving away from this instance
    /// and apiservers may still route to it (`sync::MovedFrom::holds`): built by a replica
    /// that did not hold it (one that restarted during the move) and served as draining.
    MovingAway,
    /// Static mode: every config in the directory is served.
    Static,
}

/// Why a target is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The target no longer exists and it is not assigned here.
    TargetGone,
    /// Neither clause holds and the drain period is over.
    Released,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The resolver assigns the target to this instance (false when no config exists, or
    /// when resolution fails).
    pub assigned_here: bool,
    /// Static mode: serve every config.
    pub static_mode: bool,
    pub target_exists: bool,
    /// The live target's `spec.conversion...service.name` equals our Service name.
    pub names_our_service: bool,
    /// For an XRD target: the `spec.conversion` of a CRD Crossplane generated from it
    /// ([`generated_from`]) names our Service.
    pub generated_names_our_service: bool,
    /// The config's handover moves the target away from this instance, recently enough that
    /// an apiserver may still call us (`sync::MovedFrom::holds`).
    pub moving_away: bool,
    /// The registry has an entry for the target.
    pub held: bool,
    /// When the current drain began, if one is running.
    pub drain_started: Option<Instant>,
    /// When the held plan last answered a review during the drain.
    pub last_review: Option<Instant>,
    pub drain_period: Duration,
    pub now: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep the plan (and build or refresh it when a config is there).
    Hold(HoldReason),
    /// Neither clause holds; keep serving the plan already held until `until`.
    Drain { started: Instant, until: Instant },
    /// Remove the entry.
    Drop(DropReason),
    /// Nothing is held and nothing should be.
    Ignore,
}

pub fn decide(f: &Facts) -> Decision {
    if f.static_mode {
        return Decision::Hold(HoldReason::Static);
    }
    if f.assigned_here {
        // Held even while the target is missing, so the failure shows in /debug/registry.
        return Decision::Hold(HoldReason::Assigned);
    }
    if !f.target_exists {
        // A deleted target cannot be calling us: nothing to drain.
        return if f.held { Decision::Drop(DropReason::TargetGone) } else { Decision::Ignore };
    }
    if f.names_our_service {
        return Decision::Hold(HoldReason::NamedBySpecConversion);
    }
    if f.generated_names_our_service {
        return Decision::Hold(HoldReason::NamedByGeneratedCrd);
    }
    if f.moving_away && !f.held {
        // Build it, to serve as a draining plan (not reported in the Lease): a replica that
        // holds it already just drains it as below.
        return Decision::Hold(HoldReason::MovingAway);
    }
    if !f.held {
        return Decision::Ignore;
    }
    let started = f.drain_started.unwrap_or(f.now);
    // An apiserver that still called us during the drain has not switched: wait for a quiet
    // period after its last call too (registry.rs `LastReview`).
    let until = f.last_review.map_or(started, |r| r.max(started)) + f.drain_period;
    if f.now < until { Decision::Drain { started, until } } else { Decision::Drop(DropReason::Released) }
}

/// The name of the Service a target's `spec.conversion` calls, from its JSON form (CRD or
/// XRD), read by the same `dco_api::target` the operator writes it with. Anything missing or
/// differently shaped, a URL webhook or a strategy other than Webhook reads as "names no
/// Service". Only the name is compared, as the rule above states it: a replica knows its
/// Service's name (`sync::Identity::service_name`), not a namespace to compare.
pub fn conversion_service_name(target: &serde_json::Value) -> Option<&str> {
    dco_api::target::wired_service(target).map(|(_namespace, name)| name)
}

/// Whether a CRD with these owner references is one Crossplane generated from the XRD
/// `xrd`: Crossplane sets the XRD as the controller owner of the XR's and the claim's CRD
/// (crossplane-runtime v2.3.0, `xcrd.ForCompositeResource`, `ForCompositeResourceClaim`). Its
/// labels are the XRD's own, copied, so they cannot tell.
pub fn generated_from(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    xrd: &str,
) -> bool {
    owners.iter().any(|o| {
        o.controller == Some(true)
            && o.kind == dco_api::target::XRD_KIND
            && o.name == xrd
            && o.api_version.split_once('/').is_some_and(|(g, _)| g == dco_api::target::XRD_GROUP)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            assigned_here: false,
            static_mode: false,
            target_exists: true,
            names_our_service: false,
            generated_names_our_service: false,
            moving_away: false,
            held: false,
            drain_started: None,
            last_review: None,
            drain_period: Duration::from_secs(30),
            now: Instant::now(),
        }
    }

    #[test]
    fn a_target_moving_away_is_held_even_by_a_replica_without_it() {
        // A restarted source replica: nothing held, not assigned, not named any more, but
        // the move away from it is recent enough that an apiserver may still call it.
        let f = Facts { moving_away: true, ..facts() };
        assert_eq!(decide(&f), Decision::Hold(HoldReason::MovingAway));
        // One that holds it drains it as usual: the Lease stops listing it, the move settles.
        let held = Facts { held: true, ..f };
        assert!(matches!(decide(&held), Decision::Drain { .. }), "{:?}", decide(&held));
        assert_eq!(
            decide(&Facts { target_exists: false, ..f }),
            Decision::Ignore,
            "a deleted target calls no one"
        );
    }

    #[test]
    fn assignment_alone_holds() {
        let f = Facts { assigned_here: true, ..facts() };
        assert_eq!(decide(&f), Decision::Hold(HoldReason::Assigned));
        // Even with the target missing: the failure must be visible, not silently dropped.
        assert_eq!(decide(&Facts { target_exists: false, ..f }), Decision::Hold(HoldReason::Assigned));
    }

    #[test]
    fn spec_conversion_alone_holds_after_the_assignment_moved() {
        let f = Facts { names_our_service: true, held: true, ..facts() };
        assert_eq!(decide(&f), Decision::Hold(HoldReason::NamedBySpecConversion));
        // And builds one when nothing is held yet (e.g. after a restart mid-move).
        assert_eq!(decide(&Facts { held: false, ..f }), Decision::Hold(HoldReason::NamedBySpecConversion));
        // A running drain is irrelevant once a clause holds again.
        let f = Facts { drain_started: Some(f.now), ..f };
        assert_eq!(decide(&f), Decision::Hold(HoldReason::NamedBySpecConversion));
    }

    #[test]
    fn a_generated_crd_still_naming_us_holds_after_the_xrd_was_repointed() {
        // The operator repointed the XRD (names_our_service false); Crossplane has not
        // re-rendered the XR's or the claim's CRD yet, and the apiserver still calls us.
        let f = Facts { generated_names_our_service: true, held: true, ..facts() };
        assert_eq!(decide(&f), Decision::Hold(HoldReason::NamedByGeneratedCrd));
        // A restarted replica builds the plan for it too.
        assert_eq!(decide(&Facts { held: false, ..f }), Decision::Hold(HoldReason::NamedByGeneratedCrd));
        // A drain started while the XRD was repointed is cancelled: the CRD still routes here.
        let draining = Facts { drain_started: Some(f.now), ..f };
        assert_eq!(decide(&draining), Decision::Hold(HoldReason::NamedByGeneratedCrd));
        // The XRD naming us is reported first; assignment before both.
        let both = Facts { names_our_service: true, ..f };
        assert_eq!(decide(&both), Decision::Hold(HoldReason::NamedBySpecConversion));
        assert_eq!(decide(&Facts { assigned_here: true, ..both }), Decision::Hold(HoldReason::Assigned));
        // Once Crossplane re-rendered them, the usual drain runs from then on.
        let rerendered = Facts { generated_names_our_service: false, ..f };
        assert!(matches!(decide(&rerendered), Decision::Drain { .. }), "{:?}", decide(&rerendered));
        // A deleted XRD calls no one (Crossplane deletes what it generated with it).
        assert_eq!(decide(&Facts { target_exists: false, ..f }), Decision::Drop(DropReason::TargetGone));
    }

    #[test]
    fn a_generated_crd_is_known_by_its_controller_owner_the_xrd() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owner = |api_version: &str, kind: &str, name: &str, controller: Option<bool>| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller,
            block_owner_deletion: Some(true),
        };
        let xrd = "xdbs.example.org";
        for api in ["apiextensions.crossplane.io/v1", "apiextensions.crossplane.io/v2"] {
            assert!(generated_from(&[owner(api, "CompositeResourceDefinition", xrd, Some(true))], xrd));
        }
        let ours = owner("apiextensions.crossplane.io/v1", "CompositeResourceDefinition", xrd, Some(true));
        assert!(generated_from(&[owner("v1", "ConfigMap", "x", None), ours.clone()], xrd));
        assert!(!generated_from(std::slice::from_ref(&ours), "xother.example.org"), "another XRD's");
        assert!(
            !generated_from(&[OwnerReference { controller: None, ..ours.clone() }], xrd),
            "not the controller"
        );
        assert!(!generated_from(&[OwnerReference { kind: "Composition".into(), ..ours.clone() }], xrd));
        assert!(!generated_from(&[OwnerReference { api_version: "example.org/v1".into(), ..ours }], xrd));
        assert!(!generated_from(&[], xrd));
    }

    #[test]
    fn neither_clause_drains_then_drops() {
        let now = Instant::now();
        let f = Facts { held: true, now, ..facts() };
        assert_eq!(decide(&f), Decision::Drain { started: now, until: now + Duration::from_secs(30) });
        let later = Facts { drain_started: Some(now), now: now + Duration::from_secs(29), ..f };
        assert!(matches!(decide(&later), Decision::Drain { started, .. } if started == now));
        let done = Facts { now: now + Duration::from_secs(30), ..later };
        assert_eq!(decide(&done), Decision::Drop(DropReason::Released));
        let no_drain = Facts { drain_period: Duration::ZERO, ..f };
        assert_eq!(decide(&no_drain), Decision::Drop(DropReason::Released));
    }

    #[test]
    fn a_review_during_the_drain_extends_it() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        let draining = Facts { held: true, drain_started: Some(now), now: now + secs(30), ..facts() };
        assert_eq!(decide(&draining), Decision::Drop(DropReason::Released), "no review: the drain ends");
        let called = Facts { last_review: Some(now + secs(20)), ..draining };
        assert_eq!(decide(&called), Decision::Drain { started: now, until: now + secs(50) });
        assert_eq!(decide(&Facts { now: now + secs(50), ..called }), Decision::Drop(DropReason::Released));
        // A review from before the drain (an older one kept on the entry) changes nothing.
        let old = Facts { last_review: Some(now - secs(10)), ..draining };
        assert_eq!(decide(&old), Decision::Drop(DropReason::Released));
    }

    #[test]
    fn neither_clause_and_nothing_held_is_ignored() {
        assert_eq!(decide(&facts()), Decision::Ignore);
    }

    #[test]
    fn a_deleted_target_drops_at_once_unless_assigned() {
        let f = Facts { target_exists: false, held: true, names_our_service: true, ..facts() };
        assert_eq!(decide(&f), Decision::Drop(DropReason::TargetGone));
        assert_eq!(decide(&Facts { held: false, ..f }), Decision::Ignore);
    }

    #[test]
    fn static_mode_serves_everything() {
        let f = Facts { static_mode: true, target_exists: false, ..facts() };
        assert_eq!(decide(&f), Decision::Hold(HoldReason::Static));
    }

    #[test]
    fn service_name_is_read_only_from_a_webhook_conversion() {
        let crd = serde_json::json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"service": {"name": "dco-pool-a", "namespace": "x", "path": "/convert/t"}},
            "conversionReviewVersions": ["v1"]}}}});
        assert_eq!(conversion_service_name(&crd), Some("dco-pool-a"));
        let none = serde_json::json!({"spec": {"conversion": {"strategy": "None", "webhook": {
            "clientConfig": {"service": {"name": "dco-pool-a"}}}}}});
        assert_eq!(conversion_service_name(&none), None);
        assert_eq!(conversion_service_name(&serde_json::json!({"spec": {}})), None);
        assert_eq!(conversion_service_name(&serde_json::json!({"spec": {"conversion": 3}})), None);
        let url = serde_json::json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://127.0.0.1/convert"}}}}});
        assert_eq!(conversion_service_name(&url), None);
    }
}
