//! The checks `test` runs beside the round trips of its samples: `--validate-output` (each
//! converted object against its version's schema), golden files (`--record`, `--golden`:
//! `golden`) and `--fuzz` (`fuzz`). Each failure is one more row of the test report, naming
//! the sample, the versions and the field (docs/convctl.md, "test").

use std::path::PathBuf;

use clap::Args;
use dco_engine::validate::validate_version;

use crate::roundtrip::{Ctx, FailOn, Outcome, Trip};
use crate::samples::Sample;
use crate::{CliError, Loaded};

/// Violations quoted in one row; the rest are counted.
const SHOWN: usize = 5;

#[derive(Args, Clone, Debug, Default)]
pub struct CheckArgs {
    /// Check every converted object against the target version's schema (types, required,
    /// enum, bounds, pattern, unknown fields); each violation fails the sample's row.
    #[arg(long)]
    pub validate_output: bool,
    /// Also test N objects per served version, generated from its schema; a failing one is
    /// shrunk to a minimal object that still fails.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub fuzz: Option<u32>,
    /// The seed of --fuzz (the same seed generates the same objects) and of --live's
    /// --sample-strategy random (the same seed and objects, the same sample).
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Write each shrunk failing object of --fuzz to DIR as a sample file.
    #[arg(long, value_name = "DIR", requires = "fuzz")]
    pub record_failures: Option<PathBuf>,
    /// Write each sample's conversion to every other version under DIR (DIR/<sample>/
    /// <from>-to-<to>.yaml, and DIR/manifest.yaml), replacing what was there.
    #[arg(long, value_name = "DIR", conflicts_with = "golden")]
    pub record: Option<PathBuf>,
    /// Compare each sample's conversions with the files --record wrote to DIR; a difference
    /// fails naming the first differing field.
    #[arg(long, value_name = "DIR")]
    pub golden: Option<PathBuf>,
}

/// The extra rows for `args`, after the samples' own round trips.
pub fn run(
    l: &Loaded,
    ctx: &Ctx,
    samples: &[Sample],
    root: &std::path::Path,
    args: &CheckArgs,
    fail_on: FailOn,
) -> Result<Vec<Trip>, CliError> {
    let mut out = Vec::new();
    if args.validate_output {
        for s in samples {
            out.extend(validate_outputs(l, ctx, s));
        }
    }
    if let Some(dir) = &args.record {
        crate::golden::record(l, ctx, samples, root, dir)?;
    }
    if let Some(dir) = &args.golden {
        out.extend(crate::golden::compare(l, ctx, samples, root, dir)?);
    }
    if let Some(n) = args.fuzz {
        out.extend(crate::fuzz::run(
            l,
            ctx,
            n,
            args.seed,
            args.record_failures.as_deref(),
            args.validate_output,
            fail_on,
        )?);
    }
    Ok(out)
}

/// Why `obj` converted to `to` breaks `to`'s schema, or None when it fits (or does not
/// convert: the round trip reports that).
pub fn output_violations(l: &Loaded, ctx: &Ctx, obj: &serde_json::Value, to: &str) -> Option<String> {
    let converted = ctx.plan.convert(obj, &format!("{}/{to}", ctx.plan.group())).ok()?;
    let v = validate_version(&l.target, to, &converted)?;
    if v.is_valid() {
        return None;
    }
    let mut shown: Vec<String> = v.violations.iter().take(SHOWN).map(|x| x.to_string()).collect();
    let more = v.violations.len().saturating_sub(SHOWN);
    if more > 0 || v.truncated {
        shown.push(format!("and {more}{} more", if v.truncated { " or" } else { "" }));
    }
    Some(format!("the object converted to {to} breaks {to}'s schema: {}", shown.join("; ")))
}

/// One failing row per version the sample's conversion to breaks the schema of.
fn validate_outputs(l: &Loaded, ctx: &Ctx, s: &Sample) -> Vec<Trip> {
    let Ok(obj) = &s.object else { return Vec::new() };
    let Some(from) = crate::load::version_of(obj).filter(|v| ctx.versions.iter().any(|x| x == v)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for to in ctx.versions.iter().filter(|v| *v != from) {
        let start = std::time::Instant::now();
        if let Some(why) = output_violations(l, ctx, obj, to) {
            out.push(Trip {
                sample: format!("{} (output at {to})", s.label),
                file: s.file.clone(),
                document: s.document,
                line: None,
                from: from.to_string(),
                to: to.clone(),
                outcome: Outcome::Error(why),
                seconds: start.elapsed().as_secs_f64(),
                exercised: Vec::new(),
                schema: false,
            });
        }
    }
    out
}
