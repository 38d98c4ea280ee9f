//! `convctl rehub --to VERSION`: a draft of the config with VERSION as its hub.
//!
//! 1. The old hub becomes a spoke whose rules are the inverse of VERSION's old rules
//!    (FieldRename's paths swapped, ToAnnotation → FromAnnotation, EnumRemap's pairs turned
//!    around, NumericScale's factor inverted…).
//! 2. Every other spoke is composed through VERSION's rules: a rule on a field VERSION renamed
//!    follows the rename; an EnumRemap on a field VERSION remapped gets the composed mapping; a
//!    field the spoke shared with the old hub unchanged gets VERSION's inverted rule.
//! 3. Whatever cannot be rewritten this way fails closed, naming the rule (a CEL or JSONPatch
//!    rule on a field VERSION changes, a TypeCoerce on a renamed field…): a draft that converts
//!    differently from the config it replaces is worse than none.
//!
//! The draft is compiled against the target with VERSION marked as its storage/referenceable
//! version (as it will be when the hub moves); one that does not compile is refused unless
//! `--allow-invalid`.

use clap::{Args, ValueEnum};
use dco_api::config::TargetKind;
use dco_api::rules::{
    ConversionRule, EnumValueMapping, FieldsToMapParams, FieldsToScalarParams, FromLabelParams,
    FromMetadataParams, MapToFieldsParams, ScalarToFieldsParams, Serialization, Side, SpokeVersionRules,
    ToMetadataParams,
};
use dco_engine::schema::FlatSchema;
use dco_engine::{Strategy, Target};
use serde_json::Value;

use crate::{CliError, Inputs, Loaded, load};

#[derive(Clone, Copy, ValueEnum)]
pub enum DraftFormat {
    Yaml,
    Json,
}

#[derive(Args)]
pub struct RehubArgs {
    #[command(flatten)]
    pub inputs: Inputs,
    /// The spoke version that becomes the hub.
    #[arg(long)]
    pub to: String,
    /// Print the draft even when it does not compile (the exit code is still 1).
    #[arg(long)]
    pub allow_invalid: bool,
    #[arg(short, long, value_enum, default_value_t = DraftFormat::Yaml)]
    pub output: DraftFormat,
}

/// Why a rule cannot be rewritten; the caller adds where it is.
type Why = String;

fn overlap(a: &str, b: &str) -> bool {
    a == b
        || a.strip_prefix(b).is_some_and(|r| r.starts_with('.'))
        || b.strip_prefix(a).is_some_and(|r| r.starts_with('.'))
}

fn pointer_to_dotted(p: &str) -> String {
    p.trim_start_matches('/')
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

/// The hub paths a rule reads or writes (conservative: CEL's and JSONPatch's on both sides).
fn hub_side(r: &ConversionRule) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: &String| out.push(s.clone());
    if let Some(p) = r
        .field_rename
        .as_ref()
        .or(r.singleton_array_to_object.as_ref())
        .or(r.object_to_singleton_array.as_ref())
        .or(r.quantity.as_ref())
        .or(r.duration.as_ref())
    {
        push(&p.hub_path);
    }
    if let Some(p) = r.scalar_to_object.as_ref().or(r.object_to_scalar.as_ref()) {
        push(&p.hub_path);
    }
    if let Some(p) = &r.fields_to_map {
        p.hub_paths.iter().for_each(&mut push);
    }
    if let Some(p) = &r.map_to_fields {
        push(&p.hub_map_path);
    }
    if let Some(p) = r.to_annotation.as_ref().or(r.to_label.as_ref()) {
        push(&p.hub_path);
    }
    if let Some(p) = &r.enum_remap {
        push(&p.path);
    }
    if let Some(p) = &r.type_coerce {
        push(&p.path);
    }
    for (path, side) in [
        r.default_value.as_ref().map(|p| (&p.path, p.exists_on)),
        r.constant.as_ref().map(|p| (&p.path, p.exists_on)),
        r.delete.as_ref().map(|p| (&p.path, p.exists_on)),
    ]
    .into_iter()
    .flatten()
    {
        if side == Side::Hub {
            push(path);
        }
    }
    if let Some(p) = &r.json_patch {
        for op in p.hub_to_spoke.iter().chain(&p.spoke_to_hub) {
            out.push(pointer_to_dotted(&op.path));
            if let Some(f) = &op.from {
                out.push(pointer_to_dotted(f));
            }
        }
    }
    if let Some(p) = &r.for_each {
        out.push(p.hub_items_path.clone());
    }
    if let Some(p) = &r.scalar_to_fields {
        out.push(p.hub_path.clone());
    }
    if let Some(p) = &r.fields_to_scalar {
        out.extend(p.hub_fields.values().cloned());
    }
    if let Some(p) = r.array_to_map_by_key.as_ref().or(r.map_to_array_by_key.as_ref()) {
        out.push(p.hub_path.clone());
    }
    if let Some(p) = &r.numeric_scale {
        out.push(p.hub_path.clone());
    }
    if let Some(p) = r.list_join.as_ref().or(r.list_split.as_ref()) {
        out.push(p.hub_path.clone());
    }
    if let Some(p) = &r.map_key_rename {
        out.push(p.hub_path.clone());
    }
    if let Some(p) = &r.cel {
        out.extend(p.hub_paths.iter().chain(&p.spoke_paths).cloned());
    }
    if let Some(p) = &r.branch_map {
        out.push(p.hub_path.clone());
    }
    if let Some(w) = &r.when {
        out.push(w.path.clone());
    }
    out
}

