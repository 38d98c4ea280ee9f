//! `convctl retarget`: move configs to another ConversionWebhookServer, all of them or a
//! canary share, by the one lever dco gives a person: the config's `spec.webhookServerRef` pin
//! (docs/convctl.md, "retarget"; docs/configuration.md, assignment). The operator then moves
//! each target by its handover (the destination serves before the target is re-wired), so a
//! retarget is as hitless as any pinned move.
//!
//! Two directions:
//! - `--to SERVER`: pin configs that are not pinned (served by the pool or the default),
//!   optionally only those now on `--from SERVER`;
//! - `--unpin --from SERVER`: remove the pin of configs pinned to SERVER, handing them back to
//!   the pool (weighted rendezvous hashing) or the default.
//!
//! The canary share is deterministic: candidates are ordered by a hash of their target's name
//! and the first `ceil(n × PERCENT / 100)` are chosen, so `--canary 10` and then `--canary 50`
//! choose a superset of the first run's configs, and a rerun chooses the same ones. A config
//! retarget pinned carries the annotation [`ANNOTATION`] (where it was before), so it still
//! counts in the population of a later run (as already moved) and `--unpin` can say where it
//! came from. Nothing is written without `--apply`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use dco_api::assign::{ServerInfo, Servers};
use dco_api::config::TargetKind;
use dco_api::hash::{fnv1a64, mix64};
use dco_api::{ConversionWebhookServer, server::ConversionWebhookServerSpec};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::CliError;
use crate::live::cluster::{ClusterArgs, Member};
use crate::live::paged;
use crate::output::{Finding, Location, OutputArgs, Report, Severity};

/// The field manager of retarget's writes.
pub const FIELD_MANAGER: &str = "convctl-retarget";
/// Set on a config retarget pinned: the server (or `pool`/`default`) it was on before.
pub const ANNOTATION: &str = "conversion.dco.rs/retargeted-from";
/// At most this many configs (of both kinds) are read; one small record is kept per config.
pub const MAX_CONFIGS: usize = 100_000;
/// At most this many ConversionWebhookServers are read.
pub const MAX_SERVERS: usize = 1_000;
/// A write that meets a newer version of the config is retried this often (re-read between).
const CONFLICT_RETRIES: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kinds {
    Crd,
    Xrd,
    All,
}

#[derive(Args)]
pub struct RetargetArgs {
    /// Pin the chosen configs to this ConversionWebhookServer.
    #[arg(long = "to", value_name = "SERVER", required_unless_present = "unpin", conflicts_with = "unpin")]
    pub to_server: Option<String>,
    /// Only configs now served by this server (with --to), or pinned to it (with --unpin).
    #[arg(long = "from", value_name = "SERVER", required_if_eq("unpin", "true"))]
    pub from_server: Option<String>,
    /// Remove the pin of configs pinned to --from: the pool or the default serves them again.
    #[arg(long)]
    pub unpin: bool,
    /// Move only this share of the candidates, in percent (1-100), chosen by a hash of the
    /// target name: the same share is the same configs on every run, and a larger share
    /// includes a smaller one's.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100))]
    pub canary: Option<u8>,
    /// Which config kinds to consider.
    #[arg(long, value_enum, default_value_t = Kinds::All)]
    pub kind: Kinds,
    /// Only configs with these labels (a label selector, as kubectl -l).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// The servers the resolver considers (a label selector); default all, as an operator
    /// without --selector sees them. Give the operator's --selector when it has one.
    #[arg(long, value_name = "SELECTOR")]
    pub server_selector: Option<String>,
    /// Only these configs (by name; repeat or comma-separate).
    #[arg(long = "config", value_name = "NAME", value_delimiter = ',')]
    pub config_names: Vec<String>,
    /// Write the pins. Without it the plan is printed and nothing is written.
    #[arg(long)]
    pub apply: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// One config as retarget sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: TargetKind,
    pub name: String,
    pub target: String,
    pub pin: Option<String>,
    /// The annotation retarget set, if any.
    pub retargeted_from: Option<String>,
    pub resource_version: String,
}

/// What retarget does with a config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write the pin (`Some(server)`) or remove it (`None`).
    Write(Option<String>),
    /// Already where this run would put it.
    AlreadyMoved,
    /// A candidate outside the canary share.
    NotChosen,
}

