//! `convctl import`: translates the reference project's objects (`XRDConversionConfig`,
//! `CRDConversionConfig`, `ConversionWebhookServer` at `terasky.com/v1alpha1` or
//! `conversion.terasky.com/*`) into dco's, and reports every field it changed, dropped or could
//! not map (docs/convctl.md "import", docs/migrating.md).
//!
//! Nothing is dropped silently: every key of the output is checked against dco's own CRD
//! schemas (what the apiserver would prune) and nested rules against the rule schema (what
//! serde would ignore), and the output must deserialize as dco's typed object. A config whose
//! target is given (`--crd`/`--xrd`) is compiled by the engine.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use dco_api::config::TargetKind;
use dco_engine::Target;
use serde_json::{Map, Value, json};

use crate::CliError;
use crate::output::{Finding, JSON_SCHEMA_VERSION, Location, Report, Severity};

/// The largest input read from one file or stdin: manifests, not archives.
const MAX_INPUT_BYTES: usize = 16 << 20;
/// The most documents one run translates.
const MAX_DOCUMENTS: usize = 10_000;

const KINDS: [&str; 3] = ["XRDConversionConfig", "CRDConversionConfig", "ConversionWebhookServer"];

/// Metadata the apiserver sets: meaningless on a new object, dropped with one note.
const SERVER_SET: [&str; 9] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "ownerReferences",
];

#[derive(Args)]
pub struct ImportArgs {
    /// Reference manifests (YAML or JSON, any number of documents, `kind: List` too); `-` or
    /// none reads stdin.
    pub files: Vec<PathBuf>,
    /// A CustomResourceDefinition to compile the imported CRDConversionConfig of the same
    /// target against (repeatable).
    #[arg(long)]
    pub crd: Vec<PathBuf>,
    /// A Crossplane CompositeResourceDefinition to compile the imported XRDConversionConfig of
    /// the same target against (repeatable).
    #[arg(long)]
    pub xrd: Vec<PathBuf>,
    /// Format of the translated objects on stdout (`json`: one object, or a `List`).
    #[arg(short, long, value_enum, default_value_t = DocFormat::Yaml)]
    pub output: DocFormat,
    /// Also write the report (findings, summary) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub report_file: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DocFormat {
    Yaml,
    Json,
}

/// One input document and where it came from.
struct Doc {
    file: String,
    index: usize,
    value: Value,
}

pub fn run(args: &ImportArgs) -> Result<(), CliError> {
    let docs = read_inputs(&args.files)?;
    let targets = read_targets(&args.crd, &args.xrd)?;
    let mut findings = Vec::new();
    let mut out = Vec::new();
    let mut skipped = 0usize;
    for d in &docs {
        match translate(d, &targets, &mut findings) {
            Some(v) => out.push(v),
            None => skipped += 1,
        }
    }
    let count = |rule: &str| findings.iter().filter(|f: &&Finding| f.rule == rule).count();
    let summary = json!({
        "schemaVersion": JSON_SCHEMA_VERSION,
        "documents": docs.len(), "imported": out.len(), "skipped": skipped,
        "changed": count("changed"), "dropped": count("dropped"), "behaviour": count("behaviour"),
        "unmappable": count("unmappable"), "compileErrors": count("compile-error"),
    });
    let needs_person = findings.iter().filter(|f| f.fails).count();
    let summary_line = format!(
        "imported {} of {} document(s): {} changed, {} dropped, {} behave differently, {} need a person",
        out.len(),
        docs.len(),
        count("changed"),
        count("dropped"),
        count("behaviour"),
        needs_person
    );
    let report = Report {
        command: "import".into(),
        table: table(&findings),
        findings,
        cases: Vec::new(),
        summary,
        summary_line: summary_line.clone(),
    };
    crate::emit(&render(&out, args.output));
    // stdout carries the objects, so the report goes to stderr.
    eprint!("{}", report.table);
    eprintln!("{summary_line}");
    if let Some(path) = &args.report_file {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
        std::fs::write(path, text)
            .map_err(|e| CliError::Usage(format!("cannot write --report-file {}: {e}", path.display())))?;
    }
    if needs_person > 0 {
        return Err(CliError::Failed(format!(
            "{needs_person} finding(s) need a person before the output is applied (the ERROR lines above)"
        )));
    }
    Ok(())
}

