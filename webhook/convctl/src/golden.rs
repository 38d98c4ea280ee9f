//! Golden files: `test --record DIR` writes what each sample converts to at every other
//! version, `test --golden DIR` converts again and compares, so a rule change shows up as the
//! change of output it is (docs/convctl.md, "Golden files").
//!
//! Layout: `DIR/<sample>/<from>-to-<to>.yaml`, one object per file with its keys sorted (two
//! recordings of the same conversion are byte-identical), and `DIR/manifest.yaml` naming the
//! config, the target and hashes of both, without a timestamp (a re-record that changes
//! nothing changes no file).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::roundtrip::{Ctx, Diff, Outcome, Trip, diff, render};
use crate::samples::Sample;
use crate::{CliError, Loaded};

pub const MANIFEST: &str = "manifest.yaml";
/// The largest golden file read back.
const MAX_FILE: u64 = 16 << 20;
/// Sample directories and golden files looked at in DIR.
const MAX_ENTRIES: usize = 100_000;

/// One conversion of one sample: where its golden file lives and what it holds now.
struct Produced {
    rel: String,
    sample: String,
    file: String,
    document: usize,
    from: String,
    to: String,
    object: Value,
}

/// A sample's label as a single safe directory name, relative to `--samples`.
fn sample_dir(label: &str, root: &Path) -> String {
    let root = root.display().to_string();
    let rel = label
        .strip_prefix(&root)
        .map(|r| r.trim_start_matches('/'))
        .filter(|r| !r.is_empty())
        .unwrap_or(label);
    let rel = rel.strip_prefix("./").unwrap_or(rel);
    let s: String = rel
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .collect();
    if s.trim_matches('.').is_empty() { format!("_{s}") } else { s }
}

/// Every conversion of every readable sample to every other version; a sample that does not
/// convert is the round trip's to report.
fn produce(ctx: &Ctx, samples: &[Sample], root: &Path) -> Result<Vec<Produced>, CliError> {
    let mut out: Vec<Produced> = Vec::new();
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for s in samples {
        let Ok(obj) = &s.object else { continue };
        let Some(from) = crate::load::version_of(obj).filter(|v| ctx.versions.iter().any(|x| x == v)) else {
            continue;
        };
        let dir = sample_dir(&s.label, root);
        if let Some(prev) = owner.insert(dir.clone(), s.label.clone())
            && prev != s.label
        {
            return Err(CliError::Usage(format!(
                "samples {prev} and {} both record to the golden directory {dir}; rename one of them",
                s.label
            )));
        }
        for to in ctx.versions.iter().filter(|v| *v != from) {
            let Ok(object) = ctx.plan.convert(obj, &format!("{}/{to}", ctx.plan.group())) else { continue };
            out.push(Produced {
                rel: format!("{dir}/{from}-to-{to}.yaml"),
                sample: s.label.clone(),
                file: s.file.clone(),
                document: s.document,
                from: from.to_string(),
                to: to.clone(),
                object,
            });
        }
    }
    Ok(out)
}

/// 64-bit FNV-1a of the config's spec as JSON (keys sorted): which rules produced a corpus.
fn config_hash(l: &Loaded) -> String {
    let text = serde_json::to_string(&l.config.spec).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn manifest(l: &Loaded, files: usize) -> Value {
    json!({
        "convctlVersion": env!("CARGO_PKG_VERSION"),
        "config": l.config.name,
        "configHash": config_hash(l),
        "target": l.target.name(),
        "schemaHash": l.target.schema_hash(),
        "hubVersion": l.config.spec.hub_version,
        "files": files,
    })
}

fn yaml(v: &Value) -> String {
    serde_yaml::to_string(v).unwrap_or_default()
}

/// The golden files under `dir` (relative paths, `<sample>/<file>.yaml`), manifest excluded.
fn existing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for sub in entries.filter_map(Result::ok).take(MAX_ENTRIES) {
        if !sub.path().is_dir() {
            continue;
        }
        let Ok(files) = std::fs::read_dir(sub.path()) else { continue };
        for f in files.filter_map(Result::ok).take(MAX_ENTRIES) {
            let name = f.file_name().to_string_lossy().into_owned();
            if f.path().is_file() && name.ends_with(".yaml") && name.contains("-to-") {
                out.push(format!("{}/{name}", sub.file_name().to_string_lossy()));
            }
        }
    }
    out.sort();
    out
}

/// `--record DIR`: writes every conversion and the manifest; removes goldens of conversions
/// that no longer happen, so the corpus describes this run only.
pub fn record(l: &Loaded, ctx: &Ctx, samples: &[Sample], root: &Path, dir: &Path) -> Result<(), CliError> {
    let produced = produce(ctx, samples, root)?;
    let fail = |what: &Path, e: std::io::Error| {
        CliError::Usage(format!("--record {}: cannot write {}: {e}", dir.display(), what.display()))
    };
    let seen: BTreeSet<&str> = produced.iter().map(|p| p.rel.as_str()).collect();
    for old in existing(dir) {
        if !seen.contains(old.as_str()) {
            let p = dir.join(&old);
            std::fs::remove_file(&p).map_err(|e| fail(&p, e))?;
            if let Some(parent) = p.parent() {
                let _ = std::fs::remove_dir(parent); // only when now empty
            }
        }
    }
    for p in &produced {
        let path = dir.join(&p.rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
        }
        std::fs::write(&path, yaml(&p.object)).map_err(|e| fail(&path, e))?;
    }
    let m = dir.join(MANIFEST);
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    std::fs::write(&m, yaml(&manifest(l, produced.len()))).map_err(|e| fail(&m, e))?;
    eprintln!("convctl: recorded {} golden file(s) in {}", produced.len(), dir.display());
    Ok(())
}