/// One row of the plan.
#[derive(Clone, Debug)]
pub struct Step {
    pub entry: Entry,
    /// The server serving the target now, and why (`pin`, `pool`, `default`).
    pub now: String,
    /// The server after the step.
    pub after: String,
    pub action: Action,
}

/// The rank of a target in the canary order: a hash of its name, salted so the order is not
/// the pool's (a canary would otherwise favour the targets one pool member wins).
pub fn rank(target: &str) -> u64 {
    mix64(fnv1a64(format!("convctl-retarget/{target}").as_bytes()))
}

/// How many of `n` candidates a canary of `percent` takes: at least one of a non-empty set.
pub fn share(n: usize, percent: Option<u8>) -> usize {
    match percent {
        None => n,
        Some(p) => (n * usize::from(p)).div_ceil(100).min(n),
    }
}

fn describe(servers: &Servers, e: &Entry) -> String {
    match servers.resolve(&e.target, e.pin.as_deref()) {
        Ok(a) => format!("{} ({})", a.server, format!("{:?}", a.by).to_lowercase()),
        Err(err) => format!("none ({err})"),
    }
}

fn server_of(servers: &Servers, target: &str, pin: Option<&str>) -> Option<String> {
    servers.resolve(target, pin).ok().map(|a| a.server)
}

/// The plan: every candidate with its action, in canary order. Pure: the same configs and
/// servers give the same plan.
pub fn plan(args: &RetargetArgs, entries: &[Entry], servers: &Servers) -> Vec<Step> {
    let from = args.from_server.as_deref();
    let mut candidates: Vec<&Entry> = entries
        .iter()
        .filter(|e| args.config_names.is_empty() || args.config_names.contains(&e.name))
        .filter(|e| match (&args.to_server, args.unpin) {
            (Some(to), false) => {
                // Unpinned configs (on --from, when given), and those this command already
                // pinned to --to: they stay in the population so the canary order is stable.
                let moved = e.pin.as_deref() == Some(to.as_str()) && e.retargeted_from.is_some();
                let unpinned_here = e.pin.is_none()
                    && from.is_none_or(|f| server_of(servers, &e.target, None).as_deref() == Some(f));
                moved || unpinned_here
            }
            _ => e.pin.is_some() && e.pin.as_deref() == from,
        })
        .collect();
    candidates.sort_by(|a, b| rank(&a.target).cmp(&rank(&b.target)).then(a.name.cmp(&b.name)));
    let take = share(candidates.len(), args.canary);
    candidates
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let now = describe(servers, e);
            let want_pin = if args.unpin { None } else { args.to_server.clone() };
            let after_entry = Entry { pin: want_pin.clone(), ..e.clone() };
            let action = if i >= take {
                Action::NotChosen
            } else if e.pin == want_pin {
                Action::AlreadyMoved
            } else {
                Action::Write(want_pin)
            };
            let after = if matches!(action, Action::Write(_)) {
                describe(servers, &after_entry)
            } else {
                now.clone()
            };
            Step { entry: e.clone(), now, after, action }
        })
        .collect()
}

pub fn run(args: &RetargetArgs) -> Result<(), CliError> {
    let members = args.cluster.members()?;
    let [member] = members.as_slice() else {
        return Err(CliError::Usage(format!(
            "retarget writes to one cluster at a time; the flags name {} ({}): give one --context",
            members.len(),
            members.iter().map(|m| m.label.as_str()).collect::<Vec<_>>().join(", ")
        )));
    };
    if args.unpin && args.to_server.is_some() {
        return Err(CliError::Usage("--unpin removes pins; it takes --from, not --to".into()));
    }
    let report = crate::live::block_on(run_member(args, member))?;
    crate::output::finish(&report, &args.out)
}

fn config_kinds(k: Kinds) -> Vec<TargetKind> {
    match k {
        Kinds::Crd => vec![TargetKind::Crd],
        Kinds::Xrd => vec![TargetKind::Xrd],
        Kinds::All => vec![TargetKind::Crd, TargetKind::Xrd],
    }
}

