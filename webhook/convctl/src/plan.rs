//! `convctl plan`: the ordered, gated steps to make a version the hub (storage/referenceable)
//! version, or to retire one, read from the definition and the config alone (docs/convctl.md,
//! "plan"). A step whose state only the cluster knows (stored versions, object counts,
//! Compositions) is UNKNOWN and names the command that tells it; steps that retire a version
//! stay blocked behind those until `--assume-verified`. With `--live` those states are read
//! from the cluster (live::storage) and each step carries the exact command that performs it.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use dco_api::config::TargetKind;
use serde::Serialize;
use serde_json::json;

use crate::diff::{TargetArgs, emit_report, target_kind_label};
use crate::output::{Case, OutputArgs, Report};
use crate::versions::Definition;
use crate::{CliError, load};

#[derive(Args)]
pub struct PlanArgs {
    /// The version to make the hub (the storage version of a CRD, the referenceable one of an XRD).
    #[arg(long, value_name = "VERSION", required_unless_present = "retire", conflicts_with = "retire")]
    pub to: Option<String>,
    /// The version to retire (stop serving and drop) instead.
    #[arg(long, value_name = "VERSION")]
    pub retire: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
    /// The conversion config of the target.
    #[arg(short = 'c', long = "config", value_name = "CONFIG")]
    pub config: Option<PathBuf>,
    /// The UNKNOWN steps were checked against the cluster: offer the retirement steps.
    #[arg(long)]
    pub assume_verified: bool,
    /// Read the target, status.storedVersions, the object count (a paged metadata-only LIST,
    /// 500 entries a request), the configs and, for an XRD, the Compositions from one cluster:
    /// --crd/--xrd then give the NAME. Each step then carries its command.
    #[arg(long)]
    pub live: bool,
    #[command(flatten)]
    pub cluster: crate::live::cluster::ClusterArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Done,
    Ready,
    Unknown,
    Blocked,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub number: usize,
    pub title: String,
    pub run: String,
    /// What must hold before the next step is safe.
    pub gate: String,
    /// The command that shows the gate holds (for UNKNOWN steps: the one that learns the state).
    pub verify: String,
    pub status: Status,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub blocked_by: String,
    /// The exact shell command that performs the step (`kubectl` or `convctl`), when there is
    /// one; a step that needs a person's edit has none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// A step that retires a version: never offered while an UNKNOWN step is unverified.
    #[serde(skip)]
    retires: bool,
}

struct Ctx<'a> {
    def: &'a Definition,
    config: Option<&'a load::Config>,
    config_arg: String,
    target_arg: String,
    steps: Vec<Step>,
    live: Option<&'a LiveState>,
}

/// What `--live` read from the cluster.
pub struct LiveState {
    pub context: String,
    /// ` --kubeconfig FILE --context NAME` for the printed commands.
    pub flags: String,
    pub stored: Vec<(String, Vec<String>)>,
    pub counts: Vec<(String, u64)>,
    pub configs: Vec<crate::unserve::ConfigRef>,
    pub compositions: Option<Vec<crate::unserve::CompositionRef>>,
}

impl LiveState {
    fn only_stored(&self, v: &str) -> bool {
        self.stored.iter().all(|(_, vs)| vs.iter().all(|x| x == v))
    }

    fn stored_text(&self) -> String {
        self.stored.iter().map(|(c, vs)| format!("{c}: [{}]", vs.join(", "))).collect::<Vec<_>>().join("; ")
    }

    fn counts_text(&self) -> String {
        self.counts.iter().map(|(c, n)| format!("{n} object(s) of {c}")).collect::<Vec<_>>().join(", ")
    }
}

fn status(done: bool) -> Status {
    if done { Status::Done } else { Status::Ready }
}

