//! dco's persisted, typed state machines. Each machine is pure: (persisted state, observed
//! facts) → (next state, actions, condition, event). The operator gathers the facts from its
//! caches, executes the actions and persists the next state in the object's status, so a
//! machine can be tested exhaustively without a cluster and resumes after any restart.

pub mod handover;
pub mod machine;
