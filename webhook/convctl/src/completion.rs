//! `convctl completion bash|zsh|fish|powershell`, and the dynamic completion behind it.
//!
//! The script each shell sources calls `convctl` back (`COMPLETE=<shell>`) for every tab
//! press, so `--config`, `--crd` and `--xrd` complete to the files under the current directory
//! that really are a dco config, a CustomResourceDefinition or a CompositeResourceDefinition,
//! not to every file. `--context`/`--contexts` complete to the kubeconfig's contexts, and the
//! flags that take a name on a cluster to the names there (`crate::completion_live`).
//! Everything else completes as clap knows it (subcommands, flags, enum values, paths).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, ValueEnum};
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use clap_complete::env::{Bash, EnvCompleter, Fish, Powershell, Zsh};

use crate::CliError;
use crate::completion_live::{self, NameKind};

/// The variable the sourced scripts set when they ask for candidates.
const VAR: &str = "COMPLETE";
/// Bounds on the walk of the current tree, so a tab press in `$HOME` stays fast.
const MAX_DEPTH: usize = 6;
const MAX_ENTRIES: usize = 20_000;
/// Only this much of a file is read to tell its kind.
const MAX_READ: u64 = 256 * 1024;

#[derive(Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

#[derive(Args)]
pub struct CompletionArgs {
    /// The shell to print the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Which files a flag's value completes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Config,
    Crd,
    Xrd,
    /// A ConversionWebhookServer (only its names are completed, for `retarget`).
    Server,
}

impl FileKind {
    fn of_flag(id: &str) -> Option<FileKind> {
        match id {
            "config" | "base" | "head" => Some(FileKind::Config),
            "crd" => Some(FileKind::Crd),
            "xrd" => Some(FileKind::Xrd),
            _ => None,
        }
    }

    pub fn matches(self, kind: &str) -> bool {
        match self {
            FileKind::Config => matches!(kind, "XRDConversionConfig" | "CRDConversionConfig"),
            FileKind::Crd => kind == "CustomResourceDefinition",
            FileKind::Xrd => kind == "CompositeResourceDefinition",
            FileKind::Server => kind == "ConversionWebhookServer",
        }
    }
}

/// The command with the file completers attached to every `--config`/`--crd`/`--xrd` of
/// every subcommand (done here so the argument definitions stay where they are).
pub fn command() -> clap::Command {
    attach(crate::Cli::command())
}

fn attach(cmd: clap::Command) -> clap::Command {
    let ids: Vec<(String, FileKind)> = cmd
        .get_arguments()
        .filter(|a| a.get_action().takes_values())
        .filter_map(|a| FileKind::of_flag(a.get_id().as_str()).map(|k| (a.get_id().to_string(), k)))
        .collect();
    let mut cmd = cmd;
    // Where --crd/--xrd take a name on the cluster: always (migrate-storage), or with --live.
    let names_only = cmd.get_name() == "migrate-storage";
    let has_live = cmd.get_arguments().any(|a| a.get_id() == "live");
    for (id, kind) in ids {
        let live = match kind {
            FileKind::Crd if names_only || has_live => Some(NameKind::Crd),
            FileKind::Xrd if names_only || has_live => Some(NameKind::Xrd),
            _ => None,
        };
        let c = match (live, names_only) {
            (Some(n), true) => ArgValueCompleter::new(move |c: &OsStr| completion_live::names(n, c)),
            (Some(n), false) => ArgValueCompleter::new(move |c: &OsStr| {
                let mut all = candidates(kind, c);
                all.extend(completion_live::names(n, c));
                all
            }),
            (None, _) => ArgValueCompleter::new(completer(kind)),
        };
        cmd = cmd.mut_arg(id, |a| a.add(c));
    }
    let live_ids: Vec<(String, Option<NameKind>)> = cmd
        .get_arguments()
        .filter(|a| a.get_action().takes_values())
        .filter_map(|a| {
            let k = match a.get_id().as_str() {
                "context" | "contexts" => None,
                "xrd_name" => Some(NameKind::Xrd),
                "to_server" | "from_server" => Some(NameKind::Server),
                "config_names" => Some(NameKind::Config),
                _ => return None,
            };
            Some((a.get_id().to_string(), k))
        })
        .collect();
    for (id, kind) in live_ids {
        let c = match kind {
            None => ArgValueCompleter::new(completion_live::contexts),
            Some(n) => ArgValueCompleter::new(move |c: &OsStr| completion_live::names(n, c)),
        };
        cmd = cmd.mut_arg(id, |a| a.add(c));
    }
    cmd.mut_subcommands(attach)
}