fn render(out: &[Out], format: DocFormat) -> String {
    match (format, out) {
        (DocFormat::Yaml, _) => out.iter().map(Out::yaml).collect::<Vec<_>>().join("---\n"),
        (DocFormat::Json, [one]) => one.json() + "\n",
        // Several objects: a List, as kubectl prints and applies them.
        (DocFormat::Json, _) => {
            let items = out.iter().map(Out::json).collect::<Vec<_>>().join(",\n");
            format!("{{\n\"apiVersion\": \"v1\",\n\"kind\": \"List\",\n\"items\": [\n{items}\n]\n}}\n")
        }
    }
}

fn table(findings: &[Finding]) -> String {
    let mut s = String::new();
    for f in findings {
        let sev = match f.severity {
            Severity::Error => "ERROR",
            Severity::Warning => "WARN",
            Severity::Note => "NOTE",
        };
        let l = &f.location;
        let mut place = format!("{}#{}", l.file.as_deref().unwrap_or("-"), l.document.unwrap_or(0));
        if let Some(o) = &l.object {
            place.push(' ');
            place.push_str(o);
        }
        if let Some(p) = &l.path {
            place.push(' ');
            place.push_str(p);
        }
        s.push_str(&format!("{sev:5} {:13} {place}: {}", f.rule, f.message));
        if let Some(fix) = &f.fix {
            s.push_str(&format!(" — {fix}"));
        }
        s.push('\n');
    }
    s
}

/// Reads every document of every input (`-` or no file: stdin); unreadable input is exit 2.
fn read_inputs(files: &[PathBuf]) -> Result<Vec<Doc>, CliError> {
    let stdin = [PathBuf::from("-")];
    let files = if files.is_empty() { &stdin[..] } else { files };
    let mut docs = Vec::new();
    for path in files {
        let (label, text) = read_text(path)?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let value = <Value as serde::Deserialize>::deserialize(de).map_err(|e| {
                CliError::Usage(format!("{label} (document {}): not valid YAML or JSON: {e}", i + 1))
            })?;
            let items = match value {
                Value::Null => continue,
                Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                    m.get("items").and_then(Value::as_array).cloned().unwrap_or_default()
                }
                v => vec![v],
            };
            for value in items {
                docs.push(Doc { file: label.clone(), index: i + 1, value });
            }
            if docs.len() > MAX_DOCUMENTS {
                return Err(CliError::Usage(format!(
                    "more than {MAX_DOCUMENTS} documents; import them in smaller batches"
                )));
            }
        }
    }
    if docs.is_empty() {
        return Err(CliError::Usage(
            "no documents to import (give reference manifests as files or on stdin)".into(),
        ));
    }
    Ok(docs)
}

fn read_text(path: &Path) -> Result<(String, String), CliError> {
    let mut buf = Vec::new();
    let label = if path.as_os_str() == "-" {
        std::io::stdin()
            .take(MAX_INPUT_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(|e| CliError::Usage(format!("cannot read stdin: {e}")))?;
        "<stdin>".to_string()
    } else {
        let f = std::fs::File::open(path)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
        f.take(MAX_INPUT_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
        path.display().to_string()
    };
    if buf.len() > MAX_INPUT_BYTES {
        return Err(CliError::Usage(format!("{label}: larger than {MAX_INPUT_BYTES} bytes")));
    }
    let text = String::from_utf8(buf).map_err(|e| CliError::Usage(format!("{label}: not UTF-8: {e}")))?;
    Ok((label, text))
}

/// The given targets by name.
fn read_targets(crds: &[PathBuf], xrds: &[PathBuf]) -> Result<BTreeMap<String, Target>, CliError> {
    let mut out = BTreeMap::new();
    for (paths, kind) in [(crds, TargetKind::Crd), (xrds, TargetKind::Xrd)] {
        for p in paths {
            let t = crate::load::target(p, kind)?;
            out.insert(t.name().to_string(), t);
        }
    }
    Ok(out)
}

/// Collects the findings of one document.
struct Ctx<'a> {
    loc: Location,
    findings: &'a mut Vec<Finding>,
}

impl Ctx<'_> {
    fn add(&mut self, rule: &str, severity: Severity, path: &str, message: String, fix: Option<String>) {
        let mut location = self.loc.clone();
        if !path.is_empty() {
            location.path = Some(path.to_string());
        }
        let fails = severity == Severity::Error;
        self.findings.push(Finding { rule: rule.into(), severity, message, fix, location, fails });
    }
    fn changed(&mut self, path: &str, message: String) {
        self.add("changed", Severity::Note, path, message, None);
    }
    fn dropped(&mut self, path: &str, message: String) {
        self.add("dropped", Severity::Note, path, message, None);
    }
    fn unmappable(&mut self, path: &str, message: String, fix: String) {
        self.add("unmappable", Severity::Error, path, message, Some(fix));
    }
}

