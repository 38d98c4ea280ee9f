//! Readiness: ready only after the caches synced and a first full pass over existing configs
//! completed, and never again once shutdown began.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics::Metrics;

#[derive(Debug)]
pub struct Health {
    synced: AtomicBool,
    shutting_down: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Health {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Health { synced: AtomicBool::new(false), shutting_down: AtomicBool::new(false), metrics }
    }

    /// Called once the first full pass is done.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
        self.publish();
    }

    /// The first step of a graceful shutdown: endpoints stop routing to this replica.
    pub fn mark_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.publish();
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.shutting_down.load(Ordering::SeqCst) {
            Err("shutting down: draining in-flight requests")
        } else if !self.synced.load(Ordering::SeqCst) {
            Err("not ready: caches not yet synced or the first pass over existing configs has not finished")
        } else {
            Ok(())
        }
    }

    fn publish(&self) {
        self.metrics.ready.set(i64::from(self.readiness().is_ok()));
    }
}