fn completer(kind: FileKind) -> fn(&OsStr) -> Vec<CompletionCandidate> {
    match kind {
        FileKind::Config => |c| candidates(FileKind::Config, c),
        FileKind::Crd => |c| candidates(FileKind::Crd, c),
        FileKind::Xrd => |c| candidates(FileKind::Xrd, c),
        FileKind::Server => |c| candidates(FileKind::Server, c),
    }
}

fn candidates(kind: FileKind, current: &OsStr) -> Vec<CompletionCandidate> {
    let Ok(cwd) = std::env::current_dir() else { return Vec::new() };
    let prefix = current.to_string_lossy();
    files_of_kind(&cwd, kind)
        .into_iter()
        .filter(|p| p.starts_with(prefix.as_ref()) || prefix.is_empty())
        .map(CompletionCandidate::new)
        .collect()
}

/// The YAML/JSON files under `root` (relative paths, sorted) holding a document of `kind`.
/// Hidden directories and build output (`target`, `node_modules`) are skipped.
pub fn files_of_kind(root: &Path, kind: FileKind) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                break;
            }
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if depth < MAX_DEPTH && !name.starts_with('.') && name != "target" && name != "node_modules" {
                    stack.push((path, depth + 1));
                }
            } else if ft.is_file()
                && matches!(path.extension().and_then(OsStr::to_str), Some("yaml" | "yml" | "json"))
                && file_has_kind(&path, kind)
                && let Ok(rel) = path.strip_prefix(root)
            {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// Whether a top-level `kind:` (YAML) or `"kind":` (JSON) in the file's head names `kind`.
/// A text scan, not a parse: a tab press must not wait on a large file.
fn file_has_kind(path: &Path, kind: FileKind) -> bool {
    use std::io::Read as _;
    let Ok(f) = std::fs::File::open(path) else { return false };
    let mut text = String::new();
    if f.take(MAX_READ).read_to_string(&mut text).is_err() {
        return false;
    }
    text.lines().any(|line| {
        let v = if let Some(rest) = line.strip_prefix("kind:") {
            rest
        } else if let Some(i) = line.find("\"kind\"") {
            line[i + 6..].trim_start().trim_start_matches(':')
        } else {
            return false;
        };
        // The value: a quoted string up to its closing quote, or a plain word.
        let v = v.trim_start();
        let v = match v.strip_prefix('"').or_else(|| v.strip_prefix('\'')) {
            Some(q) => q.split(['"', '\'']).next().unwrap_or_default(),
            None => v.split([' ', '#', ',', '}']).next().unwrap_or_default(),
        };
        kind.matches(v.trim())
    })
}

/// Answers a shell's request for candidates (`COMPLETE=<shell> convctl -- ...`) and exits;
/// does nothing on an ordinary run.
pub fn answer_shell() {
    clap_complete::CompleteEnv::with_factory(command).var(VAR).complete();
}

pub fn run(args: &CompletionArgs) -> Result<(), CliError> {
    let mut buf = Vec::new();
    let shell: &dyn EnvCompleter = match args.shell {
        Shell::Bash => &Bash,
        Shell::Zsh => &Zsh,
        Shell::Fish => &Fish,
        Shell::Powershell => &Powershell,
    };
    shell
        .write_registration(VAR, "convctl", "convctl", "convctl", &mut buf)
        .map_err(|e| CliError::Usage(format!("cannot write the completion script: {e}")))?;
    crate::emit(&String::from_utf8_lossy(&buf));
    Ok(())
}