/// The rule's hub path fields, for following a rename; `None` when a rename cannot be
/// followed by rewriting paths (one path names both sides, or the rule is an expression).
fn hub_paths_mut(r: &mut ConversionRule) -> Option<Vec<&mut String>> {
    if r.when.is_some()
        || r.type_coerce.is_some()
        || r.enum_remap.is_some()
        || r.cel.is_some()
        || r.json_patch.is_some()
    {
        return None;
    }
    let mut out: Vec<&mut String> = Vec::new();
    for p in [
        &mut r.field_rename,
        &mut r.singleton_array_to_object,
        &mut r.object_to_singleton_array,
        &mut r.quantity,
        &mut r.duration,
    ]
    .into_iter()
    .flatten()
    {
        out.push(&mut p.hub_path);
    }
    for p in [&mut r.scalar_to_object, &mut r.object_to_scalar].into_iter().flatten() {
        out.push(&mut p.hub_path);
    }
    if let Some(p) = &mut r.fields_to_map {
        out.extend(p.hub_paths.iter_mut());
    }
    if let Some(p) = &mut r.map_to_fields {
        out.push(&mut p.hub_map_path);
    }
    for p in [&mut r.to_annotation, &mut r.to_label].into_iter().flatten() {
        out.push(&mut p.hub_path);
    }
    if let Some(p) = r.default_value.as_mut().filter(|p| p.exists_on == Side::Hub) {
        out.push(&mut p.path);
    }
    if let Some(p) = r.constant.as_mut().filter(|p| p.exists_on == Side::Hub) {
        out.push(&mut p.path);
    }
    if let Some(p) = r.delete.as_mut().filter(|p| p.exists_on == Side::Hub) {
        out.push(&mut p.path);
    }
    if let Some(p) = &mut r.for_each {
        out.push(&mut p.hub_items_path);
    }
    if let Some(p) = &mut r.scalar_to_fields {
        out.push(&mut p.hub_path);
    }
    if let Some(p) = &mut r.fields_to_scalar {
        out.extend(p.hub_fields.values_mut());
    }
    for p in [&mut r.array_to_map_by_key, &mut r.map_to_array_by_key].into_iter().flatten() {
        out.push(&mut p.hub_path);
    }
    if let Some(p) = &mut r.numeric_scale {
        out.push(&mut p.hub_path);
    }
    for p in [&mut r.list_join, &mut r.list_split].into_iter().flatten() {
        out.push(&mut p.hub_path);
    }
    if let Some(p) = &mut r.map_key_rename {
        out.push(&mut p.hub_path);
    }
    if let Some(p) = &mut r.branch_map {
        out.push(&mut p.hub_path);
    }
    Some(out)
}

fn swap_side(s: Side) -> Side {
    match s {
        Side::Hub => Side::Spoke,
        Side::Spoke => Side::Hub,
    }
}

fn invert_all(rules: &[ConversionRule]) -> Result<Vec<ConversionRule>, Why> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| invert(r).map_err(|w| format!("nested rule {i} ({}): {w}", name(r.strategy))))
        .collect()
}

