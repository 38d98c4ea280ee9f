//! `convctl compat --base DIR_OR_FILE --head DIR_OR_FILE`: two revisions of a target and its
//! config, every difference classified as breaking, review or safe, each with the version,
//! spoke, rule and path behind it; exit 1 on an unacknowledged breaking change
//! (docs/convctl.md, "compat").
//!
//! The reference reads both revisions out of git (`--base REF --head REF`); dco reads two
//! checked-out trees or files, so the gate works on any two copies (`git worktree add`), and
//! also checks the definition's schemas, which the reference leaves to the apiserver.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use dco_api::config::{LosslessVerdict, SpokeStatus};
use dco_engine::Target;
use dco_engine::schema::FlatSchema;
use serde_json::{Value, json};

use crate::CliError;
use crate::diff::{Side, claim_key, describe_rule, emit_report, file_line, target_kind_label};
use crate::lint::{Found, Walk, walk};
use crate::output::{Finding, Location, OutputArgs, Report, Severity};
use crate::versions::Definition;

/// The change classes, as the reference names them, plus dco's schema classes.
pub const CLASSES: &[(&str, &str)] = &[
    ("HubChanged", "breaking"),
    ("ServedVersionRemoved", "breaking"),
    ("VersionRemoved", "breaking"),
    ("StorageVersionChanged", "breaking"),
    ("LosslessToLossy", "breaking"),
    ("CoverageLost", "breaking"),
    ("RuleRemoved", "breaking"),
    ("FieldRemoved", "breaking"),
    ("FieldTypeChanged", "breaking"),
    ("EnumValueRemoved", "breaking"),
    ("FieldRequired", "breaking"),
    ("StrategyChanged", "review"),
    ("MappingChanged", "review"),
    ("DoesNotCompile", "review"),
    ("CoverageGained", "safe"),
    ("NewVersion", "safe"),
    ("FieldAdded", "safe"),
];

fn severity_of(class: &str) -> &'static str {
    CLASSES.iter().find(|(c, _)| *c == class).map_or("safe", |(_, s)| s)
}

