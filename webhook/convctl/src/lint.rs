//! `convctl lint [PATHS...]`: every conversion config in the given files and trees, paired with
//! the CRD or XRD of the same tree that it names (`spec.targetCRD.name` / `spec.targetXRD.name`),
//! compiled and reported per file (docs/convctl.md, "lint"). Offline: no cluster, no client.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use dco_api::config::TargetKind;
use dco_engine::{Target, compile};
use serde_json::{Value, json};

use crate::diff::{config_kind_name, emit_report, target_kind_label};
use crate::output::{Finding, Location, OutputArgs, Report, Severity};
use crate::{CliError, load};

/// Bounds of a walk: a lint of `/` must end, and a 2 GB log named `.yaml` is not a manifest.
pub const MAX_FILES: usize = 20_000;
pub const MAX_FILE_BYTES: u64 = 8 << 20;
const MAX_DEPTH: usize = 32;

#[derive(Args)]
pub struct LintArgs {
    /// Files or directories to search (recursively; hidden directories are skipped). Default: `.`.
    #[arg(value_name = "PATHS")]
    pub paths: Vec<PathBuf>,
    /// Further trees to search for CRDs and XRDs only (schemas kept apart from configs).
    #[arg(long, value_name = "DIR")]
    pub schema_dir: Vec<PathBuf>,
    /// Skip files and directories whose path or name matches this glob (`*` and `?` within one
    /// path segment; repeatable), e.g. `--exclude 'vendor' --exclude '*.generated.yaml'`.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Which findings fail the run: `error` (default), `warn` (warnings too), `none` (report only).
    #[arg(long, value_enum, default_value_t = LintFailOn::Error)]
    pub fail_on: LintFailOn,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LintFailOn {
    None,
    Warn,
    Error,
}

/// A document the walk recognised.
#[derive(Clone, Debug)]
pub struct Found {
    pub file: PathBuf,
    /// 1-based index among the file's non-empty documents.
    pub document: usize,
    pub kind: TargetKind,
    /// A config (true) or a schema (false).
    pub is_config: bool,
    /// The schema's `metadata.name`, or the target a config names.
    pub name: String,
    /// A config's `metadata.name`.
    pub config_name: String,
    pub value: Value,
}

/// What a walk found: configs, schemas, and files that look like configs but do not parse.
#[derive(Default)]
pub struct Walk {
    pub found: Vec<Found>,
    pub unreadable: Vec<Finding>,
    pub files: usize,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |cur, k| cur.get(k)).and_then(Value::as_str)
}

/// Sorted YAML/JSON files under `root` (or `root` itself), hidden directories skipped.
/// `pattern` matches `text` (`*`: any run of characters but `/`; `?`: one such character).
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point, linear in practice and bounded by p × t.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' && t[ti] != '/' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(sp) = star.filter(|_| t[mark] != '/') {
            pi = sp + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn excluded(path: &Path, exclude: &[String]) -> bool {
    let full = path.to_string_lossy();
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let full = full.strip_prefix("./").unwrap_or(&full);
    exclude.iter().any(|g| glob(g, full) || glob(g, &name))
}

