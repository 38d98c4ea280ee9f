//! Two kube-apiservers on one etcd (the testenv runs two unless
//! `DCO_TESTENV_APISERVERS=1`, see docs/testenv.md): a client for the second, and
//! [`RebuildProbe`], which measures when each apiserver switched a kind's storage after a
//! change of its CRD's spec.
//!
//! Every change of a CRD's spec makes each apiserver rebuild that kind's storage on its own
//! schedule (its own CRD informer), and the rebuild ends every watch of the kind about 1 s
//! after that apiserver saw the change (apiextensions-apiserver's
//! `updateCustomResourceDefinition` → `tearDown`). So a watch kept open through each apiserver
//! tells when each one switched; the spread of those instants is the lag between them.
//!
//! ```no_run
//! # async fn t(ar: kube::api::ApiResource, ns: &str) -> anyhow::Result<()> {
//! use dco_tests::apiservers::{RebuildProbe, client2};
//! let probe = RebuildProbe::start([dco_tests::client().await?, client2().await?], &ar, ns).await?;
//! let t = std::time::Instant::now();
//! // ... change the CRD's spec ...
//! let s = probe.wait_switches_after(t, std::time::Duration::from_secs(30)).await?;
//! println!("lag {:?}", s.lag());
//! let log = probe.stop(); // or keep it running and read log.switches(&changes) at the end
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{AsyncBufReadExt, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};
use tokio::sync::watch;

/// A client for the cluster's second kube-apiserver (`<testenv>/kubeconfig-2`, same admin
/// credentials as [`crate::client`]). Brings the cluster up like [`crate::client`]; fails,
/// naming `DCO_TESTENV_APISERVERS`, when the running cluster has one apiserver.
pub async fn client2() -> Result<Client> {
    crate::install_crypto();
    let cluster = tokio::task::spawn_blocking(crate::ensure_cluster).await??;
    // `ready` is rewritten at every start, so it (not a leftover kubeconfig-2) tells what runs
    let ready_file = cluster.dir.join("ready");
    let ready =
        std::fs::read_to_string(&ready_file).with_context(|| format!("reading {}", ready_file.display()))?;
    if !ready.lines().any(|l| l.starts_with("host2=")) {
        bail!(
            "the cluster in {} runs one kube-apiserver (started with DCO_TESTENV_APISERVERS=1, or by an older \
             hack/testenv): restart it with two, `DCO_TESTENV_APISERVERS=2 hack/testenv restart` (with the same \
             DCO_TESTENV_DIR)",
            cluster.dir.display()
        );
    }
    let path = cluster.dir.join("kubeconfig-2");
    let kc = Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(cfg)?)
}

/// One watch through one apiserver, from when it was open (response headers received) to
/// when it ended.
#[derive(Clone, Debug)]
pub struct WatchEnd {
    pub opened: Instant,
    pub ended: Instant,
    /// The watch's ERROR event (e.g. 410 Gone) or read error. `None` when the server just
    /// closed it, as a storage rebuild does: only those ends count as switches.
    pub error: Option<String>,
}

/// What the probe saw through one apiserver.
#[derive(Clone, Debug, Default)]
pub struct ApiserverLog {
    /// Every watch that ended, in order.
    pub ends: Vec<WatchEnd>,
    /// Failed attempts to open a watch (429 while a new storage initialises, 404 before the
    /// kind is served), with when.
    pub open_failures: Vec<(Instant, String)>,
    /// Whether a watch is open now.
    pub watching: bool,
}

impl ApiserverLog {
    /// The first clean end after `t` (and before `until`, when given).
    fn first_end_after(&self, t: Instant, until: Option<Instant>) -> Option<Instant> {
        self.ends
            .iter()
            .filter(|e| e.error.is_none() && e.ended > t && until.is_none_or(|u| e.ended < u))
            .map(|e| e.ended)
            .next()
    }
}

/// Each apiserver's switch after one change: its first clean watch end after the change.
#[derive(Clone, Debug)]
pub struct Switch {
    /// When the caller changed the CRD's spec (the instant it passed in).
    pub changed: Instant,
    /// Per apiserver, in the order of the probe's clients; `None`: not (yet) seen.
    pub ends: Vec<Option<Instant>>,
}

impl Switch {
    /// Whether every apiserver switched.
    pub fn complete(&self) -> bool {
        self.ends.iter().all(Option::is_some)
    }

