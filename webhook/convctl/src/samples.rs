//! Reading `test --samples`: a GitOps tree walked recursively, one file, stdin (`-`), or a tar
//! archive (`.tar`, `.tar.gz`, `.tgz`). `kind: List` (what `kubectl get -o yaml` prints) is
//! expanded into its items; documents of other kinds (a `kustomization.yaml`, ConfigMaps, other
//! custom resources) are counted and skipped; a document that cannot be read becomes a sample
//! that fails, not an abort. Every input is bounded (docs/convctl.md, "test").

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::path::{Component, Path};

use dco_engine::Plan;
use serde_json::Value;

use crate::CliError;

/// The limits on what `--samples` may read; each refusal names its flag.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max_file_bytes: u64,
    pub max_documents: usize,
    pub max_depth: usize,
}

/// One document of the target's kind (or one that could not be read).
#[derive(Clone, Debug)]
pub struct Sample {
    /// `file`, `file#2` or `file#2.items[0]`.
    pub label: String,
    pub file: String,
    /// 1-based document index within the file.
    pub document: usize,
    /// 1-based line of a read error.
    pub line: Option<usize>,
    /// The object, or why it cannot be read.
    pub object: Result<Value, String>,
}

/// Everything `--samples` held.
#[derive(Debug, Default)]
pub struct Samples {
    pub samples: Vec<Sample>,
    /// Documents of other kinds, by kind (`Kustomization`, `ConfigMap`, `Widget (other.org/v1)`).
    pub skipped: BTreeMap<String, usize>,
    pub files: usize,
    pub documents: usize,
}

impl Samples {
    /// `1 Kustomization, 2 ConfigMap` (most frequent first).
    pub fn skipped_text(&self) -> String {
        let mut kinds: Vec<(&String, &usize)> = self.skipped.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        kinds.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
    }

    pub fn skipped_total(&self) -> usize {
        self.skipped.values().sum()
    }
}

fn is_sample_file(name: &str) -> bool {
    [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e))
}

fn is_archive(name: &str) -> bool {
    [".tar", ".tar.gz", ".tgz"].iter().any(|e| name.ends_with(e))
}

fn too_big(what: &str, size: u64, b: &Bounds) -> CliError {
    CliError::Usage(format!(
        "{what} is {size} bytes, over --max-file-size {}; raise the bound or leave the file out",
        b.max_file_bytes
    ))
}

/// Reads `--samples`: `-` for stdin, a directory tree, a tar archive or one file.
pub fn read(source: &Path, plan: &Plan, bounds: Bounds) -> Result<Samples, CliError> {
    let mut r = Reader { plan, bounds, out: Samples::default() };
    let name = source.to_string_lossy();
    if name == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .lock()
            .take(bounds.max_file_bytes + 1)
            .read_to_end(&mut buf)
            .map_err(|e| CliError::Usage(format!("cannot read the samples from stdin: {e}")))?;
        if buf.len() as u64 > bounds.max_file_bytes {
            return Err(too_big("stdin", buf.len() as u64, &bounds));
        }
        r.file("<stdin>", &buf)?;
        return Ok(r.out);
    }
    let meta = fs::metadata(source)
        .map_err(|e| CliError::Usage(format!("cannot read --samples {}: {e}", source.display())))?;
    if meta.is_dir() {
        r.walk(source, 0)?;
    } else if is_archive(&name) {
        r.archive(source, name.ends_with(".tar"))?;
    } else {
        if meta.len() > bounds.max_file_bytes {
            return Err(too_big(&name, meta.len(), &bounds));
        }
        let bytes = fs::read(source).map_err(|e| CliError::Usage(format!("cannot read {name}: {e}")))?;
        r.file(&name, &bytes)?;
    }
    Ok(r.out)
}

struct Reader<'a> {
    plan: &'a Plan,
    bounds: Bounds,
    out: Samples,
}

