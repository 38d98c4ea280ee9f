//! dco-operator in two wings: `config` drives the handover state machine of `dco-state` for
//! each XRDConversionConfig and CRDConversionConfig, `server` runs each
//! ConversionWebhookServer's workload and status. `runtime` wires the caches and controllers.

pub mod admission;
pub mod assigned;
pub mod cli;
pub mod config;
pub mod context;
pub mod coordinator;
pub mod crds;
pub mod error;
pub mod leases;
pub mod membership;
pub mod memory;
pub mod metrics;
pub mod namespaces;
pub mod rebalance;
pub mod runtime;
pub mod server;
pub mod shard;
pub mod sharded_watch;
pub mod shutdown;
pub mod status_metrics;
pub mod telemetry;

#[cfg(test)]
mod test_apiserver;
