//! convctl: check a dco conversion config against its target's schemas, offline or against
//! live clusters and fleets, and retire versions (docs/convctl.md).
//!
//! Exit codes: 0 success, 1 the config or a sample fails (diagnostics, conversion errors,
//! loss), 2 usage (bad arguments, unreadable or malformed input files).

mod analyze;
mod checks;
mod compat;
mod completion;
mod completion_live;
mod coverage;
mod crossplane_status;
mod diff;
mod diff_live;
mod fuzz;
mod golden;
mod help;
mod import;
mod keys;
mod kyverno;
mod lint;
mod live;
mod load;
mod locate;
mod migrate_storage;
mod output;
mod patch_preview;
mod plan;
mod rehub;
mod retarget;
mod roundtrip;
mod samples;
mod suggest;
mod test_report;
mod unserve;
mod validate;
mod version;
mod versions;
mod xpkg;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use dco_api::config::TargetKind;
use dco_engine::{Compiled, Target, compile};

/// What went wrong, and so the exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad arguments or unusable input files: exit 2.
    #[error("{0}")]
    Usage(String),
    /// The config or a sample fails: exit 1 (the details are already printed).
    #[error("{0}")]
    Failed(String),
}

#[derive(Parser)]
#[command(
    name = "convctl",
    version = version::LONG,
    about = "Validate, analyze, convert and round-trip test dco conversion configs, offline or against live clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile the config against the target's schemas; print the diagnostics.
    Validate {
        #[command(flatten)]
        inputs: Inputs,
        #[command(flatten)]
        output: output::OutputArgs,
    },
    /// Show per-spoke and per-rule verdicts, claims and uncovered fields.
    Analyze {
        #[command(flatten)]
        inputs: Inputs,
        #[command(flatten)]
        output: output::OutputArgs,
    },
    /// Convert a sample object to another version.
    Convert {
        #[command(flatten)]
        inputs: Inputs,
        /// The object (YAML or JSON; several documents are converted one by one).
        #[arg(long)]
        sample: PathBuf,
        /// The version to convert to.
        #[arg(long)]
        to: String,
        /// The sample's version, when its apiVersion is missing (or to check it).
        #[arg(long)]
        from: Option<String>,
        #[arg(short, long, value_enum, default_value_t = ObjectFormat::Yaml)]
        output: ObjectFormat,
    },
    /// Convert every sample to every other version and back; report what did not survive.
    Test(roundtrip::TestArgs),
    /// Propose FieldRename and TypeCoerce rules for uncovered fields (each one compiles).
    Suggest(suggest::SuggestArgs),
    /// Draft the config rewritten around another hub version (never applied).
    Rehub(rehub::RehubArgs),
    /// Print the spec.conversion apply body the operator sends to the target.
    PatchPreview(patch_preview::PatchPreviewArgs),
    /// Print helper manifests (Kyverno policies) for a config's target; nothing is applied.
    #[command(subcommand)]
    Generate(kyverno::Generate),
    /// Print a shell completion script (bash, zsh, fish, powershell).
    Completion(completion::CompletionArgs),
    /// Print the version, git commit and build target.
    Version(version::VersionArgs),
    /// Translate the reference project's configs and servers into dco's; report every change.
    Import(import::ImportArgs),
    /// Compare two revisions of a target and its config; fail on breaking changes.
    Compat(compat::CompatArgs),
    /// Compare two configs of one target: coverage, rules, lossless verdicts, diagnostics.
    Diff(diff::DiffArgs),
    /// Find every config in files or trees, pair it with its target there, validate both.
    Lint(lint::LintArgs),
    /// The ordered steps to make a version the hub, or to retire one (offline, or --live).
    Plan(plan::PlanArgs),
    /// List the target's versions: served, storage, deprecated, hub or spoke in the config.
    Versions(versions::VersionsArgs),
    /// Rewrite every object at the storage version (live), then prune status.storedVersions.
    MigrateStorage(migrate_storage::MigrateStorageArgs),
    /// Move configs (all, or a canary share) to another webhook server by their pin (live).
    Retarget(retarget::RetargetArgs),
    /// Crossplane views of the live cluster (read only).
    #[command(subcommand)]
    Crossplane(crossplane_status::Crossplane),
}

