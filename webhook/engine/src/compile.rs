//! Compile: resolve every rule against the hub and spoke schemas, track claims, compute
//! verdicts, scan leftovers and produce a [`Plan`] only when nothing is wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dco_api::config::{ConversionSpec, LosslessVerdict, RuleResult, SpokeStatus, UnmappedFieldPolicy};
use dco_api::rules::{ConversionRule, Strategy};

use crate::diagnostic::{Diagnostic, Severity};
use crate::plan::{Plan, RulePlan, ScopePlan, SpokePlan, When};
use crate::schema::{FlatSchema, Node, Resolved, Shape, same_shape};
use crate::strategies::{self, CompiledRule};
use crate::target::Target;
use crate::value::{Path, from_serde};

/// ForEach may nest inside ForEach once: item scopes go at most this deep.
pub const MAX_NESTING: usize = 2;

/// The outcome of [`compile`]: a plan only when there were no errors, and always a report.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub plan: Option<Arc<Plan>>,
    pub report: Report,
}

/// What compile found, shaped for the config's status.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub spokes: Vec<SpokeStatus>,
    pub diagnostics: Vec<Diagnostic>,
    pub overall_lossless: bool,
    pub schema_hash: String,
}

impl Report {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| !d.is_error())
    }

    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }
}

struct Settings<'a> {
    policy: UnmappedFieldPolicy,
    hub_version: &'a str,
    /// An XRD's scope and claim: Crossplane's fields are refused to rules and left out of
    /// the schemas (`crate::crossplane`).
    composite: Option<&'a crate::crossplane::Composite>,
}

/// Compiles `spec` against `target`.
pub fn compile(spec: &ConversionSpec, target: &Target) -> Compiled {
    let mut diags: Vec<Diagnostic> = Vec::new();
    let config_error = |diags: &mut Vec<Diagnostic>, spoke: Option<&str>, msg: String| {
        diags.push(Diagnostic {
            severity: Severity::Error,
            spoke: spoke.map(str::to_string),
            rule: None,
            strategy: None,
            paths: vec![],
            message: msg,
        })
    };
    let what = target.describe();

    let hub = target.version(&spec.hub_version);
    let eligible: Vec<&str> =
        target.versions().iter().filter(|v| v.hub_eligible).map(|v| v.name.as_str()).collect();
    let hub_label = match target.kind() {
        dco_api::config::TargetKind::Crd => "storage",
        dco_api::config::TargetKind::Xrd => "referenceable",
    };
    match hub {
        None => config_error(
            &mut diags,
            None,
            format!(
                "hubVersion {:?} is not a version of {what} (it has {}); set hubVersion to its {hub_label} version{}",
                spec.hub_version,
                target.versions().iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", "),
                eligible.first().map(|e| format!(" {e}")).unwrap_or_default(),
            ),
        ),
        Some(h) if !h.hub_eligible => config_error(
            &mut diags,
            None,
            format!(
                "hubVersion {} is not the {hub_label} version of {what}; {}",
                h.name,
                match eligible.first() {
                    Some(e) => format!("set hubVersion: {e}"),
                    None => format!("mark one version {hub_label} and use it as the hub"),
                }
            ),
        ),
        Some(_) => {}
    }
    if spec.spokes.is_empty() {
        config_error(
            &mut diags,
            None,
            "spokes is empty; list every other version of the target as a spoke".into(),
        );
    }
    if spec.unmapped_field_policy == UnmappedFieldPolicy::Warn && spec.unmapped_field_reason.trim().is_empty()
    {
        config_error(
            &mut diags,
            None,
            "unmappedFieldPolicy Warn needs unmappedFieldReason: say why unmapped fields may be dropped"
                .into(),
        );
    }
    for rv in &spec.conversion_review_versions {
        if rv != "v1" && rv != "v1beta1" {
            config_error(
                &mut diags,
                None,
                format!("conversionReviewVersions has {rv:?}; only v1 and v1beta1 exist"),
            );
        }
    }
    let mut seen = BTreeSet::new();
    for s in &spec.spokes {
        if s.version == spec.hub_version {
            config_error(
                &mut diags,
                Some(&s.version),
                "a spoke cannot be the hub version; remove this spoke".into(),
            );
        } else if !seen.insert(s.version.as_str()) {
            config_error(
                &mut diags,
                Some(&s.version),
                "spoke listed twice; merge its rules into one entry".into(),
            );
        } else if let Some(v) = target.version(&s.version) {
            // The reference refuses this spoke; dco keeps it, since objects may still be
            // stored at the version, and says it is the last step of retiring the version.
            if !v.served {
                diags.push(warning(
                    Some(&s.version),
                    format!(
                        "version {} of {what} is no longer served: its spoke can now be removed, the last step of retiring {}, once no object is stored at {} (the target's status.storedVersions no longer lists it)",
                        s.version, s.version, s.version
                    ),
                ));
            }
        } else {
            config_error(
                &mut diags,
                Some(&s.version),
                format!("{what} has no version {}; remove the spoke or fix its name", s.version),
            );
        }
    }
    for v in target.versions() {
        if v.name != spec.hub_version && !seen.contains(v.name.as_str()) {
            let served = v.served;
            diags.push(Diagnostic {
                severity: if served { Severity::Error } else { Severity::Warning },
                spoke: Some(v.name.clone()),
                rule: None,
                strategy: None,
                paths: vec![],
                message: if served {
                    format!(
                        "version {} of {what} is served but has no spoke in the config: add a spoke for {} (an empty rules list copies identical fields), or, to retire {}, stop serving it in the target first (set served: false on {}), then remove its spoke",
                        v.name, v.name, v.name, v.name
                    )
                } else {
                    format!("version {} of {what} is not served and has no spoke entry; objects stored in it cannot be converted", v.name)
                },
            });
        }
    }

    let mut spokes_status = Vec::new();
    let mut spoke_plans = Vec::new();
    let mut overall = true;
    if let Some(hub) = hub {
        let composite = target.composite();
        let flatten = |schema: &serde_json::Value| match composite {
            Some(c) => FlatSchema::object(&c.strip(schema)),
            None => FlatSchema::object(schema),
        };
        let hub_fs = flatten(&hub.schema);
        if hub.schema.is_null() {
            diags.push(warning(
                None,
                format!(
                    "hub version {} declares no schema; every field is copied through unchecked",
                    hub.name
                ),
            ));
        }
        let settings = Settings { policy: spec.unmapped_field_policy, hub_version: &hub.name, composite };
        for s in &spec.spokes {
            let Some(sv) = target.version(&s.version) else { continue };
            if s.version == spec.hub_version {
                continue;
            }
            if sv.schema.is_null() {
                diags.push(warning(
                    Some(&s.version),
                    format!(
                        "version {} declares no schema; every field is copied through unchecked",
                        s.version
                    ),
                ));
            }
            let spoke_fs = flatten(&sv.schema);
            let start = diags.len();
            let out = compile_scope(&settings, &s.version, &s.rules, &hub_fs, &spoke_fs, &[], 0, &mut diags);
            let status = spoke_status(&s.version, &s.rules, &out, &diags[start..]);
            overall &= out.verdict.hub_to_spoke && out.verdict.spoke_to_hub;
            spokes_status.push(status);
            spoke_plans.push(SpokePlan::new(s.version.clone(), out.plan));
        }
    }

    let report = Report {
        spokes: spokes_status,
        overall_lossless: overall && !diags.iter().any(Diagnostic::is_error),
        diagnostics: diags,
        schema_hash: target.schema_hash(),
    };
    let plan = if report.has_errors() {
        None
    } else {
        Some(Arc::new(Plan::new(target, spec, spoke_plans, report.overall_lossless)))
    };
    Compiled { plan, report }
}

