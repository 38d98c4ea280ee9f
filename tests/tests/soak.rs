//! Five minutes of the soak (docs/performance.md, "Soak"; the driver is tests/examples/soak.rs,
//! `hack/soak`): the chart's dco under a load of reads, writes and lists at every version of
//! four targets and admission reviews, with a seeded random schedule of pins and unpins, a pool
//! member joining and leaving, SIGKILLs and SIGSTOPs of operator and webhook replicas,
//! certificate rotations and a rolling `helm upgrade`. Passes when every target ends settled and
//! verified on its assigned server, no untouched object was lost or changed at any version, the
//! load's own objects read back as last written, no request failed outside a SIGKILL window,
//! nothing read wrong, every event ran and every dco role's memory ended within 10 % of its level
//! after warm-up. `DCO_SOAK_SEED` replays a seed (the test prints the one it drew);
//! `DCO_SOAK_DURATION` changes the length (e.g. `20m`).
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`, and helm.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use dco_tests::soak::{self, Options, schedule::parse_duration};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_minutes_of_faults_lose_nothing_and_fail_no_request_outside_a_sigkill_window() -> Result<()> {
    let seed = match std::env::var("DCO_SOAK_SEED") {
        Ok(s) => s.parse().context("DCO_SOAK_SEED: not a number")?,
        Err(_) => soak::clock_seed(),
    };
    let duration = match std::env::var("DCO_SOAK_DURATION") {
        Ok(d) => parse_duration(&d).context("DCO_SOAK_DURATION: give 90s, 5m or 1h")?,
        Err(_) => Duration::from_secs(300),
    };
    let outcome = soak::run(&Options::new(duration, seed)).await?;
    for (what, ok, detail) in &outcome.checks {
        eprintln!("{} {what}: {detail}", if *ok { "ok  " } else { "FAIL" });
    }
    ensure!(
        outcome.passed(),
        "the soak (seed {seed}, replay with DCO_SOAK_SEED={seed}) failed a check; report: {}",
        outcome.dir.join("report.md").display()
    );
    Ok(())
}
