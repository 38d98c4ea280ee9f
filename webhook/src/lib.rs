//! dco-webhook: the conversion webhook server runtime (`docs/webhook.md`).
//!
//! Data flows one way: the caches (or a static directory) feed the sync pass, which decides
//! per target whether to hold a plan ([`hold`]), compiles what changed and swaps the result
//! into the [`registry`]; the HTTP [`routes`] read the registry lock-free, and the [`lease`]
//! publisher reports what the registry can serve.

pub mod alloc;
pub mod body;
pub mod budget;
pub mod caches;
pub mod cli;
pub mod cluster;
pub mod conn;
pub mod engine;
pub mod health;
pub mod hold;
pub mod kept;
pub mod large;
pub mod lease;
pub mod metrics;
pub mod pause;
pub mod plan;
pub mod pool;
pub mod registry;
pub mod routes;
pub mod run;
pub mod serve;
pub mod share;
pub mod signals;
pub mod static_dir;
pub mod sync;
pub mod targets;
pub mod tls;
