//! The soak's steady load (docs/performance.md, "Soak"): per target, one request every period,
//! alternating between the two apiservers: server-side applies at both versions of the load's
//! own objects, GETs at both versions of every object (the untouched ones included) and LISTs
//! at both versions, every answer compared whole with what it must be; and admission traffic:
//! dry-run creates of a valid and of a refused ConversionWebhookServer. Every request is
//! recorded with its time and latency, every failure with its error, for the report and for
//! telling the failures inside a SIGKILL window from the rest.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::chart::widget_spec;
use crate::expect::Expect;

/// The versions of every target (widget_crd: v1 spoke, v2 hub and storage).
pub const VERSIONS: [&str; 2] = ["v1", "v2"];
/// The load's own objects per target; the others (`s…`) it only reads.
pub const LOAD_OBJECTS: usize = 3;
const MANAGER: &str = "dco-soak-load";

/// What a request did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Write,
    Get,
    List,
    AdmitValid,
    AdmitRefused,
}

/// One request: when it started (ms since the soak's start), how long it took, whether it
/// succeeded (for a refused admission: refused with the expected message).
#[derive(Clone, Copy, Debug)]
pub struct Req {
    pub at_ms: u32,
    pub latency_us: u32,
    pub op: Op,
    pub ok: bool,
}

/// One failed request or wrong answer.
#[derive(Clone, Debug)]
pub struct Failure {
    /// When the request began and when its answer (or error) came.
    pub at: Instant,
    pub ended: Instant,
    pub at_ms: u32,
    pub what: String,
    /// A read that answered with another value than the last write (never excused).
    pub wrong: bool,
}

impl Failure {
    /// The connection to a replica broke or was refused: what a SIGKILL costs until the
    /// apiserver routes away (docs/operations.md, "What a move costs the cluster").
    pub fn transport(&self) -> bool {
        const TRANSPORT: [&str; 6] = [
            "connection refused",
            "connection reset",
            "client connection lost",
            "broken pipe",
            "EOF",
            "closed network connection",
        ];
        !self.wrong && TRANSPORT.iter().any(|t| self.what.contains(t))
    }

    /// The SIGKILL's, not dco's: a broken or refused connection of a request in flight at
    /// some moment of a window (one begun before the signal dies with the process too).
    pub fn excused(&self, windows: &[super::Window]) -> bool {
        self.transport() && windows.iter().any(|w| self.at <= w.to && self.ended >= w.from)
    }
}

/// Bounded: an hour at ~150 requests/s is ~540,000; past this the rest is counted only.
const MAX_RECORDED: usize = 4_000_000;

/// Every request and failure of the run.
pub struct Recorder {
    pub start: Instant,
    reqs: Mutex<Vec<Req>>,
    failures: Mutex<Vec<Failure>>,
}

impl Recorder {
    pub fn new(start: Instant) -> Arc<Recorder> {
        Arc::new(Recorder { start, reqs: Mutex::new(Vec::new()), failures: Mutex::new(Vec::new()) })
    }

    pub fn ms(&self, at: Instant) -> u32 {
        at.saturating_duration_since(self.start).as_millis() as u32
    }

    fn record(&self, began: Instant, op: Op, result: Result<(), (bool, String)>) {
        let ok = result.is_ok();
        let req = Req {
            at_ms: self.ms(began),
            latency_us: began.elapsed().as_micros().min(u32::MAX as u128) as u32,
            op,
            ok,
        };
        let mut reqs = self.reqs.lock().unwrap_or_else(PoisonError::into_inner);
        if reqs.len() < MAX_RECORDED {
            reqs.push(req);
        }
        drop(reqs);
        if let Err((wrong, what)) = result {
            let f = Failure {
                at: began,
                ended: Instant::now(),
                at_ms: self.ms(began),
                what: what.chars().take(600).collect(),
                wrong,
            };
            self.failures.lock().unwrap_or_else(PoisonError::into_inner).push(f);
        }
    }

