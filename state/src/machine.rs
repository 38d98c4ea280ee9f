//! The shape every persisted state machine shares, and `settle`: the one way a machine is run.

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

/// One transition a settle made: the state it left, the state it entered, and its Event.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition<S> {
    pub from: S,
    pub to: S,
    pub event: EventNote,
}

/// Where a settle came to rest: the final state, what must be done for it to go on, the
/// condition to write, and every transition on the way (none folded: each gets its own
/// Event, metric and span).
#[derive(Clone, Debug, PartialEq)]
pub struct Settled<S, A> {
    pub state: S,
    pub actions: Vec<A>,
    pub condition: ConditionUpdate,
    pub transitions: Vec<Transition<S>>,
}

/// A pure, persisted state machine.
pub trait Machine {
    type State: Clone + PartialEq;
    type Facts;
    type Action: Clone + PartialEq;

    fn step(state: &Self::State, facts: &Self::Facts) -> Step<Self::State, Self::Action>;

    /// Steps from `state` under `facts` until the state stops changing, an action is asked
    /// for (its effect is a new fact, so the caller executes it and settles again on what it
    /// observes then), or `max_steps` steps were taken (a machine that cycles under fixed
    /// facts is a bug, and the bound keeps one reconcile from spinning on it).
    fn settle(
        state: &Self::State,
        facts: &Self::Facts,
        max_steps: usize,
    ) -> Settled<Self::State, Self::Action> {
        let mut current = state.clone();
        let mut transitions = Vec::new();
        let mut last = None;
        for _ in 0..max_steps.max(1) {
            let step = Self::step(&current, facts);
            let changed = step.next != current;
            if let Some(event) = step.event.clone() {
                transitions.push(Transition { from: current.clone(), to: step.next.clone(), event });
            }
            current = step.next.clone();
            let done = !step.actions.is_empty() || !changed;
            last = Some(step);
            if done {
                break;
            }
        }
        let Step { actions, condition, .. } = last.expect("at least one step is taken");
        Settled { state: current, actions, condition, transitions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts up to a target, asking for `Ring` at 3 and stopping at 5.
    struct Counter;

    impl Machine for Counter {
        type State = u32;
        type Facts = (u32, bool);
        type Action = &'static str;

        fn step(state: &u32, &(to, rang): &(u32, bool)) -> Step<u32, &'static str> {
            let condition =
                ConditionUpdate { status: *state == to, reason: "Counting", message: String::new() };
            if *state == 3 && !rang {
                return Step { next: 3, actions: vec!["Ring"], condition, event: None };
            }
            if *state >= to {
                return Step { next: *state, actions: vec![], condition, event: None };
            }
            let event =
                EventNote { warning: false, reason: "Counted", note: format!("{} → {}", state, state + 1) };
            Step { next: state + 1, actions: vec![], condition, event: Some(event) }
        }
    }

    #[test]
    fn every_transition_is_returned_and_an_action_stops_the_settle() {
        let s = Counter::settle(&0, &(5, false), 10);
        assert_eq!(s.state, 3);
        assert_eq!(s.actions, ["Ring"]);
        let notes: Vec<_> = s.transitions.iter().map(|t| (t.from, t.to, t.event.note.as_str())).collect();
        assert_eq!(notes, [(0, 1, "0 → 1"), (1, 2, "1 → 2"), (2, 3, "2 → 3")]);

        // The action's effect observed: the rest of the way, and rest.
        let s = Counter::settle(&3, &(5, true), 10);
        assert_eq!((s.state, s.transitions.len(), s.actions.len()), (5, 2, 0));
        assert!(s.condition.status);
        // Resting already: no transition at all.
        assert!(Counter::settle(&5, &(5, true), 10).transitions.is_empty());
    }

    #[test]
    fn the_bound_holds() {
        let s = Counter::settle(&0, &(1000, true), 4);
        assert_eq!((s.state, s.transitions.len()), (4, 4));
        assert_eq!(Counter::settle(&0, &(1000, true), 0).state, 1);
    }
}
