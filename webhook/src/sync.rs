//! The sync pass: from what the caches (or the static directory) hold now, decide per target
//! whether to hold it ([`crate::hold`]), compile what changed, and swap the result into the
//! registry in one batch.
//!
//! A pass is idempotent and cheap when nothing changed: a plan is only recompiled when the
//! fingerprint of its config and target (identity and generation) changes, and a failing
//! config is not retried until either changes. One config's failure keeps the last good
//! plan for its target and never affects another target.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dco_api::assign::Servers;
use dco_api::config::{ConversionSpec, DriftPolicy, TargetKind};

use crate::hold::{self, Decision, DropReason, Facts, HoldReason};
use crate::metrics::{Metrics, TargetLabel};
use crate::plan::{Compilation, Compiler};
use crate::registry::{ConfigRef, Entry, Failure, LastReview, Registry, Served};

/// One config as the pass sees it.
#[derive(Clone, Debug)]
pub struct ConfigView {
    /// `XRDConversionConfig`, `CRDConversionConfig`, or `file` in static mode.
    pub kind: String,
    pub name: String,
    pub target: String,
    pub target_kind: TargetKind,
    pub spec: Arc<ConversionSpec>,
    /// Changes whenever the spec may have (uid + generation).
    pub fingerprint: String,
    /// The move of the target away from a server, as `status.handover` records it: the
    /// source's replicas hold the target while it may still be routed to them
    /// ([`MovedFrom::holds`]).
    pub moved_from: Option<MovedFrom>,
}

impl dco_api::conflict::Claim for ConfigView {
    fn kind(&self) -> &str {
        &self.kind
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn target(&self) -> &str {
        &self.target
    }
}

/// Where a config's target is moving away from (`status.handover.source`), and how far the
/// move is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovedFrom {
    pub server: String,
    pub state: dco_api::HandoverState,
    /// When the move entered `state`.
    pub since: Option<SystemTime>,
    /// The move's W3C traceparent: one per move, so it tells two moves apart.
    pub move_id: Option<String>,
}

impl MovedFrom {
    pub fn of(h: &dco_api::HandoverStatus) -> Option<MovedFrom> {
        let since = h
            .since
            .as_deref()
            .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(SystemTime::from);
        Some(MovedFrom { server: h.source.clone()?, state: h.state, since, move_id: h.traceparent.clone() })
    }

    /// Whether the source `instance` must still hold the target, although it is neither
    /// assigned nor named: from DestinationReady (the wiring may be written at any moment)
    /// until one drain period after Patched or SourceDropped (apiservers switch on their own
    /// schedule). What a replica that restarted meanwhile cannot know from the target alone:
    /// the model check (state/tests/model.rs) found a restarted source replica ready without
    /// the plan while an apiserver still routed to it.
    pub fn holds(&self, instance: &str, drain: Duration, now: SystemTime) -> bool {
        use dco_api::HandoverState as S;
        self.server == instance
            && match self.state {
                S::DestinationReady => true,
                S::Patched | S::SourceDropped => self.since.is_none_or(|t| now < t + drain),
                S::Unassigned | S::Compiling => false,
            }
    }
}

/// One target (CRD or XRD) as compact JSON with `apiVersion` and `kind` set. A parsed
/// `serde_json::Value` takes ~10× the bytes of its text, and a target is held for as long as a
/// config names it, so the text is kept and parsed again only to compile.
#[derive(Clone, Debug)]
pub struct TargetView {
    json: Arc<str>,
    /// `spec.conversion`'s webhook Service name (what the hold rule reads), read once.
    service: Option<Arc<str>>,
    /// Changes whenever the schema or spec.conversion may have (uid + generation).
    pub fingerprint: String,
}

impl TargetView {
    pub fn new(value: &serde_json::Value, fingerprint: String) -> TargetView {
        TargetView {
            json: value.to_string().into(),
            service: hold::conversion_service_name(value).map(Arc::from),
            fingerprint,
        }
    }

    /// The name of the Service the target's `spec.conversion` calls, if any.
    pub fn service_name(&self) -> Option<&str> {
        self.service.as_deref()
    }

    /// The target parsed (for a compile).
    pub fn value(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_str(&self.json)
    }

    /// Bytes of the kept text.
    pub fn bytes(&self) -> usize {
        self.json.len()
    }
}

/// Everything a pass needs.
#[derive(Clone, Debug, Default)]
pub struct World {
    pub configs: Vec<ConfigView>,
    pub targets: HashMap<(TargetKind, String), TargetView>,
    pub servers: Servers,
    /// Per XRD target, the CRDs Crossplane generated from it (`hold::generated_from`), held
    /// in `targets` as CRDs: the hold rule reads their `spec.conversion` too.
    pub generated: HashMap<String, Vec<String>>,
    /// Targets that exist and joined this server's share, but whose read is still under way
    /// (`targets::Held::unread`): left as they are this pass, not taken as missing; the read's
    /// round wakes the next pass.
    pub unread: HashSet<(TargetKind, String)>,
}

/// Who this replica is.
#[derive(Clone, Debug)]
pub struct Identity {
    pub instance: String,
    /// Our Service's name, matched against the targets' `spec.conversion`.
    pub service_name: String,
    /// Serve every config, no resolver (static mode).
    pub static_mode: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    pub compiled: usize,
    pub failed: usize,
    pub dropped: usize,
    /// When the next pass must run even if nothing changes (a drain ends).
    pub next_wake: Option<Instant>,
}