    /// Per apiserver, how long after the change its watch ended.
    pub fn after_change(&self) -> Vec<Option<Duration>> {
        self.ends.iter().map(|e| e.map(|e| e.saturating_duration_since(self.changed))).collect()
    }

    /// The largest lag between two apiservers' switches (`|end1 − end2|` for two), when
    /// every apiserver switched.
    pub fn lag(&self) -> Option<Duration> {
        let ends: Option<Vec<Instant>> = self.ends.iter().copied().collect();
        let ends = ends?;
        let (min, max) = (ends.iter().min()?, ends.iter().max()?);
        Some(max.duration_since(*min))
    }

    /// `+1.006s +1.012s lag 6ms`, for test output.
    pub fn describe(&self) -> String {
        let mut out: Vec<String> = self
            .after_change()
            .iter()
            .map(|d| d.map_or("-".to_string(), |d| format!("+{:.3}s", d.as_secs_f64())))
            .collect();
        out.push(self.lag().map_or("lag -".to_string(), |l| format!("lag {} ms", l.as_millis())));
        out.join(" ")
    }
}

/// A snapshot of what a [`RebuildProbe`] saw, per apiserver.
#[derive(Clone, Debug)]
pub struct RebuildLog {
    pub apiservers: Vec<ApiserverLog>,
}

impl RebuildLog {
    /// Each apiserver's first clean watch end after `t`.
    pub fn switch_after(&self, t: Instant) -> Switch {
        Switch { changed: t, ends: self.apiservers.iter().map(|a| a.first_end_after(t, None)).collect() }
    }

    /// One [`Switch`] per change (`changes` in order), each apiserver's end taken only before
    /// the next change: an apiserver that missed a change shows `None` there rather than the
    /// next change's end. Changes less than ~1 s apart may share one rebuild.
    pub fn switches(&self, changes: &[Instant]) -> Vec<Switch> {
        changes
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let until = changes.get(i + 1).copied();
                Switch {
                    changed: t,
                    ends: self.apiservers.iter().map(|a| a.first_end_after(t, until)).collect(),
                }
            })
            .collect()
    }
}