fn files_under(
    root: &Path,
    out: &mut Vec<PathBuf>,
    depth: usize,
    exclude: &[String],
) -> Result<(), CliError> {
    let meta = fs::symlink_metadata(root)
        .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", root.display())))?;
    if meta.is_file() || (meta.file_type().is_symlink() && root.is_file()) {
        out.push(root.to_path_buf());
        return Ok(());
    }
    // A symlinked directory is not followed: a link back up the tree would never end.
    if !meta.is_dir() || depth > MAX_DEPTH {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = fs::read_dir(root)
        .map_err(|e| CliError::Usage(format!("cannot read directory {}: {e}", root.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let md = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(_) => continue,
        };
        if excluded(&p, exclude) {
            continue;
        }
        if md.is_dir() {
            if !name.starts_with('.') {
                files_under(&p, out, depth + 1, exclude)?;
            }
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json")) {
            out.push(p);
        }
        if out.len() > MAX_FILES {
            return Err(CliError::Usage(format!(
                "more than {MAX_FILES} YAML/JSON files under {}; lint a narrower path",
                root.display()
            )));
        }
    }
    Ok(())
}

fn classify(doc: &Value) -> Option<(TargetKind, bool)> {
    let kind = str_at(doc, &["kind"])?;
    let api = str_at(doc, &["apiVersion"]).unwrap_or_default();
    match kind {
        "XRDConversionConfig" => Some((TargetKind::Xrd, true)),
        "CRDConversionConfig" => Some((TargetKind::Crd, true)),
        "CompositeResourceDefinition" if api.starts_with("apiextensions.crossplane.io/") => {
            Some((TargetKind::Xrd, false))
        }
        "CustomResourceDefinition" if api.starts_with("apiextensions.k8s.io/") => {
            Some((TargetKind::Crd, false))
        }
        _ => None,
    }
}

/// Walks `roots`, recognising configs and schemas by their apiVersion and kind (never by file
/// name). A file that does not parse is skipped unless it mentions a conversion config or a
/// resource definition, which is then reported: a broken config must not pass as "no config
/// found", nor a broken definition as "unpaired".
pub fn walk(
    roots: &[PathBuf],
    schemas_only: bool,
    exclude: &[String],
    into: &mut Walk,
) -> Result<(), CliError> {
    for root in roots {
        let mut files = Vec::new();
        files_under(root, &mut files, 0, exclude)?;
        for file in files {
            into.files += 1;
            let size = fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
            if size > MAX_FILE_BYTES {
                continue;
            }
            let Ok(text) = fs::read_to_string(&file) else { continue };
            let docs = match load::documents(&file) {
                Ok(d) => d,
                Err(e) => {
                    if text.contains("ConversionConfig") || text.contains("ResourceDefinition") {
                        into.unreadable.push(Finding {
                            rule: "parse-error".into(),
                            severity: Severity::Error,
                            message: e.to_string(),
                            fix: Some(
                                "fix the YAML syntax; convctl validate --config FILE shows the place".into(),
                            ),
                            location: Location {
                                file: Some(file.display().to_string()),
                                ..Location::default()
                            },
                            fails: true,
                        });
                    }
                    continue;
                }
            };
            for (i, doc) in docs.into_iter().enumerate() {
                let Some((kind, is_config)) = classify(&doc) else { continue };
                if is_config && schemas_only {
                    continue;
                }
                let name = if is_config {
                    let field = if kind == TargetKind::Xrd { "targetXRD" } else { "targetCRD" };
                    str_at(&doc, &["spec", field, "name"]).unwrap_or_default()
                } else {
                    str_at(&doc, &["metadata", "name"]).unwrap_or_default()
                };
                into.found.push(Found {
                    file: file.clone(),
                    document: i + 1,
                    kind,
                    is_config,
                    name: name.to_string(),
                    config_name: str_at(&doc, &["metadata", "name"]).unwrap_or("<unnamed>").to_string(),
                    value: doc,
                });
            }
        }
    }
    Ok(())
}

/// One config's lint result.
struct Pair {
    config: Found,
    schema: Option<String>,
    status: &'static str,
    findings: Vec<Finding>,
}

fn at(c: &Found, path: Option<String>) -> Location {
    Location {
        file: Some(c.file.display().to_string()),
        document: Some(c.document),
        object: Some(format!("{} {}", config_kind_name(c.kind), c.config_name)),
        path,
        ..Location::default()
    }
}

fn error(rule: &str, message: String, fix: Option<String>, location: Location) -> Finding {
    Finding { rule: rule.into(), severity: Severity::Error, message, fix, location, fails: true }
}

/// The config path of a diagnostic: `spec.spokes[i].rules[j]`, `spec.spokes[i]` or `spec`.
fn diag_path(spec: &dco_api::config::ConversionSpec, d: &dco_engine::Diagnostic) -> String {
    let Some(v) = &d.spoke else {
        // A config-wide finding starts with the field it is about (`hubVersion "v9" is not…`).
        let first = d.message.split([' ', ':']).next().unwrap_or_default();
        const FIELDS: [&str; 6] = [
            "hubVersion",
            "spokes",
            "unmappedFieldPolicy",
            "unmappedFieldReason",
            "conversionReviewVersions",
            "driftPolicy",
        ];
        return match FIELDS.iter().find(|f| **f == first) {
            Some(f) => format!("spec.{f}"),
            None => "spec".into(),
        };
    };
    let Some(si) = spec.spokes.iter().position(|s| &s.version == v) else { return "spec.spokes".into() };
    match d.rule.as_deref() {
        Some([r, ..]) => format!("spec.spokes[{si}].rules[{r}]"),
        _ => format!("spec.spokes[{si}]"),
    }
}

fn lint_one(
    c: &Found,
    schemas: &BTreeMap<(&'static str, String), Found>,
    first_of: &BTreeMap<(&'static str, String), usize>,
    idx: usize,
    peers: &[String],
) -> Pair {
    let mut p = Pair { config: c.clone(), schema: None, status: "ok", findings: Vec::new() };
    let label = target_kind_label(c.kind);
    let key = (target_kind_label(c.kind), c.name.clone());
    let api = str_at(&c.value, &["apiVersion"]).unwrap_or_default();
    if api != load::CONFIG_API_VERSION {
        p.status = "invalid";
        p.findings.push(error(
            "api-version",
            format!("apiVersion is {api:?}; dco reads {}", load::CONFIG_API_VERSION),
            Some(format!(
                "change apiVersion to {}: a reference-project config moves over by that one change",
                load::CONFIG_API_VERSION
            )),
            at(c, Some("apiVersion".into())),
        ));
        return p;
    }
    if c.name.is_empty() {
        let field = if c.kind == TargetKind::Xrd { "spec.targetXRD.name" } else { "spec.targetCRD.name" };
        p.status = "invalid";
        p.findings.push(error(
            "missing-target",
            format!("{field} is missing"),
            Some(format!("set {field} to the {label}'s metadata.name")),
            at(c, Some(field.into())),
        ));
        return p;
    }
    if first_of.get(&key).is_some_and(|&f| f != idx) {
        let me = format!("{}#{}", c.file.display(), c.document);
        p.status = "duplicate";
        p.findings.push(error(
            "duplicate-target",
            format!(
                "{label} {} is also the target of {}{}; the operator takes one config per target and refuses the others at admission",
                c.name,
                peers.iter().filter(|p| **p != me).take(3).map(String::as_str).collect::<Vec<_>>().join(", "),
                if peers.len() > 4 { format!(" and {} more", peers.len() - 4) } else { String::new() }
            ),
            Some("keep one config per target: merge the spokes into one config".into()),
            at(c, None),
        ));
        return p;
    }
    let Some(schema) = schemas.get(&key) else {
        p.status = "unpaired";
        p.findings.push(error(
            "unpaired",
            format!(
                "no {label} named {} in the searched paths, so the config was not checked against a schema",
                c.name
            ),
            Some("add the definition to the tree, or pass --schema-dir DIR where it lives".into()),
            at(c, None),
        ));
        return p;
    };
    p.schema = Some(format!("{}#{}", schema.file.display(), schema.document));
    let target = match Target::from_value(&schema.value) {
        Ok(t) => t,
        Err(e) => {
            p.status = "invalid";
            let loc = Location {
                file: Some(schema.file.display().to_string()),
                document: Some(schema.document),
                object: Some(format!("{label} {}", schema.name)),
                ..Location::default()
            };
            p.findings.push(error("bad-target", e.to_string(), None, loc));
            return p;
        }
    };
    // The config is read the way validate reads it, so lint is never laxer than validate.
    let config = match load::config(&c.file) {
        Ok(cfg) => cfg,
        Err(e) => {
            p.status = "invalid";
            p.findings.push(error("config-error", e.to_string(), None, at(c, None)));
            return p;
        }
    };
    let compiled = compile(&config.spec, &target);
    for d in &compiled.report.diagnostics {
        let severity = if d.is_error() { Severity::Error } else { Severity::Warning };
        p.findings.push(Finding {
            rule: if d.is_error() { "compile-error".into() } else { "compile-warning".into() },
            severity,
            message: d.to_string(),
            fix: None,
            location: at(c, Some(diag_path(&config.spec, d))),
            fails: d.is_error(),
        });
    }
    if compiled.report.has_errors() {
        p.status = "invalid";
    }
    p
}

pub fn run(args: &LintArgs) -> Result<(), CliError> {
    let roots = if args.paths.is_empty() { vec![PathBuf::from(".")] } else { args.paths.clone() };
    let mut w = Walk::default();
    walk(&roots, false, &args.exclude, &mut w)?;
    walk(&args.schema_dir, true, &args.exclude, &mut w)?;
    // The first definition of a name wins (the walk is sorted, so this is deterministic).
    let mut schemas: BTreeMap<(&'static str, String), Found> = BTreeMap::new();
    for f in w.found.iter().filter(|f| !f.is_config) {
        schemas.entry((target_kind_label(f.kind), f.name.clone())).or_insert_with(|| f.clone());
    }
    let configs: Vec<&Found> = w.found.iter().filter(|f| f.is_config).collect();
    let mut first_of: BTreeMap<(&'static str, String), usize> = BTreeMap::new();
    let mut peers: BTreeMap<(&'static str, String), Vec<String>> = BTreeMap::new();
    // Only configs dco reads compete for a target: one under the reference's apiVersion is
    // reported as that, not as a second config.
    for (i, c) in configs.iter().enumerate() {
        if str_at(&c.value, &["apiVersion"]) != Some(load::CONFIG_API_VERSION) {
            continue;
        }
        let key = (target_kind_label(c.kind), c.name.clone());
        first_of.entry(key.clone()).or_insert(i);
        peers.entry(key).or_default().push(format!("{}#{}", c.file.display(), c.document));
    }
    let pairs: Vec<Pair> = configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            lint_one(
                c,
                &schemas,
                &first_of,
                i,
                peers.get(&(target_kind_label(c.kind), c.name.clone())).map_or(&[][..], Vec::as_slice),
            )
        })
        .collect();

    let mut findings: Vec<Finding> = w.unreadable.clone();
    for p in &pairs {
        findings.extend(p.findings.iter().cloned());
    }
    add_lines(&mut findings);
    for f in &mut findings {
        f.fails = match (args.fail_on, f.severity) {
            (LintFailOn::None, _) => false,
            (_, Severity::Error) => true,
            (LintFailOn::Warn, Severity::Warning) => true,
            _ => false,
        };
    }
    let count = |s: &str| pairs.iter().filter(|p| p.status == s).count();
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    let warnings = findings.iter().filter(|f| f.severity == Severity::Warning).count();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "convctl lint: {} config(s), {} schema(s) in {} file(s)\n",
        configs.len(),
        schemas.len(),
        w.files
    );
    if pairs.is_empty() {
        let _ = writeln!(table, "no conversion configs found; check the paths");
    } else {
        let rows: Vec<[String; 5]> = pairs
            .iter()
            .map(|p| {
                [
                    p.status.to_uppercase(),
                    format!("{}#{}", p.config.file.display(), p.config.document),
                    p.config.name.clone(),
                    p.schema.clone().unwrap_or_else(|| "-".into()),
                    p.findings.len().to_string(),
                ]
            })
            .collect();
        crate::analyze::table(&mut table, ["STATUS", "CONFIG", "TARGET", "SCHEMA", "FINDINGS"], &rows);
    }
    let mut by_file: BTreeMap<String, Vec<&Finding>> = BTreeMap::new();
    for f in &findings {
        by_file.entry(f.location.file.clone().unwrap_or_default()).or_default().push(f);
    }
    for (file, fs) in by_file {
        let _ = writeln!(table, "\n{file}:");
        for f in fs {
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            let mut place = String::new();
            if let Some(d) = f.location.document {
                let _ = write!(place, "document {d}");
            }
            if let Some(l) = f.location.line {
                let _ = write!(place, "{}line {l}", if place.is_empty() { "" } else { ", " });
            }
            if let Some(p) = &f.location.path {
                let _ = write!(place, "{}{p}", if place.is_empty() { "" } else { ", " });
            }
            let _ = writeln!(table, "  {sev:<7} {place}: {}", f.message);
            if let Some(fix) = &f.fix {
                let _ = writeln!(table, "          fix: {fix}");
            }
        }
    }
    let summary_line = format!(
        "lint: {} config(s): {} ok, {} invalid, {} unpaired, {} duplicate; {errors} error(s), {warnings} warning(s)",
        pairs.len(),
        count("ok"),
        count("invalid"),
        count("unpaired"),
        count("duplicate")
    );
    let results: Vec<Value> = pairs
        .iter()
        .map(|p| {
            json!({
                "config": p.config.file.display().to_string(),
                "document": p.config.document,
                "configName": p.config.config_name,
                "kind": target_kind_label(p.config.kind),
                "target": p.config.name,
                "schema": p.schema,
                "status": p.status,
                "findings": p.findings.len(),
            })
        })
        .collect();
    let summary = json!({
        "files": w.files,
        "configs": pairs.len(),
        "schemas": schemas.len(),
        "ok": count("ok"),
        "invalid": count("invalid"),
        "unpaired": count("unpaired"),
        "duplicate": count("duplicate"),
        "errors": errors,
        "warnings": warnings,
        "results": results,
    });
    let report = Report { command: "lint".into(), findings, cases: Vec::new(), summary, table, summary_line };
    emit_report(&report, &args.out)
}

/// One step of a config path: `spokes` or `[1]`.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            out.push(Step::Key(key));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                out.push(Step::Index(i));
            }
        }
    }
    out
}

