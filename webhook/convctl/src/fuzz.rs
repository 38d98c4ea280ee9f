//! `test --fuzz N --seed S`: objects generated from each served version's schema, round-tripped
//! like samples; a failing one is shrunk to a smallest object that still fails (docs/convctl.md,
//! "test --fuzz").
//!
//! Generation leans to the edges samples miss: the first and last enum value, minimum and
//! maximum, empty and one-item arrays, absent optional fields. Every generated object is
//! checked against the schema it came from (`dco_engine::validate`), and fields the generator
//! could not fill validly (a pattern it cannot satisfy) are left out, so a failure is the
//! conversion's, not the generator's. Object `i` of version `v` depends only on (S, v, i): a
//! failure reproduces with the same seed whatever N is.

use std::path::Path;

use dco_engine::validate::{validate, validate_version};
use serde_json::{Map, Value, json};

use crate::roundtrip::{Ctx, FailOn, Trip};
use crate::samples::Sample;
use crate::{CliError, Loaded};

/// Nesting generated below the root; deeper optional fields are left out.
const MAX_DEPTH: usize = 12;
/// Items per generated array, and entries per generated map.
const MAX_ITEMS: u64 = 4;
/// Round trips one shrink may run.
const SHRINK_BUDGET: usize = 2_000;
/// Failing objects reported per run; the rest are counted.
const MAX_REPORTED: usize = 10;

