//! `XRDConversionConfig` and `CRDConversionConfig`: one target each, the same rules and status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rules::{SpokeVersionRules, Strategy};

/// Names the target by `metadata.name` (`<plural>.<group>`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TargetRef {
    pub name: String,
}

/// Names a ConversionWebhookServer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookServerRef {
    pub name: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UnmappedFieldPolicy {
    #[default]
    Error,
    Warn,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DriftPolicy {
    /// Keep serving the last good plan and mark the config Stale.
    #[default]
    KeepServingStale,
    /// Stop serving as soon as the live schema no longer validates.
    FailClosed,
}

fn default_review_versions() -> Vec<String> {
    vec!["v1".to_string()]
}

/// The conversion itself: everything but the target, shared by both config kinds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversionSpec {
    /// The target's storage (CRD) or referenceable (XRD) version.
    pub hub_version: String,
    #[schemars(length(min = 1, max = 64))]
    pub spokes: Vec<SpokeVersionRules>,
    /// Pin the target to this server; otherwise the pool or the default serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_server_ref: Option<WebhookServerRef>,
    #[serde(default = "default_review_versions")]
    pub conversion_review_versions: Vec<String>,
    #[serde(default)]
    pub unmapped_field_policy: UnmappedFieldPolicy,
    /// Why leaving fields unmapped is acceptable; required with `unmappedFieldPolicy: Warn`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unmapped_field_reason: String,
    #[serde(default)]
    pub drift_policy: DriftPolicy,
}

/// Declares one config kind. The two kinds differ only in the field naming their target, and
/// must stay identical otherwise (columns, CEL rules, status), so one definition makes both.
macro_rules! config_kind {
    ($(#[$doc:meta])* $spec:ident, $kind:literal, $short:literal, $target_col:literal, $selectable:literal, $field:ident, $json:literal) => {
        $(#[$doc])*
        #[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[kube(
            group = "conversion.dco.rs",
            version = "v1alpha1",
            kind = $kind,
            shortname = $short,
            category = "dco",
            status = "ConfigStatus",
            printcolumn = $target_col,
            // The target's name is a field selector (KEP-4358), so "the configs naming this
            // target" is a small LIST, not every config (operator/src/config/conflict.rs).
            selectable = $selectable,
            printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
            printcolumn = r#"{"name":"Server","type":"string","jsonPath":".status.assignedWebhookServer"}"#,
            printcolumn = r#"{"name":"Handover","type":"string","jsonPath":".status.handover.state"}"#,
            printcolumn = r#"{"name":"Lossless","type":"boolean","jsonPath":".status.overallLossless"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
        )]
        #[serde(rename_all = "camelCase")]
        #[schemars(transform = crate::schema::warn_needs_reason)]
        pub struct $spec {
            #[serde(rename = $json)]
            pub $field: TargetRef,
            #[serde(flatten)]
            pub conversion: ConversionSpec,
        }
    };
}

config_kind!(
    /// Converts a Crossplane CompositeResourceDefinition between its versions.
    XRDConversionConfigSpec,
    "XRDConversionConfig",
    "xcc",
    r#"{"name":"Target","type":"string","jsonPath":".spec.targetXRD.name"}"#,
    ".spec.targetXRD.name",
    target_xrd,
    "targetXRD"
);

config_kind!(
    /// Converts a native CustomResourceDefinition between its versions.
    CRDConversionConfigSpec,
    "CRDConversionConfig",
    "ccc",
    r#"{"name":"Target","type":"string","jsonPath":".spec.targetCRD.name"}"#,
    ".spec.targetCRD.name",
    target_crd,
    "targetCRD"
);

/// Which kind of object a config targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TargetKind {
    /// `apiextensions.crossplane.io/v1` CompositeResourceDefinition.
    Xrd,
    /// `apiextensions.k8s.io/v1` CustomResourceDefinition.
    Crd,
}

/// What both config kinds have in common, so the resolver, the engine and the webhook can
/// treat them alike.
pub trait ConversionConfig {
    /// The config's own kind, for messages and metric labels without allocating.
    const KIND: &'static str;
    /// The field selector path of the target's name (a `selectableFields` entry of the CRD).
    const TARGET_FIELD: &'static str;
    fn target_kind(&self) -> TargetKind;
    fn target_name(&self) -> &str;
    fn conversion(&self) -> &ConversionSpec;
    /// `status.handover`, if the operator wrote one.
    fn handover(&self) -> Option<&HandoverStatus>;
    /// Where the status puts the target (`status.assignedWebhookServer`, the handover's ends).
    fn placement(&self) -> crate::placement::Placement;
}

