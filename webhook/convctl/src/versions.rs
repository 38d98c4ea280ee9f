//! `convctl versions`: the target's versions — served, storage (CRD) or referenceable (XRD),
//! deprecated — and, with a config, each one's role: hub, spoke, or none (docs/convctl.md,
//! "versions"). What only the cluster knows (stored versions, object counts) is printed as
//! UNKNOWN with the command that tells it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use dco_api::config::TargetKind;
use dco_engine::Target;
use serde_json::{Value, json};

use crate::diff::{TargetArgs, emit_report, target_kind_label};
use crate::live::cluster::ClusterArgs;
use crate::output::{Finding, Location, OutputArgs, Report, Severity};
use crate::unserve::{self, CompositionRef, ConfigRef, Facts};
use crate::{CliError, load};

#[derive(Args)]
pub struct VersionsArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// The conversion config, to show each version's role (hub, spoke) in it.
    #[arg(short = 'c', long = "config", value_name = "CONFIG")]
    pub config: Option<PathBuf>,
    /// Exit 1 unless VERSION may stop being served: it is not the storage/referenceable
    /// version, status.storedVersions does not list it, no config has it as hub, no Composition
    /// names it (XRDs), and each of these is known. Each blocker names the command that clears it.
    #[arg(long, value_name = "VERSION")]
    pub check_unserve: Option<String>,
    /// Read the target, its status.storedVersions, the configs naming it, its Compositions (XRDs)
    /// and its object count from the cluster: --crd/--xrd then give the NAME, not a file.
    /// Counting pages a metadata-only LIST, 500 entries a request.
    #[arg(long)]
    pub live: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Offline: the target's status.storedVersions as the cluster has it (comma-separated);
    /// read from the definition file's status when it has one.
    #[arg(long, value_name = "V1,V2", value_delimiter = ',', conflicts_with = "live")]
    pub stored_versions: Option<Vec<String>>,
    /// Offline, for an XRD: files or directories (*.yaml, *.yml, *.json) holding its Compositions.
    #[arg(long, value_name = "PATH", conflicts_with = "live")]
    pub compositions: Vec<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// At most this many files are read from a `--compositions` directory.
pub const MAX_COMPOSITION_FILES: usize = 1000;

/// One version as the definition declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionInfo {
    pub name: String,
    pub served: bool,
    /// `storage` on a CRD, `referenceable` on an XRD.
    pub hub_eligible: bool,
    pub deprecated: bool,
    pub deprecation_warning: Option<String>,
}

/// The definition, its versions as declared (deprecation included, which the engine does not
/// keep) and its plural, from the one document of the wanted kind in `path`.
pub struct Definition {
    pub target: Target,
    pub versions: Vec<VersionInfo>,
    pub plural: String,
}

impl Definition {
    pub fn read(path: &Path, kind: TargetKind) -> Result<Definition, CliError> {
        let target = load::target(path, kind)?;
        let docs = load::documents(path)?;
        let doc = docs
            .iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind.kind_name()))
            .cloned()
            .unwrap_or(Value::Null);
        Ok(Definition::from_value(target, &doc))
    }

    pub fn from_value(target: Target, doc: &Value) -> Definition {
        let hub_flag = if target.kind() == TargetKind::Xrd { "referenceable" } else { "storage" };
        let raw = doc.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
        let versions = raw
            .iter()
            .map(|v| VersionInfo {
                name: v.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
                hub_eligible: v.get(hub_flag).and_then(Value::as_bool).unwrap_or(false),
                deprecated: v.get("deprecated").and_then(Value::as_bool).unwrap_or(false),
                deprecation_warning: v.get("deprecationWarning").and_then(Value::as_str).map(str::to_string),
            })
            .collect();
        let plural =
            doc.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default().to_string();
        Definition { target, versions, plural }
    }

    pub fn hub_field(&self) -> &'static str {
        if self.target.kind() == TargetKind::Xrd { "referenceable" } else { "storage" }
    }

    pub fn flag(&self) -> &'static str {
        if self.target.kind() == TargetKind::Xrd { "--xrd" } else { "--crd" }
    }

    pub fn version(&self, name: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.name == name)
    }

    /// The version marked storage/referenceable, if exactly one is.
    pub fn hub(&self) -> Option<&str> {
        self.versions.iter().find(|v| v.hub_eligible).map(|v| v.name.as_str())
    }

    /// The command that prints the versions objects are stored at. For an XRD it is the CRD
    /// Crossplane generates, which has the XRD's name.
    pub fn stored_versions_cmd(&self) -> String {
        format!("kubectl get crd {} -o jsonpath='{{.status.storedVersions}}'", self.target.name())
    }

    /// The command that counts the objects (all namespaces).
    pub fn count_cmd(&self) -> String {
        format!("kubectl get {}.{} -A --no-headers | wc -l", self.plural, self.target.group())
    }
}

