//! `convctl test`: every sample to every other version and back, compared with the original.
//!
//! A difference is *acknowledged* when a rule with `acknowledgeLossy: true` claims the field
//! (or the field is left unmapped under `unmappedFieldPolicy: Warn`) on the sample's side of a
//! spoke the round trip passes through; otherwise it is *unacknowledged* loss. Which samples
//! are read is `samples`; the report (cases, findings, table) is `test_report`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::{Args, ValueEnum};
use dco_api::config::UnmappedFieldPolicy;
use dco_engine::Plan;
use serde_json::Value;

use crate::coverage::{Rules, segments};
use crate::output::OutputArgs;
use crate::samples::{Bounds, Sample};
use crate::{CliError, Inputs, Loaded, require_plan};

#[derive(Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub inputs: Inputs,
    /// The samples: a directory tree (walked recursively), one file, `-` for stdin, or a tar
    /// archive (.tar, .tar.gz, .tgz). Documents of other kinds are skipped and counted.
    #[arg(short = 's', long, value_name = "PATH", required_unless_present = "live")]
    pub samples: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// What fails the run: `loss` unacknowledged loss and conversion errors, `warn` also a
    /// declared rule no sample exercised, `none` nothing. Acknowledged loss never fails.
    #[arg(long, value_enum, default_value_t = FailOn::Loss, value_name = "THRESHOLD")]
    pub fail_on: FailOn,
    /// A declared rule no sample exercised fails the run (as under --fail-on warn).
    #[arg(long)]
    pub strict: bool,
    /// Only these round trips (a sample at FROM converted to TO and back). Repeatable.
    #[arg(long = "version-pair", value_name = "FROM:TO")]
    pub version_pairs: Vec<String>,
    /// Leave out the same-version passthrough check of each sample.
    #[arg(long)]
    pub skip_identity: bool,
    /// Samples tested at once (default: one per CPU); the report is the same for any number.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: Option<u16>,
    /// No progress bar on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The largest sample file (or archive member, or stdin) read, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 16 << 20)]
    pub max_file_size: u64,
    /// The most documents read from the samples (List items count one each).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_documents: usize,
    /// The deepest directory level walked below --samples.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_depth: usize,
    #[command(flatten)]
    pub checks: crate::checks::CheckArgs,
    #[command(flatten)]
    pub live: crate::live::test::LiveArgs,
}

/// The `--fail-on` threshold, as the reference documents it (docs/convctl.md, "test").
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    None,
    Warn,
    Loss,
}

impl FailOn {
    pub fn name(self) -> &'static str {
        match self {
            FailOn::None => "none",
            FailOn::Warn => "warn",
            FailOn::Loss => "loss",
        }
    }
}

/// One differing field after a round trip.
#[derive(Debug, Clone)]
pub struct Diff {
    pub path: Vec<String>,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// The acknowledged rule or policy that allows this loss, if any.
    pub acknowledged_by: Option<String>,
}

pub fn render(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if seg.starts_with('[') {
            s.push_str(seg);
        } else {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(seg);
        }
    }
    s
}

/// Field-level differences between `a` (original) and `b` (after the round trip). Numbers
/// compare by value.
pub fn diff(a: &Value, b: &Value, path: &mut Vec<String>, out: &mut Vec<Diff>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                path.push(k.clone());
                match y.get(k) {
                    Some(vb) => diff(va, vb, path, out),
                    None => out.push(Diff {
                        path: path.clone(),
                        before: Some(va.clone()),
                        after: None,
                        acknowledged_by: None,
                    }),
                }
                path.pop();
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    path.push(k.clone());
                    out.push(Diff {
                        path: path.clone(),
                        before: None,
                        after: Some(vb.clone()),
                        acknowledged_by: None,
                    });
                    path.pop();
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                path.push(format!("[{i}]"));
                diff(va, vb, path, out);
                path.pop();
            }
        }
        _ => {
            if !json_equal(a, b) {
                out.push(Diff {
                    path: path.clone(),
                    before: Some(a.clone()),
                    after: Some(b.clone()),
                    acknowledged_by: None,
                });
            }
        }
    }
}

fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64()),
        _ => a == b,
    }
}

/// A claimed path (as segments) that allows loss, and why.
type Allowance = (Vec<String>, String);

/// Claimed paths that allow loss, per spoke version, split by side: `(version, hub side, spoke side)`.
pub struct Acks {
    per_spoke: Vec<(String, Vec<Allowance>, Vec<Allowance>)>,
}

