//! Checking an object against a version's openAPIV3Schema the way the kube-apiserver does for
//! the common cases, so that offline tools can say which field a stored object would lose or
//! have refused: types (integer, number, string, boolean, object, array, int-or-string),
//! `nullable`, `required`, `enum`, bounds (`minimum`/`maximum` and their exclusive forms,
//! `multipleOf`, `minLength`/`maxLength`, `minItems`/`maxItems`, `minProperties`/
//! `maxProperties`), `pattern`, the formats whose values the apiserver checks (integer ranges
//! of `int32`/`int64`, `date-time`, `date`, `uuid`, `byte`, `ipv4`), list types `set` and
//! `map`, the value checks of `allOf`/`anyOf`/`oneOf`/`not`, and fields the schema does not
//! declare (which the apiserver prunes, or refuses under `fieldValidation=Strict`), respecting
//! `x-kubernetes-preserve-unknown-fields`, `additionalProperties` and
//! `x-kubernetes-embedded-resource` (docs/convctl.md, "test --validate-output").
//!
//! Not checked: CEL `x-kubernetes-validations`, defaults, and `metadata` beyond what the
//! schema declares for it. Every walk is bounded in depth and in the number of violations.

use std::collections::HashMap;
use std::fmt::Write as _;

use regex::Regex;
use serde_json::{Map, Value};

use crate::target::Target;

/// How far a walk goes: deeper values are reported once and not checked.
pub const DEFAULT_MAX_DEPTH: usize = 256;
/// How many violations a walk collects before it stops.
pub const DEFAULT_MAX_VIOLATIONS: usize = 100;
/// Longest pattern compiled; a longer one is not checked (the apiserver bounds CRD size too).
const MAX_PATTERN: usize = 4096;
/// Longest value quoted in a message.
const QUOTE: usize = 40;
/// The schema of an undeclared object holding an ignored path: nothing else declared in it.
static OWNED_PARENT: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| serde_json::json!({"type": "object"}));

/// What kind of rule a value breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// The JSON type is not the schema's.
    Type,
    /// null where the schema has no `nullable: true`: the apiserver drops the field.
    Null,
    Required,
    Enum,
    /// A field the schema does not declare: pruned by the apiserver, or refused under Strict.
    Unknown,
    /// minimum, maximum, exclusive bounds, multipleOf, format ranges.
    Bound,
    /// minLength, maxLength, minItems, maxItems, minProperties, maxProperties.
    Size,
    Pattern,
    Format,
    /// Duplicate items in a `set` list or duplicate keys in a `map` list.
    Duplicate,
    /// allOf, anyOf, oneOf, not.
    Combinator,
    /// Deeper than the walk's depth limit: not checked below.
    TooDeep,
}

impl ViolationKind {
    /// A stable short name (`unknown-field`, `type`…) for reports.
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Type => "type",
            ViolationKind::Null => "null",
            ViolationKind::Required => "required",
            ViolationKind::Enum => "enum",
            ViolationKind::Unknown => "unknown-field",
            ViolationKind::Bound => "bound",
            ViolationKind::Size => "size",
            ViolationKind::Pattern => "pattern",
            ViolationKind::Format => "format",
            ViolationKind::Duplicate => "duplicate",
            ViolationKind::Combinator => "combinator",
            ViolationKind::TooDeep => "too-deep",
        }
    }
}

/// One field that breaks the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field, from the object's root: `spec.items[2].name`, `spec.labels["a.b"]`; empty
    /// for the root itself.
    pub path: String,
    pub kind: ViolationKind,
    /// What is wrong and how to fix it, without the path.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() { "(root)" } else { &self.path };
        write!(f, "{path}: {}", self.message)
    }
}

/// The outcome of one walk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Validation {
    pub violations: Vec<Violation>,
    /// The walk stopped at `max_violations`; there may be more.
    pub truncated: bool,
}

impl Validation {
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The bounds and exemptions of a walk.
#[derive(Clone, Debug)]
pub struct Options {
    pub max_depth: usize,
    pub max_violations: usize,
    /// Dotted paths from the root (`spec.compositionRef`) whose subtrees are not checked:
    /// fields another schema owns, such as Crossplane's in a composite resource.
    pub ignore: Vec<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options { max_depth: DEFAULT_MAX_DEPTH, max_violations: DEFAULT_MAX_VIOLATIONS, ignore: Vec::new() }
    }
}

/// Checks `object` against `schema` (a version's `openAPIV3Schema`) with the default bounds.
/// A Null schema (the version declares none) accepts everything.
pub fn validate(schema: &Value, object: &Value) -> Validation {
    validate_with(schema, object, &Options::default())
}

/// [`validate`] with explicit bounds and ignored paths.
pub fn validate_with(schema: &Value, object: &Value, options: &Options) -> Validation {
    if schema.is_null() {
        return Validation::default();
    }
    let mut w = Walker { options, out: Validation::default(), patterns: HashMap::new() };
    let mut path = Vec::new();
    w.node(schema, object, &mut path, 0, Mode::Root);
    w.out
}