impl ConversionConfig for XRDConversionConfig {
    const KIND: &'static str = "XRDConversionConfig";
    const TARGET_FIELD: &'static str = "spec.targetXRD.name";
    fn target_kind(&self) -> TargetKind {
        TargetKind::Xrd
    }
    fn target_name(&self) -> &str {
        &self.spec.target_xrd.name
    }
    fn conversion(&self) -> &ConversionSpec {
        &self.spec.conversion
    }
    fn handover(&self) -> Option<&HandoverStatus> {
        self.status.as_ref()?.handover.as_ref()
    }
    fn placement(&self) -> crate::placement::Placement {
        crate::placement::Placement::of(self.status.as_ref())
    }
}

impl ConversionConfig for CRDConversionConfig {
    const KIND: &'static str = "CRDConversionConfig";
    const TARGET_FIELD: &'static str = "spec.targetCRD.name";
    fn target_kind(&self) -> TargetKind {
        TargetKind::Crd
    }
    fn target_name(&self) -> &str {
        &self.spec.target_crd.name
    }
    fn conversion(&self) -> &ConversionSpec {
        &self.spec.conversion
    }
    fn handover(&self) -> Option<&HandoverStatus> {
        self.status.as_ref()?.handover.as_ref()
    }
    fn placement(&self) -> crate::placement::Placement {
        crate::placement::Placement::of(self.status.as_ref())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    #[default]
    Pending,
    Validating,
    Validated,
    Invalid,
    Applied,
    Stale,
    Reverting,
    Failed,
}

/// Whether a mapping loses nothing, per direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LosslessVerdict {
    pub hub_to_spoke: bool,
    pub spoke_to_hub: bool,
}

/// The compile outcome of one rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleResult {
    #[schemars(transform = crate::schema::unsigned)]
    pub index: u32,
    pub strategy: Strategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hub_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spoke_paths: Vec<String>,
    /// Named `lossless` in status, as in the reference; it is the rule's verdict.
    #[serde(rename = "lossless")]
    pub verdict: LosslessVerdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The compile outcome of one spoke.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpokeStatus {
    pub version: String,
    pub lossless: LosslessVerdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields_uncovered_hub: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields_uncovered_spoke: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_results: Vec<RuleResult>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

// How a move runs: `docs/operations.md`, "How a target is wired and moved".
/// The states of a move of a target between webhook servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum HandoverState {
    #[default]
    Unassigned,
    Compiling,
    DestinationReady,
    Patched,
    SourceDropped,
}

/// The persisted handover state machine of one config.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoverStatus {
    pub state: HandoverState,
    /// The server the target's `spec.conversion` names when the move began, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// When the current state was entered (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// How many times this move has been (re)started.
    #[serde(default)]
    #[schemars(transform = crate::schema::unsigned)]
    pub attempt: u32,
    /// W3C traceparent of the move, so a move is one trace across restarts and replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The move proceeded without served-target Leases to prove a step (HandoverUnverified).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unverified: bool,
}

/// Status of both config kinds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_target_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_webhook_server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overall_lossless: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spoke_statuses: Vec<SpokeStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_plan_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<HandoverStatus>,
    /// XRD targets only: the CRDs Crossplane generated from the XRD, the only objects whose
    /// `spec.conversion` the apiserver reads, and whether each carries dco's wiring
    /// (condition `ConversionPropagated`).
    #[serde(default, rename = "generatedCRDs", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub generated_crds: Vec<GeneratedCrd>,
    /// XRD targets only: the times another writer (a Crossplane package manager, a person)
    /// reverted the wiring dco had applied to the XRD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverts: Option<RevertStatus>,
}

/// Which of an XRD's generated CRDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum GeneratedRole {
    /// The composite resource's CRD, named as the XRD.
    Composite,
    /// The claim's CRD (`<claimNames.plural>.<group>`), for an XRD with `claimNames`.
    Claim,
}

/// One CRD Crossplane generated from an XRD target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratedCrd {
    pub name: String,
    pub role: GeneratedRole,
    /// Its `spec.conversion` is exactly the wiring dco set on the XRD.
    pub propagated: bool,
    /// Why not, when it is not: missing, another strategy, another Service, a stale caBundle…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Reverts of an XRD's wiring by another writer, as dco detected them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevertStatus {
    #[schemars(transform = crate::schema::unsigned)]
    pub count: u32,
    /// When the last one was detected (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_detected: Option<String>,
    /// The field manager that wrote the XRD's `spec.conversion` last time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_writer: Option<String>,
    /// What that writer changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<String>,
}
