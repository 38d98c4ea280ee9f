//! `ConversionWebhookServer`: a deployable, independently scaled webhook server instance.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, ResourceRequirements, Toleration, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_replicas() -> i32 {
    2
}

/// A webhook server instance. At most one is `default`; instances with `sharding.enabled`
/// form the pool that targets are spread over.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "conversion.dco.rs",
    version = "v1alpha1",
    kind = "ConversionWebhookServer",
    shortname = "cws",
    category = "dco",
    status = "ServerStatus",
    printcolumn = r#"{"name":"Default","type":"boolean","jsonPath":".spec.default"}"#,
    printcolumn = r#"{"name":"Pool","type":"boolean","jsonPath":".spec.sharding.enabled"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ConversionWebhookServerSpec {
    /// Serve targets whose config names no server and that no pool member wins.
    #[serde(default)]
    pub default: bool,
    /// Where the Deployment, Service and friends live; the operator's namespace if empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Extra flags for dco-webhook; flags the operator manages are refused at admission.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volumes: Vec<Volume>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volume_mounts: Vec<VolumeMount>,
    /// Narrow what the webhook replicas cache (configs and targets) by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_selector: Option<LabelSelector>,
    /// cert-manager issues the serving certificate; without it the operator manages a CA
    /// and leaf in a Secret itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<ShardingSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::min_within_max)]
pub struct AutoscalingSpec {
    #[schemars(range(min = 1))]
    pub min_replicas: i32,
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    #[serde(default, rename = "targetCPUUtilizationPercentage", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub target_cpu_utilization_percentage: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Pins the image by digest (`sha256:<64 hex>`): the Pods run `<repository>@<digest>` and
    /// the tag is ignored; without `repository`, the operator's `--webhook-image` repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]+([+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$"))]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateSpec {
    pub issuer_ref: IssuerRef,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_names: Vec<String>,
    /// Go duration, e.g. `2160h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<String>,
}

/// cert-manager's own issuers' API group, the default of `issuerRef.group`.
pub const CERT_MANAGER_GROUP: &str = "cert-manager.io";

fn default_issuer_kind() -> String {
    "ClusterIssuer".into()
}

/// The issuer that signs the server's certificate: cert-manager's `Issuer`/`ClusterIssuer`, or
/// an external issuer's kind with its `group` (e.g. `awspca.cert-manager.io`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerRef {
    pub name: String,
    /// `Issuer` or `ClusterIssuer` in cert-manager's group; an external issuer's kind with
    /// its `group`.
    #[serde(default = "default_issuer_kind")]
    #[schemars(regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
    /// The issuer's API group (default `cert-manager.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"))]
    pub group: Option<String>,
}

impl Default for IssuerRef {
    fn default() -> Self {
        IssuerRef { name: String::new(), kind: default_issuer_kind(), group: None }
    }
}

impl IssuerRef {
    /// The group cert-manager reads: `group`, or cert-manager's own.
    pub fn group(&self) -> &str {
        self.group.as_deref().filter(|g| !g.is_empty()).unwrap_or(CERT_MANAGER_GROUP)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

fn default_port() -> i32 {
    443
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec { type_: ServiceType::ClusterIP, port: default_port(), annotations: BTreeMap::new() }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

fn default_weight() -> u32 {
    1
}

/// Membership in the pool and the share of targets this instance should win.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardingSpec {
    #[serde(default)]
    pub enabled: bool,
    /// Relative share of the pool's targets; an instance of weight 2 wins twice as many.
    #[serde(default = "default_weight")]
    #[schemars(range(min = 1, max = 1000), transform = crate::schema::unsigned)]
    pub weight: u32,
}

impl Default for ShardingSpec {
    fn default() -> Self {
        ShardingSpec { enabled: false, weight: default_weight() }
    }
}

/// A config the resolver assigns to this instance (desired, not proof of serving).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignedConfig {
    /// `XRDConversionConfig` or `CRDConversionConfig`.
    pub kind: String,
    pub name: String,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assigned_configs: Vec<AssignedConfig>,
    /// Targets every live replica reports serving (the intersection of their Leases).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served_targets: Vec<String>,
    /// How many live replicas published a served-target Lease.
    #[serde(default)]
    pub reporting_replicas: i32,
    /// A replica's set was too large to publish: `servedTargets` cannot be trusted.
    #[serde(default)]
    pub served_targets_truncated: bool,
}

impl ConversionWebhookServer {
    /// The pool weight, if this instance is in the pool.
    pub fn pool_weight(&self) -> Option<u32> {
        self.spec.sharding.as_ref().filter(|s| s.enabled).map(|s| s.weight)
    }
}