/// Whether an apiVersion is the reference project's (its group, old and new spellings).
fn is_reference(api_version: &str) -> bool {
    api_version == "terasky.com/v1alpha1" || api_version.starts_with("conversion.terasky.com/")
}

/// One document: the dco object, or None when it is not one to import (reported).
fn translate(d: &Doc, targets: &BTreeMap<String, Target>, findings: &mut Vec<Finding>) -> Option<Out> {
    let api_version = d.value.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = d.value.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let name = d.value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>");
    let loc = Location {
        file: Some(d.file.clone()),
        document: Some(d.index),
        object: Some(format!("{kind}/{name}")),
        ..Location::default()
    };
    let mut cx = Ctx { loc, findings };
    let ours = api_version == dco_api::API_VERSION;
    if !is_reference(&api_version) && !ours {
        cx.add(
            "skipped",
            Severity::Note,
            "",
            format!("{api_version} {kind} is not a reference object; left out of the output"),
            None,
        );
        return None;
    }
    if !KINDS.contains(&kind.as_str()) {
        cx.unmappable(
            "kind",
            format!("{api_version} {kind} has no dco counterpart"),
            format!("dco has {}; leave this object out or recreate it by hand", KINDS.join(", ")),
        );
        return None;
    }
    let obj = d.value.as_object()?;
    if !ours {
        cx.changed("apiVersion", format!("{api_version} → {}", dco_api::API_VERSION));
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(dco_api::API_VERSION));
    out.insert("kind".into(), json!(kind));
    for (key, v) in obj {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                out.insert(key.clone(), metadata(v, &mut cx));
            }
            "spec" => {
                let mut spec = v.clone();
                if kind == "ConversionWebhookServer" {
                    server_spec(&mut spec, &mut cx);
                } else {
                    config_spec(&mut spec, &mut cx);
                }
                out.insert(key.clone(), spec);
            }
            "status" => cx.dropped("status", "status dropped: dco's operator writes its own".into()),
            other => cx.unmappable(
                other,
                format!("top-level field {other:?} has no place in a dco object"),
                "remove it".into(),
            ),
        }
    }
    let out = Value::Object(out);
    check_schema(&kind, &out, &mut cx);
    // The typed object, when it reads, prints in dco's field order with its defaults spelled out.
    Some(check_typed(&kind, &out, targets, &mut cx).unwrap_or(Out::Raw(out)))
}

/// A translated object: dco's typed object when it reads as one, else the raw translation.
enum Out {
    Xrd(Box<dco_api::XRDConversionConfig>),
    Crd(Box<dco_api::CRDConversionConfig>),
    Server(Box<dco_api::ConversionWebhookServer>),
    Raw(Value),
}

impl Out {
    fn yaml(&self) -> String {
        match self {
            Out::Xrd(o) => serde_yaml::to_string(o),
            Out::Crd(o) => serde_yaml::to_string(o),
            Out::Server(o) => serde_yaml::to_string(o),
            Out::Raw(o) => serde_yaml::to_string(o),
        }
        .unwrap_or_default()
    }
    fn json(&self) -> String {
        match self {
            Out::Xrd(o) => serde_json::to_string_pretty(o),
            Out::Crd(o) => serde_json::to_string_pretty(o),
            Out::Server(o) => serde_json::to_string_pretty(o),
            Out::Raw(o) => serde_json::to_string_pretty(o),
        }
        .unwrap_or_default()
    }
}

