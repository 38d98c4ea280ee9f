//! What the operator tells about itself: logs and handover traces (`telemetry`), the
//! `/metrics` registry (`metrics`), the watches' errors (`watch_metrics`) and the allocator's trimming (`memory`).

pub(crate) mod api_metrics;
pub(crate) mod memory;
pub(crate) mod metrics;
pub(crate) mod queue;
pub mod telemetry;
pub(crate) mod watch_metrics;
