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
}

/// What one [`drive`] did: where the machine rests, the transitions on the way, and when to
/// look again.
#[derive(Debug)]
pub struct Driven<S, A> {
    pub settled: Settled<S, A>,
    pub requeue: Duration,
    /// Rounds of actions executed.
    pub rounds: usize,
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
        for action in &settled.actions {
            notes.extend(driver.execute(obj, action, &observed).await?);
        }
        rounds += 1;
    };
    let settled = Settled { transitions, ..settled };
    for t in &settled.transitions {
        driver.count(t);
        driver.trace(obj, t);
        publish(driver, obj, &t.event, &driver.event_action(t)).await;
    }
    for note in &notes {
        publish(driver, obj, note, note.reason).await;
    }
    let status = driver.render(obj, &observed, &settled);
    crate::status::apply(driver.client(), obj, &status, driver.field_manager())
        .await
        .map_err(|e| driver.status_failed(obj, e))?;
    let requeue = driver.requeue(&observed, &settled);
    Ok(Driven { settled, requeue, rounds })
}

/// Publishes an Event about `obj`; failing to record one never fails a reconcile.
pub async fn publish<D: Driver>(driver: &D, obj: &D::Object, note: &EventNote, action: &str) {
    let ev = Event {
        type_: if note.warning { EventType::Warning } else { EventType::Normal },
        reason: note.reason.to_string(),
        note: Some(note.note.clone()),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = driver.recorder().publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(object = %obj.name_any(), reason = note.reason, error = %e, "cannot record an Event");
    }
}