impl Acks {
    pub fn new(l: &Loaded) -> Acks {
        let spec = &l.config.spec;
        let mut per_spoke = Vec::new();
        for status in &l.compiled.report.spokes {
            let mut hub = Vec::new();
            let mut spoke = Vec::new();
            let rules = spec
                .spokes
                .iter()
                .find(|s| s.version == status.version)
                .map(|s| s.rules.as_slice())
                .unwrap_or(&[]);
            for rr in &status.rule_results {
                let Some(rule) = rules.get(rr.index as usize) else { continue };
                if !rule.acknowledge_lossy {
                    continue;
                }
                let why = format!(
                    "spoke {} rule {} ({}): {}",
                    status.version,
                    rr.index,
                    rr.strategy,
                    rule.reason.trim()
                );
                hub.extend(rr.hub_paths.iter().map(|p| (segments(p), why.clone())));
                spoke.extend(rr.spoke_paths.iter().map(|p| (segments(p), why.clone())));
            }
            if spec.unmapped_field_policy == UnmappedFieldPolicy::Warn {
                let why = format!("unmappedFieldPolicy Warn: {}", spec.unmapped_field_reason.trim());
                hub.extend(status.fields_uncovered_hub.iter().map(|p| (segments(p), why.clone())));
                spoke.extend(status.fields_uncovered_spoke.iter().map(|p| (segments(p), why.clone())));
            }
            per_spoke.push((status.version.clone(), hub, spoke));
        }
        Acks { per_spoke }
    }

    /// Why a difference at `path` (on the `from` side) is acknowledged on the way `from` → `to`.
    pub fn find(&self, hub: &str, from: &str, to: &str, path: &[String]) -> Option<String> {
        let under = |claims: &[Allowance]| {
            claims.iter().find(|(c, _)| path.starts_with(c)).map(|(_, why)| why.clone())
        };
        let spoke = |v: &str| self.per_spoke.iter().find(|(s, _, _)| s == v);
        // The sample's own spoke: its spoke-side claims. The far spoke: its hub-side claims
        // (through the hub, a field keeps its hub path when no rule of the near spoke maps it).
        let near = if from != hub { spoke(from).and_then(|(_, _, s)| under(s)) } else { None };
        near.or_else(|| if to != hub { spoke(to).and_then(|(_, h, _)| under(h)) } else { None })
    }
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Pass,
    Loss(Vec<Diff>),
    Error(String),
}

/// One row of the report: a round trip, or a sample that could not be tested.
#[derive(Debug, Clone)]
pub struct Trip {
    pub sample: String,
    pub file: String,
    pub document: usize,
    pub line: Option<usize>,
    pub from: String,
    pub to: String,
    pub outcome: Outcome,
    pub seconds: f64,
    /// Positions in [`Rules`] of the rules this trip exercised.
    pub exercised: Vec<usize>,
    /// The sample breaks its own version's schema (no round trip ran).
    pub schema: bool,
}

impl Trip {
    pub fn status(&self) -> &'static str {
        match &self.outcome {
            Outcome::Pass => "pass",
            Outcome::Error(_) => "error",
            Outcome::Loss(d) if d.iter().all(|d| d.acknowledged_by.is_some()) => "acknowledged-loss",
            Outcome::Loss(_) => "loss",
        }
    }

    /// Acknowledged loss never fails; loss and errors fail unless `--fail-on none`.
    pub fn fails(&self, fail_on: FailOn) -> bool {
        matches!(self.status(), "error" | "loss") && fail_on != FailOn::None
    }

    /// `v3 → v2 → v3`, `v3 → v3` for the identity check, `v3 schema`, or `-` when nothing ran.
    pub fn name(&self) -> String {
        if self.schema {
            format!("{} schema", self.from)
        } else if self.to == "-" {
            "-".into()
        } else if self.from == self.to {
            format!("{} → {}", self.from, self.to)
        } else {
            format!("{} → {} → {}", self.from, self.to, self.from)
        }
    }

    fn failed_sample(s: &Sample, from: &str, why: String) -> Trip {
        Trip {
            sample: s.label.clone(),
            file: s.file.clone(),
            document: s.document,
            line: s.line,
            from: from.into(),
            to: "-".into(),
            outcome: Outcome::Error(why),
            seconds: 0.0,
            exercised: Vec::new(),
            schema: false,
        }
    }
}

/// What every worker shares.
pub struct Ctx<'a> {
    pub plan: &'a Plan,
    pub target: &'a dco_engine::Target,
    pub acks: Acks,
    pub rules: Rules,
    pub versions: Vec<String>,
    pub pairs: Vec<(String, String)>,
    pub skip_identity: bool,
}

