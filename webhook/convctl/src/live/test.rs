//! `convctl test --live`: the config file under test against the target as each cluster of a
//! fleet has it, round-tripping a bounded sample of the cluster's own objects at every served
//! version (an XRD's claims too). Each context is read on its own (`--concurrency` at a time);
//! whatever goes wrong in one (unreachable, no target, a list refused, a config that no longer
//! compiles against its schemas) is a finding naming that context, and the others go on. One
//! report across the fleet, in every output format (docs/convctl.md, "test --live").

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Args;
use dco_api::config::TargetKind;
use dco_engine::compile;
use serde_json::{Value, json};

use super::cluster::{ClusterArgs, Member};
use super::sample::{self, Spec, Strategy};
use super::target::{self, LiveTarget};
use crate::output::{Finding, Location, Report, Severity};
use crate::roundtrip::{Acks, Ctx, TestArgs};
use crate::samples::{Sample, Samples};
use crate::{CliError, Loaded, load};

/// The largest `--max-samples`.
pub const MAX_SAMPLES: usize = 100_000;

/// `test --live`'s flags (beside `test`'s own: `-c`, `--fail-on`, `--concurrency`, the output).
#[derive(Args, Clone, Debug)]
pub struct LiveArgs {
    /// Read the target from the clusters instead of files: --crd NAME or --xrd NAME name it,
    /// and its objects are the samples (no --samples).
    #[arg(long, conflicts_with_all = ["samples", "package", "record", "golden"])]
    pub live: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// With --live: objects kept per served version (and per claim version) of each context.
    /// Memory holds at most this many per kind and version of the --concurrency contexts being
    /// read, plus one LIST page of 500 objects each, however many objects a cluster has.
    #[arg(long, value_name = "N", default_value_t = 100, requires = "live",
          value_parser = clap::value_parser!(u32).range(1..=MAX_SAMPLES as i64))]
    pub max_samples: u32,
    /// With --live: which objects: the first N listed (stops listing there), a uniform random
    /// N over every page (reservoir sampling, --seed), or the N newest by creationTimestamp.
    #[arg(long, value_enum, default_value_t = Strategy::First, value_name = "STRATEGY", requires = "live")]
    pub sample_strategy: Strategy,
    /// With --live: sample only this namespace (namespaced kinds and claims).
    #[arg(short = 'n', long, value_name = "NS", requires = "live")]
    pub namespace: Option<String>,
    /// With --live: also check the target (and an XRD's generated CRDs) is wired to dco:
    /// spec.conversion strategy Webhook with a clientConfig calling /convert/<target>.
    #[arg(long, requires = "live")]
    pub verify_propagation: bool,
}

/// What one context gave: its report (cases and findings, context named) and a summary row.
struct MemberRun {
    label: String,
    report: Report,
    row: Value,
    trips: usize,
}

/// `--crd NAME` or `--xrd NAME`.
fn target_flag(args: &TestArgs) -> Result<(TargetKind, String), CliError> {
    let i = &args.inputs;
    let name = |p: &Path| p.to_string_lossy().into_owned();
    match (&i.crd, &i.xrd) {
        (Some(n), None) => Ok((TargetKind::Crd, name(n))),
        (None, Some(n)) => Ok((TargetKind::Xrd, name(n))),
        _ => Err(CliError::Usage(
            "--live: give the target's name with exactly one of --crd NAME or --xrd NAME".into(),
        )),
    }
}