/// A version's role in a config: `hub`, `spoke` (with its rule count) or `none`.
pub fn role(config: &load::Config, version: &str) -> String {
    if config.spec.hub_version == version {
        return "hub".into();
    }
    match config.spec.spokes.iter().find(|s| s.version == version) {
        Some(s) => format!("spoke ({} rule(s))", s.rules.len()),
        None => "none".into(),
    }
}

fn finding(
    rule: &str,
    severity: Severity,
    message: String,
    fix: Option<String>,
    location: Location,
) -> Finding {
    let fails = severity == Severity::Error;
    Finding { rule: rule.into(), severity, message, fix, location, fails }
}

fn check(def: &Definition, config: &load::Config, config_file: &str, def_file: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let at_config = |path: String| Location {
        file: Some(config_file.into()),
        object: Some(config.name.clone()),
        path: Some(path),
        ..Location::default()
    };
    let at_def = |path: String| Location {
        file: Some(def_file.into()),
        object: Some(def.target.name().into()),
        path: Some(path),
        ..Location::default()
    };
    let hub = &config.spec.hub_version;
    match def.version(hub) {
        None => out.push(finding(
            "unknown-version",
            Severity::Error,
            format!("the hub {hub} is not a version of {}", def.target.name()),
            Some(format!("set spec.hubVersion to the {} version", def.hub_field())),
            at_config("spec.hubVersion".into()),
        )),
        Some(v) if !v.hub_eligible => out.push(finding(
            "hub-not-storage",
            Severity::Error,
            format!("the hub {hub} is not the {} version of {}", def.hub_field(), def.target.name()),
            Some(format!(
                "set spec.hubVersion: {}, or run convctl plan --to {hub} for the steps to move the hub",
                def.hub().unwrap_or("<the storage version>")
            )),
            at_config("spec.hubVersion".into()),
        )),
        Some(v) if v.deprecated => out.push(finding(
            "deprecated-hub",
            Severity::Warning,
            format!("the hub {hub} is deprecated; every object is stored at it"),
            Some(format!(
                "make a current version the hub first: convctl plan --to VERSION {} FILE",
                def.flag()
            )),
            at_config("spec.hubVersion".into()),
        )),
        _ => {}
    }
    for (i, s) in config.spec.spokes.iter().enumerate() {
        if def.version(&s.version).is_none() {
            out.push(finding(
                "unknown-version",
                Severity::Error,
                format!("spoke {} is not a version of {}", s.version, def.target.name()),
                Some("remove the spoke or fix its name".into()),
                at_config(format!("spec.spokes[{i}].version")),
            ));
        }
    }
    for (i, v) in def.versions.iter().enumerate() {
        if v.served && role(config, &v.name) == "none" {
            out.push(finding(
                "served-without-role",
                Severity::Error,
                format!("version {} is served but is neither the hub nor a spoke: every conversion to or from it fails", v.name),
                Some(format!("add a spoke for {} to the config, or set served: false on it", v.name)),
                at_def(format!("spec.versions[{i}]")),
            ));
        }
    }
    out
}