impl Ctx<'_> {
    fn api_version(&self, v: &str) -> String {
        format!("{}/{v}", self.plan.group())
    }

    /// The versions a sample at `from` goes to: the identity check first, then the others.
    fn targets(&self, from: &str) -> Vec<String> {
        let mut out = Vec::new();
        if !self.skip_identity {
            out.push(from.to_string());
        }
        out.extend(self.versions.iter().filter(|v| *v != from).cloned());
        out.retain(|to| self.pairs.is_empty() || self.pairs.iter().any(|(f, t)| f == from && t == to));
        out
    }

    /// Every round trip of one sample, in version order.
    pub fn test_sample(&self, s: &Sample) -> Vec<Trip> {
        let obj = match &s.object {
            Ok(o) => o,
            Err(why) => {
                let at = match s.line {
                    Some(l) => format!("{} document {} line {l}", s.file, s.document),
                    None => format!("{} document {}", s.file, s.document),
                };
                return vec![Trip::failed_sample(s, "?", format!("{at}: {why}"))];
            }
        };
        let Some(from) = crate::load::version_of(obj).map(str::to_string) else {
            return vec![Trip::failed_sample(
                s,
                "?",
                "the object has no apiVersion; give it group/version".into(),
            )];
        };
        if !self.versions.contains(&from) {
            let why = format!("version {from} is not one of {}", self.versions.join(", "));
            return vec![Trip::failed_sample(s, &from, why)];
        }
        // A sample its own version's schema refuses would be refused by the apiserver too: its
        // round trips would test an object that cannot exist.
        if let Some(v) = dco_engine::validate::validate_version(self.target, &from, obj)
            && !v.violations.is_empty()
        {
            let mut why: Vec<String> = v.violations.iter().map(ToString::to_string).collect();
            if v.truncated {
                why.push("(more violations not shown)".into());
            }
            let why = format!("breaks the {from} schema: {}", why.join("; "));
            let mut t = Trip::failed_sample(s, &from, why);
            t.schema = true;
            return vec![t];
        }
        let hub = self.plan.hub_version();
        let mut out = Vec::new();
        for to in self.targets(&from) {
            let start = Instant::now();
            let there = self.plan.convert(obj, &self.api_version(&to));
            let outcome = match there.as_ref().map_err(|e| format!("{from} → {to}: {e}")).and_then(|t| {
                self.plan
                    .convert(t, &self.api_version(&from))
                    .map_err(|e| format!("{to} → {from} (back): {e}"))
            }) {
                Err(e) => Outcome::Error(e),
                Ok(back) => {
                    let mut diffs = Vec::new();
                    diff(obj, &back, &mut Vec::new(), &mut diffs);
                    for d in &mut diffs {
                        d.acknowledged_by = self.acks.find(hub, &from, &to, &d.path);
                    }
                    if diffs.is_empty() { Outcome::Pass } else { Outcome::Loss(diffs) }
                }
            };
            let seconds = start.elapsed().as_secs_f64();
            let mut exercised = Vec::new();
            if from != to {
                if from != hub {
                    self.rules.exercised(&from, obj, false, &mut exercised);
                }
                if to != hub {
                    // The far spoke's rules read the hub form.
                    let hub_form = if from == hub {
                        Ok(obj.clone())
                    } else {
                        self.plan.convert(obj, &self.api_version(hub))
                    };
                    if let Ok(h) = hub_form {
                        self.rules.exercised(&to, &h, true, &mut exercised);
                    }
                }
            }
            out.push(Trip {
                sample: s.label.clone(),
                file: s.file.clone(),
                document: s.document,
                line: None,
                from: from.clone(),
                to,
                outcome,
                seconds,
                exercised,
                schema: false,
            });
        }
        out
    }
}

/// Runs `test` over every sample with `workers` threads; the rows come back in sample order
/// whatever the number of workers.
pub fn run_all(ctx: &Ctx, samples: &[Sample], workers: usize, progress: bool) -> Vec<Vec<Trip>> {
    let bar = progress.then(|| {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(samples.len() as u64),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("tested {pos}/{len} samples {wide_bar} {elapsed}")
        {
            bar.set_style(style);
        }
        bar
    });
    let next = AtomicUsize::new(0);
    let slots: Vec<std::sync::OnceLock<Vec<Trip>>> =
        samples.iter().map(|_| std::sync::OnceLock::new()).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers.clamp(1, samples.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(s) = samples.get(i) else { break };
                    let _ = slots[i].set(ctx.test_sample(s));
                    if let Some(b) = &bar {
                        b.inc(1);
                    }
                }
            });
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    slots.into_iter().map(|s| s.into_inner().unwrap_or_default()).collect()
}