/// splitmix64: small, fast and the same on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The seed of object `i` of `version`: independent of N and of the other versions.
fn object_seed(seed: u64, version: &str, i: u32) -> u64 {
    let mut h = seed ^ 0x6a09_e667_f3bc_c908;
    for b in version.bytes().chain(i.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Builds values for one schema.
pub struct Generator<'a> {
    rng: &'a mut Rng,
}

impl Generator<'_> {
    /// A value `schema` accepts, or None when the generator cannot make one.
    pub fn value(&mut self, schema: &Value, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH || !schema.is_object() {
            return None;
        }
        if let Some(e) = schema.get("enum").and_then(Value::as_array).filter(|e| !e.is_empty()) {
            let n = e.len() as u64;
            let i = match self.rng.below(3) {
                0 => 0,
                1 => n - 1,
                _ => self.rng.below(n),
            };
            return e.get(i as usize).cloned();
        }
        if let Some(d) = schema.get("default").filter(|_| self.rng.below(4) == 0) {
            return Some(d.clone());
        }
        let v = if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
            if self.rng.below(2) == 0 { self.integer(schema) } else { self.string(schema) }
        } else {
            match schema.get("type").and_then(Value::as_str) {
                Some("object") => Some(self.object(schema, depth)),
                Some("array") => self.array(schema, depth),
                Some("string") => self.string(schema),
                Some("integer") => self.integer(schema),
                Some("number") => Some(self.number(schema)),
                Some("boolean") => Some(json!(self.rng.below(2) == 0)),
                _ if schema.get("properties").is_some() => Some(self.object(schema, depth)),
                _ if schema.get("x-kubernetes-preserve-unknown-fields").is_some() => {
                    Some(json!({"opaque": "value"}))
                }
                _ => None,
            }
        }?;
        // A value the node itself refuses (a pattern, a format, a combinator) is left out.
        validate(&node_only(schema), &v).is_valid().then_some(v)
    }

    fn object(&mut self, schema: &Value, depth: usize) -> Value {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                if !required.contains(&name.as_str()) && self.rng.below(4) == 0 {
                    continue;
                }
                if let Some(v) = self.value(prop, depth + 1) {
                    out.insert(name.clone(), v);
                }
            }
        }
        if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            for i in 0..self.rng.below(3) {
                if let Some(v) = self.value(ap, depth + 1) {
                    out.insert(format!("key{i}"), v);
                }
            }
        }
        Value::Object(out)
    }

    fn array(&mut self, schema: &Value, depth: usize) -> Option<Value> {
        let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        if min > MAX_ITEMS {
            return None;
        }
        let max = schema.get("maxItems").and_then(Value::as_u64).unwrap_or(min + 2).clamp(min, MAX_ITEMS);
        let n = match self.rng.below(4) {
            0 => min,
            1 => max,
            2 if min <= 1 && max >= 1 => 1,
            _ => min + self.rng.below(max - min + 1),
        };
        let items = schema.get("items")?;
        let mut out: Vec<Value> = Vec::new();
        for _ in 0..n * 2 {
            if out.len() as u64 >= n {
                break;
            }
            let Some(v) = self.value(items, depth + 1) else { continue };
            out.push(v);
            // A set or map list may not repeat itself: drop an item that does.
            if !validate(&node_only(schema), &Value::Array(out.clone())).is_valid() {
                out.pop();
            }
        }
        ((out.len() as u64) >= min).then_some(Value::Array(out))
    }

    fn string(&mut self, schema: &Value) -> Option<Value> {
        let fixed = match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => Some("2026-01-02T03:04:05Z"),
            Some("date") => Some("2026-01-02"),
            Some("uuid") => Some("0b6f1c9e-8a1d-4c44-9d0e-5b3f1a2c7d10"),
            Some("byte") => Some("ZGNv"),
            Some("ipv4") => Some("10.0.0.1"),
            Some("ipv6") => Some("fd00::1"),
            _ => None,
        };
        if let Some(f) = fixed {
            return Some(json!(f));
        }
        let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(1).min(256);
        let max = schema.get("maxLength").and_then(Value::as_u64).unwrap_or(8).clamp(min, 256);
        let len = match self.rng.below(3) {
            0 => min,
            1 => max,
            _ => min + self.rng.below(max - min + 1),
        };
        let s: String = (0..len).map(|_| (b'a' + self.rng.below(26) as u8) as char).collect();
        if schema.get("pattern").is_none() {
            return Some(json!(s));
        }
        // A pattern cannot be inverted in general: a few common shapes, the first that fits.
        let node = node_only(schema);
        let candidates = [
            s.clone(),
            "a".into(),
            "abc".into(),
            "a1".into(),
            "x-y".into(),
            "1".into(),
            "A".into(),
            String::new(),
        ];
        candidates.into_iter().map(Value::String).find(|c| validate(&node, c).is_valid())
    }

    fn integer(&mut self, schema: &Value) -> Option<Value> {
        let (mut lo, mut hi) = match (
            schema.get("minimum").and_then(Value::as_f64),
            schema.get("maximum").and_then(Value::as_f64),
        ) {
            (Some(a), Some(b)) => (a.ceil(), b.floor()),
            (Some(a), None) => (a.ceil(), a.ceil() + 100.0),
            (None, Some(b)) => (b.floor() - 100.0, b.floor()),
            (None, None) => (0.0, 100.0),
        };
        if schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true)
            && schema.get("minimum").and_then(Value::as_f64) == Some(lo)
        {
            lo += 1.0;
        }
        if schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true)
            && schema.get("maximum").and_then(Value::as_f64) == Some(hi)
        {
            hi -= 1.0;
        }
        if hi < lo {
            return None;
        }
        let (lo, hi) = (lo.max(-9.0e15) as i64, hi.min(9.0e15) as i64);
        let v = match self.rng.below(3) {
            0 => lo,
            1 => hi,
            _ => lo + self.rng.below((hi - lo) as u64 + 1) as i64,
        };
        Some(json!(v))
    }

    fn number(&mut self, schema: &Value) -> Value {
        let lo = schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
        let hi = schema.get("maximum").and_then(Value::as_f64).unwrap_or(lo + 100.0).max(lo);
        let x = match self.rng.below(3) {
            0 => lo,
            1 => hi,
            _ => lo + (self.rng.below(1000) as f64 / 1000.0) * (hi - lo),
        };
        json!(x)
    }
}

/// The node's own keywords without its children, to check a value of it alone (its children
/// were checked as they were made).
fn node_only(schema: &Value) -> Value {
    let mut n = schema.clone();
    if let Some(m) = n.as_object_mut() {
        for k in ["properties", "items", "additionalProperties", "required"] {
            m.remove(k);
        }
        m.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
    n
}

/// The fields of an object below its root's apiVersion, kind and metadata: the size a shrink
/// brings down (every scalar, empty object and empty array counts one).
pub fn field_count(obj: &Value) -> usize {
    fn count(v: &Value) -> usize {
        match v {
            Value::Object(m) if !m.is_empty() => m.values().map(count).sum(),
            Value::Array(a) if !a.is_empty() => a.iter().map(count).sum(),
            _ => 1,
        }
    }
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                .map(|(_, v)| count(v))
                .sum()
        })
        .unwrap_or(0)
}