#[derive(Args)]
pub struct CompatArgs {
    /// The old revision: a directory (searched recursively), a file holding the config and its
    /// CRD or XRD, or a git revision of the repository the command runs in (`origin/main`).
    #[arg(long, value_name = "DIR_OR_FILE_OR_REV")]
    pub base: PathBuf,
    /// The new revision, the same way.
    #[arg(long, value_name = "DIR_OR_FILE_OR_REV")]
    pub head: PathBuf,
    /// The config: its metadata.name, or (as the reference takes it) its path within each
    /// revision.
    #[arg(short = 'c', long = "config", value_name = "NAME_OR_PATH")]
    pub config: Option<String>,
    /// The CRD's path within each revision (the reference's flag; default: found beside the config).
    #[arg(long, value_name = "PATH", conflicts_with = "xrd")]
    pub crd: Option<PathBuf>,
    /// The XRD's path within each revision (the reference's flag; default: found beside the config).
    #[arg(short = 'x', long, value_name = "PATH")]
    pub xrd: Option<PathBuf>,
    /// Acknowledge a deliberate breaking class (repeatable): it is reported but does not fail.
    #[arg(long, value_name = "CLASS")]
    pub allow: Vec<String>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// One revision: the config compiled against the definition found beside it.
struct Revision {
    side: Side,
    def: Definition,
    def_file: String,
    raw_def: Value,
}

/// Whether `-c` names a file rather than a config.
fn is_path(c: &str) -> bool {
    c.contains('/') || [".yaml", ".yml", ".json"].iter().any(|e| c.ends_with(e))
}

fn pick_config<'a>(w: &'a Walk, root: &Path, name: Option<&str>) -> Result<&'a Found, CliError> {
    let configs: Vec<&Found> = w.found.iter().filter(|f| f.is_config).collect();
    let chosen: Vec<&Found> = match name {
        Some(n) if is_path(n) => {
            configs.iter().copied().filter(|f| f.file == root.join(n.trim_start_matches("./"))).collect()
        }
        Some(n) => configs.iter().copied().filter(|f| f.config_name == n).collect(),
        None => configs.clone(),
    };
    match chosen.as_slice() {
        [one] => Ok(one),
        [] => Err(CliError::Usage(match name {
            Some(n) => format!("{}: no conversion config named {n}", root.display()),
            None => format!("{}: no XRDConversionConfig or CRDConversionConfig found", root.display()),
        })),
        many => Err(CliError::Usage(format!(
            "{}: {} configs ({}); choose one with --config NAME",
            root.display(),
            many.len(),
            many.iter().map(|f| f.config_name.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// A revision read out of git into a scratch directory, removed when dropped. Run in a
/// subdirectory, `git archive` takes that subdirectory's tree, so paths relative to the working
/// directory mean what they mean in the shell.
struct Checkout {
    dir: PathBuf,
    rev: String,
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn git(args: &[&str]) -> Option<String> {
    let o = std::process::Command::new("git").args(args).stderr(std::process::Stdio::null()).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim_end().to_string())
}

/// `rev`'s tree, through `git archive | tar -x` (no checkout, so a shallow CI clone works).
fn checkout(rev: &str) -> Result<Checkout, CliError> {
    let commit =
        git(&["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")]).ok_or_else(|| {
            CliError::Usage(format!(
                "{rev} is neither a file, a directory nor a git revision of the repository here"
            ))
        })?;
    let dir = std::env::temp_dir().join(format!(
        "convctl-compat-{}-{}",
        std::process::id(),
        &commit[..12.min(commit.len())]
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", dir.display())))?;
    let co = Checkout { dir, rev: rev.to_string() };
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("git archive --format=tar \"$1\" | tar -x -C \"$2\"")
        .arg("convctl")
        .arg(&commit)
        .arg(&co.dir)
        .status()
        .map_err(|e| CliError::Usage(format!("cannot run git archive | tar: {e}")))?;
    if !status.success() {
        return Err(CliError::Usage(format!("git archive {rev} | tar -x failed ({status})")));
    }
    Ok(co)
}

impl Revision {
    /// Reads a revision given as a path or a git revision; the files of a git revision are
    /// reported as `REV:path`.
    fn open(arg: &Path, args: &CompatArgs) -> Result<(Revision, Option<Checkout>), CliError> {
        if arg.exists() {
            return Ok((Revision::read(arg, args)?, None));
        }
        let co = checkout(&arg.to_string_lossy())?;
        let dir = format!("{}/", co.dir.display());
        let rev = Revision::read(&co.dir, args).map_err(|e| match e {
            CliError::Usage(m) => CliError::Usage(m.replace(&dir, &format!("{}:", co.rev))),
            CliError::Failed(m) => CliError::Failed(m.replace(&dir, &format!("{}:", co.rev))),
        })?;
        Ok((rev, Some(co)))
    }

    fn read(root: &Path, args: &CompatArgs) -> Result<Revision, CliError> {
        let name = args.config.as_deref();
        let mut w = Walk::default();
        // With both files named, only they are read (the reference's form of the command).
        let def_path = args.crd.as_ref().or(args.xrd.as_ref());
        let roots = match (name.filter(|n| is_path(n)), def_path) {
            (Some(c), Some(d)) if root.is_dir() => {
                vec![root.join(c.trim_start_matches("./")), root.join(d.strip_prefix("./").unwrap_or(d))]
            }
            _ => vec![root.to_path_buf()],
        };
        walk(&roots, false, &[], &mut w)?;
        if let Some(bad) = w.unreadable.first() {
            return Err(CliError::Usage(format!("{}: {}", root.display(), bad.message)));
        }
        let c = pick_config(&w, root, name)?;
        let schema = w
            .found
            .iter()
            .find(|f| {
                !f.is_config && f.kind == c.kind && f.name == c.name && def_path.is_none_or(|d| f.file == root.join(d.strip_prefix("./").unwrap_or(d)))
            })
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "{}: config {} targets {} {}, which is not in the same tree; put the definition beside it",
                    root.display(),
                    c.config_name,
                    target_kind_label(c.kind),
                    c.name
                ))
            })?;
        let def_file = format!("{}#{}", schema.file.display(), schema.document);
        let target =
            Target::from_value(&schema.value).map_err(|e| CliError::Usage(format!("{def_file}: {e}")))?;
        let side = Side::load(&c.file, &target)?;
        let def = Definition::from_value(target, &schema.value);
        Ok(Revision { side, def, def_file, raw_def: schema.value.clone() })
    }

    fn version_index(&self, v: &str) -> Option<usize> {
        self.def.versions.iter().position(|x| x.name == v)
    }

    fn schema(&self, v: &str) -> Value {
        let i = self.version_index(v).unwrap_or(0);
        self.raw_def
            .pointer(&format!("/spec/versions/{i}/schema/openAPIV3Schema"))
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn at_def(&self, v: &str, field: Option<&str>) -> Location {
        let mut path = match self.version_index(v) {
            Some(i) => format!("spec.versions[{i}]"),
            None => "spec.versions".into(),
        };
        if let Some(f) = field {
            let _ = write!(path, ".schema.openAPIV3Schema {f}");
        }
        Location {
            file: Some(self.def_file.clone()),
            object: Some(format!("{} {}", target_kind_label(self.def.target.kind()), self.def.target.name())),
            path: Some(path),
            ..Location::default()
        }
    }
}

struct Out<'a> {
    allow: &'a [String],
    findings: Vec<Finding>,
}

impl Out<'_> {
    fn push(&mut self, class: &str, message: String, fix: Option<String>, location: Location) {
        let sev = severity_of(class);
        let allowed = self.allow.iter().any(|a| a == class);
        let severity = match sev {
            "breaking" => Severity::Error,
            "review" => Severity::Warning,
            _ => Severity::Note,
        };
        let message = if allowed && sev == "breaking" {
            format!("{message} (allowed by --allow {class})")
        } else {
            message
        };
        self.findings.push(Finding {
            rule: class.into(),
            severity,
            message,
            fix,
            location,
            fails: sev == "breaking" && !allowed,
        });
    }
}

fn versions(base: &Revision, head: &Revision, out: &mut Out) {
    let (b, h) = (&base.def, &head.def);
    if b.hub() != h.hub() {
        let (from, to) = (b.hub().unwrap_or("(none)"), h.hub().unwrap_or("(none)"));
        out.push(
            "StorageVersionChanged",
            format!("the {} version moved from {from} to {to}: new writes are stored at {to}, existing objects stay at {from} until rewritten", h.hub_field()),
            Some(format!("follow convctl plan --to {to}: migrate the stored objects before {from} is retired")),
            head.at_def(to, None),
        );
    }
    for v in &b.versions {
        match h.version(&v.name) {
            None => out.push(
                "VersionRemoved",
                format!("version {} is gone from spec.versions: objects still stored at it can no longer be read, and the apiserver refuses the update while status.storedVersions lists it (UNKNOWN offline: {})", v.name, h.stored_versions_cmd()),
                Some(format!("retire it in steps: convctl plan --retire {}", v.name)),
                base.at_def(&v.name, None),
            ),
            Some(hv) if v.served && !hv.served => out.push(
                "ServedVersionRemoved",
                format!("version {} is no longer served: clients reading or writing at it fail (stored versions: UNKNOWN offline, {})", v.name, h.stored_versions_cmd()),
                Some(format!("check no client uses {} first: convctl plan --retire {}", v.name, v.name)),
                head.at_def(&v.name, None),
            ),
            _ => {}
        }
    }
    for v in h.versions.iter().filter(|v| v.served && b.version(&v.name).is_none_or(|bv| !bv.served)) {
        out.push(
            "NewVersion",
            format!("version {} is newly served", v.name),
            None,
            head.at_def(&v.name, None),
        );
    }
    for v in h.versions.iter().filter(|v| b.version(&v.name).is_some()) {
        schema(base, head, &v.name, out);
    }
}

/// `required` fields, as `a.b` paths, of a raw openAPIV3Schema.
fn required(schema: &Value, prefix: &str, out: &mut BTreeSet<String>, depth: usize) {
    if depth > 64 {
        return;
    }
    let join = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        out.extend(req.iter().filter_map(Value::as_str).map(join));
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            required(sub, &join(k), out, depth + 1);
        }
    }
    if let Some(items) = schema.get("items") {
        required(items, &format!("{prefix}[]"), out, depth + 1);
    }
}