/// `FROM:TO` pairs, each naming versions of the target.
fn parse_pairs(given: &[String], versions: &[String]) -> Result<Vec<(String, String)>, CliError> {
    let mut out = Vec::new();
    for p in given {
        let Some((from, to)) = p.split_once(':') else {
            return Err(CliError::Usage(format!("--version-pair {p}: write it FROM:TO (for example v1:v3)")));
        };
        for v in [from, to] {
            if !versions.iter().any(|have| have == v) {
                return Err(CliError::Usage(format!(
                    "--version-pair {p}: {v} is not a version of the target; it has {}",
                    versions.join(", ")
                )));
            }
        }
        out.push((from.to_string(), to.to_string()));
    }
    Ok(out)
}

pub fn run(l: &Loaded, args: &TestArgs) -> Result<(), CliError> {
    let plan: Arc<Plan> = require_plan(l)?;
    let versions: Vec<String> = plan.versions().iter().map(|v| v.to_string()).collect();
    let pairs = parse_pairs(&args.version_pairs, &versions)?;
    let bounds = Bounds {
        max_file_bytes: args.max_file_size,
        max_documents: args.max_documents,
        max_depth: args.max_depth,
    };
    let c = &args.live.cluster;
    if c.kubeconfig.is_some() || c.context.is_some() || !c.contexts.is_empty() || c.kubeconfig_dir.is_some() {
        return Err(CliError::Usage(
            "--kubeconfig, --context, --contexts and --kubeconfig-dir read clusters: add --live (with --crd NAME or --xrd NAME)".into(),
        ));
    }
    let Some(source) = args.samples.as_deref() else {
        return Err(CliError::Usage("give the samples with --samples PATH (or --live)".into()));
    };
    let read = crate::samples::read(source, &plan, bounds)?;
    if read.samples.is_empty() {
        return Err(CliError::Usage(nothing_found(source, &plan, &read)));
    }
    let ctx = Ctx {
        plan: &plan,
        target: &l.target,
        acks: Acks::new(l),
        rules: Rules::new(l),
        versions,
        pairs,
        skip_identity: args.skip_identity,
    };
    let workers = match args.concurrency {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    use std::io::IsTerminal as _;
    let progress = !args.quiet && read.samples.len() > 1 && std::io::stderr().is_terminal();
    let trips: Vec<Trip> = run_all(&ctx, &read.samples, workers, progress).into_iter().flatten().collect();
    if trips.is_empty() {
        return Err(CliError::Usage(format!(
            "no round trip matched --version-pair {}: the samples are at {}",
            args.version_pairs.join(", "),
            crate::test_report::versions_seen(&read.samples)
        )));
    }
    let extra = crate::checks::run(l, &ctx, &read.samples, source, &args.checks, args.fail_on)?;
    let trips = [trips, extra].concat();
    crate::test_report::finish(l, &ctx, &read, &trips, args)
}

/// Why nothing was tested: what the samples held instead.
fn nothing_found(source: &std::path::Path, plan: &Plan, read: &crate::samples::Samples) -> String {
    let what = if read.files == 0 {
        "no .yaml, .yml or .json files".to_string()
    } else if read.skipped_total() == 0 {
        format!("{} file(s) with no objects in them", read.files)
    } else {
        format!("{} document(s) of other kinds: {}", read.skipped_total(), read.skipped_text())
    };
    format!(
        "no {} ({}) objects in --samples {}: found {what}; nothing was tested",
        plan.expected_kinds(),
        plan.group(),
        source.display()
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn diffs_are_field_level_and_numbers_compare_by_value() {
        let a = json!({"spec": {"a": 1, "b": [1, {"c": "x"}], "gone": true, "n": 1.0}});
        let b = json!({"spec": {"a": 1, "b": [1, {"c": "y"}], "new": 2, "n": 1.0}});
        let mut out = Vec::new();
        diff(&a, &b, &mut Vec::new(), &mut out);
        let paths: Vec<String> = out.iter().map(|d| render(&d.path)).collect();
        assert_eq!(paths, ["spec.b[1].c", "spec.gone", "spec.new"]);
    }

    #[test]
    fn version_pairs_name_versions_of_the_target() {
        let v = vec!["v3".to_string(), "v2".into()];
        assert_eq!(parse_pairs(&["v3:v2".into()], &v).unwrap(), [("v3".to_string(), "v2".to_string())]);
        let e = parse_pairs(&["v3:v9".into()], &v).unwrap_err().to_string();
        assert!(e.contains("v9 is not a version of the target; it has v3, v2"), "{e}");
        assert!(parse_pairs(&["v3".into()], &v).unwrap_err().to_string().contains("FROM:TO"));
    }
}