/// One target's listing: its table, its JSON and its findings.
struct Section {
    table: String,
    summary: Value,
    findings: Vec<Finding>,
}

/// What a listing shows beyond the definition: the config (roles), facts, object counts.
struct Shown<'a> {
    def: &'a Definition,
    config: Option<&'a load::Config>,
    config_file: String,
    def_file: String,
    facts: &'a Facts<'a>,
    /// Objects per backing CRD (live only).
    counts: Option<&'a [(String, u64)]>,
    check_unserve: Option<&'a str>,
}

fn stored_cell(facts: &Facts, v: &str) -> String {
    match facts.is_stored(v) {
        None => "UNKNOWN".into(),
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
    }
}

fn section(s: &Shown) -> Section {
    let (def, config, facts) = (s.def, s.config, s.facts);
    let kind = def.target.kind();
    let hub_col = def.hub_field().to_uppercase();
    let rows: Vec<[String; 6]> = def
        .versions
        .iter()
        .map(|v| {
            let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
            [
                v.name.clone(),
                yn(v.served),
                yn(v.hub_eligible),
                yn(v.deprecated),
                config.map_or_else(|| "-".into(), |c| role(c, &v.name)),
                stored_cell(facts, &v.name),
            ]
        })
        .collect();
    let mut table = String::new();
    if let Some(l) = &facts.cluster.label {
        let _ = writeln!(table, "[{l}]");
    }
    let _ = writeln!(
        table,
        "{} {} ({} version(s))",
        target_kind_label(kind),
        def.target.name(),
        def.versions.len()
    );
    if let Some(c) = config {
        let _ = writeln!(table, "config {} (hub {})", c.name, c.spec.hub_version);
    }
    let _ = writeln!(table);
    crate::analyze::table(
        &mut table,
        ["VERSION", "SERVED", hub_col.as_str(), "DEPRECATED", "ROLE", "STORED"],
        &rows,
    );
    for v in def.versions.iter().filter(|v| v.deprecated) {
        if let Some(w) = &v.deprecation_warning {
            let _ = writeln!(table, "  {} deprecation warning: {w}", v.name);
        }
    }
    match &facts.stored {
        None => {
            let _ =
                writeln!(table, "\nSTORED is UNKNOWN offline; learn it with: {}", def.stored_versions_cmd());
        }
        Some(st) => {
            let _ = writeln!(table);
            for (crd, vs) in st {
                let _ = writeln!(table, "status.storedVersions of {crd}: [{}]", vs.join(", "));
            }
        }
    }
    match s.counts {
        None => {
            let _ = writeln!(
                table,
                "objects (all versions): UNKNOWN offline; count them with: {}",
                def.count_cmd()
            );
        }
        Some(counts) => {
            for (crd, n) in counts {
                let _ = writeln!(
                    table,
                    "objects of {crd}: {n} (the API does not say at which version each is stored; status.storedVersions does for all)"
                );
            }
        }
    }
    if def.target.kind() == TargetKind::Xrd
        && let Some(comps) = &facts.compositions
    {
        let list: Vec<String> = comps.iter().map(|c| format!("{} ({})", c.name, c.api_version)).collect();
        let _ = writeln!(
            table,
            "Compositions of {}: {}",
            def.target.resource_kind(),
            if list.is_empty() { "none".into() } else { list.join(", ") }
        );
    }
    let mut findings = match config {
        Some(c) => check(def, c, &s.config_file, &s.def_file),
        None => Vec::new(),
    };
    for f in &mut findings {
        f.location.context = facts.cluster.label.clone();
    }
    let unserve_findings = s.check_unserve.map(|v| unserve::check(facts, v));
    if let (Some(v), Some(u)) = (s.check_unserve, &unserve_findings) {
        let blockers = u.iter().filter(|f| f.fails).count();
        let verdict = if blockers == 0 {
            format!("SAFE: nothing depends on {v} being served")
        } else {
            format!("BLOCKED by {blockers} finding(s)")
        };
        let _ = writeln!(table, "\ncheck-unserve {v}: {verdict}");
        findings.extend(u.iter().cloned());
    }
    if !findings.is_empty() {
        let _ = writeln!(table, "\nfindings:");
        for f in &findings {
            let _ = writeln!(table, "  {}: {} ({})", f.severity.word(), f.message, f.location.label());
            if let Some(fix) = &f.fix {
                let _ = writeln!(table, "    fix: {fix}");
            }
        }
    }
    let versions: Vec<Value> = def
        .versions
        .iter()
        .map(|v| {
            json!({
                "name": v.name,
                "served": v.served,
                def.hub_field(): v.hub_eligible,
                "deprecated": v.deprecated,
                "deprecationWarning": v.deprecation_warning,
                "role": config.map(|c| role(c, &v.name)),
                "stored": match facts.is_stored(&v.name) { None => json!("UNKNOWN"), Some(b) => json!(b) },
            })
        })
        .collect();
    let mut summary = json!({
        "kind": target_kind_label(kind),
        "target": def.target.name(),
        "config": config.map(|c| c.name.clone()),
        "hubVersion": config.map(|c| c.spec.hub_version.clone()),
        "versions": versions,
    });
    match (&facts.stored, s.counts) {
        (None, _) | (_, None) => {
            summary["unknown"] = json!({
                "storedVersions": facts.stored.is_none().then(|| def.stored_versions_cmd()),
                "objectCount": s.counts.is_none().then(|| def.count_cmd()),
            });
        }
        _ => {}
    }
    if let Some(l) = &facts.cluster.label {
        summary["context"] = json!(l);
    }
    if let Some(st) = &facts.stored {
        summary["storedVersions"] =
            st.iter().map(|(c, vs)| (c.clone(), json!(vs))).collect::<serde_json::Map<_, _>>().into();
    }
    if let Some(counts) = s.counts {
        summary["objects"] =
            counts.iter().map(|(c, n)| (c.clone(), json!(n))).collect::<serde_json::Map<_, _>>().into();
    }
    if let Some(comps) = &facts.compositions {
        summary["compositions"] =
            comps.iter().map(|c| json!({"name": c.name, "apiVersion": c.api_version})).collect();
    }
    if let (Some(v), Some(u)) = (s.check_unserve, &unserve_findings) {
        summary["checkUnserve"] = json!({
            "version": v,
            "safe": !u.iter().any(|f| f.fails),
            "blockers": u.iter().filter(|f| f.fails).map(|f| json!({"rule": f.rule, "object": f.location.object, "fix": f.fix})).collect::<Vec<_>>(),
        });
    }
    Section { table, summary, findings }
}

