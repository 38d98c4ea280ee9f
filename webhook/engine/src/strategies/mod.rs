//! The strategy contract and the registry of the 30 strategies.
//!
//! Each strategy is a unit struct implementing [`StrategyImpl`] in its own module. At
//! compile time it resolves its params against the hub and spoke schemas of its scope (the
//! object root, or an array item inside ForEach), reports what it claims, its verdict and
//! any diagnostics, and returns a [`RuleOp`]. At convert time the op reads the pristine
//! input (`src`) and writes into the output (`dst`); the executor has already removed the
//! rule's source paths from `dst` (see [`CompiledRule::clear_h2s`]), so an op only writes.

use std::fmt;

use dco_api::config::LosslessVerdict;
use dco_api::rules::Strategy;

pub use crate::compile::RuleCx;
use crate::schema::{FlatSchema, Node, node_fits, schema_fits};
use crate::value::{Path, Value};

mod absent;
mod array_map;
mod branch_map;
mod cel;
mod default_value;
mod duration;
mod enum_remap;
mod field_rename;
mod fields_map;
mod fields_to_scalar;
mod for_each;
mod json_patch;
mod list;
mod map_key_rename;
mod metadata;
mod numeric_scale;
mod quantity;
mod scalar_object;
mod scalar_to_fields;
mod singleton_array;
mod type_coerce;

/// One strategy's compiler. Implementations are stateless unit structs.
pub trait StrategyImpl: Sync {
    fn strategy(&self) -> Strategy;

    /// Resolves the rule (`cx.rule()`), reporting problems through `cx`. Returns `None`
    /// when it reported an error and there is nothing to run.
    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule>;
}

/// What a compiled rule covers and does.
pub struct CompiledRule {
    /// Hub paths this rule claims (read hub→spoke, written spoke→hub), scope-relative and
    /// dotted. A path naming an object claims every leaf below it. Paths starting with
    /// `metadata.` name annotation/label keys and are checked for clashes only.
    pub hub_claims: Vec<String>,
    pub spoke_claims: Vec<String>,
    pub verdict: LosslessVerdict,
    /// Why a direction is lossy, one sentence per lossy direction (shown in diagnostics).
    pub lossy_because: Vec<String>,
    /// Paths removed from the output before any op writes, per direction. By default the
    /// claims of the source side.
    pub clear_h2s: Vec<Path>,
    pub clear_s2h: Vec<Path>,
    pub op: Box<dyn RuleOp>,
}

impl CompiledRule {
    /// A rule that moves data between the claimed hub and spoke paths; the source side's
    /// claims are cleared from the output before writing.
    pub fn new(
        hub_claims: Vec<Path>,
        spoke_claims: Vec<Path>,
        verdict: LosslessVerdict,
        op: Box<dyn RuleOp>,
    ) -> Self {
        CompiledRule {
            hub_claims: hub_claims.iter().map(Path::dotted).collect(),
            spoke_claims: spoke_claims.iter().map(Path::dotted).collect(),
            verdict,
            lossy_because: Vec::new(),
            clear_h2s: hub_claims,
            clear_s2h: spoke_claims,
            op,
        }
    }

    /// Records why a direction is lossy (and marks it so).
    pub fn lossy(mut self, hub_to_spoke: bool, because: impl Into<String>) -> Self {
        if hub_to_spoke {
            self.verdict.hub_to_spoke = false;
        } else {
            self.verdict.spoke_to_hub = false;
        }
        let dir = if hub_to_spoke { "hub→spoke" } else { "spoke→hub" };
        self.lossy_because.push(format!("{dir}: {}", because.into()));
        self
    }
}

pub const LOSSLESS: LosslessVerdict = LosslessVerdict { hub_to_spoke: true, spoke_to_hub: true };

/// Why an op could not convert an object. `path` is scope-relative; the executor adds the
/// object, the rule and the scope prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpError {
    pub path: String,
    pub message: String,
    /// Set by ops that run nested rules (ForEach, BranchMap) to name the nested rule that
    /// failed; the executor fills in the running rule otherwise.
    pub rule: Option<(Vec<usize>, Strategy)>,
}

impl OpError {
    pub fn new(path: impl fmt::Display, message: impl Into<String>) -> Self {
        OpError { path: path.to_string(), message: message.into(), rule: None }
    }
}

/// A compiled rule's runtime half.
pub trait RuleOp: Send + Sync + fmt::Debug {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError>;
    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError>;

    /// How the op runs on the review's stream path, where an object is rewritten as it is
    /// read; `None` (the default) when it cannot.
    fn stream(&self) -> Option<Stream<'_>> {
        None
    }

    /// The value a [`Stream::Move`] with `mapped` writes for `v`: the same function the op's
    /// own `hub_to_spoke`/`spoke_to_hub` applies. `Ok(None)` writes nothing.
    fn map_value(&self, v: &Value, _dir: crate::convert::Direction) -> Result<Option<Value>, OpError> {
        Ok(Some(v.clone()))
    }
}

/// What an op does, in the terms of the stream path (see `crate::stream`). Both kinds clear
/// the source path and write the target path from the pristine input, like every op.
pub enum Stream<'a> {
    /// The value at the source path is written at the target path, unchanged or through
    /// [`RuleOp::map_value`] when `mapped`.
    Move { hub: &'a Path, spoke: &'a Path, mapped: bool },
    /// The list of objects at the source path is written at the target path, each item
    /// converted by `scope`.
    Items { hub: &'a Path, spoke: &'a Path, scope: &'a crate::plan::ScopePlan },
}