fn warning(spoke: Option<&str>, message: String) -> Diagnostic {
    Diagnostic {
        severity: Severity::Warning,
        spoke: spoke.map(str::to_string),
        rule: None,
        strategy: None,
        paths: vec![],
        message,
    }
}

fn spoke_status(
    version: &str,
    rules: &[ConversionRule],
    out: &ScopeOutcome,
    diags: &[Diagnostic],
) -> SpokeStatus {
    let mut rule_results: Vec<RuleResult> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let compiled = out.rule_facts.get(&i);
            RuleResult {
                index: u32::try_from(i).unwrap_or(u32::MAX),
                strategy: r.strategy,
                hub_paths: compiled.map(|c| c.0.clone()).unwrap_or_default(),
                spoke_paths: compiled.map(|c| c.1.clone()).unwrap_or_default(),
                verdict: compiled.map(|c| c.2).unwrap_or_default(),
                errors: vec![],
                warnings: vec![],
            }
        })
        .collect();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for d in diags {
        let target = d.rule.as_ref().and_then(|r| r.first()).and_then(|i| rule_results.get_mut(*i));
        let text = match (&d.rule, d.rule.as_ref().map(Vec::len)) {
            (Some(_), Some(n)) if n > 1 => {
                format!("rule {}: {}", d.rule_label().unwrap_or_default(), with_paths(d))
            }
            _ => with_paths(d),
        };
        match (target, d.severity) {
            (Some(rr), Severity::Error) => rr.errors.push(text),
            (Some(rr), Severity::Warning) => rr.warnings.push(text),
            (None, Severity::Error) => errors.push(text),
            (None, Severity::Warning) => warnings.push(text),
        }
    }
    SpokeStatus {
        version: version.to_string(),
        lossless: out.verdict,
        fields_uncovered_hub: out.uncovered_hub.clone(),
        fields_uncovered_spoke: out.uncovered_spoke.clone(),
        rule_results,
        errors,
        warnings,
    }
}

fn with_paths(d: &Diagnostic) -> String {
    if d.paths.is_empty() { d.message.clone() } else { format!("{}: {}", d.paths.join(", "), d.message) }
}

/// What compiling one scope (a spoke's root, or a ForEach item) produced.
pub struct ScopeOutcome {
    pub plan: ScopePlan,
    pub verdict: LosslessVerdict,
    pub uncovered_hub: Vec<String>,
    pub uncovered_spoke: Vec<String>,
    /// Per rule index of this scope: (hub claims, spoke claims, verdict).
    rule_facts: BTreeMap<usize, (Vec<String>, Vec<String>, LosslessVerdict)>,
    pub had_errors: bool,
}

