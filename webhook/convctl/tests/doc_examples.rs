//! Every config under docs/examples ships with its target beside it and compiles against it
//! (`convctl validate` exits 0), and its round trips pass on every samples directory beside it
//! whose objects are of the target's kind (`convctl test` exits 0). A config without a target
//! beside it fails the test. Fixtures that are broken on purpose (for the tests of
//! diagnostics) are listed with the exit code they must give instead.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// Fixtures broken on purpose, relative to docs/examples: (config, samples dir or "" for
/// validate) → the exit code they must give.
const ON_PURPOSE: &[(&str, &str, i32)] = &[
    // Four compile errors: convctl's tests of diagnostics read them.
    ("convctl/invalid-config.yaml", "", 1),
    // The reference project's apiVersion: refused as input, moved over by cli.rs.
    ("convctl/reference-config.yaml", "", 2),
    // A zero-padded number that does not come back: the test of an unacknowledged loss.
    ("convctl/widgets-config.yaml", "samples-loss", 1),
];

fn docs_examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable docs/examples") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// The documents of a YAML file (the first comment lines and `---` separators allowed).
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("readable example");
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .filter(|v: &Value| v.is_object())
        .collect()
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

struct TargetFile {
    path: PathBuf,
    flag: &'static str,
    /// The kinds whose objects it defines (an XRD's composite and claim kinds).
    kinds: Vec<String>,
}

fn relative(p: &Path) -> String {
    p.strip_prefix(docs_examples()).unwrap_or(p).to_string_lossy().replace('\\', "/")
}

fn expected(config: &str, samples: &str) -> i32 {
    ON_PURPOSE.iter().find(|(c, s, _)| *c == config && *s == samples).map_or(0, |(_, _, code)| *code)
}

#[test]
fn every_docs_example_config_compiles_against_the_target_beside_it() {
    let mut files = Vec::new();
    yaml_files(&docs_examples(), &mut files);
    files.sort();
    // Targets by directory and name.
    let mut targets: BTreeMap<(PathBuf, String), TargetFile> = BTreeMap::new();
    let mut configs: Vec<(PathBuf, Value)> = Vec::new();
    for path in &files {
        for doc in documents(path) {
            let dir = path.parent().expect("a directory").to_path_buf();
            let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let names = &doc["spec"]["names"];
            let claim = &doc["spec"]["claimNames"];
            let kinds: Vec<String> =
                [names, claim].iter().filter_map(|n| n["kind"].as_str()).map(str::to_string).collect();
            match kind(&doc) {
                "CustomResourceDefinition" => {
                    targets.insert((dir, name), TargetFile { path: path.clone(), flag: "--crd", kinds });
                }
                "CompositeResourceDefinition" => {
                    targets.insert((dir, name), TargetFile { path: path.clone(), flag: "--xrd", kinds });
                }
                "XRDConversionConfig" | "CRDConversionConfig" => configs.push((path.clone(), doc)),
                _ => {}
            }
        }
    }
    assert!(configs.len() >= 5, "the example configs: found {}", configs.len());

    let mut failures = Vec::new();
    let (mut validated, mut tested) = (0, 0);
    for (path, config) in &configs {
        let rel = relative(path);
        let spec = &config["spec"];
        let target_name = spec["targetCRD"]["name"].as_str().or(spec["targetXRD"]["name"].as_str());
        let Some(target_name) = target_name else {
            failures.push(format!("{rel}: names no targetCRD.name or targetXRD.name"));
            continue;
        };
        let dir = path.parent().expect("a directory").to_path_buf();
        let Some(target) = targets.get(&(dir.clone(), target_name.to_string())) else {
            failures.push(format!(
                "{rel}: no target beside it — add the CustomResourceDefinition or CompositeResourceDefinition {target_name} to {} (e.g. {}-crd.yaml)",
                format!("docs/examples/{}", relative(&dir)).trim_end_matches('/'),
                path.file_stem().unwrap_or_default().to_string_lossy()
            ));
            continue;
        };
        let (cfg, tgt) = (path.to_string_lossy().into_owned(), target.path.to_string_lossy().into_owned());
        let o = convctl(&["validate", "--config", &cfg, target.flag, &tgt]);
        let want = expected(&rel, "");
        validated += 1;
        if code(&o) != want {
            failures.push(format!(
                "convctl validate --config {rel} {} {}: exit {} (expected {want})\n{}{}",
                target.flag,
                relative(&target.path),
                code(&o),
                stdout(&o),
                stderr(&o)
            ));
            continue;
        }
        if want != 0 {
            continue;
        }
        // Samples beside the config whose objects are of the target's kind.
        let mut sample_dirs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("readable dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("samples"))
            })
            .collect();
        sample_dirs.sort();
        for samples in sample_dirs {
            let mut docs = Vec::new();
            yaml_files(&samples, &mut docs);
            let of_target =
                docs.iter().flat_map(|p| documents(p)).any(|d| target.kinds.iter().any(|k| k == kind(&d)));
            if !of_target {
                continue;
            }
            let name = samples.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let o = convctl(&[
                "test",
                "--config",
                &cfg,
                target.flag,
                &tgt,
                "--samples",
                &samples.to_string_lossy(),
            ]);
            let want = expected(&rel, &name);
            tested += 1;
            if code(&o) != want {
                failures.push(format!(
                    "convctl test --config {rel} --samples {}: exit {} (expected {want})\n{}{}",
                    relative(&samples),
                    code(&o),
                    stdout(&o),
                    stderr(&o)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(validated >= 5 && tested >= 2, "validated {validated} config(s), tested {tested} samples dir(s)");
}