pub struct Syncer {
    compiler: Arc<dyn Compiler>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    identity: Identity,
    drain_period: Duration,
    drains: HashMap<String, Instant>,
    /// False only with the test switch `--unsafe-test-no-hold-while-named` (webhook/src/cli.rs).
    hold_while_named: bool,
    /// Targets this process held and drained to the end during a move away (by the move's
    /// id): `MovingAway` rebuilds a plan for a replica that restarted meanwhile, not for one
    /// that has just served and drained it.
    drained: HashMap<String, String>,
}

impl Syncer {
    pub fn new(
        compiler: Arc<dyn Compiler>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        identity: Identity,
        drain_period: Duration,
    ) -> Self {
        Syncer {
            compiler,
            registry,
            metrics,
            identity,
            drain_period,
            drains: HashMap::new(),
            hold_while_named: true,
            drained: HashMap::new(),
        }
    }

    /// The test switch: the hold rule's second clause never applies, and neither does its
    /// proof by traffic (a review answered during the drain extends it).
    pub fn without_hold_while_named(self) -> Self {
        Syncer { hold_while_named: false, ..self }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// `--drain-period`.
    pub fn drain_period(&self) -> Duration {
        self.drain_period
    }

    /// Run one pass over `world` at `now`.
    pub fn pass(&mut self, world: &World, now: Instant) -> PassReport {
        let mut report = PassReport::default();
        let current = self.registry.snapshot();

        // One config per target; admission forbids two, but if it happens anyway the choice
        // must be the same on every replica and every pass, and the operator's
        // (dco_api::conflict).
        let choice = dco_api::conflict::choose(&world.configs);
        let mut by_target: BTreeMap<&str, &ConfigView> = BTreeMap::new();
        for (target, c) in choice {
            for i in &c.ignored {
                tracing::warn!(target, chosen = %format!("{}/{}", c.chosen.kind, c.chosen.name), ignored = %format!("{}/{}", i.kind, i.name),
                    "two configs name the same target; serving the first by kind and name, delete the other");
            }
            by_target.insert(target, c.chosen);
        }
        let mut targets: Vec<&str> = by_target.keys().copied().collect();
        targets.extend(current.keys().map(String::as_str).filter(|t| !by_target.contains_key(t)));

        let mut changes: Vec<(String, Option<Entry>)> = Vec::new();
        for target in targets {
            let config = by_target.get(target).copied();
            let entry = current.get(target);
            let kind = config.map(|c| c.target_kind).or_else(|| entry.map(|e| e.target_kind));
            let Some(kind) = kind else { continue };
            let key = (kind, target.to_string());
            if world.unread.contains(&key) {
                continue;
            }
            let live = world.targets.get(&key);
            let assigned_here = config.is_some_and(|c| self.assigned_here(world, c));
            let moved_from = config.and_then(|c| c.moved_from.as_ref());
            let facts = Facts {
                assigned_here,
                static_mode: self.identity.static_mode,
                target_exists: live.is_some(),
                names_our_service: self.hold_while_named
                    && live.and_then(TargetView::service_name) == Some(self.identity.service_name.as_str()),
                generated_names_our_service: self.hold_while_named
                    && kind == TargetKind::Xrd
                    && self.generated_names_us(world, target),
                moving_away: moved_from.is_some_and(|m| {
                    m.holds(&self.identity.instance, self.drain_period, SystemTime::now())
                        && (m.move_id.is_none() || m.move_id.as_ref() != self.drained.get(target))
                }),
                held: entry.is_some(),
                drain_started: self.drains.get(target).copied(),
                last_review: entry.filter(|_| self.hold_while_named).and_then(|e| e.last_review.get()),
                drain_period: self.drain_period,
                now,
            };
            match hold::decide(&facts) {
                Decision::Hold(reason) => {
                    if reason != HoldReason::MovingAway {
                        self.drained.remove(target);
                    }
                    if self.drains.remove(target).is_some() {
                        tracing::info!(target, ?reason, "drain cancelled: the target is ours again");
                    }
                    let mut next =
                        self.hold(target, kind, reason, config, live, entry.map(Arc::as_ref), &mut report);
                    if reason == HoldReason::MovingAway
                        && let Some(e) = next.as_mut()
                    {
                        // Served for lagging apiservers, not reported: the next pass drains it.
                        e.draining_until = Some(SystemTime::now() + self.drain_period);
                    }
                    if let Some(next) = next {
                        changes.push((target.to_string(), Some(next)));
                    }
                }
                Decision::Drain { started, until } => {
                    let Some(entry) = entry else { continue };
                    if !self.drains.contains_key(target) {
                        tracing::info!(target, drain = ?self.drain_period,
                            "target is no longer assigned to this instance and its spec.conversion no longer names Service {:?}; serving it until the drain ends",
                            self.identity.service_name);
                    }
                    self.drains.insert(target.to_string(), started);
                    report.next_wake = Some(report.next_wake.map_or(until, |w| w.min(until)));
                    if entry.draining_until.is_none() {
                        let mut e = (**entry).clone();
                        e.draining_until = Some(SystemTime::now() + until.saturating_duration_since(now));
                        changes.push((target.to_string(), Some(e)));
                    }
                }
                Decision::Drop(why) => {
                    self.drains.remove(target);
                    match why {
                        DropReason::TargetGone => {
                            tracing::info!(target, "dropping the plan: the target was deleted")
                        }
                        DropReason::Released => {
                            tracing::info!(
                                target,
                                "dropping the plan: not assigned to this instance, spec.conversion names another Service, drain over"
                            );
                            if let Some(id) = moved_from.and_then(|m| m.move_id.clone()) {
                                self.drained.insert(target.to_string(), id);
                            }
                        }
                    }
                    report.dropped += 1;
                    changes.push((target.to_string(), None));
                }
                Decision::Ignore => {
                    self.drains.remove(target);
                }
            }
        }

        // Only configs that still name a target can move it away again.
        self.drained.retain(|t, _| by_target.contains_key(t.as_str()));
        let before = self.registry.snapshot();
        if !changes.is_empty() {
            self.registry.update(|m| {
                for (target, e) in changes {
                    match e {
                        Some(e) => m.insert(target, Arc::new(e)),
                        None => m.remove(&target),
                    };
                }
                ((), true)
            });
        }
        let snap = self.registry.snapshot();
        let served = snap.values().filter(|e| e.served.is_some()).count();
        self.metrics.set_registry_size(served, snap.len() - served);
        crate::signals::follow(&self.metrics, &before, &snap);
        report
    }

    /// Whether a CRD Crossplane generated from the XRD `target` names our Service.
    fn generated_names_us(&self, world: &World, target: &str) -> bool {
        let ours = Some(self.identity.service_name.as_str());
        world.generated.get(target).is_some_and(|crds| {
            crds.iter().any(|crd| {
                world.targets.get(&(TargetKind::Crd, crd.clone())).and_then(TargetView::service_name) == ours
            })
        })
    }

    fn assigned_here(&self, world: &World, c: &ConfigView) -> bool {
        let pin = c.spec.webhook_server_ref.as_ref().map(|r| r.name.as_str());
        match world.servers.resolve(&c.target, pin) {
            Ok(a) => a.server == self.identity.instance,
            Err(e) => {
                tracing::debug!(target = %c.target, config = %c.name, error = %e, "cannot resolve a server for the target");
                false
            }
        }
    }

    /// The entry to store for a held target, or `None` when the current one stays.
    #[allow(clippy::too_many_arguments)]
    fn hold(
        &self,
        target: &str,
        kind: TargetKind,
        reason: HoldReason,
        config: Option<&ConfigView>,
        live: Option<&TargetView>,
        entry: Option<&Entry>,
        report: &mut PassReport,
    ) -> Option<Entry> {
        let base = || Entry {
            target: target.to_string(),
            target_kind: kind,
            config: None,
            served: None,
            failure: None,
            hold: reason,
            draining_until: None,
            last_review: LastReview::default(),
        };
        let Some(config) = config else {
            // Held by spec.conversion alone, with the config gone: keep serving what we
            // have; there is nothing to compile from.
            let e = entry?;
            if e.hold == reason && e.draining_until.is_none() {
                return None;
            }
            tracing::info!(
                target,
                ?reason,
                "holding the last plan: the config is gone but the target's spec.conversion still names this instance's Service"
            );
            return Some(Entry { hold: reason, draining_until: None, ..e.clone() });
        };
        let mut next = entry.cloned().unwrap_or_else(base);
        let changed_hold = entry.is_none_or(|e| e.hold != reason || e.draining_until.is_some());
        if changed_hold {
            tracing::info!(target, config = %config.name, ?reason, "holding the target");
        }
        next.hold = reason;
        next.draining_until = None;
        next.config = Some(ConfigRef { kind: config.kind.clone(), name: config.name.clone() });

        let Some(live) = live else {
            let msg = format!(
                "target {} {target:?} named by {} {:?} does not exist; create it or fix spec.target{}.name",
                kind.kind_name(),
                config.kind,
                config.name,
                if kind == TargetKind::Xrd { "XRD" } else { "CRD" }
            );
            let fp = format!("{}/absent", config.fingerprint);
            if next.failure.as_ref().is_some_and(|f| f.fingerprint == fp) {
                return changed_hold.then_some(next);
            }
            tracing::warn!(target, "{msg}");
            next.failure = Some(Failure {
                summary: msg.clone(),
                message: msg,
                errors: Vec::new(),
                locations: Vec::new(),
                at: SystemTime::now(),
                fingerprint: fp,
                fail_closed: false,
            });
            return Some(next);
        };

        let fp = format!("{}/{}", config.fingerprint, live.fingerprint);
        let up_to_date = next.served.as_ref().is_some_and(|s| s.fingerprint == fp)
            || next.failure.as_ref().is_some_and(|f| f.fingerprint == fp);
        if up_to_date {
            return changed_hold.then_some(next);
        }
        let compiled = match live.value() {
            Ok(target) => self.compiler.compile(&config.spec, &target),
            // The text was written from a Value (`TargetView::new`): unreachable in practice.
            Err(e) => Compilation {
                plan: None,
                errors: vec![format!("the held copy of the target does not parse: {e}")],
                locations: vec![],
                warnings: vec![],
            },
        };
        match compiled.plan {
            Some(plan) => {
                report.compiled += 1;
                let plan_hash = plan.hash();
                tracing::info!(target, config = %config.name, plan_hash = %plan_hash, versions = ?plan.versions(),
                    warnings = compiled.warnings.len(), "compiled a plan");
                next.served = Some(Served {
                    plan,
                    plan_hash,
                    compiled_at: SystemTime::now(),
                    fingerprint: fp,
                    signals: Default::default(),
                });
                next.failure = None;
            }
            None => {
                report.failed += 1;
                self.metrics
                    .compile_failures
                    .get_or_create(&TargetLabel { target: target.to_string() })
                    .inc();
                let fail_closed = config.spec.drift_policy == DriftPolicy::FailClosed;
                let keeping = if fail_closed {
                    "driftPolicy FailClosed: conversions of the target fail until it compiles again; fix the config or the target's schema (driftPolicy KeepServingStale would keep serving the last good plan)"
                } else if next.served.is_some() {
                    "driftPolicy KeepServingStale: keeping the last good plan"
                } else {
                    "no plan to serve until it compiles"
                };
                // The full message quotes the first error; the summary (what /debug/registry
                // shows by default) only where it is.
                let describe = |count: usize, first: String| {
                    format!(
                        "{} {:?} does not compile against {} {target:?} ({count} error(s), {first}); {keeping}",
                        config.kind,
                        config.name,
                        kind.kind_name(),
                    )
                };
                let message = describe(
                    compiled.errors.len(),
                    format!("first: {}", compiled.errors.first().map_or("none reported", String::as_str)),
                );
                let summary = describe(
                    compiled.locations.len(),
                    format!(
                        "first at {}",
                        compiled.locations.first().map_or("an unreported place", String::as_str)
                    ),
                );
                tracing::warn!(target, errors = ?compiled.errors, "{message}");
                next.failure = Some(Failure {
                    message,
                    summary,
                    errors: compiled.errors,
                    locations: compiled.locations,
                    at: SystemTime::now(),
                    fingerprint: fp,
                    fail_closed,
                });
            }
        }
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{BadReview, Compilation, Reviewed, ServablePlan};
    use dco_api::assign::ServerInfo;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Fixed(String);
    impl ServablePlan for Fixed {
        fn hub_version(&self) -> &str {
            "v2"
        }
        fn versions(&self) -> Vec<String> {
            vec!["v1".into(), "v2".into()]
        }
        fn hash(&self) -> String {
            self.0.clone()
        }
        fn review(&self, _: &[u8]) -> Result<Reviewed, BadReview> {
            Err(BadReview::MissingRequest)
        }
    }

    /// Compiles unless the hub version is "bad"; the plan hash is the hub plus the target's
    /// generation, so a test can tell which compile is being served.
    #[derive(Default)]
    struct Counting(AtomicUsize);
    impl Compiler for Counting {
        fn compile(&self, spec: &ConversionSpec, target: &serde_json::Value) -> Compilation {
            self.0.fetch_add(1, Ordering::SeqCst);
            if spec.hub_version == "bad" || target.pointer("/spec/drifted") == Some(&serde_json::json!(true))
            {
                return Compilation {
                    plan: None,
                    errors: vec!["spoke v1, rule 0 (FieldRename) spec.x: no such path".into()],
                    locations: vec!["spoke v1, rule 0 (FieldRename), spec.x".into()],
                    warnings: vec![],
                };
            }
            let g = target.pointer("/metadata/generation").and_then(|v| v.as_i64()).unwrap_or(0);
            Compilation {
                plan: Some(Arc::new(Fixed(format!("{}-{g}", spec.hub_version)))),
                errors: vec![],
                locations: vec![],
                warnings: vec![],
            }
        }
    }

    const TARGET: &str = "widgets.example.org";

    fn world(hub: &str, generation: i64, pin: Option<&str>, service: Option<&str>) -> World {
        let spec = ConversionSpec {
            hub_version: hub.into(),
            webhook_server_ref: pin.map(|p| dco_api::config::WebhookServerRef { name: p.into() }),
            ..ConversionSpec::default()
        };
        let mut crd = serde_json::json!({"metadata": {"name": TARGET, "generation": generation}, "spec": {}});
        if let Some(svc) = service {
            crd["spec"]["conversion"] = serde_json::json!({"strategy": "Webhook",
                "webhook": {"clientConfig": {"service": {"name": svc, "namespace": "dco"}}}});
        }
        World {
            configs: vec![ConfigView {
                kind: "CRDConversionConfig".into(),
                name: "widgets".into(),
                target: TARGET.into(),
                target_kind: TargetKind::Crd,
                spec: Arc::new(spec),
                fingerprint: format!("c@{hub}"),
                moved_from: None,
            }],
            targets: HashMap::from([(
                (TargetKind::Crd, TARGET.to_string()),
                TargetView::new(&crd, format!("t@{generation}@{service:?}")),
            )]),
            servers: Servers::new([
                ServerInfo { name: "a".into(), default: true, pool_weight: None },
                ServerInfo { name: "b".into(), default: false, pool_weight: None },
            ]),
            generated: HashMap::new(),
            unread: HashSet::new(),
        }
    }

    /// `world`, with the target an XRD whose `spec.conversion` calls `xrd_service`, and the
    /// CRDs Crossplane generated from it (the XR's, named like the XRD, and the claim's)
    /// calling `generated_services`.
    fn xrd_world(pin: Option<&str>, xrd_service: &str, generated_services: [&str; 2]) -> World {
        let mut w = world("v2", 1, pin, Some(xrd_service));
        w.configs[0].kind = "XRDConversionConfig".into();
        w.configs[0].target_kind = TargetKind::Xrd;
        let xrd = w.targets.remove(&(TargetKind::Crd, TARGET.to_string())).unwrap();
        w.targets.insert((TargetKind::Xrd, TARGET.to_string()), xrd);
        let names = [TARGET.to_string(), "gadgets.example.org".to_string()];
        for (name, svc) in names.iter().zip(generated_services) {
            let crd = serde_json::json!({"metadata": {"name": name, "generation": 1}, "spec": {"conversion": {
                "strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": svc, "namespace": "dco"}}}}}});
            w.targets.insert((TargetKind::Crd, name.clone()), TargetView::new(&crd, format!("g@{svc}")));
        }
        w.generated.insert(TARGET.to_string(), names.to_vec());
        w
    }

    #[test]
    fn a_move_of_an_xrd_holds_until_every_generated_crd_stops_naming_us() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        let t0 = Instant::now();
        s.pass(&xrd_world(None, "svc-a", ["svc-a", "svc-a"]), t0);
        assert_eq!(s.registry().get(TARGET).unwrap().hold, HoldReason::Assigned);
        // Pinned to b and the XRD repointed; Crossplane has re-rendered neither CRD yet.
        let r = s.pass(&xrd_world(Some("b"), "svc-b", ["svc-a", "svc-a"]), t0);
        assert_eq!(s.registry().get(TARGET).unwrap().hold, HoldReason::NamedByGeneratedCrd);
        assert_eq!(r.next_wake, None, "no drain while a generated CRD routes here");
        // The XR's CRD re-rendered, the claim's not yet: still held, long after.
        s.pass(&xrd_world(Some("b"), "svc-b", ["svc-b", "svc-a"]), t0 + Duration::from_secs(300));
        let e = s.registry().get(TARGET).unwrap();
        assert_eq!(e.hold, HoldReason::NamedByGeneratedCrd);
        assert!(e.draining_until.is_none());
        // Both re-rendered: the drain starts now and ends a drain period later.
        let t1 = t0 + Duration::from_secs(301);
        let r = s.pass(&xrd_world(Some("b"), "svc-b", ["svc-b", "svc-b"]), t1);
        assert_eq!(r.next_wake, Some(t1 + Duration::from_secs(30)));
        assert!(s.registry().get(TARGET).is_some());
        s.pass(&xrd_world(Some("b"), "svc-b", ["svc-b", "svc-b"]), t1 + Duration::from_secs(30));
        assert!(s.registry().get(TARGET).is_none(), "dropped after the drain");
        // The generated CRDs of a CRD target's namesake are never consulted: only an XRD has them.
        let mut crd_world = xrd_world(Some("b"), "svc-b", ["svc-a", "svc-a"]);
        let xrd = crd_world.targets.remove(&(TargetKind::Xrd, TARGET.to_string())).unwrap();
        crd_world.targets.insert((TargetKind::Crd, TARGET.to_string()), xrd);
        crd_world.configs[0].target_kind = TargetKind::Crd;
        let mut s = syncer("a", Arc::new(Counting::default()));
        s.pass(&world("v2", 1, None, Some("svc-a")), t0);
        s.pass(&crd_world, t0);
        assert!(s.registry().get(TARGET).unwrap().draining_until.is_some(), "a CRD target drains");
    }

    fn syncer(instance: &str, compiler: Arc<Counting>) -> Syncer {
        Syncer::new(
            compiler,
            Arc::new(Registry::new()),
            Arc::new(Metrics::new()),
            Identity {
                instance: instance.into(),
                service_name: format!("svc-{instance}"),
                static_mode: false,
            },
            Duration::from_secs(30),
        )
    }

    fn hash(s: &Syncer) -> Option<String> {
        s.registry().get(TARGET)?.served.as_ref().map(|x| x.plan_hash.clone())
    }

    #[test]
    fn compiles_once_per_fingerprint() {
        let c = Arc::new(Counting::default());
        let mut s = syncer("a", c.clone());
        let now = Instant::now();
        let r = s.pass(&world("v2", 1, None, None), now);
        assert_eq!((r.compiled, r.failed), (1, 0));
        assert_eq!(hash(&s).as_deref(), Some("v2-1"));
        let mut rx = s.registry().subscribe();
        rx.mark_unchanged();
        s.pass(&world("v2", 1, None, None), now);
        assert_eq!(c.0.load(Ordering::SeqCst), 1, "an unchanged world must not recompile");
        assert!(!rx.has_changed().unwrap(), "an unchanged world must not republish");
        s.pass(&world("v2", 2, None, None), now);
        assert_eq!(hash(&s).as_deref(), Some("v2-2"));
    }

    #[test]
    fn a_compile_failure_keeps_the_last_good_plan_and_is_not_retried_until_something_changes() {
        let c = Arc::new(Counting::default());
        let mut s = syncer("a", c.clone());
        let now = Instant::now();
        s.pass(&world("v2", 1, None, None), now);
        let r = s.pass(&world("bad", 1, None, None), now);
        assert_eq!(r.failed, 1);
        let e = s.registry().get(TARGET).unwrap();
        assert_eq!(e.served.as_ref().unwrap().plan_hash, "v2-1", "last good plan must keep serving");
        let f = e.failure.as_ref().unwrap();
        assert!(
            f.message.contains("CRDConversionConfig \"widgets\"")
                && f.message.contains("keeping the last good plan"),
            "{}",
            f.message
        );
        assert_eq!(f.errors.len(), 1);
        s.pass(&world("bad", 1, None, None), now);
        assert_eq!(c.0.load(Ordering::SeqCst), 2, "a failing config is not recompiled every pass");
        let text = s.metrics.encode();
        assert!(
            text.contains(r#"dco_webhook_compile_failures_total{target="widgets.example.org"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"dco_webhook_registry_entries{state="served"} 1"#), "{text}");
        // Fixing the config clears the failure.
        s.pass(&world("v3", 1, None, None), now);
        let e = s.registry().get(TARGET).unwrap();
        assert!(e.failure.is_none());
        assert_eq!(e.served.as_ref().unwrap().plan_hash, "v3-1");
    }

    /// `plan_compile_ok` follows the last compile (0 while the last good plan serves on), the
    /// compile time is the serving plan's, and a target that leaves takes its series along.
    #[test]
    fn the_plan_gauges_follow_each_compile_and_leave_with_the_target() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        let now = Instant::now();
        let gauge = |s: &Syncer, family: &str| -> Option<f64> {
            let text = s.metrics.encode();
            let prefix = format!("{family}{{target=\"{TARGET}\"}} ");
            text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|v| v.parse().unwrap())
        };
        let ok = "dco_webhook_plan_compile_ok";
        let compiled = "dco_webhook_plan_compiled_timestamp_seconds";
        s.pass(&world("v2", 1, None, None), now);
        let at = s.registry().get(TARGET).unwrap().served.as_ref().unwrap().compiled_at;
        let at = at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert_eq!(gauge(&s, ok), Some(1.0));
        assert_eq!(gauge(&s, compiled), Some(at));
        s.pass(&world("bad", 1, None, None), now);
        assert_eq!(gauge(&s, ok), Some(0.0), "the last compile failed");
        assert_eq!(gauge(&s, compiled), Some(at), "the plan serving now is the older one");
        s.pass(&world("v3", 1, None, None), now);
        assert_eq!(gauge(&s, ok), Some(1.0));
        // The config goes: the target leaves the registry, and its series with it.
        let mut gone = world("v3", 1, None, None);
        gone.configs.clear();
        s.pass(&gone, now);
        s.pass(&gone, now + Duration::from_secs(31));
        assert!(s.registry().get(TARGET).is_none(), "dropped after the drain");
        let text = s.metrics.encode();
        assert!(!text.contains(TARGET), "{text}");
    }

    /// `world` with the target's schema drifted (generation 2) and the config's driftPolicy.
    fn drifted(policy: DriftPolicy, generation: i64, drift: bool) -> World {
        let mut w = world("v2", generation, None, None);
        let spec = Arc::make_mut(&mut w.configs[0].spec);
        spec.drift_policy = policy;
        w.configs[0].fingerprint = format!("c@v2@{policy:?}");
        let crd = serde_json::json!({"metadata": {"name": TARGET, "generation": generation},
            "spec": {"drifted": drift}});
        w.targets.insert((TargetKind::Crd, TARGET.into()), TargetView::new(&crd, format!("t@{generation}")));
        w
    }

    #[test]
    fn a_drift_under_fail_closed_closes_the_target_and_keep_serving_stale_does_not() {
        for policy in [DriftPolicy::FailClosed, DriftPolicy::KeepServingStale] {
            let mut s = syncer("a", Arc::new(Counting::default()));
            let now = Instant::now();
            s.pass(&drifted(policy, 1, false), now);
            assert!(s.registry().get(TARGET).unwrap().closed().is_none());
            assert_eq!(s.pass(&drifted(policy, 2, true), now).failed, 1);
            let e = s.registry().get(TARGET).unwrap();
            // The plan stays either way: the Lease keeps listing the target, so nothing moves.
            assert_eq!(e.served.as_ref().unwrap().plan_hash, "v2-1", "{policy:?}");
            assert_eq!(s.registry().reported_targets(), [TARGET], "{policy:?}");
            let f = e.failure.as_ref().unwrap();
            assert!(
                f.message.contains("CRDConversionConfig \"widgets\"") && f.message.contains(TARGET),
                "{}",
                f.message
            );
            match policy {
                DriftPolicy::FailClosed => {
                    assert_eq!(e.closed(), Some(f));
                    assert!(
                        f.message.contains("driftPolicy FailClosed: conversions of the target fail"),
                        "{}",
                        f.message
                    );
                    assert!(f.message.contains("spec.x: no such path"), "names the drift: {}", f.message);
                }
                DriftPolicy::KeepServingStale => {
                    assert!(e.closed().is_none());
                    assert!(
                        f.message.contains("driftPolicy KeepServingStale: keeping the last good plan"),
                        "{}",
                        f.message
                    );
                }
            }
            // The schema drifts back: served again, nothing closed.
            s.pass(&drifted(policy, 3, false), now);
            let e = s.registry().get(TARGET).unwrap();
            assert!(e.failure.is_none() && e.closed().is_none(), "{policy:?}");
            assert_eq!(e.served.as_ref().unwrap().plan_hash, "v2-3");
        }
    }

    #[test]
    fn a_failure_with_nothing_to_keep_is_visible_but_not_served() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        s.pass(&world("bad", 1, None, None), Instant::now());
        let e = s.registry().get(TARGET).unwrap();
        assert!(e.served.is_none());
        assert!(e.failure.as_ref().unwrap().message.contains("no plan to serve"));
        assert!(s.registry().served_targets().is_empty());
    }

    #[test]
    fn a_target_being_read_is_left_alone_until_its_copy_arrives() {
        // Pinned here a moment ago: the copy is on its way (the share just grew).
        let mut s = syncer("b", Arc::new(Counting::default()));
        let mut w = world("v2", 1, Some("b"), None);
        w.targets.clear();
        w.unread.insert((TargetKind::Crd, TARGET.into()));
        s.pass(&w, Instant::now());
        assert!(s.registry().get(TARGET).is_none(), "not held as a missing target meanwhile");
        s.pass(&world("v2", 1, Some("b"), None), Instant::now());
        assert_eq!(s.registry().get(TARGET).unwrap().hold, HoldReason::Assigned);
        assert!(s.registry().get(TARGET).unwrap().served.is_some());
        // A held plan whose new copy is on its way is not dropped either.
        let mut w = world("v2", 2, Some("b"), None);
        w.targets.clear();
        w.unread.insert((TargetKind::Crd, TARGET.into()));
        s.pass(&w, Instant::now());
        assert_eq!(hash(&s).as_deref(), Some("v2-1"));
    }

    #[test]
    fn not_assigned_here_is_not_served() {
        let mut s = syncer("b", Arc::new(Counting::default()));
        s.pass(&world("v2", 1, None, None), Instant::now());
        assert!(s.registry().get(TARGET).is_none());
        // Pinned here: served.
        s.pass(&world("v2", 1, Some("b"), None), Instant::now());
        assert_eq!(s.registry().get(TARGET).unwrap().hold, HoldReason::Assigned);
    }

    #[test]
    fn a_move_away_holds_while_spec_conversion_names_us_then_drains_then_drops() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        let t0 = Instant::now();
        s.pass(&world("v2", 1, None, Some("svc-a")), t0);
        assert_eq!(s.registry().get(TARGET).unwrap().hold, HoldReason::Assigned);
        // Pinned to b; the target still calls a's Service: keep serving.
        let r = s.pass(&world("v2", 1, Some("b"), Some("svc-a")), t0);
        assert_eq!(s.registry().get(TARGET).unwrap().hold, HoldReason::NamedBySpecConversion);
        assert_eq!(r.next_wake, None);
        // The operator repointed the target at b: drain.
        let r = s.pass(&world("v2", 2, Some("b"), Some("svc-b")), t0);
        let e = s.registry().get(TARGET).unwrap();
        assert!(e.draining_until.is_some() && e.served.is_some());
        assert_eq!(r.next_wake, Some(t0 + Duration::from_secs(30)));
        let r = s.pass(&world("v2", 2, Some("b"), Some("svc-b")), t0 + Duration::from_secs(10));
        assert_eq!(r.next_wake, Some(t0 + Duration::from_secs(30)), "the drain keeps its start");
        assert!(s.registry().get(TARGET).is_some());
        let r = s.pass(&world("v2", 2, Some("b"), Some("svc-b")), t0 + Duration::from_secs(30));
        assert_eq!(r.dropped, 1);
        assert!(s.registry().get(TARGET).is_none());
    }

    #[test]
    fn a_drained_plan_that_is_still_called_is_dropped_only_a_drain_period_after_the_last_call() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        s.pass(&world("v2", 1, None, Some("svc-a")), t0);
        // Re-wired to b: the drain starts.
        let moved = world("v2", 2, Some("b"), Some("svc-b"));
        assert_eq!(s.pass(&moved, t0).next_wake, Some(t0 + secs(30)));
        // An apiserver that has not switched calls 25 s in (routes.rs stamps the entry).
        s.registry().get(TARGET).unwrap().last_review.stamp(t0 + secs(25));
        let r = s.pass(&moved, t0 + secs(30));
        assert_eq!((r.dropped, r.next_wake), (0, Some(t0 + secs(55))), "served on after the last call");
        assert!(s.registry().get(TARGET).unwrap().served.is_some());
        assert!(s.registry().reported_targets().is_empty(), "still draining: not reported");
        assert_eq!(s.pass(&moved, t0 + secs(55)).dropped, 1);
        assert!(s.registry().get(TARGET).is_none());
    }

    #[test]
    fn a_restarted_source_replica_holds_a_target_moved_away_until_a_drain_after_the_switch() {
        use dco_api::HandoverState as S;
        let drain = Duration::from_secs(30);
        let now = SystemTime::now();
        let moved = |state, ago: u64| MovedFrom {
            server: "a".into(),
            state,
            since: Some(now - Duration::from_secs(ago)),
            move_id: Some("move-1".into()),
        };
        assert!(moved(S::DestinationReady, 600).holds("a", drain, now), "the wiring may land at any moment");
        assert!(moved(S::Patched, 10).holds("a", drain, now));
        assert!(moved(S::SourceDropped, 29).holds("a", drain, now));
        assert!(!moved(S::SourceDropped, 31).holds("a", drain, now), "every apiserver has switched by then");
        assert!(!moved(S::Patched, 10).holds("b", drain, now), "only the source holds it");
        assert!(
            !moved(S::Compiling, 1).holds("a", drain, now),
            "nothing is re-wired before DestinationReady"
        );

        // A fresh replica of a (no plan, no drain) with the target wired to b a moment ago.
        let mut s = syncer("a", Arc::new(Counting::default()));
        let mut w = world("v2", 2, Some("b"), Some("svc-b"));
        w.configs[0].moved_from = Some(moved(S::Patched, 1));
        s.pass(&w, Instant::now());
        let e = s.registry().get(TARGET).expect("held");
        assert_eq!(e.hold, HoldReason::MovingAway);
        assert!(e.served.is_some(), "compiled, so a lagging apiserver's call is answered");
        w.configs[0].moved_from = Some(moved(S::SourceDropped, 60));
        let t = Instant::now();
        s.pass(&w, t);
        assert!(s.registry().get(TARGET).unwrap().draining_until.is_some(), "then it drains as usual");
    }

    #[test]
    fn a_replica_that_drained_a_target_does_not_rebuild_it_for_the_same_move() {
        use dco_api::HandoverState as S;
        let mut s = syncer("a", Arc::new(Counting::default()));
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        s.pass(&world("v2", 1, None, Some("svc-a")), t0);
        // Re-wired to b: this replica drains the plan and drops it when the drain is over.
        let moved = |id: &str| {
            let mut w = world("v2", 2, Some("b"), Some("svc-b"));
            w.configs[0].moved_from = Some(MovedFrom {
                server: "a".into(),
                state: S::SourceDropped,
                since: Some(SystemTime::now()),
                move_id: Some(id.into()),
            });
            w
        };
        s.pass(&moved("move-1"), t0);
        assert_eq!(s.pass(&moved("move-1"), t0 + secs(30)).dropped, 1);
        // Within the move's MovingAway window, but this process has served and drained it.
        s.pass(&moved("move-1"), t0 + secs(31));
        assert!(s.registry().get(TARGET).is_none(), "drained once is enough");
        // Another move away from a (a new id) is another window.
        s.pass(&moved("move-2"), t0 + secs(32));
        assert_eq!(s.registry().get(TARGET).map(|e| e.hold), Some(HoldReason::MovingAway));
    }

    #[test]
    fn a_move_back_cancels_the_drain() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        let t0 = Instant::now();
        s.pass(&world("v2", 1, None, None), t0);
        s.pass(&world("v2", 1, Some("b"), None), t0);
        assert!(s.registry().get(TARGET).unwrap().draining_until.is_some());
        s.pass(&world("v2", 1, None, None), t0 + Duration::from_secs(5));
        let e = s.registry().get(TARGET).unwrap();
        assert!(e.draining_until.is_none());
        assert_eq!(e.hold, HoldReason::Assigned);
        // And a later move starts a fresh drain, not the old one.
        let r = s.pass(&world("v2", 1, Some("b"), None), t0 + Duration::from_secs(40));
        assert_eq!(r.next_wake, Some(t0 + Duration::from_secs(70)));
    }

    #[test]
    fn a_deleted_config_keeps_its_plan_only_while_spec_conversion_names_us() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        let t0 = Instant::now();
        s.pass(&world("v2", 1, None, Some("svc-a")), t0);
        let mut gone = world("v2", 1, None, Some("svc-a"));
        gone.configs.clear();
        s.pass(&gone, t0);
        let e = s.registry().get(TARGET).unwrap();
        assert_eq!(e.hold, HoldReason::NamedBySpecConversion);
        assert!(e.served.is_some());
        // The operator reverted spec.conversion (finalizer): drain, then drop.
        let mut reverted = world("v2", 2, None, None);
        reverted.configs.clear();
        s.pass(&reverted, t0);
        assert!(s.registry().get(TARGET).unwrap().draining_until.is_some());
        s.pass(&reverted, t0 + Duration::from_secs(31));
        assert!(s.registry().get(TARGET).is_none());
    }

    #[test]
    fn a_missing_target_is_reported_when_assigned_and_dropped_otherwise() {
        let mut s = syncer("a", Arc::new(Counting::default()));
        let mut w = world("v2", 1, None, None);
        w.targets.clear();
        s.pass(&w, Instant::now());
        let e = s.registry().get(TARGET).unwrap();
        let msg = &e.failure.as_ref().unwrap().message;
        assert!(msg.contains("does not exist") && msg.contains("spec.targetCRD.name"), "{msg}");
        let mut w = world("v2", 1, Some("b"), None);
        w.targets.clear();
        s.pass(&w, Instant::now());
        assert!(s.registry().get(TARGET).is_none());
    }

    #[test]
    fn two_configs_for_one_target_pick_the_same_one_in_any_order() {
        let mut w = world("v2", 1, None, None);
        let mut other = w.configs[0].clone();
        other.name = "aaa-first".into();
        other.spec = Arc::new(ConversionSpec { hub_version: "v9".into(), ..ConversionSpec::default() });
        other.fingerprint = "other".into();
        w.configs.push(other);
        let mut s = syncer("a", Arc::new(Counting::default()));
        s.pass(&w, Instant::now());
        assert_eq!(hash(&s).as_deref(), Some("v9-1"));
        w.configs.reverse();
        let mut s = syncer("a", Arc::new(Counting::default()));
        s.pass(&w, Instant::now());
        assert_eq!(hash(&s).as_deref(), Some("v9-1"));
    }
}