/// The rule that converts the other way: what was its hub side is its spoke side.
pub fn invert(r: &ConversionRule) -> Result<ConversionRule, Why> {
    let mut out = ConversionRule::new(r.strategy);
    out.acknowledge_lossy = r.acknowledge_lossy;
    out.reason = r.reason.clone();
    if r.when.is_some() {
        // `when` reads the input, which is the other object once the sides swap.
        return Err(
            "its `when` reads the object being converted, which is the other version once the hub moves"
                .into(),
        );
    }
    let missing = || format!("the {} rule has no params block", name(r.strategy));
    use Strategy as S;
    match r.strategy {
        S::FieldRename | S::Quantity | S::Duration => {
            let p = r
                .field_rename
                .as_ref()
                .or(r.quantity.as_ref())
                .or(r.duration.as_ref())
                .ok_or_else(missing)?;
            let swapped =
                dco_api::rules::PathPair { hub_path: p.spoke_path.clone(), spoke_path: p.hub_path.clone() };
            match r.strategy {
                S::FieldRename => out.field_rename = Some(Box::new(swapped)),
                S::Quantity => out.quantity = Some(Box::new(swapped)),
                _ => out.duration = Some(Box::new(swapped)),
            }
        }
        S::SingletonArrayToObject | S::ObjectToSingletonArray => {
            let p = r
                .singleton_array_to_object
                .as_ref()
                .or(r.object_to_singleton_array.as_ref())
                .ok_or_else(missing)?;
            let swapped =
                dco_api::rules::PathPair { hub_path: p.spoke_path.clone(), spoke_path: p.hub_path.clone() };
            if r.strategy == S::SingletonArrayToObject {
                out.strategy = S::ObjectToSingletonArray;
                out.object_to_singleton_array = Some(Box::new(swapped));
            } else {
                out.strategy = S::SingletonArrayToObject;
                out.singleton_array_to_object = Some(Box::new(swapped));
            }
        }
        S::ScalarToObject | S::ObjectToScalar => {
            let p = r.scalar_to_object.as_ref().or(r.object_to_scalar.as_ref()).ok_or_else(missing)?;
            if !p.defaults_for_other_keys.is_empty() && r.strategy == S::ScalarToObject {
                return Err("defaultsForOtherKeys has no place in ObjectToScalar".into());
            }
            let mut q = p.clone();
            std::mem::swap(&mut q.hub_path, &mut q.spoke_path);
            if r.strategy == S::ScalarToObject {
                out.strategy = S::ObjectToScalar;
                out.object_to_scalar = Some(q);
            } else {
                out.strategy = S::ScalarToObject;
                out.scalar_to_object = Some(q);
            }
        }
        S::FieldsToMap => {
            let p = r.fields_to_map.as_ref().ok_or_else(missing)?;
            out.strategy = S::MapToFields;
            out.map_to_fields = Some(Box::new(MapToFieldsParams {
                hub_map_path: p.spoke_map_path.clone(),
                spoke_paths: p.hub_paths.clone(),
                key_names: p.key_names.clone(),
                on_unknown_hub_key: p.on_unknown_spoke_key,
            }));
        }
        S::MapToFields => {
            let p = r.map_to_fields.as_ref().ok_or_else(missing)?;
            out.strategy = S::FieldsToMap;
            out.fields_to_map = Some(Box::new(FieldsToMapParams {
                hub_paths: p.spoke_paths.clone(),
                spoke_map_path: p.hub_map_path.clone(),
                key_names: p.key_names.clone(),
                on_unknown_spoke_key: p.on_unknown_hub_key,
            }));
        }
        S::ToAnnotation | S::ToLabel => {
            let p = r.to_annotation.as_ref().or(r.to_label.as_ref()).ok_or_else(missing)?;
            if r.strategy == S::ToAnnotation {
                out.strategy = S::FromAnnotation;
                out.from_annotation = Some(Box::new(FromMetadataParams {
                    spoke_path: p.hub_path.clone(),
                    key: p.key.clone(),
                    serialization: p.serialization,
                    stash_on_reverse: p.restore_on_reverse,
                }));
            } else {
                if p.serialization == Serialization::Json {
                    return Err("ToLabel with serialization JSON has no FromLabel inverse (a JSON text is rarely a valid label value); set serialization: String first".into());
                }
                out.strategy = S::FromLabel;
                out.from_label = Some(Box::new(FromLabelParams {
                    spoke_path: p.hub_path.clone(),
                    key: p.key.clone(),
                    serialization: p.serialization,
                    stash_on_reverse: p.restore_on_reverse,
                }));
            }
        }
        S::FromAnnotation => {
            let p = r.from_annotation.as_ref().ok_or_else(missing)?;
            out.strategy = S::ToAnnotation;
            out.to_annotation = Some(Box::new(ToMetadataParams {
                hub_path: p.spoke_path.clone(),
                key: p.key.clone(),
                serialization: p.serialization,
                restore_on_reverse: p.stash_on_reverse,
            }));
        }
        S::FromLabel => {
            let p = r.from_label.as_ref().ok_or_else(missing)?;
            out.strategy = S::ToLabel;
            out.to_label = Some(Box::new(ToMetadataParams {
                hub_path: p.spoke_path.clone(),
                key: p.key.clone(),
                serialization: p.serialization,
                restore_on_reverse: p.stash_on_reverse,
            }));
        }
        S::EnumRemap => {
            let mut p = r.enum_remap.clone().ok_or_else(missing)?;
            for m in &mut p.mapping {
                std::mem::swap(&mut m.hub, &mut m.spoke);
            }
            std::mem::swap(&mut p.on_unmapped_hub_value, &mut p.on_unmapped_spoke_value);
            out.enum_remap = Some(p);
        }
        S::DefaultValue => {
            let mut p = r.default_value.clone().ok_or_else(missing)?;
            p.exists_on = swap_side(p.exists_on);
            out.default_value = Some(p);
        }
        S::Constant => {
            let mut p = r.constant.clone().ok_or_else(missing)?;
            p.exists_on = swap_side(p.exists_on);
            out.constant = Some(p);
        }
        S::Delete => {
            let mut p = r.delete.clone().ok_or_else(missing)?;
            p.exists_on = swap_side(p.exists_on);
            out.delete = Some(p);
        }
        S::JsonPatch => {
            let mut p = r.json_patch.clone().ok_or_else(missing)?;
            std::mem::swap(&mut p.hub_to_spoke, &mut p.spoke_to_hub);
            out.json_patch = Some(p);
        }
        S::Cel => {
            let mut p = r.cel.clone().ok_or_else(missing)?;
            std::mem::swap(&mut p.hub_paths, &mut p.spoke_paths);
            std::mem::swap(&mut p.hub_to_spoke, &mut p.spoke_to_hub);
            out.cel = Some(p);
        }
        S::TypeCoerce => out.type_coerce = r.type_coerce.clone(),
        S::ForEach => {
            let p = r.for_each.as_ref().ok_or_else(missing)?;
            let mut q = p.clone();
            std::mem::swap(&mut q.hub_items_path, &mut q.spoke_items_path);
            q.rules = invert_all(&p.rules)?;
            out.for_each = Some(q);
        }
        S::BranchMap => {
            let p = r.branch_map.as_ref().ok_or_else(missing)?;
            if p.discriminator.is_some()
                && p.branches.iter().any(|b| b.hub_discriminator_value != b.spoke_discriminator_value)
            {
                return Err(
                    "its branches name different discriminator values per side; swap them by hand".into()
                );
            }
            let mut q = p.clone();
            std::mem::swap(&mut q.hub_path, &mut q.spoke_path);
            for (b, orig) in q.branches.iter_mut().zip(&p.branches) {
                std::mem::swap(&mut b.hub, &mut b.spoke);
                std::mem::swap(&mut b.hub_discriminator_value, &mut b.spoke_discriminator_value);
                b.rules = invert_all(&orig.rules)?;
            }
            out.branch_map = Some(q);
        }
        S::ScalarToFields => {
            let p = r.scalar_to_fields.as_ref().ok_or_else(missing)?;
            out.strategy = S::FieldsToScalar;
            out.fields_to_scalar = Some(Box::new(FieldsToScalarParams {
                hub_fields: p.spoke_fields.clone(),
                pattern: p.pattern.clone(),
                spoke_path: p.hub_path.clone(),
                join_template: p.join_template.clone(),
                lossless_override: p.lossless_override,
            }));
        }
        S::FieldsToScalar => {
            let p = r.fields_to_scalar.as_ref().ok_or_else(missing)?;
            out.strategy = S::ScalarToFields;
            out.scalar_to_fields = Some(Box::new(ScalarToFieldsParams {
                hub_path: p.spoke_path.clone(),
                pattern: p.pattern.clone(),
                spoke_fields: p.hub_fields.clone(),
                join_template: p.join_template.clone(),
                lossless_override: p.lossless_override,
            }));
        }
        S::ArrayToMapByKey | S::MapToArrayByKey => {
            let p = r.array_to_map_by_key.as_ref().or(r.map_to_array_by_key.as_ref()).ok_or_else(missing)?;
            let mut q = p.clone();
            std::mem::swap(&mut q.hub_path, &mut q.spoke_path);
            if r.strategy == S::ArrayToMapByKey {
                out.strategy = S::MapToArrayByKey;
                out.map_to_array_by_key = Some(q);
            } else {
                out.strategy = S::ArrayToMapByKey;
                out.array_to_map_by_key = Some(q);
            }
        }
        S::NumericScale => {
            let p = r.numeric_scale.as_ref().ok_or_else(missing)?;
            if p.factor == 0.0 || !p.factor.is_finite() {
                return Err(format!("factor {} has no inverse", p.factor));
            }
            let mut q = p.clone();
            std::mem::swap(&mut q.hub_path, &mut q.spoke_path);
            q.factor = 1.0 / p.factor;
            out.numeric_scale = Some(q);
        }
        S::ListJoin | S::ListSplit => {
            let p = r.list_join.as_ref().or(r.list_split.as_ref()).ok_or_else(missing)?;
            let mut q = p.clone();
            std::mem::swap(&mut q.hub_path, &mut q.spoke_path);
            if r.strategy == S::ListJoin {
                out.strategy = S::ListSplit;
                out.list_split = Some(q);
            } else {
                out.strategy = S::ListJoin;
                out.list_join = Some(q);
            }
        }
        S::MapKeyRename => {
            let p = r.map_key_rename.as_ref().ok_or_else(missing)?;
            let mut q = p.clone();
            std::mem::swap(&mut q.hub_path, &mut q.spoke_path);
            q.renames = p.renames.iter().map(|(k, v)| (v.clone(), k.clone())).collect();
            out.map_key_rename = Some(q);
        }
    }
    Ok(out)
}