fn enum_of(node: &dco_engine::schema::Node) -> Option<Vec<String>> {
    node.scalar()?.enumeration.as_ref().map(|e| e.iter().map(|v| v.to_string()).collect())
}

/// Schema changes of one version that existing objects at it may not survive.
fn schema(base: &Revision, head: &Revision, v: &str, out: &mut Out) {
    let (rb, rh) = (base.schema(v), head.schema(v));
    if rb == rh {
        return;
    }
    let (fb, fh) = (FlatSchema::object(&rb), FlatSchema::object(&rh));
    let lb: BTreeMap<&str, &dco_engine::schema::Node> = fb.leaves().collect();
    let lh: BTreeMap<&str, &dco_engine::schema::Node> = fh.leaves().collect();
    for (p, nb) in &lb {
        match lh.get(p) {
            None if fh.get(p).is_none() => out.push(
                "FieldRemoved",
                format!("version {v}: field {p} is gone from the schema: existing objects that set it lose it on their next write (the apiserver prunes unknown fields)"),
                Some(format!("keep {p} in {v}'s schema, or move it with a rule in a new version")),
                base.at_def(v, Some(p)),
            ),
            None => {}
            Some(nh) if nb.describe() != nh.describe() && enum_of(nb).is_none() => out.push(
                "FieldTypeChanged",
                format!("version {v}: field {p} changed from {} to {}: existing objects fail validation on their next write", nb.describe(), nh.describe()),
                Some("change a field's type only in a new version, with a TypeCoerce rule between them".into()),
                head.at_def(v, Some(p)),
            ),
            Some(nh) => {
                if let (Some(eb), Some(eh)) = (enum_of(nb), enum_of(nh)) {
                    let gone: Vec<&String> = eb.iter().filter(|x| !eh.contains(x)).collect();
                    if !gone.is_empty() {
                        out.push(
                            "EnumValueRemoved",
                            format!("version {v}: field {p} no longer allows {}: existing objects with those values fail validation on their next write", gone.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
                            Some("keep the values, or map them with EnumRemap in a new version".into()),
                            head.at_def(v, Some(p)),
                        );
                    }
                } else if nb.describe() != nh.describe() {
                    out.push(
                        "FieldTypeChanged",
                        format!("version {v}: field {p} changed from {} to {}", nb.describe(), nh.describe()),
                        None,
                        head.at_def(v, Some(p)),
                    );
                }
            }
        }
    }
    for p in lh.keys().filter(|p| !lb.contains_key(*p) && fb.get(p).is_none()) {
        out.push("FieldAdded", format!("version {v}: field {p} is new"), None, head.at_def(v, Some(p)));
    }
    let (mut qb, mut qh) = (BTreeSet::new(), BTreeSet::new());
    required(&rb, "", &mut qb, 0);
    required(&rh, "", &mut qh, 0);
    for p in qh.difference(&qb) {
        out.push(
            "FieldRequired",
            format!("version {v}: field {p} is newly required: existing objects without it fail validation on their next write"),
            Some(format!("give {p} a default instead, or require it only in a new version")),
            head.at_def(v, Some(p)),
        );
    }
}

fn claimed(s: Option<&SpokeStatus>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in s.map(|s| s.rule_results.as_slice()).unwrap_or_default() {
        for p in r
            .hub_paths
            .iter()
            .map(|p| format!("hub {p}"))
            .chain(r.spoke_paths.iter().map(|p| format!("spoke {p}")))
        {
            out.insert(p, format!("{}", r.strategy));
        }
    }
    out
}

fn signatures(s: Option<&SpokeStatus>) -> Vec<String> {
    let mut v: Vec<String> = s.map(|s| s.rule_results.iter().map(claim_key).collect()).unwrap_or_default();
    v.sort();
    v
}

/// One direction of a verdict.
type Direction = fn(LosslessVerdict) -> bool;

fn spoke(base: &Revision, head: &Revision, v: &str, out: &mut Out) {
    let (sb, sh) = (base.side.spoke(v), head.side.spoke(v));
    let in_head = head.side.config.spec.spokes.iter().any(|s| s.version == v);
    if !in_head {
        if head.def.version(v).is_some_and(|x| x.served) {
            out.push(
                "CoverageLost",
                format!("spoke {v} has no rule set any more, but the version is still served"),
                Some(format!("keep the spoke, or stop serving {v} first (convctl plan --retire {v})")),
                base.side.location(base.side.rule_path(v, None)),
            );
        }
        return;
    }
    let dirs: [(&str, Direction); 2] = [("hub→spoke", |l| l.hub_to_spoke), ("spoke→hub", |l| l.spoke_to_hub)];
    for (label, get) in dirs {
        if let (Some(b), Some(h)) = (sb, sh)
            && get(b.lossless)
            && !get(h.lossless)
        {
            let causes: Vec<String> = h
                .rule_results
                .iter()
                .filter(|r| !get(r.verdict))
                .filter(|r| !b.rule_results.iter().any(|x| claim_key(x) == claim_key(r) && !get(x.verdict)))
                .map(describe_rule)
                .collect();
            let why = if causes.is_empty() {
                let newly: Vec<&String> = h
                    .fields_uncovered_hub
                    .iter()
                    .chain(&h.fields_uncovered_spoke)
                    .filter(|f| !b.fields_uncovered_hub.contains(f) && !b.fields_uncovered_spoke.contains(f))
                    .collect();
                if newly.is_empty() {
                    "no rule's verdict changed; its diagnostics did".to_string()
                } else {
                    format!(
                        "newly uncovered {}",
                        newly.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", ")
                    )
                }
            } else {
                format!("{} is lossy", causes.join(", "))
            };
            let idx = h.rule_results.iter().find(|r| !get(r.verdict)).map(|r| r.index);
            out.push(
                "LosslessToLossy",
                format!("spoke {v}: {label} used to round-trip losslessly and no longer does: {why}"),
                Some("make the rule lossless, or acknowledge the loss (acknowledgeLossy with a reason) and --allow LosslessToLossy".into()),
                head.side.location(head.side.rule_path(v, idx)),
            );
        }
    }
    let (cb, ch) = (claimed(sb), claimed(sh));
    for (p, st) in &cb {
        match ch.get(p) {
            None => {
                let rule = sb.and_then(|s| {
                    s.rule_results.iter().find(|r| {
                        let f = p.split_once(' ').map_or("", |x| x.1);
                        r.hub_paths.iter().chain(&r.spoke_paths).any(|c| c == f)
                    })
                });
                out.push(
                    "CoverageLost",
                    format!(
                        "spoke {v}: {p} had a rule{} and no longer does",
                        rule.map(|r| format!(" ({} of the base)", describe_rule(r))).unwrap_or_default()
                    ),
                    None,
                    base.side.location(base.side.rule_path(v, rule.map(|r| r.index))),
                );
            }
            Some(hs) if hs != st => out.push(
                "StrategyChanged",
                format!("spoke {v}: {p} changed strategy from {st} to {hs}"),
                None,
                head.side.location(head.side.rule_path(v, None)),
            ),
            _ => {}
        }
    }
    for p in ch.keys().filter(|p| !cb.contains_key(*p)) {
        out.push(
            "CoverageGained",
            format!("spoke {v}: {p} is newly covered by a rule"),
            None,
            head.side.location(head.side.rule_path(v, None)),
        );
    }
    // A rule gone whose paths nobody claims now is a removal, not an edit.
    for r in sb.map(|s| s.rule_results.as_slice()).unwrap_or_default() {
        let kept = sh.is_some_and(|h| h.rule_results.iter().any(|x| claim_key(x) == claim_key(r)));
        let orphaned = r.hub_paths.iter().any(|p| !ch.contains_key(&format!("hub {p}")))
            || r.spoke_paths.iter().any(|p| !ch.contains_key(&format!("spoke {p}")));
        if !kept && orphaned {
            out.push(
                "RuleRemoved",
                format!(
                    "spoke {v}: {} was removed and no rule of the head claims its paths",
                    describe_rule(r)
                ),
                None,
                base.side.location(base.side.rule_path(v, Some(r.index))),
            );
        }
    }
    // Same paths, same strategies, wired differently (two renames swapped).
    if cb.keys().eq(ch.keys()) && signatures(sb) != signatures(sh) {
        let hs = signatures(sh);
        let gone: Vec<String> = signatures(sb).into_iter().filter(|s| !hs.contains(s)).collect();
        if !gone.is_empty() {
            out.push(
                "MappingChanged",
                format!("spoke {v}: the same paths are claimed by the same strategies but wired differently; no rule of the head is {}", gone.join("; ")),
                None,
                head.side.location(head.side.rule_path(v, None)),
            );
        }
    }
}

