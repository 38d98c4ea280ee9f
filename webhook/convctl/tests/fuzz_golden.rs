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
    // A package without the XRD: exit 2 naming what it holds.
    let lacking = dir.join("other.xpkg");
    xpkg_tarball(&lacking, &format!("{meta}---\n{other}\n"));
    let o =
        convctl(&["validate", "--config", &p(&dir, "xconfig.yaml"), "--package", &lacking.to_string_lossy()]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("no CompositeResourceDefinition xgadgets.example.org"), "{}", stderr(&o));
    assert!(stderr(&o).contains("it holds xgizmos.example.org"), "{}", stderr(&o));
}
