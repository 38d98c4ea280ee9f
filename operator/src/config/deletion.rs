//! A config's deletion (docs/operations.md, "Deleting"): the finalizer reverts the target's
//! `spec.conversion` to `None`, and holds the config while that would be unsafe or while the
//! revert write fails. A held deletion says why on the config itself (`DeletionBlocked`, a
//! Warning Event), not only in the operator's log.

use dco_api::config::Phase;
use dco_api::{ANNOTATION_ALLOW_UNSAFE_DELETE, ConfigStatus, FINALIZER_SAFE_REVERT};
use dco_state::conditions;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::facts::wired_server;
use super::{ConfigWing, condition, conflict, target};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kinds::ConfigKind;
use crate::reconcile::write_status;

/// The reason of `DeletionBlocked` and of the Warning Event while the revert write fails.
pub const REVERT_FAILED: &str = "RevertFailed";

/// The finalizer's cleanup: revert the target unless another config names it or it serves
/// several versions (held); `Ok` lets the finalizer go.
pub async fn revert<K: ConfigKind>(cfg: &K, ctx: &Context) -> Result<Action> {
    let tkind = cfg.target_kind();
    let tname = cfg.target_name().to_string();
    let tkind_name = tkind.kind_name();
    let Some(live) = target::fetch(ctx, tkind, &tname).await? else {
        return Ok(Action::await_change());
    };
    let Some(server) = wired_server(ctx, &live) else {
        // Not wired to any dco server: nothing of ours to take back.
        return Ok(Action::await_change());
    };
    // Another config names the target (conflict.rs): the wiring is, or becomes, that one's.
    // Reverting it would leave the other config's target unconverted ("delete one of them"
    // must be safe whichever one goes).
    let configs = crate::kinds::configs_naming(&ctx.client, ctx.settings.selector.as_deref(), &tname).await?;
    let others = match conflict::judge(K::KIND, &cfg.name_any(), &tname, &configs) {
        conflict::ConflictStanding::Alone => None,
        conflict::ConflictStanding::Chosen { ignored } => Some(ignored.join(", ")),
        conflict::ConflictStanding::Ignored { chosen } => Some(chosen),
    };
    if let Some(others) = others {
        let note = format!(
            "left {tkind_name} {tname}'s spec.conversion wired to ConversionWebhookServer {server}: {others} names it too"
        );
        ctx.event(cfg, false, "RevertSkipped", "Delete", note).await;
        return Ok(Action::await_change());
    }
    let served = target::served_versions(&live);
    let allowed = cfg.annotations().get(ANNOTATION_ALLOW_UNSAFE_DELETE).is_some_and(|v| v == "true");
    let mut st = cfg.config_status().cloned().unwrap_or_default();
    if served > 1 && !allowed {
        let msg = format!(
            "{tkind_name} {tname} serves {served} versions and converts through ConversionWebhookServer {server}; deleting this config would leave objects unreadable at other versions. Stop serving all but one version first, or annotate the config {ANNOTATION_ALLOW_UNSAFE_DELETE}=true"
        );
        let now = Timestamp::now();
        let generation = cfg.meta().generation;
        conditions::set(
            &mut st.conditions,
            condition::DELETION_BLOCKED,
            true,
            "TargetServesSeveralVersions",
            msg.clone(),
            generation,
            now,
        );
        write_status::<ConfigWing<K>>(ctx, cfg, &st).await?;
        ctx.event(cfg, true, "DeletionBlocked", "Delete", msg.clone()).await;
        return Err(Error::DeletionBlocked(format!("{} {}: {msg}", K::KIND, cfg.name_any())));
    }
    st.phase = Some(Phase::Reverting);
    write_status::<ConfigWing<K>>(ctx, cfg, &st).await?;
    if let Err(e) = target::unwire(ctx, tkind, &tname).await {
        return Err(revert_failed(cfg, ctx, st, &server, e).await);
    }
    ctx.metrics.target_patches.inc();
    let note = format!(
        "reverted {tkind_name} {tname}'s spec.conversion to None (was ConversionWebhookServer {server})"
    );
    ctx.event(cfg, false, "Reverted", "Delete", note).await;
    Ok(Action::await_change())
}