#[allow(clippy::too_many_arguments)]
fn compile_scope(
    settings: &Settings<'_>,
    spoke: &str,
    rules: &[ConversionRule],
    hub: &FlatSchema,
    spoke_fs: &FlatSchema,
    prefix: &[usize],
    depth: usize,
    diags: &mut Vec<Diagnostic>,
) -> ScopeOutcome {
    let errors_before = diags.iter().filter(|d| d.is_error()).count();
    let mut plan = ScopePlan::default();
    let mut verdict = LosslessVerdict { hub_to_spoke: true, spoke_to_hub: true };
    let mut claimed_hub: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut claimed_spoke: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut rule_facts = BTreeMap::new();
    // The paths failed rules meant to convert: the leftover scan does not report them again,
    // so one mistake in a rule is one error (docs/engine.md, "Diagnostics").
    let mut intended = Intended::default();

    for (i, rule) in rules.iter().enumerate() {
        if prefix.is_empty()
            && let Some(d) = settings.composite.and_then(|c| c.check_rule(spoke, i, rule))
        {
            diags.push(d);
            intended.add(rule, hub, spoke_fs);
            continue;
        }
        let mut index = prefix.to_vec();
        index.push(i);
        let mut cx = RuleCx {
            rule,
            index: index.clone(),
            spoke,
            settings,
            hub,
            spoke_fs,
            depth,
            diags: &mut *diags,
            had_error: false,
        };
        let Some(compiled) = compile_rule(&mut cx) else {
            intended.add(rule, hub, spoke_fs);
            continue;
        };
        let when = compile_when(&mut cx);
        let had_error = cx.had_error;
        drop(cx);
        if had_error {
            intended.add(rule, hub, spoke_fs);
            continue;
        }
        let claims_ok = claim(
            &mut claimed_hub,
            "hub",
            hub,
            &compiled.hub_claims,
            &index,
            rule.strategy,
            rules,
            prefix,
            spoke,
            diags,
        ) & claim(
            &mut claimed_spoke,
            "spoke",
            spoke_fs,
            &compiled.spoke_claims,
            &index,
            rule.strategy,
            rules,
            prefix,
            spoke,
            diags,
        );
        if !claims_ok {
            intended.add(rule, hub, spoke_fs);
            continue;
        }
        verdict.hub_to_spoke &= compiled.verdict.hub_to_spoke;
        verdict.spoke_to_hub &= compiled.verdict.spoke_to_hub;
        rule_facts.insert(i, (compiled.hub_claims.clone(), compiled.spoke_claims.clone(), compiled.verdict));
        plan.rules.push(RulePlan {
            index,
            strategy: rule.strategy,
            when,
            clear_h2s: compiled.clear_h2s,
            clear_s2h: compiled.clear_s2h,
            lossy: [!compiled.verdict.hub_to_spoke, !compiled.verdict.spoke_to_hub],
            op: compiled.op,
        });
    }

    // Leftovers: an unclaimed leaf on both sides with the same shape is copied as is (it
    // stays in the output untouched); anything else is uncovered.
    let mut uncovered_hub = Vec::new();
    let mut uncovered_spoke = Vec::new();
    let mut reasons: BTreeMap<String, String> = BTreeMap::new();
    for (path, hn) in hub.leaves() {
        if claimed_hub.contains_key(path) || intended.covers(path) || empty_vs_interior(hn, spoke_fs, path) {
            continue;
        }
        match spoke_fs.resolve(path) {
            Resolved::Node(sn) if sn.is_leaf() && !claimed_spoke.contains_key(path) => {
                match same_shape(hn, sn) {
                    Ok(()) => {}
                    Err(why) => {
                        reasons.insert(
                            path.to_string(),
                            format!("differs between hub and spoke ({why}){}", suggest(hn, sn)),
                        );
                        uncovered_hub.push(path.to_string());
                    }
                }
            }
            Resolved::InsideLeaf { node, .. } if node.accepts_anything() => {}
            _ => uncovered_hub.push(path.to_string()),
        }
    }
    for (path, sn) in spoke_fs.leaves() {
        if claimed_spoke.contains_key(path) || intended.covers(path) || empty_vs_interior(sn, hub, path) {
            continue;
        }
        match hub.resolve(path) {
            Resolved::Node(hn) if hn.is_leaf() && !claimed_hub.contains_key(path) => {
                if same_shape(hn, sn).is_err() {
                    uncovered_spoke.push(path.to_string());
                }
            }
            Resolved::InsideLeaf { node, .. } if node.accepts_anything() => {}
            _ => uncovered_spoke.push(path.to_string()),
        }
    }
    let (sev, tail) = match settings.policy {
        UnmappedFieldPolicy::Error => (
            Severity::Error,
            "map it with a rule, or set unmappedFieldPolicy: Warn with an unmappedFieldReason to drop it",
        ),
        UnmappedFieldPolicy::Warn => (Severity::Warning, "it is dropped (unmappedFieldPolicy: Warn)"),
    };
    let where_ = if prefix.is_empty() { String::new() } else { " in the items".to_string() };
    for path in &uncovered_hub {
        let msg = match reasons.get(path) {
            Some(r) => format!("hub field {r}; {tail}"),
            None => format!(
                "hub field is not covered: no rule maps it and version {spoke} has no identical field{where_}; {tail}"
            ),
        };
        diags.push(Diagnostic {
            severity: sev,
            spoke: Some(spoke.to_string()),
            rule: (!prefix.is_empty()).then(|| prefix.to_vec()),
            strategy: None,
            paths: vec![path.clone()],
            message: msg,
        });
        plan.drop_h2s.push(dotted_path(path));
    }
    for path in &uncovered_spoke {
        if reasons.contains_key(path) {
            // Reported once, on the hub side.
            plan.drop_s2h.push(dotted_path(path));
            continue;
        }
        diags.push(Diagnostic {
            severity: sev,
            spoke: Some(spoke.to_string()),
            rule: (!prefix.is_empty()).then(|| prefix.to_vec()),
            strategy: None,
            paths: vec![path.clone()],
            message: format!(
                "spoke field is not covered: no rule fills it and hub version {} has no identical field{where_}; {tail}",
                settings.hub_version
            ),
        });
        plan.drop_s2h.push(dotted_path(path));
    }
    if !uncovered_hub.is_empty() {
        verdict.hub_to_spoke = false;
    }
    if !uncovered_spoke.is_empty() {
        verdict.spoke_to_hub = false;
    }
    let had_errors = diags.iter().filter(|d| d.is_error()).count() > errors_before;
    ScopeOutcome { plan, verdict, uncovered_hub, uncovered_spoke, rule_facts, had_errors }
}

/// The paths rules that failed to compile name, on either side, and for a path that is not
/// declared the declared field it most likely misspells. A leaf at, below or around (a path
/// into an array or map) one of them is not reported as uncovered: the rule's own error
/// already stands for it.
#[derive(Default)]
struct Intended {
    paths: Vec<String>,
}

