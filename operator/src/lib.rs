//! dco-operator: the ConversionWebhookServer controller (workload, certificates, served-target
//! aggregation) and the config controllers that drive the handover state machine of
//! `dco-state`, executing its actions against the cluster.

pub mod assigned;
pub mod certs;
pub mod cli;
pub mod conditions;
pub mod config_controller;
pub mod context;
pub mod error;
pub mod metrics;
pub mod names;
pub mod otel;
pub mod run;
pub mod served;
pub mod server_controller;
pub mod serving;
pub mod target;
pub mod trace;
pub mod workload;

#[cfg(test)]
mod verifier;