#[derive(Args)]
struct Inputs {
    /// The XRDConversionConfig or CRDConversionConfig (conversion.dco.rs/v1alpha1).
    #[arg(short, long)]
    config: PathBuf,
    /// The CustomResourceDefinition the config targets.
    #[arg(long, conflicts_with_all = ["xrd", "package"], required_unless_present_any = ["xrd", "package"])]
    crd: Option<PathBuf>,
    /// The Crossplane CompositeResourceDefinition the config targets.
    #[arg(short = 'x', long)]
    xrd: Option<PathBuf>,
    /// A Crossplane package (.xpkg image tarball, OCI layout, or package.yaml) holding the XRD.
    #[arg(long, conflicts_with = "xrd", value_name = "XPKG")]
    package: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ObjectFormat {
    Yaml,
    Json,
}

/// The config, its target and the compile outcome.
pub struct Loaded {
    pub config: load::Config,
    pub target: Target,
    pub compiled: Compiled,
}

impl Inputs {
    fn load(&self) -> Result<Loaded, CliError> {
        let config = load::config(&self.config)?;
        let (path, kind) = match (&self.crd, self.xrd.as_ref().or(self.package.as_ref())) {
            (Some(p), None) => (p, TargetKind::Crd),
            (None, Some(p)) => (p, TargetKind::Xrd),
            _ => return Err(CliError::Usage("give exactly one of --crd or --xrd".into())),
        };
        if config.kind != kind {
            let (have, flag) = match config.kind {
                TargetKind::Xrd => ("an XRDConversionConfig", "--xrd"),
                TargetKind::Crd => ("a CRDConversionConfig", "--crd"),
            };
            return Err(CliError::Usage(format!(
                "{} is {have}; give its target with {flag}",
                self.config.display()
            )));
        }
        let target =
            if self.package.is_some() { xpkg::target(path, &config)? } else { load::target(path, kind)? };
        load::same_target(&config, &target)?;
        let compiled = compile(&config.spec, &target);
        Ok(Loaded { config, target, compiled })
    }
}

impl Loaded {
    /// Config-level problems the engine cannot see (the config names another target).
    pub fn extra_errors(&self) -> Vec<String> {
        if self.config.target_name != self.target.name() {
            vec![format!(
                "config {} targets {} but the given definition is {}; give the matching definition or fix the target name",
                self.config.name,
                self.config.target_name,
                self.target.name()
            )]
        } else {
            Vec::new()
        }
    }

    pub fn ok(&self) -> bool {
        self.compiled.plan.is_some() && self.extra_errors().is_empty()
    }
}

fn main() -> ExitCode {
    completion::answer_shell();
    let cli = match Cli::from_arg_matches(&help::matches(Cli::command())) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Suggest(args) => suggest::run(&args),
        Command::Rehub(args) => rehub::run(&args),
        Command::PatchPreview(args) => patch_preview::run(&args),
        Command::Generate(g) => kyverno::run(&g),
        Command::Completion(args) => completion::run(&args),
        Command::Version(args) => version::run(&args),
        Command::Import(args) => import::run(&args),
        Command::Validate { inputs, output } => {
            inputs.load().and_then(|l| validate::run(&l, &inputs.config, &output))
        }
        Command::Analyze { inputs, output } => {
            inputs.load().and_then(|l| analyze::run(&l, &inputs.config, &output))
        }
        Command::Convert { inputs, sample, to, from, output } => {
            inputs.load().and_then(|l| convert(&l, &sample, &to, from.as_deref(), output))
        }
        Command::Test(args) if args.live.live => live::test::run(&args),
        Command::Test(args) => args.inputs.load().and_then(|l| roundtrip::run(&l, &args)),
        Command::Compat(args) => compat::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Lint(args) => lint::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Versions(args) => versions::run(&args),
        Command::Retarget(args) => retarget::run(&args),
        Command::Crossplane(c) => crossplane_status::run(&c),
        Command::MigrateStorage(args) => migrate_storage::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Failed(msg)) => {
            if !msg.is_empty() {
                eprintln!("convctl: {msg}");
            }
            ExitCode::from(1)
        }
        Err(CliError::Usage(msg)) => {
            eprintln!("convctl: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Writes to stdout; a closed pipe (`convctl ... | head`) is not an error worth a panic.
pub fn emit(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Fails with the diagnostics when the config does not compile (for convert and test).
pub fn require_plan(l: &Loaded) -> Result<std::sync::Arc<dco_engine::Plan>, CliError> {
    match (&l.compiled.plan, l.extra_errors().is_empty()) {
        (Some(p), true) => Ok(p.clone()),
        _ => {
            for e in l.extra_errors() {
                eprintln!("error: {e}");
            }
            for d in l.compiled.report.errors() {
                eprintln!("error: {d}");
            }
            Err(CliError::Failed(format!(
                "{} does not compile; run convctl validate for details",
                l.config.name
            )))
        }
    }
}

fn convert(
    l: &Loaded,
    sample: &std::path::Path,
    to: &str,
    from: Option<&str>,
    output: ObjectFormat,
) -> Result<(), CliError> {
    let plan = require_plan(l)?;
    if !plan.versions().contains(&to) {
        return Err(CliError::Usage(format!(
            "--to {to}: {} has versions {}",
            l.target.name(),
            plan.versions().join(", ")
        )));
    }
    let mut converted = Vec::new();
    for (label, mut obj) in load::samples_in_file(sample)? {
        match (load::version_of(&obj), from) {
            (Some(have), Some(want)) if have != want => {
                return Err(CliError::Usage(format!(
                    "{label}: --from {want} but the object's apiVersion says {have}"
                )));
            }
            (None, Some(want)) => {
                obj["apiVersion"] = serde_json::Value::String(format!("{}/{want}", plan.group()));
            }
            (None, None) => {
                return Err(CliError::Usage(format!(
                    "{label}: the object has no apiVersion; give --from VERSION"
                )));
            }
            _ => {}
        }
        let out = plan
            .convert(&obj, &format!("{}/{to}", plan.group()))
            .map_err(|e| CliError::Failed(format!("{label}: {e}")))?;
        converted.push(out);
    }
    let text = match output {
        ObjectFormat::Json => {
            let v =
                if converted.len() == 1 { converted.remove(0) } else { serde_json::Value::Array(converted) };
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
        }
        ObjectFormat::Yaml => converted
            .iter()
            .map(|v| serde_yaml::to_string(v).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n"),
    };
    crate::emit(&text);
    Ok(())
}