/// `metadata`: names kept, the reference's annotations renamed, its finalizers and what the
/// apiserver sets dropped.
fn metadata(v: &Value, cx: &mut Ctx) -> Value {
    let mut out = Map::new();
    let Some(m) = v.as_object() else { return Value::Object(out) };
    let mut server_set = Vec::new();
    for (key, val) in m {
        let path = format!("metadata.{key}");
        match key.as_str() {
            "name" | "generateName" | "labels" => {
                out.insert(key.clone(), val.clone());
            }
            "annotations" => {
                let a = annotations(val, cx);
                if !a.is_empty() {
                    out.insert(key.clone(), Value::Object(a));
                }
            }
            "finalizers" => {
                for f in val.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    let why = if f.starts_with("conversion.terasky.com/") {
                        "dco's operator adds its own (conversion.dco.rs/safe-revert on configs, conversion.dco.rs/in-use on servers); on the cluster, remove it from the old object by hand once dco serves the target (docs/migrating.md)"
                    } else {
                        "a new object starts without finalizers; their controllers add them"
                    };
                    cx.dropped(&path, format!("finalizer {f} dropped: {why}"));
                }
            }
            "namespace" => cx.dropped(&path, "namespace dropped: dco's kinds are cluster-scoped".into()),
            k if SERVER_SET.contains(&k) => server_set.push(k.to_string()),
            other => cx.unmappable(
                &path,
                format!("metadata field {other:?} is not carried over"),
                "set it on the new object by hand if it is needed".into(),
            ),
        }
    }
    if !server_set.is_empty() {
        cx.dropped(
            "metadata",
            format!("{} dropped: the apiserver sets them on the new object", server_set.join(", ")),
        );
    }
    Value::Object(out)
}

fn annotations(v: &Value, cx: &mut Ctx) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, val) in v.as_object().into_iter().flatten() {
        let path = format!("metadata.annotations[{key}]");
        let renamed = match key.as_str() {
            "conversion.terasky.com/allow-unsafe-delete" => Some(dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE),
            "conversion.terasky.com/allow-force-delete" => Some(dco_api::ANNOTATION_ALLOW_FORCE_DELETE),
            _ => None,
        };
        if let Some(new) = renamed {
            cx.changed(&path, format!("{key} → {new}"));
            out.insert(new.to_string(), val.clone());
        } else if key == "kubectl.kubernetes.io/last-applied-configuration" {
            cx.dropped(
                &path,
                format!("{key} dropped: it holds the reference object; kubectl writes a new one"),
            );
        } else if key == "conversion.terasky.com/managed-by" || key == "conversion.terasky.com/plan-hash" {
            cx.dropped(&path, format!("{key} dropped: the reference stamps it on targets; dco knows its wiring by its Service and path"));
        } else if key.contains("terasky.com/") {
            cx.unmappable(
                &path,
                format!("annotation {key} has no dco counterpart"),
                "dco understands conversion.dco.rs/allow-unsafe-delete and allow-force-delete only; drop it or keep it as an inert note by renaming it".into(),
            );
        } else {
            out.insert(key.clone(), val.clone());
        }
    }
    out
}

/// A config's spec: BranchMap's reference spelling translated; what behaves otherwise said.
fn config_spec(spec: &mut Value, cx: &mut Ctx) {
    if spec.get("driftPolicy").and_then(Value::as_str) == Some("FailClosed") {
        cx.add(
            "behaviour",
            Severity::Warning,
            "spec.driftPolicy",
            "FailClosed behaves otherwise in dco: the target stays wired and every review fails until the config compiles again, where the reference reverted the target's conversion to None".into(),
            Some("keep it if failing reviews is what you want; KeepServingStale keeps serving the last good plan".into()),
        );
    }
    if let Some(spokes) = spec.get_mut("spokes").and_then(Value::as_array_mut) {
        for (i, s) in spokes.iter_mut().enumerate() {
            if let Some(rules) = s.get_mut("rules").and_then(Value::as_array_mut) {
                rules_branchmap(rules, &format!("spec.spokes[{i}].rules"), cx);
            }
        }
    }
}