/// Keeps a watch of one kind open through each of several apiservers, re-opening it whenever
/// it ends, and records every end (see the module's doc). Runs in the background until
/// [`stop`](Self::stop) or drop.
pub struct RebuildProbe {
    state: Arc<watch::Sender<Vec<ApiserverLog>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RebuildProbe {
    /// Starts a watch of `ar` in namespace `ns` through each client (one per apiserver, e.g.
    /// `[client(), client2()]`) and returns once all are open (the kind must become served
    /// within 60 s).
    pub async fn start(
        clients: impl IntoIterator<Item = Client>,
        ar: &ApiResource,
        ns: &str,
    ) -> Result<Self> {
        // resourceVersion=0 is served from the watch cache (the storage a rebuild replaces),
        // and never 410 Gone; the long timeout keeps the server's own ends out of the way.
        let url = format!(
            "{}?watch=true&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=7200",
            DynamicObject::url_path(ar, Some(ns))
        );
        let clients: Vec<Client> = clients.into_iter().collect();
        let state = Arc::new(watch::Sender::new(vec![ApiserverLog::default(); clients.len()]));
        let tasks = clients
            .into_iter()
            .enumerate()
            .map(|(i, c)| tokio::spawn(watch_loop(i, c, url.clone(), state.clone())))
            .collect();
        let probe = RebuildProbe { state, tasks };
        probe.wait_watching(Duration::from_secs(60)).await.context("opening the probe's watches")?;
        Ok(probe)
    }

    /// What the probe saw so far.
    pub fn log(&self) -> RebuildLog {
        RebuildLog { apiservers: self.state.borrow().clone() }
    }

    /// Each apiserver's first clean watch end after `t`, as far as seen now.
    pub fn switches_after(&self, t: Instant) -> Switch {
        self.log().switch_after(t)
    }

    /// Waits until every apiserver's watch ended after `t` and was re-opened, so that the
    /// next change is seen too; returns the switch.
    pub async fn wait_switches_after(&self, t: Instant, timeout: Duration) -> Result<Switch> {
        let mut rx = self.state.subscribe();
        let done =
            |s: &Vec<ApiserverLog>| s.iter().all(|a| a.watching && a.first_end_after(t, None).is_some());
        if tokio::time::timeout(timeout, rx.wait_for(done)).await.is_err() {
            let s = self.switches_after(t);
            bail!("timed out after {timeout:?} waiting for every apiserver to switch: {}", s.describe());
        }
        Ok(self.switches_after(t))
    }

    /// Waits until a watch is open through every apiserver.
    pub async fn wait_watching(&self, timeout: Duration) -> Result<()> {
        let mut rx = self.state.subscribe();
        if tokio::time::timeout(timeout, rx.wait_for(|s| s.iter().all(|a| a.watching))).await.is_err() {
            let last: Vec<Option<String>> =
                self.state.borrow().iter().map(|a| a.open_failures.last().map(|f| f.1.clone())).collect();
            bail!("timed out after {timeout:?} waiting for the watches to be open (last failures: {last:?})");
        }
        Ok(())
    }

    /// Stops the watches and returns everything seen.
    pub fn stop(self) -> RebuildLog {
        for t in &self.tasks {
            t.abort();
        }
        self.log()
    }
}

impl Drop for RebuildProbe {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One apiserver's watch, re-opened for as long as the probe runs.
async fn watch_loop(i: usize, client: Client, url: String, state: Arc<watch::Sender<Vec<ApiserverLog>>>) {
    let mut backoff = Duration::from_millis(20);
    loop {
        let Ok(req) = http::Request::get(&url).body(Vec::new()) else { return };
        let body = match client.request_stream(req).await {
            Ok(body) => body,
            Err(e) => {
                state.send_modify(|s| s[i].open_failures.push((Instant::now(), e.to_string())));
                // short at first: a new storage answers 429 only while it initialises
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
        };
        backoff = Duration::from_millis(20);
        let opened = Instant::now();
        state.send_modify(|s| s[i].watching = true);
        let mut lines = body.lines();
        let mut error = None;
        while let Some(line) = lines.next().await {
            match line {
                Ok(l) => {
                    if let Some(e) = error_event(&l) {
                        error = Some(e);
                    }
                }
                Err(e) => {
                    error = Some(format!("reading the watch: {e}"));
                    break;
                }
            }
        }
        let ended = Instant::now();
        state.send_modify(|s| {
            s[i].watching = false;
            s[i].ends.push(WatchEnd { opened, ended, error });
        });
    }
}

/// The status of a watch's ERROR event line, if it is one.
fn error_event(line: &str) -> Option<String> {
    if !line.contains("\"ERROR\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    (v["type"] == "ERROR").then(|| format!("{} {}", v["object"]["code"], v["object"]["message"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(ended: Instant, error: Option<&str>) -> WatchEnd {
        WatchEnd { opened: ended, ended, error: error.map(str::to_string) }
    }

    #[test]
    fn switches_take_each_apiservers_first_clean_end_before_the_next_change() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = ApiserverLog {
            ends: vec![end(at(1000), None), end(at(1100), Some("410 Gone")), end(at(4000), None)],
            ..Default::default()
        };
        // b missed the first change
        let b = ApiserverLog {
            ends: vec![end(at(1200), Some("429")), end(at(4030), None)],
            ..Default::default()
        };
        let log = RebuildLog { apiservers: vec![a, b] };
        let s = log.switches(&[at(0), at(3000)]);
        assert_eq!(s[0].ends, vec![Some(at(1000)), None]);
        assert_eq!(s[0].lag(), None);
        assert!(!s[0].complete());
        assert_eq!(s[1].ends, vec![Some(at(4000)), Some(at(4030))]);
        assert_eq!(s[1].lag(), Some(Duration::from_millis(30)));
        assert_eq!(
            s[1].after_change(),
            vec![Some(Duration::from_millis(1000)), Some(Duration::from_millis(1030))]
        );
        // without the bound, b's end after the first change is the second change's
        assert_eq!(log.switch_after(at(0)).ends, vec![Some(at(1000)), Some(at(4030))]);
    }

    #[test]
    fn error_events_are_recognised() {
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}"#;
        assert_eq!(error_event(gone).as_deref(), Some(r#"410 "too old""#));
        assert_eq!(error_event(r#"{"type":"ADDED","object":{"metadata":{"name":"ERROR"}}}"#), None);
        assert_eq!(error_event(r#"{"type":"BOOKMARK","object":{}}"#), None);
    }
}
