//! The conversion threads: a fixed number of OS threads, each with the stack the engine needs
//! for inputs at its nesting limit (`dco_engine::limits::STACK_BYTES`), that run the
//! CPU-bound conversions off the async workers, each under a [`RequestBudget`].
//!
//! A fixed pool rather than tokio's blocking pool (up to 512 threads of 2 MiB): the stack
//! must be the engine's, and the number of conversions in progress (each holding its input,
//! output and working memory) is bounded by the thread count, not by how many requests
//! arrive. A request that waits for a thread waits inside its deadline; one whose deadline
//! passed, or whose client went away, stops at the engine's next budget check.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use dco_engine::limits::{self, Budget};

use crate::alloc;

type Job = Box<dyn FnOnce() + Send>;

/// Why a job did not produce its value.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("the conversion panicked")]
    Panicked,
    #[error("the conversion threads are gone")]
    Gone,
}

/// Fixed conversion threads fed from one queue.
pub struct Pool {
    queue: Mutex<mpsc::Sender<Job>>,
}

impl Pool {
    /// Starts `threads` conversion threads (at least one).
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let threads = threads.max(1);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("convert-{i}")).stack_size(limits::STACK_BYTES).spawn(
                move || {
                    loop {
                        // The lock is held only while waiting for the next job.
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return, // the pool was dropped
                        }
                    }
                },
            )?;
        }
        Ok(Pool { queue: Mutex::new(tx) })
    }

    /// Runs `f` on a conversion thread under `budget` and waits for its value. A panic in
    /// `f` is caught (and is this request's 500), never the thread's end. Dropping the
    /// returned future (the request timed out, the client went away) abandons the budget, so
    /// the conversion stops at its next check instead of running on unread.
    pub async fn run<R: Send + 'static>(
        &self,
        budget: Arc<RequestBudget>,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, PoolError> {
        struct AbandonOnDrop(Arc<RequestBudget>);
        impl Drop for AbandonOnDrop {
            fn drop(&mut self) {
                self.0.abandon();
            }
        }
        let _abandon = AbandonOnDrop(budget.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            budget.start();
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                limits::with_budget(budget.clone(), f)
            }));
            budget.finish();
            // Nobody waiting (timed out, client gone) is fine: the value is dropped here.
            let _ = tx.send(out);
        });
        self.queue.lock().map_err(|_| PoolError::Gone)?.send(job).map_err(|_| PoolError::Gone)?;
        match rx.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(PoolError::Panicked),
            Err(_) => Err(PoolError::Gone),
        }
    }
}

/// What one review may take: its deadline (the rest of `--request-timeout`), its memory
/// (`--conversion-memory-factor` × the body, at least [`MIN_CONVERSION_BYTES`]), and whether
/// its caller still waits. The engine consults it (`dco_engine::limits`).
pub struct RequestBudget {
    deadline: Instant,
    timeout: Duration,
    max_bytes: usize,
    factor: usize,
    abandoned: AtomicBool,
    /// The conversion thread's allocation count when the conversion started.
    base: std::sync::atomic::AtomicIsize,
    /// The most the conversion thread grew by, once the conversion ended.
    peak: std::sync::atomic::AtomicUsize,
}

/// The least memory any conversion may use, however small its body: a 1.5 MiB object (etcd's
/// default limit) parsed whole (~17× its text) and copied into CEL values (up to ~25×) fits.
pub const MIN_CONVERSION_BYTES: usize = 128 << 20;

