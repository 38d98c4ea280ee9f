//! `hack/soak`: dco under a steady load and a random schedule of faults and changes for a
//! given time, then judged (docs/performance.md, "Soak").
//!
//! The world: the chart installed (2 operator replicas, the default server of 2 webhook
//! replicas in the pool), a pinnable server of 2 replicas, and several CRD targets (v1 spoke,
//! v2 storage, a FieldRename between them) holding untouched objects. The load
//! ([`load`]) writes, reads and lists at every version of every target and sends admission
//! reviews; the schedule ([`schedule`]) pins and unpins configs, adds and removes a pool
//! member, SIGKILLs and SIGSTOPs operator and webhook replicas, rotates certificates and rolls
//! everything by `helm upgrade`. At the end every target must be settled on its assigned
//! server, every untouched object unchanged at every version, every process's memory within
//! 10 % of its level after warm-up, and no request failed but those inside a SIGKILL window
//! (from the signal until 250 ms after the Pod was seen unready: the apiserver does not retry a
//! conversion or admission call to a dead replica). The report ([`report`]) goes to a
//! directory it prints.

pub mod load;
pub mod memory;
pub mod report;
pub mod schedule;
mod world;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;

pub use world::World;

/// How long after the signal the excused failures of a SIGKILL may come: until this long after
/// the Pod was seen unready (tests/src/moves.rs uses the same).
pub const NOT_READY_PROPAGATION: Duration = Duration::from_millis(250);

/// What `hack/soak` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    pub duration: Duration,
    pub seed: u64,
    /// CRD targets (each with a config).
    pub targets: usize,
    /// Untouched objects per target (checksummed before and after).
    pub objects: usize,
    /// One request per target every period.
    pub period: Duration,
    /// Until when memory is not judged (start-up, first moves).
    pub warmup: Duration,
    /// The report's directory; `target/soak/<seed>-<time>` when unset.
    pub out: Option<PathBuf>,
}

impl Options {
    /// The defaults for `duration` and `seed`: 4 targets of 10 objects, a request per target
    /// every 40 ms, a 60 s warm-up (a fifth of a shorter run).
    pub fn new(duration: Duration, seed: u64) -> Options {
        Options {
            duration,
            seed,
            targets: 4,
            objects: 10,
            period: Duration::from_millis(40),
            warmup: Duration::from_secs(60).min(duration / 5),
            out: None,
        }
    }
}

/// One event as it ran.
#[derive(Clone, Debug)]
pub struct Event {
    pub at_ms: u32,
    pub end_ms: u32,
    /// `pin`, `unpin`, `pool join`, `pool leave`, `webhook SIGKILL`, … (the report's rows).
    pub kind: String,
    pub detail: String,
}

/// A failure window: requests failing on a broken or refused connection in it are the
/// SIGKILL's.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub from: Instant,
    pub to: Instant,
}

/// What the run found.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    /// Each check: what, passed, the numbers.
    pub checks: Vec<(String, bool, String)>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.1)
    }
}

/// A seed from the clock, for a run without `--seed`.
pub fn clock_seed() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_secs() ^ u64::from(d.subsec_nanos())
}

/// Runs the soak: sets the world up, runs load and schedule for `opts.duration`, settles,
/// checks, writes the report, removes everything it made. Errors are the harness's own (the
/// cluster unreachable, the set-up failing); what the run found is in the [`Outcome`].
pub async fn run(opts: &Options) -> Result<Outcome> {
    crate::install_crypto();
    let t = crate::TestEnv::new("soak").await?;
    eprintln!(
        "soak: seed {} (replay: hack/soak --duration {}s --seed {}), namespace {}",
        opts.seed,
        opts.duration.as_secs(),
        opts.seed,
        t.ns
    );
    let started = Instant::now();
    let mut w = World::new(&t, opts);
    let result = w.soak().await;
    let ran = started.elapsed();
    let removed = w.remove().await;
    t.cleanup().await;
    if let Err(e) = &removed {
        eprintln!("soak: removing what the run made: {e:#}");
    }
    // The run's whole cost, for CI's budget (docs/performance.md, "Soak").
    eprintln!(
        "soak: {:.0} s from the namespace to the report, {:.0} s to remove everything",
        ran.as_secs_f64(),
        (started.elapsed() - ran).as_secs_f64()
    );
    result
}