fn config_ref(c: &load::Config, file: &str) -> ConfigRef {
    ConfigRef {
        kind: if c.kind == TargetKind::Xrd { "XRDConversionConfig" } else { "CRDConversionConfig" }.into(),
        name: c.name.clone(),
        file: Some(file.to_string()),
        hub: c.spec.hub_version.clone(),
        spokes: c.spec.spokes.iter().map(|s| s.version.clone()).collect(),
    }
}

/// The Compositions in the files and directories given (a directory's files, not its subtrees).
fn read_compositions(paths: &[PathBuf]) -> Result<Vec<CompositionRef>, CliError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut in_dir: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| CliError::Usage(format!("--compositions {}: {e}", p.display())))?
                .flatten()
                .map(|e| e.path())
                .filter(|f| {
                    f.is_file() && f.extension().is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
                })
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else {
            files.push(p.clone());
        }
        if files.len() > MAX_COMPOSITION_FILES {
            return Err(CliError::Usage(format!(
                "--compositions: more than {MAX_COMPOSITION_FILES} files; give the directory of this XRD's Compositions"
            )));
        }
    }
    let mut out = Vec::new();
    for f in files {
        out.extend(unserve::compositions_in(&load::documents(&f)?, &f.display().to_string()));
    }
    Ok(out)
}

