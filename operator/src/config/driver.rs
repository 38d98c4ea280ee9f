//! The handover machine's driver for one config of either kind: how `dco_state::drive` reads
//! a config's persisted state, observes its world (`facts.rs`), executes the machine's
//! actions against the target (`target.rs`, the only writes of a target), renders status
//! (`status.rs`) and reports each transition.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dco_api::HandoverStatus;
use dco_api::config::TargetKind;
use dco_state::drive::Driver;
use dco_state::handover::{Action, Handover};
use dco_state::machine::{EventNote, Settled, Transition};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::Recorder;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::facts::{self, Observed};
use super::reverts::{self, Revert};
use super::{condition, propagation, status, target};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kinds::ConfigKind;
use crate::kinds::ConfigRef;
use crate::names::FIELD_MANAGER;
use crate::observability::metrics::{RevertLabels, TransitionLabels};
use crate::observability::telemetry;

pub struct ConfigDriver<'a, K> {
    ctx: &'a Context,
    /// The target as this reconcile last read or wrote it. A wiring's apply answers with the
    /// target after the write, fresher than any cache, so the observation after an action
    /// reuses it instead of reading again.
    target: Option<Option<Value>>,
    /// The traceparent a move that starts in this reconcile gets.
    traceparent: String,
    /// Every config of both kinds, listed once per reconcile: who else names the target.
    configs: Option<Vec<ConfigRef>>,
    /// XRD targets: a revert of the wiring, looked for once per reconcile (on the first
    /// observation, before this reconcile re-wires anything): `None` until looked for.
    revert: Option<Option<Revert>>,
    /// The propagation lag was recorded in this reconcile (once at most).
    lag_recorded: bool,
    /// What the last observation read, as the idle wakes compare it (config/idle.rs): the
    /// target's resourceVersion, and an XRD's generated CRDs' by name.
    pub seen_target: Option<String>,
    pub seen_generated: Vec<(String, Option<String>)>,
    /// The reconcile left the config at rest (`status::at_rest`), set when the requeue is.
    pub at_rest: AtomicBool,
    kind: PhantomData<fn() -> K>,
}

impl<'a, K: ConfigKind> ConfigDriver<'a, K> {
    pub fn new(ctx: &'a Context) -> Self {
        ConfigDriver {
            ctx,
            target: None,
            traceparent: telemetry::new_traceparent(),
            configs: None,
            revert: None,
            lag_recorded: false,
            seen_target: None,
            seen_generated: Vec::new(),
            at_rest: AtomicBool::new(false),
            kind: PhantomData,
        }
    }

    async fn wire(&mut self, cfg: &K, server: &str, observed: &Observed) -> Result<target::Wiring> {
        let resolved = observed.resolved.as_ref().ok().map(|a| a.server.as_str());
        let wiring = match (&observed.dest_wiring, resolved) {
            (Ok(w), Some(dest)) if dest == server => w.clone(),
            _ => {
                let s = self.ctx.server(server).ok_or_else(|| {
                    Error::NotReady(format!("ConversionWebhookServer {server} disappeared"))
                })?;
                facts::wiring_for(
                    self.ctx,
                    &s,
                    cfg.target_name(),
                    &cfg.conversion().conversion_review_versions,
                )
                .map_err(Error::NotReady)?
            }
        };
        let after =
            target::wire(self.ctx, cfg.target_kind(), cfg.target_name(), &wiring, observed.target.as_ref())
                .await?;
        self.ctx.metrics.target_patches.inc();
        self.target = Some(Some(after));
        Ok(wiring)
    }
}