impl Intended {
    fn add(&mut self, rule: &ConversionRule, hub: &FlatSchema, spoke: &FlatSchema) {
        for (field, path) in crate::crossplane::rule_paths(rule) {
            if field == "when.path" || path.is_empty() {
                continue;
            }
            for fs in [hub, spoke] {
                if let Some(near) = closest_declared(fs, &path) {
                    self.paths.push(near);
                }
            }
            self.paths.push(path);
        }
    }

    fn covers(&self, leaf: &str) -> bool {
        let under = |a: &str, b: &str| a.len() > b.len() && a.starts_with(b) && a.as_bytes()[b.len()] == b'.';
        self.paths.iter().any(|p| p == leaf || under(leaf, p) || under(p, leaf))
    }
}

/// For a path that is not declared, the declared sibling of its first missing segment that
/// is closest in spelling (at most a third of the name's letters apart, and a unique best):
/// `spec.storageSiz` → `spec.storageSize`.
pub(crate) fn closest_declared(fs: &FlatSchema, path: &str) -> Option<String> {
    let Resolved::Missing { parent } = fs.resolve(path) else { return None };
    let rest = if parent.is_empty() { path } else { path.get(parent.len() + 1..)? };
    let wrong = rest.split('.').next()?;
    let mut best: Option<(usize, &str)> = None;
    let mut tie = false;
    for name in fs.children(&parent) {
        let d = edit_distance(&wrong.to_lowercase(), &name.to_lowercase());
        match best {
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tie = true,
            _ => {
                best = Some((d, name));
                tie = false;
            }
        }
    }
    let (d, name) = best?;
    if tie || d > (wrong.chars().count() / 3).max(1) {
        return None;
    }
    Some(if parent.is_empty() { name.to_string() } else { format!("{parent}.{name}") })
}

/// Levenshtein distance over chars; names are short (bounded by the schema's own keys).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(cur).min(row[j]) };
            prev = cur;
        }
    }
    row[b.len()]
}

/// An object declared without properties on one side and with them on the other: its
/// fields are checked one by one on the side that declares them, so the empty object itself
/// is no finding.
fn empty_vs_interior(node: &Node, other: &FlatSchema, path: &str) -> bool {
    matches!(node.shape, Shape::Object { has_properties: false, .. })
        && other.get(path).is_some_and(|n| matches!(n.shape, Shape::Object { has_properties: true, .. }))
}

fn suggest(hub: &Node, spoke: &Node) -> &'static str {
    match (hub.scalar(), spoke.scalar()) {
        (Some(h), Some(s)) if h.ty != s.ty => " — TypeCoerce converts between scalar types",
        (Some(h), Some(s)) if h.enumeration.is_some() || s.enumeration.is_some() => {
            " — EnumRemap maps enum values"
        }
        _ => "",
    }
}

fn dotted_path(p: &str) -> Path {
    Path::from_segments(p.split('.'))
}

#[allow(clippy::too_many_arguments)]
fn claim(
    claimed: &mut BTreeMap<String, Vec<usize>>,
    side: &str,
    fs: &FlatSchema,
    paths: &[String],
    index: &[usize],
    strategy: Strategy,
    rules: &[ConversionRule],
    prefix: &[usize],
    spoke: &str,
    diags: &mut Vec<Diagnostic>,
) -> bool {
    let mut ok = true;
    for p in paths {
        let leaves: Vec<String> = if p.starts_with("metadata.") {
            vec![p.clone()]
        } else {
            match fs.resolve(p) {
                Resolved::Node(n) if n.is_leaf() => vec![p.clone()],
                Resolved::Node(_) => fs.leaves_under(p).map(|(l, _)| l.to_string()).collect(),
                // Strategies resolve their own paths; an unresolved claim still must not
                // overlap another rule's.
                _ => vec![p.clone()],
            }
        };
        for leaf in leaves {
            if let Some(other) = claimed.get(&leaf) {
                let other_label = label(other);
                let other_strategy = other
                    .get(prefix.len())
                    .and_then(|i| rules.get(*i))
                    .map(|r| r.strategy.to_string())
                    .unwrap_or_default();
                diags.push(Diagnostic {
                    severity: Severity::Error,
                    spoke: Some(spoke.to_string()),
                    rule: Some(index.to_vec()),
                    strategy: Some(strategy),
                    paths: vec![leaf.clone()],
                    message: format!(
                        "{side} field is already claimed by rule {other_label} ({other_strategy}); a field may be converted by one rule only — merge the rules or drop one"
                    ),
                });
                ok = false;
            } else {
                claimed.insert(leaf, index.to_vec());
            }
        }
    }
    ok
}

fn label(index: &[usize]) -> String {
    index.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(".")
}

fn compile_rule(cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
    if let Err(e) = cx.rule.params() {
        cx.error(&[], e.to_string());
        return None;
    }
    let Some(imp) = strategies::implementation(cx.rule.strategy) else {
        cx.error(
            &[],
            format!(
                "strategy {} is not implemented yet; this config cannot be served until it is",
                cx.rule.strategy
            ),
        );
        return None;
    };
    let compiled = imp.compile(cx)?;
    if cx.had_error {
        return None;
    }
    let lossy = !compiled.verdict.hub_to_spoke || !compiled.verdict.spoke_to_hub;
    let mut paths: Vec<String> = compiled.hub_claims.iter().chain(&compiled.spoke_claims).cloned().collect();
    paths.dedup();
    if lossy && !cx.rule.acknowledge_lossy {
        let why = if compiled.lossy_because.is_empty() {
            lossy_dirs(compiled.verdict)
        } else {
            compiled.lossy_because.join("; ")
        };
        cx.diags.push(Diagnostic {
            severity: Severity::Error,
            spoke: Some(cx.spoke.to_string()),
            rule: Some(cx.index.clone()),
            strategy: Some(cx.rule.strategy),
            paths,
            message: format!(
                "rule is lossy ({why}); set acknowledgeLossy: true with a reason if the loss is acceptable"
            ),
        });
        cx.had_error = true;
        return None;
    }
    if lossy && cx.rule.reason.trim().is_empty() {
        cx.warn(&[], "acknowledgeLossy is set without a reason; say why the loss is acceptable".to_string());
    }
    if !lossy && cx.rule.acknowledge_lossy {
        cx.warn(&[], "acknowledgeLossy is set but the rule is lossless; remove it".to_string());
    }
    Some(compiled)
}

