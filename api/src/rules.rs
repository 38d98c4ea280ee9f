//! The rule language (`docs/strategies.md`): a rule is a discriminated union selected
//! by `strategy`, with exactly one params block whose field name is the strategy's name in
//! lowerCamelCase. Field names match the reference project so configs move over unchanged.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::{any_value, opaque_rules};

/// Every strategy the engine knows. The CRD enum, the params-block CEL checks and the
/// documentation are all generated from this list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum Strategy {
    FieldRename,
    ScalarToObject,
    ObjectToScalar,
    SingletonArrayToObject,
    ObjectToSingletonArray,
    FieldsToMap,
    MapToFields,
    ToAnnotation,
    ToLabel,
    FromAnnotation,
    FromLabel,
    EnumRemap,
    DefaultValue,
    Constant,
    Delete,
    #[serde(rename = "JSONPatch")]
    JsonPatch,
    ForEach,
    TypeCoerce,
    ScalarToFields,
    FieldsToScalar,
    ArrayToMapByKey,
    MapToArrayByKey,
    NumericScale,
    ListJoin,
    ListSplit,
    Quantity,
    Duration,
    MapKeyRename,
    #[serde(rename = "CEL")]
    Cel,
    BranchMap,
}

impl Strategy {
    pub const ALL: [Strategy; 30] = [
        Strategy::FieldRename,
        Strategy::ScalarToObject,
        Strategy::ObjectToScalar,
        Strategy::SingletonArrayToObject,
        Strategy::ObjectToSingletonArray,
        Strategy::FieldsToMap,
        Strategy::MapToFields,
        Strategy::ToAnnotation,
        Strategy::ToLabel,
        Strategy::FromAnnotation,
        Strategy::FromLabel,
        Strategy::EnumRemap,
        Strategy::DefaultValue,
        Strategy::Constant,
        Strategy::Delete,
        Strategy::JsonPatch,
        Strategy::ForEach,
        Strategy::TypeCoerce,
        Strategy::ScalarToFields,
        Strategy::FieldsToScalar,
        Strategy::ArrayToMapByKey,
        Strategy::MapToArrayByKey,
        Strategy::NumericScale,
        Strategy::ListJoin,
        Strategy::ListSplit,
        Strategy::Quantity,
        Strategy::Duration,
        Strategy::MapKeyRename,
        Strategy::Cel,
        Strategy::BranchMap,
    ];

    /// The name users write in `strategy:`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::FieldRename => "FieldRename",
            Strategy::ScalarToObject => "ScalarToObject",
            Strategy::ObjectToScalar => "ObjectToScalar",
            Strategy::SingletonArrayToObject => "SingletonArrayToObject",
            Strategy::ObjectToSingletonArray => "ObjectToSingletonArray",
            Strategy::FieldsToMap => "FieldsToMap",
            Strategy::MapToFields => "MapToFields",
            Strategy::ToAnnotation => "ToAnnotation",
            Strategy::ToLabel => "ToLabel",
            Strategy::FromAnnotation => "FromAnnotation",
            Strategy::FromLabel => "FromLabel",
            Strategy::EnumRemap => "EnumRemap",
            Strategy::DefaultValue => "DefaultValue",
            Strategy::Constant => "Constant",
            Strategy::Delete => "Delete",
            Strategy::JsonPatch => "JSONPatch",
            Strategy::ForEach => "ForEach",
            Strategy::TypeCoerce => "TypeCoerce",
            Strategy::ScalarToFields => "ScalarToFields",
            Strategy::FieldsToScalar => "FieldsToScalar",
            Strategy::ArrayToMapByKey => "ArrayToMapByKey",
            Strategy::MapToArrayByKey => "MapToArrayByKey",
            Strategy::NumericScale => "NumericScale",
            Strategy::ListJoin => "ListJoin",
            Strategy::ListSplit => "ListSplit",
            Strategy::Quantity => "Quantity",
            Strategy::Duration => "Duration",
            Strategy::MapKeyRename => "MapKeyRename",
            Strategy::Cel => "CEL",
            Strategy::BranchMap => "BranchMap",
        }
    }

    /// The field that holds this strategy's params block.
    pub fn params_field(self) -> &'static str {
        match self {
            Strategy::FieldRename => "fieldRename",
            Strategy::ScalarToObject => "scalarToObject",
            Strategy::ObjectToScalar => "objectToScalar",
            Strategy::SingletonArrayToObject => "singletonArrayToObject",
            Strategy::ObjectToSingletonArray => "objectToSingletonArray",
            Strategy::FieldsToMap => "fieldsToMap",
            Strategy::MapToFields => "mapToFields",
            Strategy::ToAnnotation => "toAnnotation",
            Strategy::ToLabel => "toLabel",
            Strategy::FromAnnotation => "fromAnnotation",
            Strategy::FromLabel => "fromLabel",
            Strategy::EnumRemap => "enumRemap",
            Strategy::DefaultValue => "defaultValue",
            Strategy::Constant => "constant",
            Strategy::Delete => "delete",
            Strategy::JsonPatch => "jsonPatch",
            Strategy::ForEach => "forEach",
            Strategy::TypeCoerce => "typeCoerce",
            Strategy::ScalarToFields => "scalarToFields",
            Strategy::FieldsToScalar => "fieldsToScalar",
            Strategy::ArrayToMapByKey => "arrayToMapByKey",
            Strategy::MapToArrayByKey => "mapToArrayByKey",
            Strategy::NumericScale => "numericScale",
            Strategy::ListJoin => "listJoin",
            Strategy::ListSplit => "listSplit",
            Strategy::Quantity => "quantity",
            Strategy::Duration => "duration",
            Strategy::MapKeyRename => "mapKeyRename",
            Strategy::Cel => "cel",
            Strategy::BranchMap => "branchMap",
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which side of a hub⇄spoke pair a field lives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Side {
    Hub,
    Spoke,
}

/// What to do with a key or value a mapping does not declare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UnknownKeyPolicy {
    #[default]
    Error,
    Drop,
}