fn compiles(r: &Revision, label: &str, out: &mut Out) {
    let errors: Vec<String> = r.side.compiled.report.errors().map(|d| d.to_string()).collect();
    if let Some(first) = errors.first() {
        out.push(
            "DoesNotCompile",
            format!("the {label} config does not compile ({} error(s), first: {first}); the comparison is between what each revision declares, not two working configs", errors.len()),
            Some(format!("run convctl validate on the {label} revision")),
            r.side.location("spec".into()),
        );
    }
}

pub fn run(args: &CompatArgs) -> Result<(), CliError> {
    for a in &args.allow {
        if !CLASSES.iter().any(|(c, _)| c == a) {
            return Err(CliError::Usage(format!(
                "--allow {a}: not a change class; the classes are {}",
                CLASSES.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let (base, base_co) = Revision::open(&args.base, args)?;
    let (head, head_co) = Revision::open(&args.head, args)?;
    if base.def.target.kind() != head.def.target.kind() || base.def.target.name() != head.def.target.name() {
        return Err(CliError::Usage(format!(
            "base targets {} {} but head targets {} {}; compare two revisions of one target",
            target_kind_label(base.def.target.kind()),
            base.def.target.name(),
            target_kind_label(head.def.target.kind()),
            head.def.target.name()
        )));
    }
    let mut out = Out { allow: &args.allow, findings: Vec::new() };
    compiles(&base, "base", &mut out);
    compiles(&head, "head", &mut out);
    let (hb, hh) = (&base.side.config.spec.hub_version, &head.side.config.spec.hub_version);
    if hb != hh {
        out.push(
            "HubChanged",
            format!(
                "the config's hub moved from {hb} to {hh}: every object converts through a different pivot"
            ),
            Some(format!("make it deliberate: follow convctl plan --to {hh}, then --allow HubChanged")),
            head.side.location("spec.hubVersion".into()),
        );
    }
    versions(&base, &head, &mut out);
    let spokes: BTreeSet<String> = base
        .side
        .config
        .spec
        .spokes
        .iter()
        .chain(&head.side.config.spec.spokes)
        .map(|s| s.version.clone())
        .collect();
    for v in &spokes {
        spoke(&base, &head, v, &mut out);
    }
    let rank = |s: Severity| match s {
        Severity::Error => 0,
        Severity::Warning => 1,
        Severity::Note => 2,
    };
    out.findings.sort_by(|a, b| {
        rank(a.severity).cmp(&rank(b.severity)).then(a.rule.cmp(&b.rule)).then(a.message.cmp(&b.message))
    });
    let mut findings = out.findings;
    crate::lint::add_lines(&mut findings);
    // Files of a git revision read as `REV:path`, not as the scratch directory they sit in.
    for co in [&base_co, &head_co].into_iter().flatten() {
        let dir = format!("{}/", co.dir.display());
        for f in &mut findings {
            if let Some(file) = f.location.file.as_mut().filter(|x| x.starts_with(&dir)) {
                *file = format!("{}:{}", co.rev, &file[dir.len()..]);
            }
        }
    }

    let breaking = findings.iter().filter(|f| f.fails).count();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "compatibility of {} {}: {} → {}",
        target_kind_label(head.def.target.kind()),
        head.def.target.name(),
        args.base.display(),
        args.head.display()
    );
    if !args.allow.is_empty() {
        let _ = writeln!(table, "acknowledged classes: {}", args.allow.join(", "));
    }
    if findings.is_empty() {
        let _ = writeln!(table, "\nno differences");
    } else {
        let _ = writeln!(table);
        for f in &findings {
            let allowed = if f.severity == Severity::Error && !f.fails { ", allowed" } else { "" };
            let _ = writeln!(table, "  [{}{allowed}] {}: {}", severity_of(&f.rule), f.rule, f.message);
            let _ = writeln!(
                table,
                "      at {} {}",
                file_line(&f.location),
                f.location.path.as_deref().unwrap_or("")
            );
            if let Some(fix) = &f.fix {
                let _ = writeln!(table, "      fix: {fix}");
            }
        }
    }
    let summary_line = if breaking > 0 {
        format!(
            "compat: {breaking} breaking change(s) of {} difference(s); acknowledge a deliberate one with --allow CLASS",
            findings.len()
        )
    } else {
        format!("compat: no unacknowledged breaking changes ({} difference(s))", findings.len())
    };
    let count = |s: &str| findings.iter().filter(|f| severity_of(&f.rule) == s).count();
    let summary = json!({
        "base": args.base.display().to_string(),
        "head": args.head.display().to_string(),
        "target": head.def.target.name(),
        "config": head.side.config.name,
        "allowed": args.allow,
        "breaking": count("breaking"),
        "review": count("review"),
        "safe": count("safe"),
        "failing": breaking,
    });
    let report =
        Report { command: "compat".into(), findings, cases: Vec::new(), summary, table, summary_line };
    emit_report(&report, &args.out)
}