/// Renames `hubBranch`/`spokeBranch` to `hub`/`spoke` in every BranchMap, nested ones too:
/// dco's CRD schema declares only the short names, so the apiserver would prune the long ones.
fn rules_branchmap(rules: &mut [Value], path: &str, cx: &mut Ctx) {
    for (i, rule) in rules.iter_mut().enumerate() {
        let here = format!("{path}[{i}]");
        if let Some(nested) = rule.pointer_mut("/forEach/rules").and_then(Value::as_array_mut) {
            rules_branchmap(nested, &format!("{here}.forEach.rules"), cx);
        }
        let Some(branches) = rule.pointer_mut("/branchMap/branches").and_then(Value::as_array_mut) else {
            continue;
        };
        for (j, b) in branches.iter_mut().enumerate() {
            let bpath = format!("{here}.branchMap.branches[{j}]");
            let Some(obj) = b.as_object_mut() else { continue };
            for (old, new) in [("hubBranch", "hub"), ("spokeBranch", "spoke")] {
                if let Some(v) = obj.remove(old) {
                    if obj.contains_key(new) {
                        cx.unmappable(
                            &format!("{bpath}.{old}"),
                            format!("both {old} and {new} are set"),
                            format!("keep one: {new} is dco's name"),
                        );
                        continue;
                    }
                    cx.changed(&format!("{bpath}.{old}"), format!("{old} → {new}"));
                    obj.insert(new.into(), v);
                }
            }
            if let Some(nested) = obj.get_mut("rules").and_then(Value::as_array_mut) {
                rules_branchmap(nested, &format!("{bpath}.rules"), cx);
            }
        }
    }
}

/// A server's spec: the fields whose meaning differs, and why the reference-only ones have no
/// counterpart (the schema check reports them; these say what to do).
fn server_spec(spec: &mut Value, cx: &mut Ctx) {
    // Two defaults differ: the reference's sharding block opts in when written (its `enabled`
    // defaults to true), and its autoscaling targets 75 % CPU; dco's defaults are false and 80.
    if let Some(sh) = spec.get_mut("sharding").and_then(Value::as_object_mut)
        && !sh.contains_key("enabled")
    {
        sh.insert("enabled".into(), Value::Bool(true));
        cx.changed(
            "spec.sharding.enabled",
            "set to true: a written sharding block opts in in the reference; dco's enabled defaults to false"
                .into(),
        );
    }
    if let Some(a) = spec.get_mut("autoscaling").and_then(Value::as_object_mut)
        && !a.contains_key("targetCPUUtilizationPercentage")
    {
        a.insert("targetCPUUtilizationPercentage".into(), json!(75));
        cx.changed(
            "spec.autoscaling.targetCPUUtilizationPercentage",
            "set to 75, the reference's default; dco's default is 80".into(),
        );
    }
    if spec.get("cacheSelector").is_some() {
        cx.add(
            "behaviour",
            Severity::Warning,
            "spec.cacheSelector",
            "cacheSelector narrows only the configs dco's replicas cache; targets are always watched whole (the reference narrowed CRDs/XRDs too, so targets had to carry the label)".into(),
            Some("nothing to do; the label on targets is no longer needed".into()),
        );
    }
}

/// Why a reference-only field has no dco counterpart, and what to do: the fix of its finding.
fn reference_only(path: &str) -> Option<&'static str> {
    Some(match path {
        "spec.startupProbe" => {
            "dco-webhook's probes are fixed: /readyz turns true once every assigned plan compiled; remove the field"
        }
        "spec.rollout" => {
            "dco's Deployment rolls one surge Pod at a time with a drain on shutdown (a rolling update fails no request, docs/installation.md); remove the field"
        }
        _ => return None,
    })
}

/// Keys the apiserver would prune under dco's CRD schema, and keys of nested rules that dco's
/// rule type would ignore: each is unmappable.
fn check_schema(kind: &str, obj: &Value, cx: &mut Ctx) {
    let root = crate::keys::crd_schema(kind);
    if root.is_null() {
        return;
    }
    let rule = crate::keys::rule_schema(&root).cloned();
    let mut unknown = Vec::new();
    for key in ["spec"] {
        if let (Some(v), Some(s)) = (obj.get(key), root.pointer(&format!("/properties/{key}"))) {
            walk(v, s, rule.as_ref(), key, &mut unknown);
        }
    }
    for (path, known) in unknown {
        let key = path.rsplit('.').next().unwrap_or(&path).to_string();
        let fix = match (reference_only(&path), closest(&key, &known)) {
            (Some(why), _) => why.to_string(),
            (None, Some(near)) => format!("did you mean {near:?}? dco's fields here: {}", known.join(", ")),
            (None, None) => format!("dco's fields here: {}", known.join(", ")),
        };
        cx.unmappable(&path, format!("{key} has no counterpart in dco's {kind}; dco would drop it"), fix);
    }
}