    pub fn reqs(&self) -> Vec<Req> {
        self.reqs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn failures(&self) -> Vec<Failure> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// One target as the load uses it: its Api at each version through each apiserver.
#[derive(Clone)]
pub struct TargetApis {
    pub name: String,
    pub group: String,
    /// `[apiserver][version]`.
    pub apis: Vec<[Api<DynamicObject>; 2]>,
    /// The untouched objects and their `sizeGB`.
    pub statics: BTreeMap<String, i64>,
}

/// The running load; [`Running::stop`] ends it and returns each target's last writes.
pub struct Running {
    stop: Arc<AtomicBool>,
    targets: Vec<tokio::task::JoinHandle<BTreeMap<String, i64>>>,
    admission: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn stop(self) -> anyhow::Result<Vec<BTreeMap<String, i64>>> {
        self.stop.store(true, Ordering::SeqCst);
        self.admission.await?;
        let mut out = Vec::new();
        for t in self.targets {
            out.push(t.await?);
        }
        Ok(out)
    }
}

/// Starts one loop per target (a request every `period` each) and the admission loop (a
/// review every 500 ms) on `servers`, the dry-run object of the release's label `label`.
pub fn start(
    rec: Arc<Recorder>,
    targets: Vec<TargetApis>,
    period: Duration,
    servers: Api<dco_api::ConversionWebhookServer>,
    admission_name: String,
    label: (String, String),
) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = targets
        .into_iter()
        .map(|t| tokio::spawn(target_loop(rec.clone(), t, period, stop.clone())))
        .collect();
    let admission = tokio::spawn(admission_loop(rec, servers, admission_name, label, stop.clone()));
    Running { stop, targets: handles, admission }
}

fn load_name(i: usize) -> String {
    format!("l{i}")
}

async fn target_loop(
    rec: Arc<Recorder>,
    t: TargetApis,
    period: Duration,
    stop: Arc<AtomicBool>,
) -> BTreeMap<String, i64> {
    // The load's objects and the values they must read: each written once before any read.
    let mut expect = Expect::new(t.statics.clone());
    let mut k: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let api = &t.apis[(k % t.apis.len() as u64) as usize];
        let pending = (0..LOAD_OBJECTS).map(load_name).find(|n| expect.known(n).is_none());
        let began = Instant::now();
        let (op, result) = match (pending, k % 10) {
            (Some(name), _) => (Op::Write, write(api, &t.group, 0, &name, k as i64, &mut expect).await),
            (None, v @ (0 | 5)) => {
                let name = load_name((k / 5) as usize % LOAD_OBJECTS);
                (Op::Write, write(api, &t.group, (v / 5) as usize, &name, k as i64, &mut expect).await)
            }
            (None, 8 | 9) => (Op::List, list(api, (k % 10 - 8) as usize, &mut expect).await),
            (None, v) => {
                let names = expect.names();
                let name = &names[k as usize % names.len()];
                let version = usize::from(matches!(v, 4 | 6));
                (Op::Get, get(api, version, name, &mut expect).await)
            }
        };
        rec.record(began, op, result.map_err(|(w, e)| (w, format!("{}: {e}", t.name))));
        k += 1;
        tokio::time::sleep(period).await;
    }
    // An unsure last write is read back by the end's check: settle it here the same way.
    let (mut last, unsure) = expect.into_parts();
    last.retain(|n, _| !t.statics.contains_key(n));
    for (name, gb) in unsure {
        if let Ok(o) = t.apis[0][0].get(&name).await
            && o.data["spec"] == widget_spec(VERSIONS[0], gb)
        {
            last.insert(name, gb);
        }
    }
    last
}

type Outcome = Result<(), (bool, String)>;

async fn write(
    api: &[Api<DynamicObject>; 2],
    group: &str,
    version: usize,
    name: &str,
    gb: i64,
    expect: &mut Expect,
) -> Outcome {
    let v = VERSIONS[version];
    let obj = json!({"apiVersion": format!("{group}/{v}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": widget_spec(v, gb)});
    match api[version].patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&obj)).await {
        Ok(_) => {
            expect.written(name, gb);
            Ok(())
        }
        Err(e) => {
            expect.unsure(name, gb);
            Err((false, format!("write {name} at {v}: {e}")))
        }
    }
}