impl Reader<'_> {
    /// Every `*.yaml`, `*.yml` and `*.json` under `dir`, in name order. Hidden entries (`.git`)
    /// are left out, and symbolic links to directories are not followed (no loops).
    fn walk(&mut self, dir: &Path, depth: usize) -> Result<(), CliError> {
        if depth > self.bounds.max_depth {
            return Err(CliError::Usage(format!(
                "{} is nested deeper than --max-depth {}; raise the bound or point --samples lower",
                dir.display(),
                self.bounds.max_depth
            )));
        }
        let entries = fs::read_dir(dir)
            .map_err(|e| CliError::Usage(format!("cannot read samples directory {}: {e}", dir.display())))?;
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let path = e.path();
            let Ok(ty) = e.file_type() else { continue };
            if ty.is_dir() {
                self.walk(&path, depth + 1)?;
                continue;
            }
            // A link to a file is read; a link to a directory is not followed.
            let Ok(meta) = fs::metadata(&path) else { continue };
            if !meta.is_file() || !is_sample_file(&name) {
                continue;
            }
            let shown = path.display().to_string();
            if meta.len() > self.bounds.max_file_bytes {
                return Err(too_big(&shown, meta.len(), &self.bounds));
            }
            let bytes = fs::read(&path).map_err(|e| CliError::Usage(format!("cannot read {shown}: {e}")))?;
            self.file(&shown, &bytes)?;
        }
        Ok(())
    }

    /// The sample files of a tar archive (gzip-compressed unless `plain`), in path order.
    fn archive(&mut self, path: &Path, plain: bool) -> Result<(), CliError> {
        let shown = path.display().to_string();
        let bad = |e: std::io::Error| CliError::Usage(format!("{shown}: not a readable tar archive: {e}"));
        let file = fs::File::open(path).map_err(|e| CliError::Usage(format!("cannot read {shown}: {e}")))?;
        let reader: Box<dyn std::io::Read> =
            if plain { Box::new(file) } else { Box::new(flate2::read::GzDecoder::new(file)) };
        let mut archive = tar::Archive::new(reader);
        let mut files = Vec::new();
        for entry in archive.entries().map_err(bad)? {
            let entry = entry.map_err(bad)?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let inner = entry.path().map_err(bad)?.into_owned();
            let parts: Vec<String> = inner
                .components()
                .filter_map(|c| match c {
                    Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect();
            let Some(name) = parts.last() else { continue };
            if parts.iter().any(|p| p.starts_with('.')) || !is_sample_file(name) {
                continue;
            }
            let label = format!("{shown}:{}", parts.join("/"));
            if parts.len() - 1 > self.bounds.max_depth {
                return Err(CliError::Usage(format!(
                    "{label} is nested deeper than --max-depth {}; raise the bound",
                    self.bounds.max_depth
                )));
            }
            let size = entry.header().size().map_err(bad)?;
            if size > self.bounds.max_file_bytes {
                return Err(too_big(&label, size, &self.bounds));
            }
            let mut bytes = Vec::new();
            entry.take(self.bounds.max_file_bytes + 1).read_to_end(&mut bytes).map_err(bad)?;
            files.push((label, bytes));
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (label, bytes) in files {
            self.file(&label, &bytes)?;
        }
        Ok(())
    }

    /// Every document of one file: samples of the target's kinds kept, others counted.
    fn file(&mut self, file: &str, bytes: &[u8]) -> Result<(), CliError> {
        self.out.files += 1;
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t.strip_prefix('\u{feff}').unwrap_or(t),
            Err(e) => {
                self.out.samples.push(Sample {
                    label: file.to_string(),
                    file: file.to_string(),
                    document: 1,
                    line: None,
                    object: Err(format!("not UTF-8 text ({e})")),
                });
                return Ok(());
            }
        };
        let mut docs: Vec<(usize, Option<usize>, Result<Value, String>)> = Vec::new();
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            self.count_document(file)?;
            match <Value as serde::Deserialize>::deserialize(doc) {
                Ok(Value::Null) => {}
                Ok(v) => docs.push((i + 1, None, Ok(v))),
                Err(e) => {
                    let line = e.location().map(|l| l.line());
                    let why = format!("not valid YAML or JSON: {e}");
                    // A syntax error ends the stream: the parser repeats it for every later
                    // document.
                    if let Some((_, _, Err(last))) = docs.last()
                        && *last == why
                    {
                        break;
                    }
                    docs.push((i + 1, line, Err(why)));
                }
            }
        }
        let many = docs.len() > 1;
        for (document, line, value) in docs {
            let label = if many { format!("{file}#{document}") } else { file.to_string() };
            match value {
                Err(why) => self.out.samples.push(Sample {
                    label,
                    file: file.to_string(),
                    document,
                    line,
                    object: Err(why),
                }),
                Ok(v) => self.classify(file, document, label, v)?,
            }
        }
        Ok(())
    }

    fn count_document(&mut self, file: &str) -> Result<(), CliError> {
        self.out.documents += 1;
        if self.out.documents > self.bounds.max_documents {
            return Err(CliError::Usage(format!(
                "{file}: more than --max-documents {} documents in the samples; raise the bound or point --samples at fewer files",
                self.bounds.max_documents
            )));
        }
        Ok(())
    }

    /// Keeps an object of the target's kinds, expands a `List`, counts anything else.
    fn classify(&mut self, file: &str, document: usize, label: String, v: Value) -> Result<(), CliError> {
        let kind = v.get("kind").and_then(Value::as_str).map(str::to_string);
        let api_version = v.get("apiVersion").and_then(Value::as_str).map(str::to_string);
        let Some(kind) = kind else {
            let what = if v.is_object() { "(no kind)" } else { "(not an object)" };
            *self.out.skipped.entry(what.into()).or_default() += 1;
            return Ok(());
        };
        // `kind: List` (and the typed `FooList`s some tools print) hold objects in `items`.
        let list = !self.plan.accepts_kind(&kind) && (kind == "List" || kind.ends_with("List"));
        if list && let Some(Value::Array(items)) = v.get("items").cloned() {
            for (i, item) in items.into_iter().enumerate() {
                self.count_document(file)?;
                self.classify(file, document, format!("{label}.items[{i}]"), item)?;
            }
            return Ok(());
        }
        let group = api_version.as_deref().map(|av| av.rsplit_once('/').map_or("", |(g, _)| g));
        match group {
            _ if !self.plan.accepts_kind(&kind) => *self.out.skipped.entry(kind).or_default() += 1,
            Some(g) if g != self.plan.group() => {
                let key = format!("{kind} ({})", api_version.unwrap_or_default());
                *self.out.skipped.entry(key).or_default() += 1;
            }
            // No apiVersion: the round trip names it (the version cannot be known).
            _ => self.out.samples.push(Sample {
                label,
                file: file.to_string(),
                document,
                line: None,
                object: Ok(v),
            }),
        }
        Ok(())
    }
}