fn cluster_flags_given(c: &ClusterArgs) -> bool {
    c.kubeconfig.is_some() || c.context.is_some() || !c.contexts.is_empty() || c.kubeconfig_dir.is_some()
}

pub fn run(args: &VersionsArgs) -> Result<(), CliError> {
    if args.live {
        return run_live(args);
    }
    if cluster_flags_given(&args.cluster) {
        return Err(CliError::Usage(
            "--kubeconfig, --context, --contexts and --kubeconfig-dir read a cluster: add --live".into(),
        ));
    }
    let (path, kind) = args.target.path_and_kind()?;
    let def = Definition::read(path, kind)?;
    let config = match &args.config {
        Some(p) => {
            let c = load::config(p)?;
            if c.kind != kind {
                return Err(CliError::Usage(format!(
                    "{} is for an {}; give the matching definition",
                    p.display(),
                    if c.kind == TargetKind::Xrd { "XRD (--xrd)" } else { "CRD (--crd)" }
                )));
            }
            Some(c)
        }
        None => None,
    };
    let config_file = args.config.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    // storedVersions: the flag, else the definition file's status (a CRD as the cluster returns it).
    let stored = match &args.stored_versions {
        Some(vs) => Some(vec![(def.target.name().to_string(), vs.clone())]),
        None if kind == TargetKind::Crd => load::documents(path)?
            .iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind.kind_name()))
            .and_then(|d| d.pointer("/status/storedVersions"))
            .and_then(Value::as_array)
            .map(|a| {
                vec![(
                    def.target.name().to_string(),
                    a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
                )]
            }),
        None => None,
    };
    let compositions =
        if args.compositions.is_empty() { None } else { Some(read_compositions(&args.compositions)?) };
    let facts = Facts {
        def: &def,
        stored,
        configs: config.as_ref().map(|c| vec![config_ref(c, &config_file)]),
        compositions,
        cluster: unserve::Cluster::default(),
    };
    let sec = section(&Shown {
        def: &def,
        config: config.as_ref(),
        config_file: config_file.clone(),
        def_file: path.display().to_string(),
        facts: &facts,
        counts: None,
        check_unserve: args.check_unserve.as_deref(),
    });
    let summary_line = summary_line(&def, &sec.findings, args.check_unserve.as_deref());
    let report = Report {
        command: "versions".into(),
        findings: sec.findings,
        cases: Vec::new(),
        summary: sec.summary,
        table: sec.table,
        summary_line,
    };
    emit_report(&report, &args.out)
}

fn summary_line(def: &Definition, findings: &[Finding], check_unserve: Option<&str>) -> String {
    let base = format!(
        "versions: {} has {} version(s), {} served; {} finding(s)",
        def.target.name(),
        def.versions.len(),
        def.versions.iter().filter(|v| v.served).count(),
        findings.len()
    );
    match check_unserve {
        Some(v) if findings.iter().any(|f| f.fails && f.rule.starts_with("unserve-")) => {
            format!("{base}; unserving {v} is BLOCKED")
        }
        Some(v) => format!("{base}; {v} is safe to unserve"),
        None => base,
    }
}