fn walk(v: &Value, schema: &Value, rule: Option<&Value>, path: &str, out: &mut Vec<(String, Vec<String>)>) {
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in m {
                let here = format!("{path}.{k}");
                match (props.and_then(|p| p.get(k)), extra) {
                    (Some(s), _) | (None, Some(s)) => walk(child, s, rule, &here, out),
                    (None, None) if preserve => {}
                    (None, None) => {
                        let known = props.map(|p| p.keys().cloned().collect()).unwrap_or_default();
                        out.push((here, known));
                    }
                }
            }
        }
        Value::Array(items) => {
            let Some(item) = schema.get("items") else { return };
            // Nested rules are stored opaquely; dco reads them as rules, so check them as rules.
            let opaque = item.get("properties").is_none()
                && item.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let item = match (opaque && path.ends_with(".rules"), rule) {
                (true, Some(r)) => r,
                _ => item,
            };
            for (i, child) in items.iter().enumerate() {
                walk(child, item, rule, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The known key nearest to `key`, if near enough to be a misspelling (the same measure as the
/// config reader's "did you mean").
fn closest(key: &str, known: &[String]) -> Option<String> {
    crate::keys::closest(key, known.iter().map(String::as_str)).map(str::to_string)
}

/// The output read as dco's typed object (None and a finding when it does not read); a config
/// with a given target is compiled.
fn check_typed(kind: &str, obj: &Value, targets: &BTreeMap<String, Target>, cx: &mut Ctx) -> Option<Out> {
    fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> Result<Box<T>, String> {
        serde_json::from_value(v.clone()).map(Box::new).map_err(|e| e.to_string())
    }
    let read = match kind {
        "XRDConversionConfig" => typed::<dco_api::XRDConversionConfig>(obj).map(|c| {
            let cfg = (c.spec.target_xrd.name.clone(), c.spec.conversion.clone(), TargetKind::Xrd);
            (Out::Xrd(c), Some(cfg))
        }),
        "CRDConversionConfig" => typed::<dco_api::CRDConversionConfig>(obj).map(|c| {
            let cfg = (c.spec.target_crd.name.clone(), c.spec.conversion.clone(), TargetKind::Crd);
            (Out::Crd(c), Some(cfg))
        }),
        _ => typed::<dco_api::ConversionWebhookServer>(obj).map(|s| (Out::Server(s), None)),
    };
    let (value, config) = match read {
        Err(e) => {
            cx.unmappable(
                "spec",
                format!("does not read as dco's {kind}: {e}"),
                "fix the field named; dco's fields are in docs/configuration.md".into(),
            );
            return None;
        }
        Ok(r) => r,
    };
    if let Some((target, spec, tkind)) = config {
        compile_against(&target, &spec, tkind, targets, cx);
    }
    Some(value)
}

fn compile_against(
    target: &str,
    spec: &dco_api::ConversionSpec,
    tkind: TargetKind,
    targets: &BTreeMap<String, Target>,
    cx: &mut Ctx,
) {
    let flag = if tkind == TargetKind::Xrd { "--xrd" } else { "--crd" };
    let Some(t) = targets.get(target) else {
        cx.add(
            "not-compiled",
            Severity::Note,
            "",
            format!("not compiled: no target {target} given"),
            Some(format!("give {flag} FILE with {target} to check it compiles")),
        );
        return;
    };
    if t.kind() != tkind {
        cx.unmappable(
            "",
            format!("{target} was given as the other kind of target"),
            format!("give it with {flag}"),
        );
        return;
    }
    let compiled = dco_engine::compile(spec, t);
    for d in &compiled.report.diagnostics {
        if d.is_error() {
            cx.add(
                "compile-error",
                Severity::Error,
                "",
                d.to_string(),
                Some("run convctl validate on the output".into()),
            );
        } else {
            cx.add("compile-warning", Severity::Warning, "", d.to_string(), None);
        }
    }
    if compiled.plan.is_some() {
        cx.add("compiled", Severity::Note, "", format!("compiles against {target}"), None);
    }
}
