//! Per-target conversion signals (docs/operations.md, "Metrics"): objects per version pair and
//! result, acknowledged losses, the plan's compile time and last compile result, and the end
//! of a target's series when it leaves the registry.
//!
//! Labels are bounded by what the replica holds: targets come from the registry, versions from
//! the target's plan (its hub and spokes, each a version the target declares), and any other
//! version is `<other>`, so a client posting made-up apiVersions cannot add series. Each
//! (from, to, result) counter is resolved once per plan and kept with it ([`PlanSignals`]): a
//! review costs an atomic add per version pair it carried, not a label set per object.

use std::sync::{Arc, OnceLock};
use std::time::UNIX_EPOCH;

use prometheus_client::metrics::counter::Counter;

use crate::metrics::{
    ConversionLabels, ConversionResult, Metrics, Outcome, PairLabels, RequestLabels, TargetLabel,
};
use crate::plan::ServablePlan;
use crate::registry::{Entry, Map};

/// The version label of an apiVersion that names none of the plan's versions.
pub const OTHER_VERSION: &str = "<other>";
const RESULTS: usize = ConversionResult::ALL.len();

/// The counters of one plan, created on first use (a series appears once it has counted
/// something). Shared by every copy of the registry entry.
#[derive(Clone, Default)]
pub struct PlanSignals(Arc<OnceLock<Cells>>);

impl std::fmt::Debug for PlanSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanSignals")
    }
}

struct Cells {
    /// The plan's versions (the indexes of `ServablePlan::versions`), then `<other>`.
    versions: Vec<String>,
    /// By (from, to, result).
    conversions: Box<[OnceLock<Counter>]>,
    /// By (from, to).
    lossy: Box<[OnceLock<Counter>]>,
}

impl Cells {
    fn new(mut versions: Vec<String>) -> Self {
        versions.push(OTHER_VERSION.to_string());
        let n = versions.len();
        Cells {
            conversions: (0..n * n * RESULTS).map(|_| OnceLock::new()).collect(),
            lossy: (0..n * n).map(|_| OnceLock::new()).collect(),
            versions,
        }
    }

    fn index(&self, v: Option<usize>) -> usize {
        let other = self.versions.len() - 1;
        v.filter(|&i| i < other).unwrap_or(other)
    }
}

impl PlanSignals {
    /// Counts the objects of one review `plan` answered: `to` and each tally's `from` are
    /// indexes of `plan.versions()`.
    pub fn record(
        &self,
        metrics: &Metrics,
        target: &str,
        plan: &dyn ServablePlan,
        to: Option<usize>,
        tally: &[dco_engine::Tally],
    ) {
        if tally.is_empty() {
            return;
        }
        let cells = self.0.get_or_init(|| Cells::new(plan.versions()));
        let n = cells.versions.len();
        let to = cells.index(to);
        for t in tally {
            let from = cells.index(t.from);
            let result = ConversionResult::of(t.result);
            let pair = from * n + to;
            let counter = cells.conversions[pair * RESULTS + result as usize].get_or_init(|| {
                metrics
                    .conversions
                    .get_or_create(&ConversionLabels {
                        target: target.to_string(),
                        from_version: cells.versions[from].clone(),
                        to_version: cells.versions[to].clone(),
                        result,
                    })
                    .clone()
            });
            counter.inc_by(t.objects);
            if t.lossy > 0 {
                let lossy = cells.lossy[pair].get_or_init(|| {
                    metrics
                        .lossy_conversions
                        .get_or_create(&PairLabels {
                            target: target.to_string(),
                            from_version: cells.versions[from].clone(),
                            to_version: cells.versions[to].clone(),
                        })
                        .clone()
                });
                lossy.inc_by(t.lossy);
            }
        }
    }
}

/// Brings the per-target series in line with the registry after a sync pass turned `before`
/// into `after`: the plan gauges of every entry, and no series of a target that left or of a
/// version its new plan no longer has. Series of the versions a new plan keeps stay, so
/// a recompile does not reset its counters.
pub fn follow(metrics: &Metrics, before: &Map, after: &Map) {
    for (target, old) in before {
        match after.get(target) {
            None => forget_target(metrics, target, old),
            Some(new) if !Arc::ptr_eq(old, new) => {
                if let (Some(o), Some(n)) = (old.plan(), new.plan())
                    && !Arc::ptr_eq(o, n)
                {
                    let keep = n.versions();
                    let kept = |v: &str| v == OTHER_VERSION || keep.iter().any(|k| k == v);
                    forget_versions(metrics, target, &o.versions(), kept);
                }
            }
            Some(_) => {}
        }
    }
    for (target, e) in after {
        set_plan_gauges(metrics, target, e);
    }
}

fn set_plan_gauges(metrics: &Metrics, target: &str, e: &Entry) {
    let label = TargetLabel { target: target.to_string() };
    match &e.served {
        Some(s) => {
            let at = s.compiled_at.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
            metrics.plan_compiled.get_or_create(&label).set(at);
        }
        None => {
            metrics.plan_compiled.remove(&label);
        }
    }
    match (&e.served, &e.failure) {
        (_, Some(_)) => {
            metrics.plan_compile_ok.get_or_create(&label).set(0);
        }
        (Some(_), None) => {
            metrics.plan_compile_ok.get_or_create(&label).set(1);
        }
        // Not compiled yet: no result to report.
        (None, None) => {
            metrics.plan_compile_ok.remove(&label);
        }
    }
}

/// Removes every series labelled with `target`.
fn forget_target(metrics: &Metrics, target: &str, old: &Entry) {
    let label = TargetLabel { target: target.to_string() };
    for f in [&metrics.objects_converted, &metrics.compile_failures, &metrics.panics] {
        f.remove(&label);
    }
    metrics.plan_compiled.remove(&label);
    metrics.plan_compile_ok.remove(&label);
    for result in Outcome::ALL {
        let l = RequestLabels { target: target.to_string(), result };
        metrics.requests.remove(&l);
        metrics.latency.remove(&l);
    }
    if let Some(plan) = old.plan() {
        forget_versions(metrics, target, &plan.versions(), |_| false);
    }
}

/// Removes the conversion series of `target` between `versions` and `<other>` that name a
/// version `keep` refuses.
fn forget_versions(metrics: &Metrics, target: &str, versions: &[String], keep: impl Fn(&str) -> bool) {
    let all: Vec<&str> = versions.iter().map(String::as_str).chain([OTHER_VERSION]).collect();
    for from in &all {
        for to in &all {
            if keep(from) && keep(to) {
                continue;
            }
            let (from_version, to_version) = (from.to_string(), to.to_string());
            for result in ConversionResult::ALL {
                metrics.conversions.remove(&ConversionLabels {
                    target: target.to_string(),
                    from_version: from_version.clone(),
                    to_version: to_version.clone(),
                    result,
                });
            }
            metrics.lossy_conversions.remove(&PairLabels {
                target: target.to_string(),
                from_version,
                to_version,
            });
        }
    }
}
