//! ScalarToFields: one hub string splits into several spoke fields by a regular expression
//! with named groups; the spoke fields join back into the string by a `{{.name}}` template.
//! FieldsToScalar (its mirror) reuses the [`Splitter`] and [`Joiner`] defined here.
//!
//! Verdict (rules.md): lossless only with `losslessOverride: true` — the engine cannot prove
//! that the pattern and the template are inverses; `convctl test` proves it on samples.

use std::collections::BTreeMap;

use dco_api::rules::{FractionalInteger, Params, Strategy};

use super::type_coerce::{coerce, number_text};
use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{Node, ScalarType};
use crate::template::{JoinTemplate, Pattern, TemplateError};
use crate::value::{self, JsonValueTrait, Path, Value};

pub struct ScalarToFields;

/// The scalar side: one text field.
#[derive(Debug)]
pub(crate) struct Scalar {
    pub path: Path,
}

/// The fields side: one typed field per named group.
#[derive(Debug)]
pub(crate) struct Field {
    pub group: String,
    pub path: Path,
    pub ty: ScalarType,
}

/// Splits the scalar into the fields.
#[derive(Debug)]
pub(crate) struct Splitter {
    pub pattern: Pattern,
    pub scalar: Scalar,
    pub fields: Vec<Field>,
}

/// Joins the fields into the scalar.
#[derive(Debug)]
pub(crate) struct Joiner {
    pub template: JoinTemplate,
    pub scalar: Scalar,
    pub fields: Vec<Field>,
}

/// Which side of the rule a path belongs to.
#[derive(Clone, Copy)]
pub(crate) enum SideOf {
    Hub,
    Spoke,
}

