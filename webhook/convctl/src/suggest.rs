//! `convctl suggest`: rule stubs for the fields a config leaves uncovered, shaped like
//! `spec.spokes` so accepted ones paste straight in.
//!
//! Two kinds only, as in the reference: a `TypeCoerce` where a path keeps its name and changes
//! scalar type, and a `FieldRename` where an uncovered hub field and an uncovered spoke field
//! share a parent and a type and have similar names. Stricter than the reference: every
//! suggestion is compiled into the config first, and one the engine refuses is dropped (and
//! counted) instead of printed.

use std::collections::BTreeSet;

use clap::{Args, ValueEnum};
use dco_api::rules::{ConversionRule, PathPair, SpokeVersionRules, TypeCoerceParams};
use dco_engine::Strategy;
use dco_engine::schema::{FlatSchema, Node, Shape};
use serde::Serialize;

use crate::{CliError, Inputs, Loaded};

/// How alike two names must be (after dropping case and punctuation) to pair them. Loose on
/// purpose: a wrong pair costs a reviewer one deleted rule, and the compile check drops pairs
/// the engine refuses.
const SIMILARITY: f64 = 0.6;

#[derive(Clone, Copy, ValueEnum)]
pub enum SuggestFormat {
    Yaml,
    Json,
}

#[derive(Args)]
pub struct SuggestArgs {
    #[command(flatten)]
    pub inputs: Inputs,
    #[arg(short, long, value_enum, default_value_t = SuggestFormat::Yaml)]
    pub output: SuggestFormat,
}

/// The suggestions: `spokes` as in a config's spec.
#[derive(Serialize)]
pub struct Suggestions {
    pub spokes: Vec<SpokeVersionRules>,
    /// Suggestions dropped because the engine refused them.
    #[serde(skip)]
    pub dropped: Vec<String>,
}

fn flat(l: &Loaded, version: &str) -> Option<FlatSchema> {
    let v = l.target.version(version)?;
    Some(match l.target.composite() {
        Some(c) => FlatSchema::object(&c.strip(&v.schema)),
        None => FlatSchema::object(&v.schema),
    })
}

/// A node's type for matching: the scalar type, or the shape.
fn type_key(n: &Node) -> String {
    match &n.shape {
        Shape::Scalar(s) => s.ty.name().to_string(),
        _ => n.describe(),
    }
}

fn normalize(name: &str) -> String {
    name.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect()
}

/// 0..1: 1 − edit distance / longer length, over the normalized names.
pub fn similarity(a: &str, b: &str) -> f64 {
    let (a, b) = (normalize(a), normalize(b));
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    strsim::normalized_levenshtein(&a, &b)
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('.').unwrap_or(("", path))
}

/// The candidate rules of one spoke, best first: coercions, then renames by similarity.
fn candidates(
    uncovered_hub: &[String],
    uncovered_spoke: &[String],
    hub: &FlatSchema,
    spoke: &FlatSchema,
) -> Vec<ConversionRule> {
    let hub_paths: BTreeSet<&str> = uncovered_hub.iter().map(String::as_str).collect();
    let spoke_paths: BTreeSet<&str> = uncovered_spoke.iter().map(String::as_str).collect();
    let mut used_hub = BTreeSet::new();
    let mut used_spoke = BTreeSet::new();
    let mut out = Vec::new();
    for &p in hub_paths.intersection(&spoke_paths) {
        let (Some(h), Some(s)) = (hub.get(p), spoke.get(p)) else { continue };
        let (Some(hs), Some(ss)) = (h.scalar(), s.scalar()) else { continue };
        if hs.ty != ss.ty {
            used_hub.insert(p);
            used_spoke.insert(p);
            let mut r = ConversionRule::new(Strategy::TypeCoerce);
            r.type_coerce = Some(Box::new(TypeCoerceParams { path: p.to_string(), ..Default::default() }));
            out.push(r);
        }
    }
    let mut pairs: Vec<(f64, &str, &str)> = Vec::new();
    for &hp in &hub_paths {
        let Some(h) = hub.get(hp) else { continue };
        for &sp in &spoke_paths {
            let Some(s) = spoke.get(sp) else { continue };
            if hp == sp || split(hp).0 != split(sp).0 || type_key(h) != type_key(s) {
                continue;
            }
            let score = similarity(split(hp).1, split(sp).1);
            if score >= SIMILARITY {
                pairs.push((score, hp, sp));
            }
        }
    }
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)).then(a.2.cmp(b.2)));
    for (_, hp, sp) in pairs {
        if used_hub.contains(hp) || used_spoke.contains(sp) {
            continue;
        }
        used_hub.insert(hp);
        used_spoke.insert(sp);
        let mut r = ConversionRule::new(Strategy::FieldRename);
        r.field_rename = Some(Box::new(PathPair { hub_path: hp.to_string(), spoke_path: sp.to_string() }));
        out.push(r);
    }
    out
}