impl<K: ConfigKind> ConfigDriver<'_, K> {
    /// What only an XRD target has: its generated CRDs (read fresh: the move decides on
    /// them), the package that owns it, and a revert of the wiring by another writer.
    async fn observe_xrd(&mut self, cfg: &K, observed: &mut Observed) -> Result<()> {
        let Some(xrd) = observed.target.as_ref() else { return Ok(()) };
        let read = propagation::read(&self.ctx.client, xrd).await?;
        self.seen_generated =
            read.iter().map(|r| (r.name.clone(), resource_version(r.crd.as_ref()))).collect();
        let p = propagation::judge(xrd, observed.facts.wired_to.is_some(), &read);
        observed.facts.propagated = p.fact();
        let package = reverts::package_owner(xrd);
        if self.revert.is_none() {
            let revert = self.detect_revert(cfg, xrd);
            if let Some(r) = &revert {
                self.report_revert(cfg, r, &observed.target_desc, package.as_deref()).await;
            }
            self.revert = Some(revert);
        }
        if p.verdict.is_ok() && !self.lag_recorded {
            self.lag_recorded = true;
            let was = cfg.config_status().map(|s| &s.conditions);
            if !was.is_some_and(|c| dco_state::conditions::is_true(c, condition::CONVERSION_PROPAGATED))
                && let Some(lag) = reverts::since_dco_wrote(xrd, observed.now)
            {
                self.ctx.metrics.propagation_lag.observe(lag);
            }
        }
        observed.propagation = Some(p);
        observed.package = Some(package);
        observed.revert = self.revert.clone().flatten();
        Ok(())
    }

    /// A revert of what dco applied for the server the persisted handover settled on.
    fn detect_revert(&self, cfg: &K, xrd: &Value) -> Option<reverts::Revert> {
        let prev = cfg.config_status();
        let server = prev.and_then(|s| s.handover.as_ref()).and_then(|h| h.destination.as_deref())?;
        let server = self.ctx.server(server)?;
        let conv = cfg.conversion();
        let applied =
            facts::wiring_for(self.ctx, &server, cfg.target_name(), &conv.conversion_review_versions).ok();
        let found = reverts::detect(prev, applied.as_ref(), xrd);
        if found.is_none() && observed_unwired(xrd) {
            // Why a drifted wiring was not counted as a revert: what the decision read.
            let applied_cond =
                prev.is_some_and(|s| dco_state::conditions::is_true(&s.conditions, condition::APPLIED));
            tracing::debug!(
                was_applied = applied_cond,
                state = ?prev.and_then(|s| s.handover.as_ref()).map(|h| h.state),
                have_wiring = applied.is_some(),
                writer = ?reverts::conversion_writer(xrd),
                "the XRD's wiring differs, not counted as a revert"
            );
        }
        found
    }

    async fn report_revert(&self, cfg: &K, r: &reverts::Revert, desc: &str, package: Option<&str>) {
        let owner = if package.is_some() { "package" } else { "other" };
        self.ctx.metrics.xrd_wiring_reverts.get_or_create(&RevertLabels { owner }).inc();
        let count = cfg.config_status().and_then(|s| s.reverts.as_ref()).map_or(0, |r| r.count) + 1;
        let by = match package {
            Some(p) => {
                format!(" (the XRD is owned by {p}, whose package manager rewrites it from the package)")
            }
            None => String::new(),
        };
        let note = format!(
            "{} changed {desc}'s spec.conversion{by}: {}; re-wiring it (revert {count}). Objects written at a spoke version until then are stored unconverted; the XRD guard keeps the wiring through such writes (docs/crossplane.md)",
            r.writer, r.change
        );
        tracing::warn!(writer = %r.writer, change = %r.change, "the wiring of {desc} was reverted");
        self.ctx.event(cfg, true, "WiringReverted", "Rewire", note).await;
    }
}