fn config_api(client: &Client, kind: TargetKind) -> Api<DynamicObject> {
    let ar = match kind {
        TargetKind::Crd => kube::api::ApiResource::erase::<dco_api::CRDConversionConfig>(&()),
        TargetKind::Xrd => kube::api::ApiResource::erase::<dco_api::XRDConversionConfig>(&()),
    };
    Api::all_with(client.clone(), &ar)
}

fn entry_of(kind: TargetKind, o: &DynamicObject) -> Entry {
    let field = if kind == TargetKind::Xrd { "targetXRD" } else { "targetCRD" };
    let s = |p: &str| o.data.pointer(p).and_then(Value::as_str).map(str::to_string);
    Entry {
        kind,
        name: o.name_any(),
        target: s(&format!("/spec/{field}/name")).unwrap_or_default(),
        pin: s("/spec/webhookServerRef/name").filter(|n| !n.is_empty()),
        retargeted_from: o.annotations().get(ANNOTATION).cloned(),
        resource_version: o.resource_version().unwrap_or_default(),
    }
}

async fn read_servers(
    client: &Client,
    selector: Option<&str>,
) -> Result<(Servers, BTreeMap<String, ConversionWebhookServer>), String> {
    let api: Api<ConversionWebhookServer> = Api::all(client.clone());
    let mut all = BTreeMap::new();
    let lp = selector.map_or_else(ListParams::default, |s| ListParams::default().labels(s));
    paged::each(&api, &lp, "ConversionWebhookServers", MAX_SERVERS, |s| {
        all.insert(s.name_any(), s);
        Ok(())
    })
    .await?;
    Ok((Servers::new(all.values().map(ServerInfo::from)), all))
}

async fn read_entries(client: &Client, args: &RetargetArgs) -> Result<Vec<Entry>, String> {
    let mut lp = ListParams::default();
    if let Some(sel) = &args.selector {
        lp = lp.labels(sel);
    }
    let mut out = Vec::new();
    for kind in config_kinds(args.kind) {
        let what = crate::diff::config_kind_name(kind).to_string() + "s";
        let left = MAX_CONFIGS.saturating_sub(out.len());
        paged::each(&config_api(client, kind), &lp, &what, left, |o| {
            out.push(entry_of(kind, &o));
            Ok(())
        })
        .await?;
    }
    Ok(out)
}

/// Refuses a destination that cannot take targets: missing, or being deleted.
fn check_destination(
    to: &str,
    all: &BTreeMap<String, ConversionWebhookServer>,
) -> Result<Option<String>, String> {
    let Some(s) = all.get(to) else {
        let known: Vec<&str> = all.keys().map(String::as_str).collect();
        return Err(format!(
            "--to {to}: no ConversionWebhookServer {to} on this cluster (it has: {}); create it first or pick one of those",
            if known.is_empty() { "none".into() } else { known.join(", ") }
        ));
    };
    if s.metadata.deletion_timestamp.is_some() {
        return Err(format!("--to {to}: ConversionWebhookServer {to} is being deleted; pick another server"));
    }
    let ready = s.status.as_ref().map_or(0, |st| st.ready_replicas);
    let ConversionWebhookServerSpec { replicas, .. } = &s.spec;
    Ok((ready == 0).then(|| {
        format!(
            "ConversionWebhookServer {to} has no ready replica (spec.replicas {replicas}): the moves start once it has, each target staying on its server until then"
        )
    }))
}

async fn run_member(args: &RetargetArgs, member: &Member) -> Result<Report, CliError> {
    let ctx = member.label.clone();
    let fail = |msg: String| CliError::Failed(format!("{ctx}: {msg}"));
    let client = member.connect(args.cluster.timeout()).await.map_err(fail)?;
    let (servers, all) = read_servers(&client, args.server_selector.as_deref()).await.map_err(fail)?;
    let mut notes = Vec::new();
    if let Some(to) = &args.to_server {
        match check_destination(to, &all) {
            Ok(warning) => notes.extend(warning),
            Err(e) => return Err(CliError::Usage(format!("{ctx}: {e}"))),
        }
    }
    if let Some(from) = &args.from_server
        && !all.contains_key(from)
        && !args.unpin
    {
        return Err(CliError::Usage(format!(
            "{ctx}: --from {from}: no ConversionWebhookServer {from} on this cluster"
        )));
    }
    let entries = read_entries(&client, args).await.map_err(fail)?;
    let steps = plan(args, &entries, &servers);
    let mut results: Vec<Result<(), String>> = Vec::with_capacity(steps.len());
    for step in &steps {
        results.push(match (&step.action, args.apply) {
            (Action::Write(pin), true) => write(&client, step, pin.as_deref(), &servers).await,
            _ => Ok(()),
        });
    }
    Ok(report(args, &ctx, &steps, &results, &notes))
}