/// The strategy as a config spells it (`JSONPatch`, `CEL`).
fn name(s: Strategy) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{s:?}"))
}

fn label(version: &str, i: usize, r: &ConversionRule) -> String {
    format!("spoke {version}, rule {i} ({})", name(r.strategy))
}

/// An old-hub → new-hub rename of the promoted spoke: a FieldRename without `when`.
fn rename_of(r: &ConversionRule) -> Option<(&str, &str)> {
    match (&r.field_rename, &r.when) {
        (Some(p), None) => Some((&p.hub_path, &p.spoke_path)),
        _ => None,
    }
}

/// `s`'s EnumRemap composed with the promoted spoke's `n` on the same path: new hub value ↔
/// this spoke's value, through the old hub value.
fn compose_enum(s: &ConversionRule, n: &ConversionRule) -> Result<ConversionRule, Why> {
    let (Some(sp), Some(np)) = (&s.enum_remap, &n.enum_remap) else {
        return Err("not two EnumRemaps".into());
    };
    if sp.path != np.path || n.when.is_some() {
        return Err("the two EnumRemaps do not map the same field unconditionally".into());
    }
    let mut mapping = Vec::new();
    for m in &sp.mapping {
        let Some(new_hub) = np.mapping.iter().find(|x| x.hub == m.hub) else {
            return Err(format!("old hub value {} has no value at the new hub", m.hub));
        };
        mapping.push(EnumValueMapping { hub: new_hub.spoke.clone(), spoke: m.spoke.clone() });
    }
    let mut out = s.clone();
    if let Some(p) = out.enum_remap.as_mut() {
        p.mapping = mapping;
    }
    out.acknowledge_lossy = s.acknowledge_lossy || n.acknowledge_lossy;
    Ok(out)
}