pub fn run(args: &TestArgs) -> Result<(), CliError> {
    let (kind, name) = target_flag(args)?;
    let config = load::config(&args.inputs.config)?;
    if config.kind != kind {
        let (have, flag) = match config.kind {
            TargetKind::Xrd => ("an XRDConversionConfig", "--xrd"),
            TargetKind::Crd => ("a CRDConversionConfig", "--crd"),
        };
        return Err(CliError::Usage(format!(
            "{} is {have}; give its target's name with {flag}",
            args.inputs.config.display()
        )));
    }
    if config.target_name != name {
        let field = if kind == TargetKind::Xrd { "targetXRD" } else { "targetCRD" };
        return Err(CliError::Failed(format!(
            "{}: spec.{field}.name: config {} targets {} but --live was given {name}; name the config's target or fix the config",
            config.target_place, config.name, config.target_name
        )));
    }
    let members = args.live.cluster.members()?;
    let spec = Spec {
        max: args.live.max_samples as usize,
        strategy: args.live.sample_strategy,
        seed: args.checks.seed,
        namespace: args.live.namespace.clone(),
    };
    let conc = args.concurrency.map_or(4, usize::from).clamp(1, members.len().max(1));
    use std::io::IsTerminal as _;
    let bars = (!args.quiet && std::io::stderr().is_terminal()).then(indicatif::MultiProgress::new);
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<MemberRun>>> = members.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..conc {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(m) = members.get(i) else { break };
                    let bar = bars.as_ref().map(|b| member_bar(b, &m.label));
                    let run = run_member(m, kind, &name, &spec, args, bar.as_ref());
                    if let Some(b) = bar {
                        b.finish_and_clear();
                    }
                    if let Ok(mut slot) = slots[i].lock() {
                        *slot = Some(run);
                    }
                }
            });
        }
    });
    let runs: Vec<MemberRun> = slots.into_iter().filter_map(|s| s.into_inner().ok().flatten()).collect();
    let report = fleet_report(runs, &spec, args);
    crate::output::write(&report, &args.output)?;
    let trips = report.summary["total"].as_u64().unwrap_or(0) as usize;
    match crate::test_report::failure(&report, trips, args) {
        None => Ok(()),
        Some(why) => Err(CliError::Failed(why)),
    }
}

