//! `convctl test --fuzz`, golden files (`--record`, `--golden`), `--validate-output`, and
//! `--package` as the source of the target XRD.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use common::*;

/// A fixture of docs/examples/convctl/gadgets: a CRD with hub v1 and spoke v2 (`size` is
/// `capacity` at v2, whose `name` is shorter), its config, a deliberately broken config (the
/// hub → v2 expression divides by zero at the schema's maximum size) and samples.
fn gadgets(file: &str) -> String {
    std::fs::read_to_string(examples().join("gadgets").join(file)).expect("gadgets fixture")
}

/// A scratch directory with the gadgets CRD, both configs and a samples directory.
fn setup(name: &str, samples: &[(&str, &str)]) -> PathBuf {
    let dir = scratch(name);
    std::fs::write(dir.join("crd.yaml"), gadgets("crd.yaml")).unwrap();
    std::fs::write(dir.join("good.yaml"), gadgets("config.yaml")).unwrap();
    std::fs::write(dir.join("broken.yaml"), gadgets("broken-config.yaml")).unwrap();
    std::fs::create_dir_all(dir.join("samples")).unwrap();
    for (file, text) in samples {
        std::fs::write(dir.join("samples").join(file), text).unwrap();
    }
    dir
}

fn p(dir: &Path, rel: &str) -> String {
    dir.join(rel).to_string_lossy().into_owned()
}

fn test_args(dir: &Path, config: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["test", "--quiet", "--config", &p(dir, config), "--crd", &p(dir, "crd.yaml")]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.push("--samples".into());
    a.push(p(dir, "samples"));
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The JSON report without its measured times, which differ from run to run.
fn without_timings(json: &str) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("seconds");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(json).expect("JSON report");
    strip(&mut v);
    v
}

#[test]
fn fuzz_finds_and_shrinks_a_real_failure_and_the_seed_reproduces_it() {
    let dir = setup("fuzz", &[("g1.yaml", &gadgets("samples/g1.yaml"))]);
    let failures = dir.join("failures");
    let args = test_args(
        &dir,
        "broken.yaml",
        &["--fuzz", "40", "--seed", "7", "--record-failures", &failures.to_string_lossy(), "-o", "json"],
    );
    let first = run(args.clone());
    assert_eq!(code(&first), 1, "{}\n{}", stdout(&first), stderr(&first));
    let out = stdout(&first);
    assert!(out.contains("fuzz v1 #"), "{out}");
    assert!(out.contains("reproduce with --fuzz"), "{out}");
    assert!(out.contains("Division by zero"), "{out}");
    assert!(stderr(&first).contains("fuzz seed 7:"), "{}", stderr(&first));
    // The shrunk object: the failing size and the required name, nothing else.
    let files: Vec<PathBuf> = std::fs::read_dir(&failures).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one distinct failure: {files:?}");
    for f in &files {
        let v: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let spec = v["spec"].as_object().unwrap();
        assert!(spec.len() <= 2, "{f:?}: {v}");
        assert_eq!(v["spec"]["size"], 3, "{v}");
    }
    // The same seed, the same run; the recorded failure is a sample that fails on its own.
    let second = run(args);
    assert_eq!(without_timings(&stdout(&first)), without_timings(&stdout(&second)));
    assert_eq!(stderr(&first), stderr(&second));
    let replay = run(vec![
        "test".into(),
        "--quiet".into(),
        "--config".into(),
        p(&dir, "broken.yaml"),
        "--crd".into(),
        p(&dir, "crd.yaml"),
        "--samples".into(),
        failures.to_string_lossy().into_owned(),
    ]);
    assert_eq!(code(&replay), 1, "{}", stdout(&replay));
    // A correct config passes the same fuzzing.
    let good = run(test_args(&dir, "good.yaml", &["--fuzz", "40", "--seed", "7"]));
    assert_eq!(code(&good), 0, "{}\n{}", stdout(&good), stderr(&good));
}

#[test]
fn validate_output_names_the_field_a_converted_object_breaks() {
    let dir = setup(
        "validate-output",
        &[("g1.yaml", &gadgets("samples/g1.yaml")), ("g2.yaml", &gadgets("samples-long/g2.yaml"))],
    );
    let plain = run(test_args(&dir, "good.yaml", &[]));
    assert_eq!(code(&plain), 0, "{}\n{}", stdout(&plain), stderr(&plain));
    let checked = run(test_args(&dir, "good.yaml", &["--validate-output"]));
    assert_eq!(code(&checked), 1, "{}", stdout(&checked));
    let out = stdout(&checked);
    assert!(out.contains("g2.yaml (output at v2)"), "{out}");
    assert!(out.contains("spec.name: has 8 characters, more than the maxLength 5"), "{out}");
    assert!(!out.contains("g1.yaml (output at v2)"), "{out}");
}