/// The revert write failed: the config says so (`DeletionBlocked` True `RevertFailed`, a
/// Warning Event once per distinct message) and the error goes back to the controller, which
/// retries it as any failed reconcile (`reconcile::error_policy`).
async fn revert_failed<K: ConfigKind>(
    cfg: &K,
    ctx: &Context,
    mut st: ConfigStatus,
    server: &str,
    e: Error,
) -> Error {
    let target = format!("{} {}", cfg.target_kind().kind_name(), cfg.target_name());
    let msg = revert_failed_message(&target, server, &e);
    let news = note_revert_failed(&mut st, &msg, cfg.meta().generation, Timestamp::now());
    let recorded = write_status::<ConfigWing<K>>(ctx, cfg, &st).await;
    if let Err(w) = &recorded {
        tracing::warn!("{w}");
    }
    if news && !retold(&recorded) {
        ctx.event(cfg, true, REVERT_FAILED, "Delete", msg).await;
    }
    e
}

/// Whether the next attempt tells the news again because this status write did not record it:
/// a newer config (409) or the fence. Its Event waits for that attempt, so there is one per
/// message, not one per attempt.
pub(crate) fn retold(recorded: &Result<(), Error>) -> bool {
    recorded.as_ref().is_err_and(|w| w.is_conflict() || w.fenced().is_some())
}

/// The most an Event's note may hold (events.k8s.io/v1 refuses more): the message is the
/// condition's and the Event's alike, so the apiserver's answer is cut to fit.
const MAX_NOTE: usize = 1024;

/// What the config says while the revert of `target` (a kind and name) fails with `e`: the
/// target, the apiserver's answer, and the two ways out; at most [`MAX_NOTE`] bytes.
pub fn revert_failed_message(target: &str, server: &str, e: &Error) -> String {
    let answer = match e {
        Error::Kube { source: kube::Error::Api(s), .. } => {
            let reason = if s.reason.is_empty() { String::new() } else { format!(" {}", s.reason) };
            format!("the apiserver answered HTTP {}{reason}: {}", s.code, s.message)
        }
        other => format!("the write failed: {other}"),
    };
    let say = |answer: &str| {
        format!(
            "cannot revert {target}'s spec.conversion to None (wired to ConversionWebhookServer {server}): {answer}. Retrying every 10 s. Fix what refuses the write (the target's validation rules, an admission policy or webhook), or as a last resort remove the finalizer {FINALIZER_SAFE_REVERT} from this config: it goes, and {target} keeps calling the webhook, which no longer converts it"
        )
    };
    let room = MAX_NOTE.saturating_sub(say("").len());
    say(&cut(&answer, room))
}

/// `s` in at most `max` bytes, marked ` …` where cut.
fn cut(s: &str, max: usize) -> String {
    const MARK: &str = " …";
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(MARK.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &s[..end])
}

/// Records a failed revert in `st` (`DeletionBlocked` True `RevertFailed` with `msg`, phase
/// `Reverting`); true when that is news, i.e. when a Warning Event is due: the first failure
/// and each change of message, not every retry.
pub fn note_revert_failed(st: &mut ConfigStatus, msg: &str, generation: Option<i64>, now: Timestamp) -> bool {
    let known = st.conditions.iter().any(|c| {
        c.type_ == condition::DELETION_BLOCKED
            && c.status == "True"
            && c.reason == REVERT_FAILED
            && c.message == msg
    });
    conditions::set(
        &mut st.conditions,
        condition::DELETION_BLOCKED,
        true,
        REVERT_FAILED,
        msg,
        generation,
        now,
    );
    st.phase = Some(Phase::Reverting);
    !known
}
