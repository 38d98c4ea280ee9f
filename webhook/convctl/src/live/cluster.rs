//! Which clusters a live command talks to: one kubeconfig context, a list of contexts, or
//! every kubeconfig file in a directory (a fleet). Each is a [`Member`] with a label that
//! names it in every finding: the context, `FILE:CONTEXT`, or the file's name.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::CliError;

/// At most this many kubeconfig files are read from `--kubeconfig-dir`.
pub const MAX_FLEET_FILES: usize = 500;
/// A kubeconfig larger than this is refused (they are a few KB).
pub const MAX_KUBECONFIG_BYTES: u64 = 4 << 20;

/// The clusters to read. With none of these flags: the current context of `$KUBECONFIG` (or
/// `~/.kube/config`), as kubectl does.
#[derive(Args, Clone, Debug, Default)]
pub struct ClusterArgs {
    /// The kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE", conflicts_with = "kubeconfig_dir")]
    pub kubeconfig: Option<PathBuf>,
    /// The context to use (default: the kubeconfig's current context).
    #[arg(long, value_name = "NAME", conflicts_with = "contexts")]
    pub context: Option<String>,
    /// Several contexts, comma-separated: one report across them, each finding naming its context.
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub contexts: Vec<String>,
    /// Every kubeconfig file in this directory is a cluster (its current context, or each of
    /// --contexts). Hidden files, READMEs and *.md are skipped.
    #[arg(long, value_name = "DIR")]
    pub kubeconfig_dir: Option<PathBuf>,
    /// The timeout of each request to a cluster, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub request_timeout: u64,
}

/// One cluster of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// How findings name it: the context, `FILE:CONTEXT`, or the kubeconfig file's name.
    pub label: String,
    /// `None`: $KUBECONFIG, then ~/.kube/config.
    pub kubeconfig: Option<PathBuf>,
    /// `None`: the kubeconfig's current context.
    pub context: Option<String>,
}

impl ClusterArgs {
    /// The clusters these flags name, in a stable order.
    pub fn members(&self) -> Result<Vec<Member>, CliError> {
        if self.contexts.iter().any(|c| c.trim().is_empty()) {
            return Err(CliError::Usage("--contexts contains an empty name: give NAME,NAME,...".into()));
        }
        let files: Vec<Option<PathBuf>> = match &self.kubeconfig_dir {
            Some(dir) => fleet_files(dir)?.into_iter().map(Some).collect(),
            None => vec![self.kubeconfig.clone()],
        };
        let in_dir = self.kubeconfig_dir.is_some();
        let mut out = Vec::new();
        for file in files {
            let base = file.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
            if self.contexts.is_empty() {
                let label = match (&self.context, in_dir.then_some(base.clone()).flatten()) {
                    (Some(c), Some(b)) => format!("{b}:{c}"),
                    (Some(c), None) => c.clone(),
                    (None, Some(b)) => b,
                    (None, None) => {
                        current_context(file.as_deref()).unwrap_or_else(|| "current-context".into())
                    }
                };
                out.push(Member { label, kubeconfig: file, context: self.context.clone() });
            } else {
                for c in &self.contexts {
                    let label = match in_dir.then_some(base.clone()).flatten() {
                        Some(b) => format!("{b}:{c}"),
                        None => c.clone(),
                    };
                    out.push(Member { label, kubeconfig: file.clone(), context: Some(c.clone()) });
                }
            }
        }
        Ok(out)
    }

    /// The request timeout as a duration (at least 1 s).
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout.max(1))
    }
}

impl Member {
    /// A client for this cluster. The error is this member's finding: it names the file,
    /// the context and what to check.
    pub async fn connect(&self, timeout: Duration) -> Result<Client, String> {
        let where_ = match &self.kubeconfig {
            Some(p) => p.display().to_string(),
            None => "$KUBECONFIG or ~/.kube/config".into(),
        };
        let kc = match &self.kubeconfig {
            Some(p) => read_kubeconfig(p)?,
            None => Kubeconfig::read().map_err(|e| format!("reading the kubeconfig ({where_}): {e}"))?,
        };
        if let Some(ctx) = &self.context
            && !kc.contexts.iter().any(|c| &c.name == ctx)
        {
            let known: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "context {ctx:?} is not in {where_} (it has: {}); pass one of those to --context/--contexts",
                known.join(", ")
            ));
        }
        let opts = KubeConfigOptions { context: self.context.clone(), ..Default::default() };
        let mut cfg = Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| format!("the kubeconfig {where_} (context {}): {e}", self.context_name()))?;
        cfg.connect_timeout = Some(timeout);
        cfg.read_timeout = Some(timeout);
        cfg.write_timeout = Some(timeout);
        Client::try_from(cfg).map_err(|e| format!("a client for {}: {e}", self.label))
    }

    fn context_name(&self) -> &str {
        self.context.as_deref().unwrap_or("current")
    }
}