/// The merge patch of one step: the pin (or its removal), the annotation, and the
/// resourceVersion read, so a config changed since is re-read rather than overwritten.
pub fn patch_body(entry: &Entry, pin: Option<&str>, before: &str) -> Value {
    let annotation = match pin {
        Some(_) => Value::String(entry.retargeted_from.clone().unwrap_or_else(|| before.to_string())),
        None => Value::Null,
    };
    json!({
        "metadata": {"resourceVersion": entry.resource_version, "annotations": {ANNOTATION: annotation}},
        "spec": {"webhookServerRef": pin.map(|p| json!({"name": p}))},
    })
}

async fn write(client: &Client, step: &Step, pin: Option<&str>, servers: &Servers) -> Result<(), String> {
    let api = config_api(client, step.entry.kind);
    let mut entry = step.entry.clone();
    let what = format!("{} {}", crate::diff::config_kind_name(entry.kind), entry.name);
    for _ in 0..=CONFLICT_RETRIES {
        // Where the config was before: its server by the pool or default, for the annotation.
        let before = server_of(servers, &entry.target, None).unwrap_or_else(|| "none".into());
        let body = patch_body(&entry, pin, &before);
        let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match api.patch(&entry.name, &pp, &Patch::Merge(&body)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let fresh = api.get(&entry.name).await.map_err(|e| format!("re-reading {what}: {e}"))?;
                let now = entry_of(entry.kind, &fresh);
                if now.pin != entry.pin {
                    return Err(format!(
                        "{what} changed while retarget ran (spec.webhookServerRef is now {:?}); left as it is: rerun to plan again",
                        now.pin
                    ));
                }
                entry = now;
            }
            Err(e) => return Err(format!("writing {what}: {e}")),
        }
    }
    Err(format!("{what} kept changing under retarget ({CONFLICT_RETRIES} conflicts); rerun"))
}

fn action_word(a: &Action, apply: bool) -> &'static str {
    match (a, apply) {
        (Action::Write(Some(_)), true) => "pinned",
        (Action::Write(Some(_)), false) => "would pin",
        (Action::Write(None), true) => "unpinned",
        (Action::Write(None), false) => "would unpin",
        (Action::AlreadyMoved, _) => "already moved",
        (Action::NotChosen, _) => "not in the canary",
    }
}

