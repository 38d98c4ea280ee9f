//! `--package`: the target XRD taken from a Crossplane package rather than from a file of its
//! own (docs/convctl.md, "--package"). A package is read in any of the forms it travels in:
//! the `.xpkg` image tarball `crossplane xpkg build` writes (a `docker save`-style tar whose
//! layers are tarballs), an OCI image layout (a directory, or a tar of one), a layer on its
//! own (`.tar` or `.tar.gz`), or the `package.yaml` stream itself. The XRD taken is the one
//! the config names in `spec.targetXRD.name`.

use std::io::Read;
use std::path::Path;

use dco_engine::Target;
use serde_json::Value;

use crate::CliError;
use crate::load::Config;

/// The largest package read, and the most bytes a member may decompress to.
const MAX_BYTES: u64 = 512 << 20;
/// Tarballs inside tarballs (image → layer) are opened this many levels deep.
const MAX_NESTING: usize = 2;
/// Files looked at in an OCI layout directory.
const MAX_BLOBS: usize = 4096;

/// The XRD named by `config` from the package at `path`.
pub fn target(path: &Path, config: &Config) -> Result<Target, CliError> {
    let shown = path.display();
    let text = package_yaml(path)?;
    let mut names = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = <Value as serde::Deserialize>::deserialize(doc).map_err(|e| {
            CliError::Usage(format!(
                "--package {shown}: package.yaml document {}: not valid YAML: {e}",
                i + 1
            ))
        })?;
        if value.get("kind").and_then(Value::as_str) != Some("CompositeResourceDefinition") {
            continue;
        }
        let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        if name == config.target_name {
            return Target::from_value(&value)
                .map_err(|e| CliError::Usage(format!("--package {shown}: {e}")));
        }
        names.push(name);
    }
    let have = if names.is_empty() {
        "it holds no CompositeResourceDefinition".to_string()
    } else {
        format!("it holds {}", names.join(", "))
    };
    Err(CliError::Usage(format!(
        "--package {shown}: no CompositeResourceDefinition {} (the config's spec.targetXRD.name); {have}; \
         give the package that ships it, or the XRD itself with --xrd",
        config.target_name
    )))
}

/// The text of the package's `package.yaml`, whatever form the package has.
fn package_yaml(path: &Path) -> Result<String, CliError> {
    let shown = path.display();
    let usage = |why: String| CliError::Usage(format!("--package {shown}: {why}"));
    if path.is_dir() {
        return from_layout_dir(path).ok_or_else(|| {
            usage("a directory, but no OCI image layout blob in it holds package.yaml".into())
        });
    }
    let file = std::fs::File::open(path).map_err(|e| usage(format!("cannot read it: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|e| usage(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(usage(format!("larger than {MAX_BYTES} bytes; a package is far smaller")));
    }
    if is_gzip(&bytes) || is_tar(&bytes) {
        return find(&bytes, 0).ok_or_else(|| {
            usage("an archive with no package.yaml in it or in its layers; build it with `crossplane xpkg build`".into())
        });
    }
    String::from_utf8(bytes).map_err(|_| usage("neither a package archive nor a package.yaml stream".into()))
}

fn is_gzip(b: &[u8]) -> bool {
    b.starts_with(&[0x1f, 0x8b])
}

fn is_tar(b: &[u8]) -> bool {
    b.len() >= 512 && &b[257..262] == b"ustar"
}

/// `package.yaml` in a (gzipped) tar, or in a tarball inside it.
fn find(bytes: &[u8], nesting: usize) -> Option<String> {
    if nesting > MAX_NESTING {
        return None;
    }
    let plain;
    let bytes = if is_gzip(bytes) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes).take(MAX_BYTES + 1).read_to_end(&mut out).ok()?;
        if out.len() as u64 > MAX_BYTES {
            return None;
        }
        plain = out;
        &plain[..]
    } else {
        bytes
    };
    if !is_tar(bytes) {
        return None;
    }
    let mut archive = tar::Archive::new(bytes);
    let mut nested = Vec::new();
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        if !entry.header().entry_type().is_file() || entry.size() > MAX_BYTES {
            continue;
        }
        let name = entry.path().ok()?.to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).ok()?;
        if name.rsplit('/').next() == Some("package.yaml") {
            return String::from_utf8(data).ok();
        }
        if is_gzip(&data) || is_tar(&data) {
            nested.push(data);
        }
    }
    nested.iter().find_map(|n| find(n, nesting + 1))
}

/// An OCI image layout directory: the layer blob that holds `package.yaml`.
fn from_layout_dir(dir: &Path) -> Option<String> {
    let blobs = std::fs::read_dir(dir.join("blobs").join("sha256")).ok()?;
    let mut paths: Vec<_> = blobs.filter_map(Result::ok).map(|e| e.path()).take(MAX_BLOBS).collect();
    paths.sort();
    paths.iter().find_map(|p| {
        let len = std::fs::metadata(p).ok()?.len();
        if len > MAX_BYTES {
            return None;
        }
        let data = std::fs::read(p).ok()?;
        find(&data, 1)
    })
}