/// One generated object of `version`.
fn generate(l: &Loaded, group: &str, version: &str, seed: u64, i: u32) -> Option<Value> {
    let schema = &l.target.version(version)?.schema;
    let mut rng = Rng::new(object_seed(seed, version, i));
    let mut obj = Generator { rng: &mut rng }.value(schema, 0).unwrap_or_else(|| json!({}));
    let m = obj.as_object_mut()?;
    m.insert("apiVersion".into(), json!(format!("{group}/{version}")));
    m.insert("kind".into(), json!(l.target.resource_kind()));
    m.insert("metadata".into(), json!({"name": format!("fuzz-{version}-{i}")}));
    // Whatever still breaks the schema (a required field no value could be made for) is
    // not the conversion's fault: such an object is not tested.
    validate_version(&l.target, version, &obj)?.is_valid().then_some(obj)
}

/// Whether `obj` fails: a round trip fails, or (with --validate-output) a conversion breaks
/// its version's schema. Returns the failing rows.
fn failing(
    l: &Loaded,
    ctx: &Ctx,
    obj: &Value,
    label: &str,
    validate_output: bool,
    fail_on: FailOn,
) -> Vec<Trip> {
    let s =
        Sample { label: label.into(), file: label.into(), document: 1, line: None, object: Ok(obj.clone()) };
    let mut rows: Vec<Trip> = ctx.test_sample(&s).into_iter().filter(|t| t.fails(fail_on)).collect();
    if validate_output && rows.is_empty() {
        let from = crate::load::version_of(obj).unwrap_or_default().to_string();
        for to in ctx.versions.iter().filter(|v| **v != from) {
            if let Some(why) = crate::checks::output_violations(l, ctx, obj, to) {
                rows.push(Trip {
                    sample: label.into(),
                    file: label.into(),
                    document: 1,
                    line: None,
                    from: from.clone(),
                    to: to.clone(),
                    outcome: crate::roundtrip::Outcome::Error(why),
                    seconds: 0.0,
                    exercised: Vec::new(),
                    schema: false,
                });
            }
        }
    }
    rows
}

/// Paths (JSON pointers) of every field and item below the root's own fields.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if at.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        _ => {}
    }
}

/// Smaller variants of `obj`: each field or item dropped, each scalar simplified.
fn candidates(obj: &Value) -> Vec<Value> {
    let mut ptrs = Vec::new();
    pointers(obj, String::new(), &mut ptrs);
    let mut out = Vec::new();
    for p in &ptrs {
        let (parent, last) = p.rsplit_once('/').unwrap_or(("", p));
        let mut c = obj.clone();
        let removed = match c.pointer_mut(parent) {
            Some(Value::Object(m)) => m.remove(&last.replace("~1", "/").replace("~0", "~")).is_some(),
            Some(Value::Array(a)) => {
                last.parse::<usize>().ok().filter(|i| *i < a.len()).map(|i| a.remove(i)).is_some()
            }
            _ => false,
        };
        if removed {
            out.push(c);
        }
    }
    for p in &ptrs {
        let Some(v) = obj.pointer(p) else { continue };
        let simpler = match v {
            Value::String(s) if !s.is_empty() => vec![json!(""), json!("a")],
            Value::Number(n) if n.as_f64() != Some(0.0) => vec![json!(0), json!(1)],
            Value::Bool(true) => vec![json!(false)],
            _ => Vec::new(),
        };
        for s in simpler.into_iter().filter(|s| s != v) {
            let mut c = obj.clone();
            if let Some(slot) = c.pointer_mut(p) {
                *slot = s;
                out.push(c);
            }
        }
    }
    out
}

/// The smallest variant of `obj` that is still valid for its version and still fails.
fn shrink(
    l: &Loaded,
    ctx: &Ctx,
    mut obj: Value,
    version: &str,
    validate_output: bool,
    fail_on: FailOn,
) -> Value {
    let mut budget = SHRINK_BUDGET;
    'outer: loop {
        for c in candidates(&obj) {
            if budget == 0 {
                break 'outer;
            }
            if !validate_version(&l.target, version, &c).is_some_and(|v| v.is_valid()) {
                continue;
            }
            budget -= 1;
            if !failing(l, ctx, &c, "shrink", validate_output, fail_on).is_empty() {
                obj = c;
                continue 'outer;
            }
        }
        break;
    }
    obj
}