fn report(
    args: &RetargetArgs,
    ctx: &str,
    steps: &[Step],
    results: &[Result<(), String>],
    notes: &[String],
) -> Report {
    let mut findings = Vec::new();
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    let (mut writes, mut planned, mut failed, mut already) = (0usize, 0usize, 0usize, 0usize);
    for (step, res) in steps.iter().zip(results) {
        let e = &step.entry;
        let kind = crate::diff::config_kind_name(e.kind);
        let mut word = action_word(&step.action, args.apply).to_string();
        let location = Location {
            object: Some(format!("{kind} {}", e.name)),
            path: Some("spec.webhookServerRef".into()),
            context: Some(ctx.to_string()),
            ..Location::default()
        };
        match (&step.action, res) {
            (Action::Write(_), Err(err)) => {
                failed += 1;
                word = "failed".into();
                findings.push(Finding {
                    rule: "retarget-failed".into(),
                    severity: Severity::Error,
                    message: format!("{ctx}: {err}"),
                    fix: Some("rerun convctl retarget: it plans again from what the cluster has".into()),
                    location,
                    fails: true,
                });
            }
            (Action::Write(_), Ok(())) => {
                if args.apply {
                    writes += 1;
                } else {
                    planned += 1;
                }
                findings.push(Finding {
                    rule: if args.unpin { "unpin" } else { "pin" }.into(),
                    severity: Severity::Note,
                    message: format!(
                        "{ctx}: {kind} {} (target {}): {word}: {} → {}",
                        e.name, e.target, step.now, step.after
                    ),
                    fix: None,
                    location,
                    fails: false,
                });
            }
            (Action::AlreadyMoved, _) => already += 1,
            (Action::NotChosen, _) => {}
        }
        rows.push(vec![e.name.clone(), e.target.clone(), step.now.clone(), step.after.clone(), word.clone()]);
        configs.push(json!({"kind": kind, "name": e.name, "target": e.target, "now": step.now,
            "after": step.after, "action": word}));
    }
    for n in notes {
        findings.push(Finding {
            rule: "destination-not-ready".into(),
            severity: Severity::Warning,
            message: format!("{ctx}: {n}"),
            fix: None,
            location: Location { context: Some(ctx.to_string()), ..Location::default() },
            fails: false,
        });
    }
    let mode = if args.apply { "applied" } else { "dry run: nothing written; --apply writes" };
    let mut table = format!("convctl retarget on {ctx} ({mode})\n");
    match (&args.to_server, &args.from_server) {
        (Some(to), Some(from)) => {
            let _ = writeln!(table, "unpinned configs now on {from} → pinned to {to}");
        }
        (Some(to), None) => {
            let _ = writeln!(table, "unpinned configs → pinned to {to}");
        }
        (None, from) => {
            let _ = writeln!(
                table,
                "configs pinned to {} → unpinned (pool or default)",
                from.as_deref().unwrap_or("?")
            );
        }
    }
    let chosen = share(steps.len(), args.canary);
    if let Some(p) = args.canary {
        let _ = writeln!(
            table,
            "canary {p}%: {chosen} of {} candidate(s), by a hash of the target name",
            steps.len()
        );
    }
    table.push('\n');
    if steps.is_empty() {
        table.push_str("no candidate configs\n");
    } else {
        table.push_str(&crate::output::fit_table(
            &["CONFIG", "TARGET", "NOW", "AFTER", "ACTION"],
            &rows,
            args.out.table_width(),
        ));
    }
    for n in notes {
        let _ = writeln!(table, "warning: {n}");
    }
    let (n, verb) = if args.apply { (writes, "moved") } else { (planned, "to move") };
    let summary_line = format!(
        "retarget: {ctx}: {} candidate(s), {chosen} chosen, {n} {verb}, {already} already moved, {failed} failed",
        steps.len()
    );
    let summary = json!({
        "context": ctx, "dryRun": !args.apply, "to": args.to_server, "from": args.from_server,
        "unpin": args.unpin, "canaryPercent": args.canary, "candidates": steps.len(), "chosen": chosen,
        "written": writes, "planned": planned, "alreadyMoved": already, "failed": failed, "configs": configs,
    });
    Report { command: "retarget".into(), findings, cases: Vec::new(), summary, table, summary_line }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: RetargetArgs,
    }

    fn args(extra: &[&str]) -> RetargetArgs {
        T::try_parse_from(std::iter::once("t").chain(extra.iter().copied())).unwrap().a
    }

    fn entry(i: usize, pin: Option<&str>, from: Option<&str>) -> Entry {
        Entry {
            kind: TargetKind::Crd,
            name: format!("c{i}"),
            target: format!("t{i}.example.org"),
            pin: pin.map(str::to_string),
            retargeted_from: from.map(str::to_string),
            resource_version: "1".into(),
        }
    }

    fn servers() -> Servers {
        Servers::new([
            ServerInfo { name: "a".into(), default: true, pool_weight: None },
            ServerInfo { name: "b".into(), default: false, pool_weight: None },
        ])
    }

    #[test]
    fn the_share_rounds_up_and_is_bounded() {
        assert_eq!(share(10, Some(25)), 3);
        assert_eq!(share(3, Some(1)), 1);
        assert_eq!(share(0, Some(50)), 0);
        assert_eq!(share(7, Some(100)), 7);
        assert_eq!(share(7, None), 7);
    }

    #[test]
    fn a_canary_is_deterministic_and_a_larger_one_contains_a_smaller_one() {
        let entries: Vec<Entry> = (0..40).map(|i| entry(i, None, None)).collect();
        let chosen = |a: &RetargetArgs, es: &[Entry]| -> Vec<String> {
            plan(a, es, &servers())
                .into_iter()
                .filter(|s| matches!(s.action, Action::Write(_) | Action::AlreadyMoved))
                .map(|s| s.entry.name)
                .collect()
        };
        let ten = chosen(&args(&["--to", "b", "--canary", "10"]), &entries);
        assert_eq!(ten.len(), 4);
        let mut shuffled = entries.clone();
        shuffled.reverse();
        assert_eq!(
            chosen(&args(&["--to", "b", "--canary", "10"]), &shuffled),
            ten,
            "input order matters not"
        );
        // After the first run pinned them, a 50% run keeps them (already moved) and adds more.
        let after: Vec<Entry> = entries
            .iter()
            .map(|e| {
                if ten.contains(&e.name) {
                    entry(e.name[1..].parse().unwrap(), Some("b"), Some("a"))
                } else {
                    e.clone()
                }
            })
            .collect();
        let half_steps = plan(&args(&["--to", "b", "--canary", "50"]), &after, &servers());
        let half: Vec<&Step> = half_steps.iter().filter(|s| s.action != Action::NotChosen).collect();
        assert_eq!(half.len(), 20);
        for n in &ten {
            let s = half.iter().find(|s| &s.entry.name == n).expect("the 10% are in the 50%");
            assert_eq!(s.action, Action::AlreadyMoved);
        }
        assert_eq!(half.iter().filter(|s| matches!(s.action, Action::Write(Some(_)))).count(), 16);
    }

    #[test]
    fn pinned_configs_stay_out_of_a_pin_run_and_unpin_takes_only_the_from_servers() {
        let entries = vec![
            entry(0, None, None),
            entry(1, Some("a"), None), // pinned by someone: not retarget's to move
            entry(2, Some("b"), None), // pinned to b by hand: not a candidate of --to b
            entry(3, Some("b"), Some("a")),
        ];
        let steps = plan(&args(&["--to", "b"]), &entries, &servers());
        let names: Vec<(&str, &Action)> = steps.iter().map(|s| (s.entry.name.as_str(), &s.action)).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&("c0", &Action::Write(Some("b".into())))));
        assert!(names.contains(&("c3", &Action::AlreadyMoved)));
        assert_eq!(steps.iter().find(|s| s.entry.name == "c0").unwrap().after, "b (pin)");
        assert_eq!(steps.iter().find(|s| s.entry.name == "c0").unwrap().now, "a (default)");

        let steps = plan(&args(&["--unpin", "--from", "b"]), &entries, &servers());
        let mut names: Vec<&str> = steps.iter().map(|s| s.entry.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["c2", "c3"]);
        assert!(steps.iter().all(|s| s.action == Action::Write(None) && s.after == "a (default)"));

        // --from narrows a pin run to the configs that server now serves.
        assert!(plan(&args(&["--to", "b", "--from", "b"]), &entries[..1], &servers()).is_empty());
    }

    #[test]
    fn the_patch_carries_the_pin_the_annotation_and_the_version_read() {
        let e = entry(0, None, None);
        let p = patch_body(&e, Some("b"), "a");
        assert_eq!(p["spec"]["webhookServerRef"], json!({"name": "b"}));
        assert_eq!(p["metadata"]["annotations"][ANNOTATION], "a");
        assert_eq!(p["metadata"]["resourceVersion"], "1");
        let p = patch_body(&entry(0, Some("b"), Some("a")), None, "a");
        assert_eq!(p["spec"]["webhookServerRef"], Value::Null);
        assert_eq!(p["metadata"]["annotations"][ANNOTATION], Value::Null);
    }

    #[test]
    fn flags_that_contradict_are_usage_errors() {
        assert!(T::try_parse_from(["t", "--unpin"]).is_err(), "--unpin needs --from");
        assert!(T::try_parse_from(["t", "--to", "b", "--unpin", "--from", "a"]).is_err());
        assert!(T::try_parse_from(["t", "--to", "b", "--canary", "0"]).is_err());
        assert!(T::try_parse_from(["t", "--to", "b", "--canary", "101"]).is_err());
        assert!(T::try_parse_from(["t"]).is_err(), "--to or --unpin");
    }
}
