//! The shape every persisted state machine shares.

/// A condition as the machine wants it written (`type` is fixed per machine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionUpdate {
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

/// A Kubernetes Event to emit for a transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventNote {
    /// `Normal` unless something is blocked.
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// The outcome of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step<S, A> {
    pub next: S,
    pub actions: Vec<A>,
    pub condition: ConditionUpdate,
    /// Set when the state changed (one Event per transition).
    pub event: Option<EventNote>,
}

/// A pure, persisted state machine.
pub trait Machine {
    type State: Clone + PartialEq;
    type Facts<'a>;
    type Action;

    fn step(state: &Self::State, facts: &Self::Facts<'_>) -> Step<Self::State, Self::Action>;

    /// Steps until the state stops changing (the executor applies actions between reconciles,
    /// so a state that needs an action's effect stops here and waits for new facts).
    fn settle(
        state: &Self::State,
        facts: &Self::Facts<'_>,
        max_steps: usize,
    ) -> Step<Self::State, Self::Action> {
        let mut step = Self::step(state, facts);
        let mut events = step.event.take().into_iter().collect::<Vec<_>>();
        for _ in 1..max_steps {
            if !step.actions.is_empty() {
                break;
            }
            let mut next = Self::step(&step.next, facts);
            if next.next == step.next {
                break;
            }
            events.extend(next.event.take());
            step = next;
        }
        // The last transition's event speaks for the chain; earlier ones are folded into it.
        step.event = fold_events(events);
        step
    }
}

fn fold_events(events: Vec<EventNote>) -> Option<EventNote> {
    let last = events.last()?.clone();
    if events.len() == 1 {
        return Some(last);
    }
    let chain: Vec<&str> = events.iter().map(|e| e.reason).collect();
    Some(EventNote {
        warning: events.iter().any(|e| e.warning),
        reason: last.reason,
        note: format!("{} (via {})", last.note, chain.join(" → ")),
    })
}