/// The implementation of `s`, or None while it is not implemented (compile then fails with
/// "strategy X is not implemented yet" — never a silent pass).
pub fn implementation(s: Strategy) -> Option<&'static dyn StrategyImpl> {
    match s {
        Strategy::FieldRename => Some(&field_rename::FieldRename),
        Strategy::ScalarToObject => Some(&scalar_object::ScalarToObject),
        Strategy::ObjectToScalar => Some(&scalar_object::ObjectToScalar),
        Strategy::SingletonArrayToObject => Some(&singleton_array::SingletonArrayToObject),
        Strategy::ObjectToSingletonArray => Some(&singleton_array::ObjectToSingletonArray),
        Strategy::FieldsToMap => Some(&fields_map::FieldsToMap),
        Strategy::MapToFields => Some(&fields_map::MapToFields),
        Strategy::ToAnnotation => Some(&metadata::ToAnnotation),
        Strategy::ToLabel => Some(&metadata::ToLabel),
        Strategy::FromAnnotation => Some(&metadata::FromAnnotation),
        Strategy::FromLabel => Some(&metadata::FromLabel),
        Strategy::EnumRemap => Some(&enum_remap::EnumRemap),
        Strategy::DefaultValue => Some(&default_value::DefaultValue),
        Strategy::Constant => Some(&default_value::Constant),
        Strategy::Delete => Some(&default_value::Delete),
        Strategy::ForEach => Some(&for_each::ForEach),
        Strategy::ArrayToMapByKey => Some(&array_map::ArrayToMapByKey),
        Strategy::MapToArrayByKey => Some(&array_map::MapToArrayByKey),
        Strategy::NumericScale => Some(&numeric_scale::NumericScale),
        Strategy::ListJoin => Some(&list::ListJoin),
        Strategy::ListSplit => Some(&list::ListSplit),
        Strategy::MapKeyRename => Some(&map_key_rename::MapKeyRename),
        // Implemented in their own modules by the engine-libs work; registered here.
        Strategy::JsonPatch => Some(&json_patch::JsonPatch),
        Strategy::TypeCoerce => Some(&type_coerce::TypeCoerce),
        Strategy::ScalarToFields => Some(&scalar_to_fields::ScalarToFields),
        Strategy::FieldsToScalar => Some(&fields_to_scalar::FieldsToScalar),
        Strategy::Quantity => Some(&quantity::QuantityStrategy),
        Strategy::Duration => Some(&duration::DurationStrategy),
        Strategy::Cel => Some(&cel::Cel),
        Strategy::BranchMap => Some(&branch_map::BranchMap),
    }
}

/// Copies `src[from]` (if present) to `dst[to]` through `f`; the common shape of ops that
/// move one value between a hub and a spoke path.
pub fn move_value(
    src: &Value,
    dst: &mut Value,
    from: &Path,
    to: &Path,
    f: impl FnOnce(&Value) -> Result<Option<Value>, OpError>,
) -> Result<(), OpError> {
    let Some(v) = crate::value::get(src, from.segments()) else {
        return Ok(());
    };
    if let Some(out) = f(v)? {
        crate::value::set(dst, to.segments(), out).map_err(|e| OpError::new(to, e.to_string()))?;
    }
    Ok(())
}

/// Whether values move unchanged between a hub node and a spoke node, per direction, with
/// the reason for each lossy direction. Objects are compared leaf by leaf.
pub fn fit_verdict(
    cx: &RuleCx<'_>,
    hub: (&Path, &Node),
    spoke: (&Path, &Node),
) -> (LosslessVerdict, Vec<(bool, String)>) {
    let sub = |fs: &FlatSchema, p: &Path| fs.subtree(&p.dotted());
    let check = |a: Option<FlatSchema>, b: Option<FlatSchema>, an: &Node, bn: &Node| match (a, b) {
        (Some(a), Some(b)) if !an.is_leaf() || !bn.is_leaf() => schema_fits(&a, &b),
        _ => node_fits(an, bn),
    };
    let h2s = check(sub(cx.hub_schema(), hub.0), sub(cx.spoke_schema(), spoke.0), hub.1, spoke.1);
    let s2h = check(sub(cx.spoke_schema(), spoke.0), sub(cx.hub_schema(), hub.0), spoke.1, hub.1);
    let mut why = Vec::new();
    if let Err(e) = &h2s {
        why.push((true, format!("hub {} does not fit spoke {}: {e}", hub.0, spoke.0)));
    }
    if let Err(e) = &s2h {
        why.push((false, format!("spoke {} does not fit hub {}: {e}", spoke.0, hub.0)));
    }
    (LosslessVerdict { hub_to_spoke: h2s.is_ok(), spoke_to_hub: s2h.is_ok() }, why)
}

/// Leaf vs interior and scalar vs array vs map vs opaque: what "the same kind" means.
pub fn same_kind(a: &Node, b: &Node) -> bool {
    use crate::schema::Shape;
    if a.accepts_anything() || b.accepts_anything() {
        return true;
    }
    match (&a.shape, &b.shape) {
        (Shape::Object { has_properties: x, .. }, Shape::Object { has_properties: y, .. }) => {
            x == y || !x || !y
        }
        (Shape::Scalar(_), Shape::Scalar(_)) => true,
        (Shape::Array { .. }, Shape::Array { .. }) => true,
        (Shape::Map { .. }, Shape::Map { .. }) => true,
        (Shape::Opaque { .. }, Shape::Opaque { .. }) => true,
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod testkit;