/// Checks `object` against `version` of `target`; for an XRD the fields Crossplane adds to the
/// CRDs it renders are not checked. `None` when the target has no such version.
pub fn validate_version(target: &Target, version: &str, object: &Value) -> Option<Validation> {
    let v = target.version(version)?;
    let ignore = target
        .composite()
        .map(|c| c.owned().iter().map(|o| o.path.to_string()).collect())
        .unwrap_or_default();
    Some(validate_with(&v.schema, object, &Options { ignore, ..Options::default() }))
}

/// Where a node sits, which decides what the apiserver lets through unchecked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The object's root: apiVersion, kind and metadata are always allowed.
    Root,
    /// An embedded resource: the same three fields are allowed.
    Embedded,
    /// `metadata` and the branches of allOf/anyOf/oneOf/not: value checks only, no pruning.
    NoPrune,
    Normal,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg<'v> {
    Key(&'v str),
    Index(usize),
}

fn render(path: &[Seg<'_>]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Index(i) => {
                let _ = write!(s, "[{i}]");
            }
            Seg::Key(k)
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Key(k) => {
                let _ = write!(s, "[{}]", Value::String((*k).to_string()));
            }
        }
    }
    s
}

/// The dotted form of a path of keys only, for `Options::ignore`; None past an index.
fn dotted(path: &[Seg<'_>]) -> Option<String> {
    let mut s = String::new();
    for seg in path {
        let Seg::Key(k) = seg else { return None };
        if !s.is_empty() {
            s.push('.');
        }
        s.push_str(k);
    }
    Some(s)
}

fn quote(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > QUOTE {
        format!("{}…", s.chars().take(QUOTE - 1).collect::<String>())
    } else {
        s
    }
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An integer as the apiserver's decoder sees it: integral floats count (1.0 is 1).
fn as_integer(v: &Value) -> Option<f64> {
    let n = v.as_number()?;
    if n.is_i64() || n.is_u64() {
        return n.as_f64();
    }
    n.as_f64().filter(|f| f.fract() == 0.0 && f.is_finite())
}

fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| json_equal(a, b)))
        }
        _ => a == b,
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn num(schema: &Value, name: &str) -> Option<f64> {
    schema.get(name).and_then(Value::as_f64)
}

fn count(schema: &Value, name: &str) -> Option<u64> {
    schema.get(name).and_then(Value::as_u64)
}

struct Walker<'o, 's> {
    options: &'o Options,
    out: Validation,
    patterns: HashMap<&'s str, Option<Regex>>,
}

