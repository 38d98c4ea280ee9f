//! The resident memory of every dco process of the soak's release (docs/performance.md,
//! "Soak"): every few seconds, each container of the namespace's Pods read from
//! `/proc/<pid>/status` (the local cluster's Pods are processes of this machine), by role:
//! `operator` or `webhook <server>`. The leak check compares a role's level after warm-up (its
//! highest in the first half of the run after warm-up) with its level at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dco_api::LABEL_INSTANCE;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use super::load::Recorder;

/// One reading of one process.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at_ms: u32,
    pub pod: String,
    pub pid: u32,
    /// `operator` or `webhook <server>`.
    pub role: String,
    pub rss_kb: u64,
}

/// `VmRSS` of a process, in kB; `None` once it is gone.
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn role(p: &Pod) -> Option<String> {
    let labels = p.metadata.labels.as_ref()?;
    match labels.get("app.kubernetes.io/name").map(String::as_str) {
        Some("dco-operator") => Some("operator".into()),
        Some("dco-webhook") => Some(format!("webhook {}", labels.get(LABEL_INSTANCE)?)),
        _ => None,
    }
}

/// The running sampler; [`Sampler::stop`] returns every sample.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Bounded: a day at 5 s and a dozen processes is ~210,000.
const MAX_SAMPLES: usize = 500_000;

impl Sampler {
    pub fn start(rec: Arc<Recorder>, pods: Api<Pod>, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), samples.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    let now = rec.ms(std::time::Instant::now());
                    let mut o = out.lock().unwrap_or_else(PoisonError::into_inner);
                    for p in &list.items {
                        let Some(role) = role(p) else { continue };
                        let statuses = p.status.as_ref().and_then(|st| st.container_statuses.clone());
                        for c in statuses.unwrap_or_default() {
                            let pid = c.container_id.as_deref().and_then(|id| id.strip_prefix("testenv://"));
                            let Some(pid) = pid.and_then(|p| p.parse().ok()) else { continue };
                            if let (Some(rss_kb), true) = (rss_kb(pid), o.len() < MAX_SAMPLES) {
                                let pod = p.metadata.name.clone().unwrap_or_default();
                                o.push(Sample { at_ms: now, pod, pid, role: role.clone(), rss_kb });
                            }
                        }
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        Sampler { stop, samples, task }
    }

    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub async fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.samples.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// One role's leak check: its highest reading in the window after warm-up against its highest
/// reading in the window at the end (every process of the role then).
#[derive(Clone, Debug)]
pub struct Level {
    pub role: String,
    pub warm_kb: u64,
    pub end_kb: u64,
}

impl Level {
    pub fn ratio(&self) -> f64 {
        self.end_kb as f64 / self.warm_kb.max(1) as f64
    }
}

/// The levels of each role present in both windows: after warm-up, `[warm, warm + w]` with `w`
/// the larger of `span` and half the time from warm-up to the end (a process replaced by a
/// rolling upgrade reaches its plateau again by serving every target once, so the first half
/// holds the plateau; a leak grows on through the second), and at the end, `[end - span, end]`.
pub fn levels(samples: &[Sample], warm_ms: u32, end_ms: u32, span_ms: u32) -> Vec<Level> {
    let reference = span_ms.max(end_ms.saturating_sub(warm_ms) / 2);
    let mut roles: Vec<String> = samples.iter().map(|s| s.role.clone()).collect();
    roles.sort();
    roles.dedup();
    let max_in = |role: &str, from: u32, to: u32| {
        samples.iter().filter(|s| s.role == role && s.at_ms >= from && s.at_ms <= to).map(|s| s.rss_kb).max()
    };
    roles
        .into_iter()
        .filter_map(|role| {
            let warm_kb = max_in(&role, warm_ms, warm_ms + reference)?;
            let end_kb = max_in(&role, end_ms.saturating_sub(span_ms), end_ms)?;
            Some(Level { role, warm_kb, end_kb })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_ms: u32, role: &str, rss_kb: u64) -> Sample {
        Sample { at_ms, pod: "p".into(), pid: 1, role: role.into(), rss_kb }
    }

    #[test]
    fn levels_take_each_roles_highest_reading_in_both_windows() {
        let samples = vec![
            s(0, "operator", 10_000),
            s(60_000, "operator", 40_000),
            s(70_000, "operator", 42_000),
            s(200_000, "operator", 44_000),
            s(290_000, "operator", 43_000),
            s(65_000, "webhook a", 20_000),
            // a role that appeared after warm-up (a pool member) is not judged
            s(280_000, "webhook p", 99_000),
        ];
        let l = levels(&samples, 60_000, 300_000, 30_000);
        assert_eq!(l.len(), 1);
        assert_eq!((l[0].warm_kb, l[0].end_kb), (42_000, 43_000));
        assert!((l[0].ratio() - 43.0 / 42.0).abs() < 1e-9);
    }

    #[test]
    fn rss_of_this_process_is_read_and_a_missing_process_has_none() {
        assert!(rss_kb(std::process::id()).is_some_and(|kb| kb > 0));
        assert_eq!(rss_kb(u32::MAX), None);
    }
}