fn member_bar(multi: &indicatif::MultiProgress, label: &str) -> indicatif::ProgressBar {
    let bar = multi.add(indicatif::ProgressBar::new_spinner());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {prefix}: {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_prefix(label.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

fn finding(label: &str, rule: &str, message: String, fix: Option<&str>, object: Option<String>) -> Finding {
    Finding {
        rule: rule.into(),
        severity: Severity::Error,
        message,
        fix: fix.map(str::to_string),
        location: Location { context: Some(label.to_string()), object, ..Location::default() },
        fails: true,
    }
}

/// One context, start to end; every failure is a finding of its report.
fn run_member(
    m: &Member,
    kind: TargetKind,
    name: &str,
    spec: &Spec,
    args: &TestArgs,
    bar: Option<&indicatif::ProgressBar>,
) -> MemberRun {
    let say = |msg: String| {
        if let Some(b) = bar {
            b.set_message(msg);
        }
    };
    let failed = |rule: &str, message: String, fix: Option<&str>, object: Option<String>| {
        let mut report = Report::new("test");
        report.findings.push(finding(&m.label, rule, message.clone(), fix, object));
        let row = json!({"context": m.label, "status": rule, "error": message});
        MemberRun { label: m.label.clone(), report, row, trips: 0 }
    };
    say("connecting".into());
    let fetched = super::block_on(async {
        let client = m.connect(args.live.cluster.timeout()).await.map_err(|e| (true, e))?;
        say(format!("reading {} {name}", kind.kind_name()));
        let t = target::read(&client, kind, name).await.map_err(|e| (is_unreachable(&e), e))?;
        let wiring =
            if args.live.verify_propagation { propagation(&client, &t, &m.label).await } else { Vec::new() };
        let mut sampled = Vec::new();
        let mut errors = Vec::new();
        for l in sample::listings(&t) {
            let what = l.describe();
            match sample::sample(&client, &l, spec, |n| say(format!("listing {what}: {n} object(s)"))).await {
                Ok(s) => sampled.push(s),
                Err(e) => errors.push(finding(
                    &m.label,
                    "list-failed",
                    e,
                    Some("check the context's permissions (list) and, for a spoke version, that its conversion webhook answers"),
                    Some(what),
                )),
            }
        }
        Ok::<_, (bool, String)>((t, wiring, sampled, errors))
    });
    let (t, wiring, sampled, list_errors) = match fetched {
        Ok(x) => x,
        Err((true, e)) => {
            return failed(
                "unreachable",
                format!("cannot read the cluster: {e}"),
                Some("check the kubeconfig, the context and that the apiserver answers"),
                None,
            );
        }
        Err((false, e)) => {
            return failed("target-unreadable", e, None, Some(format!("{} {name}", kind.kind_name())));
        }
    };
    say(format!("round-tripping {} object(s)", sampled.iter().map(|s| s.objects.len()).sum::<usize>()));
    test_member(m, &t, sampled, wiring, list_errors, spec, args)
}

/// Whether a read error means the cluster itself was not reached (as opposed to an answer).
fn is_unreachable(e: &str) -> bool {
    let e = e.to_lowercase();
    [
        "connect",
        "timed out",
        "timeout",
        "dns",
        "tls",
        "certificate",
        "refused",
        "hyper",
        "service unavailable",
    ]
    .iter()
    .any(|w| e.contains(w))
}

/// `--verify-propagation`: the target and, for an XRD, every generated CRD has strategy
/// Webhook with a clientConfig calling dco's path for the target.
async fn propagation(client: &kube::Client, t: &LiveTarget, label: &str) -> Vec<Finding> {
    let path = dco_api::webhook_path(&t.name);
    let mut checked: Vec<(String, Option<Value>)> = Vec::new();
    if t.kind == TargetKind::Xrd {
        checked.push((t.describe(), Some(t.value.clone())));
    }
    match target::generated(client, t).await {
        Ok(crds) => {
            checked.extend(crds.into_iter().map(|(n, v)| (format!("CustomResourceDefinition {n}"), v)))
        }
        Err(e) => return vec![finding(label, "propagation", e, None, Some(t.describe()))],
    }
    let mut out = Vec::new();
    for (what, value) in checked {
        let problem = match &value {
            None => {
                Some("does not exist: Crossplane has not generated it (is the XRD Established?)".to_string())
            }
            Some(v) => wiring_problem(v, &path),
        };
        if let Some(p) = problem {
            out.push(finding(
                label,
                "propagation",
                format!("{what}: {p}"),
                Some("let the dco operator wire the target (kubectl get ccc/xcc: Phase Applied, Handover SourceDropped)"),
                Some(what.clone()),
            ));
        }
    }
    out
}

/// Why `target`'s `spec.conversion` does not send reviews to dco's `path`, if it does not.
pub fn wiring_problem(target: &Value, path: &str) -> Option<String> {
    let conv = target.pointer("/spec/conversion").filter(|c| !c.is_null());
    let Some(conv) = conv else {
        return Some("has no spec.conversion: the apiserver converts nothing".into());
    };
    let strategy = conv.get("strategy").and_then(Value::as_str).unwrap_or("");
    if strategy != dco_api::target::STRATEGY_WEBHOOK {
        return Some(format!("spec.conversion.strategy is {strategy:?}, not Webhook"));
    }
    let Some(cc) = conv.pointer("/webhook/clientConfig").filter(|c| !c.is_null()) else {
        return Some("spec.conversion.webhook.clientConfig is missing".into());
    };
    let called = cc
        .pointer("/service/path")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| cc.get("url").and_then(Value::as_str).map(str::to_string));
    match called {
        Some(p) if p == path || p.ends_with(path) => None,
        Some(p) => Some(format!("spec.conversion.webhook.clientConfig calls {p}, not dco's {path}")),
        None => Some("spec.conversion.webhook.clientConfig names neither a service nor a url".into()),
    }
}

/// Compiles the config against this context's target and round-trips its sampled objects.
fn test_member(
    m: &Member,
    t: &LiveTarget,
    sampled: Vec<sample::Sampled>,
    wiring: Vec<Finding>,
    list_errors: Vec<Finding>,
    spec: &Spec,
    args: &TestArgs,
) -> MemberRun {
    let label = &m.label;
    let listed: Vec<Value> = sampled
        .iter()
        .map(|s| {
            json!({"kind": s.listing.resource.kind, "version": s.listing.resource.version,
            "listed": s.listed, "complete": s.complete, "sampled": s.objects.len()})
        })
        .collect();
    let mut row = json!({"context": label, "target": t.describe(), "schemaHash": t.target.schema_hash(),
        "listings": listed, "maxSamples": spec.max});
    if let Some(v) = t.xrd_version {
        row["xrdApiVersion"] = json!(v.api_version());
    }
    let config = match load::config(&args.inputs.config) {
        Ok(c) => c,
        Err(e) => {
            let mut report = Report::new("test");
            report.findings.push(finding(label, "config-unreadable", e.to_string(), None, None));
            return MemberRun { label: label.clone(), report, row, trips: 0 };
        }
    };
    let compiled = compile(&config.spec, &t.target);
    let l = Loaded { config, target: t.target.clone(), compiled };
    let mut extra: Vec<Finding> = wiring.into_iter().chain(list_errors).collect();
    let Some(plan) = l.compiled.plan.clone() else {
        for d in l.compiled.report.errors() {
            extra.push(finding(
                label,
                "compile-error",
                format!("{} as this cluster has it: {d}", t.describe()),
                Some("the target's schemas here differ from what the config was written for: compare them (convctl diff --live) or fix the config"),
                Some(l.config.name.clone()),
            ));
        }
        let mut report = Report::new("test");
        report.findings = extra;
        row["status"] = json!("compile-error");
        return MemberRun { label: label.clone(), report, row, trips: 0 };
    };
    let mut samples = Vec::new();
    for s in &sampled {
        for o in &s.objects {
            let object = format!("{} {}", s.listing.resource.kind, sample::object_name(o));
            samples.push(Sample {
                label: format!("{object} @{}", s.listing.resource.version),
                file: object,
                document: 0,
                line: None,
                object: Ok(o.clone()),
            });
        }
    }
    drop(sampled);
    let read = Samples { documents: samples.len(), samples, ..Samples::default() };
    let versions: Vec<String> = plan.versions().iter().map(|v| v.to_string()).collect();
    let ctx = Ctx {
        plan: &plan,
        target: &l.target,
        acks: Acks::new(&l),
        rules: crate::coverage::Rules::new(&l),
        versions,
        pairs: Vec::new(),
        skip_identity: args.skip_identity,
    };
    let workers = args
        .concurrency
        .map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from);
    let mut trips: Vec<_> =
        crate::roundtrip::run_all(&ctx, &read.samples, workers, false).into_iter().flatten().collect();
    match crate::checks::run(&l, &ctx, &read.samples, Path::new(""), &args.checks, args.fail_on) {
        Ok(more) => trips.extend(more),
        Err(e) => extra.push(finding(label, "check-failed", e.to_string(), None, None)),
    }
    let mut report = crate::test_report::build(&l, &ctx, &read, &trips, args);
    if read.samples.is_empty() {
        report.findings.push(Finding {
            rule: "no-objects".into(),
            severity: Severity::Note,
            message: format!("no objects of {} to sample at any served version", t.describe()),
            fix: None,
            location: Location::default(),
            fails: false,
        });
    }
    for c in &mut report.cases {
        let object = c.data.get("file").and_then(Value::as_str).unwrap_or_default().to_string();
        c.group = format!("{label}: {}", c.group);
        if let Some(d) = c.data.as_object_mut() {
            d.remove("file");
            d.remove("document");
            d.insert("context".into(), json!(label));
            d.insert("object".into(), json!(object));
        }
    }
    for f in &mut report.findings {
        f.location.context = Some(label.clone());
        // The config's place is the file given with -c, the same for every context.
        if f.location.file.is_none() && f.location.object.is_none() && f.rule == "no-objects" {
            f.location.object = Some(t.describe());
        }
    }
    extra.append(&mut report.findings);
    report.findings = extra;
    row["summary"] = report.summary.clone();
    MemberRun { label: label.clone(), report, row, trips: trips.len() }
}

/// One report across the fleet: every context's cases and findings (each naming its context),
/// the summary summed over them with a row per context, and the table.
fn fleet_report(runs: Vec<MemberRun>, spec: &Spec, args: &TestArgs) -> Report {
    let mut report = Report::new("test");
    let mut rows = Vec::new();
    let mut table_rows = Vec::new();
    let keys =
        ["samples", "total", "pass", "acknowledgedLoss", "loss", "error", "failed", "unexercisedRules"];
    let mut totals: serde_json::Map<String, Value> = keys.iter().map(|k| (k.to_string(), json!(0))).collect();
    let (mut clean, mut failing) = (0usize, 0usize);
    for mut r in runs {
        let fails = r.report.failed();
        if fails {
            failing += 1
        } else {
            clean += 1
        }
        for k in keys {
            let add = r.row.pointer(&format!("/summary/{k}")).and_then(Value::as_u64).unwrap_or(0);
            let cur = totals[k].as_u64().unwrap_or(0);
            totals.insert(k.to_string(), json!(cur + add));
        }
        let status = match r.row.get("status").and_then(Value::as_str) {
            Some(s) => s.to_string(),
            None if fails => "fail".into(),
            None => "pass".into(),
        };
        r.row["status"] = json!(status);
        r.row["failed"] = json!(fails);
        table_rows.push(vec![
            r.label.clone(),
            status,
            r.row.pointer("/summary/samples").map_or("-".into(), Value::to_string),
            r.trips.to_string(),
            r.report.findings.iter().filter(|f| f.fails).count().to_string(),
        ]);
        rows.push(r.row);
        report.cases.append(&mut r.report.cases);
        report.findings.append(&mut r.report.findings);
    }
    let mut summary = Value::Object(totals);
    summary["live"] = json!(true);
    summary["contexts"] = json!(rows);
    summary["contextsClean"] = json!(clean);
    summary["contextsFailing"] = json!(failing);
    summary["maxSamples"] = json!(spec.max);
    summary["sampleStrategy"] = json!(spec.strategy.name());
    summary["seed"] = json!(spec.seed);
    summary["failOn"] = json!(args.fail_on.name());
    summary["strict"] = json!(args.strict);
    let n = |k: &str| summary[k].as_u64().unwrap_or(0);
    report.summary_line = format!(
        "{} context(s): {clean} clean, {failing} failing; {} round trip(s): {} pass, {} acknowledged loss, {} loss, {} error; {} sample(s)",
        clean + failing,
        n("total"),
        n("pass"),
        n("acknowledgedLoss"),
        n("loss"),
        n("error"),
        n("samples")
    );
    report.summary = summary;
    let width = args.output.table_width();
    let mut table = crate::output::fit_table(
        &["CONTEXT", "RESULT", "SAMPLES", "ROUND TRIPS", "FAILING FINDINGS"],
        &table_rows,
        width,
    );
    table.push('\n');
    table.push_str(&crate::test_report::table_text(&report, args.output.only_failures, width));
    report.table = table;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wiring_to_dco_is_strategy_webhook_calling_its_path() {
        let path = "/convert/widgets.example.org";
        let wired = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig":
            {"service": {"namespace": "dco-system", "name": "dco-webhook", "path": path}}}}}});
        assert_eq!(wiring_problem(&wired, path), None);
        let none = json!({"spec": {"conversion": {"strategy": "None"}}});
        assert!(wiring_problem(&none, path).unwrap().contains("\"None\", not Webhook"));
        assert!(wiring_problem(&json!({"spec": {}}), path).unwrap().contains("no spec.conversion"));
        let other = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig":
            {"url": "https://127.0.0.1:9443/other"}}}}});
        assert!(wiring_problem(&other, path).unwrap().contains("calls https://127.0.0.1:9443/other"));
        let bare = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {}}}});
        assert!(wiring_problem(&bare, path).unwrap().contains("clientConfig is missing"));
    }

    #[test]
    fn connection_errors_are_told_from_answers() {
        assert!(is_unreachable(
            "reading CustomResourceDefinition x: error trying to connect: tcp connect error"
        ));
        assert!(!is_unreachable("CustomResourceDefinition x does not exist on this cluster"));
    }
}