/// Names of the contexts in `file` (or $KUBECONFIG / ~/.kube/config); empty when unreadable.
/// Used by shell completion.
pub fn context_names(file: Option<&Path>) -> Vec<String> {
    let kc = match file {
        Some(p) => read_kubeconfig(p).ok(),
        None => Kubeconfig::read().ok(),
    };
    kc.map(|k| k.contexts.into_iter().map(|c| c.name).collect()).unwrap_or_default()
}

fn current_context(file: Option<&Path>) -> Option<String> {
    let kc = match file {
        Some(p) => read_kubeconfig(p).ok()?,
        None => Kubeconfig::read().ok()?,
    };
    kc.current_context
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, String> {
    let len =
        std::fs::metadata(path).map_err(|e| format!("reading the kubeconfig {}: {e}", path.display()))?.len();
    if len > MAX_KUBECONFIG_BYTES {
        return Err(format!(
            "the kubeconfig {} is {len} bytes, over the {MAX_KUBECONFIG_BYTES}-byte bound: is it a kubeconfig?",
            path.display()
        ));
    }
    Kubeconfig::read_from(path).map_err(|e| format!("reading the kubeconfig {}: {e}", path.display()))
}

/// The kubeconfig files of a fleet directory, sorted.
fn fleet_files(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| CliError::Usage(format!("reading --kubeconfig-dir {}: {e}", dir.display())))?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_lowercase();
        let is_file = e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink());
        if !is_file || name.starts_with('.') || name.ends_with(".md") || name.starts_with("readme") {
            continue;
        }
        out.push(e.path());
    }
    out.sort();
    if out.is_empty() {
        return Err(CliError::Usage(format!(
            "--kubeconfig-dir {}: no kubeconfig files in it (hidden files, READMEs and *.md are skipped)",
            dir.display()
        )));
    }
    if out.len() > MAX_FLEET_FILES {
        return Err(CliError::Usage(format!(
            "--kubeconfig-dir {} holds {} files, over the bound of {MAX_FLEET_FILES}: split the fleet",
            dir.display(),
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: impl FnOnce(&mut ClusterArgs)) -> ClusterArgs {
        let mut a = ClusterArgs { request_timeout: 30, ..Default::default() };
        f(&mut a);
        a
    }

    #[test]
    fn contexts_are_labelled_by_name_and_dir_members_by_file() {
        let a = args(|a| {
            a.kubeconfig = Some("/k/config".into());
            a.contexts = vec!["east".into(), "west".into()];
        });
        let m = a.members().unwrap();
        assert_eq!(m.iter().map(|m| m.label.as_str()).collect::<Vec<_>>(), ["east", "west"]);
        assert_eq!(m[1].context.as_deref(), Some("west"));

        let dir = std::env::temp_dir().join(format!("convctl-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["b.yaml", "a.yaml", ".hidden", "README.md"] {
            std::fs::write(dir.join(f), "apiVersion: v1\nkind: Config\n").unwrap();
        }
        let a = args(|a| a.kubeconfig_dir = Some(dir.clone()));
        let labels: Vec<String> = a.members().unwrap().into_iter().map(|m| m.label).collect();
        assert_eq!(labels, ["a.yaml", "b.yaml"]);
        let a = args(|a| {
            a.kubeconfig_dir = Some(dir.clone());
            a.contexts = vec!["x".into()];
        });
        let labels: Vec<String> = a.members().unwrap().into_iter().map(|m| m.label).collect();
        assert_eq!(labels, ["a.yaml:x", "b.yaml:x"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_context_name_and_an_empty_dir_are_usage_errors() {
        let a = args(|a| a.contexts = vec!["a".into(), " ".into()]);
        assert!(matches!(a.members(), Err(CliError::Usage(m)) if m.contains("empty name")));
        let dir = std::env::temp_dir().join(format!("convctl-fleet-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = args(|a| a.kubeconfig_dir = Some(dir.clone()));
        assert!(matches!(a.members(), Err(CliError::Usage(m)) if m.contains("no kubeconfig files")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unknown_context_is_the_members_error_naming_the_known_ones() {
        let dir = std::env::temp_dir().join(format!("convctl-fleet-ctx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n\
             users:\n- name: u\n  user: {}\ncontexts:\n- name: real\n  context: {cluster: c, user: u}\ncurrent-context: real\n",
        )
        .unwrap();
        let m = Member { label: "typo".into(), kubeconfig: Some(file.clone()), context: Some("reel".into()) };
        let Err(err) = crate::live::block_on(m.connect(Duration::from_secs(1))) else { panic!("connected") };
        assert!(err.contains("\"reel\"") && err.contains("real"), "{err}");
        assert_eq!(current_context(Some(&file)).as_deref(), Some("real"));
        assert_eq!(context_names(Some(&file)), ["real"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