/// `--live`: each cluster's listing, one report across them; a cluster that cannot be read is
/// its finding.
fn run_live(args: &VersionsArgs) -> Result<(), CliError> {
    if args.config.is_some() {
        return Err(CliError::Usage(
            "--live reads the configs that name the target from the cluster: drop -c".into(),
        ));
    }
    let (name_arg, kind) = args.target.path_and_kind()?;
    let name = live_name(name_arg, kind)?;
    let members = args.cluster.members()?;
    let timeout = args.cluster.timeout();
    let mut table = String::new();
    let mut findings = Vec::new();
    let mut clusters = Vec::new();
    for m in &members {
        let read = crate::live::block_on(async {
            let client = m.connect(timeout).await?;
            let live = crate::live::storage::read(&client, &m.label, kind, &name).await?;
            let counts = crate::live::storage::count(&client, &live).await?;
            Ok::<_, String>((live, counts))
        });
        let (live, counts) = match read {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(table, "[{}]\n  cannot read {name}: {e}\n", m.label);
                findings.push(Finding {
                    rule: "cluster-unreadable".into(),
                    severity: Severity::Error,
                    message: e.clone(),
                    fix: Some("check the context, the name and your access (kubectl auth can-i list customresourcedefinitions)".into()),
                    location: Location { object: Some(format!("{} {name}", kind.kind_name())), context: Some(m.label.clone()), ..Location::default() },
                    fails: true,
                });
                clusters.push(json!({"context": m.label, "error": e}));
                continue;
            }
        };
        let flags = member_flags(m);
        let facts = Facts {
            def: &live.def,
            stored: Some(live.stored.clone()),
            configs: Some(live.configs.clone()),
            compositions: live.compositions.clone(),
            cluster: unserve::Cluster { label: Some(m.label.clone()), flags },
        };
        let mut sec = section(&Shown {
            def: &live.def,
            config: live.loaded.first(),
            config_file: String::new(),
            def_file: String::new(),
            facts: &facts,
            counts: Some(&counts),
            check_unserve: args.check_unserve.as_deref(),
        });
        for e in &live.unreadable {
            sec.findings.push(Finding {
                rule: "unserve-config-unreadable".into(),
                severity: Severity::Error,
                message: format!("a config naming {name} cannot be read, so its hub is unknown: {e}"),
                fix: Some("fix the config (convctl validate), then re-run".into()),
                location: Location { context: Some(m.label.clone()), ..Location::default() },
                fails: args.check_unserve.is_some(),
            });
        }
        table.push_str(&sec.table);
        table.push('\n');
        findings.extend(sec.findings);
        clusters.push(sec.summary);
    }
    let blocked = findings.iter().any(|f| f.fails);
    let mut summary_line =
        format!("versions --live: {name} on {} cluster(s); {} finding(s)", members.len(), findings.len());
    if let Some(v) = &args.check_unserve {
        summary_line.push_str(&if blocked {
            format!("; unserving {v} is BLOCKED")
        } else {
            format!("; {v} is safe to unserve")
        });
    }
    let report = Report {
        command: "versions".into(),
        findings,
        cases: Vec::new(),
        summary: json!({"target": name, "kind": target_kind_label(kind), "clusters": clusters}),
        table,
        summary_line,
    };
    emit_report(&report, &args.out)
}

/// The target's name for `--live`: the value itself, or the `metadata.name` of the definition
/// in the file it names (so a CI job may pass the same file it checks offline).
pub fn live_name(arg: &Path, kind: TargetKind) -> Result<String, CliError> {
    if arg.is_file() {
        return Ok(load::target(arg, kind)?.name().to_string());
    }
    let s = arg.to_string_lossy().to_string();
    if s.is_empty() || s.contains('/') {
        return Err(CliError::Usage(format!(
            "--live: {s:?} is neither a file nor a {} name; give NAME (kubectl get {})",
            kind.kind_name(),
            if kind == TargetKind::Xrd { "xrds" } else { "crds" }
        )));
    }
    Ok(s)
}

/// ` --kubeconfig FILE --context NAME` of a cluster, for the commands printed for it.
pub fn member_flags(m: &crate::live::cluster::Member) -> String {
    let mut out = String::new();
    if let Some(k) = &m.kubeconfig {
        out.push_str(&format!(" --kubeconfig {}", k.display()));
    }
    if let Some(c) = &m.context {
        out.push_str(&format!(" --context {c}"));
    }
    out
}
