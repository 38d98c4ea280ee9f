//! Reading the inputs: a conversion config, a CRD or XRD, and sample objects, from YAML or
//! JSON files (multi-document YAML allowed).

use std::fs;
use std::path::Path;

use dco_api::config::{ConversionSpec, TargetKind};
use dco_engine::Target;
use serde_json::Value;

use crate::CliError;
use crate::keys;
use crate::locate::{self, FieldPath, Marks, Seg};

/// The config's apiVersion; a reference-project config moves over by changing only this.
pub const CONFIG_API_VERSION: &str = dco_api::API_VERSION;

/// A conversion config as read from a file.
pub struct Config {
    pub name: String,
    pub kind: TargetKind,
    pub target_name: String,
    pub spec: ConversionSpec,
    /// `file:line:column: document N` of the target's name, for messages about it.
    pub target_place: String,
}

/// One document of a file: its 1-based index, its value and where its fields are.
pub struct Doc {
    pub index: usize,
    pub value: Value,
    pub marks: Marks,
}

/// A file's documents, empty ones skipped.
pub struct Source {
    pub file: String,
    pub docs: Vec<Doc>,
}

impl Source {
    /// `file:line:column: document N` for a field of a document (its nearest marked ancestor).
    pub fn place(&self, doc: &Doc, path: &FieldPath) -> String {
        match doc.marks.find(path) {
            Some(p) => format!("{}:{}:{}: document {}", self.file, p.line, p.column, doc.index),
            None => format!("{}: document {}", self.file, doc.index),
        }
    }
}

/// Every YAML/JSON document in a file, empty documents skipped.
pub fn documents(path: &Path) -> Result<Vec<Value>, CliError> {
    Ok(read(path)?.docs.into_iter().map(|d| d.value).collect())
}