/// Spoke `version`'s rules against the new hub.
fn compose(
    version: &str,
    rules: &[ConversionRule],
    promoted: &str,
    promoted_rules: &[ConversionRule],
    spoke: &FlatSchema,
) -> Result<Vec<ConversionRule>, CliError> {
    let fail = |what: String, k: usize, n: &ConversionRule, why: &str| {
        CliError::Failed(format!(
            "{what} cannot be rewritten against hub {promoted}: {}, which it uses, {why}; rewrite that rule by hand (or remove it and run convctl suggest on the draft)",
            label(promoted, k, n)
        ))
    };
    let mut out = Vec::new();
    for (i, s) in rules.iter().enumerate() {
        let hs = hub_side(s);
        let hits: Vec<(usize, &ConversionRule)> = promoted_rules
            .iter()
            .enumerate()
            .filter(|(_, n)| hub_side(n).iter().any(|p| hs.iter().any(|q| overlap(p, q))))
            .collect();
        let Some(&(k0, n0)) = hits.first() else {
            out.push(s.clone());
            continue;
        };
        if let [(k, n)] = hits.as_slice()
            && s.strategy == Strategy::EnumRemap
            && n.strategy == Strategy::EnumRemap
        {
            out.push(compose_enum(s, n).map_err(|w| fail(label(version, i, s), *k, n, &w))?);
            continue;
        }
        let mut r = s.clone();
        let Some(paths) = hub_paths_mut(&mut r) else {
            return Err(fail(
                label(version, i, s),
                k0,
                n0,
                "changes a field this rule reads by expression, condition or in place",
            ));
        };
        let mut paths = paths;
        for &(k, n) in &hits {
            let Some((from, to)) = rename_of(n) else {
                return Err(fail(
                    label(version, i, s),
                    k,
                    n,
                    "changes the field's value or shape, not only its name",
                ));
            };
            for p in paths.iter_mut() {
                if **p == from {
                    **p = to.to_string();
                } else if let Some(rest) = p.strip_prefix(from).filter(|r| r.starts_with('.')) {
                    **p = format!("{to}{rest}");
                } else if overlap(p, from) {
                    return Err(fail(
                        label(version, i, s),
                        k,
                        n,
                        "renames a field inside the one this rule maps whole",
                    ));
                }
            }
        }
        out.push(r);
    }
    // The promoted spoke's rules on fields this spoke shared unchanged with the old hub carry
    // over, turned around.
    for (k, n) in promoted_rules.iter().enumerate() {
        let hs = hub_side(n);
        if rules.iter().any(|s| hub_side(s).iter().any(|q| hs.iter().any(|p| overlap(p, q)))) {
            continue;
        }
        let one_sided_spoke = [
            n.default_value.as_ref().map(|p| (&p.path, p.exists_on)),
            n.constant.as_ref().map(|p| (&p.path, p.exists_on)),
            n.delete.as_ref().map(|p| (&p.path, p.exists_on)),
        ]
        .into_iter()
        .flatten()
        .find(|(_, side)| *side == Side::Spoke)
        .map(|(p, _)| p.clone());
        let lift = match one_sided_spoke {
            // A field only the promoted version has: the other spoke lacks it too.
            Some(p) => {
                spoke.get(&p).is_none() && !rules.iter().any(|s| hub_side(s).iter().any(|q| overlap(&p, q)))
            }
            None => {
                let present = hs.iter().filter(|p| spoke.get(p).is_some()).count();
                if present > 0 && matches!(n.strategy, Strategy::Cel | Strategy::JsonPatch) {
                    return Err(fail(
                        format!("spoke {version}"),
                        k,
                        n,
                        "is an expression over fields this spoke shares with the old hub, and rehub derives no field mapping from an expression",
                    ));
                }
                if present > 0 && present < hs.len() {
                    return Err(fail(
                        format!("spoke {version}"),
                        k,
                        n,
                        "maps fields this spoke has only some of",
                    ));
                }
                present > 0
            }
        };
        if lift {
            out.push(invert(n).map_err(|w| fail(format!("spoke {version}"), k, n, &w))?);
        }
    }
    Ok(out)
}