fn lossy_dirs(v: LosslessVerdict) -> String {
    match (v.hub_to_spoke, v.spoke_to_hub) {
        (false, false) => "both directions".into(),
        (false, true) => "hub→spoke".into(),
        _ => "spoke→hub".into(),
    }
}

fn compile_when(cx: &mut RuleCx<'_>) -> Option<When> {
    let w = cx.rule.when.as_ref()?;
    let path = match Path::parse(&w.path) {
        Ok(p) => p,
        Err(e) => {
            cx.error(&[], format!("when.path: {e}"));
            return None;
        }
    };
    let known = |fs: &FlatSchema| matches!(fs.resolve(&w.path), Resolved::Node(_));
    if !known(cx.hub) && !known(cx.spoke_fs) && !w.path.starts_with("metadata.") {
        cx.error(
            &[&w.path],
            "when.path is in neither the hub nor the spoke schema; fix the path".to_string(),
        );
        return None;
    }
    cx.warn(
        &[&w.path],
        format!(
            "rule applies only when {} equals {}; objects where it does not keep the rule's fields unconverted (partial coverage)",
            w.path, w.equals
        ),
    );
    Some(When { path, equals: from_serde(&w.equals) })
}

/// The compile context a strategy sees: its rule, its scope's schemas and a diagnostics sink.
pub struct RuleCx<'a> {
    rule: &'a ConversionRule,
    index: Vec<usize>,
    spoke: &'a str,
    settings: &'a Settings<'a>,
    hub: &'a FlatSchema,
    spoke_fs: &'a FlatSchema,
    depth: usize,
    diags: &'a mut Vec<Diagnostic>,
    had_error: bool,
}

/// A compiled nested scope (ForEach items, BranchMap branches).
pub struct NestedScope {
    pub plan: ScopePlan,
    pub verdict: LosslessVerdict,
}