impl RequestBudget {
    pub fn new(deadline: Instant, timeout: Duration, body_bytes: usize, factor: usize) -> RequestBudget {
        RequestBudget {
            deadline,
            timeout,
            max_bytes: body_bytes.saturating_mul(factor).max(MIN_CONVERSION_BYTES),
            factor,
            abandoned: AtomicBool::new(false),
            base: std::sync::atomic::AtomicIsize::new(0),
            peak: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Nobody waits for the answer any more: the conversion stops at its next check.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    /// Called on the conversion thread as the conversion starts.
    fn start(&self) {
        self.base.store(alloc::thread_net_bytes(), Ordering::Relaxed);
        alloc::reset_thread_peak();
    }

    /// Called on the conversion thread as the conversion ends.
    fn finish(&self) {
        let grown = alloc::thread_peak_bytes().wrapping_sub(self.base.load(Ordering::Relaxed));
        self.peak.store(usize::try_from(grown).unwrap_or(0), Ordering::Relaxed);
    }

    /// The most heap the conversion held at once (0 before it ended, or without the
    /// counting allocator).
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Bytes the conversion thread has grown by since [`RequestBudget::start`].
    fn used(&self) -> usize {
        let grown = alloc::thread_net_bytes().wrapping_sub(self.base.load(Ordering::Relaxed));
        usize::try_from(grown).unwrap_or(0)
    }

    fn over(&self, used: usize) -> String {
        format!(
            "it would use more than {} MiB of memory ({} MiB so far), the limit for this review ({}× its body, at least {} MiB); raise --conversion-memory-factor on dco-webhook if such objects are expected",
            self.max_bytes >> 20,
            used >> 20,
            self.factor,
            MIN_CONVERSION_BYTES >> 20
        )
    }
}

impl Budget for RequestBudget {
    fn check(&self) -> Result<(), String> {
        if self.abandoned.load(Ordering::Relaxed) {
            return Err("the request was abandoned (its deadline passed or the client went away)".into());
        }
        if Instant::now() >= self.deadline {
            return Err(format!(
                "the {:?} per-request deadline passed; raise --request-timeout on dco-webhook or check the config for expensive rules (CEL, deep ForEach)",
                self.timeout
            ));
        }
        let used = self.used();
        if used > self.max_bytes {
            return Err(self.over(used));
        }
        Ok(())
    }

    fn admit(&self, bytes: usize) -> Result<(), String> {
        self.check()?;
        let used = self.used();
        if used.saturating_add(bytes) > self.max_bytes {
            return Err(self.over(used.saturating_add(bytes)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(timeout: Duration) -> Arc<RequestBudget> {
        Arc::new(RequestBudget::new(Instant::now() + timeout, timeout, 1 << 20, 16))
    }

    #[tokio::test]
    async fn jobs_run_on_threads_with_the_engine_stack() {
        let pool = Pool::new(2).unwrap();
        let name = pool
            .run(budget(Duration::from_secs(5)), || std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(name.is_some_and(|n| n.starts_with("convert-")));
        // Deep recursion that would overflow a 2 MiB stack (about 8 MiB of frames).
        fn recurse(n: usize) -> usize {
            let pad = std::hint::black_box([0u8; 1024]);
            if n == 0 { pad[0] as usize } else { recurse(n - 1) + std::hint::black_box(pad[1]) as usize }
        }
        assert_eq!(pool.run(budget(Duration::from_secs(5)), || recurse(8_000)).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_panic_is_this_jobs_error_and_the_thread_lives() {
        let pool = Pool::new(1).unwrap();
        let err = pool.run(budget(Duration::from_secs(5)), || panic!("boom")).await.unwrap_err();
        assert!(matches!(err, PoolError::Panicked));
        assert_eq!(pool.run(budget(Duration::from_secs(5)), || 7).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn the_budget_is_what_the_engine_sees() {
        let pool = Pool::new(1).unwrap();
        // Wide enough that a loaded CI machine starts the closure before the deadline (50 ms
        // was not: the first verdict came too late once under a parallel build).
        let b = budget(Duration::from_millis(500));
        let stopped = pool
            .run(b.clone(), || {
                let before = engine_verdict();
                std::thread::sleep(Duration::from_millis(600));
                (before, engine_verdict())
            })
            .await
            .unwrap();
        assert_eq!(stopped.0, Ok(()));
        assert!(stopped.1.unwrap_err().contains("per-request deadline passed"));
        let b = budget(Duration::from_secs(5));
        b.abandon();
        let abandoned = pool.run(b, engine_verdict).await.unwrap();
        assert!(abandoned.unwrap_err().contains("abandoned"));
    }

    /// What the engine makes of the thread's budget: a review of one object either converts
    /// or fails with the budget's message.
    fn engine_verdict() -> Result<(), String> {
        let body = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"x/v1","objects":[{"apiVersion":"x/v2","kind":"W"}]}}"#;
        let target = serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "ws.x"}, "spec": {"group": "x", "names": {"kind": "W", "plural": "ws"}, "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        let target = dco_engine::Target::from_value(&target).unwrap();
        let spec = serde_json::from_value(
            serde_json::json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}),
        )
        .unwrap();
        let plan = dco_engine::compile(&spec, &target).plan.unwrap();
        match dco_engine::convert_review(&plan, body).unwrap().failure {
            None => Ok(()),
            Some(m) => Err(m),
        }
    }
}