async fn get(api: &[Api<DynamicObject>; 2], version: usize, name: &str, expect: &mut Expect) -> Outcome {
    let v = VERSIONS[version];
    match api[version].get(name).await {
        Ok(o) if expect.check(name, &o.data["spec"], |gb| widget_spec(v, gb)) => Ok(()),
        Ok(o) => Err((
            true,
            format!(
                "{name} at {v}: {} (want {})",
                o.data["spec"],
                expect.want(name, |gb| widget_spec(v, gb))
            ),
        )),
        Err(e) => Err((false, format!("read {name} at {v}: {e}"))),
    }
}

async fn list(api: &[Api<DynamicObject>; 2], version: usize, expect: &mut Expect) -> Outcome {
    let v = VERSIONS[version];
    let items = match api[version].list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => return Err((false, format!("list at {v}: {e}"))),
    };
    let got: BTreeMap<String, Value> =
        items.into_iter().map(|o| (o.metadata.name.unwrap_or_default(), o.data["spec"].clone())).collect();
    let names = expect.names();
    for name in names {
        match got.get(&name) {
            Some(spec) if expect.check(&name, spec, |gb| widget_spec(v, gb)) => {}
            Some(spec) => {
                return Err((
                    true,
                    format!(
                        "list at {v}: {name} {spec} (want {})",
                        expect.want(&name, |gb| widget_spec(v, gb))
                    ),
                ));
            }
            None => return Err((true, format!("list at {v}: {name} missing"))),
        }
    }
    Ok(())
}

/// A dry-run create of a valid server (admitted) and of one whose `extraArgs` set a flag the
/// operator manages (refused with a message naming the field: docs/admission.md), in turn.
async fn admission_loop(
    rec: Arc<Recorder>,
    servers: Api<dco_api::ConversionWebhookServer>,
    name: String,
    label: (String, String),
    stop: Arc<AtomicBool>,
) {
    let dry = PostParams { dry_run: true, field_manager: Some(MANAGER.into()) };
    let mut k: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let refused = k % 2 == 1;
        let args = if refused { json!(["--listen=0.0.0.0:1"]) } else { json!(["--drain-period=5s"]) };
        let obj: dco_api::ConversionWebhookServer = match serde_json::from_value(json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {&label.0: &label.1}},
            "spec": {"replicas": 0, "extraArgs": args}}))
        {
            Ok(o) => o,
            Err(e) => {
                rec.record(Instant::now(), Op::AdmitValid, Err((false, format!("building the server: {e}"))));
                return;
            }
        };
        let began = Instant::now();
        let answer = servers.create(&dry, &obj).await;
        let (op, result) = match (refused, answer) {
            (false, Ok(_)) => (Op::AdmitValid, Ok(())),
            (false, Err(e)) => (Op::AdmitValid, Err((false, format!("admission of a valid server: {e}")))),
            (true, Err(kube::Error::Api(e))) if e.message.contains("set(s) a flag the operator manages") => {
                (Op::AdmitRefused, Ok(()))
            }
            (true, Err(e)) => (Op::AdmitRefused, Err((false, format!("admission of a refused server: {e}")))),
            (true, Ok(_)) => {
                (Op::AdmitRefused, Err((true, "a server setting --listen in extraArgs was admitted".into())))
            }
        };
        rec.record(began, op, result);
        k += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::Window;

    #[test]
    fn a_broken_connection_of_a_request_in_flight_during_a_window_is_the_kills() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let windows = [Window { from: at(1000), to: at(1400) }];
        let failure = |began: u64, ended: u64, what: &str| Failure {
            at: at(began),
            ended: at(ended),
            at_ms: began as u32,
            what: what.into(),
            wrong: false,
        };
        let reset = "read: connection reset by peer";
        assert!(failure(900, 1010, reset).excused(&windows), "begun before the signal, reset by it");
        assert!(failure(1100, 1200, reset).excused(&windows));
        assert!(failure(1350, 1600, reset).excused(&windows));
        assert!(!failure(500, 900, reset).excused(&windows), "over before the signal");
        assert!(!failure(1500, 1600, reset).excused(&windows), "begun after the window");
        assert!(!failure(1100, 1200, "HTTP 503 no conversion plan").excused(&windows), "not the connection");
        let wrong = Failure { wrong: true, ..failure(1100, 1200, reset) };
        assert!(!wrong.excused(&windows), "a wrong value is never the kill's");
    }
}