fn read_yaml(path: &Path) -> Result<Value, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_FILE {
        return Err(format!("{len} bytes, more than a golden file may hold ({MAX_FILE})"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    serde_yaml::from_str(&text).map_err(|e| format!("not valid YAML: {e}"))
}

fn shown(v: &Option<Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 60 { format!("{}…", s.chars().take(59).collect::<String>()) } else { s }
        }
    }
}

/// `--golden DIR`: one row per golden file that differs, is missing or is orphaned.
pub fn compare(
    l: &Loaded,
    ctx: &Ctx,
    samples: &[Sample],
    root: &Path,
    dir: &Path,
) -> Result<Vec<Trip>, CliError> {
    if !dir.join(MANIFEST).is_file() {
        return Err(CliError::Usage(format!(
            "--golden {d}: no {MANIFEST} there; record the golden files first with --record {d}",
            d = dir.display()
        )));
    }
    let hint = match read_yaml(&dir.join(MANIFEST)) {
        Ok(m)
            if m.get("configHash") == Some(&json!(config_hash(l)))
                && m.get("schemaHash") == Some(&json!(l.target.schema_hash())) =>
        {
            String::new()
        }
        Ok(_) => " (the golden files were recorded from another config or schema, per their manifest)".into(),
        Err(e) => format!(" ({MANIFEST} cannot be read: {e})"),
    };
    let redo = format!("if the change is intended, re-record with --record {}", dir.display());
    let produced = produce(ctx, samples, root)?;
    let mut out = Vec::new();
    let mut matched = 0;
    let row = |p: &Produced, why: String| Trip {
        sample: format!("{} (golden {})", p.sample, p.rel),
        file: p.file.clone(),
        document: p.document,
        line: None,
        from: p.from.clone(),
        to: p.to.clone(),
        outcome: Outcome::Error(why),
        seconds: 0.0,
        exercised: Vec::new(),
        schema: false,
    };
    for p in &produced {
        let path = dir.join(&p.rel);
        if !path.is_file() {
            out.push(row(p, format!("no golden file {}; {redo}{hint}", path.display())));
            continue;
        }
        let want = match read_yaml(&path) {
            Ok(v) => v,
            Err(e) => {
                out.push(row(p, format!("golden file {}: {e}; {redo}", path.display())));
                continue;
            }
        };
        let mut diffs: Vec<Diff> = Vec::new();
        diff(&want, &p.object, &mut Vec::new(), &mut diffs);
        let Some(first) = diffs.first() else {
            matched += 1;
            continue;
        };
        let mut why = format!(
            "{} → {}: field {} differs from the golden file {}: recorded {}, now {}",
            p.from,
            p.to,
            render(&first.path),
            path.display(),
            shown(&first.before),
            shown(&first.after)
        );
        if diffs.len() > 1 {
            let _ = write!(why, " (and {} more field(s))", diffs.len() - 1);
        }
        let _ = write!(why, "; {redo}{hint}");
        out.push(row(p, why));
    }
    let seen: BTreeSet<&str> = produced.iter().map(|p| p.rel.as_str()).collect();
    for old in existing(dir).iter().filter(|o| !seen.contains(o.as_str())) {
        let (sample, file) = old.split_once('/').unwrap_or((old, old));
        let fromto = file.trim_end_matches(".yaml");
        let (from, to) = fromto.split_once("-to-").unwrap_or((fromto, "-"));
        out.push(Trip {
            sample: format!("{sample} (golden {old})"),
            file: dir.join(old).display().to_string(),
            document: 1,
            line: None,
            from: from.into(),
            to: to.into(),
            outcome: Outcome::Error(format!(
                "golden file {} has no conversion in this run (its sample or version is gone); \
                 remove it, or re-record with --record {}",
                dir.join(old).display(),
                dir.display()
            )),
            seconds: 0.0,
            exercised: Vec::new(),
            schema: false,
        });
    }
    eprintln!(
        "convctl: {matched} of {} conversion(s) match the golden files in {}",
        produced.len(),
        dir.display()
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_dirs_are_one_safe_segment_relative_to_the_samples() {
        let root = Path::new("samples");
        assert_eq!(sample_dir("samples/a/b.yaml#2", root), "a_b.yaml_2");
        assert_eq!(sample_dir("samples/x.yaml", root), "x.yaml");
        assert_eq!(sample_dir("..", Path::new("other")), "_..");
        assert_eq!(sample_dir("<stdin>#1", root), "_stdin__1");
    }
}
