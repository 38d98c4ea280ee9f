//! W3C trace context for handovers: a move gets one `traceparent` when it starts, persisted
//! in `status.handover`, so its transitions belong to one trace across restarts and replicas.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS once per process and perturbed per instance; mixing in
    // time and a counter makes every call distinct. Trace ids need uniqueness, not secrecy.
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

/// `00-<32 hex trace id>-<16 hex span id>-01` (sampled).
pub fn new_traceparent() -> String {
    let (a, b, c) = (random_u64(), random_u64(), random_u64());
    // All-zero ids are invalid; the odds are negligible but the rule is cheap to keep.
    let (a, c) = (if a == 0 && b == 0 { 1 } else { a }, if c == 0 { 1 } else { c });
    format!("00-{a:016x}{b:016x}-{c:016x}-01")
}

/// The trace id of a traceparent, for log fields.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (_, id) = (parts.next()?, parts.next()?);
    (id.len() == 32).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_and_distinct() {
        let a = new_traceparent();
        let b = new_traceparent();
        assert_ne!(a, b);
        assert_eq!(a.len(), 55);
        assert!(a.starts_with("00-") && a.ends_with("-01"));
        assert_eq!(trace_id(&a).map(str::len), Some(32));
        assert!(a[3..].chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
    }
}