/// The target with `hub` as its only storage (CRD) or referenceable (XRD) version, as it will
/// be once the hub moves.
fn target_with_hub(path: &std::path::Path, kind: TargetKind, hub: &str) -> Result<Target, CliError> {
    let mut doc = load::documents(path)?
        .into_iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind.kind_name()))
        .ok_or_else(|| CliError::Usage(format!("{}: no {}", path.display(), kind.kind_name())))?;
    let flag = if kind == TargetKind::Xrd { "referenceable" } else { "storage" };
    if let Some(vs) = doc.pointer_mut("/spec/versions").and_then(Value::as_array_mut) {
        for v in vs {
            let is_hub = v.get("name").and_then(Value::as_str) == Some(hub);
            v[flag] = Value::Bool(is_hub);
        }
    }
    Target::from_value(&doc).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

/// The draft spec's spokes, or the rule that cannot be rewritten.
pub fn rehub_spokes(
    l: &Loaded,
    to: &str,
    target_with_new_hub: &Target,
) -> Result<Vec<SpokeVersionRules>, CliError> {
    let spec = &l.config.spec;
    let old_hub = &spec.hub_version;
    let Some(promoted) = spec.spokes.iter().find(|s| s.version == to) else {
        let have: Vec<&str> = spec.spokes.iter().map(|s| s.version.as_str()).collect();
        return Err(CliError::Usage(if to == old_hub {
            format!("--to {to} is already the hub of {}", l.config.name)
        } else {
            format!(
                "--to {to}: not a spoke of {} (spokes: {}); add it as a spoke first, then promote it",
                l.config.name,
                have.join(", ")
            )
        }));
    };
    let mut spokes = Vec::new();
    for s in &spec.spokes {
        if s.version == to {
            let mut rules = Vec::new();
            for (i, r) in promoted.rules.iter().enumerate() {
                rules.push(invert(r).map_err(|w| {
                    CliError::Failed(format!(
                        "{} cannot be turned around for hub {to}: {w}; rewrite it by hand",
                        label(to, i, r)
                    ))
                })?);
            }
            spokes.push(SpokeVersionRules { version: old_hub.clone(), rules });
        } else {
            let schema =
                target_with_new_hub.version(&s.version).map(|v| match target_with_new_hub.composite() {
                    Some(c) => FlatSchema::object(&c.strip(&v.schema)),
                    None => FlatSchema::object(&v.schema),
                });
            let schema = schema.ok_or_else(|| {
                CliError::Usage(format!("spoke {} is not a version of {}", s.version, l.target.name()))
            })?;
            spokes.push(SpokeVersionRules {
                version: s.version.clone(),
                rules: compose(&s.version, &s.rules, to, &promoted.rules, &schema)?,
            });
        }
    }
    Ok(spokes)
}

