//! BranchMap: maps the branches of a union field — an object of which exactly one property (the
//! branch) is set, usually declared with `oneOf` — between hub and spoke, with an optional
//! discriminator and per-branch nested rules (branch-relative paths, like ForEach's items).
//!
//! Unions come in two schema forms, both supported:
//! - an object whose properties are the branches (no `oneOf`): each mapped branch and the
//!   discriminator are claimed; other properties of the union are left to other rules;
//! - an object with `oneOf` (an opaque unit to the flattener): the whole union is claimed, every
//!   branch named in the `oneOf` must be mapped, and its other properties are copied through
//!   when hub and spoke declare them identically (an error otherwise).
//!
//! At runtime an object whose union has no mapped branch set, or several, fails the conversion
//! with an error naming the union and the branches.
//!
//! Verdict: the AND of the branches' verdicts (their nested rules and leftovers); two hub
//! branches mapped onto one spoke branch make spoke→hub lossy (the way back picks the first).

use std::collections::BTreeSet;

use dco_api::config::LosslessVerdict;
use dco_api::rules::{Branch, BranchMapParams, Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::convert::Direction;
use crate::plan::ScopePlan;
use crate::schema::{FlatSchema, Node, Shape, node_fits};
use crate::value::{self, JsonContainerTrait, JsonValueMutTrait, JsonValueTrait, Path, Value};

pub struct BranchMap;

/// How the union is declared on one side.
enum UnionSchema {
    /// An object with properties: the branches are ordinary nested fields. With the names of
    /// its required-only `oneOf`/`anyOf`, if it has one (each must be mapped).
    Fields(Vec<String>),
    /// An opaque `oneOf` object, as its raw schema.
    OneOf(serde_json::Value),
}

impl UnionSchema {
    fn property_names(&self, fs: &FlatSchema, union: &str) -> Vec<String> {
        match self {
            UnionSchema::Fields(_) => fs.children(union).into_iter().map(str::to_string).collect(),
            UnionSchema::OneOf(raw) => raw
                .get("properties")
                .and_then(serde_json::Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// The branch's schema as a flattened root.
    fn branch(&self, fs: &FlatSchema, union: &str, name: &str) -> Option<FlatSchema> {
        match self {
            UnionSchema::Fields(_) => fs.subtree(&format!("{union}.{name}")),
            UnionSchema::OneOf(raw) => raw.get("properties").and_then(|p| p.get(name)).map(FlatSchema::node),
        }
    }

    /// Branch names the `oneOf` lists (`required: [name]` entries).
    fn one_of_names(&self) -> BTreeSet<String> {
        let raw = match self {
            UnionSchema::Fields(names) => return names.iter().cloned().collect(),
            UnionSchema::OneOf(raw) => raw,
        };
        raw.get("oneOf")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|alt| alt.get("required").and_then(serde_json::Value::as_array))
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect()
    }

    fn raw_property(&self, name: &str) -> Option<&serde_json::Value> {
        match self {
            UnionSchema::OneOf(raw) => raw.get("properties").and_then(|p| p.get(name)),
            UnionSchema::Fields(_) => None,
        }
    }
}

fn union_schema(cx: &mut RuleCx<'_>, field: &str, dotted: &str, node: &Node) -> Option<UnionSchema> {
    match &node.shape {
        Shape::Object { has_properties: true, union, .. } => Some(UnionSchema::Fields(union.clone())),
        Shape::Opaque { canonical, .. } => match serde_json::from_str::<serde_json::Value>(canonical) {
            Ok(raw)
                if raw
                    .get("properties")
                    .and_then(serde_json::Value::as_object)
                    .is_some_and(|p| !p.is_empty()) =>
            {
                Some(UnionSchema::OneOf(raw))
            }
            _ => {
                cx.error(&[dotted], format!("{field}: the union must declare its branches as properties (the apiserver requires this for oneOf too)"));
                None
            }
        },
        _ => {
            cx.error(
                &[dotted],
                format!("{field}: BranchMap needs an object whose properties are the branches, but the field is a {}", node.describe()),
            );
            None
        }
    }
}

/// One compiled branch pair.
#[derive(Debug)]
struct PairOp {
    hub: String,
    spoke: String,
    hub_disc: String,
    spoke_disc: String,
    convert: BranchConvert,
}

#[derive(Debug)]
enum BranchConvert {
    /// Object branches: their nested rules and leftovers.
    Nested(ScopePlan),
    /// Leaf branches (scalars, arrays, opaque values): copied as they are.
    Copy,
}

impl StrategyImpl for BranchMap {
    fn strategy(&self) -> Strategy {
        Strategy::BranchMap
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::BranchMap(p)) = cx.rule().params() else { return None };
        let hub = cx.hub_node("branchMap.hubPath", &p.hub_path);
        let spoke = cx.spoke_node("branchMap.spokePath", &p.spoke_path);
        let ((hub_union, hn), (spoke_union, sn)) = (hub?, spoke?);
        let hu = union_schema(cx, "branchMap.hubPath", &p.hub_path, hn);
        let su = union_schema(cx, "branchMap.spokePath", &p.spoke_path, sn);
        let (hu, su) = (hu?, su?);
        let hub_fs = cx.hub_schema();
        let spoke_fs = cx.spoke_schema();
        let hub_props = hu.property_names(hub_fs, &p.hub_path);
        let spoke_props = su.property_names(spoke_fs, &p.spoke_path);

        if p.branches.is_empty() {
            cx.error(&[&p.hub_path], "branchMap.branches is empty; map every branch of the union");
            return None;
        }
        if let Some(d) = &p.discriminator {
            for (side, props) in [("hub", &hub_props), ("spoke", &spoke_props)] {
                if !props.contains(d) {
                    cx.error(
                        &[d],
                        format!("branchMap.discriminator {d:?} is not a property of the {side} union (it has {}); declare it on both sides or leave it out", props.join(", ")),
                    );
                }
            }
            if p.branches.iter().any(|b| b.hub == *d || b.spoke == *d) {
                cx.error(&[d], "branchMap.discriminator is also listed as a branch; a field is either the discriminator or a branch");
            }
        }

        let mut verdict = LOSSLESS;
        let mut lossy_because: Vec<(bool, String)> = Vec::new();
        let mut pairs = Vec::new();
        let mut seen_hub = BTreeSet::new();
        let mut seen_spoke = BTreeSet::new();
        let mut seen_hub_disc = BTreeSet::new();
        for (i, b) in p.branches.iter().enumerate() {
            let field = format!("branchMap.branches[{i}]");
            if !seen_hub.insert(b.hub.as_str()) {
                cx.error(
                    &[&b.hub],
                    format!("{field}: hub branch {:?} is mapped twice; map each hub branch once", b.hub),
                );
                continue;
            }
            let hub_disc = b.hub_discriminator_value.clone().unwrap_or_else(|| b.hub.clone());
            if p.discriminator.is_some() && !seen_hub_disc.insert(hub_disc.clone()) {
                cx.error(
                    &[&b.hub],
                    format!("{field}: hub discriminator value {hub_disc:?} is used by two branches"),
                );
            }
            if !seen_spoke.insert(b.spoke.as_str()) {
                lossy_because.push((
                    false,
                    format!("spoke branch {:?} receives several hub branches; converting back always yields the first of them", b.spoke),
                ));
            }
            let Some(convert) = compile_pair(
                cx,
                &field,
                p,
                b,
                (&hu, &hub_props),
                (&su, &spoke_props),
                &mut verdict,
                &mut lossy_because,
            ) else {
                continue;
            };
            pairs.push(PairOp {
                hub: b.hub.clone(),
                spoke: b.spoke.clone(),
                hub_disc,
                spoke_disc: b.spoke_discriminator_value.clone().unwrap_or_else(|| b.spoke.clone()),
                convert,
            });
        }

        // A oneOf union is claimed whole: its branches must all be mapped and its other
        // properties must match, since nothing else can address them.
        let mut passthrough = Vec::new();
        for (side, u, props, mapped) in
            [("hub", &hu, &hub_props, &seen_hub), ("spoke", &su, &spoke_props, &seen_spoke)]
        {
            for name in u.one_of_names() {
                if !mapped.contains(name.as_str()) {
                    cx.error(
                        &[&name],
                        format!(
                            "{side} branch {name:?} of the union is not mapped; add it to branchMap.branches"
                        ),
                    );
                }
            }
            if let UnionSchema::OneOf(_) = u {
                for name in props {
                    let is_branch = mapped.contains(name.as_str()) || u.one_of_names().contains(name);
                    if is_branch
                        || p.discriminator.as_deref() == Some(name.as_str())
                        || passthrough.contains(name)
                    {
                        continue;
                    }
                    let other = if side == "hub" { &su } else { &hu };
                    let same = match (u.raw_property(name), other.raw_property(name)) {
                        (Some(a), Some(b)) => a == b,
                        _ => false,
                    };
                    if same {
                        passthrough.push(name.clone());
                    } else {
                        cx.error(
                            &[name],
                            format!("union property {name:?} is neither a mapped branch nor the discriminator, and the {side} declares it differently from the other side; BranchMap copies such properties only when both sides declare them identically"),
                        );
                    }
                }
            }
        }
        if cx.has_errors() {
            return None;
        }

        let opaque_hub = matches!(hu, UnionSchema::OneOf(_));
        let opaque_spoke = matches!(su, UnionSchema::OneOf(_));
        let claims = |union: &Path, opaque: bool, names: &mut dyn Iterator<Item = &String>| -> Vec<Path> {
            if opaque {
                vec![union.clone()]
            } else {
                let mut out: Vec<Path> = names.map(|n| union.child(n)).collect();
                if let Some(d) = &p.discriminator {
                    out.push(union.child(d));
                }
                out
            }
        };
        let hub_claims = claims(&hub_union, opaque_hub, &mut pairs.iter().map(|x| &x.hub));
        let mut spoke_names: Vec<&String> = pairs.iter().map(|x| &x.spoke).collect();
        spoke_names.dedup();
        let spoke_claims = claims(&spoke_union, opaque_spoke, &mut spoke_names.into_iter());
        let op = BranchOp {
            hub_union,
            spoke_union,
            opaque_hub,
            opaque_spoke,
            discriminator: p.discriminator.clone(),
            pairs,
            passthrough,
        };
        let mut compiled = CompiledRule::new(hub_claims, spoke_claims, verdict, Box::new(op));
        for (h2s, why) in lossy_because {
            compiled = compiled.lossy(h2s, why);
        }
        Some(compiled)
    }
}

#[allow(clippy::too_many_arguments)]
fn compile_pair(
    cx: &mut RuleCx<'_>,
    field: &str,
    p: &BranchMapParams,
    b: &Branch,
    (hu, hub_props): (&UnionSchema, &[String]),
    (su, spoke_props): (&UnionSchema, &[String]),
    verdict: &mut LosslessVerdict,
    lossy_because: &mut Vec<(bool, String)>,
) -> Option<BranchConvert> {
    let mut missing = false;
    for (side, name, props, path) in
        [("hub", &b.hub, hub_props, &p.hub_path), ("spoke", &b.spoke, spoke_props, &p.spoke_path)]
    {
        if !props.contains(name) {
            cx.error(
                &[name],
                format!(
                    "{field}: {side} branch {name:?} is not a property of the union at {path} (it has {})",
                    props.join(", ")
                ),
            );
            missing = true;
        }
    }
    if missing {
        return None;
    }
    let hb = hu.branch(cx.hub_schema(), &p.hub_path, &b.hub)?;
    let sb = su.branch(cx.spoke_schema(), &p.spoke_path, &b.spoke)?;
    let interior = |fs: &FlatSchema| !fs.root.is_leaf();
    if interior(&hb) && interior(&sb) {
        let Some(nested) = cx.compile_nested(&b.rules, &hb, &sb) else {
            cx.error(&[&b.hub, &b.spoke], format!("{field} ({} → {}): the branch's nested rules or fields do not compile; see the diagnostics of its rules", b.hub, b.spoke));
            return None;
        };
        verdict.hub_to_spoke &= nested.verdict.hub_to_spoke;
        verdict.spoke_to_hub &= nested.verdict.spoke_to_hub;
        return Some(BranchConvert::Nested(nested.plan));
    }
    if !b.rules.is_empty() {
        cx.error(
            &[&b.hub, &b.spoke],
            format!(
                "{field}: branch {} is a {} and {} a {}; nested rules need object branches on both sides",
                b.hub,
                hb.root.describe(),
                b.spoke,
                sb.root.describe()
            ),
        );
        return None;
    }
    match (node_fits(&hb.root, &sb.root), node_fits(&sb.root, &hb.root)) {
        (Err(a), Err(_)) => {
            cx.error(
                &[&b.hub, &b.spoke],
                format!("{field}: branch values differ ({a}); make both branches objects and map their fields with nested rules"),
            );
            return None;
        }
        (h2s, s2h) => {
            if let Err(e) = h2s {
                verdict.hub_to_spoke = false;
                lossy_because
                    .push((true, format!("hub branch {} does not fit spoke branch {}: {e}", b.hub, b.spoke)));
            }
            if let Err(e) = s2h {
                verdict.spoke_to_hub = false;
                lossy_because.push((
                    false,
                    format!("spoke branch {} does not fit hub branch {}: {e}", b.spoke, b.hub),
                ));
            }
        }
    }
    Some(BranchConvert::Copy)
}

#[derive(Debug)]
struct BranchOp {
    hub_union: Path,
    spoke_union: Path,
    opaque_hub: bool,
    opaque_spoke: bool,
    discriminator: Option<String>,
    pairs: Vec<PairOp>,
    /// Non-branch properties of a oneOf union, copied as they are.
    passthrough: Vec<String>,
}

impl BranchOp {
    fn run(&self, dir: Direction, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let (from, to, opaque_from, opaque_to) = match dir {
            Direction::HubToSpoke => (&self.hub_union, &self.spoke_union, self.opaque_hub, self.opaque_spoke),
            Direction::SpokeToHub => (&self.spoke_union, &self.hub_union, self.opaque_spoke, self.opaque_hub),
        };
        let Some(union) = value::get(src, from.segments()) else { return Ok(()) };
        if union.is_null() {
            if opaque_from || opaque_to {
                value::set(dst, to.segments(), union.clone()).map_err(|e| OpError::new(to, e.to_string()))?;
            }
            return Ok(());
        }
        let Some(obj) = union.as_object() else {
            return Err(OpError::new(
                from,
                format!("the union must be an object, found a {}", value::type_name(union)),
            ));
        };
        fn side_name(pair: &PairOp, dir: Direction) -> &str {
            match dir {
                Direction::HubToSpoke => pair.hub.as_str(),
                Direction::SpokeToHub => pair.spoke.as_str(),
            }
        }
        let name_of = |pair: &PairOp| side_name(pair, dir).to_string();
        // On the way back a collapsed spoke branch resolves to its first hub branch.
        let mut candidates: Vec<&PairOp> = Vec::new();
        for pair in &self.pairs {
            if !candidates.iter().any(|c| side_name(c, dir) == side_name(pair, dir)) {
                candidates.push(pair);
            }
        }
        let set: Vec<&PairOp> = candidates
            .iter()
            .copied()
            .filter(|pair| obj.get(&side_name(pair, dir)).is_some_and(|v| !v.is_null()))
            .collect();
        let names = || candidates.iter().map(|c| name_of(c)).collect::<Vec<_>>().join(", ");
        let pair = match set.as_slice() {
            [one] => *one,
            [] => {
                return Err(OpError::new(
                    from,
                    format!("no branch of the union is set; exactly one of {} must be", names()),
                ));
            }
            many => {
                return Err(OpError::new(
                    from,
                    format!(
                        "several branches of the union are set ({}); exactly one of {} may be",
                        many.iter().map(|c| name_of(c)).collect::<Vec<_>>().join(", "),
                        names()
                    ),
                ));
            }
        };
        let (src_name, dst_name, src_disc, dst_disc) = match dir {
            Direction::HubToSpoke => (&pair.hub, &pair.spoke, &pair.hub_disc, &pair.spoke_disc),
            Direction::SpokeToHub => (&pair.spoke, &pair.hub, &pair.spoke_disc, &pair.hub_disc),
        };
        let mut disc_out = None;
        if let Some(d) = &self.discriminator
            && let Some(v) = obj.get(d)
            && !v.is_null()
        {
            if v.as_str() != Some(src_disc.as_str()) {
                return Err(OpError::new(
                    from.child(d),
                    format!(
                        "the discriminator is {} but branch {src_name} is set (expected {src_disc:?})",
                        value::preview(v)
                    ),
                ));
            }
            disc_out = Some((d.as_str(), Value::from(dst_disc.as_str())));
        }
        let branch_src = obj.get(src_name).cloned().unwrap_or_default();
        let converted = match &pair.convert {
            BranchConvert::Copy => branch_src,
            BranchConvert::Nested(plan) => {
                let mut out = branch_src.clone();
                plan.run(dir, &branch_src, &mut out).map_err(|mut e| {
                    let base = from.child(src_name);
                    e.path = if e.path.is_empty() { base.dotted() } else { format!("{base}.{}", e.path) };
                    e
                })?;
                out
            }
        };
        let write = |dst: &mut Value, path: Path, v: Value| {
            value::set(dst, path.segments(), v).map_err(|e| OpError::new(&path, e.to_string()))
        };
        if opaque_to {
            let mut out = Value::new_object();
            if let Some(o) = out.as_object_mut() {
                for name in &self.passthrough {
                    if let Some(v) = obj.get(name) {
                        o.insert(name, v.clone());
                    }
                }
                o.insert(dst_name, converted);
                if let Some((d, v)) = disc_out {
                    o.insert(&d.to_string(), v);
                }
            }
            write(dst, to.clone(), out)
        } else {
            write(dst, to.child(dst_name), converted)?;
            if let Some((d, v)) = disc_out {
                write(dst, to.child(d), v)?;
            }
            Ok(())
        }
    }
}

impl RuleOp for BranchOp {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.run(Direction::HubToSpoke, src, dst)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.run(Direction::SpokeToHub, src, dst)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn store(branches: &[(&str, &str)], one_of: bool) -> serde_json::Value {
        let mut props = serde_json::Map::new();
        props.insert("backend".into(), json!({"type": "string"}));
        for (name, field) in branches {
            props.insert(
                (*name).into(),
                json!({"type": "object", "properties": {*field: {"type": "string"}}}),
            );
        }
        let mut s = json!({"type": "object", "properties": props});
        if one_of {
            s["oneOf"] =
                serde_json::Value::Array(branches.iter().map(|(n, _)| json!({"required": [n]})).collect());
        }
        obj_schema(json!({"store": s}))
    }

    fn rule(discriminator: bool) -> serde_json::Value {
        let rename = |h: &str, s: &str| json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": h, "spokePath": s}}]);
        let mut r = json!({"strategy": "BranchMap", "branchMap": {
        "hubPath": "spec.store", "spokePath": "spec.store",
        "branches": [
            {"hubBranch": "s3", "spokeBranch": "objectStore", "rules": rename("bucket", "name")},
            {"hub": "gcs", "spoke": "googleStore", "rules": rename("bucket", "name")}
        ]}});
        if discriminator {
            r["branchMap"]["discriminator"] = json!("backend");
        }
        r
    }

    fn pair(one_of: bool) -> (serde_json::Value, serde_json::Value) {
        (
            store(&[("s3", "bucket"), ("gcs", "bucket")], one_of),
            store(&[("objectStore", "name"), ("googleStore", "name")], one_of),
        )
    }

    #[test]
    fn maps_branches_with_discriminator_both_forms() {
        for one_of in [false, true] {
            let (hub, spoke) = pair(one_of);
            let plan = plan_for(&hub, &spoke, json!([rule(true)]));
            let h = hub_obj(json!({"store": {"backend": "s3", "s3": {"bucket": "logs"}}}));
            let s = plan.convert(&h, SPOKE_AV).unwrap();
            assert_eq!(
                s,
                spoke_obj(json!({"store": {"backend": "objectStore", "objectStore": {"name": "logs"}}})),
                "oneOf={one_of}"
            );
            assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
            let h = hub_obj(json!({"store": {"gcs": {"bucket": "b"}}}));
            let s = plan.convert(&h, SPOKE_AV).unwrap();
            assert_eq!(s, spoke_obj(json!({"store": {"googleStore": {"name": "b"}}})));
            assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        }
    }

    #[test]
    fn zero_or_several_branches_fail() {
        let (hub, spoke) = pair(true);
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        let err =
            plan.convert(&hub_obj(json!({"store": {"backend": "s3"}})), SPOKE_AV).unwrap_err().to_string();
        assert!(
            err.contains("spec.store: no branch of the union is set; exactly one of s3, gcs must be")
                && err.contains("(BranchMap)"),
            "{err}"
        );
        let err = plan
            .convert(&hub_obj(json!({"store": {"s3": {"bucket": "a"}, "gcs": {"bucket": "b"}}})), SPOKE_AV)
            .unwrap_err()
            .to_string();
        assert!(err.contains("several branches of the union are set (s3, gcs)"), "{err}");
        let err = plan
            .convert(
                &spoke_obj(json!({"store": {"objectStore": {"name": "a"}, "googleStore": {"name": "b"}}})),
                HUB_AV,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("several branches"), "{err}");
        let err = plan
            .convert(&hub_obj(json!({"store": {"backend": "gcs", "s3": {"bucket": "a"}}})), SPOKE_AV)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("spec.store.backend: the discriminator is \"gcs\" but branch s3 is set"),
            "{err}"
        );
        assert_eq!(plan.convert(&hub_obj(json!({})), SPOKE_AV).unwrap(), spoke_obj(json!({})));
    }

    #[test]
    fn nested_errors_carry_the_branch_path() {
        let hub = obj_schema(
            json!({"u": {"type": "object", "properties": {"a": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}),
        );
        let spoke = obj_schema(
            json!({"u": {"type": "object", "properties": {"b": {"type": "object", "properties": {"n": {"type": "string"}}}}}}),
        );
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "BranchMap", "branchMap": {"hubPath": "spec.u", "spokePath": "spec.u",
                "branches": [{"hub": "a", "spoke": "b", "rules": [{"strategy": "TypeCoerce", "typeCoerce": {"path": "n"}}]}]}}]),
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"u": {"a": {"n": 3}}})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"u": {"b": {"n": "3"}}}))
        );
        let err = plan.convert(&spoke_obj(json!({"u": {"b": {"n": "x"}}})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("rule 0.0 (TypeCoerce) spec.u.b.n"), "{err}");
    }

    #[test]
    fn collapsing_branches_is_lossy_back() {
        let hub = store(&[("s3", "bucket"), ("minio", "bucket")], false);
        let spoke = store(&[("objectStore", "bucket")], false);
        let mut r = json!({"strategy": "BranchMap", "branchMap": {"hubPath": "spec.store", "spokePath": "spec.store",
            "branches": [{"hub": "s3", "spoke": "objectStore"}, {"hub": "minio", "spoke": "objectStore"}]}});
        let c = compile_rules(&hub, &spoke, json!([r.clone()]));
        assert!(
            first_error(&c).contains(
                "rule is lossy (spoke→hub: spoke branch \"objectStore\" receives several hub branches"
            ),
            "{}",
            first_error(&c)
        );
        r["acknowledgeLossy"] = json!(true);
        r["reason"] = json!("minio is s3");
        let plan = plan_for(&hub, &spoke, json!([r]));
        let s = plan.convert(&hub_obj(json!({"store": {"minio": {"bucket": "x"}}})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"store": {"objectStore": {"bucket": "x"}}})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"store": {"s3": {"bucket": "x"}}})));
    }

    #[test]
    fn compile_errors() {
        let (hub, spoke) = pair(true);
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut r = rule(true);
            f(&mut r);
            all_errors(&compile_rules(&hub, &spoke, json!([r])))
        };
        assert!(
            with(&|r| r["branchMap"]["discriminator"] = json!("kind"))
                .contains("discriminator \"kind\" is not a property of the hub union")
        );
        assert!(
            with(&|r| r["branchMap"]["branches"][0]["hubBranch"] = json!("azure"))
                .contains("hub branch \"azure\" is not a property of the union")
        );
        assert!(
            with(&|r| {
                r["branchMap"]["branches"].as_array_mut().unwrap().pop();
            })
            .contains("hub branch \"gcs\" of the union is not mapped")
        );
        assert!(with(&|r| r["branchMap"]["branches"][1]["hub"] = json!("s3")).contains("is mapped twice"));
        assert!(with(&|r| r["branchMap"]["branches"] = json!([])).contains("branches is empty"));
        assert!(
            with(&|r| r["branchMap"]["hubPath"] = json!("spec.nope"))
                .contains("branchMap.hubPath: not in the schema")
        );
        let e = with(&|r| r["branchMap"]["branches"][0]["rules"] = json!([]));
        assert!(
            e.contains("branches[0] (s3 → objectStore): the branch's nested rules or fields do not compile"),
            "{e}"
        );
        let scalar_union = obj_schema(json!({"store": {"type": "string"}}));
        let e = all_errors(&compile_rules(&scalar_union, &spoke, json!([rule(false)])));
        assert!(e.contains("BranchMap needs an object whose properties are the branches"), "{e}");
        // A oneOf union's other properties are ordinary fields: one that differs between the
        // sides is reported like any other, for a rule to map it.
        let mut hub2 = hub.clone();
        hub2["properties"]["spec"]["properties"]["store"]["properties"]["retention"] =
            json!({"type": "integer"});
        let mut spoke2 = spoke.clone();
        spoke2["properties"]["spec"]["properties"]["store"]["properties"]["retention"] =
            json!({"type": "string"});
        let e = all_errors(&compile_rules(&hub2, &spoke2, json!([rule(true)])));
        assert!(e.contains("spec.store.retention: hub field differs between hub and spoke"), "{e}");
        let coerce = json!({"strategy": "TypeCoerce", "typeCoerce": {"path": "spec.store.retention"}});
        let e = all_errors(&compile_rules(&hub2, &spoke2, json!([rule(true), coerce])));
        assert!(e.is_empty(), "{e}");
    }

    /// A union declared with a required-only oneOf is an object rules reach: a rule renames a
    /// property of the union beside the BranchMap that maps its branches.
    #[test]
    fn a_rule_beside_the_branch_map_reaches_the_unions_other_properties() {
        let (mut hub, mut spoke) = pair(true);
        hub["properties"]["spec"]["properties"]["store"]["properties"]["retentionDays"] =
            json!({"type": "integer"});
        spoke["properties"]["spec"]["properties"]["store"]["properties"]["retention"] =
            json!({"type": "integer"});
        let rename = json!({"strategy": "FieldRename", "fieldRename": {
            "hubPath": "spec.store.retentionDays", "spokePath": "spec.store.retention"}});
        let plan = plan_for(&hub, &spoke, json!([rule(true), rename]));
        let h = hub_obj(json!({"store": {"s3": {"bucket": "x"}, "retentionDays": 7}}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s["spec"]["store"]["retention"], json!(7), "{s}");
        assert!(s["spec"]["store"].get("retentionDays").is_none(), "{s}");
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn one_of_passthrough_properties_are_copied() {
        let (mut hub, mut spoke) = pair(true);
        for s in [&mut hub, &mut spoke] {
            s["properties"]["spec"]["properties"]["store"]["properties"]["retention"] =
                json!({"type": "integer"});
        }
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        let h = hub_obj(json!({"store": {"retention": 7, "s3": {"bucket": "x"}}}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"store": {"retention": 7, "objectStore": {"name": "x"}}})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }
}