/// Column of a line's key (after any `- ` item markers), and the key itself.
fn key_at(line: &str) -> Option<(usize, &str)> {
    let mut col = line.len() - line.trim_start().len();
    let mut rest = line.trim_start();
    while let Some(r) = rest.strip_prefix("- ") {
        col += 2 + (r.len() - r.trim_start().len());
        rest = r.trim_start();
    }
    let (key, _) = rest.split_once(':')?;
    let key = key.trim_matches(|c| c == '"' || c == '\'');
    (!key.is_empty() && !key.starts_with('#') && !key.contains(' ')).then_some((col, key))
}

fn dash_at(line: &str) -> Option<usize> {
    let t = line.trim_start();
    (t == "-" || t.starts_with("- ")).then(|| line.len() - t.len())
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn blank(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// The 1-based line of `path` (`spec.spokes[1].rules[0]`) in the `document`-th (1-based, empty
/// documents not counted) YAML document of `text`, for block-style YAML; the deepest step it
/// can follow when the rest is written in flow style. A best effort for locations in reports:
/// None when not even the first step is found.
pub fn line_of(text: &str, document: usize, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut docs: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for (i, l) in lines.iter().enumerate().chain(std::iter::once((lines.len(), &"---"))) {
        if *l == "---" || l.starts_with("--- ") {
            if lines[start..i].iter().any(|l| !blank(l)) {
                docs.push((start, i));
            }
            start = i + 1;
        }
    }
    let (mut lo, mut hi) = *docs.get(document.checked_sub(1)?)?;
    let mut found = None;
    for step in steps(path) {
        match step {
            Step::Key(k) => {
                let keys: Vec<(usize, usize, &str)> =
                    (lo..hi).filter_map(|i| key_at(lines[i]).map(|(c, key)| (i, c, key))).collect();
                let Some(col) = keys.iter().map(|k| k.1).min() else { break };
                let Some(&(at, _, _)) = keys.iter().find(|(_, c, key)| *c == col && *key == k) else { break };
                let end = (at + 1..hi)
                    .find(|&i| {
                        !blank(lines[i])
                            && (indent(lines[i]) < col
                                || (indent(lines[i]) == col && dash_at(lines[i]).is_none()))
                    })
                    .unwrap_or(hi);
                found = Some(at + 1);
                (lo, hi) = (at + 1, end);
            }
            Step::Index(n) => {
                let dashes: Vec<(usize, usize)> =
                    (lo..hi).filter_map(|i| dash_at(lines[i]).map(|c| (i, c))).collect();
                let Some(col) = dashes.iter().map(|d| d.1).min() else { break };
                let items: Vec<usize> = dashes.iter().filter(|d| d.1 == col).map(|d| d.0).collect();
                let Some(&at) = items.get(n) else { break };
                let end = items.get(n + 1).copied().unwrap_or_else(|| {
                    (at + 1..hi).find(|&i| !blank(lines[i]) && indent(lines[i]) < col).unwrap_or(hi)
                });
                found = Some(at + 1);
                (lo, hi) = (at, end);
            }
        }
    }
    found
}

/// Fills in `line` (and `document` from a `file#N` label) for findings that name a file and a
/// path, reading each file once.
pub fn add_lines(findings: &mut [Finding]) {
    let mut texts: BTreeMap<String, Option<String>> = BTreeMap::new();
    for f in findings.iter_mut() {
        let (Some(file), Some(path)) = (f.location.file.clone(), f.location.path.clone()) else { continue };
        if f.location.line.is_some() {
            continue;
        }
        let (name, doc) = match file.rsplit_once('#') {
            Some((n, d)) if d.parse::<usize>().is_ok() => (n.to_string(), d.parse().unwrap_or(1)),
            _ => (file.clone(), f.location.document.unwrap_or(1)),
        };
        let text = texts.entry(name.clone()).or_insert_with(|| {
            fs::metadata(&name)
                .ok()
                .filter(|m| m.len() <= MAX_FILE_BYTES)
                .and_then(|_| fs::read_to_string(&name).ok())
        });
        // A schema field is written `spec.versions[0].schema.openAPIV3Schema spec.replicas`.
        let yaml_path = match path.split_once(' ') {
            Some((base, field)) => format!("{base}.properties.{}", field.replace('.', ".properties.")),
            None => path,
        };
        if let Some(line) = text.as_deref().and_then(|t| line_of(t, doc, &yaml_path)) {
            f.location.line = Some(line);
            if f.location.document.is_none() && file.contains('#') {
                f.location.document = Some(doc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{glob, line_of};

    #[test]
    fn globs_match_within_a_segment() {
        assert!(glob("*.yaml", "a.yaml"));
        assert!(!glob("*.yaml", "dir/a.yaml"));
        assert!(glob("dir/*.yaml", "dir/a.yaml"));
        assert!(glob("vendor", "vendor"));
        assert!(glob("v?ndor*", "vendored"));
        assert!(!glob("vendor", "vendors"));
        assert!(glob("*", ""));
        assert!(!glob("a*b", "a/b"));
    }

    const TEXT: &str = "# leading comment\n---\nkind: Other\n---\napiVersion: conversion.dco.rs/v1alpha1\nkind: CRDConversionConfig\nspec:\n  hubVersion: v2\n  spokes:\n    - version: v1\n      rules:\n        - strategy: FieldRename\n          fieldRename: {hubPath: a, spokePath: b}\n        - strategy: TypeCoerce\n          typeCoerce: {path: c}\nstatus: {}\n";

    #[test]
    fn lines_follow_block_yaml_and_stop_at_flow_style() {
        assert_eq!(line_of(TEXT, 2, "apiVersion"), Some(5));
        assert_eq!(line_of(TEXT, 2, "spec.hubVersion"), Some(8));
        assert_eq!(line_of(TEXT, 2, "spec.spokes[0]"), Some(10));
        assert_eq!(line_of(TEXT, 2, "spec.spokes[0].rules[1]"), Some(14));
        assert_eq!(line_of(TEXT, 2, "spec.spokes[0].rules[1].typeCoerce"), Some(15));
        // Inside a flow mapping: the deepest block-style step.
        assert_eq!(line_of(TEXT, 2, "spec.spokes[0].rules[0].fieldRename.hubPath"), Some(13));
        assert_eq!(line_of(TEXT, 1, "kind"), Some(3));
        assert_eq!(line_of(TEXT, 3, "kind"), None);
        assert_eq!(line_of(TEXT, 2, "status"), Some(16));
        assert_eq!(line_of(TEXT, 2, "metadata"), None);
    }

    #[test]
    fn compact_sequences_at_the_key_indentation_are_items() {
        let t = "spec:\n  spokes:\n  - version: v1\n    rules:\n    - strategy: A\n    - strategy: B\n  - version: v2\n";
        assert_eq!(line_of(t, 1, "spec.spokes[1]"), Some(7));
        assert_eq!(line_of(t, 1, "spec.spokes[0].rules[1]"), Some(6));
    }
}
