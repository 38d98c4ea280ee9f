//! The reconcile loop every machine runs in: observe → settle → execute → observe again
//! (bounded) → one Event, one metric and one span per transition → one status write →
//! requeue. A [`Driver`] supplies what is particular to an object kind; the order, the bounds
//! and the bookkeeping live here once (the config controller's driver is
//! `operator/src/config/driver.rs`).

use std::future::Future;
use std::time::Duration;

use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::machine::{EventNote, Machine, Settled, Transition};

/// How many times one reconcile observes: the first look, and one after each round of actions.
/// A machine needs one action per reconcile today (the wiring); the bound keeps an action whose
/// effect never shows from spinning.
pub const MAX_ROUNDS: usize = 3;
/// Steps per settle: more than any machine has states.
pub const MAX_STEPS: usize = 8;

type State<D> = <<D as Driver>::Machine as Machine>::State;
type Action<D> = <<D as Driver>::Machine as Machine>::Action;
type Facts<D> = <<D as Driver>::Machine as Machine>::Facts;

/// What one object kind brings to [`drive`]. `observe` and `execute` do I/O; `render` and
/// `requeue` are pure, so a controller's status is unit-tested without an apiserver.
pub trait Driver: Send {
    type Machine: Machine;
    type Object: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync;
    /// The facts and everything else `render` needs from one observation.
    type Observed: Send;
    type Status: Serialize + Send + Sync;
    type Error: Send;

    fn client(&self) -> &Client;
    fn recorder(&self) -> &Recorder;
    fn field_manager(&self) -> &str;

    /// The machine's state as persisted in the object's status.
    fn persisted(&self, obj: &Self::Object) -> State<Self>;

    /// Facts from the caches, plus one read where freshness matters. `state` is where the
    /// machine is now (which servers' facts a move needs depends on it).
    fn observe(
        &mut self,
        obj: &Self::Object,
        state: &State<Self>,
    ) -> impl Future<Output = Result<Self::Observed, Self::Error>> + Send;

    fn facts<'a>(&self, observed: &'a Self::Observed) -> &'a Facts<Self>;

    /// Carries out one action. What it did that a person should see and that is not a
    /// transition (a refresh of a settled wiring) comes back as an Event.
    fn execute(
        &mut self,
        obj: &Self::Object,
        action: &Action<Self>,
        observed: &Self::Observed,
    ) -> impl Future<Output = Result<Option<EventNote>, Self::Error>> + Send;

    /// The whole status to write, from the last observation and where the machine rests.
    fn render(
        &self,
        obj: &Self::Object,
        observed: &Self::Observed,
        settled: &Settled<State<Self>, Action<Self>>,
    ) -> Self::Status;

    fn requeue(&self, observed: &Self::Observed, settled: &Settled<State<Self>, Action<Self>>) -> Duration;

    /// The Event's `action` field for a transition (Events of one object with the same reason
    /// and action are folded by the apiserver, so a driver may tag them, e.g. per attempt).
    fn event_action(&self, transition: &Transition<State<Self>>) -> String;

    /// Counts one transition in the driver's metrics.
    fn count(&self, transition: &Transition<State<Self>>);

    /// Records one transition's span (and its log line).
    fn trace(&self, obj: &Self::Object, transition: &Transition<State<Self>>);

    fn status_failed(&self, obj: &Self::Object, error: kube::Error) -> Self::Error;

    /// Whether `status` is what the object carries already: then it is not written (an idle
    /// look costs no write). Every status is written by default.
    fn status_unchanged(&self, _obj: &Self::Object, _status: &Self::Status) -> bool {
        false
    }

    /// Asked before each round of actions and before the Events and the status write: an
    /// `Err` stops the drive there, writing nothing more (the operator's shard fence: a
    /// replica paused mid-reconcile must not write for a shard it no longer owns). Nothing is
    /// fenced by default.
    fn fence(&self, _obj: &Self::Object, _write: &'static str) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// What one [`drive`] did: where the machine rests, the transitions on the way, and when to
/// look again.
#[derive(Debug)]
pub struct Driven<S, A> {
    pub settled: Settled<S, A>,
    pub requeue: Duration,
    /// Rounds of actions executed.
    pub rounds: usize,
    /// The object's resourceVersion after the status write; `None` when the status was
    /// unchanged and not written (or the apiserver answered without one).
    pub written: Option<String>,
}

/// Runs one reconcile of `obj` through its machine. Fails before anything is persisted when an
/// observation or an action fails: the next reconcile starts again from the persisted state,
/// and the machine repeats what it had decided.
pub async fn drive<D: Driver>(
    driver: &mut D,
    obj: &D::Object,
) -> Result<Driven<State<D>, Action<D>>, D::Error> {
    let mut state = driver.persisted(obj);
    let mut transitions = Vec::new();
    let mut notes = Vec::new();
    let mut rounds = 0;
    let (observed, settled) = loop {
        let observed = driver.observe(obj, &state).await?;
        let mut settled = D::Machine::settle(&state, driver.facts(&observed), MAX_STEPS);
        transitions.append(&mut settled.transitions);
        state = settled.state.clone();
        if settled.actions.is_empty() || rounds + 1 >= MAX_ROUNDS {
            break (observed, settled);
        }
        driver.fence(obj, "handover round")?;
        for action in &settled.actions {
            notes.extend(driver.execute(obj, action, &observed).await?);
        }
        rounds += 1;
    };
    let settled = Settled { transitions, ..settled };
    driver.fence(obj, "status")?;
    for t in &settled.transitions {
        driver.count(t);
        driver.trace(obj, t);
        let e = &t.event;
        publish(driver.recorder(), obj, e.warning, e.reason, &driver.event_action(t), e.note.clone()).await;
    }
    for note in &notes {
        publish(driver.recorder(), obj, note.warning, note.reason, note.reason, note.note.clone()).await;
    }
    let status = driver.render(obj, &observed, &settled);
    let written = if driver.status_unchanged(obj, &status) {
        None
    } else {
        crate::status::apply(driver.client(), obj, &status, driver.field_manager())
            .await
            .map_err(|e| driver.status_failed(obj, e))?
    };
    let requeue = driver.requeue(&observed, &settled);
    Ok(Driven { settled, requeue, rounds, written })
}

/// Publishes an Event about `obj`; failing to record one never fails a reconcile. Every
/// Event of the operator goes through here, from `drive` and from the controllers.
pub async fn publish<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    obj: &K,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_: if warning { EventType::Warning } else { EventType::Normal },
        reason: reason.to_string(),
        note: Some(note),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(object = %obj.name_any(), reason, error = %e, "cannot record an Event");
    }
}