/// `--fuzz N`: the failing rows of the shrunk objects; a summary line on stderr.
pub fn run(
    l: &Loaded,
    ctx: &Ctx,
    n: u32,
    seed: u64,
    record: Option<&Path>,
    validate_output: bool,
    fail_on: FailOn,
) -> Result<Vec<Trip>, CliError> {
    let group = ctx.plan.group().to_string();
    let served: Vec<String> = l
        .target
        .versions()
        .iter()
        .filter(|v| v.served && ctx.versions.contains(&v.name))
        .map(|v| v.name.clone())
        .collect();
    let (mut tested, mut skipped, mut failed) = (0usize, 0usize, 0usize);
    let mut rows = Vec::new();
    let mut seen: Vec<Value> = Vec::new();
    for version in &served {
        for i in 0..n {
            let Some(obj) = generate(l, &group, version, seed, i) else {
                skipped += 1;
                continue;
            };
            tested += 1;
            let label = format!("fuzz {version} #{i} (seed {seed})");
            if failing(l, ctx, &obj, &label, validate_output, fail_on).is_empty() {
                continue;
            }
            failed += 1;
            let small = shrink(l, ctx, obj, version, validate_output, fail_on);
            // The same minimal object under another generated name is the same failure.
            let mut key = small.clone();
            if let Some(m) = key.as_object_mut() {
                m.remove("metadata");
            }
            if seen.contains(&key) || seen.len() >= MAX_REPORTED {
                continue;
            }
            seen.push(key);
            let fields = field_count(&small);
            let mut label = format!(
                "fuzz {version} #{i} (seed {seed}, shrunk to {fields} field(s); reproduce with --fuzz {} --seed {seed})",
                i + 1
            );
            if let Some(dir) = record {
                let path = dir.join(format!("fuzz-{seed}-{version}-{i}.yaml"));
                std::fs::create_dir_all(dir)
                    .and_then(|_| std::fs::write(&path, serde_yaml::to_string(&small).unwrap_or_default()))
                    .map_err(|e| {
                        CliError::Usage(format!(
                            "--record-failures {}: cannot write {}: {e}",
                            dir.display(),
                            path.display()
                        ))
                    })?;
                label = format!("{label} → {}", path.display());
            }
            let mut these = failing(l, ctx, &small, &label, validate_output, fail_on);
            for t in &mut these {
                t.file = record
                    .map(|d| d.join(format!("fuzz-{seed}-{version}-{i}.yaml")).display().to_string())
                    .unwrap_or_else(|| label.clone());
            }
            rows.extend(these);
        }
    }
    eprintln!(
        "convctl: fuzz seed {seed}: {tested} object(s) tested over {} version(s), {failed} failing ({} distinct after shrinking), {skipped} not generated (a required field the generator cannot fill)",
        served.len(),
        seen.len()
    );
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rng_is_the_same_everywhere_and_seeds_are_per_object() {
        let mut a = Rng::new(7);
        let first: Vec<u64> = (0..3).map(|_| a.next()).collect();
        let mut b = Rng::new(7);
        assert_eq!(first, (0..3).map(|_| b.next()).collect::<Vec<_>>());
        assert_ne!(object_seed(1, "v1", 0), object_seed(1, "v1", 1));
        assert_ne!(object_seed(1, "v1", 0), object_seed(1, "v2", 0));
    }

    #[test]
    fn generated_values_fit_their_schema() {
        let schema = json!({"type": "object", "required": ["n", "tier", "id"], "properties": {
            "n": {"type": "integer", "minimum": 3, "maximum": 5},
            "tier": {"type": "string", "enum": ["a", "b"]},
            "id": {"type": "string", "pattern": "^[a-z]+-[a-z]+$"},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "maxItems": 3, "items": {"type": "string", "maxLength": 1}},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
            "port": {"x-kubernetes-int-or-string": true}
        }});
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let v = Generator { rng: &mut rng }.value(&schema, 0).unwrap();
            let r = validate(&schema, &v);
            assert!(r.is_valid(), "seed {seed}: {v} {:?}", r.violations);
        }
    }

    #[test]
    fn field_count_skips_the_root_bookkeeping() {
        let o = json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"}, "spec": {"a": 1, "b": [1, 2], "c": {}}});
        assert_eq!(field_count(&o), 4);
    }
}