impl<'a> RuleCx<'a> {
    pub fn rule(&self) -> &'a ConversionRule {
        self.rule
    }

    pub fn index(&self) -> &[usize] {
        &self.index
    }

    pub fn spoke_version(&self) -> &str {
        self.spoke
    }

    pub fn hub_version(&self) -> &str {
        self.settings.hub_version
    }

    pub fn hub_schema(&self) -> &'a FlatSchema {
        self.hub
    }

    pub fn spoke_schema(&self) -> &'a FlatSchema {
        self.spoke_fs
    }

    /// 0 at the object root, 1 inside a ForEach item, 2 inside a nested ForEach.
    pub fn depth(&self) -> usize {
        self.depth
    }

    pub fn has_errors(&self) -> bool {
        self.had_error
    }

    fn push(&mut self, severity: Severity, paths: &[&str], message: String) {
        self.diags.push(Diagnostic {
            severity,
            spoke: Some(self.spoke.to_string()),
            rule: Some(self.index.clone()),
            strategy: Some(self.rule.strategy),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            message,
        });
    }

    /// Reports an error; the rule will not run and no plan is produced.
    pub fn error(&mut self, paths: &[&str], message: impl Into<String>) {
        self.had_error = true;
        self.push(Severity::Error, paths, message.into());
    }

    pub fn warn(&mut self, paths: &[&str], message: impl Into<String>) {
        self.push(Severity::Warning, paths, message.into());
    }

    /// Parses a dotted path from the params field `field` (e.g. `fieldRename.hubPath`).
    pub fn path(&mut self, field: &str, dotted: &str) -> Option<Path> {
        match Path::parse(dotted) {
            Ok(p) => Some(p),
            Err(e) => {
                self.error(&[dotted], format!("{field}: {e}"));
                None
            }
        }
    }

    /// Parses and resolves a hub path; reports a missing path with the fields that exist.
    pub fn hub_node(&mut self, field: &str, dotted: &str) -> Option<(Path, &'a Node)> {
        let fs = self.hub;
        let v = self.settings.hub_version.to_string();
        self.resolve(fs, field, dotted, &format!("hub version {v}"))
    }

    pub fn spoke_node(&mut self, field: &str, dotted: &str) -> Option<(Path, &'a Node)> {
        let fs = self.spoke_fs;
        let v = self.spoke.to_string();
        self.resolve(fs, field, dotted, &format!("spoke version {v}"))
    }

    fn resolve(
        &mut self,
        fs: &'a FlatSchema,
        field: &str,
        dotted: &str,
        side: &str,
    ) -> Option<(Path, &'a Node)> {
        let path = self.path(field, dotted)?;
        let scope = if self.depth > 0 { " items" } else { "" };
        match fs.resolve(dotted) {
            Resolved::Node(n) => Some((path, n)),
            Resolved::Missing { parent } => {
                let known = fs.children(&parent);
                let hint = if known.is_empty() {
                    String::new()
                } else {
                    let at = if parent.is_empty() { "the top".to_string() } else { parent.clone() };
                    format!(" (fields at {at}: {})", known.join(", "))
                };
                let guess = match closest_declared(fs, dotted) {
                    Some(near) => format!("; did you mean {near}?"),
                    None => "; fix the path".to_string(),
                };
                self.error(&[dotted], format!("{field}: not in the schema of {side}{scope}{hint}{guess}"));
                None
            }
            Resolved::InsideLeaf { unit, node } => {
                self.error(
                    &[dotted],
                    format!(
                        "{field}: goes inside {unit}, a {} in {side}{scope}; rules address declared fields only — use ForEach for array items or claim {unit} as a whole",
                        node.describe()
                    ),
                );
                None
            }
        }
    }

    /// Compiles item- or branch-relative rules against nested schemas, one level deeper.
    pub fn compile_nested(
        &mut self,
        rules: &[ConversionRule],
        hub: &FlatSchema,
        spoke: &FlatSchema,
    ) -> Option<NestedScope> {
        if self.depth + 1 > MAX_NESTING {
            self.error(
                &[],
                format!("nested rules go deeper than {MAX_NESTING} levels; flatten the inner rules into the outer scope"),
            );
            return None;
        }
        let out = compile_scope(
            self.settings,
            self.spoke,
            rules,
            hub,
            spoke,
            &self.index,
            self.depth + 1,
            self.diags,
        );
        if out.had_errors {
            self.had_error = true;
            return None;
        }
        Some(NestedScope { plan: out.plan, verdict: out.verdict })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(
                json!({"a": {"type": "integer"}, "same": {"type": "string"}, "hubOnly": {"type": "string"}}),
            ),
            obj_schema(
                json!({"b": {"type": "integer"}, "same": {"type": "string"}, "spokeOnly": {"type": "boolean"}}),
            ),
        )
    }

    fn rename_ab() -> serde_json::Value {
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}})
    }

    fn compile_spec(spec: serde_json::Value) -> Compiled {
        let (h, s) = schemas();
        compile(&serde_json::from_value(spec).unwrap(), &crd(&h, &s))
    }

    fn messages(c: &Compiled) -> String {
        c.report.diagnostics.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn hub_must_be_the_storage_version() {
        let c = compile_spec(json!({"hubVersion": "v1", "spokes": [{"version": "v2", "rules": []}]}));
        assert!(messages(&c).contains("hubVersion v1 is not the storage version of CustomResourceDefinition dbs.example.org; set hubVersion: v2"), "{}", messages(&c));
        let c = compile_spec(json!({"hubVersion": "v9", "spokes": [{"version": "v1", "rules": []}]}));
        assert!(messages(&c).contains("hubVersion \"v9\" is not a version of CustomResourceDefinition dbs.example.org (it has v1, v2)"), "{}", messages(&c));
        assert!(c.plan.is_none());
    }

    #[test]
    fn spoke_list_errors() {
        let c = compile_spec(json!({"hubVersion": "v2", "spokes": []}));
        assert!(messages(&c).contains("spokes is empty"));
        assert!(messages(&c).contains(
            "spoke v1: version v1 of CustomResourceDefinition dbs.example.org is served but has no spoke in the config: add a spoke for v1 (an empty rules list copies identical fields), or, to retire v1, stop serving it in the target first (set served: false on v1), then remove its spoke"
        ), "{}", messages(&c));
        let c = compile_spec(
            json!({"hubVersion": "v2", "spokes": [{"version": "v2", "rules": []}, {"version": "v1", "rules": [rename_ab()]}, {"version": "v1", "rules": []}, {"version": "v7", "rules": []}]}),
        );
        let m = messages(&c);
        assert!(m.contains("spoke v2: a spoke cannot be the hub version"), "{m}");
        assert!(m.contains("spoke v1: spoke listed twice"), "{m}");
        assert!(m.contains("spoke v7: CustomResourceDefinition dbs.example.org has no version v7"), "{m}");
    }

    /// Retiring a version goes unserve first, then drop the spoke; each message names the
    /// next step (the reference takes them in the other order).
    #[test]
    fn retiring_a_version_names_the_next_step() {
        let same = obj_schema(json!({"same": {"type": "string"}}));
        let (h, s) = (same.clone(), same);
        let unserved = Target::from_value(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "dbs.example.org"},
            "spec": {"group": "example.org", "names": {"kind": "DB", "plural": "dbs"}, "scope": "Namespaced",
                "versions": [
                    {"name": "v1", "served": false, "storage": false, "schema": {"openAPIV3Schema": s}},
                    {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": h}}]}}))
        .unwrap();
        let spec = |spokes: serde_json::Value| -> dco_api::config::ConversionSpec {
            serde_json::from_value(json!({"hubVersion": "v2", "spokes": spokes})).unwrap()
        };
        // Step 1 done (v1 unserved), spoke still there: compiles, with the hint for step 2.
        let c = compile(&spec(json!([{"version": "v1", "rules": []}])), &unserved);
        assert!(c.plan.is_some(), "{}", messages(&c));
        let hint = c.report.warnings().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert!(hint.contains("spoke v1: version v1 of CustomResourceDefinition dbs.example.org is no longer served: its spoke can now be removed, the last step of retiring v1, once no object is stored at v1"), "{hint}");
        // A served version's spoke gives no such hint.
        let c =
            compile_spec(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rename_ab()]}]}));
        assert!(!messages(&c).contains("no longer served"), "{}", messages(&c));
    }

    #[test]
    fn config_level_errors() {
        let c =
            compile_spec(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rename_ab()]}],
            "unmappedFieldPolicy": "Warn", "conversionReviewVersions": ["v2"]}));
        let m = messages(&c);
        assert!(m.contains("unmappedFieldPolicy Warn needs unmappedFieldReason"), "{m}");
        assert!(m.contains("conversionReviewVersions has \"v2\"; only v1 and v1beta1 exist"), "{m}");
    }

    #[test]
    fn params_block_must_match_the_strategy() {
        let c = compile_spec(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
            {"strategy": "FieldRename"},
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}, "enumRemap": {"path": "spec.a", "mapping": []}}]}]}));
        let m = messages(&c);
        assert!(
            m.contains(
                "spoke v1, rule 0 (FieldRename): strategy FieldRename needs its params block `fieldRename`"
            ),
            "{m}"
        );
        assert!(m.contains("spoke v1, rule 1 (FieldRename): params block `enumRemap` does not belong to strategy FieldRename; remove it"), "{m}");
    }

    #[test]
    fn uncovered_fields_are_errors_or_dropped_with_warn() {
        let c =
            compile_spec(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rename_ab()]}]}));
        let m = messages(&c);
        assert!(m.contains("spoke v1 spec.hubOnly: hub field is not covered"), "{m}");
        assert!(m.contains("spoke v1 spec.spokeOnly: spoke field is not covered"), "{m}");
        assert!(c.plan.is_none());
        let st = &c.report.spokes[0];
        assert_eq!(st.fields_uncovered_hub, vec!["spec.hubOnly"]);
        assert_eq!(st.fields_uncovered_spoke, vec!["spec.spokeOnly"]);

        let c =
            compile_spec(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rename_ab()]}],
            "unmappedFieldPolicy": "Warn", "unmappedFieldReason": "retired fields"}));
        let plan = c.plan.clone().expect("Warn compiles");
        assert!(!c.report.overall_lossless);
        assert_eq!(c.report.spokes[0].lossless, LosslessVerdict { hub_to_spoke: false, spoke_to_hub: false });
        assert!(
            c.report.warnings().any(|d| d.to_string().contains("spec.hubOnly: hub field is not covered")
                && d.to_string().contains("dropped"))
        );
        let s = plan.convert(&hub_obj(json!({"a": 1, "same": "x", "hubOnly": "gone"})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"b": 1, "same": "x"})));
        let h = plan.convert(&spoke_obj(json!({"b": 1, "spokeOnly": true})), HUB_AV).unwrap();
        assert_eq!(h, hub_obj(json!({"a": 1})));
    }

    /// One mistake, one error: a rule that fails keeps the fields it names (and, for a
    /// misspelt path, the field it most likely means) out of the "not covered" scan.
    #[test]
    fn one_bad_rule_is_one_error() {
        let errors = |rules: serde_json::Value| {
            let c = compile_spec(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}));
            assert!(c.plan.is_none());
            c.report.errors().map(ToString::to_string).collect::<Vec<_>>()
        };
        let delete_spoke_only = json!({"strategy": "Delete", "delete": {"path": "spec.spokeOnly", "existsOn": "Spoke"}, "acknowledgeLossy": true, "reason": "r"});
        let delete_hub_only = json!({"strategy": "Delete", "delete": {"path": "spec.hubOnly", "existsOn": "Hub"}, "acknowledgeLossy": true, "reason": "r"});
        // A misspelt path: its error says what was meant; spec.a is not reported again.
        let e = errors(json!([
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.aa", "spokePath": "spec.b"}},
            delete_hub_only, delete_spoke_only]));
        assert_eq!(
            e,
            vec![
                "spoke v1, rule 0 (FieldRename) spec.aa: fieldRename.hubPath: not in the schema of hub version v2 (fields at spec: a, hubOnly, same); did you mean spec.a?"
            ],
            "{e:#?}"
        );
        // A lossy rule without acknowledgeLossy: one error, not one more per field.
        let e = errors(json!([rename_ab(),
            {"strategy": "Delete", "delete": {"path": "spec.hubOnly", "existsOn": "Hub"}},
            delete_spoke_only]));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(e[0].starts_with("spoke v1, rule 1 (Delete) spec.hubOnly: rule is lossy"), "{e:#?}");
        // A bad params block names no path: the fields it would have named are reported.
        let e = errors(json!([rename_ab(), {"strategy": "Delete"}, delete_spoke_only]));
        assert_eq!(e.len(), 2, "{e:#?}");
        // A claim clash: the second rule's fields are the first's, reported once.
        let e = errors(json!([rename_ab(), rename_ab(), delete_hub_only, delete_spoke_only]));
        assert_eq!(e.len(), 2, "hub and spoke side of the clash: {e:#?}");
        assert!(e.iter().all(|m| m.contains("already claimed by rule 0")), "{e:#?}");
    }

    #[test]
    fn closest_declared_guesses_one_field_or_none() {
        let (h, _) = schemas();
        let fs = FlatSchema::object(&h);
        assert_eq!(closest_declared(&fs, "spec.hubonly").as_deref(), Some("spec.hubOnly"));
        assert_eq!(closest_declared(&fs, "spec.sme.x").as_deref(), Some("spec.same"));
        assert_eq!(closest_declared(&fs, "spec.completelyDifferent"), None);
        assert_eq!(closest_declared(&fs, "spec.a"), None, "declared: nothing to guess");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }

    #[test]
    fn differing_types_explain_the_fix() {
        let hub = obj_schema(json!({"n": {"type": "integer"}, "e": {"type": "string", "enum": ["a"]}}));
        let spoke = obj_schema(json!({"n": {"type": "string"}, "e": {"type": "string", "enum": ["b"]}}));
        let m = all_errors(&compile_rules(&hub, &spoke, json!([])));
        assert!(m.contains("spec.n: hub field differs between hub and spoke (integer vs string) — TypeCoerce converts between scalar types"), "{m}");
        assert!(m.contains("spec.e: hub field differs between hub and spoke (enum value \"a\" is not allowed on the other side) — EnumRemap maps enum values"), "{m}");
        assert!(!m.contains("spoke field is not covered"), "reported once: {m}");
    }

    #[test]
    fn when_limits_a_rule_and_warns() {
        let hub =
            obj_schema(json!({"kind": {"type": "string"}, "size": {"type": "string", "enum": ["Small"]}}));
        let spoke =
            obj_schema(json!({"kind": {"type": "string"}, "size": {"type": "string", "enum": ["S"]}}));
        let c = compile_rules(
            &hub,
            &spoke,
            json!([{"strategy": "EnumRemap", "enumRemap": {"path": "spec.size", "mapping": [{"hub": "Small", "spoke": "S"}]},
            "when": {"path": "spec.kind", "equals": "db"}}]),
        );
        assert!(messages(&c).contains("rule applies only when spec.kind equals \"db\""), "{}", messages(&c));
        let plan = c.plan.expect("compiles");
        assert_eq!(
            plan.convert(&hub_obj(json!({"kind": "db", "size": "Small"})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"kind": "db", "size": "S"}))
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"kind": "web", "size": "Small"})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"kind": "web", "size": "Small"}))
        );
        let c = compile_rules(
            &hub,
            &spoke,
            json!([{"strategy": "EnumRemap", "enumRemap": {"path": "spec.size", "mapping": [{"hub": "Small", "spoke": "S"}]},
            "when": {"path": "spec..kind", "equals": "db"}}]),
        );
        assert!(
            first_error(&c).contains("when.path: path `spec..kind` has an empty segment"),
            "{}",
            first_error(&c)
        );
    }

    #[test]
    fn rule_results_and_status_shape() {
        let (h, s) = schemas();
        let c = compile(
            &spec_with(
                json!([rename_ab(), {"strategy": "Delete", "delete": {"path": "spec.hubOnly", "existsOn": "Hub"}, "acknowledgeLossy": true},
                {"strategy": "DefaultValue", "defaultValue": {"path": "spec.spokeOnly", "existsOn": "Spoke", "default": true}, "acknowledgeLossy": true, "reason": "new"}]),
            ),
            &crd(&h, &s),
        );
        let plan = c.plan.clone().expect("compiles");
        let st = &c.report.spokes[0];
        assert_eq!(st.version, "v1");
        assert_eq!(st.rule_results.len(), 3);
        assert_eq!(st.rule_results[0].hub_paths, vec!["spec.a"]);
        assert_eq!(st.rule_results[0].spoke_paths, vec!["spec.b"]);
        assert!(st.rule_results[0].verdict.hub_to_spoke && st.rule_results[0].verdict.spoke_to_hub);
        assert!(!st.rule_results[1].verdict.hub_to_spoke);
        assert_eq!(
            st.rule_results[1].warnings,
            vec!["acknowledgeLossy is set without a reason; say why the loss is acceptable"]
        );
        assert!(!st.rule_results[2].verdict.spoke_to_hub);
        assert_eq!(st.lossless, LosslessVerdict { hub_to_spoke: false, spoke_to_hub: false });
        assert_eq!(plan.versions(), vec!["v2", "v1"]);
        assert_eq!(plan.hash().len(), 64);
        assert_eq!(c.report.schema_hash, crd(&h, &s).schema_hash());
    }

    #[test]
    fn plan_hash_changes_with_the_spec_only() {
        let (h, s) = schemas();
        let rules = json!([rename_ab(), {"strategy": "Delete", "delete": {"path": "spec.hubOnly", "existsOn": "Hub"}, "acknowledgeLossy": true, "reason": "r"},
            {"strategy": "Delete", "delete": {"path": "spec.spokeOnly", "existsOn": "Spoke"}, "acknowledgeLossy": true, "reason": "r"}]);
        let a = compile(&spec_with(rules.clone()), &crd(&h, &s)).plan.unwrap().hash();
        let b = compile(&spec_with(rules.clone()), &crd(&h, &s)).plan.unwrap().hash();
        assert_eq!(a, b);
        let mut other = rules;
        other[1]["reason"] = json!("changed");
        assert_ne!(a, compile(&spec_with(other), &crd(&h, &s)).plan.unwrap().hash());
    }

    #[test]
    fn spoke_to_spoke_goes_through_the_hub() {
        let hub = obj_schema(json!({"a": {"type": "integer"}}));
        let v1 = obj_schema(json!({"b": {"type": "integer"}}));
        let v0 = obj_schema(json!({"c": {"type": "integer"}}));
        let t = Target::from_value(&json!({
            "apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition",
            "metadata": {"name": "xdbs.example.org"},
            // The kind of the objects `obj` builds: a plan converts only its target's kinds.
            "spec": {"group": "example.org", "names": {"kind": "DB", "plural": "xdbs"}, "versions": [
                {"name": "v0", "served": true, "referenceable": false, "schema": {"openAPIV3Schema": v0}},
                {"name": "v1", "served": true, "referenceable": false, "schema": {"openAPIV3Schema": v1}},
                {"name": "v2", "served": true, "referenceable": true, "schema": {"openAPIV3Schema": hub}}]}}))
        .unwrap();
        let spec: ConversionSpec = serde_json::from_value(json!({"hubVersion": "v2", "spokes": [
            {"version": "v1", "rules": [rename_ab()]},
            {"version": "v0", "rules": [{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.c"}}]}]})).unwrap();
        let plan = compile(&spec, &t).plan.expect("compiles");
        let out = plan.convert(&obj("example.org/v1", json!({"b": 7})), "example.org/v0").unwrap();
        assert_eq!(out, obj("example.org/v0", json!({"c": 7})));
        let same = plan.convert(&obj("example.org/v1", json!({"b": 7})), "example.org/v1").unwrap();
        assert_eq!(same, obj("example.org/v1", json!({"b": 7})));
        let err = plan.convert(&obj("example.org/v1", json!({})), "example.org/v5").unwrap_err().to_string();
        assert_eq!(
            err,
            "DB default/db1: desiredAPIVersion: version v5 is neither the hub nor a spoke of target xdbs.example.org (versions: v2, v1, v0)"
        );
        let err = plan.convert(&obj("other.org/v1", json!({})), "example.org/v2").unwrap_err().to_string();
        assert!(err.contains("apiVersion: \"other.org/v1\" is not in group example.org"), "{err}");
    }
}