#[test]
fn record_then_golden_passes_and_an_edited_golden_fails_naming_the_field() {
    let dir = setup("golden", &[("g1.yaml", &gadgets("samples/g1.yaml"))]);
    let golden = dir.join("golden");
    let g = golden.to_string_lossy().into_owned();
    let rec = run(test_args(&dir, "good.yaml", &["--record", &g]));
    assert_eq!(code(&rec), 0, "{}", stderr(&rec));
    let file = golden.join("g1.yaml").join("v1-to-v2.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("capacity: 1"), "{text}");
    assert!(golden.join("manifest.yaml").is_file());
    // Recording twice writes the same bytes.
    assert_eq!(code(&run(test_args(&dir, "good.yaml", &["--record", &g]))), 0);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let ok = run(test_args(&dir, "good.yaml", &["--golden", &g]));
    assert_eq!(code(&ok), 0, "{}\n{}", stdout(&ok), stderr(&ok));
    assert!(stderr(&ok).contains("1 of 1 conversion(s) match"), "{}", stderr(&ok));
    std::fs::write(&file, text.replace("capacity: 1", "capacity: 2")).unwrap();
    let bad = run(test_args(&dir, "good.yaml", &["--golden", &g]));
    assert_eq!(code(&bad), 1);
    let out = stdout(&bad);
    assert!(out.contains("field spec.capacity differs from the golden file"), "{out}");
    assert!(out.contains("recorded 2, now 1"), "{out}");
    // A golden file with no conversion behind it fails too.
    std::fs::write(&file, &text).unwrap();
    std::fs::create_dir_all(golden.join("gone.yaml")).unwrap();
    std::fs::write(golden.join("gone.yaml").join("v1-to-v2.yaml"), &text).unwrap();
    let orphan = run(test_args(&dir, "good.yaml", &["--golden", &g]));
    assert_eq!(code(&orphan), 1);
    assert!(stdout(&orphan).contains("has no conversion in this run"), "{}", stdout(&orphan));
    // No manifest: a usage error that says how to record one.
    let none = run(test_args(&dir, "good.yaml", &["--golden", &p(&dir, "samples")]));
    assert_eq!(code(&none), 2);
    assert!(stderr(&none).contains("--record"), "{}", stderr(&none));
}

/// A `crossplane xpkg build`-style image tarball: manifest.json, a config, and one gzipped
/// layer holding package.yaml.
fn xpkg_tarball(path: &Path, package_yaml: &str) {
    let mut layer = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_size(package_yaml.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    layer.append_data(&mut h, "package.yaml", package_yaml.as_bytes()).unwrap();
    let layer = layer.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&layer).unwrap();
    let layer = gz.finish().unwrap();
    let mut image = tar::Builder::new(Vec::new());
    for (name, data) in [
        ("manifest.json", br#"[{"Config":"config.json","Layers":["layer.tar.gz"]}]"#.to_vec()),
        ("config.json", br#"{"rootfs":{"type":"layers"}}"#.to_vec()),
        ("layer.tar.gz", layer),
    ] {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        image.append_data(&mut h, name, &data[..]).unwrap();
    }
    std::fs::write(path, image.into_inner().unwrap()).unwrap();
}

/// The gadgets CRD as a Crossplane XRD named `name`, and an XRDConversionConfig for it.
fn xrd(name: &str) -> String {
    gadgets("crd.yaml")
        .replace("apiextensions.k8s.io/v1", "apiextensions.crossplane.io/v1")
        .replace("CustomResourceDefinition", "CompositeResourceDefinition")
        .replace("gadgets.example.org", name)
        .replace("scope: Namespaced", "scope: LegacyCluster")
        .replace("storage: true", "referenceable: true")
        .replace("storage: false", "referenceable: false")
}

#[test]
fn package_gives_the_xrd_the_config_names() {
    let dir = setup("package", &[("g1.yaml", &gadgets("samples/g1.yaml").replace("Gadget", "XGadget"))]);
    let config = gadgets("config.yaml")
        .replace("CRDConversionConfig", "XRDConversionConfig")
        .replace("targetCRD", "targetXRD")
        .replace("gadgets.example.org", "xgadgets.example.org");
    std::fs::write(dir.join("xconfig.yaml"), config).unwrap();
    let ours = xrd("xgadgets.example.org")
        .replace("kind: Gadget", "kind: XGadget")
        .replace("plural: gadgets", "plural: xgadgets");
    let other = xrd("xgizmos.example.org")
        .replace("kind: Gadget", "kind: XGizmo")
        .replace("plural: gadgets", "plural: xgizmos");
    let meta = "apiVersion: meta.pkg.crossplane.io/v1\nkind: Configuration\nmetadata: {name: gadgets}\n";
    let stream = format!("{meta}---\n{other}\n---\n{ours}\n");
    let pkg = dir.join("gadgets.xpkg");
    xpkg_tarball(&pkg, &stream);
    std::fs::write(dir.join("package.yaml"), &stream).unwrap();
    for source in [pkg.clone(), dir.join("package.yaml")] {
        let o = convctl(&[
            "validate",
            "--config",
            &p(&dir, "xconfig.yaml"),
            "--package",
            &source.to_string_lossy(),
        ]);
        assert_eq!(code(&o), 0, "{source:?}: {}\n{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("xgadgets.example.org"), "{}", stdout(&o));
    }
    let mut args = vec!["test".to_string(), "--quiet".into(), "--config".into(), p(&dir, "xconfig.yaml")];
    args.extend([
        "--package".into(),
        pkg.to_string_lossy().into_owned(),
        "--samples".into(),
        p(&dir, "samples"),
    ]);
    let o = run(args);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("v1 → v2 → v1"), "{}", stdout(&o));
    // A package without the XRD: exit 2 naming what it holds.
    let lacking = dir.join("other.xpkg");
    xpkg_tarball(&lacking, &format!("{meta}---\n{other}\n"));
    let o =
        convctl(&["validate", "--config", &p(&dir, "xconfig.yaml"), "--package", &lacking.to_string_lossy()]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("no CompositeResourceDefinition xgadgets.example.org"), "{}", stderr(&o));
    assert!(stderr(&o).contains("it holds xgizmos.example.org"), "{}", stderr(&o));
}