pub fn run(a: &RehubArgs) -> Result<(), CliError> {
    let l = a.inputs.load()?;
    let (path, kind) = match (&a.inputs.crd, &a.inputs.xrd) {
        (Some(p), None) => (p.clone(), TargetKind::Crd),
        (None, Some(p)) => (p.clone(), TargetKind::Xrd),
        _ => return Err(CliError::Usage("give exactly one of --crd or --xrd".into())),
    };
    let target = target_with_hub(&path, kind, &a.to)?;
    let spokes = rehub_spokes(&l, &a.to, &target)?;
    let mut spec = l.config.spec.clone();
    spec.hub_version = a.to.clone();
    spec.spokes = spokes;
    let compiled = dco_engine::compile(&spec, &target);
    let errors: Vec<String> = compiled.report.errors().map(|d| d.to_string()).collect();
    // The config as written, with only the hub and the spokes replaced.
    let mut doc = load::documents(&a.inputs.config)?
        .into_iter()
        .find(|d| {
            matches!(
                d.get("kind").and_then(Value::as_str),
                Some("XRDConversionConfig" | "CRDConversionConfig")
            )
        })
        .ok_or_else(|| CliError::Usage(format!("{}: no config", a.inputs.config.display())))?;
    if let Some(o) = doc.as_object_mut() {
        o.remove("status");
    }
    doc["spec"]["hubVersion"] = Value::String(spec.hub_version.clone());
    doc["spec"]["spokes"] = serde_json::to_value(&spec.spokes).unwrap_or_default();
    let valid = compiled.plan.is_some();
    if valid {
        eprintln!(
            "convctl: the draft compiles against {} with {} as its {} version ({} warning(s)); review it, then run convctl validate and test",
            target.name(),
            a.to,
            if kind == TargetKind::Xrd { "referenceable" } else { "storage" },
            compiled.report.warnings().count()
        );
    } else {
        for e in &errors {
            eprintln!("error: {e}");
        }
        if !a.allow_invalid {
            return Err(CliError::Failed(format!(
                "the draft with hub {} does not compile: {} error(s); pass --allow-invalid to print it anyway",
                a.to,
                errors.len()
            )));
        }
    }
    let text = match a.output {
        DraftFormat::Json => serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n",
        DraftFormat::Yaml => serde_yaml::to_string(&doc).unwrap_or_default(),
    };
    crate::emit(&text);
    if valid {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "the draft with hub {} does not compile ({} error(s))",
            a.to,
            errors.len()
        )))
    }
}