/// How a value is written into an annotation or label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Serialization {
    #[default]
    #[serde(rename = "JSON")]
    Json,
    String,
}

/// What TypeCoerce does with a fractional number written into an integer field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FractionalInteger {
    #[default]
    Error,
    Truncate,
    Round,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PathPair {
    pub hub_path: String,
    pub spoke_path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalarObjectParams {
    pub hub_path: String,
    pub spoke_path: String,
    /// The key of the object that holds the scalar.
    pub key: String,
    /// Values for the object's other keys when the object is built from the scalar.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::any_map")]
    pub defaults_for_other_keys: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldsToMapParams {
    pub hub_paths: Vec<String>,
    pub spoke_map_path: String,
    /// Map key for each hub path; the default is the path's last segment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_names: BTreeMap<String, String>,
    #[serde(default)]
    pub on_unknown_spoke_key: UnknownKeyPolicy,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MapToFieldsParams {
    pub hub_map_path: String,
    pub spoke_paths: Vec<String>,
    /// Map key for each spoke path; the default is the path's last segment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_names: BTreeMap<String, String>,
    #[serde(default)]
    pub on_unknown_hub_key: UnknownKeyPolicy,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToMetadataParams {
    pub hub_path: String,
    /// The annotation or label key on the spoke object.
    pub key: String,
    #[serde(default)]
    pub serialization: Serialization,
    /// Read the value back from the spoke's metadata when converting to the hub.
    #[serde(default)]
    pub restore_on_reverse: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FromMetadataParams {
    pub spoke_path: String,
    /// The annotation or label key on the hub object.
    pub key: String,
    #[serde(default)]
    pub serialization: Serialization,
    /// Stash the spoke field into the hub's metadata when converting to the spoke.
    #[serde(default)]
    pub stash_on_reverse: bool,
}

impl Serialization {
    fn string() -> Serialization {
        Serialization::String
    }
}

/// FromLabel's parameters: FromAnnotation's, except that `serialization` defaults to String,
/// since a JSON text is rarely a valid label value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FromLabelParams {
    pub spoke_path: String,
    /// The label key on the hub object.
    pub key: String,
    #[serde(default = "Serialization::string")]
    pub serialization: Serialization,
    /// Stash the spoke field into the hub's labels when converting to the spoke.
    #[serde(default)]
    pub stash_on_reverse: bool,
}

impl Default for FromLabelParams {
    fn default() -> Self {
        FromLabelParams {
            spoke_path: String::new(),
            key: String::new(),
            serialization: Serialization::String,
            stash_on_reverse: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EnumValueMapping {
    #[schemars(schema_with = "any_value")]
    pub hub: Value,
    #[schemars(schema_with = "any_value")]
    pub spoke: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnumRemapParams {
    pub path: String,
    pub mapping: Vec<EnumValueMapping>,
    #[serde(default)]
    pub on_unmapped_hub_value: UnknownKeyPolicy,
    #[serde(default)]
    pub on_unmapped_spoke_value: UnknownKeyPolicy,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultValueParams {
    pub path: String,
    pub exists_on: Side,
    #[schemars(schema_with = "any_value")]
    pub default: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConstantParams {
    pub path: String,
    pub exists_on: Side,
    #[schemars(schema_with = "any_value")]
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteParams {
    pub path: String,
    pub exists_on: Side,
}

/// One RFC 6902 operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatchOp {
    pub op: PatchOp,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_value_opt")]
    pub value: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PatchOp {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatchParams {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hub_to_spoke: Vec<JsonPatchOp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spoke_to_hub: Vec<JsonPatchOp>,
    #[serde(default)]
    pub lossless_override: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForEachParams {
    pub hub_items_path: String,
    pub spoke_items_path: String,
    /// Item-relative rules. Stored opaquely in the CRD schema (it cannot be recursive);
    /// the engine and the admission webhook validate them.
    #[schemars(schema_with = "opaque_rules")]
    pub rules: Vec<ConversionRule>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypeCoerceParams {
    pub path: String,
    #[serde(default)]
    pub on_fractional_integer: FractionalInteger,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalarToFieldsParams {
    pub hub_path: String,
    /// A regular expression with named groups, e.g. `^(?P<value>\d+)(?P<unit>[A-Za-z]+)$`.
    pub pattern: String,
    /// Spoke path for each named group.
    pub spoke_fields: BTreeMap<String, String>,
    /// Rebuilds the scalar from the groups, e.g. `{{.value}}{{.unit}}`.
    pub join_template: String,
    #[serde(default)]
    pub lossless_override: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldsToScalarParams {
    /// Hub path for each named group.
    pub hub_fields: BTreeMap<String, String>,
    pub pattern: String,
    pub spoke_path: String,
    pub join_template: String,
    #[serde(default)]
    pub lossless_override: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyedParams {
    pub hub_path: String,
    pub spoke_path: String,
    /// The item field whose (unique) value becomes the map key.
    pub key_field: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumericScaleParams {
    pub hub_path: String,
    pub spoke_path: String,
    /// hubValue = spokeValue × factor.
    pub factor: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    pub hub_path: String,
    pub spoke_path: String,
    pub separator: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MapKeyRenameParams {
    pub hub_path: String,
    pub spoke_path: String,
    /// hub key → spoke key; must be injective.
    pub renames: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CelParams {
    /// Hub leaves this rule claims.
    pub hub_paths: Vec<String>,
    /// Spoke leaves this rule claims.
    pub spoke_paths: Vec<String>,
    /// An expression over `object` (the hub) returning a map of spoke path → value.
    pub hub_to_spoke: String,
    /// An expression over `object` (the spoke) returning a map of hub path → value.
    pub spoke_to_hub: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchMapParams {
    /// The union field on the hub (a `oneOf` node or an object whose properties are the branches).
    pub hub_path: String,
    /// The union field on the spoke.
    pub spoke_path: String,
    /// Optional field, relative to the union, that names the branch in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discriminator: Option<String>,
    pub branches: Vec<Branch>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = branch_spellings)]
pub struct Branch {
    /// Branch key under the hub union (`hubBranch` is accepted too, as the reference spells it).
    #[serde(alias = "hubBranch")]
    pub hub: String,
    /// Branch key under the spoke union (`spokeBranch` is accepted too).
    #[serde(alias = "spokeBranch")]
    pub spoke: String,
    /// The hub discriminator's value for this branch; defaults to the hub branch key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_discriminator_value: Option<String>,
    /// The spoke discriminator's value for this branch; defaults to the spoke branch key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spoke_discriminator_value: Option<String>,
    /// Branch-relative rules, stored opaquely like ForEach's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "opaque_rules")]
    pub rules: Vec<ConversionRule>,
}

/// The CRD schema of a branch declares the reference's spellings `hubBranch`/`spokeBranch`
/// beside `hub`/`spoke` (serde reads either), so a config written the reference's way passes
/// the apiserver as it passes convctl; CEL rules require exactly one spelling of each.
fn branch_spellings(schema: &mut schemars::Schema) {
    for (key, alias) in [("hub", "hubBranch"), ("spoke", "spokeBranch")] {
        if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            let mut s = props.get(key).cloned().unwrap_or_else(|| serde_json::json!({"type": "string"}));
            if let Some(o) = s.as_object_mut() {
                o.insert(
                    "description".into(),
                    format!("The reference project's spelling of `{key}`.").into(),
                );
            }
            props.insert(alias.into(), s);
        }
        if let Some(req) = schema.get_mut("required").and_then(Value::as_array_mut) {
            req.retain(|r| r != key);
        }
        let rule = serde_json::json!({
            "rule": format!("has(self.{key}) != has(self.{alias})"),
            "message": format!("a branch names its {key} key once: set `{key}` (or `{alias}`, the reference's spelling), not both and not neither"),
        });
        match schema.get_mut("x-kubernetes-validations").and_then(Value::as_array_mut) {
            Some(list) => list.push(rule),
            None => {
                schema.insert("x-kubernetes-validations".into(), Value::Array(vec![rule]));
            }
        }
    }
    if schema.get("required").and_then(Value::as_array).is_some_and(Vec::is_empty) {
        schema.remove("required");
    }
}

/// Apply a rule only when the input's `path` equals `equals`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuleWhen {
    pub path: String,
    #[schemars(schema_with = "any_value")]
    pub equals: Value,
}

/// One declarative rule between the hub and a spoke.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::params_block_validations)]
pub struct ConversionRule {
    pub strategy: Strategy,
    // The 30 params blocks are boxed: a rule sets one, and every config a replica or the
    // operator watches keeps its rules (unboxed, a rule was ~2 KB, most of it empty blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_rename: Option<Box<PathPair>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalar_to_object: Option<Box<ScalarObjectParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_to_scalar: Option<Box<ScalarObjectParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub singleton_array_to_object: Option<Box<PathPair>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_to_singleton_array: Option<Box<PathPair>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields_to_map: Option<Box<FieldsToMapParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_to_fields: Option<Box<MapToFieldsParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_annotation: Option<Box<ToMetadataParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_label: Option<Box<ToMetadataParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_annotation: Option<Box<FromMetadataParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_label: Option<Box<FromLabelParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enum_remap: Option<Box<EnumRemapParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_value: Option<Box<DefaultValueParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constant: Option<Box<ConstantParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<Box<DeleteParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_patch: Option<Box<JsonPatchParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_each: Option<Box<ForEachParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_coerce: Option<Box<TypeCoerceParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalar_to_fields: Option<Box<ScalarToFieldsParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields_to_scalar: Option<Box<FieldsToScalarParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_to_map_by_key: Option<Box<KeyedParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_to_array_by_key: Option<Box<KeyedParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numeric_scale: Option<Box<NumericScaleParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_join: Option<Box<ListParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_split: Option<Box<ListParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<Box<PathPair>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Box<PathPair>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_key_rename: Option<Box<MapKeyRenameParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<Box<CelParams>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_map: Option<Box<BranchMapParams>>,

    /// Must be true when the rule is lossy in a direction.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub acknowledge_lossy: bool,
    /// Why the loss is acceptable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<RuleWhen>,
}

/// The params block of a rule, typed. Borrowed from the rule so callers match once.
#[derive(Clone, Copy, Debug)]
pub enum Params<'a> {
    FieldRename(&'a PathPair),
    ScalarToObject(&'a ScalarObjectParams),
    ObjectToScalar(&'a ScalarObjectParams),
    SingletonArrayToObject(&'a PathPair),
    ObjectToSingletonArray(&'a PathPair),
    FieldsToMap(&'a FieldsToMapParams),
    MapToFields(&'a MapToFieldsParams),
    ToAnnotation(&'a ToMetadataParams),
    ToLabel(&'a ToMetadataParams),
    FromAnnotation(&'a FromMetadataParams),
    FromLabel(&'a FromLabelParams),
    EnumRemap(&'a EnumRemapParams),
    DefaultValue(&'a DefaultValueParams),
    Constant(&'a ConstantParams),
    Delete(&'a DeleteParams),
    JsonPatch(&'a JsonPatchParams),
    ForEach(&'a ForEachParams),
    TypeCoerce(&'a TypeCoerceParams),
    ScalarToFields(&'a ScalarToFieldsParams),
    FieldsToScalar(&'a FieldsToScalarParams),
    ArrayToMapByKey(&'a KeyedParams),
    MapToArrayByKey(&'a KeyedParams),
    NumericScale(&'a NumericScaleParams),
    ListJoin(&'a ListParams),
    ListSplit(&'a ListParams),
    Quantity(&'a PathPair),
    Duration(&'a PathPair),
    MapKeyRename(&'a MapKeyRenameParams),
    Cel(&'a CelParams),
    BranchMap(&'a BranchMapParams),
}

/// Why a rule's params do not select exactly one block.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error("strategy {strategy} needs its params block `{field}`")]
    MissingBlock { strategy: Strategy, field: &'static str },
    #[error("params block `{field}` does not belong to strategy {strategy}; remove it")]
    ExtraBlock { strategy: Strategy, field: &'static str },
}

impl ConversionRule {
    /// A rule with `strategy` and no params block; fill the block with struct update syntax.
    pub fn new(strategy: Strategy) -> Self {
        ConversionRule {
            strategy,
            field_rename: None,
            scalar_to_object: None,
            object_to_scalar: None,
            singleton_array_to_object: None,
            object_to_singleton_array: None,
            fields_to_map: None,
            map_to_fields: None,
            to_annotation: None,
            to_label: None,
            from_annotation: None,
            from_label: None,
            enum_remap: None,
            default_value: None,
            constant: None,
            delete: None,
            json_patch: None,
            for_each: None,
            type_coerce: None,
            scalar_to_fields: None,
            fields_to_scalar: None,
            array_to_map_by_key: None,
            map_to_array_by_key: None,
            numeric_scale: None,
            list_join: None,
            list_split: None,
            quantity: None,
            duration: None,
            map_key_rename: None,
            cel: None,
            branch_map: None,
            acknowledge_lossy: false,
            reason: String::new(),
            when: None,
        }
    }

    fn block_set(&self, s: Strategy) -> bool {
        match s {
            Strategy::FieldRename => self.field_rename.is_some(),
            Strategy::ScalarToObject => self.scalar_to_object.is_some(),
            Strategy::ObjectToScalar => self.object_to_scalar.is_some(),
            Strategy::SingletonArrayToObject => self.singleton_array_to_object.is_some(),
            Strategy::ObjectToSingletonArray => self.object_to_singleton_array.is_some(),
            Strategy::FieldsToMap => self.fields_to_map.is_some(),
            Strategy::MapToFields => self.map_to_fields.is_some(),
            Strategy::ToAnnotation => self.to_annotation.is_some(),
            Strategy::ToLabel => self.to_label.is_some(),
            Strategy::FromAnnotation => self.from_annotation.is_some(),
            Strategy::FromLabel => self.from_label.is_some(),
            Strategy::EnumRemap => self.enum_remap.is_some(),
            Strategy::DefaultValue => self.default_value.is_some(),
            Strategy::Constant => self.constant.is_some(),
            Strategy::Delete => self.delete.is_some(),
            Strategy::JsonPatch => self.json_patch.is_some(),
            Strategy::ForEach => self.for_each.is_some(),
            Strategy::TypeCoerce => self.type_coerce.is_some(),
            Strategy::ScalarToFields => self.scalar_to_fields.is_some(),
            Strategy::FieldsToScalar => self.fields_to_scalar.is_some(),
            Strategy::ArrayToMapByKey => self.array_to_map_by_key.is_some(),
            Strategy::MapToArrayByKey => self.map_to_array_by_key.is_some(),
            Strategy::NumericScale => self.numeric_scale.is_some(),
            Strategy::ListJoin => self.list_join.is_some(),
            Strategy::ListSplit => self.list_split.is_some(),
            Strategy::Quantity => self.quantity.is_some(),
            Strategy::Duration => self.duration.is_some(),
            Strategy::MapKeyRename => self.map_key_rename.is_some(),
            Strategy::Cel => self.cel.is_some(),
            Strategy::BranchMap => self.branch_map.is_some(),
        }
    }

    /// The one params block `strategy` selects, or why there is not exactly one.
    pub fn params(&self) -> Result<Params<'_>, ParamsError> {
        let strategy = self.strategy;
        if let Some(extra) = Strategy::ALL.into_iter().find(|s| *s != strategy && self.block_set(*s)) {
            return Err(ParamsError::ExtraBlock { strategy, field: extra.params_field() });
        }
        let missing = ParamsError::MissingBlock { strategy, field: strategy.params_field() };
        let p = match strategy {
            Strategy::FieldRename => self.field_rename.as_deref().map(Params::FieldRename),
            Strategy::ScalarToObject => self.scalar_to_object.as_deref().map(Params::ScalarToObject),
            Strategy::ObjectToScalar => self.object_to_scalar.as_deref().map(Params::ObjectToScalar),
            Strategy::SingletonArrayToObject => {
                self.singleton_array_to_object.as_deref().map(Params::SingletonArrayToObject)
            }
            Strategy::ObjectToSingletonArray => {
                self.object_to_singleton_array.as_deref().map(Params::ObjectToSingletonArray)
            }
            Strategy::FieldsToMap => self.fields_to_map.as_deref().map(Params::FieldsToMap),
            Strategy::MapToFields => self.map_to_fields.as_deref().map(Params::MapToFields),
            Strategy::ToAnnotation => self.to_annotation.as_deref().map(Params::ToAnnotation),
            Strategy::ToLabel => self.to_label.as_deref().map(Params::ToLabel),
            Strategy::FromAnnotation => self.from_annotation.as_deref().map(Params::FromAnnotation),
            Strategy::FromLabel => self.from_label.as_deref().map(Params::FromLabel),
            Strategy::EnumRemap => self.enum_remap.as_deref().map(Params::EnumRemap),
            Strategy::DefaultValue => self.default_value.as_deref().map(Params::DefaultValue),
            Strategy::Constant => self.constant.as_deref().map(Params::Constant),
            Strategy::Delete => self.delete.as_deref().map(Params::Delete),
            Strategy::JsonPatch => self.json_patch.as_deref().map(Params::JsonPatch),
            Strategy::ForEach => self.for_each.as_deref().map(Params::ForEach),
            Strategy::TypeCoerce => self.type_coerce.as_deref().map(Params::TypeCoerce),
            Strategy::ScalarToFields => self.scalar_to_fields.as_deref().map(Params::ScalarToFields),
            Strategy::FieldsToScalar => self.fields_to_scalar.as_deref().map(Params::FieldsToScalar),
            Strategy::ArrayToMapByKey => self.array_to_map_by_key.as_deref().map(Params::ArrayToMapByKey),
            Strategy::MapToArrayByKey => self.map_to_array_by_key.as_deref().map(Params::MapToArrayByKey),
            Strategy::NumericScale => self.numeric_scale.as_deref().map(Params::NumericScale),
            Strategy::ListJoin => self.list_join.as_deref().map(Params::ListJoin),
            Strategy::ListSplit => self.list_split.as_deref().map(Params::ListSplit),
            Strategy::Quantity => self.quantity.as_deref().map(Params::Quantity),
            Strategy::Duration => self.duration.as_deref().map(Params::Duration),
            Strategy::MapKeyRename => self.map_key_rename.as_deref().map(Params::MapKeyRename),
            Strategy::Cel => self.cel.as_deref().map(Params::Cel),
            Strategy::BranchMap => self.branch_map.as_deref().map(Params::BranchMap),
        };
        p.ok_or(missing)
    }
}

/// Every rule declared for one spoke version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpokeVersionRules {
    pub version: String,
    #[serde(default)]
    #[schemars(length(max = 512))]
    pub rules: Vec<ConversionRule>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_keeps_its_params_blocks_boxed() {
        // Every watched config holds its rules in the operator's and each replica's caches:
        // a params block added unboxed grows every rule by its size.
        let size = std::mem::size_of::<ConversionRule>();
        assert!(size <= 400, "ConversionRule is {size} bytes: box its new params block");
    }

    fn rule(v: serde_json::Value) -> ConversionRule {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn from_label_serialization_defaults_to_string_and_the_others_to_json() {
        let r = rule(
            serde_json::json!({"strategy": "FromLabel", "fromLabel": {"spokePath": "spec.tier", "key": "tier"}}),
        );
        assert_eq!(r.from_label.unwrap().serialization, Serialization::String);
        let r = rule(
            serde_json::json!({"strategy": "FromAnnotation", "fromAnnotation": {"spokePath": "spec.tier", "key": "tier"}}),
        );
        assert_eq!(r.from_annotation.unwrap().serialization, Serialization::Json);
        for block in ["toLabel", "toAnnotation"] {
            let r = rule(
                serde_json::json!({"strategy": if block == "toLabel" { "ToLabel" } else { "ToAnnotation" },
                block: {"hubPath": "spec.tier", "key": "tier"}}),
            );
            let p = r.to_label.or(r.to_annotation).unwrap();
            assert_eq!(p.serialization, Serialization::Json, "{block}");
        }
        // Written explicitly, it stays what was written.
        let r = rule(serde_json::json!({"strategy": "FromLabel",
            "fromLabel": {"spokePath": "spec.tier", "key": "tier", "serialization": "JSON"}}));
        assert_eq!(r.from_label.unwrap().serialization, Serialization::Json);
    }

    #[test]
    fn a_branch_reads_either_spelling_and_the_crd_declares_both() {
        let a: Branch = serde_json::from_value(serde_json::json!({"hub": "s3", "spoke": "obj"})).unwrap();
        let b: Branch =
            serde_json::from_value(serde_json::json!({"hubBranch": "s3", "spokeBranch": "obj"})).unwrap();
        assert_eq!(a, b);
        // Both spellings at once is no branch serde can read, and the CEL rule says so too.
        assert!(
            serde_json::from_value::<Branch>(
                serde_json::json!({"hub": "s3", "hubBranch": "s3", "spoke": "o"})
            )
            .is_err()
        );
        let crds = serde_json::to_value(crate::crds()).unwrap();
        let mut found = 0;
        for crd in crds.as_array().unwrap() {
            for v in crd["spec"]["versions"].as_array().unwrap() {
                let Some(branch) = v.pointer(
                    "/schema/openAPIV3Schema/properties/spec/properties/spokes/items/properties/rules/items/properties/branchMap/properties/branches/items",
                ) else {
                    continue;
                };
                for key in ["hub", "spoke", "hubBranch", "spokeBranch"] {
                    assert_eq!(branch["properties"][key]["type"], "string", "{key}");
                }
                assert!(branch.get("required").is_none(), "{branch}");
                let rules: Vec<&str> = branch["x-kubernetes-validations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["rule"].as_str())
                    .collect();
                assert_eq!(
                    rules,
                    ["has(self.hub) != has(self.hubBranch)", "has(self.spoke) != has(self.spokeBranch)"]
                );
                found += 1;
            }
        }
        assert_eq!(found, 2, "both config kinds");
    }

    #[test]
    fn the_crd_schema_defaults_from_label_to_string() {
        // The apiserver applies the schema's default before any of dco's code reads the
        // config, so the schema must say String too.
        let crds = serde_json::to_value(crate::crds()).unwrap();
        let text = crds.to_string();
        let mut found = 0;
        for crd in crds.as_array().unwrap() {
            for v in crd["spec"]["versions"].as_array().unwrap() {
                let props = v.pointer("/schema/openAPIV3Schema/properties/spec/properties/spokes/items/properties/rules/items/properties");
                let Some(props) = props else { continue };
                assert_eq!(
                    props["fromLabel"]["properties"]["serialization"]["default"], "String",
                    "{text:.200}"
                );
                assert_eq!(props["fromAnnotation"]["properties"]["serialization"]["default"], "JSON");
                assert_eq!(props["toLabel"]["properties"]["serialization"]["default"], "JSON");
                found += 1;
            }
        }
        assert_eq!(found, 2, "both config kinds");
    }
}