/// Compiles the shared parts of ScalarToFields and FieldsToScalar. `block` is the params
/// field name, `scalar_side`/`fields_side` say where the scalar and the fields live.
#[allow(clippy::too_many_arguments)]
pub(crate) fn compile_split_join(
    cx: &mut RuleCx<'_>,
    block: &str,
    scalar_field: &str,
    scalar_path: &str,
    scalar_side: SideOf,
    fields_field: &str,
    fields: &BTreeMap<String, String>,
    pattern: &str,
    join_template: &str,
    lossless_override: bool,
) -> Option<(Splitter, Joiner, CompiledRule)> {
    let fields_side = match scalar_side {
        SideOf::Hub => SideOf::Spoke,
        SideOf::Spoke => SideOf::Hub,
    };
    let scalar = resolve(cx, scalar_side, &format!("{block}.{scalar_field}"), scalar_path);
    let compiled_pattern = match Pattern::compile(pattern) {
        Ok(p) => Some(p),
        Err(e) => {
            cx.error(&[], format!("{block}.pattern: {e}"));
            None
        }
    };
    let template = match JoinTemplate::parse(join_template) {
        Ok(t) => Some(t),
        Err(e) => {
            cx.error(&[], format!("{block}.joinTemplate: {e}"));
            None
        }
    };
    if fields.is_empty() {
        cx.error(
            &[],
            format!("{block}.{fields_field} is empty; map each named group of the pattern to a field"),
        );
        return None;
    }
    let mut typed = Vec::new();
    for (group, path) in fields {
        let Some((p, node)) = resolve(cx, fields_side, &format!("{block}.{fields_field}.{group}"), path)
        else {
            continue;
        };
        match scalar_type(node) {
            Some(ty) => typed.push(Field { group: group.clone(), path: p, ty }),
            None => cx.error(
                &[path],
                format!(
                    "{block}.{fields_field}.{group}: groups fill scalar fields only, not {}",
                    node.describe()
                ),
            ),
        }
    }
    let (scalar_path_p, scalar_node) = scalar?;
    match scalar_node.scalar().map(|s| s.ty) {
        Some(ScalarType::String | ScalarType::IntOrString) => {}
        _ => {
            cx.error(
                &[scalar_path],
                format!(
                    "{block}.{scalar_field}: the joined value is text, so the field must be a string, not {}",
                    scalar_node.describe()
                ),
            );
            return None;
        }
    }
    let (pattern, template) = (compiled_pattern?, template?);
    for group in fields.keys() {
        if !pattern.groups().contains(group) {
            cx.error(
                &[],
                format!(
                    "{block}.{fields_field} maps group {group:?} but the pattern has no such named group (it has {})",
                    pattern.groups().iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
    }
    for name in template.placeholders() {
        if !fields.contains_key(name) {
            cx.error(
                &[],
                format!("{block}.joinTemplate uses {{{{.{name}}}}} but {block}.{fields_field} has no field for group {name:?}; map it or remove it from the template"),
            );
        }
    }
    for group in pattern.groups() {
        if !fields.contains_key(group) && !template.placeholders().contains(&group.as_str()) {
            cx.warn(
                &[],
                format!(
                    "group {group:?} is captured but neither mapped to a field nor used in the join template"
                ),
            );
        }
    }
    for group in fields.keys() {
        if !template.placeholders().contains(&group.as_str()) {
            cx.warn(&[], format!("group {group:?} is mapped but the join template does not use it; its field does not come back when joining"));
        }
    }
    if cx.has_errors() {
        return None;
    }
    let field_paths: Vec<Path> = typed.iter().map(|f| f.path.clone()).collect();
    let (hub_claims, spoke_claims) = match scalar_side {
        SideOf::Hub => (vec![scalar_path_p.clone()], field_paths),
        SideOf::Spoke => (field_paths, vec![scalar_path_p.clone()]),
    };
    let splitter = Splitter {
        pattern,
        scalar: Scalar { path: scalar_path_p.clone() },
        fields: typed
            .iter()
            .map(|f| Field { group: f.group.clone(), path: f.path.clone(), ty: f.ty })
            .collect(),
    };
    let joiner = Joiner { template, scalar: Scalar { path: scalar_path_p }, fields: typed };
    let mut compiled = CompiledRule::new(hub_claims, spoke_claims, LOSSLESS, Box::new(NoOp));
    if !lossless_override {
        let why = "the engine cannot prove the pattern and the join template are inverses; prove it with convctl test and set losslessOverride: true";
        compiled = compiled.lossy(true, why).lossy(false, why);
    }
    Some((splitter, joiner, compiled))
}

fn resolve<'a>(cx: &mut RuleCx<'a>, side: SideOf, field: &str, path: &str) -> Option<(Path, &'a Node)> {
    match side {
        SideOf::Hub => cx.hub_node(field, path),
        SideOf::Spoke => cx.spoke_node(field, path),
    }
}

fn scalar_type(n: &Node) -> Option<ScalarType> {
    n.scalar().map(|s| s.ty)
}

/// Placeholder op replaced by the caller.
#[derive(Debug)]
struct NoOp;

impl RuleOp for NoOp {
    fn hub_to_spoke(&self, _: &Value, _: &mut Value) -> Result<(), OpError> {
        Ok(())
    }
    fn spoke_to_hub(&self, _: &Value, _: &mut Value) -> Result<(), OpError> {
        Ok(())
    }
}

impl Splitter {
    /// Reads the scalar from `src` and writes the fields into `dst`.
    pub fn run(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let at = &self.scalar.path;
        let Some(v) = value::get(src, at.segments()) else { return Ok(()) };
        if v.is_null() {
            return Ok(());
        }
        let text = if let Some(s) = v.as_str() {
            s.to_string()
        } else if v.is_number() {
            number_text(v)
        } else {
            return Err(OpError::new(at, format!("expected text to split, found a {}", value::type_name(v))));
        };
        let parts = self.pattern.split(&text).map_err(|e| OpError::new(at, e.to_string()))?;
        for f in &self.fields {
            let Some(part) = parts.get(&f.group) else { continue };
            let typed = coerce(&Value::from(part.as_str()), f.ty, FractionalInteger::Error)
                .map_err(|m| OpError::new(&f.path, format!("group {:?} captured {part:?}: {m}", f.group)))?;
            value::set(dst, f.path.segments(), typed).map_err(|e| OpError::new(&f.path, e.to_string()))?;
        }
        Ok(())
    }
}

impl Joiner {
    /// Reads the fields from `src` and writes the joined scalar into `dst`. Nothing is written
    /// when none of the fields is set.
    pub fn run(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let mut values: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
        for f in &self.fields {
            if let Some(v) = value::get(src, f.path.segments())
                && !v.is_null()
            {
                values.insert(f.group.as_str(), value::to_serde(v));
            }
        }
        if values.is_empty() {
            return Ok(());
        }
        let at = &self.scalar.path;
        let text = self.template.render(|name| values.get(name)).map_err(|e| {
            // Name the field whose value is missing or unusable.
            let group = match &e {
                TemplateError::MissingValue(name) | TemplateError::NotScalar { name, .. } => {
                    Some(name.as_str())
                }
                _ => None,
            };
            let field = group.and_then(|g| self.fields.iter().find(|f| f.group == g));
            OpError::new(field.map_or(at, |f| &f.path), e.to_string())
        })?;
        value::set(dst, at.segments(), Value::from(text.as_str()))
            .map_err(|e| OpError::new(at, e.to_string()))
    }
}

impl StrategyImpl for ScalarToFields {
    fn strategy(&self) -> Strategy {
        Strategy::ScalarToFields
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ScalarToFields(p)) = cx.rule().params() else { return None };
        let (splitter, joiner, mut compiled) = compile_split_join(
            cx,
            "scalarToFields",
            "hubPath",
            &p.hub_path,
            SideOf::Hub,
            "spokeFields",
            &p.spoke_fields,
            &p.pattern,
            &p.join_template,
            p.lossless_override,
        )?;
        compiled.op = Box::new(Split { splitter, joiner });
        Some(compiled)
    }
}

/// Hub scalar → spoke fields (split); spoke fields → hub scalar (join).
#[derive(Debug)]
struct Split {
    splitter: Splitter,
    joiner: Joiner,
}

impl RuleOp for Split {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.splitter.run(src, dst)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.joiner.run(src, dst)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({"diskSize": {"type": "string"}})),
            obj_schema(json!({"diskSizeValue": {"type": "integer"}, "diskSizeUnit": {"type": "string"}})),
        )
    }

    fn rule(extra: serde_json::Value) -> serde_json::Value {
        let mut r = json!({"strategy": "ScalarToFields", "scalarToFields": {
            "hubPath": "spec.diskSize",
            "pattern": "^(?P<value>\\d+)(?P<unit>[A-Za-z]+)$",
            "spokeFields": {"value": "spec.diskSizeValue", "unit": "spec.diskSizeUnit"},
            "joinTemplate": "{{.value}}{{.unit}}",
            "losslessOverride": true}});
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                r["scalarToFields"][k] = v.clone();
            }
        }
        r
    }

    #[test]
    fn splits_and_joins() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(json!({}))]));
        let h = hub_obj(json!({"diskSize": "50Gi"}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"diskSizeValue": 50, "diskSizeUnit": "Gi"})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        assert_eq!(plan.convert(&hub_obj(json!({})), SPOKE_AV).unwrap(), spoke_obj(json!({})));
        assert_eq!(plan.convert(&spoke_obj(json!({})), HUB_AV).unwrap(), hub_obj(json!({})));
    }

    #[test]
    fn runtime_errors() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(json!({}))]));
        let err = plan.convert(&hub_obj(json!({"diskSize": "Gi50"})), SPOKE_AV).unwrap_err().to_string();
        assert!(
            err.contains("spec.diskSize")
                && err.contains("does not match pattern")
                && err.contains("(ScalarToFields)"),
            "{err}"
        );
        let err = plan.convert(&spoke_obj(json!({"diskSizeValue": 50})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("spec.diskSizeUnit") && err.contains("missing"), "{err}");
    }

    #[test]
    fn lossy_without_override() {
        let (hub, spoke) = schemas();
        let c = compile_rules(&hub, &spoke, json!([rule(json!({"losslessOverride": false}))]));
        let err = first_error(&c);
        assert!(err.contains("rule is lossy") && err.contains("losslessOverride"), "{err}");
    }

    #[test]
    fn compile_errors() {
        let (hub, spoke) = schemas();
        for (extra, needle) in [
            (json!({"pattern": "(unclosed"}), "scalarToFields.pattern: pattern"),
            (json!({"pattern": "^(\\d+)$"}), "has no named groups"),
            (
                json!({"joinTemplate": "{{.value}}{{.size}}"}),
                "uses {{.size}} but scalarToFields.spokeFields has no field",
            ),
            (json!({"joinTemplate": "{{if .value}}x{{end}}"}), "only {{.name}} placeholders"),
            (
                json!({"spokeFields": {"value": "spec.diskSizeValue", "unit": "spec.diskSizeUnit", "extra": "spec.diskSizeUnit"}}),
                "maps group \"extra\" but the pattern has no such named group",
            ),
            (
                json!({"spokeFields": {"value": "spec.nope", "unit": "spec.diskSizeUnit"}}),
                "scalarToFields.spokeFields.value: not in the schema",
            ),
            (json!({"spokeFields": {}}), "spokeFields is empty"),
            (json!({"hubPath": "spec.missing"}), "scalarToFields.hubPath: not in the schema"),
        ] {
            let c = compile_rules(&hub, &spoke, json!([rule(extra.clone())]));
            let all = all_errors(&c);
            assert!(all.contains(needle), "{extra}: {all}");
        }
        let c = compile_rules(
            &obj_schema(json!({"n": {"type": "integer"}})),
            &spoke,
            json!([rule(json!({"hubPath": "spec.n"}))]),
        );
        assert!(all_errors(&c).contains("must be a string"), "{}", all_errors(&c));
    }

    #[test]
    fn unused_groups_warn() {
        let (hub, spoke) = schemas();
        let c = compile_rules(
            &hub,
            &spoke,
            json!([rule(json!({"pattern": "^(?P<value>\\d+)(?P<unit>[A-Za-z]+)(?P<rest>.*)$"}))]),
        );
        assert!(c.report.warnings().any(|d| d.message.contains("\"rest\" is captured but neither mapped")));
    }
}