fn describe(r: &ConversionRule) -> String {
    match (&r.field_rename, &r.type_coerce) {
        (Some(p), _) => format!("FieldRename {} ← {}", p.hub_path, p.spoke_path),
        (_, Some(t)) => format!("TypeCoerce {}", t.path),
        _ => format!("{:?}", r.strategy),
    }
}

/// Whether `rule`, appended to spoke `version`'s rules, compiles without an error of its own.
fn compiles_with(l: &Loaded, version: &str, rule: &ConversionRule) -> Result<(), String> {
    let mut spec = l.config.spec.clone();
    let Some(s) = spec.spokes.iter_mut().find(|s| s.version == version) else {
        return Err(format!("spoke {version} is gone"));
    };
    s.rules.push(rule.clone());
    let index = s.rules.len() - 1;
    let compiled = dco_engine::compile(&spec, &l.target);
    let own: Vec<String> = compiled
        .report
        .errors()
        .filter(|d| {
            d.spoke.as_deref() == Some(version) && d.rule.as_ref().and_then(|r| r.first()) == Some(&index)
        })
        .map(|d| d.message.clone())
        .collect();
    if own.is_empty() { Ok(()) } else { Err(own.join("; ")) }
}

pub fn suggest(l: &Loaded) -> Result<Suggestions, CliError> {
    let hub_version = &l.config.spec.hub_version;
    let hub = flat(l, hub_version).ok_or_else(|| {
        CliError::Failed(format!(
            "{}: hub version {hub_version} is not a version of {}",
            l.config.name,
            l.target.name()
        ))
    })?;
    let mut out = Suggestions { spokes: Vec::new(), dropped: Vec::new() };
    for status in &l.compiled.report.spokes {
        let Some(spoke) = flat(l, &status.version) else { continue };
        let mut rules = Vec::new();
        for r in candidates(&status.fields_uncovered_hub, &status.fields_uncovered_spoke, &hub, &spoke) {
            match compiles_with(l, &status.version, &r) {
                Ok(()) => rules.push(r),
                Err(why) => out.dropped.push(format!("spoke {}: {}: {why}", status.version, describe(&r))),
            }
        }
        if !rules.is_empty() {
            out.spokes.push(SpokeVersionRules { version: status.version.clone(), rules });
        }
    }
    Ok(out)
}

pub fn run(a: &SuggestArgs) -> Result<(), CliError> {
    let l = a.inputs.load()?;
    let s = suggest(&l)?;
    for d in &s.dropped {
        eprintln!("dropped: {d}");
    }
    if !s.dropped.is_empty() {
        eprintln!("convctl: {} suggestion(s) dropped: the engine refuses them", s.dropped.len());
    }
    let text = match a.output {
        SuggestFormat::Json => serde_json::to_string_pretty(&s).unwrap_or_default() + "\n",
        SuggestFormat::Yaml if s.spokes.is_empty() => {
            "# no suggestions: every uncovered field is claimed, or too unlike any other to pair\n"
                .to_string()
        }
        SuggestFormat::Yaml => format!(
            "# suggested rules (each compiles in {}) — review every one before merging into spec.spokes\n{}",
            l.config.name,
            serde_yaml::to_string(&s).unwrap_or_default()
        ),
    };
    crate::emit(&text);
    Ok(())
}