impl<'s> Walker<'_, 's> {
    fn full(&self) -> bool {
        self.out.truncated
    }

    fn push(&mut self, path: &[Seg<'_>], kind: ViolationKind, message: String) {
        if self.out.violations.len() >= self.options.max_violations {
            self.out.truncated = true;
            return;
        }
        self.out.violations.push(Violation { path: render(path), kind, message });
    }

    fn ignored(&self, path: &[Seg<'_>]) -> bool {
        !self.options.ignore.is_empty() && dotted(path).is_some_and(|d| self.options.ignore.contains(&d))
    }

    /// Whether an ignored path lies below `path` (`status` of `status.conditions`): the schema
    /// that owns that path (Crossplane's generated CRD) declares `path` too.
    fn owns_below(&self, path: &[Seg<'_>]) -> bool {
        !self.options.ignore.is_empty()
            && dotted(path).is_some_and(|d| {
                self.options
                    .ignore
                    .iter()
                    .any(|i| i.strip_prefix(d.as_str()).is_some_and(|r| r.starts_with('.')))
            })
    }

    fn node<'v>(
        &mut self,
        schema: &'s Value,
        v: &'v Value,
        path: &mut Vec<Seg<'v>>,
        depth: usize,
        mode: Mode,
    ) {
        if self.full() || !schema.is_object() {
            return;
        }
        if depth > self.options.max_depth {
            let max = self.options.max_depth;
            self.push(
                path,
                ViolationKind::TooDeep,
                format!("nested deeper than {max} levels; not checked below, flatten the value"),
            );
            return;
        }
        let ty = schema.get("type").and_then(Value::as_str);
        if v.is_null() {
            if !flag(schema, "nullable") && (ty.is_some() || flag(schema, "x-kubernetes-int-or-string")) {
                self.push(
                    path,
                    ViolationKind::Null,
                    "is null and the schema has no nullable: true, so the apiserver drops the field; \
                     omit it, or declare nullable: true"
                        .into(),
                );
            }
            return;
        }
        if !self.type_fits(schema, ty, v, path) {
            return;
        }
        self.enumeration(schema, v, path);
        match v {
            Value::String(s) => self.string(schema, s, v, path),
            Value::Number(_) => self.number(schema, v, path),
            Value::Array(items) => self.array(schema, items, path, depth, mode),
            Value::Object(m) => self.object(schema, m, path, depth, mode),
            _ => {}
        }
        self.combinators(schema, v, path, depth);
    }

    /// Whether `v` has the schema's type; reports the mismatch when not.
    fn type_fits(&mut self, schema: &Value, ty: Option<&str>, v: &Value, path: &[Seg<'_>]) -> bool {
        if flag(schema, "x-kubernetes-int-or-string") {
            if v.is_string() || as_integer(v).is_some() {
                return true;
            }
            self.push(
                path,
                ViolationKind::Type,
                format!(
                    "must be an integer or a string (x-kubernetes-int-or-string), got {} {}; give a whole number or a string",
                    type_of(v),
                    quote(v)
                ),
            );
            return false;
        }
        let fits = match ty {
            None => true,
            Some("integer") => as_integer(v).is_some(),
            Some("number") => v.is_number(),
            Some("string") => v.is_string(),
            Some("boolean") => v.is_boolean(),
            Some("object") => v.is_object(),
            Some("array") => v.is_array(),
            Some(_) => true,
        };
        if !fits {
            let want = ty.unwrap_or_default();
            let hint = match (want, v) {
                ("integer", Value::String(s)) if s.trim().parse::<i64>().is_ok() => {
                    format!("; write {} without quotes", s.trim())
                }
                ("number", Value::String(s)) if s.trim().parse::<f64>().is_ok() => {
                    format!("; write {} without quotes", s.trim())
                }
                ("boolean", Value::String(s)) if matches!(s.as_str(), "true" | "false") => {
                    format!("; write {s} without quotes")
                }
                ("string", Value::Number(_) | Value::Bool(_)) => format!("; quote it: \"{v}\""),
                _ => format!("; give a value of type {want}"),
            };
            self.push(
                path,
                ViolationKind::Type,
                format!("must be of type {want}, got {} {}{hint}", type_of(v), quote(v)),
            );
        }
        fits
    }

    fn enumeration(&mut self, schema: &Value, v: &Value, path: &[Seg<'_>]) {
        let Some(allowed) = schema.get("enum").and_then(Value::as_array) else { return };
        if allowed.iter().any(|a| json_equal(a, v)) {
            return;
        }
        let list: Vec<String> = allowed.iter().take(10).map(quote).collect();
        let more =
            if allowed.len() > 10 { format!(" and {} more", allowed.len() - 10) } else { String::new() };
        self.push(
            path,
            ViolationKind::Enum,
            format!(
                "{} is not one of the schema's enum values {}{more}; use one of them",
                quote(v),
                list.join(", ")
            ),
        );
    }

    fn string(&mut self, schema: &'s Value, s: &str, v: &Value, path: &[Seg<'_>]) {
        let len = s.chars().count() as u64;
        if let Some(min) = count(schema, "minLength").filter(|m| len < *m) {
            self.push(
                path,
                ViolationKind::Size,
                format!("{} has {len} character(s), fewer than the minLength {min}; lengthen it", quote(v)),
            );
        }
        if let Some(max) = count(schema, "maxLength").filter(|m| len > *m) {
            self.push(
                path,
                ViolationKind::Size,
                format!("has {len} characters, more than the maxLength {max}; shorten it to at most {max}"),
            );
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str)
            && let Some(re) = self.pattern(p)
            && !re.is_match(s)
        {
            self.push(
                path,
                ViolationKind::Pattern,
                format!("{} does not match the schema's pattern {p}; give a value that matches it", quote(v)),
            );
        }
        if let Some(f) = schema.get("format").and_then(Value::as_str)
            && let Some(why) = string_format(f, s)
        {
            self.push(
                path,
                ViolationKind::Format,
                format!("{} is not a valid {f} ({why}); give a value in that format", quote(v)),
            );
        }
    }

    fn pattern(&mut self, p: &'s str) -> Option<&Regex> {
        self.patterns
            .entry(p)
            .or_insert_with(|| {
                if p.len() > MAX_PATTERN {
                    return None;
                }
                regex::RegexBuilder::new(p).size_limit(1 << 20).build().ok()
            })
            .as_ref()
    }

    fn number(&mut self, schema: &Value, v: &Value, path: &[Seg<'_>]) {
        let Some(x) = v.as_f64() else { return };
        let shown = quote(v);
        if let Some(min) = num(schema, "minimum") {
            let exclusive = flag(schema, "exclusiveMinimum");
            if x < min || (exclusive && x == min) {
                let (rel, fix) = if exclusive { ("at most", ">") } else { ("less than", "≥") };
                self.push(
                    path,
                    ViolationKind::Bound,
                    format!("{shown} is {rel} the minimum {min}; give a value {fix} {min}"),
                );
            }
        }
        if let Some(max) = num(schema, "maximum") {
            let exclusive = flag(schema, "exclusiveMaximum");
            if x > max || (exclusive && x == max) {
                let (rel, fix) = if exclusive { ("at least", "<") } else { ("more than", "≤") };
                self.push(
                    path,
                    ViolationKind::Bound,
                    format!("{shown} is {rel} the maximum {max}; give a value {fix} {max}"),
                );
            }
        }
        if let Some(m) = num(schema, "multipleOf").filter(|m| *m > 0.0) {
            let q = x / m;
            if (q - q.round()).abs() > 1e-9 {
                self.push(
                    path,
                    ViolationKind::Bound,
                    format!("{shown} is not a multiple of {m}; round it to one"),
                );
            }
        }
        let range = match schema.get("format").and_then(Value::as_str) {
            Some("int32") => Some((f64::from(i32::MIN), f64::from(i32::MAX), "int32")),
            Some("uint32") => Some((0.0, f64::from(u32::MAX), "uint32")),
            Some("int64") => Some((i64::MIN as f64, i64::MAX as f64, "int64")),
            _ => None,
        };
        if let Some((lo, hi, name)) = range {
            let outside = match v.as_number() {
                // f64 cannot hold i64::MAX exactly: decide on the integer when there is one.
                Some(n) if name == "int64" => n.as_i64().is_none() && (n.is_u64() || x < lo || x >= hi),
                _ => x < lo || x > hi,
            };
            if outside {
                self.push(
                    path,
                    ViolationKind::Bound,
                    format!("{shown} is outside format {name}'s range {lo}..{hi}; give a value in it"),
                );
            }
        }
    }

    fn array<'v>(
        &mut self,
        schema: &'s Value,
        items: &'v [Value],
        path: &mut Vec<Seg<'v>>,
        depth: usize,
        mode: Mode,
    ) {
        let n = items.len() as u64;
        if let Some(min) = count(schema, "minItems").filter(|m| n < *m) {
            self.push(
                path,
                ViolationKind::Size,
                format!("has {n} item(s), fewer than the minItems {min}; add items"),
            );
        }
        if let Some(max) = count(schema, "maxItems").filter(|m| n > *m) {
            self.push(
                path,
                ViolationKind::Size,
                format!("has {n} items, more than the maxItems {max}; remove items down to {max}"),
            );
        }
        self.list_type(schema, items, path);
        let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) else { return };
        let child = if mode == Mode::NoPrune { Mode::NoPrune } else { Mode::Normal };
        for (i, item) in items.iter().enumerate() {
            if self.full() {
                return;
            }
            path.push(Seg::Index(i));
            self.node(item_schema, item, path, depth + 1, child);
            path.pop();
        }
    }

    /// `x-kubernetes-list-type: set` (no two equal items) and `map` (no two items with the
    /// same `x-kubernetes-list-map-keys`).
    fn list_type(&mut self, schema: &Value, items: &[Value], path: &mut Vec<Seg<'_>>) {
        let keys: Vec<&str> = match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => Vec::new(),
            Some("map") => schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default(),
            _ => return,
        };
        // Quadratic, so bounded: longer lists are checked on their first items only.
        let limit = items.len().min(512);
        for j in 1..limit {
            let key_of = |v: &Value| -> Value {
                if keys.is_empty() {
                    v.clone()
                } else {
                    Value::Array(keys.iter().map(|k| v.get(k).cloned().unwrap_or(Value::Null)).collect())
                }
            };
            let kj = key_of(&items[j]);
            if let Some(i) = (0..j).find(|i| json_equal(&key_of(&items[*i]), &kj)) {
                path.push(Seg::Index(j));
                let what = if keys.is_empty() {
                    format!("duplicates item [{i}] in a list of type set; remove one of them")
                } else {
                    format!(
                        "has the same {} as item [{i}] in a list of type map; make the keys unique",
                        keys.join(", ")
                    )
                };
                self.push(path, ViolationKind::Duplicate, what);
                path.pop();
                if self.full() {
                    return;
                }
            }
        }
    }

    fn object<'v>(
        &mut self,
        schema: &'s Value,
        m: &'v Map<String, Value>,
        path: &mut Vec<Seg<'v>>,
        depth: usize,
        mode: Mode,
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields")
            || matches!(additional, Some(Value::Bool(true)))
            || (schema.get("type").is_none() && props.is_none() && additional.is_none());
        let embedded = flag(schema, "x-kubernetes-embedded-resource");
        let resource = matches!(mode, Mode::Root | Mode::Embedded) || embedded;
        let free = |k: &str| resource && matches!(k, "apiVersion" | "kind" | "metadata");
        let child = if mode == Mode::NoPrune { Mode::NoPrune } else { Mode::Normal };
        for (k, v) in m {
            if self.full() {
                return;
            }
            path.push(Seg::Key(k));
            if !self.ignored(path) {
                match (props.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) if free(k) && k == "metadata" => {
                        self.node(s, v, path, depth + 1, Mode::NoPrune)
                    }
                    (Some(s), _) => {
                        let embedded_child = flag(s, "x-kubernetes-embedded-resource");
                        self.node(s, v, path, depth + 1, if embedded_child { Mode::Embedded } else { child });
                    }
                    (None, Some(ap @ Value::Object(_))) => self.node(ap, v, path, depth + 1, child),
                    (None, _) if preserve || free(k) || mode == Mode::NoPrune => {}
                    // Undeclared here but declared by the owner of an ignored path below it:
                    // only that path's fields are let through.
                    (None, _) if self.owns_below(path) => self.node(&OWNED_PARENT, v, path, depth + 1, child),
                    (None, _) => self.push(
                        path,
                        ViolationKind::Unknown,
                        "is not declared in the schema: the apiserver drops it (or refuses the object \
                         under fieldValidation=Strict); remove it, or declare it in the version's schema"
                            .into(),
                    ),
                }
            }
            path.pop();
        }
        self.required(schema, m, path);
        let n = m.len() as u64;
        if let Some(min) = count(schema, "minProperties").filter(|x| n < *x) {
            self.push(
                path,
                ViolationKind::Size,
                format!("has {n} field(s), fewer than the minProperties {min}; add fields"),
            );
        }
        if let Some(max) = count(schema, "maxProperties").filter(|x| n > *x) {
            self.push(
                path,
                ViolationKind::Size,
                format!("has {n} fields, more than the maxProperties {max}; remove fields down to {max}"),
            );
        }
    }

    fn required<'v>(&mut self, schema: &Value, m: &Map<String, Value>, path: &mut Vec<Seg<'v>>) {
        let Some(req) = schema.get("required").and_then(Value::as_array) else { return };
        for r in req.iter().filter_map(Value::as_str) {
            if m.contains_key(r) {
                continue;
            }
            // The path names the missing field; it borrows from the schema only for the message.
            let mut at = render(path);
            let missing = render(&[Seg::Key(r)]);
            if at.is_empty() || missing.starts_with('[') {
                at.push_str(&missing);
            } else {
                at.push('.');
                at.push_str(&missing);
            }
            if self.out.violations.len() >= self.options.max_violations {
                self.out.truncated = true;
                return;
            }
            self.out.violations.push(Violation {
                path: at,
                kind: ViolationKind::Required,
                message: "is required by the schema and missing; set it".into(),
            });
        }
    }

    /// The value checks of allOf/anyOf/oneOf/not: their branches never prune (structural
    /// schemas declare every field outside them).
    fn combinators<'v>(&mut self, schema: &'s Value, v: &'v Value, path: &mut Vec<Seg<'v>>, depth: usize) {
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for s in all {
                self.node(s, v, path, depth + 1, Mode::NoPrune);
            }
        }
        let passes = |w: &mut Self, s: &'s Value| {
            let mut sub = Walker {
                options: &Options { max_violations: 1, ..w.options.clone() },
                out: Validation::default(),
                patterns: std::mem::take(&mut w.patterns),
            };
            let mut p = Vec::new();
            sub.node(s, v, &mut p, depth + 1, Mode::NoPrune);
            w.patterns = sub.patterns;
            sub.out.violations.is_empty()
        };
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
            && !any.is_empty()
            && !any.iter().any(|s| passes(self, s))
        {
            self.push(
                path,
                ViolationKind::Combinator,
                format!("{} matches none of the schema's anyOf alternatives; change it to fit one", quote(v)),
            );
        }
        if let Some(one) = schema.get("oneOf").and_then(Value::as_array)
            && !one.is_empty()
        {
            let n = one.iter().filter(|s| passes(self, s)).count();
            if n != 1 {
                self.push(
                    path,
                    ViolationKind::Combinator,
                    format!(
                        "{} matches {n} of the schema's oneOf alternatives, and must match exactly one; change it to fit one",
                        quote(v)
                    ),
                );
            }
        }
        if let Some(not) = schema.get("not").filter(|s| s.is_object())
            && passes(self, not)
        {
            self.push(
                path,
                ViolationKind::Combinator,
                format!("{} matches the schema's `not`, which it must not; change it", quote(v)),
            );
        }
    }
}

