//! dco-operator in two wings: `config` drives the handover state machine of `dco-state` for
//! each XRDConversionConfig and CRDConversionConfig, `server` runs each
//! ConversionWebhookServer's workload and status. `runtime` wires the caches and controllers.
//!
//! Layers, each using only those below it: `names`, `kinds`, `pki` (shared by both wings and
//! importing nothing else of the crate but `error`) → `observability`, `sharding`, `context`
//! → the wings `config`, `server`, `admission` → `wake`, `status_metrics` → `runtime`.

pub(crate) mod admission;
pub mod cli;
pub(crate) mod config;
pub(crate) mod config_refs;
pub(crate) mod context;
pub mod crds;
pub(crate) mod error;
pub(crate) mod kinds;
pub(crate) mod names;
pub(crate) mod namespaces;
pub mod observability;
pub(crate) mod pki;
pub(crate) mod reconcile;
pub(crate) mod retry;
pub mod runtime;
pub(crate) mod served;
pub(crate) mod server;
pub(crate) mod sharding;
pub(crate) mod shutdown;
pub(crate) mod status_metrics;
pub(crate) mod target_versions;
pub(crate) mod wake;

#[cfg(test)]
mod testing;
