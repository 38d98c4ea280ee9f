//! A dco-operator replica stopped in the middle of a move writes nothing stale when it resumes
//! (docs/sharding.md, "After a pause"). Replica `p` alone settles the pinned move's target on
//! server `a` (tests/src/pinned_move.rs), then is re-pinned to `b`; `p` runs with the test hook
//! `DCO_TEST_PAUSE_BEFORE=conversion-write:<target>` (operator/src/config/test_hook.rs, debug
//! builds only), which logs a line right before its write of the target's spec.conversion to
//! `b`, and the test stops it there with SIGSTOP. Replica `q` then starts, takes every shard
//! once p's Leases expired, completes the move to `b`, and is made to move the target back to
//! `a`. Then SIGCONT: p's reconcile goes on from right before its write of `b`'s wiring,
//! and the fence (and the resourceVersion preconditions behind it) must stop it. For 20 s after
//! SIGCONT (p's renewals, its rejoin and the shards handed back included) every look at the
//! target says `a`'s Service and the config's handover stays settled on `a` at q's attempt;
//! p counts the write it did not make (`dco_operator_reconciles_fenced_total`, for either
//! reason); and a load of
//! reads and writes at the spoke version fails no request throughout.
//!
//! Without the fence p wires the target to `b` after SIGCONT, whose replicas have dropped it
//! by then (503 `no conversion plan` on the load), and writes its old handover state over q's.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use dco_tests::load::{Load, Target};
use dco_tests::operator_process::OperatorProcess;
use dco_tests::pinned_move::{PinnedMove, WAIT, handover, wired};
use dco_tests::{TestEnv, wait_for};

const LEASE_DURATION_S: u64 = 9;
const RENEW_S: u64 = 2;
/// What the resumed replica is watched for: its renewals, its rejoin and the shards handed
/// back to it, and a reconcile of the config by whichever replica owns it then.
const WATCH_AFTER: Duration = Duration::from_secs(20);
/// The hook's line (operator/src/config/test_hook.rs `LINE`).
const HOOK_LINE: &str = "test hook: pausing before the spec.conversion write";

fn start(env: &TestEnv, mv: &PinnedMove, id: &str, hook: bool) -> Result<OperatorProcess> {
    let (lease, renew) = (format!("{LEASE_DURATION_S}s"), format!("{RENEW_S}s"));
    let pause = format!("conversion-write:{}", mv.target);
    let vars: &[(&str, &str)] = if hook { &[("DCO_TEST_PAUSE_BEFORE", &pause)] } else { &[] };
    let args = [
        "--webhook-listen",
        "$(POD_IP):9443",
        "--webhook-arg=--drain-period=5s",
        "--webhook-arg=--lease-renew-interval=5s",
        "--webhook-arg=--lease-duration=20s",
        "--lease-duration",
        &lease,
        "--lease-renew-interval",
        &renew,
        "--resync",
        "60s",
    ];
    OperatorProcess::start(env, &mv.selector, id, &args, vars)
}

fn widget_spec(version: &str, k: i64) -> serde_json::Value {
    match version {
        "v1" => serde_json::json!({"storageSize": k, "owner": "pause"}),
        _ => serde_json::json!({"storageGB": k, "owner": "pause"}),
    }
}

/// The config's handover as `(phase, state, destination, attempt)` and the Service the target
/// is wired to.
async fn look(mv: &PinnedMove) -> Result<((String, String, String), u32, Option<(String, String)>)> {
    let cfg = mv.cfgs.get(&mv.config).await?;
    let attempt = cfg.status.as_ref().and_then(|s| s.handover.as_ref()).map_or(0, |h| h.attempt);
    Ok((handover(&cfg), attempt, wired(&mv.crds.get(&mv.target).await?)))
}

#[tokio::test]
async fn a_replica_resumed_mid_move_writes_nothing_stale() -> Result<()> {
    let env = TestEnv::new("opp").await?;
    let mv = PinnedMove::prepare(&env).await?;
    let p = start(&env, &mv, "opp-p", true)?;
    mv.settle_on_a().await?;
    mv.apply_server(&mv.b).await?;
    mv.wait_server_reporting(&mv.b, 2).await?;
    let load = Load::start(
        Target {
            client: env.client.clone(),
            ns: env.ns.clone(),
            group: mv.group.clone(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            spoke: "v1".into(),
            hub: "v2".into(),
            spec: widget_spec,
            manager: "dco-e2e-pause-load",
        },
        6,
        Duration::from_millis(50),
    );
    load.wait_clean(20, WAIT, "before the move").await?;

    // The move to b, held by the hook right before p's write of b's wiring: stop p there.
    mv.pin(&mv.b).await?;
    wait_for("p to reach the write of b's wiring", WAIT, || async {
        Ok(std::fs::read_to_string(&p.log)?.contains(HOOK_LINE).then_some(()))
    })
    .await?;
    dco_tests::signal(p.child.id(), "STOP")?;
    let stopped = Instant::now();
    let service = |server: &str| Some((env.ns.clone(), format!("dco-webhook-{server}")));
    ensure!(look(&mv).await?.2 == service(&mv.a), "p wrote b's wiring before it was stopped");

    // q takes p's shards once their Leases expired, completes the move, and moves back.
    let _q = start(&env, &mv, "opp-q", false)?;
    mv.wait_settled(&mv.b).await?;
    eprintln!("q completed the move to b {:?} after p was stopped", stopped.elapsed());
    mv.pin(&mv.a).await?;
    mv.wait_settled(&mv.a).await?;
    let (settled, attempt, _) = look(&mv).await?;
    eprintln!("q moved the target back to a (attempt {attempt}) {:?} after p was stopped", stopped.elapsed());
    // SIGCONT: p's reconcile goes on right before its write of b's wiring.
    dco_tests::signal(p.child.id(), "CONT")?;
    let resumed = Instant::now();
    let mut looks = 0;
    while resumed.elapsed() < WATCH_AFTER {
        let (now, at, wiring) = look(&mv).await?;
        ensure!(wiring == service(&mv.a), "the target was re-wired to {wiring:?} after p resumed");
        ensure!(
            now == settled && at == attempt,
            "the handover went from {settled:?} (attempt {attempt}) to {now:?} (attempt {at})"
        );
        looks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Either fence may stop the write, by how SIGCONT falls against p's next tick: the pause
    // detector ("paused", the reconcile began before the pause) or the owned set ("not_owned",
    // the shard is another replica's by then). Both count the write p did not make.
    let mut fenced = 0.0;
    for reason in ["paused", "not_owned"] {
        let series = format!(
            r#"dco_operator_reconciles_fenced_total{{controller="crdconversionconfig",write="target spec.conversion",reason="{reason}"}}"#
        );
        fenced += p.metric(&series).await?;
    }
    let pauses = p.metric("dco_operator_pauses_detected_total").await?;
    eprintln!(
        "{looks} looks in {WATCH_AFTER:?} after SIGCONT: the target stayed on a; p fenced {fenced} write(s), counted {pauses} pause(s)"
    );
    ensure!(fenced >= 1.0, "p did not count the write it stopped before (its log: {})", p.log.display());
    ensure!(pauses >= 1.0, "p did not see its pause");
    let load_errors = load.errors();
    let tally = load.stop().await?;
    eprintln!("load: {tally:?}");
    ensure!(tally.failed == 0 && tally.wrong == 0, "load failed: {tally:?} {:?}", load_errors);

    mv.delete_config_and_wait_revert().await?;
    mv.cleanup().await;
    drop(p);
    env.cleanup().await;
    Ok(())
}