/// Reads a file's documents: a UTF-8 byte-order mark is dropped (editors on Windows write
/// one), a key written twice in one mapping is refused (a value tree would keep the last one
/// without a word), and a tab in the indentation is named as such.
pub fn read(path: &Path) -> Result<Source, CliError> {
    let file = path.display().to_string();
    let bytes = fs::read(path).map_err(|e| CliError::Usage(format!("cannot read {file}: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        CliError::Usage(format!(
            "{file}: not UTF-8 text (byte {}); save it as UTF-8",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    parse(&file, text)
}

/// Parses `text` (the contents of `file`) into its documents.
pub fn parse(file: &str, text: &str) -> Result<Source, CliError> {
    let mut values = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value =
            <Value as serde::Deserialize>::deserialize(doc).map_err(|e| yaml_error(file, text, i + 1, &e))?;
        values.push(value);
    }
    let located = locate::locate(text).unwrap_or_default();
    if let Some(d) = located.duplicates.first() {
        let key = d.path.0.last().map(|s| FieldPath(vec![s.clone()]).to_string()).unwrap_or_default();
        return Err(CliError::Usage(format!(
            "{file}:{}:{}: document {}: key `{key}` is written twice in one mapping (`{}`, lines {} and {}); keep one",
            d.second.line, d.second.column, d.document, d.path, d.first.line, d.second.line
        )));
    }
    // The event parser and the value parser count documents alike; if they ever do not, the
    // values stand and only the lines are lost.
    let mut marks = located.documents;
    if marks.len() != values.len() {
        marks = Vec::new();
    }
    let mut marks = marks.into_iter();
    let docs = values
        .into_iter()
        .enumerate()
        .map(|(i, value)| Doc { index: i + 1, value, marks: marks.next().unwrap_or_default() })
        .filter(|d| !d.value.is_null())
        .collect();
    Ok(Source { file: file.to_string(), docs })
}

/// A YAML syntax error at its line, with what a tab in the indentation means.
fn yaml_error(file: &str, text: &str, document: usize, e: &serde_yaml::Error) -> CliError {
    let Some(loc) = e.location() else {
        return CliError::Usage(format!("{file}: document {document}: not valid YAML or JSON: {e}"));
    };
    let tab_line = text
        .lines()
        .enumerate()
        .skip(loc.line().saturating_sub(2))
        .take(3)
        .find(|(_, l)| l.chars().take_while(|c| c.is_whitespace()).any(|c| c == '\t'));
    if let Some((n, _)) = tab_line {
        return CliError::Usage(format!(
            "{file}:{}:1: document {document}: line {} is indented with a tab; YAML indents with spaces only: replace the tab with spaces",
            n + 1,
            n + 1
        ));
    }
    let msg = e.to_string();
    let msg = msg.split(" at line ").next().unwrap_or(&msg);
    CliError::Usage(format!(
        "{file}:{}:{}: document {document}: not valid YAML or JSON: {msg}",
        loc.line(),
        loc.column()
    ))
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |cur, k| cur.get(k)).and_then(Value::as_str)
}

const CONFIG_KINDS: [&str; 2] = ["XRDConversionConfig", "CRDConversionConfig"];

/// Reads the XRDConversionConfig or CRDConversionConfig in `path`. Input that is no config
/// (unreadable, empty, another kind, the reference's apiVersion) is a usage error, exit 2; a
/// config whose keys or values its schema refuses is a finding, exit 1. Each is reported once,
/// at its line, with the fix, and nothing is checked after it.
pub fn config(path: &Path) -> Result<Config, CliError> {
    config_of(&read(path)?)
}

/// [`config`] of documents already read: a file, or a live config serialised by
/// `live::target` (its place then names the context and the object).
pub fn config_of(src: &Source) -> Result<Config, CliError> {
    let (kind, doc) = find_config(src)?;
    let problems = keys::check(&doc.value, kind);
    if !problems.is_empty() {
        let lines: Vec<String> = problems.iter().map(|p| finding(src, doc, &p.path, &p.message)).collect();
        return Err(CliError::Failed(lines.join("\n")));
    }
    let spec_value = doc.value.get("spec").cloned().unwrap_or(Value::Null);
    let ref_field = if kind == TargetKind::Xrd { "targetXRD" } else { "targetCRD" };
    let target_name = str_at(&spec_value, &[ref_field, "name"])
        .ok_or_else(|| {
            CliError::Failed(finding(
                src,
                doc,
                &FieldPath::parse("spec").child(ref_field),
                &format!("missing `{ref_field}.name`; name the target"),
            ))
        })?
        .to_string();
    let spec: ConversionSpec = serde_path_to_error::deserialize(spec_value).map_err(|e| {
        let at = FieldPath(
            FieldPath::parse("spec").0.into_iter().chain(FieldPath::parse(&e.path().to_string()).0).collect(),
        );
        CliError::Failed(finding(src, doc, &at, &e.inner().to_string()))
    })?;
    let target_place = src.place(doc, &FieldPath::parse("spec").child(ref_field).child("name"));
    Ok(Config {
        name: str_at(&doc.value, &["metadata", "name"]).unwrap_or("<unnamed>").to_string(),
        kind,
        target_name,
        spec,
        target_place,
    })
}

/// The one config document of a file, or why there is none.
fn find_config(src: &Source) -> Result<(TargetKind, &Doc), CliError> {
    let file = &src.file;
    let mut found = Vec::new();
    for doc in &src.docs {
        let kind = match str_at(&doc.value, &["kind"]) {
            Some("XRDConversionConfig") => TargetKind::Xrd,
            Some("CRDConversionConfig") => TargetKind::Crd,
            _ => continue,
        };
        let api_version = str_at(&doc.value, &["apiVersion"]).unwrap_or_default();
        if api_version != CONFIG_API_VERSION {
            return Err(CliError::Usage(format!(
                "{}: apiVersion is {api_version:?}; dco configs use {CONFIG_API_VERSION} — translate a config written for the reference project with `convctl import {}` (it reports every field it changes)",
                src.place(doc, &FieldPath::parse("apiVersion")),
                src.file
            )));
        }
        found.push((kind, doc));
    }
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(CliError::Usage(no_config(src))),
        [_, (_, second), ..] => Err(CliError::Usage(format!(
            "{}: a second config; {file} holds {} configs: give one config per file",
            src.place(second, &FieldPath::parse("kind")),
            found.len()
        ))),
    }
}

/// Why a file with no config has none, in one message: empty, another kind (a CRD given as
/// --config), or a misspelt kind.
fn no_config(src: &Source) -> String {
    let file = &src.file;
    let want =
        format!("--config expects an XRDConversionConfig or CRDConversionConfig ({CONFIG_API_VERSION})");
    let Some(first) = src.docs.first() else {
        return format!("{file}: the file is empty (no YAML document); {want}");
    };
    for doc in &src.docs {
        let kind = str_at(&doc.value, &["kind"]).unwrap_or_default();
        let at = src.place(doc, &FieldPath::parse("kind"));
        if let Some(k) = keys::closest(kind, CONFIG_KINDS) {
            return format!("{at}: kind `{kind}`; did you mean `{k}`?");
        }
        let flag = match kind {
            "CustomResourceDefinition" => Some("--crd"),
            "CompositeResourceDefinition" => Some("--xrd"),
            _ => None,
        };
        if let Some(flag) = flag {
            let name = str_at(&doc.value, &["metadata", "name"]).unwrap_or("<unnamed>");
            return format!(
                "{at}: this is a {kind} ({name}), not a conversion config: give it with {flag}; {want}"
            );
        }
    }
    let kinds: Vec<&str> =
        src.docs.iter().map(|d| str_at(&d.value, &["kind"]).unwrap_or("<no kind>")).collect();
    format!(
        "{}: no conversion config in {} document(s) (kinds: {}); {want}",
        src.place(first, &FieldPath::default()),
        src.docs.len(),
        kinds.join(", ")
    )
}