impl Ctx<'_> {
    fn add(&mut self, title: String, run: String, gate: String, verify: String, st: Status, why: String) {
        let blocked_by = if st == Status::Done { String::new() } else { why };
        let number = self.steps.len() + 1;
        self.steps.push(Step {
            number,
            title,
            run,
            gate,
            verify,
            status: st,
            blocked_by,
            command: String::new(),
            retires: false,
        });
    }

    /// Sets the last step's command (live: each step's exact command).
    fn command(&mut self, cmd: String) {
        if let Some(s) = self.steps.last_mut() {
            s.command = cmd;
        }
    }

    fn flags(&self) -> &str {
        self.live.map_or("", |l| l.flags.as_str())
    }

    /// `kubectl patch` of the definition by a JSON patch on `spec.versions[i]`, guarded by a
    /// test of the version's name there (a definition changed since it was read fails the patch).
    fn patch_version(&self, version: &str, ops: &str) -> String {
        let i = self.def.versions.iter().position(|v| v.name == version).unwrap_or(0);
        let ops = ops.replace("{i}", &i.to_string());
        format!(
            "kubectl patch {} {} --type=json -p '[{{\"op\":\"test\",\"path\":\"/spec/versions/{i}/name\",\"value\":\"{version}\"}},{ops}]'{}",
            self.resource(),
            self.name(),
            self.flags()
        )
    }

    fn versions_cmd(&self, check: Option<&str>) -> String {
        format!(
            "convctl versions --live {} {}{}{}",
            self.def.flag(),
            self.name(),
            check.map(|v| format!(" --check-unserve {v}")).unwrap_or_default(),
            self.flags()
        )
    }

    /// A step whose state the files cannot show; `why` says what is unknown and how to learn it.
    fn unknown(&mut self, title: String, run: String, gate: String, verify: String, why: &str) {
        self.add(title, run, gate, verify, Status::Unknown, format!("UNKNOWN offline: {why}"));
    }

    fn name(&self) -> &str {
        self.def.target.name()
    }

    /// The definition's resource for kubectl: the XRD itself, not the CRD Crossplane generates.
    fn resource(&self) -> &'static str {
        if self.def.target.kind() == TargetKind::Xrd { "compositeresourcedefinition" } else { "crd" }
    }

    fn in_config(&self, v: &str) -> bool {
        self.config.is_some_and(|c| c.spec.hub_version == v || c.spec.spokes.iter().any(|s| s.version == v))
    }

    fn validate_cmd(&self) -> String {
        format!("convctl validate --config {} {} {}", self.config_arg, self.def.flag(), self.target_arg)
    }

    fn migrate(&mut self, to: &str) {
        let (name, count) = (self.name().to_string(), self.def.count_cmd());
        let migrate = format!("convctl migrate-storage {} {name}{}", self.def.flag(), self.flags());
        let prune = format!(
            "convctl migrate-storage {} {name} --prune-stored-versions{}",
            self.def.flag(),
            self.flags()
        );
        let Some(live) = self.live else {
            self.unknown(
                format!("Rewrite every stored object at {to}"),
                migrate.clone(),
                format!("every object of {name} has been written since {to} became the storage version (object count: UNKNOWN, learn it with: {count})"),
                self.def.stored_versions_cmd(),
                "which versions objects are stored at, and how many objects there are, only the cluster knows",
            );
            self.command(migrate);
            self.unknown(
                "Prune status.storedVersions".into(),
                prune.clone(),
                format!("status.storedVersions lists only {to}"),
                self.def.stored_versions_cmd(),
                "status.storedVersions is in the cluster, not in the file",
            );
            self.command(prune);
            return;
        };
        // status.storedVersions is the apiserver's record of what objects are stored at: once it
        // lists only `to`, every object was rewritten (the prune refuses otherwise).
        let done = live.only_stored(to);
        let (stored, counts) = (live.stored_text(), live.counts_text());
        let verify = self.versions_cmd(None);
        self.add(
            format!("Rewrite every stored object at {to}"),
            migrate.clone(),
            format!("every object of {name} has been written since {to} became the storage version ({counts})"),
            verify.clone(),
            status(done),
            format!("status.storedVersions is {stored}: objects may be stored at another version than {to}; {counts} to rewrite"),
        );
        self.command(migrate);
        self.add(
            "Prune status.storedVersions".into(),
            prune.clone(),
            format!("status.storedVersions lists only {to}"),
            verify,
            status(done),
            format!("status.storedVersions is {stored}"),
        );
        self.command(prune);
    }

    fn retire(&mut self, old: &str) {
        let name = self.name().to_string();
        let v = self.def.version(old).cloned();
        let before = self.steps.len();
        self.add(
            format!("Stop serving {old}"),
            format!("edit {name}: set spec.versions[name={old}].served: false (mark it deprecated: true with a deprecationWarning a release earlier)"),
            format!("{old} is not in status.storedVersions and no client still reads or writes {old}"),
            format!("{}; kubectl get --raw /metrics | grep apiserver_requested_deprecated_apis | grep 'version=\"{old}\"'", self.def.stored_versions_cmd()),
            status(v.as_ref().is_none_or(|v| !v.served)),
            format!("{old} is still served"),
        );
        let gone = v.is_none() && !self.in_config(old);
        let why = match (v.is_some(), self.in_config(old)) {
            (true, true) => format!("the {old} version block and its spoke are still present"),
            (true, false) => format!("the {old} version block is still present"),
            _ => format!("the config still has a spoke for {old}"),
        };
        self.add(
            format!("Drop {old}"),
            format!("edit {name}: remove {old} from spec.versions, and its spoke from the config (the config itself when that is its last spoke) (irreversible for objects still stored at {old})"),
            format!("{old} has been unserved long enough that no client depends on it"),
            format!("convctl compat --base BEFORE_DIR --head AFTER_DIR; {}", self.validate_cmd()),
            status(gone),
            why,
        );
        if self.live.is_some() {
            let unserve = self
                .patch_version(old, r#"{"op":"replace","path":"/spec/versions/{i}/served","value":false}"#);
            self.steps[before].command = unserve;
            self.steps[before].verify = self.versions_cmd(Some(old));
            let mut cmds: Vec<String> = self
                .live
                .map(|l| l.configs.iter().filter_map(|c| c.remove_spoke_cmd(old, &l.flags)).collect())
                .unwrap_or_default();
            if v.is_some() {
                cmds.push(self.patch_version(old, r#"{"op":"remove","path":"/spec/versions/{i}"}"#));
            }
            self.steps[before + 1].command = cmds.join(" && ");
        }
        for s in &mut self.steps[before..] {
            s.retires = true;
        }
    }

    fn promote(&mut self, to: &str) {
        let (name, field, kind) = (self.name().to_string(), self.def.hub_field(), self.def.target.kind());
        let old = self.def.hub().map(str::to_string);
        let served = self.def.version(to).is_some_and(|v| v.served);
        self.add(
            format!("Serve {to} on the {}", target_kind_label(kind)),
            format!("edit {name}: set spec.versions[name={to}].served: true"),
            format!("{to} is served"),
            format!(
                "kubectl get {} {name} -o jsonpath='{{.spec.versions[?(@.name==\"{to}\")].served}}'",
                self.resource()
            ),
            status(served),
            format!("spec.versions[name={to}].served is not true"),
        );
        if self.live.is_some() {
            let cmd =
                self.patch_version(to, r#"{"op":"replace","path":"/spec/versions/{i}/served","value":true}"#);
            self.command(cmd);
        }
        // A target with one version converts nothing and needs no config.
        let wired = self.in_config(to) || self.def.versions.len() == 1;
        self.add(
            format!("Wire {to} into the conversion config"),
            format!(
                "add a spoke for {to} to the config (convctl suggest drafts its rules), then apply the config"
            ),
            format!("the config covers {to} and convctl validate is clean"),
            self.validate_cmd(),
            status(wired),
            match self.config {
                Some(c) => format!("{} has no spoke for {to}", c.name),
                None => "no config was given (-c CONFIG)".into(),
            },
        );
        let config_hub = self.config.map(|c| c.spec.hub_version.clone());
        let promoted = self.def.hub() == Some(to) && config_hub.as_deref().is_none_or(|h| h == to);
        let test = format!(
            "convctl test --config {} {} {} --samples SAMPLES_DIR",
            self.config_arg,
            self.def.flag(),
            self.target_arg
        );
        let (title, gate) = (
            format!("Test round trips through {to}"),
            "samples of every served version convert to every other version and back without unacknowledged loss".to_string(),
        );
        if promoted {
            // The round trips were the promotion's gate; the promotion is done.
            self.add(title, test.clone(), gate, test, Status::Done, String::new());
        } else {
            self.unknown(
                title,
                test.clone(),
                gate,
                test,
                "plan reads no samples; convctl test with samples of every version shows it",
            );
        }
        let why = match (&old, &config_hub) {
            (Some(o), _) if o != to => format!("the {field} version is still {o}"),
            (_, Some(h)) if h != to => {
                format!("{to} is the {field} version but the config still has spec.hubVersion: {h}")
            }
            _ => format!("no version is marked {field}: true"),
        };
        self.add(
            format!("Promote {to} to the hub"),
            format!(
                "edit {name}: move {field}: true {}to {to}; replace the config by the draft of `convctl rehub --to {to} --config {} {} {}` (hubVersion {to}, every spoke's rules re-expressed against it{}); validate both edited files, then apply them together",
                old.as_ref().filter(|o| o.as_str() != to).map(|o| format!("from {o} ")).unwrap_or_default(),
                self.config_arg,
                self.def.flag(),
                self.target_arg,
                old.as_ref().filter(|o| o.as_str() != to).map(|o| format!(", {o} a spoke")).unwrap_or_default()
            ),
            format!("the {field} version and spec.hubVersion are both {to}, and the round trips pass"),
            self.validate_cmd(),
            status(promoted),
            why,
        );
        if kind == TargetKind::Xrd
            && let Some(comps) = self.live.and_then(|l| l.compositions.as_ref())
        {
            let group = format!("{}/", self.def.target.group());
            let stale: Vec<String> = comps
                .iter()
                .filter(|c| {
                    c.kind == self.def.target.resource_kind()
                        && c.api_version.starts_with(&group)
                        && c.api_version != format!("{group}{to}")
                })
                .map(|c| format!("{} ({})", c.name, c.api_version))
                .collect();
            self.add(
                format!("Retarget Compositions at {to}"),
                format!("compositeTypeRef is immutable: for each Composition of {} not at {to}, apply a copy under a new name with spec.compositeTypeRef.apiVersion: {}/{to}, move its XRs to the copy, then delete it", self.def.target.resource_kind(), self.def.target.group()),
                format!("every Composition's compositeTypeRef names {to}"),
                "kubectl get compositions -o custom-columns=NAME:.metadata.name,TYPE:.spec.compositeTypeRef.apiVersion".into(),
                status(stale.is_empty()),
                format!("Compositions not at {to}: {}", stale.join(", ")),
            );
        } else if kind == TargetKind::Xrd {
            self.unknown(
                format!("Retarget Compositions at {to}"),
                format!("edit each Composition of {}: set spec.compositeTypeRef.apiVersion: {}/{to}", self.def.target.resource_kind(), self.def.target.group()),
                format!("every Composition's compositeTypeRef names {to}"),
                "kubectl get compositions -o custom-columns=NAME:.metadata.name,TYPE:.spec.compositeTypeRef.apiVersion".into(),
                "the Compositions are in the cluster or another tree",
            );
        }
        self.migrate(to);
        let mut retiring: Vec<String> = Vec::new();
        if let Some(o) = old.filter(|o| o != to) {
            retiring.push(o);
        }
        for v in &self.def.versions {
            if v.name != to && (v.deprecated || !v.served) && !retiring.contains(&v.name) {
                retiring.push(v.name.clone());
            }
        }
        for r in retiring {
            self.retire(&r);
        }
    }

    fn retirement(&mut self, old: &str) {
        let name = self.name().to_string();
        let is_hub = self.def.hub() == Some(old) || self.config.is_some_and(|c| c.spec.hub_version == old);
        self.add(
            format!("Move the hub off {old}"),
            format!(
                "convctl plan --to VERSION {} {} -c {}",
                self.def.flag(),
                self.target_arg,
                self.config_arg
            ),
            format!("{old} is neither the {} version nor the config's hub", self.def.hub_field()),
            self.validate_cmd(),
            status(!is_hub),
            format!("{old} is the hub: objects are stored at it"),
        );
        let deprecated = self.def.version(old).is_none_or(|v| v.deprecated || !v.served);
        self.add(
            format!("Deprecate {old}"),
            format!("edit {name}: set spec.versions[name={old}].deprecated: true and a deprecationWarning naming the replacement"),
            "clients get a warning on every request at the version for at least one release".into(),
            format!("kubectl get {} {name} -o jsonpath='{{.spec.versions[?(@.name==\"{old}\")].deprecated}}'", self.resource()),
            status(deprecated),
            format!("{old} is not marked deprecated"),
        );
        if self.live.is_some() && self.def.version(old).is_some() {
            let cmd = self
                .patch_version(old, r#"{"op":"add","path":"/spec/versions/{i}/deprecated","value":true}"#);
            self.command(cmd);
        }
        let hub = self.def.hub().unwrap_or("THE_HUB").to_string();
        self.migrate(&hub);
        self.retire(old);
    }

    /// The first READY step is the one to do now; every later READY step waits for it, and
    /// retirement waits for the UNKNOWN steps unless they were verified.
    fn gate(&mut self, assume_verified: bool) {
        let unknown: Vec<String> =
            self.steps.iter().filter(|s| s.status == Status::Unknown).map(|s| s.number.to_string()).collect();
        if !assume_verified && !unknown.is_empty() {
            for s in self.steps.iter_mut().filter(|s| s.retires && s.status == Status::Ready) {
                s.status = Status::Blocked;
                s.blocked_by = format!(
                    "step(s) {} are UNKNOWN offline and retiring a version is irreversible; run their verify commands, then re-run with --assume-verified",
                    unknown.join(", ")
                );
            }
        }
        if let Some(first) = self.steps.iter().position(|s| s.status == Status::Ready) {
            let (n, title) = (self.steps[first].number, self.steps[first].title.clone());
            for s in self.steps[first + 1..].iter_mut().filter(|s| s.status == Status::Ready) {
                s.status = Status::Blocked;
                // Keep the step's own reason after the order's: it says what is left of it.
                s.blocked_by = if s.blocked_by.is_empty() {
                    format!("step {n} ({title}) is not done yet")
                } else {
                    format!("step {n} ({title}) is not done yet; then: {}", s.blocked_by)
                };
            }
        }
    }
}

fn word(s: Status) -> &'static str {
    match s {
        Status::Done => "DONE",
        Status::Ready => "READY",
        Status::Unknown => "UNKNOWN",
        Status::Blocked => "BLOCKED",
    }
}

/// Reads the one cluster `--live` names: the definition, its first config and the facts.
fn read_live(
    args: &PlanArgs,
    name_arg: &std::path::Path,
    kind: TargetKind,
) -> Result<(Definition, Option<load::Config>, LiveState), CliError> {
    if args.config.is_some() {
        return Err(CliError::Usage("--live reads the target's config from the cluster: drop -c".into()));
    }
    let name = crate::versions::live_name(name_arg, kind)?;
    let members = args.cluster.members()?;
    let [m] = members.as_slice() else {
        return Err(CliError::Usage(format!(
            "plan --live plans for one cluster and {} were given: run it per context (--context NAME)",
            members.len()
        )));
    };
    let read = crate::live::block_on(async {
        let client = m.connect(args.cluster.timeout()).await?;
        let live = crate::live::storage::read(&client, &m.label, kind, &name).await?;
        let counts = crate::live::storage::count(&client, &live).await?;
        Ok::<_, String>((live, counts))
    });
    let (live, counts) = read.map_err(|e| CliError::Failed(format!("{}: {e}", m.label)))?;
    if let Some(e) = live.unreadable.first() {
        return Err(CliError::Failed(format!("{}: a config naming {name} cannot be read: {e}", m.label)));
    }
    let state = LiveState {
        context: m.label.clone(),
        flags: crate::versions::member_flags(m),
        stored: live.stored,
        counts,
        configs: live.configs,
        compositions: live.compositions,
    };
    Ok((live.def, live.loaded.into_iter().next(), state))
}

pub fn run(args: &PlanArgs) -> Result<(), CliError> {
    let (path, kind) = args.target.path_and_kind()?;
    let (def, config, live) = if args.live {
        let (d, c, l) = read_live(args, path, kind)?;
        (d, c, Some(l))
    } else {
        let c = args.cluster.clone();
        if c.kubeconfig.is_some()
            || c.context.is_some()
            || !c.contexts.is_empty()
            || c.kubeconfig_dir.is_some()
        {
            return Err(CliError::Usage(
                "--kubeconfig, --context, --contexts and --kubeconfig-dir read a cluster: add --live".into(),
            ));
        }
        let config = match &args.config {
            Some(p) => Some(load::config(p)?),
            None => None,
        };
        (Definition::read(path, kind)?, config, None)
    };
    let (version, retiring) = match (&args.to, &args.retire) {
        (Some(v), None) => (v.clone(), false),
        (None, Some(v)) => (v.clone(), true),
        _ => return Err(CliError::Usage("give one of --to VERSION or --retire VERSION".into())),
    };
    if def.version(&version).is_none() && !retiring {
        return Err(CliError::Usage(format!(
            "--to {version}: {} has versions {}; add the {version} block to spec.versions first, then re-run",
            def.target.name(),
            def.versions.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    let mut cx = Ctx {
        def: &def,
        config: config.as_ref(),
        config_arg: args.config.as_ref().map_or_else(|| "CONFIG".into(), |p| p.display().to_string()),
        target_arg: if live.is_some() { "TARGET_FILE".into() } else { path.display().to_string() },
        steps: Vec::new(),
        live: live.as_ref(),
    };
    if retiring {
        cx.retirement(&version)
    } else {
        cx.promote(&version)
    }
    cx.gate(args.assume_verified);
    let steps = cx.steps;

    let goal = if retiring { format!("retire {version}") } else { format!("make {version} the hub") };
    let mut table = String::new();
    if let Some(l) = &live {
        let _ = writeln!(table, "[{}]", l.context);
    }
    let _ = writeln!(table, "{} {}: {goal}", target_kind_label(kind), def.target.name());
    if let Some(l) = &live {
        let _ = writeln!(table, "status.storedVersions: {}; {}", l.stored_text(), l.counts_text());
    }
    if let Some(c) = &config {
        let _ = writeln!(table, "config {} (hub {})", c.name, c.spec.hub_version);
    }
    let _ = writeln!(table, "{} version now: {}\n", def.hub_field(), def.hub().unwrap_or("(none)"));
    let next = steps.iter().find(|s| s.status == Status::Ready).map(|s| s.number);
    for s in &steps {
        let marker = if Some(s.number) == next { "▶ " } else { "  " };
        let _ = writeln!(table, "{marker}{}. [{}] {}", s.number, word(s.status), s.title);
        let _ = writeln!(table, "     run:     {}", s.run);
        if !s.command.is_empty() && s.command != s.run {
            let _ = writeln!(table, "     command: {}", s.command);
        }
        let _ = writeln!(table, "     gate:    {}", s.gate);
        let _ = writeln!(table, "     verify:  {}", s.verify);
        if !s.blocked_by.is_empty() {
            let label = match s.status {
                Status::Unknown => "unknown:",
                Status::Blocked => "blocked:",
                _ => "pending:",
            };
            let _ = writeln!(table, "     {label:<8} {}", s.blocked_by);
        }
    }
    let unknown = steps.iter().filter(|s| s.status == Status::Unknown).count();
    let summary_line = match next {
        Some(n) => format!("plan: NEXT step {n} — {}; {unknown} step(s) UNKNOWN offline", steps[n - 1].title),
        None if unknown > 0 && live.is_some() => format!(
            "plan: nothing outstanding the cluster shows; {unknown} step(s) UNKNOWN: run their verify commands"
        ),
        None if unknown > 0 => format!(
            "plan: nothing outstanding that files can show; {unknown} step(s) UNKNOWN offline: run their verify commands"
        ),
        None => format!("plan: nothing to do: {goal} is complete"),
    };
    let cases: Vec<Case> = steps
        .iter()
        .map(|s| Case {
            group: format!("plan {goal}"),
            name: format!("{}. {}", s.number, s.title),
            status: word(s.status).to_lowercase(),
            fails: false,
            detail: format!("run: {}\ngate: {}\nverify: {}", s.run, s.gate, s.verify),
            seconds: 0.0,
            data: serde_json::to_value(s).unwrap_or_default(),
        })
        .collect();
    let mut summary = json!({
        "kind": target_kind_label(kind),
        "target": def.target.name(),
        "config": config.as_ref().map(|c| c.name.clone()),
        "goal": if retiring { "retire" } else { "hub" },
        "version": version,
        "currentHub": def.hub(),
        "next": next,
        "unknown": unknown,
        "steps": steps,
    });
    if let Some(l) = &live {
        summary["context"] = json!(l.context);
        summary["storedVersions"] =
            l.stored.iter().map(|(c, vs)| (c.clone(), json!(vs))).collect::<serde_json::Map<_, _>>().into();
        summary["objects"] =
            l.counts.iter().map(|(c, n)| (c.clone(), json!(n))).collect::<serde_json::Map<_, _>>().into();
    }
    let report = Report { command: "plan".into(), findings: Vec::new(), cases, summary, table, summary_line };
    emit_report(&report, &args.out)
}
