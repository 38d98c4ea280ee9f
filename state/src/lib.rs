//! dco's reconcile framework. Each machine is pure: (persisted state, observed facts) →
//! (next state, actions, condition, one Event per transition); `machine` holds the trait and
//! `settle`, `handover` the one machine dco has. With the `kube` feature, the kube part:
//! status conditions, the server-side-apply status write and the `drive` loop that observes,
//! settles, executes and persists, so a machine is tested exhaustively without a cluster and
//! resumes after any restart.

pub mod handover;
pub mod machine;

#[cfg(feature = "kube")]
pub mod conditions;
#[cfg(feature = "kube")]
pub mod drive;
#[cfg(feature = "kube")]
pub mod status;