/// Why `s` is not a value of string format `f`, for the formats the apiserver checks that
/// configs commonly use; None when it is (or the format is not checked here).
fn string_format(f: &str, s: &str) -> Option<&'static str> {
    let digits = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_digit());
    let date = |t: &str| {
        let p: Vec<&str> = t.split('-').collect();
        p.len() == 3
            && digits(p[0], 4)
            && digits(p[1], 2)
            && digits(p[2], 2)
            && (1..=12).contains(&p[1].parse::<u32>().unwrap_or(0))
            && (1..=31).contains(&p[2].parse::<u32>().unwrap_or(0))
    };
    match f {
        "date" => (!date(s)).then_some("expected YYYY-MM-DD"),
        "date-time" => {
            let ok = s.len() >= 20
                && s.is_char_boundary(10)
                && date(&s[..10])
                && matches!(&s[10..11], "T" | "t" | " ")
                && {
                    let rest = &s[11..];
                    let (time, zone_ok) = if let Some(t) = rest.strip_suffix(['Z', 'z']) {
                        (t, true)
                    } else if let Some(i) = rest.rfind(['+', '-']) {
                        let z = &rest[i + 1..];
                        (
                            &rest[..i],
                            z.len() == 5 && digits(&z[..2], 2) && &z[2..3] == ":" && digits(&z[3..], 2),
                        )
                    } else {
                        (rest, false)
                    };
                    let hms = time.split('.').next().unwrap_or_default();
                    let p: Vec<&str> = hms.split(':').collect();
                    zone_ok && p.len() == 3 && p.iter().all(|x| digits(x, 2))
                };
            (!ok).then_some("expected RFC 3339, such as 2006-01-02T15:04:05Z")
        }
        "uuid" => {
            let p: Vec<&str> = s.split('-').collect();
            let ok = p.len() == 5
                && p.iter()
                    .zip([8, 4, 4, 4, 12])
                    .all(|(x, n)| x.len() == n && x.bytes().all(|b| b.is_ascii_hexdigit()));
            (!ok).then_some("expected 8-4-4-4-12 hexadecimal digits")
        }
        "byte" => {
            let ok = s.len().is_multiple_of(4)
                && s.trim_end_matches('=')
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
                && s.len() - s.trim_end_matches('=').len() <= 2;
            (!ok).then_some("expected base64")
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_err().then_some("expected a dotted IPv4 address"),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_err().then_some("expected an IPv6 address"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 100, "format": "int32"},
                        "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1},
                        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                        "tier": {"type": "string", "enum": ["small", "large"]},
                        "on": {"type": "boolean"},
                        "port": {"x-kubernetes-int-or-string": true},
                        "note": {"type": "string", "nullable": true},
                        "when": {"type": "string", "format": "date-time"},
                        "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"},
                                 "x-kubernetes-list-type": "set"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                 "properties": {"known": {"type": "integer"}}},
                        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                                  "items": {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}},
                        "big": {"type": "integer", "format": "int64"},
                        "either": {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}]},
                        "inner": {"type": "object", "x-kubernetes-embedded-resource": true,
                                  "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    fn ok_object() -> Value {
        json!({
            "apiVersion": "example.org/v1", "kind": "DB", "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"size": 3, "ratio": 0.5, "name": "abc", "tier": "small", "on": true, "port": "http",
                     "note": null, "when": "2026-01-02T03:04:05Z", "tags": ["a", "b"], "labels": {"a.b/c": "d"},
                     "free": {"known": 1, "other": [1, "x"]}, "ports": [{"name": "a", "n": 1}, {"name": "b", "n": 1}],
                     "big": 9_223_372_036_854_775_807_i64, "either": "bee", "inner": {"apiVersion": "v1", "kind": "X", "any": 1}}
        })
    }

    fn only(v: &Validation) -> (&str, ViolationKind) {
        assert_eq!(v.violations.len(), 1, "{:#?}", v.violations);
        (v.violations[0].path.as_str(), v.violations[0].kind)
    }

    fn with(path: &str, value: Value) -> Validation {
        let mut o = ok_object();
        *o.pointer_mut(path).unwrap() = value;
        validate(&schema(), &o)
    }

    #[test]
    fn a_conforming_object_has_no_violations() {
        assert_eq!(validate(&schema(), &ok_object()), Validation::default());
        // 1.0 decodes as the integer 1, as in the apiserver.
        assert!(with("/spec/size", json!(1.0)).is_valid());
        assert!(with("/spec/port", json!(8080)).is_valid());
    }

    #[test]
    fn types_are_told_apart_with_the_fix() {
        let v = with("/spec/size", json!("10"));
        assert_eq!(only(&v), ("spec.size", ViolationKind::Type));
        assert!(
            v.violations[0]
                .message
                .contains("must be of type integer, got string \"10\"; write 10 without quotes")
        );
        assert_eq!(only(&with("/spec/size", json!(1.5))), ("spec.size", ViolationKind::Type));
        assert_eq!(only(&with("/spec/ratio", json!("x"))), ("spec.ratio", ViolationKind::Type));
        let v = with("/spec/name", json!(12));
        assert!(v.violations[0].message.contains("quote it: \"12\""), "{}", v.violations[0]);
        assert_eq!(only(&with("/spec/on", json!("true"))), ("spec.on", ViolationKind::Type));
        assert_eq!(only(&with("/spec/tags", json!({}))), ("spec.tags", ViolationKind::Type));
        assert_eq!(only(&with("/spec/labels", json!([]))), ("spec.labels", ViolationKind::Type));
        assert_eq!(only(&with("/spec/port", json!(1.5))), ("spec.port", ViolationKind::Type));
        assert_eq!(only(&with("/spec/port", json!(true))), ("spec.port", ViolationKind::Type));
    }

    #[test]
    fn required_enum_and_nullable() {
        let mut o = ok_object();
        o["spec"].as_object_mut().unwrap().remove("size");
        let v = validate(&schema(), &o);
        assert_eq!(only(&v), ("spec.size", ViolationKind::Required));
        assert_eq!(v.violations[0].to_string(), "spec.size: is required by the schema and missing; set it");
        let v = with("/spec/tier", json!("medium"));
        assert_eq!(only(&v), ("spec.tier", ViolationKind::Enum));
        assert!(v.violations[0].message.contains("\"small\", \"large\""));
        assert_eq!(only(&with("/spec/tier", json!(null))), ("spec.tier", ViolationKind::Null));
    }

    #[test]
    fn unknown_fields_are_reported_where_the_apiserver_prunes() {
        let mut o = ok_object();
        o["spec"]["colour"] = json!("red");
        o["status"] = json!({"x": 1});
        o["spec"]["free"]["anything"] = json!({"deep": 1});
        o["spec"]["inner"]["metadata"] = json!({"name": "n"});
        o["spec"]["ports"][0]["extra"] = json!(1);
        let v = validate(&schema(), &o);
        let paths: Vec<(&str, ViolationKind)> =
            v.violations.iter().map(|x| (x.path.as_str(), x.kind)).collect();
        assert_eq!(
            paths,
            [
                ("spec.colour", ViolationKind::Unknown),
                ("spec.ports[0].extra", ViolationKind::Unknown),
                ("status", ViolationKind::Unknown)
            ]
        );
        assert!(v.violations[0].message.contains("remove it, or declare it"));
        // Typed additionalProperties values are checked; keys with dots are quoted.
        assert_eq!(
            only(&with("/spec/labels/a.b~1c", json!(1))),
            ("spec.labels[\"a.b/c\"]", ViolationKind::Type)
        );
    }

    #[test]
    fn bounds_lengths_patterns_and_formats() {
        assert_eq!(only(&with("/spec/size", json!(0))), ("spec.size", ViolationKind::Bound));
        assert_eq!(only(&with("/spec/size", json!(101))), ("spec.size", ViolationKind::Bound));
        assert_eq!(only(&with("/spec/ratio", json!(1))), ("spec.ratio", ViolationKind::Bound));
        assert_eq!(only(&with("/spec/name", json!("a"))), ("spec.name", ViolationKind::Size));
        assert_eq!(only(&with("/spec/name", json!("abcdef"))), ("spec.name", ViolationKind::Size));
        assert_eq!(only(&with("/spec/name", json!("ABC"))), ("spec.name", ViolationKind::Pattern));
        assert_eq!(only(&with("/spec/tags", json!([]))), ("spec.tags", ViolationKind::Size));
        assert_eq!(only(&with("/spec/tags", json!(["a", "b", "c"]))), ("spec.tags", ViolationKind::Size));
        assert_eq!(only(&with("/spec/tags", json!(["a", "a"]))), ("spec.tags[1]", ViolationKind::Duplicate));
        assert_eq!(
            only(&with("/spec/ports", json!([{"name": "a"}, {"name": "a", "n": 2}]))),
            ("spec.ports[1]", ViolationKind::Duplicate)
        );
        assert_eq!(only(&with("/spec/when", json!("yesterday"))), ("spec.when", ViolationKind::Format));
        assert!(with("/spec/when", json!("2026-01-02T03:04:05.123+01:00")).is_valid());
        assert_eq!(only(&with("/spec/either", json!("cat"))), ("spec.either", ViolationKind::Combinator));
        let mut wide = schema();
        wide["properties"]["spec"]["properties"]["size"] = json!({"type": "integer", "format": "int32"});
        let mut o = ok_object();
        o["spec"]["size"] = json!(2_147_483_648_i64);
        let v = validate(&wide, &o);
        assert_eq!(only(&v), ("spec.size", ViolationKind::Bound));
        assert!(v.violations[0].message.contains("int32"), "{}", v.violations[0]);
        assert_eq!(
            only(&with("/spec/big", json!(9_223_372_036_854_775_808_u64))),
            ("spec.big", ViolationKind::Bound)
        );
    }

    #[test]
    fn bounded_in_count_and_depth_and_ignored_paths_skip() {
        let mut o = ok_object();
        for i in 0..50 {
            o["spec"][format!("x{i}")] = json!(i);
        }
        let v = validate_with(&schema(), &o, &Options { max_violations: 10, ..Options::default() });
        assert_eq!(v.violations.len(), 10);
        assert!(v.truncated);
        let deep_schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"a": {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}}}});
        let v = validate_with(
            &deep_schema,
            &json!({"a": [[[1]]]}),
            &Options { max_depth: 2, ..Options::default() },
        );
        assert_eq!(only(&v), ("a[0][0]", ViolationKind::TooDeep));
        let mut o = ok_object();
        o["spec"]["compositionRef"] = json!({"name": "c"});
        let opts = Options { ignore: vec!["spec.compositionRef".into()], ..Options::default() };
        assert!(validate_with(&schema(), &o, &opts).is_valid());
        assert!(validate(&Value::Null, &json!({"anything": 1})).is_valid());
    }

    #[test]
    fn validate_version_skips_crossplane_fields_of_an_xrd() {
        let xrd = json!({
            "apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition",
            "metadata": {"name": "xdbs.example.org"},
            "spec": {"group": "example.org", "names": {"kind": "XDB", "plural": "xdbs"},
                     "versions": [{"name": "v1", "served": true, "referenceable": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                            "properties": {"size": {"type": "integer"}}}}}}}]}
        });
        let t = Target::from_value(&xrd).unwrap();
        let obj = json!({"spec": {"size": 1, "compositionRef": {"name": "x"}, "extra": 1}});
        let v = validate_version(&t, "v1", &obj).unwrap();
        assert_eq!(only(&v), ("spec.extra", ViolationKind::Unknown));
        assert!(validate_version(&t, "v9", &obj).is_none());
        // A live XR: `status` is undeclared in the XRD but Crossplane's CRD declares it for
        // its conditions; anything else under it is still unknown.
        let live = json!({"spec": {"size": 1}, "status": {"conditions": [{"type": "Ready"}], "mine": 1}});
        let v = validate_version(&t, "v1", &live).unwrap();
        assert_eq!(only(&v), ("status.mine", ViolationKind::Unknown));
    }

    /// A small structural schema and a value it accepts, built together.
    fn schema_and_value() -> impl Strategy<Value = (Value, Value)> {
        let leaf = prop_oneof![
            (-1000i64..1000, 0i64..50).prop_map(|(lo, span)| {
                (json!({"type": "integer", "minimum": lo, "maximum": lo + span}), json!(lo + span / 2))
            }),
            (0.0f64..1.0).prop_map(|x| (json!({"type": "number", "maximum": 1.0}), json!(x))),
            "[a-z]{1,8}"
                .prop_map(|s| (json!({"type": "string", "pattern": "^[a-z]+$", "maxLength": 8}), json!(s))),
            any::<bool>().prop_map(|b| (json!({"type": "boolean"}), json!(b))),
            prop::sample::select(vec!["a", "b", "c"])
                .prop_map(|s| (json!({"type": "string", "enum": ["a", "b", "c"]}), json!(s))),
            any::<i32>().prop_map(|i| (json!({"x-kubernetes-int-or-string": true}), json!(i))),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|fields| {
                    let mut props = Map::new();
                    let mut obj = Map::new();
                    for (i, (s, v)) in fields.into_iter().enumerate() {
                        props.insert(format!("f{i}"), s);
                        obj.insert(format!("f{i}"), v);
                    }
                    let required: Vec<String> = obj.keys().cloned().collect();
                    (json!({"type": "object", "properties": props, "required": required}), Value::Object(obj))
                }),
                (inner, 0usize..4).prop_map(|((s, v), n)| {
                    (json!({"type": "array", "maxItems": 4, "items": s}), Value::Array(vec![v; n]))
                }),
            ]
        })
    }

    /// Every (path, leaf) of a value, to mutate one.
    fn leaves(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => m.iter().for_each(|(k, x)| leaves(x, format!("{at}/{k}"), out)),
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| leaves(x, format!("{at}/{i}"), out)),
            _ => out.push(at),
        }
    }

    proptest! {
        #[test]
        fn generated_values_conform((s, v) in schema_and_value()) {
            let r = validate(&s, &v);
            prop_assert!(r.is_valid(), "{:#?}", r.violations);
        }

        #[test]
        fn an_object_in_place_of_a_leaf_is_reported_at_that_leaf((s, v) in schema_and_value(), pick in any::<prop::sample::Index>()) {
            let mut paths = Vec::new();
            leaves(&v, String::new(), &mut paths);
            prop_assume!(!paths.is_empty());
            let p = pick.get(&paths).clone();
            let mut broken = v.clone();
            *broken.pointer_mut(&p).unwrap() = json!({"x": 1});
            let r = validate(&s, &broken);
            let want = p.split('/').skip(1).fold(String::new(), |acc, seg| match seg.parse::<usize>() {
                Ok(i) => format!("{acc}[{i}]"),
                Err(_) if acc.is_empty() => seg.to_string(),
                Err(_) => format!("{acc}.{seg}"),
            });
            prop_assert!(r.violations.iter().any(|x| x.path == want && x.kind == ViolationKind::Type), "{want}: {:#?}", r.violations);
        }

        #[test]
        fn any_input_is_bounded_and_deterministic((s, _) in schema_and_value(), (_, v) in schema_and_value(), max in 1usize..5) {
            let opts = Options { max_violations: max, ..Options::default() };
            let a = validate_with(&s, &v, &opts);
            prop_assert!(a.violations.len() <= max);
            prop_assert_eq!(a, validate_with(&s, &v, &opts));
        }
    }
}