impl<K: ConfigKind> Driver for ConfigDriver<'_, K> {
    type Machine = Handover;
    type Object = K;
    type Observed = Observed;
    type Status = dco_api::ConfigStatus;
    type Error = Error;

    fn client(&self) -> &Client {
        &self.ctx.client
    }

    fn recorder(&self) -> &Recorder {
        &self.ctx.recorder
    }

    fn field_manager(&self) -> &str {
        FIELD_MANAGER
    }

    fn persisted(&self, cfg: &K) -> HandoverStatus {
        cfg.config_status().and_then(|s| s.handover.clone()).unwrap_or_default()
    }

    async fn observe(&mut self, cfg: &K, state: &HandoverStatus) -> Result<Observed> {
        let live = match self.target.take() {
            Some(t) => t,
            // Authoritative, not the cache: the wiring the machine reads must not lag behind
            // the operator's own last write.
            None => target::fetch(self.ctx, cfg.target_kind(), cfg.target_name()).await?,
        };
        // From the index of every config (unsharded: a second config for the target may sit
        // in a shard another replica owns), as fresh as the webhook replicas' own view, which
        // applies the same rule; a config naming the target that appears, goes or changes
        // target wakes this one (wake/fanout.rs). Once per reconcile; the rounds after an
        // action reuse it.
        let configs = match self.configs.take() {
            Some(c) => c,
            None => self.ctx.watched.config_refs.refs_naming(cfg.target_name()),
        };
        self.seen_target = resource_version(live.as_ref());
        let mut observed = facts::observe(self.ctx, cfg, live, state, &self.traceparent, &configs);
        self.configs = Some(configs);
        if cfg.target_kind() == TargetKind::Xrd {
            self.observe_xrd(cfg, &mut observed).await?;
        }
        Ok(observed)
    }

    fn facts<'o>(&self, observed: &'o Observed) -> &'o dco_state::handover::Facts {
        &observed.facts
    }

    async fn execute(&mut self, cfg: &K, action: &Action, observed: &Observed) -> Result<Option<EventNote>> {
        match action {
            Action::WireTo(server) => {
                self.wire(cfg, server, observed).await?;
                Ok(None)
            }
            Action::Refresh(server) => {
                let w = self.wire(cfg, server, observed).await?;
                Ok(Some(EventNote {
                    warning: false,
                    reason: "WiringRefreshed",
                    note: format!(
                        "updated {}'s spec.conversion (caBundle or conversionReviewVersions changed) for Service {}/{}",
                        observed.target_desc, w.namespace, w.service
                    ),
                }))
            }
        }
    }

    fn render(
        &self,
        cfg: &K,
        observed: &Observed,
        settled: &Settled<HandoverStatus, Action>,
    ) -> Self::Status {
        let config = status::Config {
            generation: cfg.meta().generation,
            drift_policy: cfg.conversion().drift_policy,
            target_name: cfg.target_name(),
        };
        status::render(cfg.config_status(), config, observed, settled)
    }

    fn requeue(&self, observed: &Observed, settled: &Settled<HandoverStatus, Action>) -> Duration {
        self.at_rest.store(status::at_rest(observed, settled), Ordering::Relaxed);
        status::requeue(observed, settled, self.ctx.settings.resync)
    }

    /// Tagged with the move's attempt, so `kubectl describe` does not fold two moves' Events
    /// of the same reason into one.
    fn event_action(&self, t: &Transition<HandoverStatus>) -> String {
        format!("HandoverMove{}", t.to.attempt)
    }

    fn count(&self, t: &Transition<HandoverStatus>) {
        let labels = TransitionLabels { reason: t.event.reason.to_string() };
        self.ctx.metrics.handover_transitions.get_or_create(&labels).inc();
    }

    fn trace(&self, cfg: &K, t: &Transition<HandoverStatus>) {
        let (note, attempt) = (&t.event, t.to.attempt);
        tracing::info!(
            reason = note.reason,
            attempt,
            trace_id = t.to.traceparent.as_deref().and_then(telemetry::trace_id),
            "handover: {}",
            note.note
        );
        let since = |s: &str| s.parse::<Timestamp>().ok().map(std::time::SystemTime::from);
        telemetry::record(&telemetry::TransitionSpan {
            traceparent: t.to.traceparent.as_deref(),
            reason: note.reason,
            note: &note.note,
            warning: note.warning,
            from: t.from.state,
            to: t.to.state,
            since: t.from.since.as_deref().and_then(since),
            at: std::time::SystemTime::now(),
            config: format!("{}/{}", K::KIND, cfg.name_any()),
            target: cfg.target_name(),
            source: t.to.source.as_deref(),
            destination: t.to.destination.as_deref(),
            attempt,
        });
    }

    /// The rendered status starts from the persisted one: equal, nothing changed.
    fn status_unchanged(&self, cfg: &K, status: &Self::Status) -> bool {
        cfg.config_status() == Some(status)
    }

    fn status_failed(&self, cfg: &K, e: kube::Error) -> Error {
        Error::kube("write status of", K::KIND, cfg.name_any())(e)
    }

    fn fence(&self, _cfg: &K, write: &'static str) -> Result<()> {
        self.ctx.fence(write)
    }
}

/// `metadata.resourceVersion` of an object as read.
fn resource_version(o: Option<&Value>) -> Option<String> {
    o?.pointer("/metadata/resourceVersion")?.as_str().map(str::to_string)
}

/// The XRD's spec.conversion names no webhook Service.
fn observed_unwired(xrd: &Value) -> bool {
    target::wired_service(xrd).is_none()
}
