//! Handover traces (docs/operations.md, "How a target is wired and moved") at a real
//! OpenTelemetry Collector: the collector of
//! `hack/testenv-go/tools/otelcol` (OTLP receiver, batch processor, file exporter; built by
//! `hack/testenv tool otelcol`) runs on loopback, the operator exports to it with
//! `--otlp-endpoint`, and a pinned move (tests/src/pinned_move.rs, the move of
//! tests/tests/handover_pinned_move.rs) is read back from the file the collector writes: one
//! trace, its root span `handover` under the persisted traceparent's ids, and one child span
//! per transition of the state machine, in order, each naming the config, the target, the
//! source, the destination and the attempt (`dco_tests::pinned_move::move_trace`).
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`
//! (`cargo build -p dco-operator -p dco-webhook`) and Go for the collector's first build.

use std::time::Duration;

use anyhow::{Result, ensure};
use dco_tests::otelcol::Collector;
use dco_tests::pinned_move::PinnedMove;
use dco_tests::{TestEnv, wait_for};

#[tokio::test]
async fn a_move_arrives_at_the_collector_as_one_trace() -> Result<()> {
    let env = TestEnv::new("otel").await?;
    let collector = Collector::start(&env.cluster.dir.join("otelcol").join(&env.ns)).await?;
    let mv = PinnedMove::prepare(&env).await?;
    let _operator = mv.start_operators(&env, &collector.endpoint)?;

    mv.settle_on_a().await?;
    mv.repin_to_b().await?;
    mv.wait_settled(&mv.b).await?;
    let h = mv.settled_move().await?;

    // The operator's batch exporter sends every 5 s, the collector's batch processor and file
    // exporter add 200 ms and 100 ms.
    let trace = wait_for("the move's trace in the collector's file", Duration::from_secs(30), || async {
        mv.trace(&collector.resource_spans()?, &h)
    })
    .await?;
    eprintln!("in {}:\n{}", collector.output.display(), trace.describe());
    // The first wiring (to a) is a move of its own: a trace of its own.
    ensure!(
        trace.earlier.iter().any(|(attempt, _)| *attempt == 1),
        "the first move's spans never reached the collector: {}",
        trace.describe()
    );

    mv.delete_config_and_wait_revert().await?;
    mv.cleanup().await;
    env.cleanup().await;
    Ok(())
}
