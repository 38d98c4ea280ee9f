//! Readiness: ready only after the caches synced and a first full pass over existing configs
//! completed, and — where the replica publishes a served-target Lease — after this process
//! published it once; never again once shutdown began.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics::Metrics;

#[derive(Debug)]
pub struct Health {
    synced: AtomicBool,
    shutting_down: AtomicBool,
    /// A served-target Lease is published (POD_NAME and POD_NAMESPACE set) ...
    lease_required: AtomicBool,
    /// ... and this process has published it at least once.
    lease_published: AtomicBool,
    /// Whether the process's view is older than a pause (`pause.rs`).
    pub freshness: Arc<crate::pause::Freshness>,
    metrics: Arc<Metrics>,
}

impl Health {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Health {
            synced: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            lease_required: AtomicBool::new(false),
            lease_published: AtomicBool::new(false),
            freshness: Arc::default(),
            metrics,
        }
    }

    /// This replica publishes a served-target Lease: readiness waits for its first publish.
    /// A container restarted in the same Pod finds the Lease its previous process left, which
    /// may list targets this process does not hold yet; the operator must not read that as
    /// this replica's word while the replica already takes requests (the model check,
    /// state/tests/model.rs, found the move that did).
    pub fn require_lease(&self) {
        self.lease_required.store(true, Ordering::SeqCst);
        self.publish();
    }

    /// Called after every successful publish of the served-target Lease.
    pub fn mark_lease_published(&self) {
        if !self.lease_published.swap(true, Ordering::SeqCst) {
            self.publish();
        }
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
        } else if self.lease_required.load(Ordering::SeqCst) && !self.lease_published.load(Ordering::SeqCst) {
            Err("not ready: this process has not published its served-target Lease yet")
        } else {
            Ok(())
        }
    }

    fn publish(&self) {
        self.metrics.ready.set(i64::from(self.readiness().is_ok()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_that_publishes_a_lease_is_ready_only_after_its_first_publish() {
        let h = Health::new(Arc::new(Metrics::default()));
        h.mark_synced();
        assert!(h.readiness().is_ok(), "no Lease to publish: ready once synced");
        h.require_lease();
        assert!(h.readiness().unwrap_err().contains("served-target Lease"));
        h.mark_lease_published();
        assert!(h.readiness().is_ok());
        h.mark_shutting_down();
        assert!(h.readiness().is_err());
    }
}