#[cfg(test)]
mod tests {
    //! `drive` with a test machine (a lamp switched on by an action) against a mocked
    //! apiserver that records every request.

    use std::sync::{Arc, Mutex};

    use dco_api::CRDConversionConfig;
    use http::{Request, Response};
    use kube::client::Body;
    use kube::runtime::events::Reporter;

    use super::*;
    use crate::machine::{ConditionUpdate, Step};

    #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
    enum Lamp {
        Off,
        Switching,
        On,
    }

    struct LampMachine;

    impl Machine for LampMachine {
        type State = Lamp;
        /// Whether the bulb is lit, as observed.
        type Facts = bool;
        type Action = &'static str;

        fn step(state: &Lamp, lit: &bool) -> Step<Lamp, &'static str> {
            let cond = |status| ConditionUpdate { status, reason: "Lamp", message: String::new() };
            let go = |next, reason: &'static str| Step {
                next,
                actions: vec![],
                condition: cond(next == Lamp::On),
                event: Some(EventNote { warning: false, reason, note: format!("{state:?} → {next:?}") }),
            };
            match (state, lit) {
                (Lamp::Off, _) => go(Lamp::Switching, "Started"),
                (Lamp::Switching, false) => Step {
                    next: Lamp::Switching,
                    actions: vec!["SwitchOn"],
                    condition: cond(false),
                    event: None,
                },
                (Lamp::Switching, true) => go(Lamp::On, "Lit"),
                (Lamp::On, _) => Step { next: Lamp::On, actions: vec![], condition: cond(true), event: None },
            }
        }
    }

    #[derive(Default)]
    struct Log {
        observed: Vec<bool>,
        executed: usize,
        counted: Vec<&'static str>,
        traced: Vec<&'static str>,
    }

    struct LampDriver {
        client: Client,
        recorder: Recorder,
        /// The world: the bulb, and whether switching it on takes effect.
        lit: bool,
        broken: bool,
        log: Arc<Mutex<Log>>,
        /// How many fences pass before one stops the drive (`None`: all).
        fences: Option<Arc<Mutex<usize>>>,
        /// The status the object carries already, as the driver compares it.
        carried: Option<serde_json::Value>,
    }

    impl Driver for LampDriver {
        type Machine = LampMachine;
        type Object = CRDConversionConfig;
        type Observed = bool;
        type Status = serde_json::Value;
        type Error = String;

        fn client(&self) -> &Client {
            &self.client
        }
        fn recorder(&self) -> &Recorder {
            &self.recorder
        }
        fn field_manager(&self) -> &str {
            "lamp"
        }
        fn persisted(&self, _: &CRDConversionConfig) -> Lamp {
            Lamp::Off
        }
        async fn observe(&mut self, _: &CRDConversionConfig, _: &Lamp) -> Result<bool, String> {
            self.log.lock().unwrap().observed.push(self.lit);
            Ok(self.lit)
        }
        fn facts<'a>(&self, observed: &'a bool) -> &'a bool {
            observed
        }
        async fn execute(
            &mut self,
            _: &CRDConversionConfig,
            _: &&'static str,
            _: &bool,
        ) -> Result<Option<EventNote>, String> {
            self.log.lock().unwrap().executed += 1;
            self.lit = !self.broken;
            Ok(None)
        }
        fn render(
            &self,
            _: &CRDConversionConfig,
            lit: &bool,
            s: &Settled<Lamp, &'static str>,
        ) -> serde_json::Value {
            serde_json::json!({"lamp": s.state, "lit": lit, "transitions": s.transitions.len()})
        }
        fn requeue(&self, _: &bool, s: &Settled<Lamp, &'static str>) -> Duration {
            Duration::from_secs(if s.state == Lamp::On { 300 } else { 5 })
        }
        fn event_action(&self, t: &Transition<Lamp>) -> String {
            format!("{:?}", t.to)
        }
        fn count(&self, t: &Transition<Lamp>) {
            self.log.lock().unwrap().counted.push(t.event.reason);
        }
        fn trace(&self, _: &CRDConversionConfig, t: &Transition<Lamp>) {
            self.log.lock().unwrap().traced.push(t.event.reason);
        }
        fn status_failed(&self, _: &CRDConversionConfig, e: kube::Error) -> String {
            e.to_string()
        }
        fn status_unchanged(&self, _: &CRDConversionConfig, status: &serde_json::Value) -> bool {
            self.carried.as_ref() == Some(status)
        }
        fn fence(&self, _: &CRDConversionConfig, write: &'static str) -> Result<(), String> {
            let Some(left) = &self.fences else { return Ok(()) };
            let mut left = left.lock().unwrap();
            if *left == 0 {
                return Err(format!("fenced before {write}"));
            }
            *left -= 1;
            Ok(())
        }
    }

    /// The requests `drive` made, as (method, path, body), each answered with its own body.
    type Requests = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

    fn driver(broken: bool) -> (LampDriver, Requests, Arc<Mutex<Log>>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let requests: Requests = Arc::default();
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let (method, path) = (req.method().to_string(), req.uri().path().to_string());
                let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
                let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                let mut answer = body.clone();
                if path.ends_with("/status") {
                    answer = serde_json::to_value(lamp_object()).unwrap();
                }
                seen.lock().unwrap().push((method, path, body));
                send.send_response(Response::new(Body::from(serde_json::to_vec(&answer).unwrap())));
            }
        });
        let client = Client::new(service, "default");
        let recorder = Recorder::new(client.clone(), Reporter { controller: "lamp".into(), instance: None });
        let log = Arc::new(Mutex::new(Log::default()));
        let d = LampDriver {
            client,
            recorder,
            lit: false,
            broken,
            log: log.clone(),
            fences: None,
            carried: None,
        };
        (d, requests, log)
    }

    fn lamp_object() -> CRDConversionConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": "lamp", "uid": "u1", "resourceVersion": "17"},
            "spec": {"targetCRD": {"name": "lamps.example.org"}, "hubVersion": "v1", "spokes": []},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn each_transition_is_one_event_one_metric_one_span_and_the_action_is_observed() {
        let (mut d, requests, log) = driver(false);
        let driven = drive(&mut d, &lamp_object()).await.unwrap();
        assert_eq!(driven.settled.state, Lamp::On);
        assert_eq!(driven.rounds, 1);
        assert_eq!(driven.requeue, Duration::from_secs(300));
        let reasons: Vec<_> = driven.settled.transitions.iter().map(|t| t.event.reason).collect();
        assert_eq!(reasons, ["Started", "Lit"]);

        let log = log.lock().unwrap();
        // The switch's effect was observed before the step that needed it.
        assert_eq!(log.observed, [false, true]);
        assert_eq!(log.executed, 1);
        assert_eq!(log.counted, ["Started", "Lit"]);
        assert_eq!(log.traced, ["Started", "Lit"]);

        let requests = requests.lock().unwrap();
        let events: Vec<_> =
            requests.iter().filter(|(m, p, _)| m == "POST" && p.ends_with("/events")).collect();
        let event_reasons: Vec<_> = events.iter().map(|(_, _, b)| b["reason"].as_str().unwrap()).collect();
        assert_eq!(event_reasons, ["Started", "Lit"]);
        assert_eq!(events[1].2["action"], "On");
        // One status write, last, by server-side apply, with what render made of the rest.
        let (method, path, body) = requests.last().unwrap();
        assert_eq!(
            (method.as_str(), path.as_str()),
            ("PATCH", "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs/lamp/status")
        );
        assert_eq!(body["status"], serde_json::json!({"lamp": "On", "lit": true, "transitions": 2}));
        // Conditioned on the object as read: a status written since is not overwritten (409).
        assert_eq!(body["metadata"]["resourceVersion"], "17");
        assert_eq!(requests.iter().filter(|(_, p, _)| p.ends_with("/status")).count(), 1);
        assert_eq!(driven.written.as_deref(), Some("17"), "the object's version after the write");
    }

    #[tokio::test]
    async fn a_status_the_object_carries_already_is_not_written() {
        let (mut d, requests, _) = driver(false);
        d.lit = true;
        d.carried = Some(serde_json::json!({"lamp": "On", "lit": true, "transitions": 2}));
        let driven = drive(&mut d, &lamp_object()).await.unwrap();
        assert_eq!(driven.settled.state, Lamp::On);
        assert_eq!(driven.written, None);
        let requests = requests.lock().unwrap();
        assert_eq!(requests.iter().filter(|(_, p, _)| p.ends_with("/status")).count(), 0, "{requests:?}");
        // The Events of the transitions are still published.
        assert_eq!(requests.iter().filter(|(_, p, _)| p.ends_with("/events")).count(), 2);
    }

    #[tokio::test]
    async fn a_fence_that_fails_stops_the_drive_before_its_next_write() {
        // The first round's fence passes; the one before the Events and the status does not.
        let (mut d, requests, log) = driver(false);
        d.fences = Some(Arc::new(Mutex::new(1)));
        assert_eq!(drive(&mut d, &lamp_object()).await.unwrap_err(), "fenced before status");
        assert_eq!(log.lock().unwrap().executed, 1);
        assert!(requests.lock().unwrap().is_empty(), "no Event, no status: {:?}", requests.lock().unwrap());
        // Fenced before the first round: nothing is executed either.
        let (mut d, requests, log) = driver(false);
        d.fences = Some(Arc::new(Mutex::new(0)));
        assert_eq!(drive(&mut d, &lamp_object()).await.unwrap_err(), "fenced before handover round");
        assert_eq!(log.lock().unwrap().executed, 0);
        assert!(requests.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_action_that_never_takes_effect_is_bounded() {
        let (mut d, requests, log) = driver(true);
        let driven = drive(&mut d, &lamp_object()).await.unwrap();
        assert_eq!(driven.settled.state, Lamp::Switching);
        assert_eq!(driven.settled.actions, ["SwitchOn"], "the last settle's pending action is reported");
        assert_eq!(driven.rounds, MAX_ROUNDS - 1);
        assert_eq!(driven.requeue, Duration::from_secs(5));
        let log = log.lock().unwrap();
        assert_eq!(log.observed.len(), MAX_ROUNDS);
        assert_eq!(log.executed, MAX_ROUNDS - 1);
        assert_eq!(log.traced, ["Started"]);
        let requests = requests.lock().unwrap();
        assert_eq!(requests.iter().filter(|(_, p, _)| p.ends_with("/status")).count(), 1);
        assert_eq!(requests.iter().filter(|(_, p, _)| p.ends_with("/events")).count(), 1);
    }
}
