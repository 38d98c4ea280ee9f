//! Completion of names that live on a cluster: kubeconfig contexts (`--context`,
//! `--contexts`), and the names of targets, configs and webhook servers for the flags that
//! take a name rather than a file (`crossplane status --xrd`, `migrate-storage --crd/--xrd`,
//! `--crd/--xrd` of a command run `--live`, `retarget --to/--from/--config`).
//!
//! Names are asked of the cluster the command line names (its `--kubeconfig` and
//! `--context`, else $KUBECONFIG's current context) within [`BOUND`]; an unreachable cluster
//! or a slower answer falls back to the names in the YAML/JSON files under the current
//! directory, so a tab press never waits longer than that.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap_complete::engine::CompletionCandidate;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use crate::completion::{FileKind, files_of_kind};
use crate::live::cluster::{Member, context_names};

/// How long a tab press may wait on the cluster.
pub const BOUND: Duration = Duration::from_secs(2);
/// One page of names at most is read.
const MAX_NAMES: u32 = 500;

/// What a live name flag names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Crd,
    Xrd,
    Config,
    Server,
}

impl NameKind {
    fn file_kind(self) -> FileKind {
        match self {
            NameKind::Crd => FileKind::Crd,
            NameKind::Xrd => FileKind::Xrd,
            NameKind::Config => FileKind::Config,
            NameKind::Server => FileKind::Server,
        }
    }

    /// The resources listed for this kind (configs: both kinds).
    fn resources(self) -> Vec<ApiResource> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        match self {
            NameKind::Crd => vec![ApiResource::erase::<CustomResourceDefinition>(&())],
            // The v1 XRD API: every Crossplane that serves XRDs serves it.
            NameKind::Xrd => vec![dco_api::target::XrdVersion::V1.resource()],
            NameKind::Config => vec![
                ApiResource::erase::<dco_api::CRDConversionConfig>(&()),
                ApiResource::erase::<dco_api::XRDConversionConfig>(&()),
            ],
            NameKind::Server => vec![ApiResource::erase::<dco_api::ConversionWebhookServer>(&())],
        }
    }
}

/// The value of `--flag X` or `--flag=X` among the words being completed.
fn flag_value(words: &[String], flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    words.iter().enumerate().find_map(|(i, w)| {
        if w == flag { words.get(i + 1).cloned() } else { w.strip_prefix(&eq).map(str::to_string) }
    })
}

/// The words of the command line being completed (after the `--` the shell scripts pass).
fn words() -> Vec<String> {
    std::env::args().skip_while(|a| a != "--").skip(1).collect()
}

/// Contexts of the kubeconfig the command line names (or $KUBECONFIG / ~/.kube/config). For
/// `--contexts a,b,<TAB>` the candidates keep what is typed before the last comma.
pub fn contexts(current: &OsStr) -> Vec<CompletionCandidate> {
    let file = flag_value(&words(), "--kubeconfig").map(PathBuf::from);
    let cur = current.to_string_lossy();
    let (done, last) = match cur.rsplit_once(',') {
        Some((d, l)) => (format!("{d},"), l.to_string()),
        None => (String::new(), cur.to_string()),
    };
    context_names(file.as_deref())
        .into_iter()
        .filter(|c| c.starts_with(&last))
        .map(|c| CompletionCandidate::new(format!("{done}{c}")))
        .collect()
}

/// Names of `kind` on the cluster, read within [`BOUND`]; `None` when it did not answer.
fn from_cluster(kind: NameKind, words: &[String]) -> Option<Vec<String>> {
    let member = Member {
        label: "completion".into(),
        kubeconfig: flag_value(words, "--kubeconfig").map(PathBuf::from),
        context: flag_value(words, "--context"),
    };
    crate::live::block_on(async {
        tokio::time::timeout(BOUND, async {
            let client = member.connect(BOUND).await.ok()?;
            let mut names = Vec::new();
            for ar in kind.resources() {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                match api.list_metadata(&ListParams::default().limit(MAX_NAMES)).await {
                    Ok(list) => names.extend(list.items.into_iter().filter_map(|o| o.metadata.name)),
                    // A kind the cluster lacks (no Crossplane, no dco) has no names.
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(_) => return None,
                }
            }
            Some(names)
        })
        .await
        .ok()
        .flatten()
    })
}

/// `metadata.name` of every document of `kind` in the files under `root` (sorted, unique).
pub fn names_in_files(root: &std::path::Path, kind: FileKind) -> Vec<String> {
    let mut out: Vec<String> = files_of_kind(root, kind)
        .into_iter()
        .filter_map(|rel| crate::load::documents(&root.join(rel)).ok())
        .flatten()
        .filter(|d| d.get("kind").and_then(|k| k.as_str()).is_some_and(|k| kind.matches(k)))
        .filter_map(|d| d.pointer("/metadata/name").and_then(|n| n.as_str()).map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Candidates for a name flag: the cluster's names, or the files' when it does not answer.
pub fn names(kind: NameKind, current: &OsStr) -> Vec<CompletionCandidate> {
    let prefix = current.to_string_lossy();
    let mut list = from_cluster(kind, &words()).unwrap_or_else(|| {
        std::env::current_dir().map(|cwd| names_in_files(&cwd, kind.file_kind())).unwrap_or_default()
    });
    list.sort();
    list.dedup();
    list.into_iter().filter(|n| n.starts_with(prefix.as_ref())).map(CompletionCandidate::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_are_read_in_both_spellings() {
        let w: Vec<String> =
            ["convctl", "diff", "--kubeconfig", "/k", "--context=east"].map(String::from).into();
        assert_eq!(flag_value(&w, "--kubeconfig").as_deref(), Some("/k"));
        assert_eq!(flag_value(&w, "--context").as_deref(), Some("east"));
        assert_eq!(flag_value(&w, "--contexts"), None);
    }

    #[test]
    fn names_in_files_are_the_documents_of_the_kind() {
        let dir = std::env::temp_dir().join(format!("convctl-names-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(
            dir.join("sub/servers.yaml"),
            "apiVersion: conversion.dco.rs/v1alpha1\nkind: ConversionWebhookServer\nmetadata: {name: pool-b}\n---\n\
             apiVersion: conversion.dco.rs/v1alpha1\nkind: ConversionWebhookServer\nmetadata: {name: pool-a}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-a-server}\n",
        )
        .unwrap();
        assert_eq!(names_in_files(&dir, FileKind::Server), ["pool-a", "pool-b"]);
        assert!(names_in_files(&dir, FileKind::Xrd).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