/// One finding line: the place (file, line, column, document, spoke and rule), the field path
/// and the message with its fix.
fn finding(src: &Source, doc: &Doc, path: &FieldPath, message: &str) -> String {
    let mut head = src.place(doc, path);
    if let Some(rule) = rule_context(&doc.value, path) {
        head.push_str(", ");
        head.push_str(&rule);
    }
    format!("{head}: {path}: {message}")
}

/// `spoke v1, rule 2.0 (Delete)` for a path inside a rule, numbered as the engine's diagnostics
/// number rules (nested rules after a dot).
fn rule_context(value: &Value, path: &FieldPath) -> Option<String> {
    let segs = &path.0;
    if segs.len() < 4 || segs[0] != Seg::Key("spec".into()) || segs[1] != Seg::Key("spokes".into()) {
        return None;
    }
    let Seg::Index(spoke) = segs[2] else { return None };
    let version = value.pointer(&format!("/spec/spokes/{spoke}/version")).and_then(Value::as_str);
    let mut out = match version {
        Some(v) => format!("spoke {v}"),
        None => format!("spoke #{spoke}"),
    };
    let mut indices = Vec::new();
    let mut node = value;
    let mut rule = None;
    for w in segs.windows(2) {
        node = match &w[0] {
            Seg::Key(k) => node.get(k)?,
            Seg::Index(i) => node.get(i)?,
        };
        if let (Seg::Key(k), Seg::Index(i)) = (&w[0], &w[1])
            && k == "rules"
        {
            indices.push(i.to_string());
            rule = node.get(i);
        }
    }
    if !indices.is_empty() {
        out.push_str(&format!(", rule {}", indices.join(".")));
        if let Some(s) = rule.and_then(|r| r.get("strategy")).and_then(Value::as_str) {
            out.push_str(&format!(" ({s})"));
        }
    }
    Some(out)
}

/// A config compiled against another target than the one it names fails on every path of
/// it; that one cause is reported alone (exit 1), before any compile.
pub fn same_target(config: &Config, target: &Target) -> Result<(), CliError> {
    if config.target_name == target.name() {
        return Ok(());
    }
    let field = if config.kind == TargetKind::Xrd { "targetXRD" } else { "targetCRD" };
    Err(CliError::Failed(format!(
        "{}: spec.{field}.name: config {} targets {} but the given definition is {}; give the matching definition or fix the target name",
        config.target_place,
        config.name,
        config.target_name,
        target.name()
    )))
}

/// Reads the CRD (`want` = Crd) or XRD (`want` = Xrd) in `path`.
pub fn target(path: &Path, want: TargetKind) -> Result<Target, CliError> {
    let docs = documents(path)?;
    let wanted_kind = want.kind_name();
    let candidates: Vec<&Value> = docs.iter().filter(|d| str_at(d, &["kind"]) == Some(wanted_kind)).collect();
    let doc = match candidates.as_slice() {
        [one] => *one,
        [] => {
            let flag = if want == TargetKind::Xrd { "--xrd" } else { "--crd" };
            return Err(CliError::Usage(format!(
                "{}: {flag} expects a {wanted_kind}, and the file has none",
                path.display()
            )));
        }
        _ => {
            return Err(CliError::Usage(format!(
                "{}: holds several {wanted_kind}s; give one per file",
                path.display()
            )));
        }
    };
    Target::from_value(doc).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

/// Sample objects: every document of `path` (a file), with the file they came from.
pub fn samples_in_file(path: &Path) -> Result<Vec<(String, Value)>, CliError> {
    let docs = documents(path)?;
    let many = docs.len() > 1;
    Ok(docs
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let label =
                if many { format!("{}#{}", path.display(), i + 1) } else { path.display().to_string() };
            (label, d)
        })
        .collect())
}

/// The version of an object's `apiVersion` (`group/version` → `version`).
pub fn version_of(obj: &Value) -> Option<&str> {
    str_at(obj, &["apiVersion"]).and_then(|av| av.rsplit_once('/').map(|(_, v)| v))
}
